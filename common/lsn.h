/*
 * LSNs in log lines, audit lines and commands, as PostgreSQL writes them:
 * printf's "%X/%X" with A2__LSN_ARGS(lsn), read back by a2__lsn_parse.
 * Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_LSN_H
#define A2_COMMON_LSN_H

#include <stdint.h>

/* The two halves of a uint64_t LSN for "%X/%X". */
#define A2__LSN_ARGS(lsn) (unsigned)((lsn) >> 32), (unsigned)(lsn)

/* Parses "X/Y" (the whole string) into *lsn; returns 0, or -1 when s is
 * NULL or not an LSN. */
int a2__lsn_parse(const char *s, uint64_t *lsn);

#endif
