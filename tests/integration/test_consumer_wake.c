/*
 * a2-consumer on a real PostgreSQL with a real slot: wake-ups, timers, log
 * and cleared, metrics, heartbeats, SIGHUP and a clean stop. Row changes are
 * made with SQL on the a2 tables (the store writes the same rows).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "a2/version.h"
#include "consumer_harness.h"

static PGconn *db;
/* Set to end the dripping clients of test_metrics_slow_client. */
static atomic_int drip_stop;

static int setup(void **state)
{
    *state = db = a2_test_connect_reset(
            "truncate a2_events, a2_cursors, a2_clears, a2_presence");
    return 0;
}

static int teardown(void **state)
{
    atomic_store(&drip_stop, 1);
    return a2_test_consumer_teardown(state);
}

/* Inserts event idx of session and an event cursor run for it. */
static void append_event(const char *session, int idx, const char *consumer)
{
    a2_test_execf(
            db,
            "insert into a2_events(session_id, idx, event_type, event_id, "
            "created_at) values ('%s', %d, 'job', 'e%d', 1)",
            session, idx, idx);
    a2_test_execf(
            db,
            "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
            "kind, head) values ('%s', '%s', '#%d', %d, 'event', %d)",
            session, consumer, idx, idx, idx);
}

static void test_append_and_complete_wake(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_wake", &w, 1);

    /* append → wake */
    append_event("s1", 1, "c");
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.consumer, "c");
    assert_string_equal(m.session, "s1");
    assert_string_equal(m.cursor, "#1");
    assert_int_equal(m.head, 1);

    /* a lane: started at head 2, completed → wake for its next head 3 */
    a2_test_execf(
            db,
            "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
            "kind, lane, head) values ('s1', 'c', 'lane:main', 2, 'lane', "
            "'main', 2)");
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.cursor, "lane:main");
    assert_int_equal(m.head, 2);
    a2_test_execf(
            db,
            "update a2_cursors set claim_holder = 'w1', attempt_count = 1, "
            "first_claimed_at = 1, last_claimed_at = 1, "
            "claim_expires_at = %" PRId64 " where cursor_key = 'lane:main'",
            a2_test_wall_ms() + 60000);
    a2_test_execf(db, "update a2_cursors set claim_holder = null, "
                      "claim_expires_at = null, "
                      "attempt_count = 0, first_claimed_at = null, "
                      "last_claimed_at = null, "
                      "position = 2, head = 3 where cursor_key = 'lane:main'");
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.cursor, "lane:main");
    assert_int_equal(m.head, 3);
    /* the claim's lease timer was cancelled by the completion: no wake */
    assert_int_equal(a2_test_worker_next(&w, 300, &m), 0);

    /* the audit has the four transitions, named */
    a2_test_worker_close_stop(&w, &d);
    assert_int_equal(a2_test_transitions(d.audit, "started"), 2);
    assert_int_equal(a2_test_transitions(d.audit, "claimed"), 1);
    assert_int_equal(a2_test_transitions(d.audit, "completed"), 1);
    a2_test_consumer_cleanup(&d);
}

/*
 * The store's row changes on s1 #1: a claim with a lease (holder set), a
 * failure with a retry hold (holder null), or a renewal (renew).
 */
static int64_t hold(const char *holder, int ms)
{
    int64_t at = a2_test_wall_ms() + ms;
    if (holder)
        a2_test_execf(
                db,
                "update a2_cursors set claim_holder = '%s', attempt_count = "
                "attempt_count + 1, claim_expires_at = %" PRId64 ", "
                "first_claimed_at = coalesce(first_claimed_at, 1), "
                "last_claimed_at = %" PRId64
                " where session_id = 's1' and cursor_key = '#1'",
                holder, at, a2_test_wall_ms());
    else
        a2_test_execf(
                db,
                "update a2_cursors set claim_holder = null, failure_count = "
                "failure_count + 1, last_error = 'boom', last_failed_at = 1, "
                "last_failed_attempt = attempt_count, claim_expires_at = "
                "%" PRId64 " where session_id = 's1' and cursor_key = '#1'",
                at);
    return at;
}

static int64_t renew(int ms)
{
    int64_t at = a2_test_wall_ms() + ms;
    a2_test_execf(db,
                  "update a2_cursors set claim_expires_at = %" PRId64
                  " where session_id = 's1' and cursor_key = '#1'",
                  at);
    return at;
}

static void test_retry_after_and_lease_lapse(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_timers", &w, 1);
    append_event("s1", 1, "c");
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));

    /* claimed, then failed with retry-after 300 ms: never early, and late
     * by at most TIMER_LATE_MS (a busy host delays the loop; a timer that
     * is lost or not armed never fires) */
    enum { TIMER_LATE_MS = 3000, TIMER_WAIT_MS = 10000 };
    hold("w1", 60000);
    int64_t due = hold(NULL, 300);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    int64_t got = a2_test_wall_ms();
    assert_int_equal(m.head, 1);
    assert_string_equal(m.cursor, "#1");
    if (got < due)
        fail_msg("retry wake %" PRId64 " ms early", due - got);
    if (got > due + TIMER_LATE_MS)
        fail_msg("retry wake %" PRId64 " ms late", got - due);

    /* claimed with a 300 ms lease left to lapse → takeover wake */
    due = hold("w2", 300);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    got = a2_test_wall_ms();
    if (got < due)
        fail_msg("takeover wake %" PRId64 " ms early", due - got);
    if (got > due + TIMER_LATE_MS)
        fail_msg("takeover wake %" PRId64 " ms late", got - due);

    /* claimed again and renewed twice: one timer, at the last expiry */
    due = hold(NULL, 0);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    hold("w3", 60000);
    renew(5000);
    due = renew(400);
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    got = a2_test_wall_ms();
    assert_true(got >= due);
    assert_int_equal(a2_test_worker_next(&w, 300, &m), 0);

    /* dead-lettered: no wake; retried (failed_at cleared) → wake */
    a2_test_execf(db, "update a2_cursors set claim_holder = null, "
                      "claim_expires_at = null, "
                      "failed_at = 1 where cursor_key = '#1'");
    assert_int_equal(a2_test_worker_next(&w, 500, &m), 0);
    a2_test_execf(db,
                  "update a2_cursors set failed_at = null, failure_count = 0 "
                  "where cursor_key = '#1'");
    assert_true(a2_test_worker_wait_for(&w, "wake", TIMER_WAIT_MS, &m));
    assert_int_equal(m.head, 1);

    a2_test_worker_close_stop(&w, &d);
    assert_int_equal(a2_test_transitions(d.audit, "failed"), 2);
    assert_int_equal(a2_test_transitions(d.audit, "claimed"), 3);
    assert_int_equal(a2_test_transitions(d.audit, "renewed"), 2);
    assert_int_equal(a2_test_transitions(d.audit, "retried"), 1);
    a2_test_consumer_cleanup(&d);
}

/* A claim made while the consumer is down is found by the startup query. */
static void test_timers_rebuilt_on_start(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_rebuild");
    append_event("s1", 1, "c");
    /* applied before the stop (else the restart streams the insert again,
     * and its wake-up comes at once) */
    assert_int_equal(
            a2_test_wait_in_file(d.audit, "\"session\":\"s1\"", 1, 20000), 1);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    /* far enough that the worker is subscribed before it fires, even
     * after a slow start (a wake-up with no subscriber is not sent) */
    int64_t due = hold("gone", 8000);
    a2_test_consumer_start(&d);
    a2_test_worker_join(&w, d.sock, "w1", "c", NULL, 1);
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    assert_true(a2_test_wall_ms() >= due);
    assert_string_equal(m.cursor, "#1");
    a2_test_worker_close_stop(&w, &d);
    assert_true(a2_test_count_in_file(d.log, "ready: 1 timers") == 1);
    a2_test_consumer_cleanup(&d);
}

/* A consumer that comes back to old transactions says it is behind. */
static void test_says_when_behind(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tc_behind");
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    append_event("s1", 1, "c");
    a2_test_sleep_ms(10500);
    a2_test_consumer_start(&d);
    a2_test_wait_in_file(d.log, "falling behind", 1, 5000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_int_equal(
            a2_test_count_in_file(d.log, "falling behind: the commit at"), 1);
    a2_test_consumer_cleanup(&d);
}

/* Worker lw gets the log of event idx (of type) in session for consumer,
 * then no other log. */
static void expect_only_log(a2_test_worker *lw, const char *consumer,
                            const char *session, int64_t idx, const char *type)
{
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(lw, "log", 5000, &m));
    assert_string_equal(m.consumer, consumer);
    assert_string_equal(m.session, session);
    assert_int_equal(m.idx, idx);
    assert_string_equal(m.type, type);
    assert_int_equal(a2_test_worker_wait_for(lw, "log", 400, &m), 0);
}

static void test_log_and_cleared(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker lw, ew;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_log");
    a2_test_worker_join(&lw, d.sock, "logw", "lg", "user_msg", 1);
    a2_test_worker_join(&ew, d.sock, "evw", "c", NULL, 1);
    /* the log consumer's cursor exists (the store starts it on append) */
    a2_test_execf(
            db,
            "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
            "kind, lane, head, types) values ('s2', 'lg', 'lane:log', 0, "
            "'log', "
            "'log', null, '[\"user_msg\"]')");
    a2_test_execf(
            db, "insert into a2_events(session_id, idx, event_type, event_id, "
                "created_at) values ('s2', 1, 'noise', 'n1', 1), ('s2', 2, "
                "'user_msg', 'u2', 1)");
    /* only its types: no log for idx 1 */
    expect_only_log(&lw, "lg", "s2", 2, "user_msg");

    /* clear → cleared, to the session's subscribers */
    append_event("s2", 3, "c");
    assert_true(a2_test_worker_wait_for(&ew, "wake", 5000, &m));
    a2_test_execf(db, "begin; insert into a2_events(session_id, idx, "
                      "event_type, event_id, "
                      "created_at) values ('s2', 4, 'a2.cleared', 'clr4', 1); "
                      "insert into a2_clears values ('s2', 4) on conflict "
                      "(session_id) do "
                      "update set clear_index = excluded.clear_index; commit");
    assert_true(a2_test_worker_wait_for(&ew, "cleared", 5000, &m));
    assert_string_equal(m.session, "s2");
    assert_int_equal(m.clear_index, 4);
    a2_test_worker_close(&lw);
    a2_test_worker_close_end(&ew, &d);
}

/* A worker subscribed as a log consumer gets `log` wake-ups for its types
 * before its consumer has a cursor anywhere. */
static void test_log_before_cursor(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker lw;
    a2_test_consumer_run(&d, "tc_logfresh");
    a2_test_worker_join(&lw, d.sock, "freshw", "fresh", "signup", 1);
    a2_test_execf(
            db, "insert into a2_events(session_id, idx, event_type, event_id, "
                "created_at) values ('s9', 1, 'other', 'o1', 1), ('s9', 2, "
                "'signup', 'g2', 1)");
    expect_only_log(&lw, "fresh", "s9", 2, "signup");
    a2_test_worker_close_end(&lw, &d);
}

static void test_presence_patch(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w, other;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_presence");
    a2_test_worker_join(&w, d.sock, "pw", "c", NULL, 1);
    a2_test_worker_join(&other, d.sock, "ow", "c", NULL, 1);
    a2_test_worker_presence(&w, "room");
    a2_test_worker_presence(&other, "hall");
    a2_test_worker_sync(&w, 1, 5000);
    a2_test_worker_sync(&other, 1, 5000);
    a2_test_execf(
            db,
            "begin; insert into a2_presence values ('room', 'p1', 'status', "
            "'\"online\"', null, 1, 9999999999999), ('room', 'p1', 'typing', "
            "'\"yes\"', null, 1, 9999999999999); commit");
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.ns, "room");
    assert_string_equal(m.participant, "p1");
    assert_string_equal(m.fields, "status=online;typing=yes;");
    /* a field expired (deleted) → nil */
    a2_test_execf(db, "delete from a2_presence where field = 'typing'");
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.fields, "typing=nil;");
    /* the other namespace's worker got nothing */
    assert_int_equal(a2_test_worker_wait_for(&other, "presence", 300, &m), 0);
    a2_test_worker_close(&w);
    a2_test_worker_close_end(&other, &d);
}

/* Expiry is pushed at its time, with nobody reading or reaping: for fields
 * the stream showed and for fields already in the table at start, not for
 * tombstones, after the write's own patch, and without a write of the
 * consumer's to a2_presence. */
static void test_presence_expiry_pushed(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_init(&d, "tc_expiry");
    a2_test_execf(db, "truncate a2_presence");
    /* far enough that the worker subscribes before it expires, even after
     * a slow start */
    a2_test_execf(
            db,
            "insert into a2_presence values ('hall', 'p0', 'seat', '1', null, "
            "1, "
            "(extract(epoch from clock_timestamp()) * 1000)::bigint + 8000)");
    a2_test_consumer_start(&d);
    a2_test_worker_join(&w, d.sock, "xw", "c", NULL, 1);
    a2_test_worker_presence(&w, "room");
    a2_test_worker_presence(&w, "hall");
    a2_test_worker_sync(&w, 1, 5000);
    int64_t written = a2_test_wall_ms();
    a2_test_execf(
            db,
            "insert into a2_presence values ('room', 'p1', 'typing', "
            "'\"yes\"', "
            "null, 1, (extract(epoch from clock_timestamp()) * 1000)::bigint + "
            "1000), ('room', 'p1', 'status', '\"online\"', null, 1, "
            "9999999999999), ('room', 'p1', 'old', 'null', null, 1, "
            "(extract(epoch from clock_timestamp()) * 1000)::bigint + 300), "
            "('room', 'p1', 'cursor', '7', null, 1, (extract(epoch from "
            "clock_timestamp()) * 1000)::bigint + 1300)");
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.fields, "typing=yes;status=online;old=nil;cursor=7;");
    uint64_t write_lsn = m.lsn;
    assert_true(write_lsn > 0);
    int typing = 0, cursor = 0, seat = 0, other = 0;
    int64_t until = a2_test_now_ms() + 15000;
    while ((!typing || !cursor || !seat) && a2_test_now_ms() < until &&
           a2_test_worker_wait_for(&w, "presence",
                                   (int)(until - a2_test_now_ms()), &m)) {
        /* typing's and cursor's expiries 300 ms apart: normally two ticks,
         * one if the first was held up that long */
        if (!strcmp(m.ns, "room") &&
            (!strcmp(m.fields, "typing=nil;") ||
             !strcmp(m.fields, "cursor=nil;") ||
             !strcmp(m.fields, "typing=nil;cursor=nil;"))) {
            assert_true(m.lsn > write_lsn);
            if (strstr(m.fields, "typing")) {
                typing = 1;
                assert_true(a2_test_wall_ms() - written >= 950);
            }
            if (strstr(m.fields, "cursor")) {
                assert_true(typing);
                cursor = 1;
                assert_true(a2_test_wall_ms() - written >= 1250);
            }
        } else if (!strcmp(m.ns, "hall") && !strcmp(m.fields, "seat=nil;")) {
            seat = 1;
        } else {
            other++;
        }
    }
    assert_true(typing);
    assert_true(cursor);
    assert_true(seat);
    assert_int_equal(other, 0);
    /* nothing more: the tombstone's expiry is not news, status lives on */
    assert_int_equal(a2_test_worker_wait_for(&w, "presence", 700, &m), 0);
    /* the rows are still there: the consumer pushed, nobody deleted */
    PGresult *r = PQexec(db, "select count(*) from a2_presence");
    assert_string_equal(PQgetvalue(r, 0, 0), "5");
    PQclear(r);
    a2_test_worker_close_end(&w, &d);
}

/* Starts consumer name (extra args or NULL) over an empty a2_presence;
 * worker w ("xw" of consumer c) joins, subscribed to room and in sync. */
static void start_on_room(a2_test_consumer *d, const char *name,
                          const char *const *extra, a2_test_worker *w)
{
    a2_test_consumer_init(d, name);
    a2_test_execf(db, "truncate a2_presence");
    a2_test_consumer_start_args(d, 0, extra);
    a2_test_worker_join(w, d->sock, "xw", "c", NULL, 1);
    a2_test_worker_presence(w, "room");
    a2_test_worker_sync(w, 1, 5000);
}

/* Writes p1's field in room: JSON value, version, expiry (wall ms). */
static void put_room_field(const char *field, const char *value, int version,
                           int64_t expires_at)
{
    a2_test_execf(db,
                  "insert into a2_presence values ('room', 'p1', '%s', '%s', "
                  "null, %d, %" PRId64 ")",
                  field, value, version, expires_at);
}

/* Writes p1's status "away" in room, to expire in 300 ms; w gets its patch,
 * then (within nil_ms) its expiry. Returns the time it was due. */
static int64_t away_then_expired(a2_test_worker *w, int nil_ms)
{
    a2_test_msg m;
    int64_t due = a2_test_wall_ms() + 300;
    put_room_field("status", "\"away\"", 2, due);
    assert_true(a2_test_worker_wait_for(w, "presence", 5000, &m));
    assert_string_equal(m.fields, "status=away;");
    assert_true(a2_test_worker_wait_for(w, "presence", nil_ms, &m));
    assert_string_equal(m.fields, "status=nil;");
    return due;
}

/*
 * An expiry tick that cannot be committed (the consumer's tick connection
 * was ended) is logged and sent again on a new connection: the expiry still
 * reaches the subscriber, a second or so late.
 */
static void test_presence_expiry_tick_retried(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    start_on_room(&d, "tc_tickretry", NULL, &w);
    /* a first expiry opens the tick connection */
    put_room_field("typing", "\"yes\"", 1, a2_test_wall_ms() + 100);
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.fields, "typing=yes;");
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.fields, "typing=nil;");
    assert_true(a2_test_int(db, "select count(pg_terminate_backend(pid)) "
                                "from pg_stat_activity where "
                                "application_name = 'a2-consumer' and "
                                "backend_type = 'client backend' and "
                                "datname = current_database()") >= 2);
    int64_t due = away_then_expired(&w, 5000);
    assert_true(a2_test_wall_ms() >= due);
    assert_int_equal(a2_test_count_in_file(
                             d.log, "could not commit a presence expiry tick"),
                     1);
    a2_test_worker_close_end(&w, &d);
}

/* The consumer's connections notice a server that vanished without
 * closing them: TCP keepalives after 30 s idle and a 60 s
 * TCP_USER_TIMEOUT. */
static void test_connection_keepalives(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tc_keepalive");
    a2_test_tcp t[8];
    int n = a2_test_tcp_sockets(d.pid, atoi(PQport(db)), NULL, 0, t, 8);
    /* the stream, the normal connection and the active lock's */
    assert_int_equal(n, 3);
    for (int i = 0; i < n; i++) {
        assert_int_equal(t[i].keepalive, 1);
        assert_int_equal(t[i].idle, 30);
        assert_int_equal(t[i].interval, 10);
        assert_int_equal(t[i].count, 3);
        assert_int_equal(t[i].user_timeout_ms, 60000);
    }
    a2_test_consumer_end(&d);
}

/* The backend of the tick connection stops answering: the tick in flight
 * is given up after --stream-timeout and sent again on a new connection. */
static void test_presence_expiry_tick_unanswered(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    const char *extra[] = {"--stream-timeout", "3000", NULL};
    start_on_room(&d, "tc_tickhung", extra, &w);
    /* a first expiry opens the tick connection */
    put_room_field("typing", "\"yes\"", 1, a2_test_wall_ms() + 100);
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_true(a2_test_worker_wait_for(&w, "presence", 5000, &m));
    assert_string_equal(m.fields, "typing=nil;");
    a2_test_stop_process(
            db, "select pid from pg_stat_activity where application_name = "
                "'a2-consumer' and backend_type = 'client backend' and "
                "query like '%emit_message(true%'");
    int64_t due = away_then_expired(&w, 20000);
    /* Not before the field's time, and only after the hung connection was
     * given up (its log line is written before the tick goes out again).
     * The request that hangs may be one sent before `due` (a heartbeat, or
     * the first tick's answer when the stop came between its commit and its
     * reply), so the give-up is not timed from `due`. */
    assert_true(a2_test_wall_ms() >= due);
    assert_int_equal(a2_test_count_in_file(d.log, "tick got no answer"), 1);
    a2_test_continue_process();
    a2_test_worker_close_end(&w, &d);
}

/* Starts consumer name, metrics on a free port (returned), heartbeat_ms
 * (NULL: the default); worker w ("w1" of consumer c) joins it. */
static int start_with_metrics(a2_test_consumer *d, const char *name,
                              const char *heartbeat_ms, a2_test_worker *w)
{
    int port = a2_test_free_port();
    char metrics[64];
    snprintf(metrics, sizeof metrics, "tcp:127.0.0.1:%d", port);
    const char *extra[] = {"--metrics", metrics,
                           heartbeat_ms ? "--heartbeat-interval" : NULL,
                           heartbeat_ms, NULL};
    a2_test_consumer_init(d, name);
    a2_test_consumer_start_args(d, 0, extra);
    a2_test_worker_join(w, d->sock, "w1", "c", NULL, 1);
    return port;
}

/* /healthz answers, /metrics says up: the body, for the caller to free. */
static char *healthy_metrics(int port)
{
    a2_test_expect_healthz(port);
    char *body = a2_test_http_get(port, "/metrics");
    assert_non_null(body);
    assert_non_null(strstr(body, "a2_consumer_up 1"));
    return body;
}

static void test_metrics_heartbeat_and_stop(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    int port = start_with_metrics(&d, "tc_metrics", "200", &w);
    append_event("s1", 1, "c");
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));

    char *body = healthy_metrics(port);
    assert_non_null(strstr(body, "a2_consumer_build_info{version=\"" A2_VERSION
                                 "\",schema=\"" A2_SCHEMA_VERSION
                                 "\",wire=\"1\"} 1\n"));
    assert_non_null(strstr(body, "a2_consumer_changes_decoded_total 2"));
    assert_non_null(strstr(body, "a2_consumer_audit_lines_total 1"));
    assert_non_null(strstr(body, "a2_consumer_workers 1"));
    assert_non_null(
            strstr(body, "a2_consumer_wakeups_sent_total{type=\"wake\"} 1"));
    assert_non_null(strstr(body, "a2_consumer_lag_bytes "));
    assert_non_null(strstr(body, "a2_consumer_timers_pending 0"));
    free(body);
    char *h = a2_test_http_get(port, "/nope");
    assert_non_null(strstr(h, "404"));
    free(h);

    /* a quiet database: heartbeats still move the slot, past all the WAL
     * there is now (the confirmation of the transaction above does not) */
    char sql[256];
    snprintf(sql, sizeof sql,
             "select (confirmed_flush_lsn - '0/0')::bigint from "
             "pg_replication_slots where slot_name = '%s'",
             d.slot);
    int64_t before =
            a2_test_int(db, "select (pg_current_wal_insert_lsn() - '0/0')"
                            "::bigint");
    int64_t after = a2_test_int(db, sql);
    for (int64_t t0 = a2_test_now_ms();
         after <= before && a2_test_now_ms() - t0 < 10000;
         after = a2_test_int(db, sql))
        a2_test_sleep_ms(100);
    if (after <= before)
        fail_msg("slot did not move past %" PRId64 " while idle in 10 s: "
                 "%" PRId64,
                 before, after);

    /* SIGHUP reopens the audit file */
    char rotated[160];
    snprintf(rotated, sizeof rotated, "%s.1", d.audit);
    assert_int_equal(rename(d.audit, rotated), 0);
    kill(d.pid, SIGHUP);
    assert_int_equal(
            a2_test_wait_in_file(d.log, "reopened audit file", 1, 10000), 1);
    append_event("s1", 2, "c");
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_int_equal(
            a2_test_wait_in_file(d.audit, "\"cursor\":\"#2\"", 1, 10000), 1);
    assert_int_equal(a2_test_count_in_file(rotated, "\"cursor\":\"#1\""), 1);
    assert_int_equal(a2_test_count_in_file(rotated, "\"cursor\":\"#2\""), 0);
    assert_int_equal(a2_test_count_in_file(d.audit, "\"cursor\":\"#2\""), 1);

    /* clean stop: final feedback confirms the last transaction */
    a2_test_worker_close_stop(&w, &d);
    char *audit = a2_test_read_file(d.audit);
    json_t *j = json_loads(audit, JSON_DISABLE_EOF_CHECK, NULL);
    free(audit);
    assert_non_null(j);
    snprintf(sql, sizeof sql,
             "select confirmed_flush_lsn >= '%s'::pg_lsn from "
             "pg_replication_slots where slot_name = '%s'",
             json_string_value(json_object_get(j, "lsn")), d.slot);
    json_decref(j);
    char *ok = a2_test_scalar(db, sql);
    assert_string_equal(ok, "t");
    free(ok);
    assert_int_equal(a2_test_count_in_file(d.log, "stopped at"), 1);
    a2_test_consumer_cleanup(&d);
}

/* A client that sends its request a byte every 40 ms. */
typedef struct {
    int port;
    int bytes;
} drip_arg;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Drips a request (never complete), closes, and starts over, until stop is
 * set: the metrics port always has a slow client. */
static void *drip(void *arg)
{
    drip_arg *a = arg;
    while (!atomic_load(&drip_stop)) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)a->port);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            static const char req[] =
                    "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                    "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
            for (int i = 0; i < a->bytes && !atomic_load(&drip_stop); i++) {
                if (send(fd, &req[i % (sizeof req - 1)], 1, MSG_NOSIGNAL) != 1)
                    break;
                a2_test_sleep_ms(40);
            }
        }
        close(fd);
        if (!atomic_load(&drip_stop))
            a2_test_sleep_ms(10);
    }
    return NULL;
}

/* HTTP is served off the consumer's loop: while slow clients drip their
 * requests at the metrics port (over and over, so one is always being
 * dripped), the wake-ups follow their commits at once, and /healthz and
 * /metrics still answer. */
static void test_metrics_slow_client(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    int port = start_with_metrics(&d, "tc_drip", NULL, &w);
    pthread_t th[4];
    drip_arg a = {.port = port, .bytes = 100}; /* 4 s each */
    atomic_store(&drip_stop, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, drip, &a), 0);
    a2_test_sleep_ms(200);
    enum { N = 20 };
    int64_t late[N];
    for (int i = 1; i <= N; i++) {
        append_event("drip", i, "c");
        int64_t committed = a2_test_now_ms();
        assert_true(a2_test_worker_wait_for(&w, "wake", 10000, &m));
        assert_int_equal(m.head, i);
        late[i - 1] = a2_test_now_ms() - committed;
        a2_test_sleep_ms(100);
    }
    qsort(late, N, sizeof late[0], cmp_i64);
    /* Before: a dripping request held the loop for all its reads (4 s),
     * and with a request always being dripped nearly every wake-up waited
     * for one: the median was seconds. A busy host may make a few late,
     * not the median, and none by seconds. */
    print_message("wake-ups with 4 dripping clients: median %" PRId64
                  " ms, slowest %" PRId64 " ms\n",
                  late[N / 2], late[N - 1]);
    assert_true(late[N / 2] < 1500);
    assert_true(late[N - 1] < 5000);
    char *body = healthy_metrics(port);
    free(body);
    atomic_store(&drip_stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    a2_test_worker_close_end(&w, &d);
}

/* The outcome and retry_at of a claim of session for consumer c by holder,
 * into *retry_at (0 when none); the outcome text is the caller's to free. */
static char *claim_c(const char *session, const char *consumer,
                     int64_t *retry_at)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "select a2_claim(session => '%s', holder => 'tw', ttl_ms => "
             "60000, consumers => '[\"%s\"]')::text",
             session, consumer);
    char *r = a2_test_scalar(db, sql);
    const char *at = strstr(r, "\"retry_at\": ");
    *retry_at = at && at[12] >= '0' && at[12] <= '9' ? strtoll(at + 12, NULL, 10)
                                                     : 0;
    return r;
}

/* A delayed event: not claimable before its time (the claim is busy until
 * then), no wake-up at its commit, and one from the consumer's timer at its
 * time, never before. A lane's delayed second event holds the lane after
 * the first completes, and its wake-up comes at its time too. */
static void test_delayed_head_woken_on_time(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_delay");
    a2_test_worker_join(&w, d.sock, "w1", "dc", NULL, 1);
    /* 300 ms from the server's clock */
    a2_test_execf(
            db,
            "select a2_append(session => 'dl-1', events => jsonb_build_array("
            "jsonb_build_object('type', 'job', 'not_before', a2__now_ms() + "
            "300, "
            "'targets', '[{\"consumer\": \"dc\"}]'::jsonb)))");
    int64_t due = a2_test_int(db, "select claim_expires_at from a2_cursors "
                                  "where session_id = 'dl-1'");
    int64_t retry_at;
    char *r = claim_c("dl-1", "dc", &retry_at);
    if (!strstr(r, "\"outcome\": \"busy\"") || retry_at != due)
        fail_msg("the delayed head was claimable, or not until %" PRId64
                 ": %s",
                 due, r);
    free(r);
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    int64_t woke = a2_test_wall_ms();
    assert_string_equal(m.session, "dl-1");
    assert_string_equal(m.cursor, "#1");
    if (woke < due)
        fail_msg("woken %" PRId64 " ms before its time", due - woke);
    print_message("delayed head woken %" PRId64 " ms after its time\n",
                  woke - due);
    /* late by at most TIMER_LATE_MS on a busy host (a lost timer never
     * fires) */
    assert_true(woke - due < 3000);
    r = claim_c("dl-1", "dc", &retry_at);
    assert_non_null(strstr(r, "\"outcome\": \"claimed\""));
    free(r);

    /* a lane: the first event now, the second in 5 s (its completion comes
     * before that, even on a slow host) */
    a2_test_execf(
            db,
            "select a2_append(session => 'dl-2', events => jsonb_build_array("
            "jsonb_build_object('type', 'a', 'targets', "
            "'[{\"consumer\": \"dc\", \"lane\": \"L\"}]'::jsonb), "
            "jsonb_build_object('type', 'b', 'targets', jsonb_build_array("
            "jsonb_build_object('consumer', 'dc', 'lane', 'L', 'not_before', "
            "a2__now_ms() + 5000)))))");
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    assert_string_equal(m.session, "dl-2");
    assert_int_equal(m.head, 1);
    r = claim_c("dl-2", "dc", &retry_at);
    assert_non_null(strstr(r, "\"index\": 1"));
    assert_null(strstr(r, "\"index\": 2"));
    free(r);
    a2_test_execf(
            db,
            "select a2_complete(session => 'dl-2', consumer => 'dc', lane => "
            "'L', index => 1, attempt => 1)");
    int64_t due2 = a2_test_int(db, "select claim_expires_at from a2_cursors "
                                   "where session_id = 'dl-2' and head = 2");
    assert_true(due2 > 0);
    r = claim_c("dl-2", "dc", &retry_at);
    assert_non_null(strstr(r, "\"outcome\": \"busy\""));
    assert_int_equal(retry_at, due2);
    free(r);
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    woke = a2_test_wall_ms();
    assert_string_equal(m.session, "dl-2");
    assert_int_equal(m.head, 2);
    if (woke < due2)
        fail_msg("lane head woken %" PRId64 " ms early", due2 - woke);

    /* redrive --skip of a dead letter ahead of a delayed event: the lane
     * moves on to it held, and its wake-up comes at its time */
    a2_test_execf(
            db,
            "select a2_append(session => 'dl-3', events => jsonb_build_array("
            "jsonb_build_object('type', 'a', 'targets', "
            "'[{\"consumer\": \"dc\", \"lane\": \"L\"}]'::jsonb), "
            "jsonb_build_object('type', 'b', 'not_before', a2__now_ms() + "
            "5000, "
            "'targets', '[{\"consumer\": \"dc\", \"lane\": \"L\"}]'::jsonb)))");
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    assert_string_equal(m.session, "dl-3");
    r = claim_c("dl-3", "dc", &retry_at);
    assert_non_null(strstr(r, "\"index\": 1"));
    free(r);
    a2_test_execf(
            db,
            "select a2_fail(session => 'dl-3', consumer => 'dc', lane => 'L', "
            "index => 1, attempt => 1, error => 'no', max_failures => 1)");
    a2_test_execf(db, "select a2_redrive(session => 'dl-3', consumer => 'dc', "
                      "index => 1, "
                      "action => 'skip')");
    int64_t due3 = a2_test_int(db, "select claim_expires_at from a2_cursors "
                                   "where session_id = 'dl-3' and head = 2");
    assert_true(due3 > 0);
    r = claim_c("dl-3", "dc", &retry_at);
    assert_non_null(strstr(r, "\"outcome\": \"busy\""));
    free(r);
    assert_true(a2_test_worker_wait_for(&w, "wake", 20000, &m));
    woke = a2_test_wall_ms();
    assert_string_equal(m.session, "dl-3");
    assert_int_equal(m.head, 2);
    if (woke < due3)
        fail_msg("skipped-to head woken %" PRId64 " ms early", due3 - woke);
    r = claim_c("dl-3", "dc", &retry_at);
    assert_non_null(strstr(r, "\"index\": 2"));
    free(r);
    a2_test_worker_close_end(&w, &d);
}

/* 1,000 delayed heads, the consumer killed -9 while they wait: after the
 * restart every one is woken at its time (the timers come back from the
 * read at start), none early. Heads due before the worker's subscription
 * is in place are covered by its resync instead. */
static void test_delayed_heads_survive_kill(void **state)
{
    (void)state;
    enum { N = 1000 };
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_delaykill");
    /* due 8 s from now, 3 ms apart, each in its own session */
    int64_t base = a2_test_int(db, "select a2__now_ms() + 8000");
    a2_test_execf(
            db,
            "select count(a2_append(session => 'dk-' || g, events => "
            "jsonb_build_array(jsonb_build_object('type', 'job', 'not_before', "
            "%" PRId64
            " + 3 * g, 'targets', '[{\"consumer\": \"kc\"}]'::jsonb)))) "
            "from generate_series(0, %d) g",
            base, N - 1);
    a2_test_consumer_kill9(&d);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_cursors where "
                                     "session_id like 'dk-%' and "
                                     "claim_expires_at is not null"),
                     N);
    a2_test_consumer_start(&d);
    a2_test_worker_join(&w, d.sock, "kw", "kc", NULL, 1);
    int64_t subscribed = a2_test_wall_ms();
    static char seen[N];
    memset(seen, 0, sizeof seen);
    int woken = 0, expected = 0, early = 0;
    for (int i = 0; i < N; i++)
        expected += base + 3 * i > subscribed;
    int64_t worst = 0;
    while (woken < expected) {
        if (!a2_test_worker_wait_for(&w, "wake", 30000, &m))
            fail_msg("%d of %d delayed heads woken after the restart", woken,
                     expected);
        int64_t now = a2_test_wall_ms();
        int i = atoi(m.session + 3);
        assert_true(strncmp(m.session, "dk-", 3) == 0 && i >= 0 && i < N);
        int64_t due = base + 3 * i;
        if (now < due)
            early++;
        if (now - due > worst)
            worst = now - due;
        if (!seen[i] && due > subscribed)
            woken++;
        seen[i] = 1;
    }
    print_message("%d delayed heads woken after a kill -9 (%d due before "
                  "the subscription: the resync's), latest %" PRId64
                  " ms late\n",
                  woken, N - expected, worst);
    assert_int_equal(early, 0);
    assert_true(expected > 0);
    a2_test_worker_close_end(&w, &d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_append_and_complete_wake,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_retry_after_and_lease_lapse,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_delayed_head_woken_on_time,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_delayed_heads_survive_kill,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_timers_rebuilt_on_start, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_says_when_behind, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_log_and_cleared, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_log_before_cursor, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_presence_patch, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_presence_expiry_tick_retried,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(
                    test_presence_expiry_tick_unanswered, setup, teardown),
            cmocka_unit_test_setup_teardown(test_connection_keepalives, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_presence_expiry_pushed, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_metrics_slow_client, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_metrics_heartbeat_and_stop,
                                            setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
