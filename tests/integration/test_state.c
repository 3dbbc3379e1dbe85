/*
 * liba2store snapshots against a real PostgreSQL: write_state and
 * read_state, pins only on live heads, their release on complete, skip and
 * dead letter, history kept while a pin needs it, the clear marker, and
 * write_state under the session lock.
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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef a2_test_fx fx;

static int setup(void **state)
{
    *state = a2_test_fx_new(NULL, 1000000, "state");
    return 0;
}

#define OK(expr) A2_TEST_OK(f->s, expr)

static int64_t pins_of(fx *f)
{
    return a2_test_fx_rows(f, "a2_snapshot_pins", NULL);
}

static int64_t history_of(fx *f)
{
    return a2_test_fx_rows(f, "a2_snapshot_history", NULL);
}

/* Appends n events of type "e", each targeted at targets. */
static void append_n(fx *f, int n, const a2_target *targets, size_t ntargets)
{
    for (int i = 0; i < n; i++) {
        a2_append_event ev = {
                .type = "e", .targets = targets, .ntargets = ntargets};
        a2_events out;
        OK(a2_store_append(f->s, f->session, &ev, 1, NULL, &out));
        a2_events_free(&out);
    }
}

static void claim_all(fx *f)
{
    a2_claim_request req = {.holder = "h", .ttl_ms = 30000};
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    a2_claim_result_free(&cr);
}

/* Event 1 of the session, targeted at consumer "a" and claimed. */
static void claimed_head(fx *f)
{
    a2_target tg = {.consumer = "a"};
    append_n(f, 1, &tg, 1);
    claim_all(f);
}

/* Writes one version of reducer "r" with pins; returns the result. */
static a2_state_write_result write1(fx *f, int64_t up_to, const char *json,
                                    const a2_state_pin *pins, size_t npins)
{
    a2_state_write w = {
            .up_to_index = up_to, .state = json, .pins = pins, .npins = npins};
    a2_state_write_result wr;
    OK(a2_store_write_state(f->s, f->session, "r", &w, 1, &wr));
    return wr;
}

static void expect_state(fx *f, int64_t at, bool found, int64_t up_to,
                         const char *json)
{
    a2_state st;
    OK(a2_store_read_state(f->s, f->session, "r", at, &st));
    assert_int_equal(st.found, found);
    if (found) {
        assert_int_equal(st.up_to_index, up_to);
        assert_string_equal(st.state, json);
        assert_true(st.written_at >= 1000000 && st.written_at <= f->now);
    } else {
        assert_null(st.state);
    }
    a2_state_free(&st);
    a2_state_free(&st); /* idempotent */
}

/* Writing w (n writes) to reducer "r" of the fixture's session is refused
 * as an invalid argument. */
static void expect_invalid_write(fx *f, const a2_state_write *w, size_t n)
{
    a2_state_write_result wr;
    assert_int_equal(a2_store_write_state(f->s, f->session, "r", w, n, &wr),
                     A2_EINVALID_ARGUMENT);
}

static void test_invalid_arguments(void **state)
{
    fx *f = *state;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_state_write_result wr;
    a2_state_write w = {.up_to_index = 1, .state = "{}"};
    assert_int_equal(a2_store_write_state(f->s, "", "r", &w, 1, &wr),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_write_state(f->s, f->session, NULL, &w, 1, &wr),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(
            a2_store_write_state(f->s, f->session, "r\xff", &w, 1, &wr),
            A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_write_state(f->s, f->session, "r", NULL, 0, &wr),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_write_state(f->s, f->session, "r", &w, 1, NULL),
                     A2_EINVALID_ARGUMENT);
    w.state = "{\"a\":";
    expect_invalid_write(f, &w, 1);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "JSON"));
    w.state = "\"a\\u0000b\"";
    expect_invalid_write(f, &w, 1);
    w.state = NULL;
    expect_invalid_write(f, &w, 1);
    w.state = "{}";
    w.up_to_index = -1;
    expect_invalid_write(f, &w, 1);
    w.up_to_index = 1;
    a2_state_pin pin = {.consumer = "c", .index = 0};
    w.pins = &pin;
    w.npins = 1;
    expect_invalid_write(f, &w, 1);
    pin.index = 1;
    pin.consumer = "";
    expect_invalid_write(f, &w, 1);
    pin.consumer = "c";
    pin.lane = "";
    expect_invalid_write(f, &w, 1);
    w.pins = NULL;
    expect_invalid_write(f, &w, 1);
    w.npins = 0;
    a2_state_write two[2] = {w, w};
    expect_invalid_write(f, two, 2);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "two writes"));
    a2_state st;
    assert_int_equal(a2_store_read_state(f->s, f->session, "", 1, &st),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_read_state(f->s, f->session, "r", -2, &st),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_read_state(NULL, f->session, "r", 1, &st),
                     A2_EINVALID_ARGUMENT);
    /* Refused before any I/O; nothing stored. */
    assert_int_equal(a2_store_round_trips(f->s), trips);
    assert_int_equal(a2_test_fx_rows(f, "a2_snapshots", NULL), 0);
    a2_state_free(NULL);
}

static void test_latest_and_at(void **state)
{
    fx *f = *state;
    expect_state(f, A2_STORE_NONE, false, 0, NULL);
    uint64_t trips = a2_store_round_trips(f->s);
    a2_state_write_result wr = write1(f, 3, "{\"n\": 3}", NULL, 0);
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_true(wr.replaced_latest);
    assert_int_equal(wr.up_to_index, 3);
    expect_state(f, A2_STORE_NONE, true, 3, "{\"n\": 3}");
    trips = a2_store_round_trips(f->s);
    expect_state(f, 3, true, 3, "{\"n\": 3}");
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    expect_state(f, 2, false, 0, NULL); /* nothing at or below 2 */
    /* An older write leaves the latest; an equal one replaces it. */
    f->now += 10;
    wr = write1(f, 2, "[2]", NULL, 0);
    assert_false(wr.replaced_latest);
    assert_int_equal(wr.up_to_index, 3);
    expect_state(f, A2_STORE_NONE, true, 3, "{\"n\": 3}");
    wr = write1(f, 3, "\"three\"", NULL, 0);
    assert_true(wr.replaced_latest);
    expect_state(f, A2_STORE_NONE, true, 3, "\"three\"");
    /* Unpinned versions are not kept: at 2 there is nothing. */
    expect_state(f, 2, false, 0, NULL);
    assert_int_equal(history_of(f), 0);
    /* Several writes in one call: the newest is the latest. */
    a2_state_write ws[3] = {{.up_to_index = 5, .state = "5"},
                            {.up_to_index = 7, .state = "null"},
                            {.up_to_index = 6, .state = "6"}};
    OK(a2_store_write_state(f->s, f->session, "r", ws, 3, &wr));
    assert_true(wr.replaced_latest);
    assert_int_equal(wr.up_to_index, 7);
    expect_state(f, A2_STORE_NONE, true, 7, "null");
    expect_state(f, 100, true, 7, "null");
    /* Reducers are apart. */
    a2_state other;
    OK(a2_store_read_state(f->s, f->session, "other", A2_STORE_NONE, &other));
    assert_false(other.found);
    a2_state_free(&other);
}

static void test_pins_only_live_heads(void **state)
{
    fx *f = *state;
    a2_target tg[2] = {{.consumer = "c"}, {.consumer = "l", .lane = "q"}};
    append_n(f, 3, tg, 2); /* c: #1 #2 #3 concurrent; l: lane q at 1 */
    claim_all(f);
    a2_state_pin pins[] = {
            {.consumer = "c", .index = 1},              /* live */
            {.consumer = "l", .lane = "q", .index = 1}, /* live lane head */
            {.consumer = "l", .lane = "q", .index = 2}, /* not its head */
            {.consumer = "c", .lane = "q", .index = 1}, /* no such cursor */
            {.consumer = "zz", .index = 2},             /* no such consumer */
            {.consumer = "c", .index = 9},              /* no event */
            {.consumer = "c", .index = 1},              /* repeated */
    };
    a2_state_write_result wr = write1(f, 1, "1", pins, 7);
    assert_int_equal(wr.pins_accepted, 2);
    assert_int_equal(wr.pins_refused, 4);
    assert_int_equal(pins_of(f), 2);
    assert_int_equal(history_of(f), 1);
    /* A completed head takes no pin. */
    a2_attempt_ref at = {.consumer = "c", .index = 2, .attempt = 1};
    a2_complete_result cr;
    OK(a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &cr));
    assert_int_equal(cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&cr);
    a2_state_pin done = {.consumer = "c", .index = 2};
    wr = write1(f, 2, "2", &done, 1);
    assert_int_equal(wr.pins_accepted, 0);
    assert_int_equal(wr.pins_refused, 1);
    /* A dead-lettered head takes no pin. */
    a2_attempt_ref at3 = {.consumer = "c", .index = 3, .attempt = 1};
    a2_fail_request freq = {.error = "x", .max_failures = 1};
    a2_fail_result fr;
    OK(a2_store_fail(f->s, f->session, &at3, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_DEAD_LETTERED);
    a2_state_pin dead = {.consumer = "c", .index = 3};
    wr = write1(f, 3, "3", &dead, 1);
    assert_int_equal(wr.pins_accepted, 0);
    assert_int_equal(wr.pins_refused, 1);
    /* No history was kept for versions without an accepted pin. */
    assert_int_equal(history_of(f), 1);
    assert_int_equal(pins_of(f), 2);
    expect_state(f, 1, true, 1, "1");
    expect_state(f, 2, true, 1, "1"); /* 2 was not kept */
    /* Below the clear marker: a write fails whole, pins are refused. */
    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    assert_int_equal(clr.clear_index, 4);
    a2_state_write w = {.up_to_index = 3, .state = "3"};
    assert_int_equal(a2_store_write_state(f->s, f->session, "r", &w, 1, &wr),
                     A2_ESESSION_CLEARED);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "clear marker"));
    expect_state(f, A2_STORE_NONE, false, 0, NULL); /* 3 lies below 4 */
    a2_state_pin old = {.consumer = "l", .lane = "q", .index = 1};
    wr = write1(f, 4, "4", &old, 1);
    assert_int_equal(wr.pins_accepted, 0);
    expect_state(f, A2_STORE_NONE, true, 4, "4");
}

/* Two heads pin version 1, one of them version 2 as well. */
static void pin_two_heads(fx *f)
{
    a2_target tg[2] = {{.consumer = "a"}, {.consumer = "b", .lane = "q"}};
    append_n(f, 2, tg, 2);
    claim_all(f);
    a2_state_pin both[2] = {{.consumer = "a", .index = 1},
                            {.consumer = "b", .lane = "q", .index = 1}};
    a2_state_pin b_only = {.consumer = "b", .lane = "q", .index = 1};
    a2_state_write ws[2] = {
            {.up_to_index = 1, .state = "\"v1\"", .pins = both, .npins = 2},
            {.up_to_index = 2, .state = "\"v2\"", .pins = &b_only, .npins = 1}};
    a2_state_write_result wr;
    OK(a2_store_write_state(f->s, f->session, "r", ws, 2, &wr));
    assert_int_equal(wr.pins_accepted, 3);
    assert_int_equal(pins_of(f), 3);
    assert_int_equal(history_of(f), 2);
    /* Newer states do not hide the pinned versions. */
    write1(f, 9, "\"v9\"", NULL, 0);
    expect_state(f, 1, true, 1, "\"v1\"");
    expect_state(f, 2, true, 2, "\"v2\"");
    expect_state(f, A2_STORE_NONE, true, 9, "\"v9\"");
}

static void test_release_on_complete(void **state)
{
    fx *f = *state;
    pin_two_heads(f);
    a2_attempt_ref at = {.consumer = "a", .index = 1, .attempt = 1};
    a2_complete_result cr;
    OK(a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &cr));
    assert_int_equal(cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&cr);
    /* a's pin is gone; v1 stays while b pins it. */
    assert_int_equal(pins_of(f), 2);
    assert_int_equal(history_of(f), 2);
    expect_state(f, 1, true, 1, "\"v1\"");
    a2_attempt_ref bt = {
            .consumer = "b", .lane = "q", .index = 1, .attempt = 1};
    OK(a2_store_complete(f->s, f->session, &bt, NULL, 0, NULL, 0, &cr));
    assert_int_equal(cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&cr);
    assert_int_equal(pins_of(f), 0);
    assert_int_equal(history_of(f), 0);
    expect_state(f, 1, false, 0, NULL);
    expect_state(f, A2_STORE_NONE, true, 9, "\"v9\"");
}

/* Attempt `attempt` of b's lane head fails with no failure left: it is
 * dead-lettered. */
static void dead_letter_b(fx *f, int attempt)
{
    a2_attempt_ref bt = {
            .consumer = "b", .lane = "q", .index = 1, .attempt = attempt};
    a2_fail_request freq = {.error = "x", .max_failures = 1};
    a2_fail_result fr;
    OK(a2_store_fail(f->s, f->session, &bt, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_DEAD_LETTERED);
}

static void test_release_on_dead_letter(void **state)
{
    fx *f = *state;
    pin_two_heads(f);
    /* b's lane head dead-letters through fail. */
    dead_letter_b(f, 1);
    assert_int_equal(pins_of(f), 1);    /* a's */
    assert_int_equal(history_of(f), 1); /* v1, kept by a; v2 went */
    expect_state(f, 1, true, 1, "\"v1\"");
    expect_state(f, 2, true, 1, "\"v1\"");
    /* a's head dead-letters on a takeover that spends its last failure. */
    f->now += 60000;
    a2_claim_request req = {.holder = "h2", .ttl_ms = 30000, .max_failures = 1};
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_true(cr.dead_lettered.count >= 1);
    a2_claim_result_free(&cr);
    assert_int_equal(pins_of(f), 0);
    assert_int_equal(history_of(f), 0);
    expect_state(f, 1, false, 0, NULL);
}

static void test_release_on_skip(void **state)
{
    fx *f = *state;
    pin_two_heads(f);
    dead_letter_b(f, 1);
    /* Retried, the head runs again and pins v2 again. */
    a2_redrive_result rd;
    OK(a2_store_redrive(f->s, f->session, "b", 1, A2_REDRIVE_RETRY, NULL, 0,
                        &rd));
    assert_true(rd.redriven);
    claim_all(f);
    a2_state_pin b = {.consumer = "b", .lane = "q", .index = 1};
    a2_state_write_result wr = write1(f, 2, "\"v2\"", &b, 1);
    assert_int_equal(wr.pins_accepted, 1);
    assert_int_equal(history_of(f), 2);
    dead_letter_b(f, 2);
    assert_int_equal(history_of(f), 1);
    /* A pin the dead head still holds (left by a store that did not release
     * it) goes when the head is skipped, with the history only it kept. */
    a2_test_exec(f->db, "begin");
    a2_test_execf(f->db,
                  "insert into a2_snapshot_history values ('%s', 'r', 2, "
                  "'\"v2\"', 0); insert into a2_snapshot_pins values ('%s', "
                  "1, 'b', 'lane:q', 'r', 2)",
                  f->session, f->session);
    a2_test_exec(f->db, "commit");
    assert_int_equal(pins_of(f), 2);
    OK(a2_store_redrive(f->s, f->session, "b", 1, A2_REDRIVE_SKIP, NULL, 0,
                        &rd));
    assert_true(rd.redriven);
    assert_int_equal(pins_of(f), 1); /* a's */
    assert_int_equal(history_of(f), 1);
    expect_state(f, 2, true, 1, "\"v1\"");
}

static void test_reclaim(void **state)
{
    fx *f = *state;
    pin_two_heads(f);
    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    /* Hidden at once, deleted by reclaim. */
    expect_state(f, A2_STORE_NONE, true, 9, "\"v9\""); /* 9 >= marker 3 */
    expect_state(f, 2, false, 0, NULL);
    a2_reclaim_result rr = {0};
    for (int i = 0; i < 10 && !rr.done; i++)
        OK(a2_store_reclaim(f->s, f->session, &rr));
    assert_true(rr.done);
    assert_int_equal(pins_of(f), 0);
    assert_int_equal(history_of(f), 0);
    assert_int_equal(a2_test_fx_rows(f, "a2_snapshots", NULL), 1);
}

/* A completion holding its cursor row makes a pinning write wait; the
 * write then finds the head finished and refuses the pin. */
typedef struct {
    fx *f;
    bool unpinned; /* write without the pin on consumer a's head 1 */
    a2_state_write_result wr;
} writer_arg;

/* Writes version 1 of reducer "r" (an a2_test_call). */
static int state_write(a2_store *s, void *p)
{
    writer_arg *w = p;
    a2_state_pin pin = {.consumer = "a", .index = 1};
    a2_state_write wr = {.up_to_index = 1,
                         .state = "1",
                         .pins = w->unpinned ? NULL : &pin,
                         .npins = w->unpinned ? 0 : 1};
    return a2_store_write_state(s, w->f->session, "r", &wr, 1, &w->wr);
}

/* Starts fn(arg) on a store of its own while f->db holds a transaction
 * open: the call comes to wait on a lock, then, once f->db commits,
 * returns 0. */
static void call_waits_for_commit(fx *f, a2_test_call_fn fn, void *arg)
{
    a2_test_call t;
    int waited = a2_test_call_start_blocked(&t, fn, arg, NULL,
                                            A2_TEST_STORE_QUERY, 2000);
    assert_true(waited);
    a2_test_exec(f->db, "commit");
    a2_test_call_join(&t);
    assert_int_equal(t.rc, 0);
}

static void test_pin_waits_for_completion(void **state)
{
    fx *f = *state;
    claimed_head(f);
    a2_test_exec(f->db, "begin");
    a2_test_execf(f->db,
                  "update a2_cursors set head = null, position = 1 where "
                  "session_id = '%s' and consumer = 'a'",
                  f->session);
    writer_arg w = {.f = f};
    /* The writer waits on the row. */
    call_waits_for_commit(f, state_write, &w);
    assert_int_equal(w.wr.pins_accepted, 0);
    assert_int_equal(w.wr.pins_refused, 1);
    assert_int_equal(pins_of(f), 0);
}

/* A completion that comes while a pinning write holds the head (for share,
 * uncommitted) waits for it, then releases the pins it wrote. */
typedef struct {
    fx *f;
    a2_complete_result cr;
} completer_arg;

/* Completes attempt 1 of consumer a's head 1 (an a2_test_call). */
static int complete(a2_store *s, void *p)
{
    completer_arg *c = p;
    a2_attempt_ref at = {.consumer = "a", .index = 1, .attempt = 1};
    return a2_store_complete(s, c->f->session, &at, NULL, 0, NULL, 0, &c->cr);
}

static void test_completion_waits_for_pins(void **state)
{
    fx *f = *state;
    claimed_head(f);
    /* what write_state does, held open: the head for share, pin, history */
    char sql[1024];
    a2_test_exec(f->db, "begin");
    snprintf(sql, sizeof sql,
             "select 1 from a2_cursors where session_id = '%s' and consumer "
             "= 'a' and cursor_key = '#1' and head = 1 for share",
             f->session);
    free(a2_test_scalar(f->db, sql));
    a2_test_execf(f->db,
                  "insert into a2_snapshot_history values ('%s', 'r', 1, '1', "
                  "0); insert into a2_snapshot_pins values ('%s', 1, 'a', "
                  "'#1', 'r', 1)",
                  f->session, f->session);
    completer_arg c = {.f = f};
    call_waits_for_commit(f, complete, &c);
    assert_int_equal(c.cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&c.cr);
    assert_int_equal(pins_of(f), 0);
    assert_int_equal(history_of(f), 0);
}

/* Whether a store call comes to wait on an advisory lock within 5 s. */
static bool batch_waits_for_session_lock(PGconn *probe)
{
    return a2_test_lock_waiters(probe,
                                A2_TEST_STORE_QUERY " and wait_event = 'advisory'",
                                1, 5000) > 0;
}

/* A write waits for the session lock: a clear that commits meanwhile is
 * seen by its check, and a write below the new marker stores nothing. */
static void test_write_waits_for_clear(void **state)
{
    fx *f = *state;
    append_n(f, 1, NULL, 0);
    /* What a clear does under the session lock, held open: the marker
     * event at 2 and the clear index. */
    a2_test_exec(f->db, "begin");
    a2_test_execf(f->db,
                  "select pg_advisory_xact_lock(hashtext('%s')); insert into "
                  "a2_events (session_id, idx, event_type, payload, event_id, "
                  "created_at) values ('%s', 2, '" A2_STORE_CLEAR_TYPE
                  "', 'null', 'marker', 0); insert into a2_clears values "
                  "('%s', 2)",
                  f->session, f->session, f->session);
    writer_arg w = {.f = f, .unpinned = true};
    a2_test_call t;
    a2_test_call_start(&t, state_write, &w, NULL);
    PGconn *probe = a2_test_connect();
    bool waited = batch_waits_for_session_lock(probe);
    PQfinish(probe);
    a2_test_exec(f->db, "commit");
    a2_test_call_join(&t);
    assert_true(waited);
    assert_int_equal(t.rc, A2_ESESSION_CLEARED);
    assert_int_equal(a2_test_fx_rows(f, "a2_snapshots", NULL), 0);
    expect_state(f, A2_STORE_NONE, false, 0, NULL);
}

/* A pinning write holds its head for share while it waits for the session
 * lock; a completion of that head waits for the write, not the other way
 * round, and then releases the pin the write stored. */
static void test_pinning_write_under_session_lock(void **state)
{
    fx *f = *state;
    claimed_head(f);
    a2_test_hold_session_lock(f->db, f->session);
    writer_arg w = {.f = f};
    a2_test_call tw, tc;
    a2_test_call_start(&tw, state_write, &w, NULL);
    PGconn *probe = a2_test_connect();
    bool writer_waited = batch_waits_for_session_lock(probe);
    completer_arg c = {.f = f};
    a2_test_call_start(&tc, complete, &c, NULL);
    int64_t both =
            a2_test_lock_waiters(probe, A2_TEST_STORE_QUERY, 2, 5000);
    PQfinish(probe);
    a2_test_exec(f->db, "commit");
    a2_test_call_join(&tw);
    a2_test_call_join(&tc);
    assert_true(writer_waited);
    assert_int_equal(both, 2);
    assert_int_equal(tw.rc, 0);
    assert_int_equal(w.wr.pins_accepted, 1);
    assert_int_equal(tc.rc, 0);
    assert_int_equal(c.cr.outcome, A2_ATTEMPT_COMPLETED);
    a2_complete_result_free(&c.cr);
    assert_int_equal(pins_of(f), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_invalid_arguments, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_latest_and_at, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_pins_only_live_heads, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_release_on_complete, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_release_on_dead_letter, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_release_on_skip, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_reclaim, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_pin_waits_for_completion,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_completion_waits_for_pins,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_write_waits_for_clear, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(
                    test_pinning_write_under_session_lock, setup,
                    a2_test_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
