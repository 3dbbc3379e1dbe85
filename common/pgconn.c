/*
 * How every a2 program connects: libpq settings put ahead of its conninfo.
 */
#include "pgconn.h"

#include "clock.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>

#define MAX_EXTRA  8
#define MAX_PARAMS (6 + MAX_EXTRA + 1)

/* The defaults, conninfo, then the extra settings, NULL-terminated. */
static void params(const char *conninfo, const char *const *extra_keys,
                   const char *const *extra_vals, const char **keys,
                   const char **vals)
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
    keys[n] = "dbname";
    vals[n++] = conninfo ? conninfo : "";
    for (int i = 0; extra_keys && extra_keys[i] && i < MAX_EXTRA; i++) {
        keys[n] = extra_keys[i];
        vals[n++] = extra_vals[i];
    }
    keys[n] = NULL;
    vals[n] = NULL;
}

PGconn *a2__connect_with(const char *conninfo, const char *const *extra_keys,
                         const char *const *extra_vals)
{
    const char *keys[MAX_PARAMS], *vals[MAX_PARAMS];
    params(conninfo, extra_keys, extra_vals, keys, vals);
    return PQconnectdbParams(keys, vals, 1);
}

PGconn *a2__connect(const char *conninfo)
{
    return a2__connect_with(conninfo, NULL, NULL);
}

int a2__wait_socket(PGconn *conn, short events, int64_t deadline)
{
    struct pollfd p = {.fd = PQsocket(conn), .events = events};
    if (p.fd < 0)
        return -1;
    for (;;) {
        int ms = -1;
        if (deadline >= 0) {
            int64_t left = deadline - a2__mono_ms();
            if (left <= 0)
                return 0;
            ms = left > INT_MAX ? INT_MAX : (int)left;
        }
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

PGconn *a2__connect_until(const char *conninfo, int64_t deadline,
                          int *timed_out)
{
    *timed_out = 0;
    if (deadline < 0)
        return a2__connect(conninfo);
    const char *keys[MAX_PARAMS], *vals[MAX_PARAMS];
    params(conninfo, NULL, NULL, keys, vals);
    PGconn *conn = PQconnectStartParams(keys, vals, 1);
    if (!conn || PQstatus(conn) == CONNECTION_BAD)
        return conn;
    /* libpq's loop: wait for what PQconnectPoll asks for, then call it. */
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        int w = a2__wait_socket(
                conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (w == 0) {
            *timed_out = 1;
            break;
        }
        st = PQconnectPoll(conn);
    }
    return conn;
}
