/*
 * How every a2 program connects: libpq settings put ahead of its conninfo.
 * Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_PGCONN_H
#define A2_COMMON_PGCONN_H

#include <libpq-fe.h>
#include <stdint.h>

/*
 * PQconnectdbParams of the defaults, then conninfo (NULL or "": the PG*
 * variables), then the NULL-terminated extra keys and values (NULL: none),
 * later settings winning (expand_dbname). Like PQconnectdb: check PQstatus.
 * The defaults:
 * - connect_timeout=10, unless PGCONNECT_TIMEOUT is set: a host that never
 *   answers fails the connect instead of holding it for the kernel's
 *   minutes of retries;
 * - TCP keepalives after 30 s idle, every 10 s, 3 probes, and
 *   tcp_user_timeout=60000: a server that vanished without closing the
 *   connection (power loss, a partition) fails a waiting call within about
 *   a minute instead of the kernel's hours. Unix sockets ignore both.
 */
PGconn *a2__connect_with(const char *conninfo, const char *const *extra_keys,
                         const char *const *extra_vals);

/* a2__connect_with and no extra settings. */
PGconn *a2__connect(const char *conninfo);

/*
 * a2__connect, given up at deadline (a2__mono_ms of common/clock.h; -1:
 * none, then as a2__connect): connects with PQconnectStartParams and
 * PQconnectPoll, which ignore connect_timeout. Like PQconnectdb: check
 * PQstatus; *timed_out is 1 when the deadline passed first (the connection is
 * then not finished).
 */
PGconn *a2__connect_until(const char *conninfo, int64_t deadline,
                          int *timed_out);

/* Waits for conn's socket to be ready for events until deadline (-1: none),
 * retrying after signals: 1 ready, 0 the deadline passed, -1 no socket or
 * poll failed. */
int a2__wait_socket(PGconn *conn, short events, int64_t deadline);

#endif
