/*
 * a2-worker's decision after a run (worker/sched.h): rechecks after a
 * wake-up that found nothing, retries, and keeping a log wake-up until a
 * run ends with nothing left to do.
 */
#include "../../worker/sched.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

/* A log wake-up without an xid whose run claimed nothing (its commit maybe
 * not yet visible to the worker's snapshot) is looked at again after 20, 40 and 80 ms, each
 * time with the log cursors' runs started again: the run that took the
 * wake-up may have started none. */
static void test_recheck_keeps_log_wake(void **state)
{
    (void)state;
    a2w_ran r = {.hinted = 1, .claimed = 0, .wake_log = 1};
    const int64_t delays[] = {20, 40, 80};
    for (int i = 0; i < 3; i++) {
        r.rechecks = i;
        a2w_next n = a2w_after_run(&r);
        assert_int_equal(n.kind, A2W_TIMER);
        assert_int_equal(n.delay_ms, delays[i]);
        assert_int_equal(n.recheck, 1);
        assert_int_equal(n.wake_log, 1);
    }
    r.rechecks = 3;
    a2w_next n = a2w_after_run(&r);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.wake_log, 0);
    /* a plain wake-up is rechecked without the log step */
    r.rechecks = 0;
    r.wake_log = 0;
    n = a2w_after_run(&r);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.wake_log, 0);
}

/* A wake-up during the run, a failed store call and a lease retry each
 * schedule the session again, and keep the log wake-up for that run. */
static void test_reschedules_keep_log_wake(void **state)
{
    (void)state;
    a2w_ran again = {.again = 1, .hinted = 1, .claimed = 2, .wake_log = 1};
    a2w_next n = a2w_after_run(&again);
    assert_int_equal(n.kind, A2W_RUN_AGAIN);
    assert_int_equal(n.wake_log, 1);

    a2w_ran failed = {.failed = 1, .hinted = 1, .wake_log = 1};
    n = a2w_after_run(&failed);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, A2W_STORE_RETRY_MS);
    assert_int_equal(n.recheck, 0);
    assert_int_equal(n.wake_log, 1);

    a2w_ran retry = {.retry_at = 10250, .now = 10000, .wake_log = 1};
    n = a2w_after_run(&retry);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, 255);
    assert_int_equal(n.wake_log, 1);
    retry.now = 10260; /* already due */
    n = a2w_after_run(&retry);
    assert_int_equal(n.delay_ms, 5);
}

/* A woken run that claimed something, or a run nobody woke, ends the job. */
static void test_settled(void **state)
{
    (void)state;
    a2w_ran claimed = {.hinted = 1, .claimed = 1, .wake_log = 1};
    a2w_next n = a2w_after_run(&claimed);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.wake_log, 0);
    a2w_ran swept = {.hinted = 0, .claimed = 0};
    n = a2w_after_run(&swept);
    assert_int_equal(n.kind, A2W_DONE);
    /* a run that waited for its wake-up's commit saw it: nothing to look
     * at again */
    a2w_ran waited = {.hinted = 1, .claimed = 0, .waited = 1, .wake_log = 1};
    n = a2w_after_run(&waited);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.recheck, 0);
    assert_int_equal(n.wake_log, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_recheck_keeps_log_wake),
            cmocka_unit_test(test_reschedules_keep_log_wake),
            cmocka_unit_test(test_settled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
