/*
 * The libpq settings every a2 program puts ahead of its conninfo. Not
 * installed.
 */
#ifndef A2_STORE_CONN_H
#define A2_STORE_CONN_H

#include <libpq-fe.h>

/* Most entries a2__conn_defaults writes. */
#define A2__CONN_DEFAULTS 5

/*
 * Writes the defaults into keys/vals (room for A2__CONN_DEFAULTS) and
 * returns how many it wrote. Put them before the conninfo, whose settings
 * then win (PQconnectdbParams with expand_dbname):
 * - connect_timeout=10, unless PGCONNECT_TIMEOUT is set: a host that never
 *   answers fails the connect instead of holding it for the kernel's
 *   minutes of retries;
 * - TCP keepalives after 30 s idle, every 10 s, 3 probes, and
 *   tcp_user_timeout=60000: a server that vanished without closing the
 *   connection (power loss, a partition) fails a waiting call within about
 *   a minute instead of the kernel's hours. Unix sockets ignore both.
 */
int a2__conn_defaults(const char **keys, const char **vals);

/* PQconnectdbParams of the defaults and conninfo (NULL or "": the PG*
 * variables). Like PQconnectdb: check PQstatus. */
PGconn *a2__connect(const char *conninfo);

#endif
