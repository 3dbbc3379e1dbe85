/*
 * a2-consumer's backlog gauges on a real PostgreSQL with a real slot: the
 * figures read at start, moved by the stream through the store's own
 * operations (a2_append, a2_claim, a2_complete, a2_fail, a2_redrive,
 * a2_clear), across a restart, a reconnect and writes racing the start;
 * a hostile consumer name in the labels; the commit → wake histogram.
 *
 * Every check scrapes /metrics until the gauges equal what a direct count
 * in SQL gives (the definitions of a2_backlog()), bounded in time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "consumer_harness.h"

static PGconn *db;

/* A consumer name with a quote, a backslash and a line feed. */
#define HOSTILE       "we\"ird\\\nx"
/* ... as the label value of the text format writes it. */
#define HOSTILE_LABEL "we\\\"ird\\\\\\nx"

static int setup(void **state)
{
    *state = db =
            a2_test_connect_reset("truncate a2_events, a2_cursors, a2_clears, "
                                  "a2_lane_events");
    return 0;
}

/* Runs sql with text parameters (NULL-terminated list); the first value of
 * the first row (malloc'd, NULL for none or SQL null). Fails the test when
 * the statement fails. */
static char *q(const char *sql, ...)
{
    const char *params[8];
    int n = 0;
    va_list ap;
    va_start(ap, sql);
    for (const char *p; n < 8 && (p = va_arg(ap, const char *)) != NULL;)
        params[n++] = p;
    va_end(ap);
    PGresult *res = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK &&
        PQresultStatus(res) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(db));
    char *v = NULL;
    if (PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0))
        v = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return v;
}

/* q for a statement whose value is not needed. */
#define qx(...)                                                                \
    do {                                                                       \
        free(q(__VA_ARGS__));                                                  \
    } while (0)

/* Appends one event of session for consumer; its index. */
static int64_t append(const char *session, const char *consumer)
{
    char *v = q("select a2_append($1, jsonb_build_array(jsonb_build_object("
                "'type', 'job', 'targets', jsonb_build_array("
                "jsonb_build_object('consumer', $2::text))))) "
                "-> 'events' -> 0 ->> 'index'",
                session, consumer, NULL);
    assert_non_null(v);
    int64_t idx = strtoll(v, NULL, 10);
    free(v);
    return idx;
}

/* Claims every eligible head of consumer in session; how many. */
static int claim(const char *session, const char *consumer)
{
    char *v = q("select jsonb_array_length(coalesce(a2_claim($1, 'h-' || $2, "
                "60000, null, jsonb_build_array($2::text)) -> 'heads', "
                "'[]'))",
                session, consumer, NULL);
    int n = v ? atoi(v) : 0;
    free(v);
    return n;
}

/* The attempt consumer's head idx of session runs. */
static char *attempt_of(const char *session, const char *consumer,
                        const char *idx)
{
    char *v = q("select attempt_count::text from a2_cursors where session_id "
                "= $1 and consumer = $2 and head = $3::bigint",
                session, consumer, idx, NULL);
    assert_non_null(v);
    return v;
}

static void complete(const char *session, const char *consumer, int64_t idx)
{
    char i[24];
    snprintf(i, sizeof i, "%" PRId64, idx);
    char *a = attempt_of(session, consumer, i);
    char *v = q("select a2_complete($1, $2, null, $3::bigint, $4::integer) "
                "->> 'outcome'",
                session, consumer, i, a, NULL);
    assert_string_equal(v, "completed");
    free(v);
    free(a);
}

/* Fails the running attempt: max_failures 1 dead-letters it, more holds the
 * head for retry_ms. */
static void fail_head(const char *session, const char *consumer, int64_t idx,
                      const char *max_failures, const char *retry_ms,
                      const char *outcome)
{
    char i[24];
    snprintf(i, sizeof i, "%" PRId64, idx);
    char *a = attempt_of(session, consumer, i);
    char *v = q("select a2_fail($1, $2, null, $3::bigint, $4::integer, "
                "'boom', $5::integer, $6::bigint) ->> 'outcome'",
                session, consumer, i, a, max_failures, retry_ms, NULL);
    assert_string_equal(v, outcome);
    free(v);
    free(a);
}

static void redrive(const char *session, const char *consumer, int64_t idx,
                    const char *action)
{
    char i[24];
    snprintf(i, sizeof i, "%" PRId64, idx);
    char *v = q("select a2_redrive($1, $2, $3::bigint, $4) ->> 'redriven'",
                session, consumer, i, action, NULL);
    assert_string_equal(v, "true");
    free(v);
}

/* ---- the figures ---- */

#define MAX_CONSUMERS 64

typedef struct {
    char name[1100];
    int64_t n[3]; /* pending, running, dead letters */
} figure;

typedef struct {
    figure f[MAX_CONSUMERS];
    int n;
} figures;

static figure *find(figures *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->f[i].name, name) == 0)
            return &s->f[i];
    if (s->n == MAX_CONSUMERS)
        fail_msg("more than %d consumers", MAX_CONSUMERS);
    figure *f = &s->f[s->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

/* The figures counted in SQL, with a2_backlog()'s definitions. */
static void counted(figures *s)
{
    memset(s, 0, sizeof *s);
    PGresult *res =
            PQexec(db, "select cur.consumer, "
                       "count(*) filter (where cur.failed_at is null), "
                       "count(*) filter (where cur.failed_at is null "
                       "and cur.claim_holder is not null), "
                       "count(*) filter (where cur.failed_at is not null) "
                       "from a2_cursors cur left join a2_clears clr "
                       "on clr.session_id = cur.session_id "
                       "where cur.head is not null "
                       "and cur.head > coalesce(clr.clear_index, 0) "
                       "group by cur.consumer order by 1");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    for (int i = 0; i < PQntuples(res); i++) {
        figure *f = find(s, PQgetvalue(res, i, 0));
        for (int k = 0; k < 3; k++)
            f->n[k] = strtoll(PQgetvalue(res, i, k + 1), NULL, 10);
    }
    PQclear(res);
    /* a2_backlog(), where the schema has it, gives the same */
    char *has = q("select to_regprocedure('a2_backlog(jsonb)')::text", NULL);
    if (has) {
        res = PQexec(db, "select consumer, pending, running, dead_letters "
                         "from a2_backlog() where pending > 0 or running > 0 "
                         "or dead_letters > 0 order by 1");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        if (PQntuples(res) != s->n)
            fail_msg("a2_backlog() has %d consumers, the count %d",
                     PQntuples(res), s->n);
        for (int i = 0; i < PQntuples(res); i++) {
            figure *f = find(s, PQgetvalue(res, i, 0));
            for (int k = 0; k < 3; k++)
                if (f->n[k] != strtoll(PQgetvalue(res, i, k + 1), NULL, 10))
                    fail_msg("a2_backlog() differs from the count for %s",
                             f->name);
        }
        PQclear(res);
    }
    free(has);
}

/* The value of the sample line that starts with prefix, or -1. */
static int64_t sample(const char *body, const char *prefix)
{
    for (const char *p = body; (p = strstr(p, prefix)) != NULL; p++)
        if (p == body || p[-1] == '\n')
            return strtoll(p + strlen(prefix), NULL, 10);
    return -1;
}

/* The backlog gauges of a scrape (label values unescaped). */
static void scraped(const char *body, figures *s)
{
    static const char *const names[3] = {
            "a2_consumer_backlog_pending{consumer=\"",
            "a2_consumer_backlog_running{consumer=\"",
            "a2_consumer_backlog_dead_letters{consumer=\""};
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 3; k++) {
        size_t pl = strlen(names[k]);
        for (const char *p = body; (p = strstr(p, names[k])) != NULL; p++) {
            if (p != body && p[-1] != '\n')
                continue;
            char name[1100];
            size_t n = 0;
            const char *c = p + pl;
            for (; *c && *c != '"' && *c != '\n' && n + 1 < sizeof name; c++) {
                if (*c == '\\') {
                    c++;
                    name[n++] = *c == 'n' ? '\n' : *c;
                } else {
                    name[n++] = *c;
                }
            }
            name[n] = '\0';
            if (strncmp(c, "\"} ", 3) != 0)
                fail_msg("a malformed sample: %.80s", p);
            find(s, name)->n[k] = strtoll(c + 3, NULL, 10);
        }
    }
}

static char *scrape(int port)
{
    char *body = a2_test_http_get(port, "/metrics");
    if (!body)
        fail_msg("no answer on the metrics port %d", port);
    return body;
}

/* "" when a and b agree (a consumer missing from one counts 0), else what
 * differs. */
static void differ(figures *a, figures *b, char *why, size_t len)
{
    why[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        figures *x = pass ? b : a, *y = pass ? a : b;
        for (int i = 0; i < x->n; i++) {
            figure *g = NULL;
            for (int j = 0; j < y->n; j++)
                if (strcmp(y->f[j].name, x->f[i].name) == 0)
                    g = &y->f[j];
            int64_t zero[3] = {0, 0, 0};
            const int64_t *v = g ? g->n : zero;
            if (memcmp(v, x->f[i].n, sizeof zero) != 0) {
                const int64_t *sql = pass ? v : x->f[i].n;
                const int64_t *met = pass ? x->f[i].n : v;
                snprintf(why, len,
                         "%s: counted %" PRId64 "/%" PRId64 "/%" PRId64
                         ", scraped %" PRId64 "/%" PRId64 "/%" PRId64,
                         x->f[i].name, sql[0], sql[1], sql[2], met[0], met[1],
                         met[2]);
                return;
            }
        }
    }
}

/* Scrapes until the gauges equal the SQL count (at most 20 s); returns the
 * figures scraped. */
static void wait_backlog(int port, figures *out)
{
    figures want, got;
    char why[1400] = "";
    int64_t end = a2_test_now_ms() + 20000;
    for (;;) {
        counted(&want);
        char *body = scrape(port);
        int loaded = sample(body, "a2_consumer_backlog_reads_total ") > 0;
        scraped(body, &got);
        free(body);
        if (loaded) {
            differ(&want, &got, why, sizeof why);
            if (!why[0])
                break;
        } else {
            snprintf(why, sizeof why, "no backlog read applied yet");
        }
        if (a2_test_now_ms() > end)
            fail_msg("the backlog gauges never matched the count: %s", why);
        a2_test_sleep_ms(50);
    }
    if (out)
        *out = got;
}

static int64_t metric(int port, const char *prefix)
{
    char *body = scrape(port);
    int64_t v = sample(body, prefix);
    free(body);
    return v;
}

static char metrics_arg[64];

/* Starts (again, after a stop) the consumer with its metrics on port. */
static void start_consumer(a2_test_consumer *d, int port)
{
    snprintf(metrics_arg, sizeof metrics_arg, "tcp:127.0.0.1:%d", port);
    const char *extra[] = {"--metrics", metrics_arg, NULL};
    a2_test_consumer_start_args(d, 0, extra);
}

static void start_with_metrics(a2_test_consumer *d, const char *slot, int port)
{
    a2_test_consumer_init(d, slot);
    start_consumer(d, port);
}

static int same_figures(figures *a, figures *b)
{
    char why[1400];
    differ(a, b, why, sizeof why);
    if (why[0])
        fprintf(stderr, "figures differ: %s\n", why);
    return !why[0];
}

/* ---- tests ---- */

/* Figures that exist before the consumer starts are read at start; every
 * operation after it moves the gauges to what a count says; a restart
 * gives the same figures. */
static void test_backlog_read_then_streamed(void **state)
{
    (void)state;
    /* before the consumer: running claims, a dead letter, a retry hold, a
     * cleared session, a hostile name */
    assert_int_equal(append("sA", "billing"), 1);
    assert_int_equal(append("sA", "billing"), 2);
    assert_int_equal(claim("sA", "billing"), 2);
    append("sB", "billing");
    append("sC", "billing");
    assert_int_equal(claim("sC", "billing"), 1);
    fail_head("sC", "billing", 1, "1", "0", "dead_lettered");
    append("sF", "billing");
    assert_int_equal(claim("sF", "billing"), 1);
    fail_head("sF", "billing", 1, "3", "600000", "failed");
    append("sD", "mail");
    append("sD", "mail");
    qx("select a2_clear('sD')", NULL);
    append("sD", "mail");
    append("sE", HOSTILE);
    figures want;
    counted(&want);
    assert_int_equal(find(&want, "billing")->n[0], 4); /* sA 2, sB, sF */
    assert_int_equal(find(&want, "billing")->n[1], 2);
    assert_int_equal(find(&want, "billing")->n[2], 1);
    assert_int_equal(find(&want, "mail")->n[0], 1);

    int port = a2_test_free_port();
    a2_test_consumer d;
    start_with_metrics(&d, "tc_backlog", port);
    figures got;
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[0], 4);
    assert_int_equal(find(&got, "billing")->n[2], 1);
    assert_int_equal(find(&got, HOSTILE)->n[0], 1);

    /* rows the clear of sD passed before the start change by hand: the
     * marker the read returned classifies them (they count nowhere) */
    qx("delete from a2_cursors cur using a2_clears clr where "
       "clr.session_id = 'sD' and cur.session_id = 'sD' and "
       "cur.head <= clr.clear_index",
       NULL);
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "mail")->n[0], 1);
    assert_int_equal(metric(port, "a2_consumer_backlog_clamps_total "), 0);

    /* the hostile name, escaped */
    char *body = scrape(port);
    assert_non_null(strstr(
            body, "\na2_consumer_backlog_pending{consumer=\"" HOSTILE_LABEL
                  "\"} 1\n"));
    assert_non_null(strstr(body, "# TYPE a2_consumer_backlog_running gauge\n"));
    free(body);

    /* wake-ups: the histogram counts each one written to the worker */
    a2_test_worker w;
    a2_test_worker_join(&w, d.sock, "w1", "billing", NULL, 1);
    int64_t before = metric(port, "a2_consumer_commit_to_wake_seconds_count ");
    assert_true(before >= 0);
    int64_t g1 = append("sG", "billing");
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.session, "sG");
    int64_t g2 = append("sG", "billing");
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    int64_t after = metric(port, "a2_consumer_commit_to_wake_seconds_count ");
    assert_true(after >= before + 2);
    body = scrape(port);
    assert_true(sample(body, "a2_consumer_commit_to_wake_seconds_bucket"
                             "{le=\"+Inf\"} ") == after);
    assert_true(sample(body, "a2_consumer_commit_to_wake_seconds_bucket"
                             "{le=\"10\"} ") >= 0);
    free(body);
    wait_backlog(port, NULL);

    /* claims, completions, a failure to a dead letter, redrives */
    assert_int_equal(claim("sG", "billing"), 2);
    wait_backlog(port, NULL);
    complete("sG", "billing", g1);
    wait_backlog(port, NULL);
    complete("sG", "billing", g2);
    assert_int_equal(claim("sB", "billing"), 1);
    wait_backlog(port, NULL);
    fail_head("sB", "billing", 1, "1", "0", "dead_lettered");
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[2], 2);
    redrive("sB", "billing", 1, "retry");
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[2], 1);
    redrive("sC", "billing", 1, "skip");
    append("sE", HOSTILE);
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[2], 0);
    assert_int_equal(find(&got, HOSTILE)->n[0], 2);

    /* a clear takes the session's heads, claims among them, out */
    qx("select a2_clear('sA')", NULL);
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[1], 0);
    /* work after the clear counts again */
    append("sA", "billing");
    claim("sA", "billing");
    wait_backlog(port, &got);
    assert_int_equal(find(&got, "billing")->n[1], 1);
    /* reclaim deletes what the clear superseded: nothing moves */
    for (int i = 0; i < 10; i++) {
        char *done = q("select a2_reclaim('sA') ->> 'done'", NULL);
        int finished = done && strcmp(done, "true") == 0;
        free(done);
        if (finished)
            break;
    }
    wait_backlog(port, NULL);
    assert_int_equal(metric(port, "a2_consumer_backlog_clamps_total "), 0);
    a2_test_worker_close(&w);

    /* a restart reads the same figures */
    wait_backlog(port, &got);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    start_consumer(&d, port);
    figures again;
    wait_backlog(port, &again);
    assert_true(same_figures(&got, &again));
    assert_int_equal(metric(port, "a2_consumer_backlog_reads_total "), 1);
    /* and the stream goes on from there */
    claim("sE", HOSTILE);
    wait_backlog(port, &got);
    assert_int_equal(find(&got, HOSTILE)->n[1], 2);
    assert_int_equal(metric(port, "a2_consumer_backlog_clamps_total "), 0);
    a2_test_consumer_end(&d);
}

/* In the writer's process: runs sql with text parameters, leaving what it
 * returns (a failed statement is as good as any other write here). */
static void wq(PGconn *c, const char *sql, const char *p1, const char *p2,
               const char *p3)
{
    const char *params[3] = {p1, p2, p3};
    PQclear(PQexecParams(c, sql,
                         p3   ? 3
                         : p2 ? 2
                              : 1,
                         NULL, params, NULL, NULL, 0));
}

/* Writes racing the consumer's start and its reconnects: appends, claims,
 * completions, dead letters and clears in sessions of a few consumers, for
 * ms milliseconds, from a process of its own. */
static pid_t writer(int ms)
{
    pid_t pid = fork();
    if (pid != 0) {
        a2_test_track(pid);
        return pid;
    }
    PGconn *c = PQconnectdb(a2_test_db());
    if (PQstatus(c) != CONNECTION_OK)
        _exit(2);
    int64_t end = a2_test_now_ms() + ms;
    for (int i = 0; a2_test_now_ms() < end; i++) {
        char session[32];
        const char *consumer = i % 3 == 0 ? "c0" : i % 3 == 1 ? "c1" : HOSTILE;
        snprintf(session, sizeof session, "r%d", i % 17);
        wq(c,
           "select a2_append($1, jsonb_build_array(jsonb_build_object("
           "'type', 'job', 'targets', jsonb_build_array("
           "jsonb_build_object('consumer', $2::text)))))",
           session, consumer, NULL);
        if (i % 2 == 0)
            wq(c,
               "select a2_claim($1, 'h', 60000, null, "
               "jsonb_build_array($2::text))",
               session, consumer, NULL);
        if (i % 4 == 0)
            wq(c,
               "select a2_complete(cur.session_id, cur.consumer, null, "
               "cur.head, cur.attempt_count) from a2_cursors cur "
               "where cur.session_id = $1 and cur.consumer = $2 "
               "and cur.claim_holder is not null limit 1",
               session, consumer, NULL);
        else if (i % 8 == 2)
            wq(c,
               "select a2_fail(cur.session_id, cur.consumer, null, "
               "cur.head, cur.attempt_count, 'boom', 1) from a2_cursors cur "
               "where cur.session_id = $1 and cur.consumer = $2 "
               "and cur.claim_holder is not null limit 1",
               session, consumer, NULL);
        if (i % 50 == 49)
            wq(c, "select a2_clear($1)", session, NULL, NULL);
    }
    PQfinish(c);
    _exit(0);
}

static void wait_writer(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    a2_test_untrack(pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_backlog_writes_race_start_and_reconnect(void **state)
{
    (void)state;
    int port = a2_test_free_port();
    a2_test_consumer d;
    a2_test_consumer_init(&d, "tc_backlog_race");
    /* idle runs that every read scans: a read that takes a while, while
     * the stream applies the writes its snapshot misses */
    a2_test_exec(db,
                 "insert into a2_cursors (session_id, consumer, "
                 "cursor_key, epoch, kind, head) select 'pad' || (i % 1000), "
                 "'idle', '#' || i, i, 'event', null "
                 "from generate_series(1, 300000) i");
    a2_test_exec(db, "analyze a2_cursors");
    pid_t pid = writer(3000);
    a2_test_sleep_ms(300);
    start_consumer(&d, port);
    wait_writer(pid);
    wait_backlog(port, NULL);

    /* the stream is cut while writes go on: reconnected, read again */
    int64_t reads = metric(port, "a2_consumer_backlog_reads_total ");
    pid = writer(2000);
    a2_test_sleep_ms(300);
    char sql[256];
    snprintf(sql, sizeof sql,
             "select count(pg_terminate_backend(active_pid)) from "
             "pg_replication_slots where slot_name = '%s' and active_pid is "
             "not null",
             d.slot);
    assert_int_equal(a2_test_int(db, sql), 1);
    wait_writer(pid);
    wait_backlog(port, NULL);
    assert_true(metric(port, "a2_consumer_backlog_reads_total ") > reads);

    /* a restart in the middle of the writes */
    pid = writer(2000);
    a2_test_sleep_ms(300);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    a2_test_sleep_ms(300);
    start_consumer(&d, port);
    wait_writer(pid);
    wait_backlog(port, NULL);
    assert_int_equal(metric(port, "a2_consumer_backlog_clamps_total "), 0);
    assert_int_equal(metric(port, "a2_consumer_backlog_dropped_total "), 0);
    a2_test_consumer_end(&d);
}

/* A consumer far behind: the read at its start sees what the stream then
 * takes a while to catch up with, and counts it once. */
static void test_backlog_catch_up(void **state)
{
    (void)state;
    int port = a2_test_free_port();
    a2_test_consumer d;
    start_with_metrics(&d, "tc_backlog_behind", port);
    append("s0", "c0");
    wait_backlog(port, NULL);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    /* a backlog of WAL: thousands of transactions for the stream */
    a2_test_exec(db, "do $$ begin for i in 1..40 loop "
                     "perform a2_append('s' || (i % 7), "
                     "jsonb_build_array(jsonb_build_object('type', 'job', "
                     "'targets', jsonb_build_array(jsonb_build_object("
                     "'consumer', 'c' || (i % 3)))))); end loop; end $$");
    for (int i = 0; i < 3000; i++) {
        char session[16];
        snprintf(session, sizeof session, "b%d", i % 13);
        append(session, i % 2 ? "c0" : "c1");
        if (i % 5 == 0)
            claim(session, "c1");
    }
    start_consumer(&d, port);
    wait_backlog(port, NULL);
    assert_int_equal(metric(port, "a2_consumer_backlog_clamps_total "), 0);
    a2_test_consumer_end(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_backlog_read_then_streamed,
                                            setup, a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(
                    test_backlog_writes_race_start_and_reconnect, setup,
                    a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_backlog_catch_up, setup,
                                            a2_test_consumer_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
