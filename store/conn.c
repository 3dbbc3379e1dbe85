/*
 * How every a2 program connects: libpq settings put ahead of its conninfo.
 */
#include "conn.h"

#include <stdlib.h>

#define MAX_EXTRA 8

PGconn *a2__connect_with(const char *conninfo, const char *const *extra_keys,
                         const char *const *extra_vals)
{
    const char *keys[6 + MAX_EXTRA + 1], *vals[6 + MAX_EXTRA + 1];
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
    keys[n] = "dbname";
    vals[n++] = conninfo ? conninfo : "";
    for (int i = 0; extra_keys && extra_keys[i] && i < MAX_EXTRA; i++) {
        keys[n] = extra_keys[i];
        vals[n++] = extra_vals[i];
    }
    keys[n] = NULL;
    vals[n] = NULL;
    return PQconnectdbParams(keys, vals, 1);
}

PGconn *a2__connect(const char *conninfo)
{
    return a2__connect_with(conninfo, NULL, NULL);
}
