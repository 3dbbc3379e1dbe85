/*
 * LSNs in log lines and commands, as PostgreSQL writes them: printf's
 * "%X/%X" with A2__LSN_ARGS(lsn). Internal (not installed).
 */
#ifndef A2_COMMON_LSN_H
#define A2_COMMON_LSN_H

/* The two halves of a uint64_t LSN for "%X/%X". */
#define A2__LSN_ARGS(lsn) (unsigned)((lsn) >> 32), (unsigned)(lsn)

#endif
