/*
 * Whole numbers in options, environment variables and arguments: decimal,
 * the whole text, within bounds. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_NUM_H
#define A2_COMMON_NUM_H

#include <stdint.h>

/* Parses s (NULL or empty: not a number) as a decimal int64 within
 * [min, max] into *out; 0, or -1 (*out untouched) when it is not one. */
int a2__num_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

#endif
