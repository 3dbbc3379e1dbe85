/*
 * a2-consumer driven by real liba2store operations on a real database:
 * append → wake; complete → wake for the lane's next head; fail with
 * retry-after 300 ms → wake no sooner than 300 ms; a lapsed 300 ms lease →
 * takeover wake; a log consumer gets `log` for its types only; clear →
 * cleared. The audit names every transition the store made.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>

#include "a2/store.h"
#include "consumer_harness.h"
#include "store_fixture.h"

static a2_store *store;
static PGconn *db;

static int setup(void **state)
{
    *state = db =
            a2_test_connect_reset("truncate a2_events, a2_cursors, a2_clears, "
                                  "a2_lane_events");
    store = a2_test_store_open(a2_test_db());
    return 0;
}

static int teardown(void **state)
{
    a2_store_close(store);
    return a2_test_consumer_teardown(state);
}

static void check(int rc, const char *what)
{
    if (rc != 0)
        fail_msg("%s: %d %s", what, rc, a2_store_last_error(store)->message);
}

static int64_t append(const char *session, const char *type,
                      const char *consumer, const char *lane)
{
    a2_target t = {.consumer = consumer, .lane = lane};
    a2_append_event e = {.type = type,
                         .payload = "{}",
                         .targets = &t,
                         .ntargets = consumer ? 1 : 0};
    a2_events out;
    check(a2_store_append(store, session, &e, 1, NULL, &out), "append");
    int64_t idx = out.items[0].index;
    a2_events_free(&out);
    return idx;
}

/* Claims the session's heads for holder; returns the attempt of the first. */
static int claim(const char *session, const char *holder, int64_t ttl,
                 int64_t *index)
{
    a2_claim_request req = {.holder = holder, .ttl_ms = ttl};
    a2_claim_result out;
    check(a2_store_claim(store, session, &req, &out), "claim");
    if (out.outcome != A2_CLAIM_CLAIMED)
        fail_msg("claim outcome %d", out.outcome);
    int attempt = out.heads.items[0].dispatch.attempt_count;
    if (index)
        *index = out.heads.items[0].event.index;
    a2_claim_result_free(&out);
    return attempt;
}

static void test_store_operations_wake(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_store", &w, 0);

    /* append to a lane → wake for its head */
    int64_t i1 = append("s1", "job", "c", "main");
    int64_t i2 = append("s1", "job", "c", "main");
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.session, "s1");
    assert_string_equal(m.cursor, "lane:main");
    assert_int_equal(m.head, i1);

    /* claim + complete → wake for the lane's next head */
    int64_t idx;
    int attempt = claim("s1", "w1", 60000, &idx);
    assert_int_equal(idx, i1);
    a2_attempt_ref ref = {"c", "main", i1, attempt};
    a2_complete_result cr;
    check(a2_store_complete(store, "s1", &ref, NULL, 0, NULL, 0, &cr),
          "complete");
    assert_int_equal(cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&cr);
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.cursor, "lane:main");
    assert_int_equal(m.head, i2);

    /* fail with retry-after 300 ms → a wake no sooner, and late by at most
     * TIMER_LATE_MS (a busy host delays the loop; a timer that is lost or
     * not armed never fires) */
    enum { TIMER_LATE_MS = 3000, TIMER_WAIT_MS = 10000 };
    attempt = claim("s1", "w1", 60000, &idx);
    ref = (a2_attempt_ref){"c", "main", i2, attempt};
    a2_fail_request fr = {
            .error = "boom", .max_failures = 5, .retry_after_ms = 300};
    a2_fail_result fres;
    int64_t t_fail = a2_test_wall_ms();
    check(a2_store_fail(store, "s1", &ref, &fr, &fres), "fail");
    assert_int_equal(fres.outcome, A2_ATTEMPT_FAILED);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    int64_t waited = a2_test_wall_ms() - t_fail;
    assert_int_equal(m.head, i2);
    if (waited < 300 || waited > 300 + TIMER_LATE_MS)
        fail_msg("retry wake after %" PRId64 " ms, wanted 300..%d", waited,
                 300 + TIMER_LATE_MS);

    /* a 300 ms lease left to lapse → takeover wake */
    int64_t t_claim = a2_test_wall_ms();
    claim("s1", "w2", 300, NULL);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    waited = a2_test_wall_ms() - t_claim;
    if (waited < 300 || waited > 300 + TIMER_LATE_MS)
        fail_msg("takeover wake after %" PRId64 " ms, wanted 300..%d", waited,
                 300 + TIMER_LATE_MS);
    /* the takeover itself */
    claim("s1", "w3", 60000, NULL);

    /* clear → cleared */
    a2_clear_result clr;
    check(a2_store_clear(store, "s1", A2_STORE_NONE, NULL, &clr), "clear");
    assert_true(clr.cleared);
    assert_true(a2_test_worker_wait_for(&w, "cleared", 5000, &m));
    assert_string_equal(m.session, "s1");
    assert_int_equal(m.clear_index, clr.clear_index);

    a2_test_worker_close_stop(&w, &d);
    assert_int_equal(a2_test_transitions(d.audit, "started"), 1);
    assert_int_equal(a2_test_transitions(d.audit, "completed"), 1);
    assert_int_equal(a2_test_transitions(d.audit, "failed"), 1);
    assert_int_equal(a2_test_transitions(d.audit, "taken_over"), 1);
    assert_true(a2_test_transitions(d.audit, "claimed") >= 2);
    a2_test_consumer_cleanup(&d);
}

static void test_store_log_consumer(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_storelog");
    a2_test_worker_join(&w, d.sock, "lw", "lg", "user_msg", 0);
    const char *types[] = {"user_msg"};
    a2_log_spec spec = {.lane = "log", .types = types, .ntypes = 1};
    a2_consumer lg = {"lg", &spec};
    a2_append_event ev[2] = {{.type = "noise", .payload = "1"},
                             {.type = "user_msg", .payload = "2"}};
    a2_append_options opts = {.consumers = &lg, .nconsumers = 1};
    a2_events out;
    check(a2_store_append(store, "s5", ev, 2, &opts, &out), "append");
    int64_t user_idx = out.items[1].index;
    a2_events_free(&out);
    assert_true(a2_test_worker_wait_for(&w, "log", 5000, &m));
    assert_string_equal(m.consumer, "lg");
    assert_string_equal(m.session, "s5");
    assert_int_equal(m.idx, user_idx);
    assert_string_equal(m.type, "user_msg");
    assert_int_equal(a2_test_worker_wait_for(&w, "log", 400, &m), 0);
    a2_test_worker_close_end(&w, &d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_store_operations_wake, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_store_log_consumer, setup,
                                            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
