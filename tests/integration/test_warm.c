/*
 * Warming a store connection against a real PostgreSQL (a2_warm,
 * a2_store_warm): the cycle runs every function a worker calls, leaves no
 * row and nothing a logical slot decodes, and a refusal (a read-only
 * connection, a schema without a2_warm) is an error that leaves the store
 * usable; a2_worker_runner_new logs a refused warm-up and goes on.
 */
#include "a2/schema.h"
#include "a2/store.h"
#include "a2/worker.h"
#include "a2test.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT "test_warm"

/* The test database's conninfo with options (a libpq "options" value). */
static void conninfo_with(char *buf, size_t len, const char *options)
{
    snprintf(buf, len, "%s options='%s'", a2_test_db(), options);
}

static int64_t warm_rows(PGconn *db)
{
    return a2_test_int(db, "select (select count(*) from a2_events"
                           "         where session_id like 'a2.warm.%')"
                           "     + (select count(*) from a2_cursors"
                           "         where session_id like 'a2.warm.%')"
                           "     + (select count(*) from a2_lane_events"
                           "         where session_id like 'a2.warm.%')");
}

/* Nothing of a warm-up stays: no row, no change a wal2json slot decodes;
 * one round trip; a second warm-up of the same connection works too. */
static void test_warm_leaves_nothing(void **state)
{
    (void)state;
    PGconn *db = a2_test_connect();
    a2_test_exec(db, "select pg_create_logical_replication_slot('" SLOT
                     "', 'wal2json')");
    a2_store *s = a2_test_store_open(a2_test_db());
    uint64_t trips = a2_store_round_trips(s);
    int rc = a2_store_warm(s);
    if (rc != 0)
        fail_msg("warm: %s", a2_store_last_error(s)->message);
    assert_int_equal(a2_store_round_trips(s) - trips, 1);
    assert_int_equal(a2_store_warm(s), 0);
    assert_int_equal(warm_rows(db), 0);
    /* The slot saw the warm-ups' transactions commit with no change of
     * theirs (every insert was rolled back with its subtransaction), and
     * decodes a real append: the check can fail. */
    assert_int_equal(a2_test_int(db, "select count(*) from "
                                     "pg_logical_slot_peek_changes('" SLOT
                                     "', null, null, 'format-version', '2')"
                                     " where data like '%\"action\":\"I\"%'"),
                     0);
    a2_target tg = {.consumer = "c"};
    a2_append_event ev = {.type = "job", .targets = &tg, .ntargets = 1};
    a2_events out;
    A2_TEST_OK(s, a2_store_append(s, "warm-real", &ev, 1, NULL, &out));
    a2_events_free(&out);
    assert_true(a2_test_int(db, "select count(*) from "
                                "pg_logical_slot_peek_changes('" SLOT
                                "', null, null, 'format-version', '2')"
                                " where data like '%\"action\":\"I\"%'"
                                " and data like '%warm-real%'") >= 1);
    a2_store_close(s);
    a2_test_exec(db, "select pg_drop_replication_slot('" SLOT "')");
    PQfinish(db);
}

/* The cycle calls each function a worker calls: counted by the server's
 * function statistics of the warmed connection (flushed when it closes). */
static void test_warm_runs_each_function(void **state)
{
    (void)state;
    PGconn *db = a2_test_connect();
    a2_test_exec(db, "select pg_stat_reset()");
    char ci[1024];
    conninfo_with(ci, sizeof ci, "-c track_functions=all");
    a2_store *s = a2_test_store_open(ci);
    assert_int_equal(a2_store_warm(s), 0);
    a2_store_close(s);
    static const char *const fns[] = {"a2_warm",     "a2_append",
                                      "a2_claim",    "a2_batch",
                                      "a2_complete", "a2_fail",
                                      "a2__complete_held"};
    static const int64_t calls[] = {1, 2, 1, 1, 1, 1, 1};
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
        int64_t n = -1;
        for (int tries = 0; tries < 100; tries++) {
            n = a2_test_intf(db,
                             "select coalesce(sum(calls), 0) from "
                             "pg_stat_user_functions where funcname = '%s'",
                             fns[i]);
            if (n >= calls[i])
                break;
            a2_test_sleep_ms(50); /* the closed backend's stats flush */
        }
        if (n != calls[i])
            fail_msg("%s was called %lld times, expected %lld", fns[i],
                     (long long)n, (long long)calls[i]);
    }
    PQfinish(db);
}

/* A read-only connection refuses the cycle: A2_ESTORE_FAILED naming why,
 * and the store still serves reads. */
static void test_warm_read_only(void **state)
{
    (void)state;
    char ci[1024];
    conninfo_with(ci, sizeof ci, "-c default_transaction_read_only=on");
    a2_store *s = a2_test_store_open(ci);
    assert_int_equal(a2_store_warm(s), A2_ESTORE_FAILED);
    const char *msg = a2_store_last_error(s)->message;
    if (!strstr(msg, "a2_warm: ") || !strstr(msg, "read-only"))
        fail_msg("unexpected message: %s", msg);
    a2_cursors cur = {0};
    A2_TEST_OK(s, a2_store_cursors(s, "warm-ro", &cur));
    assert_int_equal(cur.count, 0);
    a2_cursors_free(&cur);
    a2_store_close(s);
}

static int log_lines;
static char log_last[1024];

static void on_log(void *ctx, const char *line)
{
    (void)ctx;
    log_lines++;
    snprintf(log_last, sizeof log_last, "%s", line);
}

static int noop(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    (void)ctx;
    (void)head;
    (void)reply;
    return 0;
}

/* A runner whose warm-up is refused logs it and is made all the same. */
static void test_runner_warm_refused(void **state)
{
    (void)state;
    char ci[1024], err[256];
    conninfo_with(ci, sizeof ci, "-c default_transaction_read_only=on");
    a2_consumer c = {.name = "c"};
    a2_worker_runner_options o = {.db = ci,
                                  .consumers = &c,
                                  .nconsumers = 1,
                                  .handler = noop,
                                  .log = on_log};
    log_lines = 0;
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    if (!r)
        fail_msg("runner: %s", err);
    assert_int_equal(log_lines, 1);
    if (!strstr(log_last, "could not warm the store connection") ||
        !strstr(log_last, "read-only"))
        fail_msg("unexpected log line: %s", log_last);
    a2_worker_runner_free(r);

    /* A writable connection warms without a word. */
    o.db = a2_test_db();
    log_lines = 0;
    r = a2_worker_runner_new(&o, err, sizeof err);
    if (!r)
        fail_msg("runner: %s", err);
    assert_int_equal(log_lines, 0);
    a2_worker_runner_free(r);
}

/* A schema older than a2_warm: an error that names the function, and the
 * store goes on. */
static void test_warm_old_schema(void **state)
{
    (void)state;
    PGconn *db = a2_test_connect();
    a2_test_exec(db, "drop function a2_warm()");
    a2_store *s = a2_test_store_open(a2_test_db());
    int rc = a2_store_warm(s);
    assert_true(rc == A2_ESCHEMA_MISSING || rc == A2_ESTORE_FAILED);
    const char *msg = a2_store_last_error(s)->message;
    if (!strstr(msg, "a2_warm"))
        fail_msg("unexpected message: %s", msg);
    a2_cursors cur = {0};
    A2_TEST_OK(s, a2_store_cursors(s, "warm-old", &cur));
    a2_cursors_free(&cur);
    a2_store_close(s);
    char err[512];
    assert_int_equal(a2_schema_apply(a2_test_db(), err, sizeof err), 0);
    PQfinish(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_warm_leaves_nothing),
            cmocka_unit_test(test_warm_runs_each_function),
            cmocka_unit_test(test_warm_read_only),
            cmocka_unit_test(test_runner_warm_refused),
            cmocka_unit_test(test_warm_old_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
