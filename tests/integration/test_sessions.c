/*
 * Several sessions in one round trip against a real PostgreSQL: the claims
 * of several sessions (a2_store_claim_sessions) and the settlements of
 * several (a2_store_settle_sessions), their all-or-nothing refusals and
 * argument checks, and a2_worker_runner_run_sessions running the heads of
 * several woken sessions (lane order, one settlement round trip, renewals
 * of every session's heads, a session run again on its own after a
 * dead letter, each on its own when the store refuses them together;
 * two runners on overlapping sessions with appends meanwhile).
 */
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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef a2_test_fx fx;

#define OK(expr) A2_TEST_OK(f->s, expr)

/* An xid the store refuses (more than 32 bits). */
#define BAD_XID ((uint64_t)1 << 40)

/* The fixture and three sessions of its own, s[0..2]. */
typedef struct {
    fx *f;
    char s[3][80];
} sfx;

static int setup(void **state)
{
    sfx *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->f = a2_test_fx_new(NULL, 1000000, "sessions");
    for (int i = 0; i < 3; i++)
        snprintf(x->s[i], sizeof x->s[i], "%s-%d", x->f->session, i + 1);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    sfx *x = *state;
    a2_test_fx_free(x->f);
    free(x);
    return 0;
}

/* Appends to session one event (id) for consumer, in lane unless NULL. */
static void append(fx *f, const char *session, const char *id,
                   const char *consumer, const char *lane)
{
    a2_target tg = {.consumer = consumer, .lane = lane};
    a2_append_event ev = {
            .type = "job", .id = id, .targets = &tg, .ntargets = 1};
    a2_events out;
    OK(a2_store_append(f->s, session, &ev, 1, NULL, &out));
    a2_events_free(&out);
}

/* The attempt of a claim's only head. */
static a2_attempt_ref only_head(const a2_claim_result *cr)
{
    assert_int_equal(cr->outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr->heads.count, 1);
    const a2_head *h = &cr->heads.items[0];
    return (a2_attempt_ref){.consumer = h->dispatch.consumer,
                            .lane = h->dispatch.lane,
                            .index = h->event.index,
                            .attempt = h->dispatch.attempt_count};
}

/* Rows of table in session, with a further condition unless NULL. */
static int64_t rows(fx *f, const char *table, const char *session,
                    const char *and_where)
{
    return a2_test_intf(f->db,
                        "select count(*) from %s where session_id = '%s'%s%s",
                        table, session, and_where ? " and " : "",
                        and_where ? and_where : "");
}

/* ── the store ────────────────────────────────────────────────────────── */

/* One round trip claims three sessions, given out of name order: each
 * result in the order given, a lane's first head only, a session with
 * nothing to run settled. */
static void test_claim_sessions(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "l1", "a", "q");
    append(f, x->s[1], "l2", "a", "q");
    a2_claim_session cs[3] = {{x->s[1], 0, 0}, {x->s[0], 0, 0}, {x->s[2], 0, 0}};
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    a2_claim_result out[3];
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_claim_sessions(f->s, cs, 3, &req, out));
    assert_int_equal(a2_store_round_trips(f->s), trips + 1);
    a2_attempt_ref lane = only_head(&out[0]);
    assert_string_equal(out[0].heads.items[0].event.session_id, x->s[1]);
    assert_string_equal(lane.lane, "q");
    assert_int_equal(lane.index, 1);
    a2_attempt_ref one = only_head(&out[1]);
    assert_string_equal(out[1].heads.items[0].event.session_id, x->s[0]);
    assert_null(one.lane);
    assert_int_equal(one.attempt, 1);
    assert_int_equal(out[2].outcome, A2_CLAIM_SETTLED);
    for (int i = 0; i < 3; i++)
        a2_claim_result_free(&out[i]);
    /* The claims hold: the next claim of the sessions finds them busy. */
    OK(a2_store_claim_sessions(f->s, cs, 2, &req, out));
    assert_int_equal(out[0].outcome, A2_CLAIM_BUSY);
    assert_int_equal(out[1].outcome, A2_CLAIM_BUSY);
    for (int i = 0; i < 2; i++)
        a2_claim_result_free(&out[i]);
}

/* A claim the store refuses refuses the call: nothing is claimed. */
static void test_claim_sessions_all_or_nothing(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "e2", "a", NULL);
    a2_claim_session cs[2] = {{x->s[0], 0, 0}, {x->s[1], BAD_XID, 0}};
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    a2_claim_result out[2];
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &req, out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(rows(f, "a2_cursors", x->s[0], "claim_holder is not null"),
                     0);
    /* The first session's head is there to claim, at its first attempt. */
    a2_claim_result cr;
    OK(a2_store_claim(f->s, x->s[0], &req, &cr));
    assert_int_equal(only_head(&cr).attempt, 1);
    a2_claim_result_free(&cr);
}

/* A log consumer of type "job", lane "main". */
static const a2_log_spec log_spec = {.lane = "main", .backfill = true};
static const a2_consumer log_consumer[] = {{.name = "lg", .log = &log_spec}};

/* An event for no target: only a log consumer runs it. */
static void append_untargeted(fx *f, const char *session, const char *id)
{
    a2_append_event ev = {.type = "job", .id = id};
    a2_events out;
    OK(a2_store_append(f->s, session, &ev, 1, NULL, &out));
    a2_events_free(&out);
}

/* With wake_logs, a claim brings the log consumer's cursor up to date in
 * its own round trip and transaction: one round trip claims the log's
 * first event, in one session and in two at once; without it, the cursor
 * is not started and the claim finds nothing. */
static void test_claim_wake_logs(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    for (int i = 0; i < 3; i++)
        append_untargeted(f, x->s[i], "e1");
    a2_claim_request req = {.holder = "h",
                            .ttl_ms = 30000,
                            .consumers = log_consumer,
                            .nconsumers = 1};
    a2_claim_result cr;
    OK(a2_store_claim(f->s, x->s[0], &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_SETTLED);
    a2_claim_result_free(&cr);
    assert_int_equal(rows(f, "a2_cursors", x->s[0], "consumer = 'lg'"), 0);

    req.wake_logs = true;
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_claim(f->s, x->s[0], &req, &cr));
    assert_int_equal(a2_store_round_trips(f->s), trips + 1);
    a2_attempt_ref one = only_head(&cr);
    assert_string_equal(one.consumer, "lg");
    assert_string_equal(one.lane, "main");
    assert_int_equal(one.index, 1);
    a2_claim_result_free(&cr);

    a2_claim_session cs[2] = {{x->s[2], 0, 0}, {x->s[1], 0, 0}};
    a2_claim_result out[2];
    trips = a2_store_round_trips(f->s);
    OK(a2_store_claim_sessions(f->s, cs, 2, &req, out));
    assert_int_equal(a2_store_round_trips(f->s), trips + 1);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(out[i].heads.items[0].event.session_id,
                            cs[i].session);
        assert_string_equal(only_head(&out[i]).consumer, "lg");
        a2_claim_result_free(&out[i]);
    }
    /* A wake-up's xid the store refuses refuses the log wake-ups with the
     * claims: no cursor is started. */
    append_untargeted(f, x->s[0], "e2");
    char other[96];
    snprintf(other, sizeof other, "%s-new", x->s[0]);
    append_untargeted(f, other, "e1");
    a2_claim_session bad[2] = {{other, 0, 0}, {x->s[1], BAD_XID, 0}};
    assert_int_equal(a2_store_claim_sessions(f->s, bad, 2, &req, out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(rows(f, "a2_cursors", other, "consumer = 'lg'"), 0);
}

/* Bad arguments are refused before any call. */
static void test_claim_sessions_invalid(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    a2_claim_result out[2];
    a2_claim_session cs[2] = {{x->s[0], 0, 0}, {x->s[0], 0, 0}};
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &req, out),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message,
                           "listed twice"));
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 0, &req, out),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "1 to 1000"));
    assert_int_equal(a2_store_claim_sessions(f->s, cs,
                                             A2_STORE_MAX_SETTLE + 1, &req,
                                             out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_claim_sessions(f->s, NULL, 1, &req, out),
                     A2_EINVALID_ARGUMENT);
    cs[1].session = "";
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &req, out),
                     A2_EINVALID_ARGUMENT);
    cs[1].session = NULL;
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &req, out),
                     A2_EINVALID_ARGUMENT);
    cs[1].session = x->s[1];
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, NULL, out),
                     A2_EINVALID_ARGUMENT);
    a2_claim_request noholder = {.ttl_ms = 30000};
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &noholder, out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_claim_sessions(f->s, cs, 2, &req, NULL),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_round_trips(f->s), trips);
}

/* Claims one head in each of sessions s[0] and s[1] (events e1, e2 for
 * consumer a): their attempts in at. */
static void claim_two(sfx *x, a2_attempt_ref at[2], a2_claim_result out[2])
{
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "e2", "a", NULL);
    a2_claim_session cs[2] = {{x->s[0], 0, 0}, {x->s[1], 0, 0}};
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    OK(a2_store_claim_sessions(f->s, cs, 2, &req, out));
    at[0] = only_head(&out[0]);
    at[1] = only_head(&out[1]);
}

/* One round trip settles two sessions' heads: a completion with a returned
 * event in one, a failure in the other. */
static void test_settle_sessions(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    a2_attempt_ref at[2];
    a2_claim_result cl[2];
    claim_two(x, at, cl);
    a2_append_event child = {.type = "child", .id = "ch-1"};
    a2_fail_request fail = {.error = "boom", .max_failures = 3,
                            .retry_after_ms = 1000};
    const char *sessions[2] = {x->s[1], x->s[0]};
    a2_settlement sts[2] = {{.attempt = at[1], .fail = &fail},
                            {.attempt = at[0], .events = &child,
                             .nevents = 1}};
    a2_settle_result res[2];
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_settle_sessions(f->s, sessions, sts, 2, NULL, 0, res));
    assert_int_equal(a2_store_round_trips(f->s), trips + 1);
    assert_int_equal(res[0].outcome, A2_ATTEMPT_FAILED);
    assert_int_equal(res[0].failure_count, 1);
    assert_int_equal(res[1].outcome, A2_ATTEMPT_COMPLETED);
    assert_int_equal(res[1].events.count, 1);
    assert_string_equal(res[1].events.items[0].session_id, x->s[0]);
    assert_int_equal(rows(f, "a2_events", x->s[0],
                          "event_id = 'ch-1' and cause->>'consumer' = 'a'"),
                     1);
    assert_int_equal(rows(f, "a2_cursors", x->s[1],
                          "failure_count = 1 and last_error = 'boom'"),
                     1);
    a2_settle_results_free(res, 2);
    for (int i = 0; i < 2; i++)
        a2_claim_result_free(&cl[i]);
}

/* A settlement the store refuses refuses the call in every session. */
static void test_settle_sessions_all_or_nothing(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    a2_attempt_ref at[2];
    a2_claim_result cl[2];
    claim_two(x, at, cl);
    a2_append_event child = {.type = "child", .id = "ch-1"};
    a2_append_event taken = {.type = "other", .id = "e2"}; /* a live id */
    const char *sessions[2] = {x->s[0], x->s[1]};
    a2_settlement sts[2] = {{.attempt = at[0], .events = &child, .nevents = 1},
                            {.attempt = at[1], .events = &taken,
                             .nevents = 1}};
    a2_settle_result res[2];
    assert_int_equal(
            a2_store_settle_sessions(f->s, sessions, sts, 2, NULL, 0, res),
            A2_EPARTIAL_DUPLICATE_BATCH);
    assert_int_equal(rows(f, "a2_events", x->s[0], "event_id = 'ch-1'"), 0);
    assert_int_equal(rows(f, "a2_cursors", x->s[0],
                          "claim_holder = 'h' and head = 1"),
                     1);
    for (int i = 0; i < 2; i++)
        a2_claim_result_free(&cl[i]);
}

static void test_settle_sessions_invalid(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_attempt_ref at = {.consumer = "a", .index = 1, .attempt = 1};
    a2_settlement sts[2] = {{.attempt = at}, {.attempt = at}};
    a2_settle_result res[2];
    assert_int_equal(a2_store_settle_sessions(f->s, NULL, sts, 2, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message,
                           "sessions must not be NULL"));
    const char *sessions[2] = {x->s[0], ""};
    assert_int_equal(
            a2_store_settle_sessions(f->s, sessions, sts, 2, NULL, 0, res),
            A2_EINVALID_ARGUMENT);
    sessions[1] = x->s[1];
    assert_int_equal(
            a2_store_settle_sessions(f->s, sessions, sts, 0, NULL, 0, res),
            A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_round_trips(f->s), trips);
}

/* ── the runner ───────────────────────────────────────────────────────── */

typedef struct {
    int calls;
    char order[8][96]; /* "session index" of each call */
    fx *f;
    int wait_renewal; /* the last call waits until its lease was renewed */
    int renewed;      /* it was */
} hctx;

static int handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    (void)reply;
    hctx *h = ctx;
    if (h->calls < 8)
        snprintf(h->order[h->calls], sizeof h->order[0], "%s %lld",
                 head->event.session_id, (long long)head->event.index);
    h->calls++;
    if (h->wait_renewal && h->calls == h->wait_renewal) {
        /* Until the renewal thread has extended this head's lease past the
         * one its claim gave (at most 20 s). */
        for (int i = 0; i < 2000 && !h->renewed; i++) {
            h->renewed = a2_test_intf(
                    h->f->db,
                    "select count(*) from a2_cursors where session_id = '%s' "
                    "and head = %lld and claim_expires_at > %lld",
                    head->event.session_id, (long long)head->event.index,
                    (long long)head->dispatch.claim_expires_at) == 1;
            if (!h->renewed)
                a2_test_sleep_ms(10);
        }
    }
    return 0;
}

/* A runner's options: consumer "a", 3 failures, a minute's retry hold. */
static a2_worker_runner_options runner_options(const char *holder,
                                               a2_worker_handler fn, void *ctx,
                                               int64_t ttl_ms)
{
    static const a2_consumer cons[] = {{.name = "a"}};
    return (a2_worker_runner_options){.db = a2_test_db(),
                                      .holder = holder,
                                      .consumers = cons,
                                      .nconsumers = 1,
                                      .ttl_ms = ttl_ms,
                                      .max_failures = 3,
                                      .retry_after_ms = 60000,
                                      .handler = fn,
                                      .ctx = ctx};
}

static a2_worker_runner *runner_new(hctx *h, int64_t ttl_ms)
{
    char err[512];
    a2_worker_runner_options o =
            runner_options("sessions-runner", handler, h, ttl_ms);
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    if (!r)
        fail_msg("runner: %s", err);
    return r;
}

/* Three woken sessions in one run: heads run session by session in the
 * order given, a lane one head at a time, every outcome settled together,
 * each session's stats its own; the completion of the lane's head claims
 * its second head, which runs after them. */
static void test_runner_sessions(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "l1", "a", "q");
    append(f, x->s[1], "l2", "a", "q");
    append(f, x->s[1], "e3", "a", NULL);
    hctx h = {0};
    a2_worker_runner *r = runner_new(&h, 30000);
    a2_claim_session cs[3] = {{x->s[1], 0, 0}, {x->s[2], 0, 0}, {x->s[0], 0, 0}};
    a2_worker_run_stats st[3];
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 3, st), 0);
    assert_int_equal(h.calls, 4);
    char want[4][96];
    snprintf(want[0], sizeof want[0], "%s 1", x->s[1]);
    snprintf(want[1], sizeof want[1], "%s 3", x->s[1]);
    snprintf(want[2], sizeof want[2], "%s 1", x->s[0]);
    snprintf(want[3], sizeof want[3], "%s 2", x->s[1]);
    for (int i = 0; i < 4; i++)
        assert_string_equal(h.order[i], want[i]);
    assert_int_equal(st[0].claimed, 3);
    assert_int_equal(st[0].claimed_next, 1);
    assert_int_equal(st[0].completed, 3);
    assert_int_equal(st[0].settled_together, 2);
    assert_int_equal(st[1].claimed, 0);
    assert_int_equal(st[1].retry_at, 0);
    assert_int_equal(st[2].claimed, 1);
    assert_int_equal(st[2].completed, 1);
    assert_int_equal(st[2].settled_together, 1);
    /* The lane is done; a later run finds nothing. */
    assert_int_equal(rows(f, "a2_cursors", x->s[1],
                          "lane = 'q' and head is null and claim_holder is "
                          "null"),
                     1);
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 1, st), 0);
    assert_int_equal(h.calls, 4);
    assert_int_equal(st[0].completed, 0);
    a2_worker_runner_free(r);
}

/* A runner serving a log consumer brings its cursors up to date in the
 * claim of several sessions: their log events run in one run, in the order
 * given, and settle together; a second event of one of them runs in the
 * next run. */
static void test_runner_sessions_log(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    for (int i = 0; i < 3; i++)
        append_untargeted(f, x->s[i], "e1");
    hctx h = {0};
    char err[512];
    a2_worker_runner_options o =
            runner_options("sessions-runner", handler, &h, 30000);
    o.consumers = log_consumer;
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    if (!r)
        fail_msg("runner: %s", err);
    a2_claim_session cs[3] = {{x->s[2], 0, 0}, {x->s[0], 0, 0}, {x->s[1], 0, 0}};
    a2_worker_run_stats st[3];
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 3, st), 0);
    assert_int_equal(h.calls, 3);
    for (int i = 0; i < 3; i++) {
        char want[96];
        snprintf(want, sizeof want, "%s 1", cs[i].session);
        assert_string_equal(h.order[i], want);
        assert_int_equal(st[i].completed, 1);
        assert_int_equal(st[i].settled_together, 1);
    }
    append_untargeted(f, x->s[0], "e2");
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 2, st), 0);
    assert_int_equal(h.calls, 4);
    assert_int_equal(st[1].completed, 1);
    assert_int_equal(rows(f, "a2_cursors", x->s[0],
                          "consumer = 'lg' and position = 2 and head is null"),
                     1);
    a2_worker_runner_free(r);
}

/* The renewal thread extends the leases of every session's heads: the last
 * head's lease, shorter than the run, is renewed before its handler ends,
 * and no head is lost. */
static void test_runner_sessions_renews(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "e2", "a", NULL);
    hctx h = {.f = f, .wait_renewal = 2};
    a2_worker_runner *r = runner_new(&h, 600);
    a2_claim_session cs[2] = {{x->s[0], 0, 0}, {x->s[1], 0, 0}};
    a2_worker_run_stats st[2];
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 2, st), 0);
    assert_int_equal(h.calls, 2);
    assert_true(h.renewed);
    assert_true(st[0].renewals >= 1);
    assert_int_equal(st[0].completed + st[1].completed, 2);
    assert_int_equal(st[0].superseded + st[1].superseded, 0);
    a2_worker_runner_free(r);
}

/* A claim that dead-letters a head (a lapsed lease at its last failure)
 * counts it in its session's stats, runs the session's other head, and
 * claims that session again on its own (it may not have taken every
 * eligible head); the dead letter stays at the head of its lane. */
static void test_runner_sessions_dead_letter(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "d1", "a", "q");
    /* Two failed attempts of d1, then a third whose lease lapses (the
     * fixture's clock is long past). */
    a2_claim_request req = {.holder = "x", .ttl_ms = 1};
    a2_fail_request fail = {.error = "x", .max_failures = 3};
    for (int i = 0; i < 3; i++) {
        a2_claim_result cr;
        OK(a2_store_claim(f->s, x->s[1], &req, &cr));
        a2_attempt_ref at = only_head(&cr);
        if (i < 2) {
            a2_fail_result fr;
            OK(a2_store_fail(f->s, x->s[1], &at, &fail, &fr));
            assert_int_equal(fr.outcome, A2_ATTEMPT_FAILED);
        }
        a2_claim_result_free(&cr);
    }
    append(f, x->s[1], "e2", "a", NULL);
    hctx h = {0};
    a2_worker_runner *r = runner_new(&h, 30000);
    a2_claim_session cs[2] = {{x->s[1], 0, 0}, {x->s[0], 0, 0}};
    a2_worker_run_stats st[2];
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 2, st), 0);
    assert_int_equal(st[0].dead_lettered, 1);
    assert_int_equal(st[0].claimed, 1);
    assert_int_equal(st[0].completed, 1); /* e2 */
    assert_int_equal(st[0].retry_at, 0);
    assert_int_equal(st[1].completed, 1);
    assert_int_equal(h.calls, 2);
    assert_int_equal(rows(f, "a2_cursors", x->s[1],
                          "lane = 'q' and head = 1 and failed_at is not null"),
                     1);
    a2_worker_runner_free(r);
}

/* When the store refuses the claim of several, each session runs on its
 * own: the first one's head runs, the refused one's error is returned. */
static void test_runner_sessions_refused(void **state)
{
    sfx *x = *state;
    fx *f = x->f;
    append(f, x->s[0], "e1", "a", NULL);
    append(f, x->s[1], "e2", "a", NULL);
    hctx h = {0};
    a2_worker_runner *r = runner_new(&h, 30000);
    a2_claim_session cs[2] = {{x->s[0], 0, 0}, {x->s[1], BAD_XID, 0}};
    a2_worker_run_stats st[2];
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 2, st),
                     A2_WORKER_ESTORE);
    assert_int_equal(h.calls, 1);
    assert_int_equal(st[0].completed, 1);
    assert_int_equal(st[1].claimed, 0);
    assert_non_null(strstr(a2_worker_runner_last_error(r), "claim"));
    cs[1].session = cs[0].session;
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 0, st),
                     A2_WORKER_EINVAL);
    cs[1].session = "";
    assert_int_equal(a2_worker_runner_run_sessions(r, cs, 2, st),
                     A2_WORKER_EINVAL);
    a2_worker_runner_free(r);
}

/* ── two runners, overlapping sessions, appends meanwhile ───────────── */

#define CC_SESSIONS 8
#define CC_EVENTS 400

typedef struct {
    char names[CC_SESSIONS][80];
    pthread_mutex_t mu;
    int n;                       /* handler calls */
    int sess[CC_EVENTS * 2];     /* each call's session */
    int64_t idx[CC_EVENTS * 2];  /* and index */
    int lane[CC_EVENTS * 2];     /* whether it was a lane's head */
    volatile int appended;       /* the producer is done */
    int errors;                  /* runs that failed */
    char last_error[1300];
} cc_state;

static cc_state *cc;

static int cc_handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    (void)ctx;
    (void)reply;
    pthread_mutex_lock(&cc->mu);
    int k = cc->n++;
    if (k < CC_EVENTS * 2) {
        cc->sess[k] = -1;
        for (int i = 0; i < CC_SESSIONS; i++)
            if (strcmp(cc->names[i], head->event.session_id) == 0)
                cc->sess[k] = i;
        cc->idx[k] = head->event.index;
        cc->lane[k] = head->dispatch.lane != NULL;
    }
    pthread_mutex_unlock(&cc->mu);
    return 0;
}

static void *cc_producer(void *arg)
{
    (void)arg;
    a2_store *s = a2_test_store_try();
    unsigned seed = 7;
    for (int i = 0; s && i < CC_EVENTS; i++) {
        int k = (int)(rand_r(&seed) % CC_SESSIONS);
        a2_target tg = {.consumer = "a", .lane = i % 2 ? "q" : NULL};
        a2_append_event ev = {.type = "job", .targets = &tg, .ntargets = 1};
        a2_events out;
        if (a2_store_append(s, cc->names[k], &ev, 1, NULL, &out) == 0)
            a2_events_free(&out);
    }
    a2_store_close(s);
    cc->appended = 1;
    return NULL;
}

static void *cc_worker(void *arg)
{
    char err[512], holder[32];
    snprintf(holder, sizeof holder, "cc-%ld", (long)(intptr_t)arg);
    a2_worker_runner_options o =
            runner_options(holder, cc_handler, NULL, 60000);
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    unsigned seed = (unsigned)(intptr_t)arg + 1;
    int64_t end = a2_test_now_ms() + 60000;
    while (r && a2_test_now_ms() < end) {
        pthread_mutex_lock(&cc->mu);
        int done = cc->appended && cc->n >= CC_EVENTS;
        pthread_mutex_unlock(&cc->mu);
        if (done)
            break;
        /* 2 to 8 distinct sessions, in a random order. */
        int perm[CC_SESSIONS];
        for (int i = 0; i < CC_SESSIONS; i++)
            perm[i] = i;
        for (int i = CC_SESSIONS - 1; i > 0; i--) {
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1));
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        size_t n = 2 + rand_r(&seed) % (CC_SESSIONS - 1);
        a2_claim_session cs[CC_SESSIONS];
        for (size_t i = 0; i < n; i++)
            cs[i] = (a2_claim_session){cc->names[perm[i]], 0, 0};
        a2_worker_run_stats st[CC_SESSIONS];
        if (a2_worker_runner_run_sessions(r, cs, n, st) != 0) {
            pthread_mutex_lock(&cc->mu);
            cc->errors++;
            snprintf(cc->last_error, sizeof cc->last_error, "%s",
                     a2_worker_runner_last_error(r));
            pthread_mutex_unlock(&cc->mu);
        }
    }
    if (!r) {
        pthread_mutex_lock(&cc->mu);
        cc->errors++;
        snprintf(cc->last_error, sizeof cc->last_error, "%s", err);
        pthread_mutex_unlock(&cc->mu);
    }
    a2_worker_runner_free(r);
    return NULL;
}

/* Two runners claim random sets of eight sessions, in random orders, while
 * a producer appends 400 events to them (half in a lane): every event runs
 * once, every lane in index order, and no run fails (the sessions' locks
 * are taken in name order, so the runners never deadlock). */
static void test_runner_sessions_concurrent(void **state)
{
    sfx *x = *state;
    cc = calloc(1, sizeof *cc);
    assert_non_null(cc);
    pthread_mutex_init(&cc->mu, NULL);
    for (int i = 0; i < CC_SESSIONS; i++)
        snprintf(cc->names[i], sizeof cc->names[i], "%s-c%d", x->f->session,
                 i);
    pthread_t prod, w[2];
    assert_int_equal(pthread_create(&prod, NULL, cc_producer, NULL), 0);
    for (intptr_t i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&w[i], NULL, cc_worker, (void *)i), 0);
    pthread_join(prod, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    if (cc->errors)
        fail_msg("%d runs failed, the last: %s", cc->errors, cc->last_error);
    assert_int_equal(cc->n, CC_EVENTS);
    /* Once each, and each lane's heads in index order. */
    int64_t last_lane[CC_SESSIONS] = {0};
    for (int k = 0; k < cc->n; k++) {
        assert_true(cc->sess[k] >= 0);
        for (int j = 0; j < k; j++)
            if (cc->sess[j] == cc->sess[k] && cc->idx[j] == cc->idx[k])
                fail_msg("%s #%lld ran twice", cc->names[cc->sess[k]],
                         (long long)cc->idx[k]);
        if (cc->lane[k]) {
            assert_true(cc->idx[k] > last_lane[cc->sess[k]]);
            last_lane[cc->sess[k]] = cc->idx[k];
        }
    }
    pthread_mutex_destroy(&cc->mu);
    free(cc);
    cc = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_claim_sessions, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_claim_sessions_all_or_nothing,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_claim_wake_logs, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_claim_sessions_invalid, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_settle_sessions, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(
                    test_settle_sessions_all_or_nothing, setup, teardown),
            cmocka_unit_test_setup_teardown(test_settle_sessions_invalid,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions_log, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions_renews, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions_dead_letter,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions_refused,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_runner_sessions_concurrent,
                                            setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
