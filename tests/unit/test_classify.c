/*
 * Transition classifier: one table row per rule (and the near misses that
 * must fall to "other"), each a (before, after) pair of a2_cursors rows.
 */
#include "a2/decoder.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* cmocka needs these first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#define T(s)  ((a2_change_text){(s), sizeof(s) - 1})
#define NUL_T ((a2_change_text){NULL, 0})
#define I(v)  ((a2_change_int){(v), false})
#define NUL_I ((a2_change_int){0, true})

/* An unclaimed run of kind `kind` at head 3 (position 2). */
static a2_cursor_row base(const char *kind)
{
    a2_cursor_row r;
    memset(&r, 0, sizeof r);
    r.present = (1u << A2_CURSOR_NCOLS) - 1;
    r.session_id = T("s1");
    r.consumer = T("agentA");
    r.kind = (a2_change_text){kind, strlen(kind)};
    if (strcmp(kind, "event") == 0) {
        r.cursor_key = T("#3");
    } else if (strcmp(kind, "lane") == 0) {
        r.cursor_key = T("lane:q");
        r.lane = T("q");
    } else {
        r.cursor_key = T("log");
        r.types = T("[\"job\"]");
    }
    r.epoch = 3;
    r.position = 2;
    r.head = I(3);
    r.first_claimed_at = r.last_claimed_at = r.claim_expires_at = NUL_I;
    r.last_failed_at = r.last_failed_attempt = r.failed_at = NUL_I;
    r.completed_idx = r.completed_attempt = NUL_I;
    return r;
}

static void claim(a2_cursor_row *r, const char *holder, int64_t now)
{
    r->attempt_count++;
    if (r->first_claimed_at.null)
        r->first_claimed_at = I(now);
    r->last_claimed_at = I(now);
    r->claim_holder = (a2_change_text){holder, strlen(holder)};
    r->claim_expires_at = I(now + 30000);
}

/* A completion's or clear's dispatch columns. */
static void fresh(a2_cursor_row *r)
{
    r->attempt_count = 0;
    r->first_claimed_at = r->last_claimed_at = r->claim_expires_at = NUL_I;
    r->claim_holder = NUL_T;
    r->failure_count = 0;
    r->last_failed_at = r->last_failed_attempt = r->failed_at = NUL_I;
    r->last_error = NUL_T;
}

static void fail_attempt(a2_cursor_row *r, int64_t now, bool dead)
{
    r->failure_count++;
    r->last_error = T("boom");
    r->last_failed_at = I(now);
    r->last_failed_attempt = I(r->attempt_count);
    r->claim_holder = NUL_T;
    r->claim_expires_at = dead ? NUL_I : I(now + 5000);
    if (dead)
        r->failed_at = I(now);
}

typedef struct tcase {
    const char *name;
    const char *kind;
    /* Edits b (from base) and then a (from the edited b). */
    void (*edit)(a2_cursor_row *b, a2_cursor_row *a);
    a2_transition want;
    int shape; /* 0 update, 1 insert (no before), 2 delete (no after) */
} tcase;

/* ---- edits ---- */

static void e_none(a2_cursor_row *b, a2_cursor_row *a)
{
    (void)b;
    (void)a;
}

static void e_claim(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    claim(a, "w1", 1000);
}

static void e_claim_after_hold(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    fail_attempt(b, 2000, false);
    *a = *b;
    claim(a, "w2", 8000);
}

static void e_claim_counts_failure(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    claim(a, "w1", 1000);
    a->failure_count = 1;
}

static void e_claim_dead_head(a2_cursor_row *b, a2_cursor_row *a)
{
    b->failed_at = I(500);
    *a = *b;
    claim(a, "w1", 1000);
}

static void e_claim_no_expiry(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    claim(a, "w1", 1000);
    a->claim_expires_at = NUL_I;
}

static void e_renew(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->claim_expires_at = I(60000);
}

static void e_renew_other_holder(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->claim_expires_at = I(60000);
    a->claim_holder = T("w9");
}

static void e_renew_unclaimed(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->claim_expires_at = I(60000);
}

static void e_takeover(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    claim(a, "w2", 40000);
    a->failure_count++;
}

static void e_takeover_same_failures(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    claim(a, "w2", 40000);
}

static void e_takeover_dead(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->attempt_count++;
    a->failure_count++;
    a->failed_at = I(40000);
    a->claim_holder = NUL_T;
    a->claim_expires_at = NUL_I;
}

static void e_takeover_dead_claim_times_moved(a2_cursor_row *b,
                                              a2_cursor_row *a)
{
    e_takeover_dead(b, a);
    a->last_claimed_at = I(40000);
}

static void e_fail(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    fail_attempt(a, 2000, false);
}

static void e_fail_no_retry_time(a2_cursor_row *b, a2_cursor_row *a)
{
    e_fail(b, a);
    a->claim_expires_at = NUL_I;
}

static void e_fail_wrong_attempt(a2_cursor_row *b, a2_cursor_row *a)
{
    e_fail(b, a);
    a->last_failed_attempt = I(7);
}

static void e_fail_unclaimed(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    fail_attempt(a, 2000, false);
}

static void e_fail_dead(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    fail_attempt(a, 2000, true);
}

static void e_fail_dead_with_hold(a2_cursor_row *b, a2_cursor_row *a)
{
    e_fail_dead(b, a);
    a->claim_expires_at = I(9000);
}

static void dead(a2_cursor_row *b)
{
    claim(b, "w1", 1000);
    fail_attempt(b, 2000, true);
}

static void e_retry(a2_cursor_row *b, a2_cursor_row *a)
{
    dead(b);
    *a = *b;
    a->failed_at = NUL_I;
    a->failure_count = 0;
}

static void e_retry_keeps_count(a2_cursor_row *b, a2_cursor_row *a)
{
    dead(b);
    *a = *b;
    a->failed_at = NUL_I;
}

/* cancel: failed_at set, the claim or hold released, no failure counted. */
static void cancel(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->failed_at = I(9000);
    a->last_error = T("cancelled: not wanted");
    a->claim_holder = (a2_change_text){NULL, 0};
    a->claim_expires_at = NUL_I;
}

static void e_cancel_waiting(a2_cursor_row *b, a2_cursor_row *a)
{
    cancel(b, a);
}

static void e_cancel_delayed(a2_cursor_row *b, a2_cursor_row *a)
{
    b->claim_expires_at = I(50000);
    cancel(b, a);
}

static void e_cancel_lapsed(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    cancel(b, a);
}

static void e_cancel_keeps_hold(a2_cursor_row *b, a2_cursor_row *a)
{
    b->claim_expires_at = I(50000);
    cancel(b, a);
    a->claim_expires_at = I(50000);
}

static void e_cancel_counts_failure(a2_cursor_row *b, a2_cursor_row *a)
{
    cancel(b, a);
    a->failure_count = b->failure_count + 1;
}

static void e_cancel_moves_failure_record(a2_cursor_row *b,
                                          a2_cursor_row *a)
{
    cancel(b, a);
    a->last_failed_at = I(9000);
}

static void e_skip(a2_cursor_row *b, a2_cursor_row *a)
{
    dead(b);
    *a = *b;
    a->position = b->head.value;
    a->head = I(5);
    fresh(a);
}

static void e_skip_to_idle(a2_cursor_row *b, a2_cursor_row *a)
{
    e_skip(b, a);
    a->head = NUL_I;
}

static void e_skip_with_receipt(a2_cursor_row *b, a2_cursor_row *a)
{
    e_skip(b, a);
    a->completed_idx = I(3);
}

static void complete(a2_cursor_row *b, a2_cursor_row *a, a2_change_int next)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->position = b->head.value;
    a->head = next;
    fresh(a);
}

static void e_complete_lane(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(4));
}

static void e_complete_lane_receipt(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(4));
    a->completed_idx = I(3);
}

static void e_complete_backwards(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(2));
}

/* The lane's next event is delayed: its head is held until then. */
static void e_complete_to_delayed(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(4));
    a->claim_expires_at = I(99999);
}

static void e_complete_keeps_claim(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(4));
    a->claim_holder = T("w1");
}

static void e_complete_log_retype(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(7));
    a->types = T("[\"job\", \"tool\"]");
    a->completed_idx = I(3);
    a->completed_attempt = I(1);
    a->returned_event_ids = T("[\"ev-9\"]");
}

static void e_complete_log_no_receipt(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(7));
}

static void e_complete_lane_retype(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, I(4));
    a->types = T("[\"x\"]");
}

static void e_idle_event(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, NUL_I);
    a->completed_idx = I(3);
    a->completed_attempt = I(1);
    a->returned_event_ids = T("[]");
}

static void e_idle_lane(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, NUL_I);
}

static void e_idle_event_no_receipt(a2_cursor_row *b, a2_cursor_row *a)
{
    complete(b, a, NUL_I);
}

static void e_retype(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->types = T("[\"job\", \"tool\"]");
}

static void e_retype_claimed(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->types = T("[]");
}

static void e_retype_and_renew(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->types = T("[]");
    a->claim_expires_at = I(99999);
}

static void e_release(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->head = NUL_I;
    fresh(a);
}

static void e_release_keeps_claim(a2_cursor_row *b, a2_cursor_row *a)
{
    e_release(b, a);
    a->claim_holder = T("w1");
}

static void e_idle(a2_cursor_row *b, a2_cursor_row *a)
{
    (void)a;
    b->head = NUL_I;
}

static void e_key_change(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->epoch = 9;
}

static void e_kind_change(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->kind = T("lane");
}

static void e_position_only(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    a->position = 99;
}

static void e_no_change(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
}

static void e_attempt_jump(a2_cursor_row *b, a2_cursor_row *a)
{
    *a = *b;
    claim(a, "w1", 1000);
    a->attempt_count = 5;
}

static void e_error_text_only(a2_cursor_row *b, a2_cursor_row *a)
{
    claim(b, "w1", 1000);
    *a = *b;
    a->last_error = T("edited");
}

static void e_head_from_null(a2_cursor_row *b, a2_cursor_row *a)
{
    b->head = NUL_I;
    *a = *b;
    a->head = I(4);
}

static const tcase cases[] = {
        {"insert", "event", e_none, A2_TRANSITION_STARTED, 1},
        {"claim", "event", e_claim, A2_TRANSITION_CLAIMED, 0},
        {"claim after a retry hold", "lane", e_claim_after_hold,
         A2_TRANSITION_CLAIMED, 0},
        {"claim that counts a failure without a holder", "event",
         e_claim_counts_failure, A2_TRANSITION_OTHER, 0},
        {"claim of a dead head", "event", e_claim_dead_head,
         A2_TRANSITION_OTHER, 0},
        {"claim without a lease", "event", e_claim_no_expiry,
         A2_TRANSITION_OTHER, 0},
        {"attempt jumps by more than one", "event", e_attempt_jump,
         A2_TRANSITION_OTHER, 0},
        {"renew", "log", e_renew, A2_TRANSITION_RENEWED, 0},
        {"renew by another holder", "event", e_renew_other_holder,
         A2_TRANSITION_OTHER, 0},
        {"lease set on an unclaimed head", "event", e_renew_unclaimed,
         A2_TRANSITION_OTHER, 0},
        {"takeover of a lapsed claim", "event", e_takeover,
         A2_TRANSITION_TAKEN_OVER, 0},
        {"takeover without the failure", "event", e_takeover_same_failures,
         A2_TRANSITION_OTHER, 0},
        {"takeover at max failures", "lane", e_takeover_dead,
         A2_TRANSITION_DEAD_LETTERED, 0},
        {"dead takeover that moves claim times", "lane",
         e_takeover_dead_claim_times_moved, A2_TRANSITION_OTHER, 0},
        {"fail with retry-after", "event", e_fail, A2_TRANSITION_FAILED, 0},
        {"fail without a retry time", "event", e_fail_no_retry_time,
         A2_TRANSITION_FAILED, 0},
        {"fail naming another attempt", "event", e_fail_wrong_attempt,
         A2_TRANSITION_OTHER, 0},
        {"fail of an unclaimed head", "event", e_fail_unclaimed,
         A2_TRANSITION_OTHER, 0},
        {"fail at max failures", "log", e_fail_dead,
         A2_TRANSITION_DEAD_LETTERED, 0},
        {"dead letter with a hold", "log", e_fail_dead_with_hold,
         A2_TRANSITION_OTHER, 0},
        {"redrive retry", "event", e_retry, A2_TRANSITION_RETRIED, 0},
        {"retry that keeps the failure count", "event", e_retry_keeps_count,
         A2_TRANSITION_OTHER, 0},
        {"redrive skip to a next head", "lane", e_skip, A2_TRANSITION_SKIPPED,
         0},
        {"redrive skip to idle", "event", e_skip_to_idle, A2_TRANSITION_SKIPPED,
         0},
        {"skip that writes a receipt", "event", e_skip_with_receipt,
         A2_TRANSITION_OTHER, 0},
        {"cancel of a waiting head", "event", e_cancel_waiting,
         A2_TRANSITION_CANCELLED, 0},
        {"cancel of a delayed head", "lane", e_cancel_delayed,
         A2_TRANSITION_CANCELLED, 0},
        {"cancel of a lapsed claim", "log", e_cancel_lapsed,
         A2_TRANSITION_CANCELLED, 0},
        {"cancel that keeps the hold", "lane", e_cancel_keeps_hold,
         A2_TRANSITION_OTHER, 0},
        {"cancel that counts a failure", "event", e_cancel_counts_failure,
         A2_TRANSITION_OTHER, 0},
        {"cancel that moves the failure record", "event",
         e_cancel_moves_failure_record, A2_TRANSITION_OTHER, 0},
        {"complete a lane head", "lane", e_complete_lane,
         A2_TRANSITION_COMPLETED, 0},
        {"lane completion with a cursor receipt", "lane",
         e_complete_lane_receipt, A2_TRANSITION_OTHER, 0},
        {"complete a log head, retyped", "log", e_complete_log_retype,
         A2_TRANSITION_COMPLETED, 0},
        {"log completion without its receipt", "log", e_complete_log_no_receipt,
         A2_TRANSITION_OTHER, 0},
        {"lane completion that changes types", "lane", e_complete_lane_retype,
         A2_TRANSITION_OTHER, 0},
        {"head moves backwards", "lane", e_complete_backwards,
         A2_TRANSITION_OTHER, 0},
        {"complete to a delayed next head", "lane", e_complete_to_delayed,
         A2_TRANSITION_COMPLETED, 0},
        {"completion that keeps the claim", "lane", e_complete_keeps_claim,
         A2_TRANSITION_OTHER, 0},
        {"complete an event cursor", "event", e_idle_event,
         A2_TRANSITION_WENT_IDLE, 0},
        {"complete a lane's last head", "lane", e_idle_lane,
         A2_TRANSITION_WENT_IDLE, 0},
        {"event completion without its receipt", "event",
         e_idle_event_no_receipt, A2_TRANSITION_OTHER, 0},
        {"wake_log retypes a kept run", "log", e_retype, A2_TRANSITION_RETYPED,
         0},
        {"retype of a claimed run", "log", e_retype_claimed,
         A2_TRANSITION_RETYPED, 0},
        {"retype with a lease change", "log", e_retype_and_renew,
         A2_TRANSITION_OTHER, 0},
        {"clear releases the clearing head", "log", e_release,
         A2_TRANSITION_RELEASED, 0},
        {"release that keeps the claim", "log", e_release_keeps_claim,
         A2_TRANSITION_OTHER, 0},
        {"delete of an idle run", "lane", e_idle, A2_TRANSITION_RETIRED, 2},
        {"delete of a run with a head", "event", e_none, A2_TRANSITION_DELETED,
         2},
        {"key column changed", "event", e_key_change, A2_TRANSITION_OTHER, 0},
        {"kind changed", "event", e_kind_change, A2_TRANSITION_OTHER, 0},
        {"position edited", "event", e_position_only, A2_TRANSITION_OTHER, 0},
        {"no change", "event", e_no_change, A2_TRANSITION_OTHER, 0},
        {"last_error edited", "event", e_error_text_only, A2_TRANSITION_OTHER,
         0},
        {"head set on an idle run", "lane", e_head_from_null,
         A2_TRANSITION_OTHER, 0},
};

static void run_case(void **state)
{
    const tcase *tc = *state;
    a2_cursor_row b = base(tc->kind), a = base(tc->kind);
    tc->edit(&b, &a);
    const a2_cursor_row *bp = tc->shape == 1 ? NULL : &b;
    const a2_cursor_row *ap = tc->shape == 2 ? NULL : &a;
    a2_transition got = a2_transition_classify(bp, ap);
    if (got != tc->want)
        fail_msg("%s: got %s, want %s", tc->name, a2_transition_name(got),
                 a2_transition_name(tc->want));
}

static void test_names(void **state)
{
    (void)state;
    static const char *const want[A2_TRANSITION_COUNT] = {
            "started",   "claimed",  "renewed",       "taken_over", "completed",
            "went_idle", "failed",   "dead_lettered", "retried",    "skipped",
            "retyped",   "released", "retired",       "deleted",    "cancelled",
            "other"};
    for (int t = 0; t < A2_TRANSITION_COUNT; t++)
        assert_string_equal(a2_transition_name((a2_transition)t), want[t]);
    assert_string_equal(a2_transition_name((a2_transition)-1), "other");
    assert_string_equal(a2_transition_name((a2_transition)A2_TRANSITION_COUNT),
                        "other");
}

static void test_no_rows(void **state)
{
    (void)state;
    assert_int_equal(a2_transition_classify(NULL, NULL), A2_TRANSITION_OTHER);
    assert_int_equal(a2_change_transition(NULL), A2_TRANSITION_OTHER);
}

static void test_cleared_delete(void **state)
{
    (void)state;
    a2_cursor_row b = base("lane"); /* head 3 */
    /* Superseded by a clear at or above its head: retired. */
    assert_int_equal(a2_transition_classify_cleared(&b, NULL, 3),
                     A2_TRANSITION_RETIRED);
    assert_int_equal(a2_transition_classify_cleared(&b, NULL, 10),
                     A2_TRANSITION_RETIRED);
    /* A live head above the marker: deleted. */
    assert_int_equal(a2_transition_classify_cleared(&b, NULL, 2),
                     A2_TRANSITION_DELETED);
    /* Updates classify as without the marker. */
    a2_cursor_row a = b;
    claim(&a, "w1", 1);
    assert_int_equal(a2_transition_classify_cleared(&b, &a, 2),
                     A2_TRANSITION_CLAIMED);
}

int main(void)
{
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[N + 3];
    for (size_t i = 0; i < N; i++) {
        tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL,
                                       (void *)(uintptr_t)&cases[i]};
    }
    tests[N] = (struct CMUnitTest)cmocka_unit_test(test_names);
    tests[N + 1] = (struct CMUnitTest)cmocka_unit_test(test_no_rows);
    tests[N + 2] = (struct CMUnitTest)cmocka_unit_test(test_cleared_delete);
    return _cmocka_run_group_tests("classify", tests, N + 3, NULL, NULL);
}
