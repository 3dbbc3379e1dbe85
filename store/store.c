/*
 * liba2store core: the connection, errors, the clock and ids, and the call
 * of a store function.
 */
#include "store_int.h"

#include "../common/clock.h"
#include "../common/num.h"
#include "../common/pgconn.h"
#include "../common/random.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MAX_MS 86400000
#define TIMEOUT_ENV    "A2_STORE_TIMEOUT_MS"
/* The store timeout, for the call's transaction only. */
#define TIMEOUT_SQL "select set_config('statement_timeout', $1, true)"

/* ── errors ──────────────────────────────────────────────────────────── */

const char *a2_store_code_name(int code)
{
    switch (code) {
    case A2_STORE_OK:
        return "OK";
    case A2_EINVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
    case A2_ESTORE_UNAVAILABLE:
        return "STORE_UNAVAILABLE";
    case A2_ESCHEMA_MISSING:
        return "SCHEMA_MISSING";
    case A2_EPARTIAL_DUPLICATE_BATCH:
        return "PARTIAL_DUPLICATE_BATCH";
    case A2_ESUPERSEDED_ATTEMPT:
        return "SUPERSEDED_ATTEMPT";
    case A2_ESESSION_CLEARED:
        return "SESSION_CLEARED";
    case A2_ENO_SUCH_EVENT:
        return "NO_SUCH_EVENT";
    case A2_ESTORE_FAILED:
        return "STORE_FAILED";
    case A2_ESTORE_NOMEM:
        return "OUT_OF_MEMORY";
    default:
        return "UNKNOWN";
    }
}

static void set_error(a2_store_error *e, int code, const char *sqlstate,
                      const char *fmt, va_list ap)
{
    e->code = code;
    snprintf(e->sqlstate, sizeof e->sqlstate, "%s", sqlstate ? sqlstate : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    /* One line: libpq messages end with a newline and may hold several. */
    for (char *p = e->message; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = (p[1] == '\0') ? '\0' : ' ';
}

int a2__store_fail(a2_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(&s->err, code, NULL, fmt, ap);
    va_end(ap);
    return code;
}

static int fail_state(a2_store *s, int code, const char *sqlstate,
                      const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int fail_state(a2_store *s, int code, const char *sqlstate,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(&s->err, code, sqlstate, fmt, ap);
    va_end(ap);
    return code;
}

int a2__store_nomem(a2_store *s)
{
    return a2__store_fail(s, A2_ESTORE_NOMEM, "out of memory");
}

int a2__store_ok(a2_store *s)
{
    s->err.code = 0;
    s->err.sqlstate[0] = '\0';
    s->err.message[0] = '\0';
    return 0;
}

const a2_store_error *a2_store_last_error(const a2_store *store)
{
    return store ? &store->err : NULL;
}

/* ── clock and ids ───────────────────────────────────────────────────── */

static int64_t system_clock(void *ctx)
{
    (void)ctx;
    return a2__real_ms();
}

static int random_id(void *ctx, char *buf, size_t len)
{
    (void)ctx;
    if (len < 2 * 16 + 1)
        return -1;
    return a2__random_hex(buf, 16);
}

void a2_store_set_clock(a2_store *store, a2_store_clock_fn fn, void *ctx)
{
    if (!store)
        return;
    store->clock = fn ? fn : system_clock;
    store->clock_ctx = fn ? ctx : NULL;
}

void a2_store_set_ids(a2_store *store, a2_store_id_fn fn, void *ctx)
{
    if (!store)
        return;
    store->ids = fn ? fn : random_id;
    store->ids_ctx = fn ? ctx : NULL;
}

int64_t a2__store_now(a2_store *s)
{
    return s->clock(s->clock_ctx);
}

int a2__store_new_id(a2_store *s, char *buf, size_t len)
{
    buf[0] = '\0';
    if (s->ids(s->ids_ctx, buf, len) != 0 || buf[0] == '\0' ||
        memchr(buf, '\0', len) == NULL)
        return a2__store_fail(s, A2_ESTORE_FAILED,
                              "could not generate an event id");
    return 0;
}

uint64_t a2_store_round_trips(const a2_store *store)
{
    return store ? store->round_trips : 0;
}

/* ── open / close ────────────────────────────────────────────────────── */

/* How long the client waits for an answer (0: no bound): the server
 * cancels the statement at the store's timeout (statement_timeout); the
 * commit and the network come after it, so the client waits half as long
 * again, at least a second more. */
static int client_wait_ms(const a2_store *s)
{
    if (s->timeout_ms <= 0)
        return 0;
    int grace = s->timeout_ms / 2 < 1000 ? 1000 : s->timeout_ms / 2;
    return s->timeout_ms + grace;
}

/* The a2__mono_ms deadline wait_ms from now (-1: none when 0). */
static int64_t deadline_in(int wait_ms)
{
    return wait_ms ? a2__mono_ms() + wait_ms : -1;
}

static void drop_connection(a2_store *s)
{
    PQfinish(s->conn);
    s->conn = NULL;
}

static int connect_store(a2_store *s)
{
    drop_connection(s);
    int wait = client_wait_ms(s);
    int late;
    s->conn = a2__connect_until(s->conninfo, deadline_in(wait), &late);
    if (!s->conn)
        return a2__store_nomem(s);
    if (late) {
        drop_connection(s);
        return a2__store_fail(s, A2_ESTORE_UNAVAILABLE,
                              "could not connect to the database: no answer "
                              "within %d ms",
                              wait);
    }
    if (PQstatus(s->conn) != CONNECTION_OK || PQsetnonblocking(s->conn, 1)) {
        int rc = a2__store_fail(s, A2_ESTORE_UNAVAILABLE,
                                "could not connect to the database: %s",
                                PQerrorMessage(s->conn));
        drop_connection(s);
        return rc;
    }
    return 0;
}

/* A2_STORE_TIMEOUT_MS, when set and not empty: the store's timeout. */
static int timeout_from_env(a2_store *s)
{
    const char *v = getenv(TIMEOUT_ENV);
    if (!v || !*v)
        return 0;
    int64_t ms;
    if (a2__num_parse_i64(v, 0, TIMEOUT_MAX_MS, &ms) != 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              TIMEOUT_ENV " must be a whole number of "
                                          "milliseconds from 0 to %d, not "
                                          "\"%.64s\"",
                              TIMEOUT_MAX_MS, v);
    s->timeout_ms = (int)ms;
    return 0;
}

int a2_store_set_timeout(a2_store *store, int timeout_ms)
{
    if (!store)
        return A2_EINVALID_ARGUMENT;
    if (timeout_ms < 0 || timeout_ms > TIMEOUT_MAX_MS)
        return a2__store_fail(store, A2_EINVALID_ARGUMENT,
                              "the timeout must be from 0 to %d ms, not %d",
                              TIMEOUT_MAX_MS, timeout_ms);
    store->timeout_ms = timeout_ms;
    return a2__store_ok(store);
}

int a2_store_open(a2_store **out, const char *conninfo, a2_store_error *err)
{
    if (out)
        *out = NULL;
    a2_store *s = NULL;
    int rc;
    if (!out) {
        rc = A2_EINVALID_ARGUMENT;
        if (err) {
            err->code = rc;
            err->sqlstate[0] = '\0';
            snprintf(err->message, sizeof err->message, "out must not be NULL");
        }
        return rc;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->conninfo = strdup(conninfo ? conninfo : "");
    if (!s->conninfo)
        goto nomem;
    a2_store_set_clock(s, NULL, NULL);
    a2_store_set_ids(s, NULL, NULL);
    rc = timeout_from_env(s);
    if (rc == 0)
        rc = connect_store(s);
    if (rc != 0) {
        if (err)
            *err = s->err;
        a2_store_close(s);
        return rc;
    }
    *out = s;
    return 0;
nomem:
    a2_store_close(s);
    if (err) {
        err->code = A2_ESTORE_NOMEM;
        err->sqlstate[0] = '\0';
        snprintf(err->message, sizeof err->message, "out of memory");
    }
    return A2_ESTORE_NOMEM;
}

void a2_store_close(a2_store *store)
{
    if (!store)
        return;
    if (store->conn)
        PQfinish(store->conn);
    free(store->conninfo);
    free(store);
}

/* ── one round trip ──────────────────────────────────────────────────── */

static bool connection_lost(a2_store *s, const char *sqlstate)
{
    if (!s->conn || PQstatus(s->conn) != CONNECTION_OK)
        return true;
    if (!sqlstate)
        return false;
    /* connection exceptions, admin shutdown, crash shutdown, cannot
     * connect now, too many connections */
    return strncmp(sqlstate, "08", 2) == 0 || strcmp(sqlstate, "57P01") == 0 ||
           strcmp(sqlstate, "57P02") == 0 || strcmp(sqlstate, "57P03") == 0 ||
           strcmp(sqlstate, "53300") == 0;
}

/* The a2_store_code of an A2xxx SQLSTATE the store functions raise: A200N
 * is code -N (sql/src/10-common.sql). */
static int a2_state_code(const char *sqlstate)
{
    if (!sqlstate || strncmp(sqlstate, "A200", 4) != 0 || sqlstate[4] < '1' ||
        sqlstate[4] > '8')
        return 0;
    return -(sqlstate[4] - '0');
}

/* Maps a failed result to a code and the store's error. */
static int result_error(a2_store *s, PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg =
            res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!msg)
        msg = s->conn ? PQerrorMessage(s->conn) : "no connection";
    int code = a2_state_code(state);
    if (code) {
        /* "NAME: text": the code's name is the code's, the text the
         * message. */
        const char *name = a2_store_code_name(code);
        size_t n = strlen(name);
        if (strncmp(msg, name, n) == 0 && strncmp(msg + n, ": ", 2) == 0)
            msg += n + 2;
        return fail_state(s, code, state, "%s", msg);
    }
    if (connection_lost(s, state))
        return fail_state(s, A2_ESTORE_UNAVAILABLE, state,
                          "lost the connection to the database: %s", msg);
    if (state && (strcmp(state, "42P01") == 0 || strcmp(state, "42883") == 0 ||
                  strcmp(state, "42703") == 0))
        return fail_state(s, A2_ESCHEMA_MISSING, state,
                          "the a2 schema is missing or out of date (%s): "
                          "apply sql/schema.sql",
                          msg);
    return fail_state(s, A2_ESTORE_FAILED, state, "store operation failed: %s",
                      msg);
}

/*
 * Waits for the answers to the pipeline just sent (sent: whether every
 * PQsend* call and the sync succeeded) and puts the call's result in *res:
 * the first error, else the last result before the sync. 0, with *res to
 * check. Otherwise a code with the store's error set: the pipeline could
 * not be sent, or (with a timeout) no answer came in time, and the
 * connection is dropped (the next call opens a new one), since whether the
 * call took effect is unknown.
 */
static int await_answer(a2_store *s, int sent, PGresult **res)
{
    PGconn *c = s->conn;
    *res = NULL;
    if (!sent)
        return result_error(s, NULL);
    int wait = client_wait_ms(s);
    int64_t deadline = deadline_in(wait);
    int late = 0;
    for (int f; !late && (f = PQflush(c)) > 0;) {
        /* Read while writing: the server may answer before it reads all. */
        int w = a2__wait_socket(c, POLLOUT | POLLIN, deadline);
        late = w == 0;
        if (w < 0 || (w > 0 && !PQconsumeInput(c)))
            break; /* a broken connection: PQgetResult says so */
    }
    PGresult *keep = NULL;
    bool synced = false, broken = false;
    while (!late && !synced && !broken) {
        while (PQisBusy(c)) {
            int w = a2__wait_socket(c, POLLIN, deadline);
            late = w == 0;
            if (w <= 0 || !PQconsumeInput(c)) {
                broken = !late;
                break;
            }
        }
        if (late || broken)
            break;
        PGresult *r = PQgetResult(c);
        if (!r) {
            /* The end of one query's results; a broken connection ends
             * them all. */
            broken = PQstatus(c) != CONNECTION_OK;
            continue;
        }
        ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC || st == PGRES_PIPELINE_ABORTED) {
            synced = st == PGRES_PIPELINE_SYNC;
            PQclear(r);
        } else if (!keep) {
            keep = r;
        } else if (PQresultStatus(keep) == PGRES_FATAL_ERROR ||
                   (st == PGRES_COMMAND_OK &&
                    PQresultStatus(keep) == PGRES_TUPLES_OK)) {
            /* The first error, or the rows before a closing command. */
            PQclear(r);
        } else {
            PQclear(keep);
            keep = r;
        }
    }
    if (late) {
        PQclear(keep);
        drop_connection(s);
        return a2__store_fail(s, A2_ESTORE_UNAVAILABLE,
                              "no answer from the database within %d ms: "
                              "dropped the connection (whether the call "
                              "took effect is unknown)",
                              wait);
    }
    if (!synced || !PQexitPipelineMode(c)) {
        int rc = result_error(s, keep && PQresultStatus(keep) ==
                                                  PGRES_FATAL_ERROR
                                         ? keep
                                         : NULL);
        PQclear(keep);
        if (PQstatus(c) != CONNECTION_OK)
            drop_connection(s);
        return rc;
    }
    if (!keep)
        return result_error(s, NULL);
    *res = keep;
    return 0;
}

static int ensure_connected(a2_store *s)
{
    if (s->conn && PQstatus(s->conn) == CONNECTION_OK)
        return 0;
    /* One reconnection attempt: a store outlives a server restart. */
    return connect_store(s);
}

/* A row of res as a JSON object: each column by name, its text as a
 * string, NULL as null. NULL when out of memory. */
static json_t *row_object(const PGresult *res, int row)
{
    json_t *o = json_object();
    for (int c = 0; o && c < PQnfields(res); c++) {
        json_t *v = PQgetisnull(res, row, c)
                            ? json_null()
                            : json_stringn(PQgetvalue(res, row, c),
                                           (size_t)PQgetlength(res, row, c));
        if (!v || json_object_set_new(o, PQfname(res, c), v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/*
 * One round trip: sql with its parameters (after statement_timeout, when
 * the store has a timeout), between the statements before and after when
 * they are not NULL, then a sync; *res gets sql's result (or the first
 * error), *out its decoding as a2__store_call describes.
 */
static int exchange(a2_store *s, const char *before, const char *sql,
                    int nparams, const Oid *types, const char *const *values,
                    const char *after, bool rows, json_t **out)
{
    *out = NULL;
    PGresult *res = NULL;
    int rc = ensure_connected(s);
    if (rc != 0)
        return rc;
    PGconn *c = s->conn;
    int sent = PQenterPipelineMode(c);
    if (sent && before)
        sent = PQsendQueryParams(c, before, 0, NULL, NULL, NULL, NULL, 0);
    if (sent && s->timeout_ms > 0) {
        char ms[16];
        snprintf(ms, sizeof ms, "%d", s->timeout_ms);
        const char *v[1] = {ms};
        sent = PQsendQueryParams(c, TIMEOUT_SQL, 1, NULL, v, NULL, NULL, 0);
    }
    sent = sent &&
           PQsendQueryParams(c, sql, nparams, types, values, NULL, NULL, 0);
    if (sent && after)
        sent = PQsendQueryParams(c, after, 0, NULL, NULL, NULL, NULL, 0);
    sent = sent && PQpipelineSync(c);
    rc = await_answer(s, sent, &res);
    s->round_trips++;
    if (rc != 0)
        goto done;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        rc = result_error(s, res);
        goto done;
    }
    if (rows) {
        *out = json_array();
        for (int i = 0; *out && i < PQntuples(res); i++)
            if (json_array_append_new(*out, row_object(res, i)) != 0) {
                json_decref(*out);
                *out = NULL;
            }
        if (!*out)
            rc = a2__store_nomem(s);
    } else if (PQntuples(res) != 1 || PQnfields(res) != 1) {
        rc = a2__store_fail(s, A2_ESTORE_FAILED,
                            "a store function returned %d rows of %d "
                            "columns",
                            PQntuples(res), PQnfields(res));
    } else if (PQgetisnull(res, 0, 0)) {
        *out = json_null();
    } else {
        json_error_t jerr;
        *out = json_loads(PQgetvalue(res, 0, 0), JSON_DECODE_ANY, &jerr);
        if (!*out)
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "could not decode a result: %s", jerr.text);
    }
    if (rc == 0)
        rc = a2__store_ok(s);
done:
    PQclear(res);
    return rc;
}

int a2__store_call(a2_store *s, const char *sql, int nparams,
                   const Oid *types, const char *const *values, bool rows,
                   json_t **out)
{
    return exchange(s, NULL, sql, nparams, types, values, NULL, rows, out);
}

/* ── warming a connection ────────────────────────────────────────────── */

#define SQL_WARM "select a2_warm()"

/* a2_warm in a transaction block rolled back: nothing commits, so the call
 * waits for no flush and no synchronous standby. One round trip; when
 * a2_warm fails the block is left aborted, and one more ends it. */
int a2_store_warm(a2_store *s)
{
    if (!s)
        return A2_EINVALID_ARGUMENT;
    json_t *res = NULL;
    int rc = exchange(s, "begin", SQL_WARM, 0, NULL, NULL, "rollback", false,
                      &res);
    if (rc == 0 && !a2__row_bool(res, "warmed")) {
        const char *why = a2__row_text(res, "reason");
        rc = a2__store_fail(s, A2_ESTORE_FAILED, "a2_warm: %s",
                            why ? why : "no reason given");
    }
    json_decref(res);
    if (s->conn && PQtransactionStatus(s->conn) == PQTRANS_INERROR) {
        a2_store_error kept = s->err;
        json_t *ignored = NULL;
        (void)exchange(s, NULL, "rollback", 0, NULL, NULL, NULL, false,
                       &ignored);
        json_decref(ignored);
        s->err = kept;
    }
    return rc;
}
