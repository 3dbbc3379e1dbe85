/*
 * liba2store under concurrency: threads on separate connections appending,
 * claiming and completing, and a bounded mixed workload of every operation
 * (A2_STORE_SOAK_SECONDS, 30 by default) that must end with no deadlock and
 * every invariant intact.
 */
#include "a2/state.h"
#include "a2/store.h"
#include "a2test.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char prefix[64];

/* ── appends ─────────────────────────────────────────────────────────── */

#define APPEND_THREADS     16
#define APPENDS_PER_THREAD 25

typedef struct append_job {
    int no;
    int nsessions; /* 1: all in one session; else session = call % n */
    int64_t appended;
    int errors;
    char error[600];
} append_job;

static void *append_worker(void *arg)
{
    append_job *j = arg;
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, a2_test_db(), &err) != 0) {
        j->errors++;
        snprintf(j->error, sizeof j->error, "%s", err.message);
        return NULL;
    }
    unsigned seed = (unsigned)j->no * 7919u + 1;
    for (int i = 0; i < APPENDS_PER_THREAD; i++) {
        char session[96];
        snprintf(session, sizeof session, "%s-app%d-%d", prefix, j->nsessions,
                 j->nsessions == 1 ? 0 : (i + j->no) % j->nsessions);
        size_t n = 1 + (size_t)(rand_r(&seed) % 3);
        a2_append_event ev[3];
        a2_target tg = {.consumer = "c", .lane = "L"};
        for (size_t k = 0; k < n; k++)
            ev[k] = (a2_append_event){.type = "t",
                                      .payload = "{\"k\": 1}",
                                      .targets = &tg,
                                      .ntargets = 1};
        a2_events out;
        int rc = a2_store_append(s, session, ev, n, NULL, &out);
        if (rc != 0) {
            j->errors++;
            snprintf(j->error, sizeof j->error, "%s",
                     a2_store_last_error(s)->message);
            continue;
        }
        for (size_t k = 1; k < out.count; k++)
            if (out.items[k].index != out.items[k - 1].index + 1)
                j->errors++;
        j->appended += (int64_t)out.count;
        a2_events_free(&out);
    }
    a2_store_close(s);
    return NULL;
}

static void run_appenders(int nsessions)
{
    pthread_t th[APPEND_THREADS];
    append_job jobs[APPEND_THREADS];
    for (int i = 0; i < APPEND_THREADS; i++) {
        jobs[i] = (append_job){.no = i, .nsessions = nsessions};
        assert_int_equal(pthread_create(&th[i], NULL, append_worker, &jobs[i]),
                         0);
    }
    int64_t total = 0;
    for (int i = 0; i < APPEND_THREADS; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].errors)
            fail_msg("appender %d: %d errors (%s)", i, jobs[i].errors,
                     jobs[i].error);
        total += jobs[i].appended;
    }
    PGconn *db = a2_test_connect();
    int64_t seen = 0;
    for (int k = 0; k < nsessions; k++) {
        char session[96];
        snprintf(session, sizeof session, "%s-app%d-%d", prefix, nsessions, k);
        int64_t n = a2_test_intf(db,
                                 "select count(*) from a2_events where "
                                 "session_id = '%s'",
                                 session);
        assert_true(n > 0);
        /* Dense 1..n, no duplicates. */
        assert_int_equal(a2_test_intf(db,
                                      "select max(idx) from a2_events where "
                                      "session_id = '%s'",
                                      session),
                         n);
        assert_int_equal(a2_test_intf(db,
                                      "select count(distinct idx) from "
                                      "a2_events where session_id = '%s'",
                                      session),
                         n);
        assert_int_equal(a2_test_intf(db,
                                      "select min(idx) from a2_events where "
                                      "session_id = '%s'",
                                      session),
                         1);
        /* Every event queued in the lane, one run started. */
        assert_int_equal(a2_test_intf(db,
                                      "select count(*) from a2_lane_events "
                                      "where session_id = '%s'",
                                      session),
                         n);
        assert_int_equal(a2_test_intf(db,
                                      "select count(*) from a2_cursors where "
                                      "session_id = '%s' and head is not null",
                                      session),
                         1);
        seen += n;
    }
    assert_int_equal(seen, total);
    PQfinish(db);
}

static void test_appends_one_session(void **state)
{
    (void)state;
    run_appenders(1);
}

static void test_appends_many_sessions(void **state)
{
    (void)state;
    run_appenders(16);
}

/* ── lock order of the fences ─────────────────────────────────────────── */

/*
 * A completion locks its cursor row and then waits for the session lock; an
 * append or a clear fenced on the same attempt must not hold the session
 * lock while it waits for that row. A third connection holds the session
 * lock so that the fenced call queues first and the completion second.
 */
typedef struct fence_call {
    a2_store *store;
    const char *session;
    a2_attempt_ref ref;
    int op; /* 0: append caused by ref, 1: clear caused by ref, 2: complete */
    int rc, outcome;
    char sqlstate[6];
    char message[512];
} fence_call;

static void *fence_run(void *arg)
{
    fence_call *c = arg;
    a2_cause cause = {c->ref.consumer, c->ref.lane, c->ref.index,
                      c->ref.attempt};
    a2_target tg = {.consumer = "fo"};
    a2_consumer cons[] = {{.name = "fc"}, {.name = "fo"}};
    if (c->op == 0) {
        a2_append_event ev = {.type = "caused",
                              .cause = &cause,
                              .targets = &tg,
                              .ntargets = 1};
        a2_append_options opts = {.consumers = cons, .nconsumers = 2};
        a2_events out;
        c->rc = a2_store_append(c->store, c->session, &ev, 1, &opts, &out);
        if (c->rc == 0)
            a2_events_free(&out);
    } else if (c->op == 1) {
        a2_clear_result clr;
        c->rc = a2_store_clear(c->store, c->session, A2_STORE_NONE, &cause,
                               &clr);
    } else {
        a2_append_event kid = {.type = "child",
                               .id = "fence-child",
                               .targets = &tg,
                               .ntargets = 1};
        a2_complete_result comp;
        c->rc = a2_store_complete(c->store, c->session, &c->ref, &kid, 1, cons,
                                  2, &comp);
        if (c->rc == 0) {
            c->outcome = comp.outcome;
            a2_complete_result_free(&comp);
        }
    }
    const a2_store_error *e = a2_store_last_error(c->store);
    snprintf(c->sqlstate, sizeof c->sqlstate, "%s", c->rc ? e->sqlstate : "");
    snprintf(c->message, sizeof c->message, "%s", c->rc ? e->message : "");
    return NULL;
}

/* Waits (at most 10 s) until n backends of this database wait on a lock. */
static void wait_for(PGconn *db, int n)
{
    if (a2_test_lock_waiters(db, "datname = current_database()", n, 10000) < n)
        fail_msg("%d backends never waited on a lock", n);
}

static void fence_against_completion(int op)
{
    char session[96];
    snprintf(session, sizeof session, "%s-fence-%d", prefix, op);
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_target tg = {.consumer = "fc", .lane = "L"};
    a2_append_event ev = {.type = "work", .targets = &tg, .ntargets = 1};
    a2_consumer cons[] = {{.name = "fc"}};
    a2_append_options opts = {.consumers = cons, .nconsumers = 1};
    a2_events out;
    assert_int_equal(a2_store_append(s, session, &ev, 1, &opts, &out), 0);
    a2_events_free(&out);
    a2_claim_request req = {.holder = "fence-holder",
                            .ttl_ms = 600000,
                            .consumers = cons,
                            .nconsumers = 1};
    a2_claim_result cr;
    assert_int_equal(a2_store_claim(s, session, &req, &cr), 0);
    assert_int_equal(cr.heads.count, 1);
    a2_attempt_ref ref = {"fc", "L", cr.heads.items[0].event.index,
                          cr.heads.items[0].dispatch.attempt_count};
    a2_claim_result_free(&cr);

    PGconn *db = a2_test_connect();
    PGconn *blocker = a2_test_connect();
    a2_test_hold_session_lock(blocker, session);

    fence_call fenced = {.store = a2_test_store_open(a2_test_db()),
                         .session = session,
                         .ref = ref,
                         .op = op};
    fence_call done = {.store = a2_test_store_open(a2_test_db()),
                       .session = session,
                       .ref = ref,
                       .op = 2};
    pthread_t tf, td;
    assert_int_equal(pthread_create(&tf, NULL, fence_run, &fenced), 0);
    wait_for(db, 1);
    assert_int_equal(pthread_create(&td, NULL, fence_run, &done), 0);
    wait_for(db, 2);
    a2_test_exec(blocker, "commit");
    pthread_join(tf, NULL);
    pthread_join(td, NULL);
    print_message("%s: fenced rc %d %s, completion rc %d outcome %d %s\n",
                  op == 0 ? "append" : "clear", fenced.rc, fenced.message,
                  done.rc, done.outcome, done.message);
    assert_string_not_equal(fenced.sqlstate, "40P01");
    assert_string_not_equal(done.sqlstate, "40P01");
    assert_int_equal(fenced.rc, 0);
    assert_int_equal(done.rc, 0);
    /* The append leaves the head held; the clear releases it. */
    assert_int_equal(done.outcome,
                     op == 0 ? A2_ATTEMPT_COMPLETED : A2_ATTEMPT_SUPERSEDED);
    a2_store_close(fenced.store);
    a2_store_close(done.store);
    a2_store_close(s);
    PQfinish(blocker);
    PQfinish(db);
}

static void test_append_fence_against_completion(void **state)
{
    (void)state;
    fence_against_completion(0);
}

static void test_clear_fence_against_completion(void **state)
{
    (void)state;
    fence_against_completion(1);
}

/* A claim that waited on its only eligible head and lost it to another
 * claim reports the session busy until that claim's lease ends, as read
 * after the wait, not settled as its snapshot would say. */
typedef struct claim_call {
    a2_store *store;
    const char *session;
    int rc;
    a2_claim_result cr;
} claim_call;

static void *claim_run(void *arg)
{
    claim_call *c = arg;
    a2_consumer cons[] = {{.name = "lc"}};
    a2_claim_request req = {.holder = "loser",
                            .ttl_ms = 60000,
                            .consumers = cons,
                            .nconsumers = 1};
    c->rc = a2_store_claim(c->store, c->session, &req, &c->cr);
    return NULL;
}

static void test_claim_loses_race(void **state)
{
    (void)state;
    char session[96];
    snprintf(session, sizeof session, "%s-lost", prefix);
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_target tg = {.consumer = "lc"};
    a2_append_event ev = {.type = "work", .targets = &tg, .ntargets = 1};
    a2_events out;
    assert_int_equal(a2_store_append(s, session, &ev, 1, NULL, &out), 0);
    a2_events_free(&out);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t expires = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 600000;
    PGconn *db = a2_test_connect();
    PGconn *other = a2_test_connect();
    char sql[512];
    snprintf(sql, sizeof sql,
             "update a2_cursors set attempt_count = attempt_count + 1, "
             "claim_holder = 'winner', claim_expires_at = %" PRId64
             " where session_id = '%s' and consumer = 'lc'",
             expires, session);
    a2_test_exec(other, "begin");
    a2_test_exec(other, sql);
    claim_call c = {.store = a2_test_store_open(a2_test_db()),
                    .session = session};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, claim_run, &c), 0);
    wait_for(db, 1);
    a2_test_exec(other, "commit");
    pthread_join(t, NULL);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.cr.heads.count, 0);
    assert_int_equal(c.cr.outcome, A2_CLAIM_BUSY);
    assert_int_equal(c.cr.retry_at, expires);
    a2_claim_result_free(&c.cr);
    /* Nothing eligible and nothing held: settled, in one statement. */
    snprintf(sql, sizeof sql,
             "update a2_cursors set claim_expires_at = null, claim_holder = "
             "null, failed_at = 1 where session_id = '%s'",
             session);
    a2_test_exec(db, sql);
    claim_call d = {.store = c.store, .session = session};
    claim_run(&d);
    assert_int_equal(d.rc, 0);
    assert_int_equal(d.cr.outcome, A2_CLAIM_SETTLED);
    a2_claim_result_free(&d.cr);
    a2_store_close(c.store);
    a2_store_close(s);
    PQfinish(other);
    PQfinish(db);
}

/* ── claim races ─────────────────────────────────────────────────────── */

#define RACE_SESSIONS 4
#define RACE_EVENTS   250 /* per session: 1000 heads, plus the log's */
#define CLAIMERS      8

typedef struct lane_state {
    int64_t expected[RACE_EVENTS + 1]; /* the lane's events, in order */
    int n, next;
    bool running;
} lane_state;

typedef struct race {
    pthread_mutex_t mu;
    /* Per session: lanes L1, L2 of "cl", the log of "lg"; runs of "cc". */
    lane_state lanes[RACE_SESSIONS][3];
    int done_count[RACE_SESSIONS][RACE_EVENTS + 1][3]; /* cc, cl, lg */
    int violations;
    char violation[256];
    int errors;
    char error[600];
    int64_t completions;
} race;

static race R;

static a2_log_spec race_log;
static const char *race_log_types[] = {"even"};
static a2_consumer race_consumers[3];

static void race_violation(const char *fmt, ...)
        __attribute__((format(printf, 1, 2)));
static void race_violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    R.violations++;
    vsnprintf(R.violation, sizeof R.violation, fmt, ap);
    va_end(ap);
}

static int lane_slot(const a2_head *h)
{
    if (strcmp(h->dispatch.consumer, "lg") == 0)
        return 2;
    return strcmp(h->dispatch.lane, "L1") == 0 ? 0 : 1;
}

static void *claimer(void *arg)
{
    int no = (int)(intptr_t)arg;
    a2_store *s = a2_test_store_open(a2_test_db());
    char holder[32];
    snprintf(holder, sizeof holder, "holder-%d", no);
    int settled_rounds = 0;
    for (int round = 0; settled_rounds < 3 && round < 100000; round++) {
        bool all_settled = true;
        for (int k = 0; k < RACE_SESSIONS; k++) {
            int sess = (k + no) % RACE_SESSIONS;
            char session[96];
            snprintf(session, sizeof session, "%s-race-%d", prefix, sess);
            a2_claim_request req = {.holder = holder,
                                    .ttl_ms = 600000,
                                    .consumers = race_consumers,
                                    .nconsumers = 3};
            a2_claim_result cr;
            if (a2_store_claim(s, session, &req, &cr) != 0) {
                pthread_mutex_lock(&R.mu);
                R.errors++;
                snprintf(R.error, sizeof R.error, "claim: %s",
                         a2_store_last_error(s)->message);
                pthread_mutex_unlock(&R.mu);
                continue;
            }
            if (cr.outcome != A2_CLAIM_SETTLED)
                all_settled = false;
            pthread_mutex_lock(&R.mu);
            for (size_t i = 0; i < cr.heads.count; i++) {
                a2_head *h = &cr.heads.items[i];
                if (h->dispatch.attempt_count != 1)
                    race_violation("attempt %d at %" PRId64,
                                   h->dispatch.attempt_count, h->event.index);
                if (strcmp(h->dispatch.consumer, "cc") == 0)
                    continue;
                if (strcmp(h->dispatch.consumer, "lg") == 0 &&
                    strcmp(h->event.type, "even") != 0)
                    race_violation("log cursor took a %s event", h->event.type);
                lane_state *l = &R.lanes[sess][lane_slot(h)];
                if (l->running)
                    race_violation("lane %s of %s ran two heads at once",
                                   h->dispatch.cursor_key, session);
                l->running = true;
                if (l->next >= l->n || l->expected[l->next] != h->event.index)
                    race_violation("lane %s ran %" PRId64 " out of order",
                                   h->dispatch.cursor_key, h->event.index);
                l->next++;
            }
            pthread_mutex_unlock(&R.mu);
            for (size_t i = 0; i < cr.heads.count; i++) {
                a2_head *h = &cr.heads.items[i];
                bool lane = strcmp(h->dispatch.consumer, "cc") != 0;
                if (lane) {
                    /* Released before the completion commits: the lane's
                     * next head cannot be claimed before then. */
                    pthread_mutex_lock(&R.mu);
                    R.lanes[sess][lane_slot(h)].running = false;
                    pthread_mutex_unlock(&R.mu);
                }
                a2_attempt_ref at = {h->dispatch.consumer, h->dispatch.lane,
                                     h->event.index, h->dispatch.attempt_count};
                a2_complete_result comp;
                int rc = a2_store_complete(s, session, &at, NULL, 0,
                                           race_consumers, 3, &comp);
                pthread_mutex_lock(&R.mu);
                if (rc != 0) {
                    R.errors++;
                    snprintf(R.error, sizeof R.error, "complete: %s",
                             a2_store_last_error(s)->message);
                } else if (comp.outcome != A2_ATTEMPT_COMPLETED) {
                    race_violation("completion of %" PRId64 " superseded",
                                   h->event.index);
                } else {
                    int slot = strcmp(h->dispatch.consumer, "cc") == 0   ? 0
                               : strcmp(h->dispatch.consumer, "cl") == 0 ? 1
                                                                         : 2;
                    R.done_count[sess][h->event.index][slot]++;
                    R.completions++;
                }
                pthread_mutex_unlock(&R.mu);
                a2_complete_result_free(&comp);
            }
            a2_claim_result_free(&cr);
        }
        settled_rounds = all_settled ? settled_rounds + 1 : 0;
        if (!all_settled)
            usleep(1000);
    }
    a2_store_close(s);
    return NULL;
}

static void test_claim_race(void **state)
{
    (void)state;
    memset(&R, 0, sizeof R);
    pthread_mutex_init(&R.mu, NULL);
    race_log =
            (a2_log_spec){.lane = "log", .types = race_log_types, .ntypes = 1};
    race_consumers[0] = (a2_consumer){.name = "cc"};
    race_consumers[1] = (a2_consumer){.name = "cl"};
    race_consumers[2] = (a2_consumer){.name = "lg", .log = &race_log};
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_target tcc = {.consumer = "cc"};
    a2_target tl1 = {.consumer = "cl", .lane = "L1"};
    a2_target tl2 = {.consumer = "cl", .lane = "L2"};
    for (int sess = 0; sess < RACE_SESSIONS; sess++) {
        char session[96];
        snprintf(session, sizeof session, "%s-race-%d", prefix, sess);
        a2_append_event ev[RACE_EVENTS];
        for (int i = 1; i <= RACE_EVENTS; i++) {
            const a2_target *t = i % 3 == 0 ? &tcc : i % 3 == 1 ? &tl1 : &tl2;
            ev[i - 1] = (a2_append_event){.type = i % 2 ? "odd" : "even",
                                          .targets = t,
                                          .ntargets = 1};
            if (i % 3)
                R.lanes[sess][i % 3 - 1]
                        .expected[R.lanes[sess][i % 3 - 1].n++] = i;
            if (i % 2 == 0)
                R.lanes[sess][2].expected[R.lanes[sess][2].n++] = i;
        }
        /* In batches, so lanes start while earlier heads wait. */
        for (int b = 0; b < RACE_EVENTS; b += 50) {
            a2_append_options opts = {.consumers = race_consumers,
                                      .nconsumers = 3};
            a2_events out;
            int rc = a2_store_append(s, session, ev + b, 50, &opts, &out);
            if (rc)
                fail_msg("append: %s", a2_store_last_error(s)->message);
            a2_events_free(&out);
        }
    }
    a2_store_close(s);
    pthread_t th[CLAIMERS];
    for (intptr_t i = 0; i < CLAIMERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, claimer, (void *)i), 0);
    for (int i = 0; i < CLAIMERS; i++)
        pthread_join(th[i], NULL);
    if (R.errors)
        fail_msg("%d errors: %s", R.errors, R.error);
    if (R.violations)
        fail_msg("%d violations: %s", R.violations, R.violation);
    /* Every head ran exactly once: 1000 targets plus 500 log heads. */
    assert_int_equal(R.completions,
                     RACE_SESSIONS * (RACE_EVENTS + RACE_EVENTS / 2));
    for (int sess = 0; sess < RACE_SESSIONS; sess++) {
        for (int i = 1; i <= RACE_EVENTS; i++) {
            assert_int_equal(R.done_count[sess][i][i % 3 == 0 ? 0 : 1], 1);
            assert_int_equal(R.done_count[sess][i][2], i % 2 == 0 ? 1 : 0);
        }
        for (int l = 0; l < 3; l++)
            assert_int_equal(R.lanes[sess][l].next, R.lanes[sess][l].n);
    }
    PGconn *db = a2_test_connect();
    assert_int_equal(
            a2_test_intf(db,
                         "select count(*) from a2_cursors where "
                         "session_id like '%s-race-%%' and head is not "
                         "null",
                         prefix),
            0);
    assert_int_equal(a2_test_intf(db,
                                  "select count(*) from a2_lane_events where "
                                  "session_id like '%s-race-%%' and not done",
                                  prefix),
                     0);
    PQfinish(db);
    pthread_mutex_destroy(&R.mu);
}

/* ── many lanes in one session ───────────────────────────────────────── */

#define WIDE_LANES    16
#define WIDE_PER_LANE 20
#define WIDE_CLAIMERS 16

typedef struct wide {
    pthread_mutex_t mu;
    int done[WIDE_LANES * WIDE_PER_LANE + 1];
    int errors;
    char error[600];
} wide;

static wide W;

static void *wide_claimer(void *arg)
{
    int no = (int)(intptr_t)arg;
    a2_store *s = a2_test_store_open(a2_test_db());
    char holder[32], session[96];
    snprintf(holder, sizeof holder, "wide-%d", no);
    snprintf(session, sizeof session, "%s-wide", prefix);
    int settled = 0;
    for (int round = 0; settled < 3 && round < 100000; round++) {
        a2_claim_request req = {.holder = holder, .ttl_ms = 600000};
        a2_claim_result cr;
        if (a2_store_claim(s, session, &req, &cr) != 0) {
            pthread_mutex_lock(&W.mu);
            W.errors++;
            snprintf(W.error, sizeof W.error, "claim: %s",
                     a2_store_last_error(s)->message);
            pthread_mutex_unlock(&W.mu);
            continue;
        }
        settled = cr.outcome == A2_CLAIM_SETTLED ? settled + 1 : 0;
        for (size_t i = 0; i < cr.heads.count; i++) {
            a2_head *h = &cr.heads.items[i];
            a2_attempt_ref at = {h->dispatch.consumer, h->dispatch.lane,
                                 h->event.index, h->dispatch.attempt_count};
            a2_complete_result comp;
            int rc =
                    a2_store_complete(s, session, &at, NULL, 0, NULL, 0, &comp);
            pthread_mutex_lock(&W.mu);
            if (rc != 0 || comp.outcome != A2_ATTEMPT_COMPLETED) {
                W.errors++;
                snprintf(W.error, sizeof W.error, "complete: %s",
                         rc ? a2_store_last_error(s)->message : "superseded");
            } else {
                W.done[h->event.index]++;
            }
            pthread_mutex_unlock(&W.mu);
            a2_complete_result_free(&comp);
        }
        a2_claim_result_free(&cr);
        if (cr.outcome != A2_CLAIM_CLAIMED)
            usleep(500);
    }
    a2_store_close(s);
    return NULL;
}

/* Claimers contending for the heads of many lanes of one session lock the
 * cursor rows in one order, whatever heads they saw: no deadlock. */
static void test_many_lanes_no_deadlock(void **state)
{
    (void)state;
    memset(&W, 0, sizeof W);
    pthread_mutex_init(&W.mu, NULL);
    a2_store *s = a2_test_store_open(a2_test_db());
    char session[96];
    snprintf(session, sizeof session, "%s-wide", prefix);
    static const char *lanes[WIDE_LANES] = {
            "l0", "l1", "l2",  "l3",  "l4",  "l5",  "l6",  "l7",
            "l8", "l9", "l10", "l11", "l12", "l13", "l14", "l15"};
    a2_target tg[WIDE_LANES];
    a2_append_event ev[WIDE_LANES * WIDE_PER_LANE];
    for (int i = 0; i < WIDE_LANES; i++)
        tg[i] = (a2_target){.consumer = "w", .lane = lanes[i]};
    for (int i = 0; i < WIDE_LANES * WIDE_PER_LANE; i++)
        ev[i] = (a2_append_event){
                .type = "t", .targets = &tg[i % WIDE_LANES], .ntargets = 1};
    a2_events out;
    if (a2_store_append(s, session, ev, WIDE_LANES * WIDE_PER_LANE, NULL, &out))
        fail_msg("append: %s", a2_store_last_error(s)->message);
    a2_events_free(&out);
    a2_store_close(s);
    pthread_t th[WIDE_CLAIMERS];
    for (intptr_t i = 0; i < WIDE_CLAIMERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, wide_claimer, (void *)i),
                         0);
    for (int i = 0; i < WIDE_CLAIMERS; i++)
        pthread_join(th[i], NULL);
    if (W.errors)
        fail_msg("%d errors: %s", W.errors, W.error);
    for (int i = 1; i <= WIDE_LANES * WIDE_PER_LANE; i++)
        assert_int_equal(W.done[i], 1);
    pthread_mutex_destroy(&W.mu);
}

/* ── mixed workload ──────────────────────────────────────────────────── */

#define SOAK_THREADS  8
#define SOAK_SESSIONS 6

typedef struct claim_rec {
    int session;
    char consumer[8];
    char key[24];
    int64_t index;
    int attempt;
    int64_t claimed_at;  /* the store's clock when the call began */
    int64_t returned_at; /* CLOCK_REALTIME ms when the call returned */
    bool wrong_type;
} claim_rec;

typedef struct soak {
    pthread_mutex_t mu;
    claim_rec *claims;
    size_t nclaims, cap;
    int unexpected;
    char unexpected_msg[1200];
    int64_t ops[16];
    int64_t deadlock_errors;
    int64_t pins_stored; /* write_state pins accepted */
    volatile int stop;
} soak;

static soak S;

static const char *soak_types[] = {"a", "b"};
static a2_log_spec soak_log = {.lane = "log", .types = soak_types, .ntypes = 1};
static a2_consumer soak_consumers[3] = {
        {.name = "sc"}, {.name = "sl"}, {.name = "sg", .log = &soak_log}};

static void soak_record(int sess, const a2_head *h, int64_t returned_at)
{
    pthread_mutex_lock(&S.mu);
    if (S.nclaims == S.cap) {
        size_t cap = S.cap ? S.cap * 2 : 4096;
        claim_rec *c = realloc(S.claims, cap * sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&S.mu);
            return;
        }
        S.claims = c;
        S.cap = cap;
    }
    claim_rec *r = &S.claims[S.nclaims++];
    memset(r, 0, sizeof *r);
    r->session = sess;
    snprintf(r->consumer, sizeof r->consumer, "%s", h->dispatch.consumer);
    snprintf(r->key, sizeof r->key, "%s", h->dispatch.cursor_key);
    r->index = h->event.index;
    r->attempt = h->dispatch.attempt_count;
    r->claimed_at = h->dispatch.last_claimed_at;
    r->returned_at = returned_at;
    /* The log consumer follows type "a" only. */
    r->wrong_type = strcmp(h->dispatch.consumer, "sg") == 0 &&
                    strcmp(h->event.type, "a") != 0;
    pthread_mutex_unlock(&S.mu);
}

/* Codes a racing workload may legitimately see. */
static void soak_check(a2_store *s, int rc, const char *op)
{
    if (rc == 0 || rc == A2_ESUPERSEDED_ATTEMPT || rc == A2_ESESSION_CLEARED)
        return;
    const a2_store_error *e = a2_store_last_error(s);
    pthread_mutex_lock(&S.mu);
    if (strcmp(e->sqlstate, "40P01") == 0) {
        S.deadlock_errors++;
        print_message("deadlock in %s: %s\n", op, e->message);
    }
    /* A reused id that a reclaim holds this instant. */
    if (!(rc == A2_ESTORE_UNAVAILABLE && strstr(e->message, "held"))) {
        S.unexpected++;
        snprintf(S.unexpected_msg, sizeof S.unexpected_msg, "%s: %s: %s", op,
                 a2_store_code_name(rc), e->message);
    }
    pthread_mutex_unlock(&S.mu);
}

typedef struct held {
    int session;
    a2_attempt_ref ref;
    char consumer[8], lane[8];
} held;

static void *soak_worker(void *arg)
{
    int no = (int)(intptr_t)arg;
    a2_store *s = a2_test_store_open(a2_test_db());
    unsigned seed = (unsigned)no * 104729u + 17;
    char holder[32];
    snprintf(holder, sizeof holder, "soak-%d", no);
    held mine[64];
    size_t nmine = 0;
    int idn = 0;
    while (!S.stop) {
        int sess = rand_r(&seed) % SOAK_SESSIONS;
        char session[96];
        snprintf(session, sizeof session, "%s-soak-%d", prefix, sess);
        int op = rand_r(&seed) % 100;
        int rc = 0;
        if (op < 30) { /* append, sometimes from a held claim */
            a2_target tg[2] = {
                    {.consumer = "sc"},
                    {.consumer = "sl", .lane = rand_r(&seed) % 2 ? "X" : "Y"}};
            a2_append_event ev[3];
            size_t n = 1 + (size_t)(rand_r(&seed) % 3);
            char ids[3][48];
            a2_cause cause;
            bool caused = false;
            for (size_t k = 0; k < nmine && !caused; k++)
                if (mine[k].session == sess && rand_r(&seed) % 2) {
                    cause = (a2_cause){mine[k].consumer,
                                       mine[k].lane[0] ? mine[k].lane : NULL,
                                       mine[k].ref.index, mine[k].ref.attempt};
                    caused = true;
                }
            for (size_t k = 0; k < n; k++) {
                snprintf(ids[k], sizeof ids[k], "%s-%d", holder, ++idn);
                ev[k] = (a2_append_event){
                        .type = soak_types[rand_r(&seed) % 2],
                        .payload = "{\"x\": [1, 2]}",
                        .id = rand_r(&seed) % 2 ? ids[k] : NULL,
                        .cause = caused ? &cause : NULL,
                        .targets = tg,
                        .ntargets = 1 + (size_t)(rand_r(&seed) % 2)};
            }
            a2_append_options opts = {.consumers = soak_consumers,
                                      .nconsumers = 3};
            a2_events out;
            rc = a2_store_append(s, session, ev, n, &opts, &out);
            soak_check(s, rc, "append");
            if (rc == 0) {
                for (size_t k = 1; k < out.count; k++)
                    if (out.items[k].index != out.items[k - 1].index + 1)
                        soak_check(s, A2_ESTORE_FAILED, "append not dense");
                a2_events_free(&out);
                /* Retried: a replay when every id was supplied. */
                if (rand_r(&seed) % 4 == 0) {
                    rc = a2_store_append(s, session, ev, n, &opts, &out);
                    if (rc == A2_EPARTIAL_DUPLICATE_BATCH)
                        rc = 0; /* some ids generated: mixed */
                    soak_check(s, rc, "append retry");
                    a2_events_free(&out);
                }
            }
        } else if (op < 55) { /* claim */
            a2_claim_request req = {.holder = holder,
                                    .ttl_ms = 50 + rand_r(&seed) % 200,
                                    .consumers = soak_consumers,
                                    .nconsumers = 3,
                                    .max_failures = 4};
            a2_claim_result cr;
            rc = a2_store_claim(s, session, &req, &cr);
            int64_t returned_at = a2_test_wall_ms();
            soak_check(s, rc, "claim");
            if (rc == 0) {
                for (size_t i = 0; i < cr.heads.count; i++) {
                    a2_head *h = &cr.heads.items[i];
                    soak_record(sess, h, returned_at);
                    if (nmine < 64) {
                        held *m = &mine[nmine++];
                        m->session = sess;
                        snprintf(m->consumer, sizeof m->consumer, "%s",
                                 h->dispatch.consumer);
                        snprintf(m->lane, sizeof m->lane, "%s",
                                 h->dispatch.lane ? h->dispatch.lane : "");
                        m->ref = (a2_attempt_ref){
                                m->consumer, h->dispatch.lane ? m->lane : NULL,
                                h->event.index, h->dispatch.attempt_count};
                    }
                }
                a2_claim_result_free(&cr);
            }
        } else if (op < 75 && nmine > 0) { /* complete, with children */
            size_t k = (size_t)rand_r(&seed) % nmine;
            held m = mine[k];
            mine[k] = mine[--nmine];
            m.ref.consumer = m.consumer;
            m.ref.lane = m.lane[0] ? m.lane : NULL;
            char ids[2][48];
            a2_target tg = {.consumer = "sc"};
            a2_append_event kids[2];
            size_t nk = (size_t)(rand_r(&seed) % 3);
            for (size_t i = 0; i < nk; i++) {
                snprintf(ids[i], sizeof ids[i], "%s-k%d", holder, ++idn);
                kids[i] = (a2_append_event){.type = "b",
                                            .id = ids[i],
                                            .targets = &tg,
                                            .ntargets = 1};
            }
            snprintf(session, sizeof session, "%s-soak-%d", prefix, m.session);
            a2_complete_result comp;
            rc = a2_store_complete(s, session, &m.ref, nk ? kids : NULL, nk,
                                   soak_consumers, 3, &comp);
            soak_check(s, rc, "complete");
            a2_complete_result_free(&comp);
            if (rc == 0 && rand_r(&seed) % 3 == 0) { /* unknown ack: retry */
                rc = a2_store_complete(s, session, &m.ref, nk ? kids : NULL, nk,
                                       soak_consumers, 3, &comp);
                soak_check(s, rc, "complete retry");
                a2_complete_result_free(&comp);
            }
        } else if (op < 82 && nmine > 0) { /* fail */
            size_t k = (size_t)rand_r(&seed) % nmine;
            held m = mine[k];
            mine[k] = mine[--nmine];
            m.ref.consumer = m.consumer;
            m.ref.lane = m.lane[0] ? m.lane : NULL;
            snprintf(session, sizeof session, "%s-soak-%d", prefix, m.session);
            a2_fail_request freq = {.error = "soak",
                                    .max_failures = 3,
                                    .retry_after_ms = rand_r(&seed) % 50};
            a2_fail_result fr;
            rc = a2_store_fail(s, session, &m.ref, &freq, &fr);
            soak_check(s, rc, "fail");
        } else if (op < 85 && nmine > 0) { /* renew all */
            for (size_t k = 0; k < nmine; k++) {
                mine[k].ref.consumer = mine[k].consumer;
                mine[k].ref.lane = mine[k].lane[0] ? mine[k].lane : NULL;
            }
            for (int x = 0; x < SOAK_SESSIONS; x++) {
                a2_attempt_ref refs[64];
                size_t nr = 0;
                for (size_t k = 0; k < nmine; k++)
                    if (mine[k].session == x)
                        refs[nr++] = mine[k].ref;
                if (!nr)
                    continue;
                snprintf(session, sizeof session, "%s-soak-%d", prefix, x);
                a2_renew_result rr;
                rc = a2_store_renew(s, session, holder, refs, nr, 200, 0, &rr);
                soak_check(s, rc, "renew");
                a2_renew_result_free(&rr);
            }
        } else if (op < 86) { /* forget every claim: they lapse */
            nmine = 0;
        } else if (op < 88) { /* redrive a dead letter */
            a2_heads dl;
            rc = a2_store_dead_letters(s, session, &dl);
            soak_check(s, rc, "dead_letters");
            if (rc == 0 && dl.count > 0) {
                a2_redrive_result rd;
                rc = a2_store_redrive(s, session, dl.items[0].dispatch.consumer,
                                      dl.items[0].event.index,
                                      rand_r(&seed) % 2 ? A2_REDRIVE_RETRY
                                                        : A2_REDRIVE_SKIP,
                                      soak_consumers, 3, &rd);
                soak_check(s, rc, "redrive");
            }
            a2_heads_free(&dl);
        } else if (op < 89) { /* clear */
            a2_clear_result clr;
            rc = a2_store_clear(s, session, A2_STORE_NONE, NULL, &clr);
            soak_check(s, rc, "clear");
        } else if (op < 92) { /* reclaim */
            a2_reclaim_result rr;
            rc = a2_store_reclaim(s, session, &rr);
            soak_check(s, rc, "reclaim");
        } else if (op < 94) { /* wake the log */
            a2_cursors cs;
            int64_t head;
            rc = a2_store_wake_log(s, session, &soak_consumers[2], 0, &cs, &head);
            soak_check(s, rc, "wake_log");
            a2_cursors_free(&cs);
        } else if (op < 95 && nmine > 0) { /* a snapshot pinning a head */
            held *m = &mine[(size_t)rand_r(&seed) % nmine];
            snprintf(session, sizeof session, "%s-soak-%d", prefix, m->session);
            a2_state_pin pin = {.consumer = m->consumer,
                                .lane = m->lane[0] ? m->lane : NULL,
                                .index = m->ref.index};
            a2_state_write w = {.up_to_index = m->ref.index,
                                .state = "{}",
                                .pins = &pin,
                                .npins = 1};
            a2_state_write_result wr;
            rc = a2_store_write_state(s, session, "soak", &w, 1, &wr);
            soak_check(s, rc, "write_state");
            if (rc == 0) {
                pthread_mutex_lock(&S.mu);
                S.pins_stored += (int64_t)wr.pins_accepted;
                pthread_mutex_unlock(&S.mu);
            }
        } else if (op < 96) {
            a2_events out;
            a2_read_options ro = {.limit = 20};
            rc = a2_store_read(s, session, &ro, &out);
            soak_check(s, rc, "read");
            a2_events_free(&out);
        } else if (op < 98) {
            a2_cursors cs;
            rc = a2_store_cursors(s, session, &cs);
            soak_check(s, rc, "cursors");
            a2_cursors_free(&cs);
        } else {
            const char *cons[] = {"sc", "sl", "sg"};
            a2_sessions ss;
            rc = a2_store_pending_sessions(s, cons, 3, NULL, 100, &ss);
            soak_check(s, rc, "pending_sessions");
            a2_sessions_free(&ss);
        }
        pthread_mutex_lock(&S.mu);
        S.ops[op / 10]++;
        pthread_mutex_unlock(&S.mu);
    }
    a2_store_close(s);
    return NULL;
}

/* Orders two claim records by session, consumer and cursor key. */
static int cmp_claim_cursor(const claim_rec *x, const claim_rec *y)
{
    if (x->session != y->session)
        return x->session - y->session;
    int c = strcmp(x->consumer, y->consumer);
    if (c)
        return c;
    return strcmp(x->key, y->key);
}

/* Orders two claim records of one cursor by index and attempt. */
static int cmp_claim_attempt(const claim_rec *x, const claim_rec *y)
{
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return x->attempt - y->attempt;
}

static int cmp_claim(const void *a, const void *b)
{
    const claim_rec *x = a, *y = b;
    int c = cmp_claim_cursor(x, y);
    return c ? c : cmp_claim_attempt(x, y);
}

static int cmp_claim_time(const void *a, const void *b)
{
    const claim_rec *x = a, *y = b;
    int c = cmp_claim_cursor(x, y);
    if (c)
        return c;
    if (x->claimed_at != y->claimed_at)
        return x->claimed_at < y->claimed_at ? -1 : 1;
    return cmp_claim_attempt(x, y);
}

static void test_mixed_workload(void **state)
{
    (void)state;
    memset(&S, 0, sizeof S);
    pthread_mutex_init(&S.mu, NULL);
    const char *env = getenv("A2_STORE_SOAK_SECONDS");
    int seconds = env && *env ? atoi(env) : 30;
    if (seconds < 1)
        seconds = 1;
    PGconn *db = a2_test_connect();
    int64_t deadlocks_before = a2_test_int(
            db, "select deadlocks from pg_stat_database where datname = "
                "current_database()");
    pthread_t th[SOAK_THREADS];
    for (intptr_t i = 0; i < SOAK_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, soak_worker, (void *)i),
                         0);
    sleep((unsigned)seconds);
    S.stop = 1;
    for (int i = 0; i < SOAK_THREADS; i++)
        pthread_join(th[i], NULL);
    int64_t total_ops = 0;
    for (int i = 0; i < 16; i++)
        total_ops += S.ops[i];
    print_message("mixed workload: %" PRId64
                  " operations in %d s, %zu claims, %" PRId64
                  " snapshot pins stored\n",
                  total_ops, seconds, S.nclaims, S.pins_stored);
    /* Statistics reach pg_stat_database with a delay. */
    a2_test_exec(db, "select pg_stat_force_next_flush()");
    usleep(600000);
    a2_test_exec(db, "select pg_stat_clear_snapshot()");
    int64_t deadlocks =
            a2_test_int(
                    db,
                    "select deadlocks from pg_stat_database where datname = "
                    "current_database()") -
            deadlocks_before;
    print_message("deadlocks reported by postgres: %" PRId64
                  ", deadlock errors seen: %" PRId64 "\n",
                  deadlocks, S.deadlock_errors);
    assert_int_equal(deadlocks, 0);
    assert_int_equal(S.deadlock_errors, 0);
    if (S.unexpected)
        fail_msg("%d unexpected errors, last: %s", S.unexpected,
                 S.unexpected_msg);
    assert_true(total_ops > 5 * (int64_t)seconds);
    assert_true(S.pins_stored > 0); /* write_state ran against live heads */
    /* Each attempt of each head was claimed by one holder. */
    qsort(S.claims, S.nclaims, sizeof *S.claims, cmp_claim);
    for (size_t i = 1; i < S.nclaims; i++)
        if (cmp_claim(&S.claims[i - 1], &S.claims[i]) == 0)
            fail_msg("attempt %d of %s %s at %" PRId64 " claimed twice",
                     S.claims[i].attempt, S.claims[i].consumer, S.claims[i].key,
                     S.claims[i].index);
    for (size_t i = 0; i < S.nclaims; i++)
        if (S.claims[i].wrong_type)
            fail_msg("log cursor claimed event %" PRId64 " of another type",
                     S.claims[i].index);
    /* A lane or log cursor runs its heads in index order: a claim that
     * began after another claim of the cursor had returned never takes a
     * lower index. A claim's time (the store's clock, CLOCK_REALTIME ms) is
     * read before its call runs and its return time after, so a pair is
     * ordered only when a's call had returned before b's began; calls whose
     * intervals overlap (one waiting on the other's locks) are not. */
    qsort(S.claims, S.nclaims, sizeof *S.claims, cmp_claim_time);
    size_t first = 0; /* of the current cursor's group */
    for (size_t i = 1; i < S.nclaims; i++) {
        const claim_rec *b = &S.claims[i];
        const claim_rec *g = &S.claims[first];
        if (g->session != b->session || strcmp(g->consumer, b->consumer) ||
            strcmp(g->key, b->key)) {
            first = i;
            continue;
        }
        if (b->key[0] == '#')
            continue;
        for (size_t k = first; k < i; k++) {
            const claim_rec *a = &S.claims[k];
            if (a->index > b->index && a->returned_at < b->claimed_at)
                fail_msg("%s %s ran %" PRId64 " (claim began at %" PRId64
                         ") after %" PRId64 " (claim returned at %" PRId64 ")",
                         b->consumer, b->key, b->index, b->claimed_at,
                         a->index, a->returned_at);
        }
    }
    for (int k = 0; k < SOAK_SESSIONS; k++) {
        char session[96];
        snprintf(session, sizeof session, "%s-soak-%d", prefix, k);
        int64_t clear = a2_test_intf(db,
                                     "select coalesce((select clear_index from "
                                     "a2_clears where session_id = '%s'), 0)",
                                     session);
        int64_t max =
                a2_test_intf(db,
                             "select coalesce(max(idx), 0) from a2_events "
                             "where session_id = '%s'",
                             session);
        /* Dense from the marker to the head. */
        assert_int_equal(a2_test_intf(db,
                                      "select count(*) from a2_events where "
                                      "session_id = '%s' and idx >= %" PRId64,
                                      session, clear > 0 ? clear : 1),
                         max - (clear > 0 ? clear : 1) + 1);
        /* A lane or log cursor runs at most one head. */
        assert_int_equal(a2_test_intf(db,
                                      "select count(*) from (select 1 from "
                                      "a2_cursors where session_id = '%s' and "
                                      "kind <> 'event' and head > %" PRId64
                                      " group by consumer, cursor_key having "
                                      "count(*) > 1) x",
                                      session, clear),
                         0);
        /* A dead letter holds no claim; a lane's head is not done. */
        assert_int_equal(a2_test_intf(db,
                                      "select count(*) from a2_cursors where "
                                      "session_id = '%s' and failed_at is not "
                                      "null and claim_holder is not null",
                                      session),
                         0);
        assert_int_equal(
                a2_test_intf(db,
                             "select count(*) from a2_cursors cur join "
                             "a2_lane_events lane on lane.session_id = "
                             "cur.session_id and lane.consumer = "
                             "cur.consumer and lane.lane = cur.lane "
                             "and lane.idx = cur.head where "
                             "cur.session_id = '%s' and cur.kind = "
                             "'lane' and lane.done",
                             session),
                0);
        /* No pending lane work without a running lane cursor. */
        assert_int_equal(
                a2_test_intf(db,
                             "select count(*) from a2_lane_events lane "
                             "where lane.session_id = '%s' and not "
                             "lane.done and lane.idx > %" PRId64
                             " and not exists (select 1 from a2_cursors "
                             "cur where cur.session_id = "
                             "lane.session_id and cur.consumer = "
                             "lane.consumer and cur.lane = lane.lane "
                             "and cur.head > %" PRId64
                             " and cur.head <= lane.idx)",
                             session, clear, clear),
                0);
    }
    PQfinish(db);
    free(S.claims);
    pthread_mutex_destroy(&S.mu);
}

int main(void)
{
    snprintf(prefix, sizeof prefix, "cc%d-%ld", (int)getpid(),
             (long)time(NULL));
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_appends_one_session),
            cmocka_unit_test(test_appends_many_sessions),
            cmocka_unit_test(test_append_fence_against_completion),
            cmocka_unit_test(test_clear_fence_against_completion),
            cmocka_unit_test(test_claim_loses_race),
            cmocka_unit_test(test_claim_race),
            cmocka_unit_test(test_many_lanes_no_deadlock),
            cmocka_unit_test(test_mixed_workload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
