/*
 * Random hex text from the kernel's generator (getrandom), for ids,
 * tokens and secrets. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_RANDOM_H
#define A2_COMMON_RANDOM_H

#include <stddef.h>

/* Draws bytes random bytes and writes them to out as 2 * bytes lowercase
 * hex digits and a NUL (room for 2 * bytes + 1). 0, or -1 (errno set) when
 * the generator failed. */
int a2__random_hex(char *out, size_t bytes);

#endif
