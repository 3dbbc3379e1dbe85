#include "a2test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *a2_test_db(void)
{
    const char *db = getenv("A2_TEST_DB");
    return db && *db ? db : NULL;
}

PGconn *a2_test_connect(void)
{
    const char *db = a2_test_db();
    if (!db)
        fail_msg("A2_TEST_DB is not set: run integration tests with tests/run");
    PGconn *conn = PQconnectdb(db);
    if (PQstatus(conn) != CONNECTION_OK)
        fail_msg("could not connect to %s: %s", db, PQerrorMessage(conn));
    return conn;
}

void a2_test_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("query failed: %s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
}

char *a2_test_scalar(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("query failed: %s: %s", sql, PQerrorMessage(conn));
    char *out = NULL;
    if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
        out = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return out;
}

int64_t a2_test_int(PGconn *conn, const char *sql)
{
    char *s = a2_test_scalar(conn, sql);
    int64_t v = s ? strtoll(s, NULL, 10) : 0;
    free(s);
    return v;
}

int64_t a2_test_lock_waiters(PGconn *conn, const char *where, int64_t n,
                             int timeout_ms)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "select count(*) from pg_stat_activity where wait_event_type = "
             "'Lock'%s%s",
             where ? " and " : "", where ? where : "");
    int64_t seen = 0;
    for (int waited = 0;; waited += 10) {
        seen = a2_test_int(conn, sql);
        if (seen >= n || waited >= timeout_ms)
            return seen;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int64_t a2_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *a2_test_bin(const char *name)
{
    static char path[4096];
    const char *bin = getenv("A2_BIN");
    snprintf(path, sizeof path, "%s/%s", bin ? bin : "build/release/bin", name);
    return path;
}
