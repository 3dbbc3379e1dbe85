/*
 * liba2store against a real PostgreSQL: every outcome of every operation.
 */
#include "a2/store.h"
#include "a2test.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef a2_test_fx fx;

static int setup(void **state)
{
    /* A2_TEST_STORE_OPTIONS adds conninfo settings, e.g. to run every
     * operation under generic plans (tests/integration/test_store_plans.sh). */
    char conninfo[1024];
    const char *extra = getenv("A2_TEST_STORE_OPTIONS");
    snprintf(conninfo, sizeof conninfo, "%s %s", a2_test_db(),
             extra ? extra : "");
    *state = a2_test_fx_new(conninfo, 1000000, "sess");
    return 0;
}

#define OK(expr) A2_TEST_OK(f->s, expr)

/* Appends one event (type, payload, id may be NULL) with targets. */
static int append1(fx *f, const char *session, const char *type,
                   const char *payload, const char *id,
                   const a2_target *targets, size_t ntargets, a2_events *out)
{
    a2_append_event ev = {.type = type,
                          .payload = payload,
                          .id = id,
                          .targets = targets,
                          .ntargets = ntargets};
    return a2_store_append(f->s, session, &ev, 1, NULL, out);
}

/* Appends the n events of ev to the fixture's session. */
static void append_all(fx *f, const a2_append_event *ev, size_t n)
{
    a2_events out;
    OK(a2_store_append(f->s, f->session, ev, n, NULL, &out));
    a2_events_free(&out);
}

/* Appends one event of type x for tg to the fixture's session. */
static void append_x(fx *f, const a2_target *tg)
{
    a2_events out;
    OK(append1(f, f->session, "x", NULL, NULL, tg, 1, &out));
    a2_events_free(&out);
}

static a2_claim_request claim_req(const char *holder)
{
    return (a2_claim_request){.holder = holder, .ttl_ms = 30000};
}

/* ── input checks ────────────────────────────────────────────────────── */

/* Claims with req: the outcome is want (-1: any); the result is freed. */
static void claim_expect(fx *f, const a2_claim_request *req, int want)
{
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, req, &cr));
    if (want >= 0)
        assert_int_equal(cr.outcome, want);
    a2_claim_result_free(&cr);
}

/* Claims with req into *cr (the caller frees it): the outcome is claimed,
 * the first head at attempt, with failures failures before it. */
static void claim_retried(fx *f, const a2_claim_request *req, int attempt,
                          int failures, a2_claim_result *cr)
{
    OK(a2_store_claim(f->s, f->session, req, cr));
    assert_int_equal(cr->outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr->heads.items[0].dispatch.attempt_count, attempt);
    assert_int_equal(cr->heads.items[0].dispatch.failure_count, failures);
}

/* Claims with req: the outcome is claimed, the first head event index at
 * attempt; the result is freed. */
static void claim_head_expect(fx *f, const a2_claim_request *req, int64_t index,
                              int attempt)
{
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.items[0].event.index, index);
    assert_int_equal(cr.heads.items[0].dispatch.attempt_count, attempt);
    a2_claim_result_free(&cr);
}

/* Completes attempt at, returning no events: its outcome is want. */
static void complete_expect(fx *f, const a2_attempt_ref *at, int want)
{
    a2_complete_result comp;
    OK(a2_store_complete(f->s, f->session, at, NULL, 0, NULL, 0, &comp));
    assert_int_equal(comp.outcome, want);
    a2_complete_result_free(&comp);
}

static void test_invalid_arguments(void **state)
{
    fx *f = *state;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_events out;
    a2_append_event ev = {.type = "t", .payload = "{"};
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "JSON"));
    ev.payload = "{\"a\": 1} x";
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.payload = NULL;
    assert_int_equal(a2_store_append(f->s, NULL, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_append(f->s, "", &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.id = "";
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.id = NULL;
    ev.type = NULL;
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.type = A2_STORE_CLEAR_TYPE;
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.type = "bad\xff";
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    ev.type = "t";
    a2_target tg = {.consumer = ""};
    ev.targets = &tg;
    ev.ntargets = 1;
    assert_int_equal(a2_store_append(f->s, f->session, &ev, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    a2_claim_result cr;
    a2_claim_request req = claim_req("h");
    req.ttl_ms = -1;
    assert_int_equal(a2_store_claim(f->s, f->session, &req, &cr),
                     A2_EINVALID_ARGUMENT);
    req.ttl_ms = 1000;
    req.max_failures = -1;
    assert_int_equal(a2_store_claim(f->s, f->session, &req, &cr),
                     A2_EINVALID_ARGUMENT);
    req.max_failures = 0;
    req.log_from = -1;
    assert_int_equal(a2_store_claim(f->s, f->session, &req, &cr),
                     A2_EINVALID_ARGUMENT);
    a2_claim_session bad_from = {f->session, 0, -1};
    assert_int_equal(a2_store_claim_sessions(f->s, &bad_from, 1, &req, &cr),
                     A2_EINVALID_ARGUMENT);
    req.log_from = 0;
    req.holder = NULL;
    assert_int_equal(a2_store_claim(f->s, f->session, &req, &cr),
                     A2_EINVALID_ARGUMENT);
    a2_fail_result fr;
    a2_attempt_ref at = {.consumer = "c", .index = 1, .attempt = 1};
    a2_fail_request freq = {.error = "x", .max_failures = 0};
    assert_int_equal(a2_store_fail(f->s, f->session, &at, &freq, &fr),
                     A2_EINVALID_ARGUMENT);
    freq.max_failures = 3;
    freq.retry_after_ms = -5;
    assert_int_equal(a2_store_fail(f->s, f->session, &at, &freq, &fr),
                     A2_EINVALID_ARGUMENT);
    a2_renew_result rr;
    assert_int_equal(a2_store_renew(f->s, f->session, "h", &at, 1, -1, 0, &rr),
                     A2_EINVALID_ARGUMENT);
    a2_complete_result comp;
    a2_append_event child = {.type = "child"}; /* no id */
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, &child, 1, NULL, 0, &comp),
            A2_EINVALID_ARGUMENT);
    at.attempt = 0;
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &comp),
            A2_EINVALID_ARGUMENT);
    a2_redrive_result rd;
    assert_int_equal(
            a2_store_redrive(f->s, f->session, "c", 1, 7, NULL, 0, &rd),
            A2_EINVALID_ARGUMENT);
    a2_sessions ss;
    const char *cons[] = {"c"};
    assert_int_equal(a2_store_pending_sessions(f->s, cons, 1, NULL, 0, &ss),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_pending_sessions(f->s, NULL, 0, NULL, 10, &ss),
                     A2_EINVALID_ARGUMENT);
    a2_read_options ro = {.after = -1};
    assert_int_equal(a2_store_read(f->s, f->session, &ro, &out),
                     A2_EINVALID_ARGUMENT);
    /* None of these reached the server, and nothing was written. */
    assert_int_equal(a2_store_round_trips(f->s), trips);
    assert_int_equal(a2_store_last_error(f->s)->code, A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 0);
}

static void test_open_unavailable(void **state)
{
    (void)state;
    a2_store *s = NULL;
    a2_store_error err;
    int rc = a2_store_open(&s, "host=127.0.0.1 port=1 connect_timeout=2", &err);
    a2_test_expect_unreachable(rc, s, &err);
}

/* The store's TCP connection notices a server that vanished without closing
 * it: keepalives after 30 s idle (every 10 s, 3 probes) and a 60 s
 * TCP_USER_TIMEOUT, unless the conninfo says otherwise. */
static void test_connection_defaults(void **state)
{
    (void)state;
    PGconn *probe = a2_test_connect();
    int port = atoi(PQport(probe));
    int own = PQsocket(probe);
    a2_store *s = NULL;
    a2_store_error err;
    a2_test_tcp t[4];
    assert_int_equal(a2_store_open(&s, a2_test_db(), &err), 0);
    assert_int_equal(a2_test_tcp_sockets(0, port, &own, 1, t, 4), 1);
    assert_int_equal(t[0].keepalive, 1);
    assert_int_equal(t[0].idle, 30);
    assert_int_equal(t[0].interval, 10);
    assert_int_equal(t[0].count, 3);
    assert_int_equal(t[0].user_timeout_ms, 60000);
    a2_store_close(s);
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo,
             "%s keepalives_idle=7 tcp_user_timeout=5000", a2_test_db());
    assert_int_equal(a2_store_open(&s, conninfo, &err), 0);
    assert_int_equal(a2_test_tcp_sockets(0, port, &own, 1, t, 4), 1);
    assert_int_equal(t[0].idle, 7);
    assert_int_equal(t[0].interval, 10);
    assert_int_equal(t[0].user_timeout_ms, 5000);
    a2_store_close(s);
    PQfinish(probe);
}

/* A store on the test database with one server setting of its own. */
static a2_store *open_with_setting(const char *setting)
{
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s options='-c %s'", a2_test_db(),
             setting);
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, conninfo, &err) != 0)
        fail_msg("open with %s: %s", setting, err.message);
    return s;
}

static void test_schema_missing(void **state)
{
    fx *f = *state;
    a2_test_exec(f->db, "create schema if not exists a2_empty");
    a2_store *s = open_with_setting("search_path=a2_empty");
    a2_events out;
    int rc = a2_store_read(s, "x", NULL, &out);
    assert_int_equal(rc, A2_ESCHEMA_MISSING);
    assert_non_null(strstr(a2_store_last_error(s)->message, "sql/schema.sql"));
    a2_store_close(s);
}

static void test_connection_lost(void **state)
{
    fx *f = *state;
    a2_events out;
    OK(a2_store_read(f->s, f->session, NULL, &out));
    a2_events_free(&out);
    /* Kill the store's backend: the next call reports it, the one after
     * reconnects. */
    a2_test_exec(f->db,
                 "select pg_terminate_backend(pid) from "
                 "pg_stat_activity where pid <> pg_backend_pid() and "
                 "datname = current_database() and " A2_TEST_STORE_QUERY);
    int rc = a2_store_read(f->s, f->session, NULL, &out);
    assert_int_equal(rc, A2_ESTORE_UNAVAILABLE);
    OK(a2_store_read(f->s, f->session, NULL, &out));
    a2_events_free(&out);
}

/* An append on s (whose statements time out at 300 ms) that waits for its
 * session's lock fails with the server's SQLSTATE and writes nothing; once
 * the lock is free, the same store appends. */
static void expect_blocked_append_cancelled(fx *f, a2_store *s)
{
    a2_test_hold_session_lock(f->db, f->session);
    a2_append_event ev = {.type = "t", .payload = "{}"};
    a2_events out;
    int64_t t0 = a2_test_now_ms();
    int rc = a2_store_append(s, f->session, &ev, 1, NULL, &out);
    int64_t took = a2_test_now_ms() - t0;
    a2_test_exec(f->db, "commit");
    assert_int_equal(rc, A2_ESTORE_FAILED);
    assert_string_equal(a2_store_last_error(s)->sqlstate, "57014");
    assert_true(took >= 250 && took < 5000);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 0);
    rc = a2_store_append(s, f->session, &ev, 1, NULL, &out);
    if (rc != 0)
        fail_msg("after the lock: %s", a2_store_last_error(s)->message);
    assert_int_equal(out.count, 1);
    a2_events_free(&out);
}

/* A backend that stays blocked is bounded by a statement_timeout given in
 * the conninfo. */
static void test_statement_timeout_bounds_blocked_call(void **state)
{
    fx *f = *state;
    a2_store *s = open_with_setting("statement_timeout=300");
    expect_blocked_append_cancelled(f, s);
    a2_store_close(s);
}

/* a2_store_set_timeout: the server cancels a call that waits past it, and
 * the timeout travels with each call: no round trip of its own. */
static void test_timeout_bounds_blocked_call(void **state)
{
    fx *f = *state;
    a2_store *s = a2_test_store_open(a2_test_db());
    assert_int_equal(a2_store_set_timeout(s, 300), 0);
    /* The first call, like every other, is one round trip. */
    uint64_t trips = a2_store_round_trips(s);
    a2_events out;
    if (a2_store_read(s, f->session, NULL, &out) != 0)
        fail_msg("read: %s", a2_store_last_error(s)->message);
    a2_events_free(&out);
    assert_int_equal(a2_store_round_trips(s) - trips, 1);
    expect_blocked_append_cancelled(f, s);
    trips = a2_store_round_trips(s);
    if (a2_store_read(s, f->session, NULL, &out) != 0)
        fail_msg("read: %s", a2_store_last_error(s)->message);
    a2_events_free(&out);
    assert_int_equal(a2_store_round_trips(s) - trips, 1);
    a2_store_close(s);
}

/* A timeout set back to 0 lifts the bound: a call that waits longer than
 * the old timeout for its session's lock succeeds. */
static void test_timeout_reset(void **state)
{
    fx *f = *state;
    OK(a2_store_set_timeout(f->s, 200));
    a2_events out;
    OK(a2_store_read(f->s, f->session, NULL, &out)); /* sets it */
    a2_events_free(&out);
    OK(a2_store_set_timeout(f->s, 0));
    a2_test_hold_session_lock(f->db, f->session);
    /* The lock goes 700 ms from now, without this thread. */
    assert_int_equal(PQsendQuery(f->db, "select pg_sleep(0.7); commit"), 1);
    a2_append_event ev = {.type = "t", .payload = "{}"};
    int64_t t0 = a2_test_now_ms();
    OK(a2_store_append(f->s, f->session, &ev, 1, NULL, &out));
    int64_t took = a2_test_now_ms() - t0;
    assert_int_equal(out.count, 1);
    a2_events_free(&out);
    assert_true(took >= 400);
    PGresult *r;
    while ((r = PQgetResult(f->db)) != NULL) {
        assert_int_not_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
        PQclear(r);
    }
}

/* A backend that stops answering (SIGSTOP: the kernel still takes the
 * bytes) fails the call on the client's side, half as long again after the
 * timeout and at least a second more; the connection is dropped and the
 * next call opens a new one. */
static void test_timeout_stopped_backend(void **state)
{
    fx *f = *state;
    char conninfo[1024], app[64], sql[256];
    snprintf(app, sizeof app, "a2t-stopped-%d", (int)getpid());
    snprintf(conninfo, sizeof conninfo, "%s application_name=%s", a2_test_db(),
             app);
    a2_store *s = a2_test_store_open(conninfo);
    assert_int_equal(a2_store_set_timeout(s, 200), 0);
    a2_events out;
    if (a2_store_read(s, f->session, NULL, &out) != 0)
        fail_msg("read: %s", a2_store_last_error(s)->message);
    a2_events_free(&out);
    snprintf(sql, sizeof sql,
             "select pid from pg_stat_activity where application_name = '%s'",
             app);
    pid_t pid = (pid_t)a2_test_int(f->db, sql);
    assert_true(pid > 0);
    if (kill(pid, SIGSTOP) != 0) {
        int e = errno;
        a2_store_close(s);
        if (e == EPERM)
            skip(); /* not allowed to stop the server's processes */
        fail_msg("kill: %s", strerror(e));
    }
    int64_t t0 = a2_test_now_ms();
    int rc = a2_store_read(s, f->session, NULL, &out);
    int64_t took = a2_test_now_ms() - t0;
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(rc, A2_ESTORE_UNAVAILABLE);
    assert_non_null(strstr(a2_store_last_error(s)->message,
                           "no answer from the database within 1200 ms"));
    assert_true(took >= 1150 && took < 5000);
    if (a2_store_read(s, f->session, NULL, &out) != 0)
        fail_msg("after: %s", a2_store_last_error(s)->message);
    a2_events_free(&out);
    snprintf(sql, sizeof sql,
             "select pid from pg_stat_activity where application_name = '%s' "
             "and pid <> %d",
             app, (int)pid);
    assert_true(a2_test_int(f->db, sql) > 0); /* a new backend */
    a2_store_close(s);
}

/* A server that takes the connection and never answers (a listening socket
 * that is never accepted: the kernel completes the handshake) holds the
 * open no longer than a call would wait, instead of connect_timeout. */
static void test_timeout_bounds_connect(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    char conninfo[128];
    snprintf(conninfo, sizeof conninfo,
             "host=127.0.0.1 port=%d dbname=a2 connect_timeout=30",
             ntohs(sa.sin_port));
    setenv("A2_STORE_TIMEOUT_MS", "200", 1);
    a2_store *s = NULL;
    a2_store_error err;
    int64_t t0 = a2_test_now_ms();
    int rc = a2_store_open(&s, conninfo, &err);
    int64_t took = a2_test_now_ms() - t0;
    unsetenv("A2_STORE_TIMEOUT_MS");
    close(fd);
    assert_int_equal(rc, A2_ESTORE_UNAVAILABLE);
    assert_null(s);
    assert_non_null(strstr(err.message, "no answer within 1200 ms"));
    assert_true(took >= 1150 && took < 5000);
}

/* Out-of-range timeouts, from the API and from A2_STORE_TIMEOUT_MS; a good
 * A2_STORE_TIMEOUT_MS bounds the store like a2_store_set_timeout. */
static void test_timeout_invalid_and_env(void **state)
{
    fx *f = *state;
    assert_int_equal(a2_store_set_timeout(NULL, 10), A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_set_timeout(f->s, -1), A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "-1"));
    assert_int_equal(a2_store_set_timeout(f->s, 86400001),
                     A2_EINVALID_ARGUMENT);
    OK(a2_store_set_timeout(f->s, 86400000));
    OK(a2_store_set_timeout(f->s, 0));

    static const char *const bad[] = {"12x", "-5", "86400001", " ",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("A2_STORE_TIMEOUT_MS", bad[i], 1);
        a2_store *s = (a2_store *)1;
        a2_store_error err;
        int rc = a2_store_open(&s, a2_test_db(), &err);
        assert_int_equal(rc, A2_EINVALID_ARGUMENT);
        assert_null(s);
        assert_int_equal(err.code, A2_EINVALID_ARGUMENT);
        assert_non_null(strstr(err.message, "A2_STORE_TIMEOUT_MS"));
    }
    setenv("A2_STORE_TIMEOUT_MS", "300", 1);
    a2_store *s = NULL;
    a2_store_error err;
    int rc = a2_store_open(&s, a2_test_db(), &err);
    unsetenv("A2_STORE_TIMEOUT_MS");
    if (rc != 0)
        fail_msg("open: %s", err.message);
    expect_blocked_append_cancelled(f, s);
    a2_store_close(s);
}

/* ── append and read ─────────────────────────────────────────────────── */

static void test_append_read(void **state)
{
    fx *f = *state;
    a2_append_event ev[3] = {
            {.type = "a", .payload = "{\"n\": 1}"},
            {.type = "b",
             .payload = "[1, 2.5, \"x\", null, 12345678901234567890]"},
            {.type = "a"},
    };
    a2_events out;
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_append(f->s, f->session, ev, 3, NULL, &out));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_int_equal(out.count, 3);
    assert_false(out.replayed);
    assert_false(out.has_pending);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(out.items[i].index, (int64_t)i + 1);
        assert_int_equal(out.items[i].created_at, f->now);
        assert_true(strlen(out.items[i].id) == 32);
    }
    assert_string_not_equal(out.items[0].id, out.items[1].id);
    a2_events_free(&out);
    a2_events_free(&out); /* idempotent */

    a2_read_options ro = {0};
    OK(a2_store_read(f->s, f->session, &ro, &out));
    assert_int_equal(out.count, 3);
    assert_string_equal(out.items[0].payload, "{\"n\": 1}");
    assert_string_equal(out.items[1].payload,
                        "[1, 2.5, \"x\", null, 12345678901234567890]");
    assert_string_equal(out.items[2].payload, "null");
    assert_false(out.items[0].has_cause);
    a2_events_free(&out);

    const char *types[] = {"a"};
    ro = (a2_read_options){.after = 1, .types = types, .ntypes = 1};
    OK(a2_store_read(f->s, f->session, &ro, &out));
    assert_int_equal(out.count, 1);
    assert_int_equal(out.items[0].index, 3);
    a2_events_free(&out);
    ro = (a2_read_options){.limit = 2};
    OK(a2_store_read(f->s, f->session, &ro, &out));
    assert_int_equal(out.count, 2);
    a2_events_free(&out);

    /* An empty append only reports pending work. */
    OK(a2_store_append(f->s, f->session, NULL, 0, NULL, &out));
    assert_int_equal(out.count, 0);
    assert_false(out.has_pending);
    a2_events_free(&out);
}

static void test_hostile_values_round_trip(void **state)
{
    fx *f = *state;
    const char *hostile[] = {
            "'; drop table a2_events; --",
            "$1",
            "-- comment",
            "quote\"double'single\\back",
            "uni\xc3\xa9\xe2\x82\xac",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
        char session[128], payload[512];
        snprintf(session, sizeof session, "%s%s", f->session, hostile[i]);
        /* The payload holds the hostile text as a JSON string. */
        size_t k = 0;
        payload[k++] = '"';
        for (const char *p = hostile[i]; *p; p++) {
            if (*p == '"' || *p == '\\')
                payload[k++] = '\\';
            payload[k++] = *p;
        }
        payload[k++] = '"';
        payload[k] = '\0';
        a2_target tg = {.consumer = hostile[i], .lane = hostile[i]};
        a2_events out;
        OK(append1(f, session, hostile[i], payload, hostile[i], &tg, 1, &out));
        assert_int_equal(out.items[0].index, 1);
        a2_events_free(&out);
        OK(a2_store_read(f->s, session, NULL, &out));
        assert_int_equal(out.count, 1);
        assert_string_equal(out.items[0].session_id, session);
        assert_string_equal(out.items[0].type, hostile[i]);
        assert_string_equal(out.items[0].id, hostile[i]);
        assert_string_equal(out.items[0].payload, payload);
        a2_events_free(&out);
        a2_cursors cs;
        OK(a2_store_cursors(f->s, session, &cs));
        assert_int_equal(cs.count, 1);
        assert_string_equal(cs.items[0].dispatch.consumer, hostile[i]);
        assert_string_equal(cs.items[0].dispatch.lane, hostile[i]);
        a2_cursors_free(&cs);
        a2_claim_result cr;
        a2_claim_request req = claim_req(hostile[i]);
        OK(a2_store_claim(f->s, session, &req, &cr));
        assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
        assert_string_equal(cr.heads.items[0].dispatch.claim_holder,
                            hostile[i]);
        a2_claim_result_free(&cr);
    }
    assert_int_equal(a2_test_int(f->db, "select count(*) from "
                                        "information_schema.tables where "
                                        "table_name = 'a2_events'"),
                     1);
}

static void test_replay_and_duplicates(void **state)
{
    fx *f = *state;
    a2_append_event ev[2] = {{.type = "a", .id = "id-1", .payload = "1"},
                             {.type = "b", .id = "id-2", .payload = "2"}};
    a2_events out;
    OK(a2_store_append(f->s, f->session, ev, 2, NULL, &out));
    assert_int_equal(out.items[1].index, 2);
    a2_events_free(&out);

    /* The same batch again: the committed rows, nothing written. */
    f->now += 5000;
    OK(a2_store_append(f->s, f->session, ev, 2, NULL, &out));
    assert_true(out.replayed);
    assert_int_equal(out.count, 2);
    assert_int_equal(out.items[0].index, 1);
    assert_string_equal(out.items[1].id, "id-2");
    assert_int_equal(out.items[1].created_at, f->now - 5000);
    a2_events_free(&out);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 2);

    /* Some stored, some fresh: mixed. */
    a2_append_event mixed[2] = {{.type = "a", .id = "id-2"},
                                {.type = "c", .id = "id-3"}};
    assert_int_equal(a2_store_append(f->s, f->session, mixed, 2, NULL, &out),
                     A2_EPARTIAL_DUPLICATE_BATCH);
    assert_int_equal(a2_store_last_error(f->s)->code,
                     A2_EPARTIAL_DUPLICATE_BATCH);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "mixes 1"));
    /* A generated id beside a stored one is mixed too. */
    mixed[1].id = NULL;
    assert_int_equal(a2_store_append(f->s, f->session, mixed, 2, NULL, &out),
                     A2_EPARTIAL_DUPLICATE_BATCH);
    /* The same id twice in one batch. */
    a2_append_event twice[2] = {{.type = "a", .id = "dup"},
                                {.type = "a", .id = "dup"}};
    uint64_t trips = a2_store_round_trips(f->s);
    assert_int_equal(a2_store_append(f->s, f->session, twice, 2, NULL, &out),
                     A2_EPARTIAL_DUPLICATE_BATCH);
    assert_int_equal(a2_store_round_trips(f->s), trips);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 2);
    /* Ids are per session. */
    char other[80];
    snprintf(other, sizeof other, "%s-other", f->session);
    OK(a2_store_append(f->s, other, ev, 2, NULL, &out));
    assert_false(out.replayed);
    a2_events_free(&out);
}

static int counter_ids(void *ctx, char *buf, size_t len)
{
    fx *f = ctx;
    snprintf(buf, len, "gen-%d", ++f->ids);
    return 0;
}

static int failing_ids(void *ctx, char *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return -1;
}

static void test_injected_ids(void **state)
{
    fx *f = *state;
    a2_store_set_ids(f->s, counter_ids, f);
    a2_events out;
    OK(append1(f, f->session, "t", NULL, NULL, NULL, 0, &out));
    assert_string_equal(out.items[0].id, "gen-1");
    a2_events_free(&out);
    a2_store_set_ids(f->s, failing_ids, f);
    assert_int_equal(append1(f, f->session, "t", NULL, NULL, NULL, 0, &out),
                     A2_ESTORE_FAILED);
    a2_store_set_ids(f->s, NULL, NULL);
    OK(append1(f, f->session, "t", NULL, NULL, NULL, 0, &out));
    assert_int_equal(strlen(out.items[0].id), 32);
    a2_events_free(&out);
}

/* ── dispatch ────────────────────────────────────────────────────────── */

static void test_concurrent_target_claim_complete(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1"};
    a2_events out;
    OK(append1(f, f->session, "job", "{}", NULL, &tg, 1, &out));
    assert_true(out.has_pending);
    a2_events_free(&out);
    OK(append1(f, f->session, "job", "{}", NULL, &tg, 1, &out));
    a2_events_free(&out);

    a2_claim_result cr;
    a2_claim_request req = claim_req("w1");
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.count, 2); /* concurrent: both at once */
    assert_int_equal(cr.session_head, 2);
    a2_head *h = &cr.heads.items[0];
    assert_int_equal(h->event.index, 1);
    assert_string_equal(h->dispatch.cursor_key, "#1");
    assert_string_equal(h->dispatch.kind, "event");
    assert_null(h->dispatch.lane);
    assert_int_equal(h->dispatch.attempt_count, 1);
    assert_string_equal(h->dispatch.claim_holder, "w1");
    assert_int_equal(h->dispatch.claim_expires_at, f->now + 30000);
    assert_int_equal(h->dispatch.first_claimed_at, f->now);
    assert_int_equal(h->dispatch.failed_at, A2_STORE_NONE);
    a2_claim_result_free(&cr);

    a2_complete_result comp;
    a2_attempt_ref at = {.consumer = "c1", .index = 1, .attempt = 1};
    trips = a2_store_round_trips(f->s);
    OK(a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &comp));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
    assert_int_equal(comp.events.count, 0);
    a2_complete_result_free(&comp);
    /* A second claimer finds only the live claim on #2: busy. */
    req = claim_req("w2");
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_BUSY);
    assert_int_equal(cr.retry_at, f->now + 30000);
    a2_claim_result_free(&cr);
    at.index = 2;
    complete_expect(f, &at, A2_ATTEMPT_COMPLETED);
    claim_expect(f, &req, A2_CLAIM_SETTLED);
    /* Completing again: the head is done, the attempt superseded... unless
     * it is the same completion retried, which replays (no events). */
    complete_expect(f, &at, A2_ATTEMPT_COMPLETED);
    at.attempt = 2;
    complete_expect(f, &at, A2_ATTEMPT_SUPERSEDED);
}

static void test_lane_order(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1", .lane = "L"};
    a2_append_event ev[3] = {
            {.type = "x", .targets = &tg, .ntargets = 1},
            {.type = "x", .targets = &tg, .ntargets = 1},
            {.type = "x", .targets = &tg, .ntargets = 1},
    };
    a2_events out;
    append_all(f, ev, 3);
    for (int64_t want = 1; want <= 4; want++) {
        if (want == 3) { /* appended while the lane runs */
            OK(append1(f, f->session, "x", NULL, NULL, &tg, 1, &out));
            assert_int_equal(out.items[0].index, 4);
            a2_events_free(&out);
        }
        a2_claim_result cr;
        a2_claim_request req = claim_req("w");
        OK(a2_store_claim(f->s, f->session, &req, &cr));
        assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
        assert_int_equal(cr.heads.count, 1);
        assert_int_equal(cr.heads.items[0].event.index, want);
        assert_string_equal(cr.heads.items[0].dispatch.cursor_key, "lane:L");
        assert_string_equal(cr.heads.items[0].dispatch.lane, "L");
        a2_claim_result_free(&cr);
        /* While it runs, nothing else of the lane is claimable. */
        req = claim_req("other");
        claim_expect(f, &req, A2_CLAIM_BUSY);
        a2_attempt_ref at = {
                .consumer = "c1", .lane = "L", .index = want, .attempt = 1};
        complete_expect(f, &at, A2_ATTEMPT_COMPLETED);
    }
    a2_cursors cs;
    OK(a2_store_cursors(f->s, f->session, &cs));
    assert_int_equal(cs.count, 1);
    assert_int_equal(cs.items[0].head, A2_STORE_NONE);
    assert_int_equal(cs.items[0].position, 4);
    a2_cursors_free(&cs);
    /* An idle lane restarts with a new run on the next append. */
    append_x(f, &tg);
    OK(a2_store_cursors(f->s, f->session, &cs));
    assert_int_equal(cs.count, 1);
    assert_int_equal(cs.items[0].head, 5);
    assert_int_equal(cs.items[0].dispatch.epoch, 5);
    a2_cursors_free(&cs);
}

static void test_log_cursor(void **state)
{
    fx *f = *state;
    const char *types[] = {"wanted"};
    a2_log_spec log = {.lane = "log", .types = types, .ntypes = 1};
    a2_consumer cons = {.name = "logger", .log = &log};
    a2_append_options opts = {.consumers = &cons, .nconsumers = 1};
    a2_append_event ev[4] = {{.type = "other"},
                             {.type = "wanted"},
                             {.type = "other"},
                             {.type = "wanted"}};
    a2_events out;
    OK(a2_store_append(f->s, f->session, ev, 4, &opts, &out));
    assert_true(out.has_pending);
    a2_events_free(&out);
    int64_t seen[2];
    for (int i = 0; i < 2; i++) {
        a2_claim_result cr;
        a2_claim_request req = claim_req("w");
        req.consumers = &cons;
        req.nconsumers = 1;
        OK(a2_store_claim(f->s, f->session, &req, &cr));
        assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
        assert_int_equal(cr.heads.count, 1);
        assert_string_equal(cr.heads.items[0].event.type, "wanted");
        assert_string_equal(cr.heads.items[0].dispatch.kind, "log");
        seen[i] = cr.heads.items[0].event.index;
        a2_attempt_ref at = {.consumer = "logger",
                             .lane = "log",
                             .index = seen[i],
                             .attempt = 1};
        a2_claim_result_free(&cr);
        a2_complete_result comp;
        OK(a2_store_complete(f->s, f->session, &at, NULL, 0, &cons, 1, &comp));
        assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
        a2_complete_result_free(&comp);
    }
    assert_int_equal(seen[0], 2);
    assert_int_equal(seen[1], 4);
    a2_cursors cs;
    int64_t head = 0;
    OK(a2_store_wake_log(f->s, f->session, &cons, 0, &cs, &head));
    assert_int_equal(head, 4);
    assert_int_equal(cs.count, 1);
    assert_int_equal(cs.items[0].head, A2_STORE_NONE);
    assert_string_equal(cs.items[0].types, "[\"wanted\"]");
    a2_cursors_free(&cs);
    /* Events appended by a writer that does not serve the logger: a wake
     * starts a run at the next wanted event. */
    a2_append_event more[2] = {{.type = "other"}, {.type = "wanted"}};
    OK(a2_store_append(f->s, f->session, more, 2, NULL, &out));
    a2_events_free(&out);
    OK(a2_store_wake_log(f->s, f->session, &cons, 0, &cs, &head));
    assert_int_equal(head, 6);
    assert_int_equal(cs.items[0].head, 6);
    a2_cursors_free(&cs);
    /* Unchanged on a second wake. */
    OK(a2_store_wake_log(f->s, f->session, &cons, 0, &cs, &head));
    assert_int_equal(cs.items[0].head, 6);
    a2_cursors_free(&cs);
    /* A new consumer with backfill starts at the beginning of the log. */
    a2_log_spec all = {.lane = "all", .backfill = true};
    a2_consumer every = {.name = "every", .log = &all};
    OK(a2_store_wake_log(f->s, f->session, &every, 0, &cs, &head));
    assert_int_equal(cs.items[0].head, 1);
    assert_string_equal(cs.items[0].types, "null");
    a2_cursors_free(&cs);
    /* Without backfill, a new consumer starts at the head: nothing to run. */
    a2_log_spec late = {.lane = "late"};
    a2_consumer latecomer = {.name = "late", .log = &late};
    OK(a2_store_wake_log(f->s, f->session, &latecomer, 0, &cs, &head));
    assert_int_equal(cs.items[0].head, A2_STORE_NONE);
    assert_int_equal(cs.items[0].position, 6);
    a2_cursors_free(&cs);
}

static void test_takeover_and_supersede(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1", .lane = "L"};
    a2_events out;
    append_x(f, &tg);
    a2_claim_result cr;
    a2_claim_request req = claim_req("old");
    req.ttl_ms = 1000;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.heads.items[0].dispatch.attempt_count, 1);
    a2_claim_result_free(&cr);
    /* Renew while live. */
    a2_attempt_ref old = {
            .consumer = "c1", .lane = "L", .index = 1, .attempt = 1};
    a2_renew_result rr;
    f->now += 500;
    OK(a2_store_renew(f->s, f->session, "old", &old, 1, 1000, 0, &rr));
    assert_int_equal(rr.nrenewed, 1);
    assert_int_equal(rr.nsuperseded, 0);
    assert_int_equal(rr.renewed[0].index, 1);
    a2_renew_result_free(&rr);
    /* Lapse, take over. */
    f->now += 1001;
    req = claim_req("new");
    claim_retried(f, &req, 2, 1, &cr);
    assert_string_equal(cr.heads.items[0].dispatch.claim_holder, "new");
    a2_claim_result_free(&cr);
    /* The old attempt: renew, complete, fail and append are superseded. */
    OK(a2_store_renew(f->s, f->session, "old", &old, 1, 1000, 0, &rr));
    assert_int_equal(rr.nrenewed, 0);
    assert_int_equal(rr.nsuperseded, 1);
    a2_renew_result_free(&rr);
    complete_expect(f, &old, A2_ATTEMPT_SUPERSEDED);
    a2_fail_result fr;
    a2_fail_request freq = {.error = "boom", .max_failures = 5};
    OK(a2_store_fail(f->s, f->session, &old, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_SUPERSEDED);
    a2_cause cause = {.consumer = "c1", .lane = "L", .index = 1, .attempt = 1};
    a2_append_event child = {.type = "child", .cause = &cause};
    assert_int_equal(a2_store_append(f->s, f->session, &child, 1, NULL, &out),
                     A2_ESUPERSEDED_ATTEMPT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "superseded"));
    /* The current attempt's append passes the fence. */
    cause.attempt = 2;
    OK(a2_store_append(f->s, f->session, &child, 1, NULL, &out));
    assert_true(out.items[0].has_cause);
    assert_int_equal(out.items[0].cause.attempt, 2);
    a2_events_free(&out);
    OK(a2_store_read(f->s, f->session, NULL, &out));
    assert_int_equal(out.items[1].cause.attempt, 2);
    assert_string_equal(out.items[1].cause.lane, "L");
    a2_events_free(&out);
    a2_attempt_ref cur = old;
    cur.attempt = 2;
    complete_expect(f, &cur, A2_ATTEMPT_COMPLETED);
}

static void test_max_failures_on_takeover(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1"};
    append_x(f, &tg);
    a2_claim_result cr;
    a2_claim_request req = claim_req("a");
    req.ttl_ms = 100;
    req.max_failures = 2;
    claim_expect(f, &req, A2_CLAIM_CLAIMED);
    f->now += 200;
    OK(a2_store_claim(f->s, f->session, &req, &cr)); /* failure 1 */
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.items[0].dispatch.failure_count, 1);
    a2_claim_result_free(&cr);
    f->now += 200;
    OK(a2_store_claim(f->s, f->session, &req, &cr)); /* failure 2: dead */
    assert_int_equal(cr.outcome, A2_CLAIM_SETTLED);
    assert_int_equal(cr.dead_lettered.count, 1);
    assert_int_equal(cr.dead_lettered.items[0].dispatch.failed_at, f->now);
    assert_null(cr.dead_lettered.items[0].dispatch.claim_holder);
    a2_claim_result_free(&cr);
    a2_heads dl;
    OK(a2_store_dead_letters(f->s, f->session, &dl));
    assert_int_equal(dl.count, 1);
    assert_int_equal(dl.items[0].event.index, 1);
    assert_int_equal(dl.items[0].dispatch.failure_count, 2);
    a2_heads_free(&dl);
}

static void test_fail_retry_dead_letter_redrive(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1", .lane = "L"};
    a2_append_event ev[2] = {{.type = "x", .targets = &tg, .ntargets = 1},
                             {.type = "y", .targets = &tg, .ntargets = 1}};
    append_all(f, ev, 2);
    a2_claim_result cr;
    a2_claim_request req = claim_req("w");
    claim_expect(f, &req, -1);
    a2_attempt_ref at = {
            .consumer = "c1", .lane = "L", .index = 1, .attempt = 1};
    a2_fail_result fr;
    a2_fail_request freq = {
            .error = "e1", .max_failures = 2, .retry_after_ms = 5000};
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_fail(f->s, f->session, &at, &freq, &fr));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_int_equal(fr.outcome, A2_ATTEMPT_FAILED);
    assert_int_equal(fr.failure_count, 1);
    /* The same failure again reports it again. */
    OK(a2_store_fail(f->s, f->session, &at, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_FAILED);
    assert_int_equal(fr.failure_count, 1);
    /* Held until retry-after. */
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_BUSY);
    assert_int_equal(cr.retry_at, f->now + 5000);
    a2_claim_result_free(&cr);
    f->now += 5000;
    claim_retried(f, &req, 2, 1, &cr);
    assert_string_equal(cr.heads.items[0].dispatch.last_error, "e1");
    a2_claim_result_free(&cr);
    at.attempt = 2;
    freq.error = "e2";
    OK(a2_store_fail(f->s, f->session, &at, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_DEAD_LETTERED);
    assert_int_equal(fr.failure_count, 2);
    claim_expect(f, &req, A2_CLAIM_SETTLED); /* lane blocked */
    a2_heads dl;
    OK(a2_store_dead_letters(f->s, f->session, &dl));
    assert_int_equal(dl.count, 1);
    assert_string_equal(dl.items[0].dispatch.last_error, "e2");
    a2_heads_free(&dl);

    /* Retry: the head runs again. */
    a2_redrive_result rd;
    OK(a2_store_redrive(f->s, f->session, "c1", 1, A2_REDRIVE_RETRY, NULL, 0,
                        &rd));
    assert_true(rd.redriven);
    assert_true(rd.has_pending);
    claim_head_expect(f, &req, 1, 3);
    at.attempt = 3;
    freq.max_failures = 1;
    OK(a2_store_fail(f->s, f->session, &at, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_DEAD_LETTERED);
    /* Skip: the lane moves on to index 2. */
    OK(a2_store_redrive(f->s, f->session, "c1", 1, A2_REDRIVE_SKIP, NULL, 0,
                        &rd));
    assert_true(rd.redriven);
    assert_true(rd.has_pending);
    OK(a2_store_redrive(f->s, f->session, "c1", 1, A2_REDRIVE_SKIP, NULL, 0,
                        &rd));
    assert_false(rd.redriven);
    claim_head_expect(f, &req, 2, 1);
    OK(a2_store_dead_letters(f->s, f->session, &dl));
    assert_int_equal(dl.count, 0);
    a2_heads_free(&dl);
}

static void test_no_such_event(void **state)
{
    fx *f = *state;
    a2_attempt_ref at = {.consumer = "c1", .index = 99, .attempt = 1};
    a2_fail_result fr;
    a2_fail_request freq = {.error = "x", .max_failures = 3};
    assert_int_equal(a2_store_fail(f->s, f->session, &at, &freq, &fr),
                     A2_ENO_SUCH_EVENT);
    a2_complete_result comp;
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &comp),
            A2_ENO_SUCH_EVENT);
}

static void test_complete_with_children(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1"};
    a2_events out;
    OK(append1(f, f->session, "parent", NULL, NULL, &tg, 1, &out));
    a2_events_free(&out);
    a2_claim_result cr;
    a2_claim_request req = claim_req("w");
    claim_expect(f, &req, -1);
    a2_target next = {.consumer = "c2", .lane = "M"};
    a2_append_event kids[2] = {{.type = "kid",
                                .id = "k1",
                                .payload = "{\"a\": 1}",
                                .targets = &next,
                                .ntargets = 1},
                               {.type = "kid", .id = "k2"}};
    a2_attempt_ref at = {.consumer = "c1", .index = 1, .attempt = 1};
    a2_complete_result comp;
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_complete(f->s, f->session, &at, kids, 2, NULL, 0, &comp));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
    assert_int_equal(comp.events.count, 2);
    assert_false(comp.events.replayed);
    assert_int_equal(comp.events.items[0].index, 2);
    assert_string_equal(comp.events.items[1].id, "k2");
    assert_true(comp.events.items[0].has_cause);
    assert_string_equal(comp.events.items[0].cause.consumer, "c1");
    a2_complete_result_free(&comp);
    /* The child's target started a lane. */
    req = claim_req("w2");
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.items[0].event.index, 2);
    assert_string_equal(cr.heads.items[0].dispatch.consumer, "c2");
    a2_claim_result_free(&cr);
    /* A retry after an unknown acknowledgement: the committed children. */
    OK(a2_store_complete(f->s, f->session, &at, kids, 2, NULL, 0, &comp));
    assert_int_equal(comp.outcome, A2_ATTEMPT_COMPLETED);
    assert_true(comp.events.replayed);
    assert_int_equal(comp.events.count, 2);
    assert_int_equal(comp.events.items[0].index, 2);
    assert_int_equal(comp.events.items[1].index, 3);
    assert_string_equal(comp.events.items[0].payload, "{\"a\": 1}");
    a2_complete_result_free(&comp);
    /* A retry with other children does not match. */
    kids[1].id = "k3";
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, kids, 2, NULL, 0, &comp),
            A2_EPARTIAL_DUPLICATE_BATCH);
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, kids, 1, NULL, 0, &comp),
            A2_EPARTIAL_DUPLICATE_BATCH);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 3);
}

static void test_complete_duplicate_ids(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1"};
    a2_append_event ev[2] = {{.type = "p", .targets = &tg, .ntargets = 1},
                             {.type = "q", .id = "taken"}};
    append_all(f, ev, 2);
    a2_claim_request req = claim_req("w");
    claim_expect(f, &req, -1);
    a2_attempt_ref at = {.consumer = "c1", .index = 1, .attempt = 1};
    a2_complete_result comp;
    /* The same id twice. */
    a2_append_event twice[2] = {{.type = "k", .id = "d"},
                                {.type = "k", .id = "d"}};
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, twice, 2, NULL, 0, &comp),
            A2_EPARTIAL_DUPLICATE_BATCH);
    /* An id a live event owns. */
    a2_append_event owned = {.type = "k", .id = "taken"};
    assert_int_equal(
            a2_store_complete(f->s, f->session, &at, &owned, 1, NULL, 0, &comp),
            A2_EPARTIAL_DUPLICATE_BATCH);
    /* Nothing was written; the head is still held and completes. */
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 2);
    complete_expect(f, &at, A2_ATTEMPT_COMPLETED);
}

/* An append that starts work for a consumer it serves reports pending work
 * without probing for it; one that starts none probes the served consumers'
 * heads. Both refuse an origin the clear marker passed, writing nothing. */
static void test_append_pending_probe(void **state)
{
    fx *f = *state;
    a2_target c1 = {.consumer = "c1"}, c2 = {.consumer = "c2"};
    a2_append_event to_c1 = {.type = "x", .targets = &c1, .ntargets = 1};
    a2_append_event to_c2 = {.type = "x", .targets = &c2, .ntargets = 1};
    a2_consumer serves_c1 = {.name = "c1"}, serves_c9 = {.name = "c9"};
    a2_append_options opts = {.consumers = &serves_c1, .nconsumers = 1};
    a2_events out;
    /* Starts work for c2 only; c1 has no head. */
    OK(a2_store_append(f->s, f->session, &to_c2, 1, &opts, &out));
    assert_false(out.has_pending);
    a2_events_free(&out);
    /* Starts work for c1. */
    OK(a2_store_append(f->s, f->session, &to_c1, 1, &opts, &out));
    assert_true(out.has_pending);
    assert_int_equal(out.items[0].index, 2);
    a2_events_free(&out);
    /* Starts work for c2 only; the probe finds c1's head. */
    OK(a2_store_append(f->s, f->session, &to_c2, 1, &opts, &out));
    assert_true(out.has_pending);
    a2_events_free(&out);
    /* A writer serving c9 starts nothing it serves and finds nothing. */
    opts.consumers = &serves_c9;
    OK(a2_store_append(f->s, f->session, &to_c2, 1, &opts, &out));
    assert_false(out.has_pending);
    a2_events_free(&out);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors", "head is not null"), 4);

    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    assert_int_equal(clr.clear_index, 5);
    opts = (a2_append_options){
            .consumers = &serves_c1, .nconsumers = 1, .origin_index = 3};
    assert_int_equal(a2_store_append(f->s, f->session, &to_c1, 1, &opts, &out),
                     A2_ESESSION_CLEARED);
    opts.consumers = &serves_c9;
    assert_int_equal(a2_store_append(f->s, f->session, &to_c1, 1, &opts, &out),
                     A2_ESESSION_CLEARED);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 5);
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors", "epoch > 5"), 0);
    opts.origin_index = 0;
    opts.consumers = &serves_c1;
    OK(a2_store_append(f->s, f->session, &to_c1, 1, &opts, &out));
    assert_true(out.has_pending);
    assert_int_equal(out.items[0].index, 6);
    a2_events_free(&out);
}

static void test_claim_through_exclude_served(void **state)
{
    fx *f = *state;
    a2_target tg[2] = {{.consumer = "c1"}, {.consumer = "c2"}};
    a2_append_event ev[3] = {{.type = "x", .targets = tg, .ntargets = 2},
                             {.type = "x", .targets = tg, .ntargets = 2},
                             {.type = "x", .targets = tg, .ntargets = 2}};
    a2_consumer served = {.name = "c1"};
    a2_append_options opts = {.consumers = &served, .nconsumers = 1};
    a2_events out;
    OK(a2_store_append(f->s, f->session, ev, 3, &opts, &out));
    assert_true(out.has_pending);
    a2_events_free(&out);
    /* A writer serving neither consumer starts work it does not serve. */
    a2_consumer other = {.name = "c9"};
    opts.consumers = &other;
    OK(a2_store_append(f->s, f->session, NULL, 0, &opts, &out));
    assert_false(out.has_pending);
    a2_events_free(&out);
    /* through: heads at or below index 2; exclude #1 of c1; served c1. */
    a2_head_ref skip = {.consumer = "c1", .index = 1};
    a2_claim_request req = claim_req("w");
    req.through = 2;
    req.exclude = &skip;
    req.nexclude = 1;
    req.consumers = &served;
    req.nconsumers = 1;
    a2_claim_result cr;
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.count, 1);
    assert_int_equal(cr.heads.items[0].event.index, 2);
    assert_string_equal(cr.heads.items[0].dispatch.consumer, "c1");
    a2_claim_result_free(&cr);
    /* Every consumer, no bound: the rest, ordered by index then consumer. */
    req = claim_req("w");
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.heads.count, 5);
    int64_t prev = 0;
    for (size_t i = 0; i < cr.heads.count; i++) {
        assert_true(cr.heads.items[i].event.index >= prev);
        prev = cr.heads.items[i].event.index;
    }
    assert_string_equal(cr.heads.items[0].dispatch.consumer, "c1");
    assert_string_equal(cr.heads.items[1].dispatch.consumer, "c2");
    assert_int_equal(cr.session_head, 3);
    a2_claim_result_free(&cr);
}

typedef struct claim_job {
    fx *f;
    a2_claim_result cr;
    int rc;
    uint64_t trips;
} claim_job;

static void *claim_thread(void *arg)
{
    claim_job *j = arg;
    a2_claim_request req = claim_req("late");
    uint64_t before = a2_store_round_trips(j->f->s);
    j->rc = a2_store_claim(j->f->s, j->f->session, &req, &j->cr);
    j->trips = a2_store_round_trips(j->f->s) - before;
    return NULL;
}

/* A claim that waited on a cursor row which moved to an event committed
 * after the claim's snapshot reads that event in a later statement of the
 * same call. */
static void test_claim_waits_for_moved_head(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1", .lane = "L"};
    a2_events out;
    OK(append1(f, f->session, "first", NULL, NULL, &tg, 1, &out));
    a2_events_free(&out);
    PGconn *mover = a2_test_connect();
    a2_test_exec(mover, "begin");
    char sql[1024];
    snprintf(sql, sizeof sql,
             "insert into a2_events (session_id, idx, event_type, payload, "
             "event_id, created_at) values ('%s', 2, 'second', '{\"m\": 2}', "
             "'moved', 1)",
             f->session);
    a2_test_exec(mover, sql);
    snprintf(sql, sizeof sql,
             "update a2_cursors set head = 2, position = 1 where session_id = "
             "'%s' and cursor_key = 'lane:L'",
             f->session);
    a2_test_exec(mover, sql);
    claim_job job = {.f = f};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, claim_thread, &job), 0);
    /* Wait until the claim blocks on the row lock. */
    int64_t waiting = a2_test_lock_waiters(
            f->db, "datname = current_database() and " A2_TEST_STORE_QUERY, 1,
            5000);
    assert_int_equal(waiting, 1);
    a2_test_exec(mover, "commit");
    PQfinish(mover);
    pthread_join(th, NULL);
    if (job.rc != 0)
        fail_msg("claim: %s", a2_store_last_error(f->s)->message);
    assert_int_equal(job.cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(job.cr.heads.count, 1);
    assert_int_equal(job.cr.heads.items[0].event.index, 2);
    assert_string_equal(job.cr.heads.items[0].event.type, "second");
    assert_string_equal(job.cr.heads.items[0].event.payload, "{\"m\": 2}");
    assert_string_equal(job.cr.heads.items[0].event.id, "moved");
    assert_int_equal(job.trips, 1);
    a2_claim_result_free(&job.cr);
}

/* ── clear, reclaim ──────────────────────────────────────────────────── */

static void test_clear_supersedes_claims(void **state)
{
    fx *f = *state;
    a2_target tg[2] = {{.consumer = "c1"}, {.consumer = "c2", .lane = "L"}};
    a2_append_event ev[2] = {{.type = "x", .targets = tg, .ntargets = 2},
                             {.type = "x", .targets = tg, .ntargets = 2}};
    a2_events out;
    append_all(f, ev, 2);
    a2_claim_result cr;
    a2_claim_request req = claim_req("w");
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.heads.count, 3); /* #1, #2, lane head 1 */
    a2_claim_result_free(&cr);

    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, 5, NULL, &clr)); /* stale view */
    assert_false(clr.cleared);
    assert_int_equal(clr.index, 2);
    OK(a2_store_clear(f->s, f->session, 2, NULL, &clr));
    assert_true(clr.cleared);
    assert_int_equal(clr.index, 3);
    assert_int_equal(clr.clear_index, 3);
    /* The same clear retried: no second marker. */
    OK(a2_store_clear(f->s, f->session, 2, NULL, &clr));
    assert_true(clr.cleared);
    assert_int_equal(clr.clear_index, 3);
    assert_int_equal(a2_test_fx_rows(f, "a2_events",
                                     "event_type = '" A2_STORE_CLEAR_TYPE "'"),
                     1);
    /* Every claimed head is superseded. */
    a2_attempt_ref at = {.consumer = "c1", .index = 1, .attempt = 1};
    a2_complete_result comp;
    OK(a2_store_complete(f->s, f->session, &at, NULL, 0, NULL, 0, &comp));
    assert_int_equal(comp.outcome, A2_ATTEMPT_SUPERSEDED);
    a2_fail_result fr;
    a2_fail_request freq = {.error = "x", .max_failures = 3};
    at = (a2_attempt_ref){
            .consumer = "c2", .lane = "L", .index = 1, .attempt = 1};
    OK(a2_store_fail(f->s, f->session, &at, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_SUPERSEDED);
    a2_renew_result rr;
    OK(a2_store_renew(f->s, f->session, "w", &at, 1, 1000, 0, &rr));
    assert_int_equal(rr.nsuperseded, 1);
    a2_renew_result_free(&rr);
    a2_cause cause = {.consumer = "c1", .index = 2, .attempt = 1};
    a2_append_event child = {.type = "late", .cause = &cause};
    assert_int_equal(a2_store_append(f->s, f->session, &child, 1, NULL, &out),
                     A2_ESUPERSEDED_ATTEMPT);
    claim_expect(f, &req, A2_CLAIM_SETTLED);
    a2_cursors cs;
    OK(a2_store_cursors(f->s, f->session, &cs));
    assert_int_equal(cs.count, 0);
    a2_cursors_free(&cs);
    /* Reads start at the marker. */
    OK(a2_store_read(f->s, f->session, NULL, &out));
    assert_int_equal(out.count, 1);
    assert_string_equal(out.items[0].type, A2_STORE_CLEAR_TYPE);
    a2_events_free(&out);
    /* Scheduled work from before the marker is refused. */
    a2_append_options opts = {.origin_index = 2};
    a2_append_event sched = {.type = "sched"};
    assert_int_equal(a2_store_append(f->s, f->session, &sched, 1, &opts, &out),
                     A2_ESESSION_CLEARED);
    opts.origin_index = 4;
    OK(a2_store_append(f->s, f->session, &sched, 1, &opts, &out));
    assert_int_equal(out.items[0].index, 4);
    a2_events_free(&out);
    /* A lane target after the clear starts a fresh run. */
    OK(append1(f, f->session, "after", NULL, NULL, &tg[1], 1, &out));
    a2_events_free(&out);
    OK(a2_store_claim(f->s, f->session, &req, &cr));
    assert_int_equal(cr.outcome, A2_CLAIM_CLAIMED);
    assert_int_equal(cr.heads.items[0].event.index, 5);
    assert_int_equal(cr.heads.items[0].clear_index, 3);
    a2_claim_result_free(&cr);
}

static void test_clear_by_consumer(void **state)
{
    fx *f = *state;
    a2_target tg = {.consumer = "c1"};
    append_x(f, &tg);
    a2_claim_request req = claim_req("w");
    claim_expect(f, &req, -1);
    a2_clear_result clr;
    a2_cause stale = {.consumer = "c1", .index = 1, .attempt = 7};
    assert_int_equal(
            a2_store_clear(f->s, f->session, A2_STORE_NONE, &stale, &clr),
            A2_ESUPERSEDED_ATTEMPT);
    a2_cause cause = {.consumer = "c1", .index = 1, .attempt = 1};
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, &cause, &clr));
    assert_true(clr.cleared);
    assert_int_equal(clr.clear_index, 2);
    /* Its own head was released. */
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors", "head is not null"), 0);
    /* Clearing with nothing after the marker writes no second marker. */
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    assert_true(clr.cleared);
    assert_int_equal(clr.clear_index, 2);
}

static void test_id_reuse_below_marker(void **state)
{
    fx *f = *state;
    a2_events out;
    OK(append1(f, f->session, "x", "1", "same", NULL, 0, &out));
    a2_events_free(&out);
    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    OK(append1(f, f->session, "x", "2", "same", NULL, 0, &out));
    assert_false(out.replayed);
    assert_int_equal(out.items[0].index, 3);
    a2_events_free(&out);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", "event_id = 'same'"), 1);
    /* Now it is owned again: a replay. */
    OK(append1(f, f->session, "x", "2", "same", NULL, 0, &out));
    assert_true(out.replayed);
    assert_int_equal(out.items[0].index, 3);
    a2_events_free(&out);
}

static void test_id_reuse_held(void **state)
{
    fx *f = *state;
    a2_events out;
    OK(append1(f, f->session, "x", NULL, "held-id", NULL, 0, &out));
    a2_events_free(&out);
    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    /* Another transaction holds the cleared row (as a reclaim would). */
    PGconn *other = a2_test_connect();
    a2_test_exec(other, "begin");
    char sql[256];
    snprintf(sql, sizeof sql,
             "select 1 from a2_events where session_id = '%s' and idx = 1 "
             "for update",
             f->session);
    a2_test_exec(other, sql);
    assert_int_equal(
            append1(f, f->session, "x", NULL, "held-id", NULL, 0, &out),
            A2_ESTORE_UNAVAILABLE);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "held"));
    a2_test_exec(other, "rollback");
    PQfinish(other);
    OK(append1(f, f->session, "x", NULL, "held-id", NULL, 0, &out));
    assert_int_equal(out.items[0].index, 3);
    a2_events_free(&out);
}

static void test_reclaim(void **state)
{
    fx *f = *state;
    a2_target tg[2] = {{.consumer = "c1"}, {.consumer = "c2", .lane = "L"}};
    a2_append_event ev[300];
    for (size_t i = 0; i < 300; i++)
        ev[i] = (a2_append_event){.type = "x", .targets = tg, .ntargets = 2};
    a2_events out;
    append_all(f, ev, 300);
    a2_reclaim_result rr;
    OK(a2_store_reclaim(f->s, f->session, &rr)); /* nothing cleared yet */
    assert_int_equal(rr.deleted, 0);
    assert_true(rr.done);
    a2_clear_result clr;
    OK(a2_store_clear(f->s, f->session, A2_STORE_NONE, NULL, &clr));
    assert_int_equal(clr.clear_index, 301);
    OK(a2_store_append(f->s, f->session, ev, 2, NULL, &out)); /* above */
    a2_events_free(&out);
    int64_t total = 0;
    int calls = 0;
    do {
        OK(a2_store_reclaim(f->s, f->session, &rr));
        total += rr.deleted;
        calls++;
    } while (!rr.done && calls < 10);
    assert_true(rr.done);
    assert_int_equal(total, 300);
    assert_true(calls >= 2); /* batches of 256 */
    assert_int_equal(a2_test_fx_rows(f, "a2_events", "idx < 301"), 0);
    assert_int_equal(a2_test_fx_rows(f, "a2_events", NULL), 3);
    assert_int_equal(a2_test_fx_rows(f, "a2_lane_events", "idx < 301"), 0);
    assert_int_equal(a2_test_fx_rows(f, "a2_lane_events", NULL), 2);
    assert_int_equal(
            a2_test_fx_rows(f, "a2_cursors", "coalesce(head, position) < 301"),
            0);
    /* The work above the marker is intact: #302, #303 and the lane run. */
    assert_int_equal(a2_test_fx_rows(f, "a2_cursors", "head > 301"), 3);
    OK(a2_store_read(f->s, f->session, NULL, &out));
    assert_int_equal(out.count, 3);
    a2_events_free(&out);
}

/* ── pending sessions ────────────────────────────────────────────────── */

static void test_pending_sessions(void **state)
{
    fx *f = *state;
    char s1[96], s2[96], s3[96], s4[96];
    snprintf(s1, sizeof s1, "%s-a", f->session);
    snprintf(s2, sizeof s2, "%s-b", f->session);
    snprintf(s3, sizeof s3, "%s-c", f->session);
    snprintf(s4, sizeof s4, "%s-d", f->session);
    char consumer[96];
    snprintf(consumer, sizeof consumer, "pc-%s", f->session);
    a2_target tg = {.consumer = consumer};
    a2_events out;
    OK(append1(f, s1, "x", NULL, NULL, &tg, 1, &out)); /* claimable */
    a2_events_free(&out);
    OK(append1(f, s2, "x", NULL, NULL, &tg, 1, &out)); /* claimed */
    a2_events_free(&out);
    OK(append1(f, s3, "x", NULL, NULL, &tg, 1, &out)); /* retry hold */
    a2_events_free(&out);
    OK(append1(f, s4, "x", NULL, NULL, &tg, 1, &out)); /* dead */
    a2_events_free(&out);
    a2_claim_result cr;
    a2_claim_request req = claim_req("w");
    OK(a2_store_claim(f->s, s2, &req, &cr));
    a2_claim_result_free(&cr);
    OK(a2_store_claim(f->s, s3, &req, &cr));
    a2_claim_result_free(&cr);
    OK(a2_store_claim(f->s, s4, &req, &cr));
    a2_claim_result_free(&cr);
    a2_attempt_ref at = {.consumer = consumer, .index = 1, .attempt = 1};
    a2_fail_result fr;
    a2_fail_request freq = {
            .error = "x", .max_failures = 5, .retry_after_ms = 60000};
    OK(a2_store_fail(f->s, s3, &at, &freq, &fr));
    freq.max_failures = 1;
    OK(a2_store_fail(f->s, s4, &at, &freq, &fr));
    assert_int_equal(fr.outcome, A2_ATTEMPT_DEAD_LETTERED);

    const char *cons[] = {consumer, "nobody"};
    a2_sessions ss;
    OK(a2_store_pending_sessions(f->s, cons, 2, NULL, 100, &ss));
    assert_int_equal(ss.count, 2);
    assert_string_equal(ss.items[0], s1);
    assert_string_equal(ss.items[1], s2);
    a2_sessions_free(&ss);
    OK(a2_store_pending_sessions(f->s, cons, 2, NULL, 1, &ss));
    assert_int_equal(ss.count, 1);
    assert_string_equal(ss.items[0], s1);
    a2_sessions_free(&ss);
    OK(a2_store_pending_sessions(f->s, cons, 2, s1, 1, &ss));
    assert_int_equal(ss.count, 1);
    assert_string_equal(ss.items[0], s2);
    a2_sessions_free(&ss);
    OK(a2_store_pending_sessions(f->s, cons, 2, s2, 10, &ss));
    assert_int_equal(ss.count, 0);
    a2_sessions_free(&ss);
    /* Once the hold passes, s3 is claimable. */
    f->now += 60000;
    OK(a2_store_pending_sessions(f->s, cons, 1, NULL, 10, &ss));
    assert_int_equal(ss.count, 3);
    a2_sessions_free(&ss);
    /* Served by the a2_cursors_pending index, without reading a2_events.
     * On a table this small a sequential scan may cost less; the question is
     * whether the index can serve the query, so scans are priced out. With
     * no "after", a2_cursors_heads (session_id, head) has nothing to search
     * on and cannot tie with it on a range of session ids. The plans are
     * those of the statements inside a2_pending_sessions. */
    a2_test_exec(f->db, "analyze a2_cursors");
    a2_test_exec(f->db, "set enable_seqscan = off");
    char *plans = a2_test_plans(
            f->db, "select * from a2_pending_sessions(consumers => "
                   "'[\"a\",\"b\"]', max_sessions => 10, now_ms => 0)");
    bool index_used = strstr(plans, "a2_cursors_pending") != NULL;
    assert_null(strstr(plans, "a2_events"));
    if (!index_used)
        print_message("plans: %s\n", plans);
    free(plans);
    a2_test_exec(f->db, "reset enable_seqscan");
    assert_true(index_used);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_invalid_arguments, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test(test_open_unavailable),
            cmocka_unit_test(test_connection_defaults),
            cmocka_unit_test_setup_teardown(test_schema_missing, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(
                    test_statement_timeout_bounds_blocked_call, setup,
                    a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_connection_lost, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_timeout_bounds_blocked_call,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_timeout_reset, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_timeout_stopped_backend, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test(test_timeout_bounds_connect),
            cmocka_unit_test_setup_teardown(test_timeout_invalid_and_env, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_append_read, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_hostile_values_round_trip,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_replay_and_duplicates, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_injected_ids, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(
                    test_concurrent_target_claim_complete, setup,
                    a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_lane_order, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_log_cursor, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_takeover_and_supersede, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_max_failures_on_takeover,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_fail_retry_dead_letter_redrive,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_no_such_event, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_complete_with_children, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_complete_duplicate_ids, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_append_pending_probe, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_claim_through_exclude_served,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_claim_waits_for_moved_head,
                                            setup, a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_clear_supersedes_claims, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_clear_by_consumer, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_id_reuse_below_marker, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_id_reuse_held, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_reclaim, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_pending_sessions, setup,
                                            a2_test_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
