/*
 * Applying and checking a2's schema.
 */
#include "a2/schema.h"

#include "../common/pgconn.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* libpq's messages end with a newline; a one-line reason does not. */
static void set_pq_err(char *err, size_t errlen, const char *what, PGconn *conn)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    set_err(err, errlen, "%s: %s", what, msg);
}

static PGconn *open_conn(const char *conninfo, char *err, size_t errlen)
{
    PGconn *conn = a2__connect(conninfo);
    if (!conn) {
        set_err(err, errlen, "could not connect: out of memory");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        set_pq_err(err, errlen, "could not connect to the database", conn);
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

int a2_schema_apply(const char *conninfo, char *err, size_t errlen)
{
    set_err(err, errlen, "%s", "");
    PGconn *conn = open_conn(conninfo, err, errlen);
    if (!conn)
        return -1;
    /* The file holds several statements: the simple query protocol runs
     * them as one implicit transaction. */
    PGresult *res = PQexec(conn, a2_schema_sql);
    int rc = 0;
    if (PQresultStatus(res) != PGRES_COMMAND_OK &&
        PQresultStatus(res) != PGRES_TUPLES_OK) {
        set_pq_err(err, errlen, "could not apply the schema", conn);
        rc = -1;
    }
    PQclear(res);
    PQfinish(conn);
    return rc;
}

/* One row per problem, in a stable order. */
static const char CHECK_SQL[] =
        "select problem from ("
        " select 1 as ord, 'table ' || t || ' is missing' as problem"
        "   from "
        "unnest(array['a2_meta','a2_events','a2_cursors','a2_lane_events',"
        "                     'a2_clears','a2_snapshots','a2_snapshot_history',"
        "                     'a2_snapshot_pins','a2_presence']) as t"
        "  where to_regclass(t) is null"
        " union all"
        " select 2, 'index a2_events_types is missing'"
        "  where to_regclass('a2_events') is not null"
        "    and to_regclass('a2_events_types') is null"
        " union all"
        " select 3, 'function ' || f || ' is missing'"
        "   from unnest(array['a2_append','a2_read','a2_cursors',"
        "                     'a2_dead_letters','a2_wake_log','a2_claim',"
        "                     'a2_renew','a2_complete','a2_fail','a2_redrive',"
        "                     'a2_clear','a2_reclaim','a2_pending_sessions',"
        "                     'a2_read_state','a2_write_state',"
        "                     'a2_presence_write','a2_presence_read',"
        "                     'a2_presence_reap','a2_batch','a2_warm']) as f"
        "  where not exists (select 1 from pg_proc p"
        "                     where p.proname = f"
        "                       and pg_function_is_visible(p.oid))"
        " union all"
        " select 4, 'a2_cursors needs REPLICA IDENTITY FULL (it is '"
        "        || case relreplident when 'd' then 'DEFAULT' when 'n' then "
        "'NOTHING'"
        "           when 'i' then 'USING INDEX' else relreplident::text end || "
        "')'"
        "   from pg_class where oid = to_regclass('a2_cursors')"
        "    and relreplident <> 'f'"
        " union all"
        " select 5, 'wal_level is ' || current_setting('wal_level')"
        "        || ', a2-consumer needs wal_level = logical'"
        "  where current_setting('wal_level') <> 'logical'"
        " union all"
        " select 6, 'schema version is missing (apply sql/schema.sql)'"
        "  where to_regclass('a2_meta') is not null and not exists ("
        "    select 1 from a2_meta where key = 'schema_version')"
        ") p order by ord";

static const char VERSION_SQL[] =
        "select value from a2_meta where key = 'schema_version'";

static void append_line(char *report, size_t len, size_t *used, const char *s)
{
    if (!report || len == 0 || *used >= len - 1)
        return;
    int n = snprintf(report + *used, len - *used, "%s%s", *used ? "\n" : "", s);
    if (n < 0)
        return;
    *used += (size_t)n;
    if (*used >= len)
        *used = len - 1;
}

int a2_schema_check(const char *conninfo, char *report, size_t reportlen)
{
    set_err(report, reportlen, "%s", "");
    PGconn *conn = open_conn(conninfo, report, reportlen);
    if (!conn)
        return -1;
    int rc = -1;
    size_t used = 0;
    PGresult *res = PQexec(conn, CHECK_SQL);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        set_pq_err(report, reportlen, "could not check the schema", conn);
        goto done;
    }
    rc = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        append_line(report, reportlen, &used, PQgetvalue(res, i, 0));
        rc = 1;
    }
    PQclear(res);
    res = NULL;
    /* The version row, only when the table is there to read. */
    res = PQexec(conn, "select to_regclass('a2_meta') is not null");
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
        PQgetvalue(res, 0, 0)[0] == 't') {
        PQclear(res);
        res = PQexec(conn, VERSION_SQL);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
            strcmp(PQgetvalue(res, 0, 0), A2_SCHEMA_VERSION) != 0) {
            char line[256];
            snprintf(line, sizeof line,
                     "schema version is %s, this build expects %s",
                     PQgetvalue(res, 0, 0), A2_SCHEMA_VERSION);
            append_line(report, reportlen, &used, line);
            rc = 1;
        }
    }
done:
    PQclear(res);
    PQfinish(conn);
    return rc;
}
