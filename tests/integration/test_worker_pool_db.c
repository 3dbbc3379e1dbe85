/*
 * a2_worker_pool against a real store: a resync queues every pending
 * session, at most `slots` handlers run at once (each on its slot's
 * number), a failed run is retried on the pool's timer, a wake-up without
 * an xid that finds nothing is looked at again three times, events of other
 * consumers are ignored, sweeps and resyncs run, each run is announced to
 * run_start on its slot's thread, empty runs are counted, and a stopped
 * pool refuses calls; woken sessions queued while every slot is busy run
 * together after quick handlers, one by one after slow ones.
 */
#include "a2/worker.h"
#include "a2test.h"
#include "store_fixture.h"
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int slot_seen[8];
static int calls;
static int f_calls;
static int running_now, max_running;
static pthread_t run_thread[8]; /* the thread of each slot's run_start */
static size_t run_started;      /* sessions run_start announced */
static int off_thread;          /* handler calls off their run's thread */

static void run_start(void *ctx, int slot, size_t nsessions)
{
    (void)ctx;
    pthread_mutex_lock(&mu);
    run_thread[slot] = pthread_self();
    run_started += nsessions;
    pthread_mutex_unlock(&mu);
}

/* Appends a job to session for consumer (NULL: for no target, a log
 * consumer's). */
static void append_for(const char *session, const char *consumer)
{
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_target t = {.consumer = consumer};
    a2_append_event e = {.type = "job",
                         .payload = "{}",
                         .targets = consumer ? &t : NULL,
                         .ntargets = consumer ? 1 : 0};
    a2_events out = {0};
    assert_int_equal(a2_store_append(s, session, &e, 1, NULL, &out), 0);
    a2_events_free(&out);
    a2_store_close(s);
}

static int handler(void *ctx, int slot, const a2_head *h,
                   a2_worker_reply *reply)
{
    (void)ctx;
    pthread_mutex_lock(&mu);
    assert_true(slot >= 1 && slot <= 3);
    slot_seen[slot]++;
    off_thread += !pthread_equal(run_thread[slot], pthread_self());
    calls++;
    running_now++;
    if (running_now > max_running)
        max_running = running_now;
    int fail = strcmp(h->event.session_id, "f") == 0 && f_calls++ == 0;
    pthread_mutex_unlock(&mu);
    usleep(50000);
    pthread_mutex_lock(&mu);
    running_now--;
    pthread_mutex_unlock(&mu);
    if (fail) {
        a2_worker_reply_error(reply, "first time fails");
        return 1;
    }
    return 0;
}

static void logit(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "log: %s\n", line);
}

static void wait_stats(a2_worker_pool *p, a2_worker_pool_stats *st,
                       uint64_t completed, int ms)
{
    int64_t end = a2_test_now_ms() + ms;
    for (;;) {
        a2_worker_pool_get_stats(p, st);
        if (st->completed >= completed && st->running == 0 && st->queued == 0)
            return;
        if (a2_test_now_ms() > end)
            fail_msg("completed %llu of %llu",
                     (unsigned long long)st->completed,
                     (unsigned long long)completed);
        usleep(10000);
    }
}

static void test_pool(void **state)
{
    (void)state;
    a2_consumer c = {.name = "pool"};
    a2_worker_pool_options o = {.db = a2_test_db(),
                                .name = "t",
                                .consumers = &c,
                                .nconsumers = 1,
                                .slots = 3,
                                .retry_after_ms = 200,
                                .handler = handler,
                                .run_start = run_start,
                                .log = logit};
    char err[256];
    a2_worker_pool *p = a2_worker_pool_new(&o, err, sizeof err);
    assert_non_null(p);
    for (int i = 0; i < 5; i++) {
        char s[16];
        snprintf(s, sizeof s, "s%d", i);
        append_for(s, "pool");
    }
    append_for("f", "pool");
    append_for("other", "nobody");
    size_t n = 0;
    assert_int_equal(a2_worker_pool_resync(p, NULL, &n), 0);
    assert_int_equal(n, 6);
    assert_int_equal(a2_worker_pool_resync(p, "nobody", &n), A2_WORKER_EINVAL);
    a2_worker_pool_stats st;
    wait_stats(p, &st, 6, 30000);
    assert_int_equal(st.failed, 1);
    assert_true(st.timer_runs >= 1);
    assert_int_equal(st.sessions, 0);
    assert_true(max_running >= 1 && max_running <= 3);
    printf("slots %d %d %d, max_running %d, runs %llu timer_runs %llu\n",
           slot_seen[1], slot_seen[2], slot_seen[3], max_running,
           (unsigned long long)st.runs, (unsigned long long)st.timer_runs);

    /* Every run was announced to run_start on the thread of its handlers. */
    pthread_mutex_lock(&mu);
    assert_int_equal(run_started, st.runs);
    assert_int_equal(off_thread, 0);
    pthread_mutex_unlock(&mu);

    /* A wake-up with nothing there and no xid: rechecked 3 times, four
     * woken runs that claimed nothing. */
    a2_worker_pool_stats before = st;
    assert_int_equal(a2_worker_pool_wake(p, "empty", false, 0), 0);
    int64_t end = a2_test_now_ms() + 20000;
    do {
        usleep(10000);
        a2_worker_pool_get_stats(p, &st);
    } while ((st.rechecks < 3 || st.sessions > 0) && a2_test_now_ms() < end);
    assert_int_equal(st.rechecks, 3);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.empty_runs - before.empty_runs, 4);
    assert_int_equal(st.empty_woken_runs - before.empty_woken_runs, 4);

    /* Events: another consumer's ignored, a sweep runs. */
    append_for("sw", "pool");
    a2_worker_event ev = {.type = A2_WORKER_EV_WAKE,
                          .consumer = "nobody",
                          .session = "other"};
    assert_int_equal(a2_worker_pool_event(p, &ev), 0);
    ev = (a2_worker_event){
            .type = A2_WORKER_EV_SWEEP, .consumer = "pool", .session = "sw"};
    assert_int_equal(a2_worker_pool_event(p, &ev), 0);
    wait_stats(p, &st, 7, 30000);
    const char *list[] = {"s1"};
    append_for("s1", "pool");
    ev = (a2_worker_event){.type = A2_WORKER_EV_RESYNC,
                           .consumer = "pool",
                           .sessions = list,
                           .nsessions = 1};
    assert_int_equal(a2_worker_pool_event(p, &ev), 0);
    wait_stats(p, &st, 8, 30000);
    append_for("s2", "pool");
    ev = (a2_worker_event){.type = A2_WORKER_EV_RESYNC,
                           .consumer = "pool",
                           .all_sessions = true};
    assert_int_equal(a2_worker_pool_event(p, &ev), 0);
    wait_stats(p, &st, 9, 30000);
    a2_worker_pool_stop(p);
    assert_int_equal(a2_worker_pool_wake(p, "x", false, 0), A2_WORKER_ESTOPPED);
    assert_int_equal(a2_worker_pool_resync(p, NULL, NULL), A2_WORKER_ESTOPPED);
    a2_worker_pool_stop(p);
    a2_worker_pool_free(p);
}

/* ── woken sessions run together ──────────────────────────────────────── */

static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;
static char order[8][16]; /* the sessions of the handlers' calls */
static int norder;

static int slow_ms; /* every handler but the gate's takes this long */

/* Session "gate" waits until the gate opens; every call is recorded. */
static int gate_handler(void *ctx, int slot, const a2_head *h,
                        a2_worker_reply *reply)
{
    (void)ctx;
    (void)slot;
    (void)reply;
    pthread_mutex_lock(&mu);
    if (norder < 8)
        snprintf(order[norder++], sizeof order[0], "%s", h->event.session_id);
    int gate = strncmp(h->event.session_id, "gate", 4) == 0;
    while (gate && !gate_open)
        pthread_cond_wait(&gate_cv, &mu);
    pthread_mutex_unlock(&mu);
    if (!gate && slow_ms)
        usleep((useconds_t)slow_ms * 1000);
    return 0;
}

/* With one slot busy with session gate<prefix> while five sessions are
 * woken, then freed: the handlers run in the order the sessions were
 * woken, and the pool's stats after all six. log: the consumer is a log
 * consumer of the jobs (they target none) and the wake-ups are log ones. */
static void run_gated(const char *prefix, bool log, a2_worker_pool_stats *st)
{
    static const a2_log_spec spec = {.lane = "main", .backfill = true};
    a2_consumer c = {.name = "tog", .log = log ? &spec : NULL};
    const char *target = log ? NULL : "tog";
    a2_worker_pool_options o = {.db = a2_test_db(),
                                .name = prefix,
                                .consumers = &c,
                                .nconsumers = 1,
                                .slots = 1,
                                .handler = gate_handler,
                                .log = logit};
    char err[256];
    a2_worker_pool *p = a2_worker_pool_new(&o, err, sizeof err);
    assert_non_null(p);
    norder = 0;
    gate_open = 0;
    char gate[32];
    snprintf(gate, sizeof gate, "gate%s", prefix);
    append_for(gate, target);
    assert_int_equal(a2_worker_pool_wake(p, gate, log, 0), 0);
    int64_t end = a2_test_now_ms() + 30000;
    for (;;) { /* the gate's handler has started */
        pthread_mutex_lock(&mu);
        int started = norder;
        pthread_mutex_unlock(&mu);
        if (started == 1)
            break;
        if (a2_test_now_ms() > end)
            fail_msg("the gate's handler did not start");
        usleep(10000);
    }
    for (int i = 0; i < 5; i++) {
        char s[32];
        snprintf(s, sizeof s, "%s%d", prefix, i);
        append_for(s, target);
        assert_int_equal(a2_worker_pool_wake(p, s, log, 0), 0);
    }
    pthread_mutex_lock(&mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&mu);
    wait_stats(p, st, 6, 30000);
    assert_int_equal(st->runs, 6);
    assert_int_equal(norder, 6);
    for (int i = 0; i < 5; i++) {
        char s[32];
        snprintf(s, sizeof s, "%s%d", prefix, i);
        assert_string_equal(order[i + 1], s);
    }
    a2_worker_pool_free(p);
}

/* Quick handlers: once the gate's slow run is over, the slot runs the
 * first session alone, then takes the others together (one claim and one
 * settlement round trip; fewer should a handler be descheduled for 5 ms). */
static void test_pool_together(void **state)
{
    (void)state;
    slow_ms = 0;
    a2_worker_pool_stats st;
    run_gated("t", false, &st);
    assert_true(st.together_runs >= 2 && st.together_runs <= 4);
}

/* The same with log wake-ups: each session's log cursor is brought up to
 * date in the claim of the sessions run together. */
static void test_pool_together_log(void **state)
{
    (void)state;
    slow_ms = 0;
    a2_worker_pool_stats st;
    run_gated("g", true, &st);
    assert_true(st.together_runs >= 2 && st.together_runs <= 4);
    assert_int_equal(st.completed, 6);
}

/* Slow handlers (10 ms): the slot takes one session at a time. */
static void test_pool_slow_alone(void **state)
{
    (void)state;
    slow_ms = 10;
    a2_worker_pool_stats st;
    run_gated("u", false, &st);
    assert_int_equal(st.together_runs, 0);
}

/* ── sessions no wake-up named run to their end ──────────────────────── */

static int64_t lane_last[40]; /* per session: the index last run */
static int lane_disorder;

static int lane_handler(void *ctx, int slot, const a2_head *h,
                        a2_worker_reply *reply)
{
    (void)ctx;
    (void)slot;
    (void)reply;
    int i;
    assert_int_equal(sscanf(h->event.session_id, "ln%d", &i), 1);
    pthread_mutex_lock(&mu);
    if (h->event.index <= lane_last[i])
        lane_disorder++;
    lane_last[i] = h->event.index;
    pthread_mutex_unlock(&mu);
    return 0;
}

/* A resync with no a2-consumer to wake anything later: 40 sessions of 20
 * heads on one lane each, on one slot, which runs them together (a claim
 * round for several); each runs again while its claim takes heads, so
 * every lane runs to its end (past the 17 heads a run's completions claim
 * in a row), in order. */
static void test_pool_resync_runs_to_end(void **state)
{
    (void)state;
    enum { S = 40, N = 20 };
    a2_consumer c = {.name = "fifo"};
    a2_worker_pool_options o = {.db = a2_test_db(),
                                .name = "ln",
                                .consumers = &c,
                                .nconsumers = 1,
                                .slots = 1,
                                .handler = lane_handler,
                                .log = logit};
    a2_store *st = a2_test_store_open(a2_test_db());
    a2_target t = {.consumer = "fifo", .lane = "q"};
    a2_append_event evs[N];
    for (int k = 0; k < N; k++)
        evs[k] = (a2_append_event){.type = "job", .targets = &t,
                                   .ntargets = 1};
    for (int i = 0; i < S; i++) {
        char s[16];
        snprintf(s, sizeof s, "ln%d", i);
        a2_events out = {0};
        assert_int_equal(a2_store_append(st, s, evs, N, NULL, &out), 0);
        a2_events_free(&out);
    }
    a2_store_close(st);
    char err[256];
    a2_worker_pool *p = a2_worker_pool_new(&o, err, sizeof err);
    assert_non_null(p);
    size_t n = 0;
    assert_int_equal(a2_worker_pool_resync(p, NULL, &n), 0);
    assert_int_equal(n, S);
    a2_worker_pool_stats ps;
    wait_stats(p, &ps, S * N, 60000);
    assert_int_equal(ps.completed, S * N);
    assert_true(ps.together_runs > 0);
    assert_int_equal(lane_disorder, 0);
    for (int i = 0; i < S; i++)
        assert_int_equal(lane_last[i], N);
    a2_worker_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pool),
                                       cmocka_unit_test(test_pool_together),
                                       cmocka_unit_test(test_pool_together_log),
                                       cmocka_unit_test(test_pool_slow_alone),
                                       cmocka_unit_test(test_pool_resync_runs_to_end)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
