/*
 * Settling several attempts in one round trip against a real PostgreSQL:
 * a2_store_settle's outcomes, its all-or-nothing refusal and its argument
 * checks, and a2_worker_runner settling a claim's heads together (and one
 * by one when the store refuses them together).
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef a2_test_fx fx;

#define OK(expr) A2_TEST_OK(f->s, expr)

static int setup(void **state)
{
    *state = a2_test_fx_new(NULL, 1000000, "settle");
    return 0;
}

/* Appends one event (id "ev-1") of f's session with one target for each of
 * the n consumers. */
static void append_for(fx *f, const char *const *consumers, size_t n)
{
    a2_target tg[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        tg[i] = (a2_target){.consumer = consumers[i]};
    a2_append_event ev = {
            .type = "job", .id = "ev-1", .targets = tg, .ntargets = n};
    a2_events out;
    OK(a2_store_append(f->s, f->session, &ev, 1, NULL, &out));
    a2_events_free(&out);
}

/* Appends n events of type "job" to f's session, each for target tg. */
static void append_n(fx *f, const a2_target *tg, size_t n)
{
    a2_append_event *evs = calloc(n, sizeof *evs);
    assert_non_null(evs);
    for (size_t i = 0; i < n; i++)
        evs[i] = (a2_append_event){.type = "job", .targets = tg,
                                   .ntargets = 1};
    a2_events out;
    OK(a2_store_append(f->s, f->session, evs, n, NULL, &out));
    a2_events_free(&out);
    free(evs);
}

/* Claims f's session as "h": n heads, whose attempt refs go to at (in the
 * claim's order: by index, then consumer). */
static void claim_n(fx *f, a2_claim_result *cr, a2_attempt_ref *at, size_t n)
{
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    OK(a2_store_claim(f->s, f->session, &req, cr));
    assert_int_equal(cr->outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr->heads.count, n);
    for (size_t i = 0; i < n; i++) {
        const a2_head *h = &cr->heads.items[i];
        at[i] = (a2_attempt_ref){.consumer = h->dispatch.consumer,
                                 .lane = h->dispatch.lane,
                                 .index = h->event.index,
                                 .attempt = h->dispatch.attempt_count};
    }
}

/* Every outcome in one call: a completion with a returned event, one with
 * none, a failure held for a retry, a failure that dead-letters, and a
 * completion of an attempt that does not hold its head. */
static void test_settle_outcomes(void **state)
{
    fx *f = *state;
    const char *cons[] = {"a", "b", "c", "d", "e"};
    append_for(f, cons, 5);
    a2_claim_result cr;
    a2_attempt_ref at[5];
    claim_n(f, &cr, at, 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(at[i].consumer, cons[i]);
    at[4].attempt = 7; /* e's head is held by attempt 1 */

    a2_append_event child = {.type = "child", .id = "ch-1"};
    a2_fail_request retry = {.error = "boom", .max_failures = 3};
    a2_fail_request last = {.error = "gone", .max_failures = 1};
    a2_settlement sts[5] = {
            {.attempt = at[0], .events = &child, .nevents = 1},
            {.attempt = at[1]},
            {.attempt = at[2], .fail = &retry},
            {.attempt = at[3], .fail = &last},
            {.attempt = at[4]},
    };
    a2_settle_result res[5];
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_settle(f->s, f->session, sts, 5, NULL, 0, res));
    assert_int_equal(a2_store_round_trips(f->s), trips + 1);
    assert_int_equal(res[0].outcome, A2_ATTEMPT_COMPLETED);
    assert_int_equal(res[0].events.count, 1);
    assert_string_equal(res[0].events.items[0].id, "ch-1");
    assert_string_equal(res[0].events.items[0].type, "child");
    assert_int_equal(res[0].events.items[0].index, 2);
    assert_int_equal(res[1].outcome, A2_ATTEMPT_COMPLETED);
    assert_int_equal(res[1].events.count, 0);
    assert_int_equal(res[2].outcome, A2_ATTEMPT_FAILED);
    assert_int_equal(res[2].failure_count, 1);
    assert_int_equal(res[3].outcome, A2_ATTEMPT_DEAD_LETTERED);
    assert_int_equal(res[3].failure_count, 1);
    assert_int_equal(res[4].outcome, A2_ATTEMPT_SUPERSEDED);
    a2_settle_results_free(res, 5);

    /* What the store holds: the child caused by a's attempt, d dead. */
    char q[512];
    snprintf(q, sizeof q,
             "select string_agg(event_type || ':' || event_id || ':' || "
             "coalesce(cause->>'consumer', '-'), ' ' order by idx) from "
             "a2_events where session_id = '%s'",
             f->session);
    char *got = a2_test_scalar(f->db, q);
    assert_string_equal(got, "job:ev-1:- child:ch-1:a");
    free(got);
    a2_heads dead;
    OK(a2_store_dead_letters(f->s, f->session, &dead));
    assert_int_equal(dead.count, 1);
    assert_string_equal(dead.items[0].dispatch.consumer, "d");
    a2_heads_free(&dead);
    /* e's attempt 1 still holds its head: completing it works. */
    at[4].attempt = 1;
    a2_complete_result comp;
    OK(a2_store_complete(f->s, f->session, &at[4], NULL, 0, NULL, 0, &comp));
    assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&comp);
    a2_claim_result_free(&cr); /* at[] points into it */
}

/* A settlement the store refuses refuses the call: nothing is settled. */
static void test_settle_all_or_nothing(void **state)
{
    fx *f = *state;
    const char *cons[] = {"a", "b"};
    append_for(f, cons, 2);
    a2_claim_result cr;
    a2_attempt_ref at[2];
    claim_n(f, &cr, at, 2);
    a2_append_event child = {.type = "child", .id = "ch-a"};
    /* b returns an event under the id of the live event ev-1. */
    a2_append_event taken = {.type = "other", .id = "ev-1"};
    a2_settlement sts[2] = {
            {.attempt = at[0], .events = &child, .nevents = 1},
            {.attempt = at[1], .events = &taken, .nevents = 1},
    };
    a2_settle_result res[2];
    assert_int_equal(a2_store_settle(f->s, f->session, sts, 2, NULL, 0, res),
                     A2_EPARTIAL_DUPLICATE_BATCH);
    assert_non_null(strstr(a2_store_last_error(f->s)->message,
                           "already-appended event id"));
    assert_int_equal(a2_test_fx_rows(f, "a2_events", "event_id = 'ch-a'"), 0);
    /* Both attempts still hold their heads. */
    a2_complete_result comp;
    for (size_t i = 0; i < 2; i++) {
        OK(a2_store_complete(f->s, f->session, &at[i], NULL, 0, NULL, 0,
                             &comp));
        assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
        a2_complete_result_free(&comp);
    }
    a2_claim_result_free(&cr);
}

/* Bad arguments are refused before any call. */
static void test_settle_invalid(void **state)
{
    fx *f = *state;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_settle_result res[2];
    a2_attempt_ref at = {.consumer = "a", .index = 1, .attempt = 1};
    a2_settlement st = {.attempt = at};
    assert_int_equal(a2_store_settle(f->s, f->session, &st, 0, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "1 to 1000"));
    assert_int_equal(a2_store_settle(f->s, f->session, NULL, 1, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    a2_settlement *many = calloc(A2_STORE_MAX_SETTLE + 1, sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i <= A2_STORE_MAX_SETTLE; i++)
        many[i].attempt = at;
    assert_int_equal(a2_store_settle(f->s, f->session, many,
                                     A2_STORE_MAX_SETTLE + 1, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    free(many);
    assert_int_equal(a2_store_settle(f->s, "", &st, 1, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_settle(f->s, f->session, &st, 1, NULL, 0, NULL),
                     A2_EINVALID_ARGUMENT);
    a2_settlement two[2] = {{.attempt = at}, {.attempt = at}};
    two[1].attempt.index = 0;
    assert_int_equal(a2_store_settle(f->s, f->session, two, 2, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    two[1].attempt = at;
    a2_fail_request none = {.error = "x", .max_failures = 0};
    two[1].fail = &none;
    assert_int_equal(a2_store_settle(f->s, f->session, two, 2, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message,
                           "max failures"));
    a2_append_event noid = {.type = "child"};
    two[1].fail = NULL;
    two[1].events = &noid;
    two[1].nevents = 1;
    assert_int_equal(a2_store_settle(f->s, f->session, two, 2, NULL, 0, res),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_round_trips(f->s), trips);
}

/* A lane worked through with claim_next: each completion claims the lane's
 * next head in its own round trip, the last finds nothing, and a head of
 * another cursor is left alone. */
static void test_settle_claim_next(void **state)
{
    fx *f = *state;
    a2_target tg[2] = {{.consumer = "q", .lane = "L"}, {.consumer = "x"}};
    a2_append_event evs[3] = {
            {.type = "s1", .id = "s-1", .targets = tg, .ntargets = 2},
            {.type = "s2", .id = "s-2", .targets = tg, .ntargets = 1},
            {.type = "s3", .id = "s-3", .targets = tg, .ntargets = 1}};
    a2_events out;
    OK(a2_store_append(f->s, f->session, evs, 3, NULL, &out));
    a2_events_free(&out);

    a2_consumer q = {.name = "q"};
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000, .consumers = &q,
                            .nconsumers = 1};
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.count, 1);
    a2_attempt_ref at = {"q", "L", 1, 1};
    a2_claim_result_free(&cr);
    for (int64_t k = 1; k <= 3; k++) {
        a2_settlement st = {.attempt = at, .claim_next = &req};
        a2_settle_result res;
        uint64_t trips = a2_store_round_trips(f->s);
        OK(a2_store_settle(f->s, f->session, &st, 1, NULL, 0, &res));
        assert_int_equal(a2_store_round_trips(f->s), trips + 1);
        assert_int_equal(res.outcome, A2_ATTEMPT_COMPLETED);
        if (k < 3) {
            assert_int_equal(res.next.outcome, A2_CLAIM_CLAIMED);
            assert_int_equal(res.next.heads.count, 1);
            const a2_head *h = &res.next.heads.items[0];
            assert_int_equal(h->event.index, k + 1);
            assert_string_equal(h->dispatch.consumer, "q");
            assert_string_equal(h->dispatch.lane, "L");
            assert_int_equal(h->dispatch.attempt_count, 1);
            assert_string_equal(h->dispatch.claim_holder, "h");
            at.index = k + 1;
        } else {
            assert_int_equal(res.next.outcome, A2_CLAIM_SETTLED);
            assert_int_equal(res.next.heads.count, 0);
        }
        a2_settle_results_free(&res, 1);
    }
    /* x's head is still there for a claim of x */
    a2_consumer x = {.name = "x"};
    req.consumers = &x;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_string_equal(cr.heads.items[0].dispatch.consumer, "x");
    a2_claim_result_free(&cr);

    /* claim_next only with the completion of a lane's head, and a claim
     * request that would be accepted alone; refused before any call */
    uint64_t trips = a2_store_round_trips(f->s);
    a2_settle_result res;
    a2_fail_request fr = {.error = "x", .max_failures = 3};
    a2_settlement bad = {.attempt = at, .fail = &fr, .claim_next = &req};
    assert_int_equal(a2_store_settle(f->s, f->session, &bad, 1, NULL, 0, &res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "claim_next"));
    bad = (a2_settlement){.attempt = {"x", NULL, 1, 1}, .claim_next = &req};
    assert_int_equal(a2_store_settle(f->s, f->session, &bad, 1, NULL, 0, &res),
                     A2_EINVALID_ARGUMENT);
    a2_claim_request noholder = {.ttl_ms = 1000};
    bad = (a2_settlement){.attempt = at, .claim_next = &noholder};
    assert_int_equal(a2_store_settle(f->s, f->session, &bad, 1, NULL, 0, &res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "holder"));
    a2_settlement *many = calloc(A2_STORE_MAX_SETTLE / 2 + 1, sizeof *many);
    assert_non_null(many);
    for (size_t i = 0; i <= A2_STORE_MAX_SETTLE / 2; i++)
        many[i] = (a2_settlement){.attempt = at, .claim_next = &req};
    assert_int_equal(a2_store_settle(f->s, f->session, many,
                                     A2_STORE_MAX_SETTLE / 2 + 1, NULL, 0,
                                     &res),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message,
                           "settlements and claims"));
    free(many);
    assert_int_equal(a2_store_round_trips(f->s), trips);
}

/* ── the runner ───────────────────────────────────────────────────────── */

typedef struct {
    int calls;
    const char *taken_id; /* b returns an event with this id (NULL: none) */
    int sleep_ms;         /* each call takes this long */
    fx *f;                /* with sleep_ms: c's call counts a's "done" */
    int64_t done_before_c;
    int64_t seen[32]; /* the index of each head run, in order */
} hctx;

/* a completes returning "done"; b fails, or returns an event under
 * taken_id; every other consumer completes. */
static int handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    hctx *h = ctx;
    if (h->calls < 32)
        h->seen[h->calls] = head->event.index;
    h->calls++;
    const char *c = head->dispatch.consumer;
    if (h->sleep_ms > 0)
        a2_test_sleep_ms(h->sleep_ms);
    if (h->f && strcmp(c, "c") == 0)
        h->done_before_c =
                a2_test_fx_rows(h->f, "a2_events", "event_type = 'done'");
    if (strcmp(c, "a") == 0)
        return a2_worker_reply_add(reply, "done", "{\"n\":1}", NULL);
    if (strcmp(c, "b") == 0 && h->taken_id)
        return a2_worker_reply_add(reply, "other", NULL, h->taken_id);
    if (strcmp(c, "b") == 0) {
        a2_worker_reply_error(reply, "b failed");
        return 1;
    }
    return 0;
}

/* A runner on the test database serving consumers a, b, c; its log lines
 * go to log (NULL: none). */
static a2_worker_runner *runner_logged(hctx *h, a2_worker_log_fn log,
                                       void *log_ctx)
{
    static const a2_consumer cons[] = {{.name = "a"}, {.name = "b"},
                                       {.name = "c"}};
    char err[512];
    a2_worker_runner_options o = {.db = a2_test_db(),
                                  .holder = "settle-runner",
                                  .consumers = cons,
                                  .nconsumers = 3,
                                  .ttl_ms = 30000,
                                  .max_failures = 3,
                                  .retry_after_ms = 60000,
                                  .handler = handler,
                                  .ctx = h,
                                  .log = log,
                                  .log_ctx = log_ctx};
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    if (!r)
        fail_msg("runner: %s", err);
    return r;
}

static a2_worker_runner *runner_new(hctx *h)
{
    return runner_logged(h, NULL, NULL);
}

/* Appends an event for a, b and c and runs the session once with a runner
 * on h: each head's handler was called. */
static a2_worker_runner *run_three(fx *f, hctx *h, a2_worker_run_stats *st)
{
    const char *cons[] = {"a", "b", "c"};
    append_for(f, cons, 3);
    a2_worker_runner *r = runner_new(h);
    assert_int_equal(a2_worker_runner_run(r, f->session, false, st), 0);
    assert_int_equal(h->calls, 3);
    return r;
}

/* A woken run of a lane's first head works the lane through: each
 * completion claims the lane's next head in its round trip, in index
 * order, for 16 runs in a row; the 17th run's completion claims nothing
 * (the rest of the lane comes back by its wake-up, behind other sessions),
 * and the next woken run takes it from there. */
static void test_runner_claims_lane_next(void **state)
{
    fx *f = *state;
    enum { N = 20, CHAIN = 17 };
    a2_target lane = {.consumer = "c", .lane = "L"};
    append_n(f, &lane, N);
    a2_events out;
    hctx h = {0};
    a2_worker_runner *r = runner_new(&h);
    a2_worker_run_stats st;
    assert_int_equal(a2_worker_runner_run_woken(r, f->session, false, 0, &st),
                     0);
    assert_int_equal(h.calls, CHAIN);
    assert_int_equal(st.claimed, CHAIN);
    assert_int_equal(st.claimed_next, CHAIN - 1);
    assert_int_equal(st.completed, CHAIN);
    assert_int_equal(st.retry_at, 0);
    assert_int_equal(a2_worker_runner_run_woken(r, f->session, false, 0, &st),
                     0);
    assert_int_equal(h.calls, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(h.seen[i], i + 1);
    assert_int_equal(st.claimed_next, N - CHAIN - 1);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors",
                                     "consumer = 'c' and claim_holder is not "
                                     "null"),
                     0);
    /* a failed lane head is not followed by a claim: it is held for its
     * retry and the run ends */
    a2_target blane = {.consumer = "b", .lane = "M"};
    a2_append_event bev[2] = {{.type = "x", .targets = &blane, .ntargets = 1},
                              {.type = "y", .targets = &blane, .ntargets = 1}};
    OK(a2_store_append(f->s, f->session, bev, 2, NULL, &out));
    a2_events_free(&out);
    h.calls = 0;
    assert_int_equal(a2_worker_runner_run_woken(r, f->session, false, 0, &st),
                     0);
    assert_int_equal(h.calls, 1);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.claimed_next, 0);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors",
                                     "consumer = 'b' and head = 21 and "
                                     "failure_count = 1"),
                     1);
    a2_worker_runner_free(r);
}

/* Counts the runner's log lines that say a settle was refused. */
static void count_refusals(void *ctx, const char *line)
{
    if (strstr(line, "refused"))
        (*(int *)ctx)++;
}

/* A claim of more heads than one settle takes (1,000 operations): their
 * outcomes go in several settle calls, none refused (a range past the bound
 * had been refused whole and settled one head a call). */
static void test_runner_settles_many_heads(void **state)
{
    fx *f = *state;
    enum { N = 1100 };
    a2_target tg = {.consumer = "c"};
    append_n(f, &tg, N);
    hctx h = {0};
    int refusals = 0;
    a2_worker_runner *r = runner_logged(&h, count_refusals, &refusals);
    a2_worker_run_stats st;
    assert_int_equal(a2_worker_runner_run_woken(r, f->session, false, 0, &st),
                     0);
    assert_int_equal(st.claimed, N);
    assert_int_equal(st.completed, N);
    assert_int_equal(refusals, 0);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors",
                                     "consumer = 'c' and head is not null"),
                     0);
    a2_worker_runner_free(r);
}

/* One claim of three heads: their outcomes go in one round trip. */
static void test_runner_settles_together(void **state)
{
    fx *f = *state;
    hctx h = {0};
    a2_worker_run_stats st;
    a2_worker_runner *r = run_three(f, &h, &st);
    assert_int_equal(st.claimed, 3);
    assert_int_equal(st.settled_together, 3);
    assert_int_equal(st.completed, 2);
    assert_int_equal(st.failed, 1);
    assert_true(st.retry_at > 0); /* b's retry hold */
    assert_int_equal(a2_test_fx_rows(f, "a2_events",
                                     "event_type = 'done' and "
                                     "cause->>'consumer' = 'a'"),
                     1);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors",
                                     "consumer = 'b' and failure_count = 1"),
                     1);
    a2_worker_runner_free(r);
}

/* Slow handlers: each outcome is settled before the next handler runs
 * (a's "done" is stored when c's handler starts). */
static void test_runner_settles_slow_at_once(void **state)
{
    fx *f = *state;
    hctx h = {.sleep_ms = 20, .f = f, .done_before_c = -1};
    a2_worker_run_stats st;
    a2_worker_runner *r = run_three(f, &h, &st);
    assert_int_equal(st.settled_together, 0);
    assert_int_equal(st.completed, 2);
    assert_int_equal(st.failed, 1);
    assert_int_equal(h.done_before_c, 1);
    a2_worker_runner_free(r);
}

/* b's returned event takes a live event's id: the call is refused, each
 * head is settled on its own, and b's attempt fails with the reason. */
static void test_runner_settles_one_by_one(void **state)
{
    fx *f = *state;
    hctx h = {.taken_id = "ev-1"};
    a2_worker_run_stats st;
    a2_worker_runner *r = run_three(f, &h, &st);
    assert_int_equal(st.settled_together, 0);
    assert_int_equal(st.completed, 2);
    assert_int_equal(st.failed, 1);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", "event_type = 'done'"),
                     1);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", "event_type = 'other'"),
                     0);
    assert_int_equal(
            a2_test_fx_rows(f, "a2_cursors",
                            "consumer = 'b' and last_error like "
                            "'returned events refused:%PARTIAL_DUPLICATE%'"),
            1);
    a2_worker_runner_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_settle_outcomes, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_settle_all_or_nothing, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_settle_invalid, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_settle_claim_next, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_runner_settles_together,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_runner_claims_lane_next,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_runner_settles_many_heads,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_runner_settles_one_by_one,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_runner_settles_slow_at_once,
                                            setup, a2_test_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
