/*
 * Startup checks, normal connection and the logical replication stream.
 */
#include "repl.h"

#include "../common/clock.h"
#include "../common/lsn.h"
#include "../common/pgconn.h"
#include "apply.h"
#include "audit.h"
#include "backlog.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct a2__repl {
    PGconn *conn;
    char *buf; /* the last PQgetCopyData buffer */
    int streaming;
    int readable; /* the socket may hold data libpq has not read */
};

/* The first line of a libpq message, without the trailing newline. */
static void one_line(char *dst, size_t len, const char *prefix, const char *msg)
{
    if (!msg)
        msg = "unknown error";
    /* libpq prefixes server messages with their severity */
    if (strncmp(msg, "ERROR:  ", 8) == 0 || strncmp(msg, "FATAL:  ", 8) == 0)
        msg += 8;
    snprintf(dst, len, "%s%s", prefix, msg);
    char *nl = strchr(dst, '\n');
    if (nl)
        *nl = '\0';
}

static PGconn *connect_with(const char *conninfo, int replication,
                            const char *name, char *err, size_t errlen)
{
    /* After the conninfo, so they win over it. */
    const char *keys[] = {"options", "application_name",
                          replication ? "replication" : NULL, NULL};
    const char *vals[] = {"-c TimeZone=UTC", name, "database", NULL};
    PGconn *c = a2__connect_with(conninfo, keys, vals);
    if (!c) {
        snprintf(err, errlen,
                 "could not connect to the database: out of memory");
        return NULL;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        const char *m = PQerrorMessage(c);
        if (strstr(m, "must be superuser or replication role"))
            one_line(err, errlen,
                     "the role lacks the REPLICATION attribute: ", m);
        else
            one_line(err, errlen,
                     replication ? "could not open the replication connection: "
                                 : "could not connect to the database: ",
                     m);
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* The head of the error when the server refuses the output plugin: from
 * PostgreSQL 15.19 on, a slot may only use the plugins that the setting
 * output_plugin_libraries names. */
static void not_allowed(char *prefix, size_t size, const char *plugin)
{
    snprintf(prefix, size,
             "the server does not allow output plugin %s (add it to "
             "output_plugin_libraries and reload the server configuration): ",
             plugin);
}

PGconn *a2__db_connect(const char *conninfo, char *err, size_t errlen)
{
    return connect_with(conninfo, 0, "a2-consumer", err, errlen);
}

PGconn *a2__db_connect_as(const char *conninfo, const char *name, char *err,
                          size_t errlen)
{
    return connect_with(conninfo, 0, name, err, errlen);
}

static int query_timeout_ms;

void a2__db_set_timeout(int ms)
{
    query_timeout_ms = ms > 0 ? ms : 0;
}

/* Takes the results libpq has complete, keeping the last (the one PQexec
 * would return); *done when the query has no more. */
static PGresult *take_results(PGconn *db, PGresult *last, int *done)
{
    *done = 0;
    while (!PQisBusy(db)) {
        PGresult *r = PQgetResult(db);
        if (!r) {
            *done = 1;
            break;
        }
        PQclear(last);
        last = r;
    }
    return last;
}

/* Sends the query and waits for its last result, at most query_timeout_ms.
 * On a timeout returns NULL with *timed_out set and the connection shut
 * down, so that its next use fails and it is opened again. */
static PGresult *exec_bounded(PGconn *db, const char *sql, int nparams,
                              const char *const *params, int *timed_out)
{
    *timed_out = 0;
    if (query_timeout_ms <= 0)
        return nparams ? PQexecParams(db, sql, nparams, NULL, params, NULL,
                                      NULL, 0)
                       : PQexec(db, sql);
    int sent = nparams ? PQsendQueryParams(db, sql, nparams, NULL, params, NULL,
                                           NULL, 0)
                       : PQsendQuery(db, sql);
    if (!sent)
        return NULL;
    int64_t deadline = a2__mono_ms() + query_timeout_ms;
    PGresult *last = NULL;
    for (;;) {
        int done;
        last = take_results(db, last, &done);
        if (done)
            return last;
        int64_t left = deadline - a2__mono_ms();
        struct pollfd pfd = {PQsocket(db), POLLIN, 0};
        int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            PQclear(last);
            *timed_out = 1;
            shutdown(PQsocket(db), SHUT_RDWR);
            (void)PQconsumeInput(db);
            return NULL;
        }
        if (pr < 0 || !PQconsumeInput(db))
            /* the connection is gone: what libpq still has says why */
            return take_results(db, last, &done);
    }
}

PGresult *a2__db_query(PGconn *db, const char *sql, int nparams,
                       const char *const *params, const char *what, char *err,
                       size_t errlen)
{
    int timed_out;
    PGresult *res = exec_bounded(db, sql, nparams, params, &timed_out);
    if (timed_out) {
        snprintf(err, errlen,
                 "could not %s: no answer from the server in %.1f s "
                 "(--stream-timeout)",
                 what, (double)query_timeout_ms / 1000.0);
        return NULL;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK &&
        PQresultStatus(res) != PGRES_COMMAND_OK) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, "could not %s: ", what);
        const char *m = res ? PQresultErrorMessage(res) : "";
        one_line(err, errlen, prefix, *m ? m : PQerrorMessage(db));
        PQclear(res);
        return NULL;
    }
    return res;
}

int a2__db_check(PGconn *db, const char *slot, const char *plugin,
                 a2__slot_info *info, char *err, size_t errlen)
{
    int rc = -1;
    PGresult *res = NULL;
    memset(info, 0, sizeof *info);

    res = a2__db_query(db, "show wal_level", 0, NULL, "read wal_level", err,
                       errlen);
    if (!res)
        goto done;
    if (strcmp(PQgetvalue(res, 0, 0), "logical") != 0) {
        snprintf(
                err, errlen,
                "wal_level is \"%s\": logical decoding needs wal_level=logical",
                PQgetvalue(res, 0, 0));
        goto done;
    }
    PQclear(res);

    res = a2__db_query(
            db,
            "select current_user, rolreplication or rolsuper from pg_roles "
            "where rolname = current_user",
            0, NULL, "read the role's attributes", err, errlen);
    if (!res)
        goto done;
    if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 1), "t") != 0) {
        snprintf(err, errlen,
                 "role \"%s\" lacks the REPLICATION attribute: "
                 "logical decoding needs it",
                 PQntuples(res) ? PQgetvalue(res, 0, 0) : "?");
        goto done;
    }
    PQclear(res);

    res = a2__db_query(
            db,
            "select string_agg(t, ', ' order by t) from unnest(array["
            "'a2_events','a2_cursors','a2_lane_events','a2_clears',"
            "'a2_presence']) t where to_regclass('public.' || t) is null",
            0, NULL, "check the a2 schema", err, errlen);
    if (!res)
        goto done;
    if (!PQgetisnull(res, 0, 0)) {
        snprintf(err, errlen,
                 "the a2 schema is missing in database \"%s\" (no table %s): "
                 "apply sql/schema.sql first",
                 PQdb(db), PQgetvalue(res, 0, 0));
        goto done;
    }
    PQclear(res);

    res = a2__db_query(db,
                       "select relreplident from pg_class "
                       "where oid = 'public.a2_cursors'::regclass",
                       0, NULL, "check the replica identity of a2_cursors", err,
                       errlen);
    if (!res)
        goto done;
    if (strcmp(PQgetvalue(res, 0, 0), "f") != 0) {
        snprintf(err, errlen,
                 "table a2_cursors needs REPLICA IDENTITY FULL (the audit "
                 "needs the old rows): apply sql/schema.sql");
        goto done;
    }
    PQclear(res);

    const char *params[1] = {slot};
    res = a2__db_query(
            db,
            "select plugin, database, database = current_database(), "
            "active_pid, wal_status, confirmed_flush_lsn, slot_type "
            "from pg_replication_slots where slot_name = $1",
            1, params, "read the replication slot", err, errlen);
    if (!res)
        goto done;
    if (PQntuples(res) == 1) {
        info->exists = 1;
        if (strcmp(PQgetvalue(res, 0, 6), "logical") != 0) {
            snprintf(err, errlen, "replication slot \"%s\" is a physical slot",
                     slot);
            goto done;
        }
        if (strcmp(PQgetvalue(res, 0, 2), "t") != 0) {
            snprintf(err, errlen,
                     "replication slot \"%s\" belongs to database \"%s\"", slot,
                     PQgetvalue(res, 0, 1));
            goto done;
        }
        if (strcmp(PQgetvalue(res, 0, 0), plugin) != 0) {
            snprintf(err, errlen,
                     "replication slot \"%s\" uses output plugin \"%s\", "
                     "not %s",
                     slot, PQgetvalue(res, 0, 0), plugin);
            goto done;
        }
        if (!PQgetisnull(res, 0, 3)) {
            info->active_pid = atoi(PQgetvalue(res, 0, 3));
            snprintf(err, errlen,
                     "replication slot \"%s\" is active for PID %s: "
                     "another consumer is streaming from it",
                     slot, PQgetvalue(res, 0, 3));
            goto done;
        }
        info->lost = strcmp(PQgetvalue(res, 0, 4), "lost") == 0;
        uint64_t lsn;
        if (!PQgetisnull(res, 0, 5) &&
            a2__lsn_parse(PQgetvalue(res, 0, 5), &lsn) == 0)
            info->confirmed = lsn;
    }
    rc = 0;
done:
    PQclear(res);
    return rc;
}

/* Sends one query without waiting for it (see a2__db_result_poll). */
static int send_message(PGconn *db, const char *sql, const char *content,
                        const char *what, char *err, size_t errlen)
{
    const char *params[1] = {content};
    if (PQsetnonblocking(db, 1) != 0 ||
        !PQsendQueryParams(db, sql, content ? 1 : 0, NULL,
                           content ? params : NULL, NULL, NULL, 0) ||
        PQflush(db) < 0) {
        char prefix[96];
        snprintf(prefix, sizeof prefix, "could not %s: ", what);
        one_line(err, errlen, prefix, PQerrorMessage(db));
        return -1;
    }
    return 0;
}

int a2__db_heartbeat_send(PGconn *db, char *err, size_t errlen)
{
    return send_message(db,
                        "select pg_logical_emit_message(false, 'a2-hb', "
                        "now()::text)",
                        NULL, "send a heartbeat", err, errlen);
}

int a2__db_expire_tick_send(PGconn *db, const char *secret, int64_t now_ms,
                            char *err, size_t errlen)
{
    char content[96];
    snprintf(content, sizeof content, "%s%s %" PRId64, A2C_EXPIRE_TICK, secret,
             now_ms);
    return send_message(db,
                        "select pg_logical_emit_message(true, '" A2C_TICK_PREFIX
                        "', $1::text)",
                        content, "commit a presence expiry tick", err, errlen);
}

int a2__db_wal_position_send(PGconn *db, char *err, size_t errlen)
{
    return send_message(db, "select pg_current_wal_lsn()::text", NULL,
                        "read the server's WAL position", err, errlen);
}

int a2__db_backlog_send(PGconn *db, long max_markers, char *err, size_t errlen)
{
    char cap[24];
    snprintf(cap, sizeof cap, "%ld", max_markers);
    return send_message(db, a2__backlog_sql, cap, "read the backlog", err,
                        errlen);
}

int a2__db_result_poll(PGconn *db, const char *what, PGresult **out, char *err,
                       size_t errlen)
{
    const char *why = NULL;
    PGresult *res = NULL;
    if (PQflush(db) < 0 || !PQconsumeInput(db)) {
        why = PQerrorMessage(db);
    } else {
        while (!PQisBusy(db)) {
            res = PQgetResult(db);
            if (!res)
                return 0;
            if (PQresultStatus(res) != PGRES_TUPLES_OK) {
                why = PQresultErrorMessage(res);
                break;
            }
            PQclear(*out);
            *out = res;
            res = NULL;
        }
        if (!why)
            return 1;
    }
    char prefix[96];
    snprintf(prefix, sizeof prefix, "could not %s: ", what);
    one_line(err, errlen, prefix, why);
    PQclear(res);
    PQclear(*out);
    *out = NULL;
    return -1;
}

int a2__db_drop_slot(PGconn *db, const char *slot, char *err, size_t errlen)
{
    const char *params[1] = {slot};
    PGresult *res =
            a2__db_query(db,
                         "select pg_drop_replication_slot($1) "
                         "from pg_replication_slots where slot_name = $1",
                         1, params, "drop the replication slot", err, errlen);
    if (!res)
        return -1;
    PQclear(res);
    return 0;
}

a2__repl *a2__repl_connect(const char *conninfo, char *err, size_t errlen)
{
    PGconn *c = connect_with(conninfo, 1, "a2-consumer", err, errlen);
    if (!c)
        return NULL;
    a2__repl *r = calloc(1, sizeof *r);
    if (!r) {
        PQfinish(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->conn = c;
    r->readable = 1;
    return r;
}

static void set_state(char sqlstate[6], const PGresult *res)
{
    if (!sqlstate)
        return;
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    snprintf(sqlstate, 6, "%s", s ? s : "");
}

int a2__repl_create_slot(a2__repl *r, const char *slot, const char *plugin,
                         int *created, uint64_t *consistent, char *err,
                         size_t errlen, char sqlstate[6])
{
    *created = 0;
    *consistent = 0;
    char *ident = PQescapeIdentifier(r->conn, slot, strlen(slot));
    char *pident = PQescapeIdentifier(r->conn, plugin, strlen(plugin));
    char sql[1024];
    snprintf(sql, sizeof sql,
             "CREATE_REPLICATION_SLOT %s LOGICAL %s (SNAPSHOT 'nothing')",
             ident ? ident : "\"\"", pident ? pident : "\"\"");
    PQfreemem(ident);
    PQfreemem(pident);
    PGresult *res = PQexec(r->conn, sql);
    set_state(sqlstate, res);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (st && strcmp(st, "42710") == 0) { /* exists */
            PQclear(res);
            return 0;
        }
        char prefix[256];
        if (st && strcmp(st, "58P01") == 0)
            snprintf(prefix, sizeof prefix,
                     "output plugin %s is not installed: ", plugin);
        else if (st && strcmp(st, "42501") == 0)
            not_allowed(prefix, sizeof prefix, plugin);
        else
            snprintf(prefix, sizeof prefix,
                     "could not create replication slot \"%s\": ", slot);
        one_line(err, errlen, prefix, PQerrorMessage(r->conn));
        PQclear(res);
        return -1;
    }
    uint64_t lsn;
    if (PQntuples(res) == 1 && a2__lsn_parse(PQgetvalue(res, 0, 1), &lsn) == 0)
        *consistent = lsn;
    *created = 1;
    PQclear(res);
    return 0;
}

int a2__repl_start(a2__repl *r, const char *slot, const char *plugin,
                   uint64_t lsn, char *err, size_t errlen, char sqlstate[6])
{
    char *ident = PQescapeIdentifier(r->conn, slot, strlen(slot));
    char sql[1024];
    snprintf(sql, sizeof sql,
             "START_REPLICATION SLOT %s LOGICAL %X/%X ("
             "\"format-version\" '2', \"include-xids\" '1', "
             "\"include-timestamp\" '1', \"include-lsn\" '1', "
             "\"include-types\" '0', \"add-msg-prefixes\" 'a2-hb', "
             "\"add-tables\" '" A2C_ADD_TABLES "')",
             ident ? ident : "\"\"", A2__LSN_ARGS(lsn));
    PQfreemem(ident);
    PGresult *res = PQexec(r->conn, sql);
    set_state(sqlstate, res);
    if (PQresultStatus(res) != PGRES_COPY_BOTH) {
        char prefix[256];
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        if (st && strcmp(st, "58P01") == 0)
            snprintf(prefix, sizeof prefix,
                     "the output plugin of slot \"%s\" is not installed: ",
                     slot);
        else if (st && strcmp(st, "42501") == 0)
            not_allowed(prefix, sizeof prefix, plugin);
        else
            snprintf(prefix, sizeof prefix,
                     "could not start replication from slot \"%s\": ", slot);
        one_line(err, errlen, prefix, PQerrorMessage(r->conn));
        PQclear(res);
        return -1;
    }
    PQclear(res);
    r->streaming = 1;
    return 0;
}

int a2__repl_socket(const a2__repl *r)
{
    return PQsocket(r->conn);
}

int a2__repl_backend_pid(const a2__repl *r)
{
    return PQbackendPID(r->conn);
}

static uint64_t be64(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | (unsigned char)p[i];
    return v;
}

static void put64(char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

void a2__repl_readable(a2__repl *r)
{
    if (r)
        r->readable = 1;
}

int a2__repl_read(a2__repl *r, a2__msg *m, char *err, size_t errlen)
{
    if (r->buf) {
        PQfreemem(r->buf);
        r->buf = NULL;
    }
    for (int pass = 0; pass < 2; pass++) {
        char *buf = NULL;
        int n = PQgetCopyData(r->conn, &buf, 1);
        if (n == 0) {
            if (!r->readable)
                return 0; /* libpq's buffer is empty: poll first */
            r->readable = 0;
            if (pass == 0 && PQconsumeInput(r->conn) == 0) {
                one_line(err, errlen, "replication connection lost: ",
                         PQerrorMessage(r->conn));
                return -1;
            }
            if (pass == 0)
                continue;
            return 0;
        }
        if (n == -1) {
            PGresult *res = PQgetResult(r->conn);
            if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
                PQclear(res);
                res = PQgetResult(r->conn);
            }
            if (res && PQresultStatus(res) != PGRES_COMMAND_OK)
                one_line(err, errlen, "replication stream ended: ",
                         PQresultErrorMessage(res));
            else
                snprintf(err, errlen, "replication stream ended by the server");
            PQclear(res);
            r->streaming = 0;
            return -1;
        }
        if (n < 0) {
            one_line(err, errlen, "could not read the replication stream: ",
                     PQerrorMessage(r->conn));
            r->streaming = 0;
            return -1;
        }
        r->buf = buf;
        memset(m, 0, sizeof *m);
        m->type = buf[0];
        if (buf[0] == 'w' && n >= 25) {
            m->data_start = be64(buf + 1);
            m->wal_end = be64(buf + 9);
            m->send_time_us = (int64_t)be64(buf + 17) + A2C_PG_EPOCH_US;
            m->data = buf + 25;
            m->len = (size_t)n - 25;
            return 1;
        }
        if (buf[0] == 'k' && n >= 18) {
            m->wal_end = be64(buf + 1);
            m->send_time_us = (int64_t)be64(buf + 9) + A2C_PG_EPOCH_US;
            m->reply_requested = buf[17] != 0;
            return 1;
        }
        snprintf(err, errlen,
                 "unexpected replication message type \"%c\" of %d bytes",
                 buf[0], n);
        return -1;
    }
    return 0;
}

int a2__repl_feedback(a2__repl *r, uint64_t write_lsn, uint64_t flush_lsn,
                      int reply_requested, char *err, size_t errlen)
{
    char msg[34];
    msg[0] = 'r';
    put64(msg + 1, write_lsn);
    put64(msg + 9, flush_lsn);
    put64(msg + 17, flush_lsn);
    put64(msg + 25, (uint64_t)(a2__real_us() - A2C_PG_EPOCH_US));
    msg[33] = reply_requested ? 1 : 0;
    if (PQputCopyData(r->conn, msg, sizeof msg) <= 0 || PQflush(r->conn) < 0) {
        one_line(err, errlen,
                 "could not send feedback: ", PQerrorMessage(r->conn));
        return -1;
    }
    return 0;
}

void a2__repl_stop(a2__repl *r, uint64_t write_lsn, uint64_t flush_lsn)
{
    if (!r || !r->streaming)
        return;
    char err[256];
    (void)a2__repl_feedback(r, write_lsn, flush_lsn, 0, err, sizeof err);
    if (PQputCopyEnd(r->conn, NULL) <= 0 || PQflush(r->conn) != 0)
        return;
    if (r->buf) {
        PQfreemem(r->buf);
        r->buf = NULL;
    }
    /* Discard the rest until the server ends its side (bounded). */
    for (int i = 0; i < 1000000; i++) {
        char *buf = NULL;
        int n = PQgetCopyData(r->conn, &buf, 0);
        if (buf)
            PQfreemem(buf);
        if (n < 0)
            break;
    }
    PGresult *res;
    while ((res = PQgetResult(r->conn)) != NULL)
        PQclear(res);
    r->streaming = 0;
}

void a2__repl_close(a2__repl *r)
{
    if (!r)
        return;
    if (r->buf)
        PQfreemem(r->buf);
    PQfinish(r->conn);
    free(r);
}
