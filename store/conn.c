/*
 * The libpq settings every a2 program puts ahead of its conninfo.
 */
#include "conn.h"

#include <stdlib.h>

int a2__conn_defaults(const char **keys, const char **vals)
{
    int n = 0;
    if (!getenv("PGCONNECT_TIMEOUT")) {
        keys[n] = "connect_timeout";
        vals[n++] = "10";
    }
    keys[n] = "keepalives_idle";
    vals[n++] = "30";
    keys[n] = "keepalives_interval";
    vals[n++] = "10";
    keys[n] = "keepalives_count";
    vals[n++] = "3";
    keys[n] = "tcp_user_timeout";
    vals[n++] = "60000";
    return n;
}

PGconn *a2__connect(const char *conninfo)
{
    const char *keys[A2__CONN_DEFAULTS + 2], *vals[A2__CONN_DEFAULTS + 2];
    int n = a2__conn_defaults(keys, vals);
    keys[n] = "dbname";
    vals[n++] = conninfo ? conninfo : "";
    keys[n] = NULL;
    vals[n] = NULL;
    return PQconnectdbParams(keys, vals, 1);
}
