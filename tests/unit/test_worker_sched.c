/*
 * The pool's table of sessions (worker/sched.h, internal to liba2worker):
 * the decision after a run (rechecks after a wake-up that found nothing,
 * retries, and keeping a log wake-up until a run ends with nothing left to
 * do), and the ready queue and timers that apply it.
 */
#include "../../worker/sched.h"

#include <stdio.h>
#include <stdlib.h>

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

/* A log wake-up without an xid whose run claimed nothing (its commit maybe
 * not yet visible to the worker's snapshot) is looked at again after 20, 40 and
 * 80 ms, each time with the log cursors' runs started again: the run that took
 * the wake-up may have started none. */
static void test_recheck_keeps_log_wake(void **state)
{
    (void)state;
    a2__ran r = {.hinted = 1, .claimed = 0, .wake_log = 1};
    const int64_t delays[] = {20, 40, 80};
    for (int i = 0; i < 3; i++) {
        r.rechecks = i;
        a2__next n = a2__after_run(&r);
        assert_int_equal(n.kind, A2W_TIMER);
        assert_int_equal(n.delay_ms, delays[i]);
        assert_int_equal(n.recheck, 1);
        assert_int_equal(n.wake_log, 1);
    }
    r.rechecks = 3;
    a2__next n = a2__after_run(&r);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.wake_log, 0);
    /* a plain wake-up is rechecked without the log step */
    r.rechecks = 0;
    r.wake_log = 0;
    n = a2__after_run(&r);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.wake_log, 0);
}

/* A wake-up during the run, a failed store call and a lease retry each
 * schedule the session again, and keep the log wake-up for that run. */
static void test_reschedules_keep_log_wake(void **state)
{
    (void)state;
    a2__ran again = {.again = 1, .hinted = 1, .claimed = 2, .wake_log = 1};
    a2__next n = a2__after_run(&again);
    assert_int_equal(n.kind, A2W_RUN_AGAIN);
    assert_int_equal(n.wake_log, 1);

    a2__ran failed = {.failed = 1, .hinted = 1, .wake_log = 1};
    n = a2__after_run(&failed);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, A2W_STORE_RETRY_MS);
    assert_int_equal(n.recheck, 0);
    assert_int_equal(n.wake_log, 1);

    a2__ran retry = {.retry_at = 10250, .now = 10000, .wake_log = 1};
    n = a2__after_run(&retry);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, 255);
    assert_int_equal(n.wake_log, 1);
    retry.now = 10260; /* already due */
    n = a2__after_run(&retry);
    assert_int_equal(n.delay_ms, 5);
}

/* A woken run that claimed something, or a run nobody woke, ends the job. */
static void test_settled(void **state)
{
    (void)state;
    a2__ran claimed = {.hinted = 1, .claimed = 1, .wake_log = 1};
    a2__next n = a2__after_run(&claimed);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.wake_log, 0);
    a2__ran swept = {.hinted = 0, .claimed = 0};
    n = a2__after_run(&swept);
    assert_int_equal(n.kind, A2W_DONE);
    /* a run that waited for its wake-up's commit saw it: nothing to look
     * at again */
    a2__ran waited = {.hinted = 1, .claimed = 0, .waited = 1, .wake_log = 1};
    n = a2__after_run(&waited);
    assert_int_equal(n.kind, A2W_DONE);
    assert_int_equal(n.recheck, 0);
    assert_int_equal(n.wake_log, 0);
}

/* A session no wake-up named, run for one claim round with others, runs
 * again while its claim takes heads, and ends when one takes none; a retry
 * hold still goes to a timer. */
static void test_partial_runs_to_its_end(void **state)
{
    (void)state;
    a2__ran r = {.partial = 1, .claimed = 1};
    assert_int_equal(a2__after_run(&r).kind, A2W_RUN_AGAIN);
    r.claimed = 0;
    assert_int_equal(a2__after_run(&r).kind, A2W_DONE);
    r = (a2__ran){.partial = 1, .claimed = 1, .retry_at = 10250, .now = 10000};
    assert_int_equal(a2__after_run(&r).kind, A2W_TIMER);
    /* a woken one ends after its claim round, as before */
    r = (a2__ran){.hinted = 1, .claimed = 1};
    assert_int_equal(a2__after_run(&r).kind, A2W_DONE);
}

/* ── the table: the ready queue, merging, timers ──────────────────────── */

static a2__job *take(a2__sched *s, const char *session, a2__run *run)
{
    a2__job *j = a2__sched_take(s, run);
    assert_non_null(j);
    assert_string_equal(run->session, session);
    return j;
}

static a2__next done(a2__sched *s, a2__job *j, int claimed, int failed,
                      int64_t retry_at, int64_t now)
{
    a2__run_end end = {
            .failed = failed, .retry_at = retry_at, .claimed = claimed};
    return a2__sched_done(s, j, &end, 100000 + now, now);
}

/* Sessions run in the order they were named, each once however often it
 * was named while it waited; the latest xid and any wake_log are kept. */
static void test_fifo_and_merging(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    assert_non_null(s);
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 5, 0), 1);
    assert_int_equal(a2__sched_add(s, "b", 0, 0, 0, 0), 1);
    assert_int_equal(a2__sched_add(s, "c", 0, 1, 0, 0), 1);
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 7, 0), 0); /* merged */
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 0, 0), 0); /* xid kept */
    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.sessions, 3);
    assert_int_equal(st.queued, 3);
    assert_int_equal(st.merged, 2);

    a2__run run;
    a2__job *a = take(s, "a", &run);
    assert_int_equal(run.woken, 1);
    assert_int_equal(run.wake_log, 1);
    assert_int_equal(run.xid, 7);
    a2__job *b = take(s, "b", &run);
    assert_int_equal(run.woken, 0); /* a sweep or resync: a full run */
    assert_int_equal(run.xid, 0);
    a2__job *c = take(s, "c", &run);
    assert_null(a2__sched_take(s, &run));
    a2__sched_counts(s, &st);
    assert_int_equal(st.running, 3);
    assert_int_equal(st.queued, 0);

    /* Each ends with its work done: forgotten. */
    assert_int_equal(done(s, a, 1, 0, 0, 0).kind, A2W_DONE);
    assert_int_equal(done(s, b, 0, 0, 0, 0).kind, A2W_DONE);
    assert_int_equal(done(s, c, 1, 0, 0, 0).kind, A2W_DONE);
    a2__sched_counts(s, &st);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.running, 0);
    a2__sched_free(s);
}

/* A session named while it runs is not run twice at once: it runs once
 * more when its run ends, behind what was queued meanwhile. */
static void test_named_while_running(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 0, 0), 1);
    a2__run run;
    a2__job *a = take(s, "a", &run);
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 9, 0), 0);
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 0, 0), 0);
    assert_int_equal(a2__sched_add(s, "b", 0, 1, 0, 0), 1);
    a2__next n = done(s, a, 1, 0, 0, 0);
    assert_int_equal(n.kind, A2W_RUN_AGAIN);
    a2__job *b = take(s, "b", &run);
    a = take(s, "a", &run);
    assert_int_equal(run.wake_log, 1);
    assert_int_equal(run.xid, 9);
    assert_int_equal(done(s, b, 1, 0, 0, 0).kind, A2W_DONE);
    assert_int_equal(done(s, a, 1, 0, 0, 0).kind, A2W_DONE);
    a2__sched_free(s);
}

/* The index log wake-ups named (where a new log cursor starts): the
 * earliest since the last run goes with the next one, and is kept with the
 * log wake-up for a run scheduled after one that did not end it. */
static void test_log_from(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    a2__run run;
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 5, 7), 1);
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 6, 3), 0);
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 7, 9), 0);
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 8, 0), 0); /* a wake */
    a2__job *a = take(s, "a", &run);
    assert_int_equal(run.wake_log, 1);
    assert_int_equal(run.log_from, 3);
    /* named again while it runs: the run after it has both */
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 9, 12), 0);
    assert_int_equal(done(s, a, 0, 0, 0, 0).kind, A2W_RUN_AGAIN);
    a = take(s, "a", &run);
    assert_int_equal(run.log_from, 3);
    assert_int_equal(done(s, a, 1, 0, 0, 0).kind, A2W_DONE);
    /* a wake-up of another kind: none */
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 10, 0), 1);
    a = take(s, "a", &run);
    assert_int_equal(run.wake_log, 0);
    assert_int_equal(run.log_from, 0);
    assert_int_equal(done(s, a, 1, 0, 0, 0).kind, A2W_DONE);
    a2__sched_free(s);
}

/* Timers: a wake-up without an xid that found nothing is looked at again
 * after 20, 40 and 80 ms, then forgotten; one with an xid is not (the
 * store waited for its commit). Due timers join the queue in one go. */
static void test_recheck_timers(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    a2__run run;
    int64_t now = 1000, next = 0;
    assert_int_equal(a2__sched_add(s, "a", 1, 1, 0, 0), 1);
    const int64_t delays[] = {20, 40, 80};
    for (int i = 0; i < 3; i++) {
        a2__job *a = take(s, "a", &run);
        assert_int_equal(run.wake_log, 1); /* kept for each recheck */
        a2__next n = done(s, a, 0, 0, 0, now);
        assert_int_equal(n.kind, A2W_TIMER);
        assert_int_equal(n.delay_ms, delays[i]);
        assert_int_equal(a2__sched_fire(s, now + delays[i] - 1, &next), 0);
        assert_int_equal(next, now + delays[i]);
        assert_null(a2__sched_take(s, &run));
        now += delays[i];
        assert_int_equal(a2__sched_fire(s, now, &next), 1);
        assert_int_equal(next, -1);
    }
    a2__job *a = take(s, "a", &run);
    assert_int_equal(done(s, a, 0, 0, 0, now).kind, A2W_DONE);

    /* With the wake-up's xid: nothing to look at again. */
    assert_int_equal(a2__sched_add(s, "x", 0, 1, 42, 0), 1);
    a2__job *x = take(s, "x", &run);
    assert_int_equal(run.xid, 42);
    assert_int_equal(done(s, x, 0, 0, 0, now).kind, A2W_DONE);
    /* A run nobody woke that found nothing: forgotten. */
    assert_int_equal(a2__sched_add(s, "y", 0, 0, 0, 0), 1);
    a2__job *y = take(s, "y", &run);
    assert_int_equal(done(s, y, 0, 0, 0, now).kind, A2W_DONE);

    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.rechecks, 3);
    assert_int_equal(st.timer_runs, 3);
    assert_int_equal(st.sessions, 0);
    a2__sched_free(s);
}

/* A busy session runs again at its retry_at (+5 ms), a failed run after
 * A2W_STORE_RETRY_MS; a wake-up meanwhile runs it at once and cancels the
 * timer. */
static void test_retry_and_failure_timers(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    a2__run run;
    int64_t next = 0;
    assert_int_equal(a2__sched_add(s, "busy", 0, 1, 0, 0), 1);
    assert_int_equal(a2__sched_add(s, "down", 0, 1, 0, 0), 1);
    a2__job *busy = take(s, "busy", &run);
    a2__job *down = take(s, "down", &run);
    /* now_real is 100000 + now_mono (done above): due in 250 ms */
    a2__next n = done(s, busy, 1, 0, 100000 + 250, 0);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, 255);
    n = done(s, down, 0, 1, 0, 0);
    assert_int_equal(n.kind, A2W_TIMER);
    assert_int_equal(n.delay_ms, A2W_STORE_RETRY_MS);
    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.timers, 2);
    assert_int_equal(st.sessions, 2);

    assert_int_equal(a2__sched_fire(s, 254, &next), 0);
    assert_int_equal(next, 255);
    assert_int_equal(a2__sched_fire(s, 255, &next), 1);
    assert_int_equal(next, A2W_STORE_RETRY_MS);
    busy = take(s, "busy", &run);
    assert_int_equal(run.woken, 1); /* still the wake-up's session */
    assert_int_equal(done(s, busy, 1, 0, 0, 300).kind, A2W_DONE);

    /* A wake-up for "down" before its timer: queued now, timer dropped. */
    assert_int_equal(a2__sched_add(s, "down", 0, 1, 0, 0), 1);
    a2__sched_counts(s, &st);
    assert_int_equal(st.timers, 0);
    down = take(s, "down", &run);
    assert_int_equal(done(s, down, 1, 0, 0, 400).kind, A2W_DONE);
    assert_int_equal(a2__sched_fire(s, 5000, &next), 0);
    assert_int_equal(next, -1);
    assert_null(a2__sched_take(s, &run));
    a2__sched_free(s);
}

/* Stopped: nothing is added or taken, and a run that ends is forgotten. */
static void test_stop(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    a2__run run;
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 0, 0), 1);
    assert_int_equal(a2__sched_add(s, "b", 0, 1, 0, 0), 1);
    a2__job *a = take(s, "a", &run);
    assert_int_equal(a2__sched_add(s, "a", 0, 1, 0, 0), 0);
    a2__sched_stop(s);
    assert_int_equal(a2__sched_add(s, "c", 0, 1, 0, 0), A2_WORKER_ESTOPPED);
    assert_null(a2__sched_take(s, &run));
    assert_int_equal(done(s, a, 0, 1, 0, 0).kind, A2W_DONE);
    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.sessions, 1); /* b, freed with the table */
    assert_int_equal(st.running, 0);
    a2__sched_free(s);
    a2__sched_free(NULL);
}

/* Many sessions: the table grows and keeps every one once, in order. */
static void test_many_sessions(void **state)
{
    (void)state;
    a2__sched *s = a2__sched_new();
    char name[32];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 2000; i++) {
            snprintf(name, sizeof name, "s-%d", i);
            assert_int_equal(a2__sched_add(s, name, 0, 1, 0, 0),
                             round == 0 ? 1 : 0);
        }
    a2__run run;
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "s-%d", i);
        a2__job *j = take(s, name, &run);
        assert_int_equal(done(s, j, 1, 0, 0, 0).kind, A2W_DONE);
    }
    assert_null(a2__sched_take(s, &run));
    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.merged, 2000);
    a2__sched_free(s);
}

/* Many sessions held until times in a scrambled order: they fire in the
 * order of their times, each once, whatever order their timers were set
 * and moved in; a session woken before its time runs now, its timer gone. */
static void test_many_timers_in_order(void **state)
{
    (void)state;
    enum { N = 5000 };
    a2__sched *s = a2__sched_new();
    char name[32];
    a2__run run;
    int64_t next;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t-%d", i);
        assert_int_equal(a2__sched_add(s, name, 0, 1, 0, 0), 1);
    }
    /* session i due at 1000 + (i * 7919) % N: every time once */
    for (int i = 0; i < N; i++) {
        a2__job *j = a2__sched_take(s, &run);
        assert_non_null(j);
        int k = atoi(run.session + 2);
        done(s, j, 1, 0, 100000 + 1000 + (k * 7919) % N, 0);
    }
    a2_worker_pool_stats st = {0};
    a2__sched_counts(s, &st);
    assert_int_equal(st.timers, N);
    /* every tenth session woken before its time: queued now */
    for (int i = 0; i < N; i += 10) {
        snprintf(name, sizeof name, "t-%d", i);
        assert_int_equal(a2__sched_add(s, name, 0, 1, 0, 0), 1);
    }
    a2__sched_counts(s, &st);
    assert_int_equal(st.timers, N - N / 10);
    for (int i = 0; i < N / 10; i++) {
        a2__job *j = a2__sched_take(s, &run);
        assert_non_null(j);
        assert_int_equal(atoi(run.session + 2) % 10, 0);
        assert_int_equal(done(s, j, 1, 0, 0, 0).kind, A2W_DONE);
    }
    /* the rest fire in the order of their times, a few at a time */
    int64_t last_due = -1;
    int fired_total = 0;
    for (int64_t now = 0; now <= 1000 + N; now += 3) {
        fired_total += a2__sched_fire(s, 5 + now, &next);
        a2__job *j;
        while ((j = a2__sched_take(s, &run))) {
            int k = atoi(run.session + 2);
            int64_t due = 1000 + (k * 7919) % N;
            assert_true(k % 10 != 0);
            assert_true(due <= now && due >= last_due);
            last_due = due;
            assert_int_equal(done(s, j, 1, 0, 0, now).kind, A2W_DONE);
        }
        if (next >= 0)
            assert_true(next > 5 + now);
    }
    assert_int_equal(fired_total, N - N / 10);
    a2__sched_counts(s, &st);
    assert_int_equal(st.timers, 0);
    assert_int_equal(st.sessions, 0);
    a2__sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_recheck_keeps_log_wake),
            cmocka_unit_test(test_reschedules_keep_log_wake),
            cmocka_unit_test(test_settled),
        cmocka_unit_test(test_partial_runs_to_its_end),
            cmocka_unit_test(test_fifo_and_merging),
            cmocka_unit_test(test_named_while_running),
            cmocka_unit_test(test_recheck_timers),
            cmocka_unit_test(test_log_from),
            cmocka_unit_test(test_retry_and_failure_timers),
            cmocka_unit_test(test_stop),
            cmocka_unit_test(test_many_sessions),
            cmocka_unit_test(test_many_timers_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
