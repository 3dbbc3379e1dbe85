/*
 * The a2_* functions called as any driver calls them (libpq, text
 * parameters), in the caller's own transaction: an append rolled back with
 * the application's transaction leaves nothing and wakes nobody, one
 * committed wakes after the commit; writes refuse REPEATABLE READ and
 * SERIALIZABLE; a2_batch runs operations all or nothing, grouped by
 * session so that two batches never wait on each other in a cycle; every
 * error is an A2 SQLSTATE with the spec's name in its message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_harness.h"

static PGconn *db;

static int setup(void **state)
{
    *state = db =
            a2_test_connect_reset("truncate a2_events, a2_cursors, a2_clears, "
                                  "a2_lane_events");
    return 0;
}

/* Runs sql with text parameters; the result, to check and clear. */
static PGresult *run(PGconn *c, const char *sql, int n, const char *const *v)
{
    return PQexecParams(c, sql, n, NULL, v, NULL, NULL, 0);
}

/* Runs sql; fails the test unless it returns rows; the first value (free
 * it). */
static char *value(PGconn *c, const char *sql, int n, const char *const *v)
{
    PGresult *r = run(c, sql, n, v);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    char *out = PQntuples(r) && !PQgetisnull(r, 0, 0)
                        ? strdup(PQgetvalue(r, 0, 0))
                        : NULL;
    PQclear(r);
    return out;
}

/* Expects sql to fail with sqlstate and a message holding fragment. */
static void expect_error(PGconn *c, const char *sql, int n,
                         const char *const *v, const char *sqlstate,
                         const char *fragment)
{
    PGresult *r = run(c, sql, n, v);
    if (PQresultStatus(r) != PGRES_FATAL_ERROR)
        fail_msg("%s: succeeded, expected %s", sql, sqlstate);
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    if (!st || strcmp(st, sqlstate) != 0 || !msg || !strstr(msg, fragment))
        fail_msg("%s: got %s \"%s\", expected %s \"%s\"", sql, st ? st : "-",
                 msg ? msg : "-", sqlstate, fragment);
    PQclear(r);
}

#define APPEND_SQL                                                             \
    "select a2_append(session => $1, events => $2::jsonb)"
#define ONE_EVENT                                                              \
    "[{\"type\": \"order.placed\", \"targets\": [{\"consumer\": \"c\"}]}]"

/* Waits (bounded) until the audit file holds a line about session; 1 when
 * it does. */
static int audit_has(const a2_test_consumer *d, const char *session,
                     int timeout_ms)
{
    char needle[160];
    snprintf(needle, sizeof needle, "\"session\":\"%s\"", session);
    for (int64_t end = a2_test_now_ms() + timeout_ms;;) {
        if (a2_test_count_in_file(d->audit, needle) > 0)
            return 1;
        if (a2_test_now_ms() > end)
            return 0;
        a2_test_sleep_ms(20);
    }
}

/* The next wake the worker gets (its session in m); fails on timeout. */
static void next_wake(a2_test_worker *w, a2_test_msg *m)
{
    if (!a2_test_worker_wait_for(w, "wake", 10000, m))
        fail_msg("no wake-up within 10 s");
}

static void test_append_in_application_transaction(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_sql_app", &w, 0);
    a2_test_exec(db, "create table app_orders (id text primary key)");
    PGconn *app = a2_test_connect();

    /* Rolled back with the order: nothing stored, no wake-up, no audit
     * line. The marker committed after it is the first wake-up. */
    a2_test_exec(app, "begin");
    a2_test_exec(app, "insert into app_orders values ('o-1')");
    const char *v1[] = {"app-rolled-back", ONE_EVENT};
    free(value(app, APPEND_SQL, 2, v1));
    a2_test_exec(app, "rollback");
    const char *vm[] = {"app-marker-1", ONE_EVENT};
    free(value(db, APPEND_SQL, 2, vm));
    a2_test_msg m;
    next_wake(&w, &m);
    assert_string_equal(m.session, "app-marker-1");
    assert_true(audit_has(&d, "app-marker-1", 10000));
    assert_int_equal(a2_test_count_in_file(d.audit, "app-rolled-back"), 0);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_events where "
                                     "session_id = 'app-rolled-back'"),
                     0);

    /* Committed with the order: woken only after the commit. A marker
     * committed while the application's transaction is open wakes first. */
    a2_test_exec(app, "begin");
    a2_test_exec(app, "insert into app_orders values ('o-2')");
    const char *v2[] = {"app-committed", ONE_EVENT};
    char *r = value(app, APPEND_SQL, 2, v2);
    assert_non_null(strstr(r, "\"outcome\": \"appended\""));
    free(r);
    const char *vm2[] = {"app-marker-2", ONE_EVENT};
    free(value(db, APPEND_SQL, 2, vm2));
    next_wake(&w, &m);
    assert_string_equal(m.session, "app-marker-2");
    assert_true(audit_has(&d, "app-marker-2", 10000));
    assert_int_equal(a2_test_count_in_file(d.audit, "app-committed"), 0);
    a2_test_exec(app, "commit");
    next_wake(&w, &m);
    assert_string_equal(m.session, "app-committed");
    assert_int_equal(m.head, 1);
    assert_true(audit_has(&d, "app-committed", 10000));
    assert_int_equal(a2_test_int(db, "select count(*) from app_orders"), 1);

    /* The session lock is the caller's until its commit: an append of the
     * same session on another connection waits for it. */
    a2_test_exec(app, "begin");
    const char *v3[] = {"app-locked", ONE_EVENT};
    free(value(app, APPEND_SQL, 2, v3));
    PGconn *other = a2_test_connect();
    assert_int_equal(PQsendQueryParams(other, APPEND_SQL, 2, NULL, v3, NULL,
                                       NULL, 0),
                     1);
    assert_int_equal(a2_test_lock_waiters(db,
                                          "wait_event = 'advisory' and "
                                          "query like 'select a2_append%'",
                                          1, 5000),
                     1);
    a2_test_exec(app, "commit");
    PGresult *res;
    int got = 0;
    while ((res = PQgetResult(other))) {
        if (PQresultStatus(res) == PGRES_TUPLES_OK)
            got = strstr(PQgetvalue(res, 0, 0), "\"index\": 2") != NULL;
        PQclear(res);
    }
    assert_true(got);
    PQfinish(other);
    PQfinish(app);
    a2_test_worker_close_end(&w, &d);
}

/* Writes take a fresh snapshot after the session lock: they refuse
 * REPEATABLE READ and SERIALIZABLE, where a statement would read the
 * transaction's first snapshot. Reads serve every level. */
static void test_isolation_levels(void **state)
{
    (void)state;
    const char *v[] = {"iso", ONE_EVENT};
    free(value(db, APPEND_SQL, 2, v));
    a2_test_exec(db, "begin isolation level repeatable read");
    expect_error(db, APPEND_SQL, 2, v, "A2001",
                 "a2_append must run under READ COMMITTED, not REPEATABLE "
                 "READ");
    a2_test_exec(db, "rollback");
    a2_test_exec(db, "begin isolation level serializable");
    const char *cv[] = {"iso"};
    expect_error(db,
                 "select a2_claim(session => $1, holder => 'h', ttl_ms => "
                 "1000)",
                 1, cv, "A2001", "a2_claim must run under READ COMMITTED");
    a2_test_exec(db, "rollback");
    a2_test_exec(db, "begin isolation level repeatable read");
    char *n = value(db, "select count(*) from a2_read(session => $1)", 1, cv);
    assert_string_equal(n, "1");
    free(n);
    a2_test_exec(db, "commit");
    /* Nothing was appended by the refused call. */
    assert_int_equal(
            a2_test_int(db, "select count(*) from a2_events where session_id "
                            "= 'iso'"),
            1);
}

/* One A2 SQLSTATE per code, the spec's name first in the message. */
static void test_error_codes(void **state)
{
    (void)state;
    const char *bad[] = {"", ONE_EVENT};
    expect_error(db, APPEND_SQL, 2, bad, "A2001",
                 "INVALID_ARGUMENT: session must not be empty");
    const char *untyped[] = {"e1", "[{\"payload\": 1}]"};
    expect_error(db, APPEND_SQL, 2, untyped, "A2001",
                 "INVALID_ARGUMENT: event 1 needs a type");
    const char *twice[] = {"e1", "[{\"type\": \"t\", \"id\": \"x\"}, "
                                 "{\"type\": \"t\", \"id\": \"x\"}]"};
    expect_error(db, APPEND_SQL, 2, twice, "A2004",
                 "PARTIAL_DUPLICATE_BATCH: batch contains the same event id "
                 "more than once");
    const char *first[] = {"e1", "[{\"type\": \"t\", \"id\": \"a\"}]"};
    free(value(db, APPEND_SQL, 2, first));
    const char *mixed[] = {"e1", "[{\"type\": \"t\", \"id\": \"a\"}, "
                                 "{\"type\": \"t\", \"id\": \"b\"}]"};
    expect_error(db, APPEND_SQL, 2, mixed, "A2004",
                 "batch mixes 1 already-appended and 1 fresh events");
    const char *caused[] = {
            "e1", "[{\"type\": \"t\", \"cause\": {\"consumer\": \"c\", "
                  "\"lane\": null, \"index\": 1, \"attempt\": 1}}]"};
    expect_error(db, APPEND_SQL, 2, caused, "A2005",
                 "SUPERSEDED_ATTEMPT: attempt 1 of c at index 1 in session "
                 "\"e1\" is superseded");
    const char *s[] = {"e1"};
    free(value(db, "select a2_clear(session => $1)", 1, s));
    expect_error(db,
                 "select a2_append(session => $1, events => "
                 "'[{\"type\": \"t\"}]', origin => 1)",
                 1, s, "A2006", "SESSION_CLEARED: scheduled work from event 1");
    expect_error(db,
                 "select a2_fail(session => $1, consumer => 'c', lane => "
                 "null, index => 99, attempt => 1)",
                 1, s, "A2007", "NO_SUCH_EVENT: no event at index 99");
    /* A replay is an outcome, not an error. */
    const char *again[] = {"e2", "[{\"type\": \"t\", \"id\": \"r\"}]"};
    free(value(db, APPEND_SQL, 2, again));
    char *r = value(db, APPEND_SQL, 2, again);
    assert_non_null(strstr(r, "\"outcome\": \"replayed\""));
    free(r);
}

/* Calls refused with INVALID_ARGUMENT: sql with its one parameter, and the
 * message it must give. */
typedef struct refused_call {
    const char *sql, *param, *message;
} refused_call;

static void expect_refused(const refused_call *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v[] = {calls[i].param};
        expect_error(db, calls[i].sql, 1, v, "A2001", calls[i].message);
    }
}

#define APPEND_BT "select a2_append(session => 'bt', events => $1::jsonb)"

/* A single event's targets are checked before the session lock, each
 * with the message of its fault, for one target and for several; a refused
 * append stores nothing. */
static void test_bad_targets(void **state)
{
    (void)state;
    static const refused_call bad[] = {
            {APPEND_BT,
             "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"\"}]}]",
             "INVALID_ARGUMENT: a target's consumer must not be empty"},
            {APPEND_BT,
             "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\", "
             "\"lane\": \"\"}]}]",
             "INVALID_ARGUMENT: a target's lane must not be empty"},
            {APPEND_BT, "[{\"type\": \"t\", \"targets\": [\"c\"]}]",
             "INVALID_ARGUMENT: a target must be an object"},
            {APPEND_BT, "[{\"type\": \"t\", \"targets\": [{\"lane\": \"l\"}]}]",
             "INVALID_ARGUMENT: a target must be an object"},
            {APPEND_BT,
             "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}, "
             "{\"consumer\": \"d\", \"lane\": 5}]}]",
             "INVALID_ARGUMENT: a target must be an object"},
            {APPEND_BT,
             "[{\"type\": \"t\", \"id\": \"x\", \"targets\": [{\"consumer\": "
             "\"c\", \"lane\": \"l\"}, {\"consumer\": \"\", \"lane\": "
             "\"m\"}]}]",
             "INVALID_ARGUMENT: a target's consumer must not be empty"},
    };
    expect_refused(bad, sizeof bad / sizeof bad[0]);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_events where "
                                     "session_id = 'bt'"),
                     0);
    /* The same shapes, valid, are stored with their cursors. */
    const char *one[] = {"bt",
                         "[{\"type\": \"t\", \"targets\": [{\"consumer\": "
                         "\"c\", \"lane\": \"l\"}]}]"};
    free(value(db, APPEND_SQL, 2, one));
    const char *two[] = {"bt",
                         "[{\"type\": \"t\", \"targets\": [{\"consumer\": "
                         "\"c\"}, {\"consumer\": \"d\", \"lane\": "
                         "\"l\"}]}]"};
    free(value(db, APPEND_SQL, 2, two));
    assert_int_equal(
            a2_test_int(db, "select count(*) from a2_cursors where session_id "
                            "= 'bt' and consumer in ('c', 'd')"),
            3);
}

/* The checks a2_claim and a2_complete write as plain expressions (calling
 * the checking function only to raise) still refuse each fault with its
 * message: names empty or too long, a consumer list of one bad name or of
 * one bad log consumer, an index or attempt below 1, a lane that is
 * empty. */
static void test_plain_checks(void **state)
{
    (void)state;
    static char long_name[1100];
    memset(long_name, 'x', sizeof long_name - 1);
    const char *n = long_name;
    const refused_call calls[] = {
            {"select a2_claim(session => '', holder => $1, ttl_ms => 1000)", n,
             "INVALID_ARGUMENT: session must not be empty"},
            {"select a2_claim(session => 'pc', holder => '', ttl_ms => 1000) "
             "where $1::text is not null",
             n, "INVALID_ARGUMENT: holder must not be empty"},
            {"select a2_claim(session => 'pc', holder => $1, ttl_ms => 1000)",
             n, "INVALID_ARGUMENT: holder is longer than 1024 bytes"},
            {"select a2_claim(session => $1, holder => 'h', ttl_ms => 1000)", n,
             "INVALID_ARGUMENT: session is longer than 1024 bytes"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "consumers => '[\"\"]') where $1::text is not null",
             n, "INVALID_ARGUMENT: a consumer's name must not be empty"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "consumers => jsonb_build_array($1::text))",
             n,
             "INVALID_ARGUMENT: a consumer's name is longer than 1024 bytes"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "consumers => '[5]') where $1::text is not null",
             n, "INVALID_ARGUMENT: a consumer must be a name or an object"},
            /* lanes: the claim of one lane's head */
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "lanes => '{\"consumer\": \"c\"}') where $1::text is not null",
             n, "INVALID_ARGUMENT: lanes must be a JSON array"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "lanes => '[{\"consumer\": \"c\"}]') where $1::text is not null",
             n, "INVALID_ARGUMENT: a lane must not be empty"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "lanes => jsonb_build_array(jsonb_build_object('consumer', $1::text, "
             "'lane', 'q')))",
             n, "INVALID_ARGUMENT: a lane's consumer is longer than 1024 bytes"},
            /* one log consumer: the plain checks of its spec */
#define LOG_CLAIM(spec)                                                        \
    "select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "         \
    "consumers => '[" spec "]') where $1::text is not null"
            {LOG_CLAIM("{\"name\": \"\", \"log\": {\"lane\": \"l\"}}"), n,
             "INVALID_ARGUMENT: a consumer's name must not be empty"},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": 5}}"), n,
             "INVALID_ARGUMENT: a log consumer needs a \"lane\""},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": \"\"}}"), n,
             "INVALID_ARGUMENT: a log consumer's lane must not be empty"},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": \"l\", "
                       "\"types\": \"t\"}}"),
             n, "INVALID_ARGUMENT: log types must be an array or null"},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": \"l\", "
                       "\"types\": [\"\"]}}"),
             n, "INVALID_ARGUMENT: a log type must be a name of 1 to 1024 bytes"},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": \"l\", "
                       "\"types\": [5]}}"),
             n, "INVALID_ARGUMENT: a log type must be a name of 1 to 1024 bytes"},
            {LOG_CLAIM("{\"name\": \"c\", \"log\": {\"lane\": \"l\", "
                       "\"backfill\": \"yes\"}}"),
             n, "INVALID_ARGUMENT: backfill must be true or false"},
            {"select a2_claim(session => 'pc', holder => 'h', ttl_ms => 1000, "
             "consumers => jsonb_build_array(jsonb_build_object('name', 'c', "
             "'log', jsonb_build_object('lane', 'l', 'types', "
             "jsonb_build_array($1::text)))))",
             n, "INVALID_ARGUMENT: a log type must be a name of 1 to 1024 bytes"},
#undef LOG_CLAIM
            {"select a2_complete(session => 'pc', consumer => $1, lane => "
             "null, "
             "index => 1, attempt => 1)",
             n, "INVALID_ARGUMENT: consumer is longer than 1024 bytes"},
            {"select a2_complete(session => 'pc', consumer => '', lane => "
             "null, "
             "index => 1, attempt => 1) where $1::text is not null",
             n, "INVALID_ARGUMENT: consumer must not be empty"},
            {"select a2_complete(session => 'pc', consumer => 'c', lane => '', "
             "index => 1, attempt => 1) where $1::text is not null",
             n, "INVALID_ARGUMENT: lane must not be empty"},
            {"select a2_complete(session => 'pc', consumer => 'c', lane => "
             "null, "
             "index => 0, attempt => 1) where $1::text is not null",
             n, "INVALID_ARGUMENT: index and attempt must be at least 1"},
            {"select a2_complete(session => 'pc', consumer => 'c', lane => "
             "null, "
             "index => 1, attempt => null) where $1::text is not null",
             n, "INVALID_ARGUMENT: index and attempt must be at least 1"},
            {"select a2_complete(session => $1, consumer => 'c', lane => null, "
             "index => 1, attempt => 1)",
             n, "INVALID_ARGUMENT: session is longer than 1024 bytes"},
    };
    expect_refused(calls, sizeof calls / sizeof calls[0]);
    a2_test_exec(db, "begin isolation level repeatable read");
    const char *s[] = {"pc"};
    expect_error(db,
                 "select a2_complete(session => $1, consumer => 'c', lane => "
                 "null, index => 1, attempt => 1)",
                 1, s, "A2001",
                 "a2_complete must run under READ COMMITTED, not REPEATABLE "
                 "READ");
    a2_test_exec(db, "rollback");
}

#define BATCH_SQL "select a2_batch(ops => $1::jsonb)"

static void test_batch_results_in_order(void **state)
{
    (void)state;
    const char *v[] = {
            "[{\"op\": \"append\", \"session\": \"b2\", \"events\": "
            "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]}]},"
            " {\"op\": \"append\", \"session\": \"b1\", \"events\": "
            "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]}]},"
            " {\"op\": \"read\", \"session\": \"b2\"},"
            " {\"op\": \"claim\", \"session\": \"b2\", \"holder\": \"h\", "
            "\"ttl_ms\": 60000},"
            " {\"op\": \"complete\", \"session\": \"b2\", \"consumer\": "
            "\"c\", \"lane\": null, \"index\": 1, \"attempt\": 1},"
            " {\"op\": \"cursors\", \"session\": \"none\"}]"};
    char *r = value(db,
                    "select jsonb_agg(jsonb_build_object('outcome', "
                    "x->>'outcome', 'n', case jsonb_typeof(x) when 'array' "
                    "then jsonb_array_length(x) end)) from "
                    "jsonb_array_elements(a2_batch(ops => $1::jsonb)) x",
                    1, v);
    assert_string_equal(r, "[{\"n\": null, \"outcome\": \"appended\"}, "
                           "{\"n\": null, \"outcome\": \"appended\"}, "
                           "{\"n\": 1, \"outcome\": null}, "
                           "{\"n\": null, \"outcome\": \"claimed\"}, "
                           "{\"n\": null, \"outcome\": \"completed\"}, "
                           "{\"n\": 0, \"outcome\": null}]");
    free(r);
}

static void test_batch_all_or_nothing(void **state)
{
    (void)state;
    const char *v[] = {"[{\"op\": \"append\", \"session\": \"b3\", \"events\": "
                       "[{\"type\": \"t\"}]}, {\"op\": \"append\", \"session\": "
                       "\"b4\", \"events\": [{\"nope\": 1}]}]"};
    expect_error(db, BATCH_SQL, 1, v, "A2001", "event 1 needs a type");
    assert_int_equal(
            a2_test_int(db, "select count(*) from a2_events where session_id "
                            "in ('b3', 'b4')"),
            0);
    const char *unknown[] = {"[{\"op\": \"frobnicate\"}]"};
    expect_error(db, BATCH_SQL, 1, unknown, "A2001",
                 "unknown operation 'frobnicate'");
    const char *typo[] = {"[{\"op\": \"read\", \"session\": \"b3\", "
                          "\"sesion\": \"x\"}]"};
    expect_error(db, BATCH_SQL, 1, typo, "A2001",
                 "operation read takes no argument 'sesion'");
    const char *notarray[] = {"{\"op\": \"read\"}"};
    expect_error(db, BATCH_SQL, 1, notarray, "A2001",
                 "ops must be a JSON array");
    expect_error(db,
                 "select a2_batch(ops => (select jsonb_agg('{\"op\": "
                 "\"cursors\", \"session\": \"s\"}'::jsonb) from "
                 "generate_series(1, 1001)))",
                 0, NULL, "A2001", "more than 1000 operations");
}

/* Two batches that touch the same sessions in opposite orders: each takes
 * the session locks in one order (by session), so the second waits for the
 * first without holding the other's lock, and neither deadlocks. */
static void test_batches_in_opposite_orders(void **state)
{
    (void)state;
    const char *ab[] = {
            "[{\"op\": \"append\", \"session\": \"xa\", \"events\": "
            "[{\"type\": \"t\"}]}, {\"op\": \"append\", \"session\": \"xb\", "
            "\"events\": [{\"type\": \"t\"}]}]"};
    const char *ba[] = {
            "[{\"op\": \"append\", \"session\": \"xb\", \"events\": "
            "[{\"type\": \"t\"}]}, {\"op\": \"append\", \"session\": \"xa\", "
            "\"events\": [{\"type\": \"t\"}]}]"};
    /* holder keeps xa's lock; the two batches queue behind it. */
    PGconn *holder = a2_test_connect();
    a2_test_exec(holder, "begin");
    const char *hv[] = {"xa", "[{\"type\": \"hold\"}]"};
    free(value(holder, APPEND_SQL, 2, hv));
    PGconn *c1 = a2_test_connect(), *c2 = a2_test_connect();
    assert_int_equal(
            PQsendQueryParams(c1, BATCH_SQL, 1, NULL, ba, NULL, NULL, 0), 1);
    assert_int_equal(
            PQsendQueryParams(c2, BATCH_SQL, 1, NULL, ab, NULL, NULL, 0), 1);
    assert_int_equal(a2_test_lock_waiters(db,
                                          "wait_event = 'advisory' and "
                                          "query like 'select a2_batch%'",
                                          2, 5000),
                     2);
    /* ba waits for xa without holding xb: it took no lock yet. */
    assert_int_equal(
            a2_test_int(db, "select count(*) from pg_locks where locktype = "
                            "'advisory' and granted and objid = "
                            "hashtext('xb')::oid"),
            0);
    a2_test_exec(holder, "commit");
    PGconn *cs[2] = {c1, c2};
    for (int i = 0; i < 2; i++) {
        PGresult *res;
        int ok = 0;
        while ((res = PQgetResult(cs[i]))) {
            if (PQresultStatus(res) == PGRES_TUPLES_OK)
                ok = 1;
            else
                fail_msg("batch %d: %s", i, PQresultErrorMessage(res));
            PQclear(res);
        }
        assert_true(ok);
        PQfinish(cs[i]);
    }
    PQfinish(holder);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_events where "
                                     "session_id in ('xa', 'xb')"),
                     5);
}

/* Two batches settle runs of completions over the same heads at once: the
 * second waits for the cursor rows the first holds, then finds them
 * completed: a replay for each head the first took, a completion for the
 * one it alone names. Neither deadlocks, whatever order each names them. */
static void test_batch_runs_race(void **state)
{
    (void)state;
    const char *ev[] = {
            "race",
            "[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]},"
            " {\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]},"
            " {\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]},"
            " {\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]}]"};
    free(value(db, APPEND_SQL, 2, ev));
    a2_test_exec(db, "select a2_claim(session => 'race', holder => 'h', "
                     "ttl_ms => 600000)");
#define RACE_OP(i)                                                             \
    "{\"op\": \"complete\", \"session\": \"race\", \"consumer\": \"c\", "      \
    "\"index\": " #i ", \"attempt\": 1}"
    const char *first[] = {"[" RACE_OP(1) ", " RACE_OP(2) ", " RACE_OP(3) "]"};
    const char *second[] = {"[" RACE_OP(3) ", " RACE_OP(2) ", " RACE_OP(4) "]"};
#undef RACE_OP
    PGconn *c1 = a2_test_connect(), *c2 = a2_test_connect();
    a2_test_exec(c1, "begin");
    char *r1 = value(c1, BATCH_SQL, 1, first);
    assert_non_null(strstr(r1, "\"completed\""));
    assert_null(strstr(r1, "replayed"));
    free(r1);
    assert_int_equal(
            PQsendQueryParams(c2, BATCH_SQL, 1, NULL, second, NULL, NULL, 0),
            1);
    assert_int_equal(a2_test_lock_waiters(db,
                                          "wait_event = 'transactionid' and "
                                          "query like 'select a2_batch%'",
                                          1, 30000),
                     1);
    a2_test_exec(c1, "commit");
    PGresult *res;
    char *r2 = NULL;
    while ((res = PQgetResult(c2))) {
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            fail_msg("second batch: %s", PQresultErrorMessage(res));
        free(r2);
        r2 = strdup(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    assert_non_null(r2);
    assert_string_equal(
            r2,
            "[{\"events\": [], \"outcome\": \"completed\", \"replayed\": "
            "true}, "
            "{\"events\": [], \"outcome\": \"completed\", \"replayed\": true}, "
            "{\"events\": [], \"outcome\": \"completed\"}]");
    free(r2);
    PQfinish(c1);
    PQfinish(c2);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_cursors where "
                                     "session_id = 'race' and head is null "
                                     "and completed_attempt = 1"),
                     4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(
                    test_append_in_application_transaction, setup,
                    a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_isolation_levels, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_error_codes, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_bad_targets, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_plain_checks, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_batch_results_in_order, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_batch_all_or_nothing, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_batches_in_opposite_orders,
                                            setup, a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_batch_runs_race, setup,
                                            a2_test_consumer_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
