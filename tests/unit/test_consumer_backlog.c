/*
 * Unit tests of consumer/backlog.c (the backlog gauges kept from the
 * stream: classification, deltas, the overlap of a read and the stream,
 * clamps, the cap) and of the Prometheus helpers of consumer/metrics.c
 * (label escaping, the latency histogram).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../consumer/backlog.h"
#include "../../consumer/metrics.h"

/* ---- rows ---- */

static a2_change_text txt(const char *s)
{
    a2_change_text t = {s, s ? strlen(s) : 0};
    return t;
}

/* A cursor row of consumer in session: head (0: null), dead when failed,
 * claimed when holder is not NULL. */
static a2_cursor_row row(const char *session, const char *consumer,
                         int64_t head, int failed, const char *holder)
{
    a2_cursor_row r;
    memset(&r, 0, sizeof r);
    r.session_id = txt(session);
    r.consumer = txt(consumer);
    r.cursor_key = txt("#1");
    r.kind = txt("event");
    r.head.value = head;
    r.head.null = head == 0;
    r.failed_at.value = failed ? 1000 : 0;
    r.failed_at.null = !failed;
    r.claim_holder = txt(holder);
    r.claim_expires_at.null = holder == NULL;
    r.claim_expires_at.value = holder ? 5000 : 0;
    return r;
}

static void expect_counts(a2__backlog *bl, const char *consumer, int64_t p,
                          int64_t r, int64_t d)
{
    a2__backlog_row got;
    a2__backlog_get(bl, consumer, &got);
    if (got.pending != p || got.running != r || got.dead != d)
        fail_msg("%s: pending %" PRId64 " running %" PRId64 " dead %" PRId64
                 ", expected %" PRId64 " %" PRId64 " %" PRId64,
                 consumer, got.pending, got.running, got.dead, p, r, d);
}

/* One transaction of one change, committed as xid. */
static void one(a2__backlog *bl, const a2_cursor_row *o, const a2_cursor_row *n,
                uint64_t xid)
{
    a2__backlog_change(bl, o, 0, n, 0);
    a2__backlog_commit(bl, xid, 0x1000 + xid);
}

/* Loads rows with the snapshot text; asserts the result. */
static void load(a2__backlog *bl, const char *snapshot,
                 const a2__backlog_row *rows, size_t n, int expect)
{
    a2__backlog_read_sent(bl);
    assert_int_equal(a2__backlog_load(bl, snapshot, 0, rows, n), expect);
}

/* ---- tests ---- */

static void test_classify(void **state)
{
    (void)state;
    a2_cursor_row r = row("s", "c", 0, 0, NULL);
    assert_int_equal(a2__backlog_classify(&r, 0), 0); /* no head */
    r = row("s", "c", 5, 0, NULL);
    assert_int_equal(a2__backlog_classify(&r, 0), A2C_BACKLOG_PENDING);
    assert_int_equal(a2__backlog_classify(&r, -1), A2C_BACKLOG_PENDING);
    assert_int_equal(a2__backlog_classify(&r, 4), A2C_BACKLOG_PENDING);
    assert_int_equal(a2__backlog_classify(&r, 5), 0); /* at the marker */
    assert_int_equal(a2__backlog_classify(&r, 9), 0);
    r = row("s", "c", 5, 0, "w1");
    assert_int_equal(a2__backlog_classify(&r, 0),
                     A2C_BACKLOG_PENDING | A2C_BACKLOG_RUNNING);
    r = row("s", "c", 5, 1, NULL);
    assert_int_equal(a2__backlog_classify(&r, 0), A2C_BACKLOG_DEAD);
    assert_int_equal(a2__backlog_classify(&r, 5), 0);
    assert_int_equal(a2__backlog_classify(NULL, 0), 0);
}

/* append, claim, complete to the next head, fail to a dead letter, redrive
 * retry, delete: each moves the gauges as a count would. */
static void test_lifecycle(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    assert_non_null(bl);
    a2_cursor_row idle = row("s", "c", 0, 0, NULL);
    a2_cursor_row h1 = row("s", "c", 1, 0, NULL);
    a2_cursor_row h1c = row("s", "c", 1, 0, "w");
    a2_cursor_row h2 = row("s", "c", 2, 0, NULL);
    a2_cursor_row h2c = row("s", "c", 2, 0, "w");
    a2_cursor_row h2d = row("s", "c", 2, 1, NULL);

    one(bl, NULL, &h1, 10); /* started */
    expect_counts(bl, "c", 1, 0, 0);
    one(bl, &h1, &h1c, 11); /* claimed */
    expect_counts(bl, "c", 1, 1, 0);
    one(bl, &h1c, &h2, 12); /* completed, next head */
    expect_counts(bl, "c", 1, 0, 0);
    one(bl, &h2, &h2c, 13);
    one(bl, &h2c, &h2d, 14); /* dead-lettered */
    expect_counts(bl, "c", 0, 0, 1);
    one(bl, &h2d, &h2, 15); /* retried */
    expect_counts(bl, "c", 1, 0, 0);
    one(bl, &h2, &idle, 16); /* went idle */
    expect_counts(bl, "c", 0, 0, 0);
    one(bl, NULL, &h1, 17);
    one(bl, &h1, NULL, 18); /* deleted */
    expect_counts(bl, "c", 0, 0, 0);

    /* a change of consumer moves the count from one to the other */
    a2_cursor_row other = row("s", "d", 1, 0, NULL);
    one(bl, NULL, &h1, 19);
    one(bl, &h1, &other, 20);
    expect_counts(bl, "c", 0, 0, 0);
    expect_counts(bl, "d", 1, 0, 0);

    /* a change at or below the clear marker counts nowhere */
    a2__backlog_change(bl, &other, 1, NULL, 0);
    a2__backlog_commit(bl, 21, 0);
    expect_counts(bl, "d", 1, 0, 0);

    /* an aborted transaction leaves nothing */
    a2__backlog_change(bl, NULL, 0, &h1, 0);
    a2__backlog_abort(bl);
    expect_counts(bl, "c", 0, 0, 0);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.clamps, 0);
    assert_int_equal(st.dropped, 0);
    a2__backlog_free(bl);
}

/* The read and the stream overlap: what the read's snapshot sees is not
 * counted twice, what it misses is counted, before the answer and after. */
static void test_overlap(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    a2_cursor_row h1 = row("s1", "c", 1, 0, NULL);
    a2_cursor_row h2 = row("s2", "c", 1, 0, NULL);
    a2_cursor_row h3 = row("s3", "c", 1, 0, NULL);
    a2_cursor_row h4 = row("s4", "c", 1, 0, NULL);

    a2__backlog_read_sent(bl);
    /* applied before the answer: 100 (which the snapshot sees), 103 (which
     * it does not: in progress there) */
    one(bl, NULL, &h1, 100);
    one(bl, NULL, &h2, 103);
    expect_counts(bl, "c", 2, 0, 0);
    assert_false(a2__backlog_loaded(bl));
    /* the snapshot: xmin 101, xmax 105, 103 in progress; counts c=5
     * (100 among them) */
    a2__backlog_row rows[] = {{"c", 5, 1, 2}, {"e", 1, 0, 0}};
    assert_int_equal(a2__backlog_load(bl, "101:105:103", 0, rows, 2), 0);
    assert_true(a2__backlog_loaded(bl));
    expect_counts(bl, "c", 6, 1, 2); /* 5 read + 103 */
    expect_counts(bl, "e", 1, 0, 0);
    /* streamed after the answer: 102 and 104 the snapshot saw (below xmax,
     * not in progress), 103 again is not streamed twice, 105 and 101000
     * it did not see */
    one(bl, NULL, &h3, 102);
    one(bl, NULL, &h3, 104);
    expect_counts(bl, "c", 6, 1, 2);
    one(bl, NULL, &h4, 105);
    expect_counts(bl, "c", 7, 1, 2);
    /* a later read that sees them all: the journal empties, and a
     * consumer read as nothing and named by nothing goes */
    load(bl, "106:106:", rows, 1, 0);
    expect_counts(bl, "c", 5, 1, 2);
    a2__backlog_row e;
    assert_int_equal(a2__backlog_get(bl, "e", &e), 0);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.journal, 0);
    a2__backlog_free(bl);

    /* a 32-bit xid of the stream next to a 64-bit snapshot (epoch 1) */
    bl = a2__backlog_new();
    load(bl, "4294967396:4294967400:", rows, 1, 0);
    expect_counts(bl, "c", 5, 1, 2);
    one(bl, NULL, &h4, 99); /* 2^32 + 99: below xmin, seen */
    expect_counts(bl, "c", 5, 1, 2);
    one(bl, NULL, &h4, 200); /* 2^32 + 200: after xmax */
    expect_counts(bl, "c", 6, 1, 2);
    a2__backlog_free(bl);

    /* no xid: the commit's end against the WAL insert position */
    bl = a2__backlog_new();
    a2__backlog_read_sent(bl);
    assert_int_equal(a2__backlog_load(bl, "10:10:", 0x5000, rows, 1), 0);
    a2__backlog_change(bl, NULL, 0, &h4, 0);
    a2__backlog_commit(bl, 0, 0x4000);
    expect_counts(bl, "c", 5, 1, 2);
    a2__backlog_change(bl, NULL, 0, &h4, 0);
    a2__backlog_commit(bl, 0, 0x6000);
    expect_counts(bl, "c", 6, 1, 2);
    a2__backlog_free(bl);
}

/* A transaction the snapshot misses stays in the journal: the next read
 * that misses it too counts it again; one that sees it drops it. */
static void test_journal_kept(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    a2_cursor_row h = row("s", "c", 1, 0, NULL);
    a2__backlog_read_sent(bl);
    one(bl, NULL, &h, 50);
    a2__backlog_row none[] = {{"c", 0, 0, 0}};
    assert_int_equal(a2__backlog_load(bl, "40:60:50", 0, none, 1), 0);
    expect_counts(bl, "c", 1, 0, 0);
    load(bl, "45:60:50", none, 1, 0);
    expect_counts(bl, "c", 1, 0, 0);
    a2__backlog_row seen[] = {{"c", 1, 0, 0}};
    load(bl, "55:60:", seen, 1, 0);
    expect_counts(bl, "c", 1, 0, 0);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.journal, 0);
    assert_int_equal(st.reads, 3);
    a2__backlog_free(bl);
}

/* A tainted transaction (a clear marker moved) asks for a read, and a read
 * whose snapshot misses it is not used. */
static void test_taint(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    a2__backlog_row rows[] = {{"c", 3, 0, 0}};
    load(bl, "10:10:", rows, 1, 0);
    assert_false(a2__backlog_wants_read(bl));
    a2__backlog_taint(bl);
    a2__backlog_commit(bl, 12, 0);
    assert_true(a2__backlog_wants_read(bl));
    a2__backlog_row after[] = {{"c", 1, 0, 0}};
    load(bl, "11:13:12", after, 1, 1); /* 12 in progress: not used */
    expect_counts(bl, "c", 3, 0, 0);
    assert_true(a2__backlog_wants_read(bl));
    load(bl, "13:13:", after, 1, 0);
    expect_counts(bl, "c", 1, 0, 0);
    assert_false(a2__backlog_wants_read(bl));
    /* a taint the read's snapshot already sees is nothing to do */
    a2__backlog_taint(bl);
    a2__backlog_commit(bl, 12, 0);
    assert_false(a2__backlog_wants_read(bl));
    /* an answer without a read sent is not used */
    assert_int_equal(a2__backlog_load(bl, "13:13:", 0, after, 1), 1);
    assert_int_equal(a2__backlog_load(bl, "x", 0, after, 1), -1);
    assert_int_equal(a2__backlog_load(bl, "5:3:", 0, after, 1), -1);
    assert_int_equal(a2__backlog_load(bl, "1:3:2,", 0, after, 1), -1);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.reads_unused, 2);
    a2__backlog_free(bl);
}

/* Below zero a gauge stays at zero; the clamp is counted and asks for a
 * read. */
static void test_clamp(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    a2_cursor_row h = row("s", "c", 1, 0, "w");
    one(bl, &h, NULL, 5);
    expect_counts(bl, "c", 0, 0, 0);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.clamps, 2);
    assert_true(a2__backlog_wants_read(bl));
    a2__backlog_free(bl);
}

/* Past A2C_BACKLOG_MAX_CONSUMERS names, the others are dropped and
 * counted. */
static void test_cap(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    char name[32];
    for (int i = 0; i < A2C_BACKLOG_MAX_CONSUMERS + 5; i++) {
        snprintf(name, sizeof name, "c%d", i);
        a2_cursor_row h = row("s", name, 1, 0, NULL);
        one(bl, NULL, &h, (uint64_t)i + 1);
    }
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    assert_int_equal(st.consumers, A2C_BACKLOG_MAX_CONSUMERS);
    assert_int_equal(st.dropped, 5);
    expect_counts(bl, "c0", 1, 0, 0);
    a2__backlog_row r;
    assert_int_equal(a2__backlog_get(bl, "c10004", &r), 0);
    a2__backlog_free(bl);
}

/* The gauges as Prometheus text: sorted by name, hostile names escaped. */
static void test_render(void **state)
{
    (void)state;
    a2__backlog *bl = a2__backlog_new();
    char *buf = NULL;
    size_t len = 0, cap = 0;
    a2__backlog_render(bl, &buf, &len, &cap);
    assert_null(strstr(buf, "a2_consumer_backlog_pending{"));
    assert_non_null(strstr(buf, "a2_consumer_backlog_reads_total 0\n"));
    free(buf);
    buf = NULL;
    len = cap = 0;
    a2__backlog_row rows[] = {{"zeta", 2, 1, 0}, {"we\"ird\\na\nme", 1, 0, 3}};
    load(bl, "1:1:", rows, 2, 0);
    a2__backlog_render(bl, &buf, &len, &cap);
    assert_int_equal(len, strlen(buf));
    const char *w = strstr(
            buf,
            "a2_consumer_backlog_pending{consumer=\"we\\\"ird\\\\na\\nme\"} 1\n"
            "a2_consumer_backlog_pending{consumer=\"zeta\"} 2\n");
    assert_non_null(w);
    assert_non_null(
            strstr(buf, "a2_consumer_backlog_running{consumer=\"zeta\"} 1\n"));
    assert_non_null(strstr(buf, "a2_consumer_backlog_dead_letters{consumer="
                                "\"we\\\"ird\\\\na\\nme\"} 3\n"));
    assert_non_null(strstr(buf, "# TYPE a2_consumer_backlog_dead_letters "
                                "gauge\n"));
    /* no raw line feed inside a sample */
    for (const char *p = buf; (p = strstr(p, "{consumer=\"")) != NULL; p++) {
        const char *end = strstr(p, "\"} ");
        assert_non_null(end);
        assert_null(memchr(p, '\n', (size_t)(end - p)));
    }
    free(buf);
    a2__backlog_free(bl);
}

static void test_label_escape(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    a2__metrics_appendf(&buf, &len, &cap, "x{l=\"");
    a2__metrics_append_label(&buf, &len, &cap, "a\"b\\c\nd\te");
    a2__metrics_appendf(&buf, &len, &cap, "\"} %d", 1);
    assert_string_equal(buf, "x{l=\"a\\\"b\\\\c\\nd\te\"} 1");
    assert_int_equal(len, strlen(buf));
    /* a long one makes the buffer grow */
    char big[10000];
    memset(big, '"', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    a2__metrics_append_label(&buf, &len, &cap, big);
    assert_int_equal(len, strlen(buf));
    assert_int_equal(len, 21 + 2 * (sizeof big - 1));
    free(buf);
}

static void test_histogram(void **state)
{
    (void)state;
    a2__hist h;
    memset(&h, 0, sizeof h);
    a2__hist_observe(&h, 400);      /* 0.0005 */
    a2__hist_observe(&h, 500);      /* 0.0005: an upper bound is inclusive */
    a2__hist_observe(&h, 800);      /* 0.001 */
    a2__hist_observe(&h, -7);       /* a clock behind: 0 */
    a2__hist_observe(&h, 3000000);  /* 5 */
    a2__hist_observe(&h, 60000000); /* +Inf */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    a2__hist_render(&h, "x_seconds", "help", &buf, &len, &cap);
    assert_non_null(strstr(buf, "# TYPE x_seconds histogram\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"0.0005\"} 3\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"0.001\"} 4\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"2.5\"} 4\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"5\"} 5\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"10\"} 5\n"));
    assert_non_null(strstr(buf, "x_seconds_bucket{le=\"+Inf\"} 6\n"));
    assert_non_null(strstr(buf, "x_seconds_count 6\n"));
    assert_non_null(strstr(buf, "x_seconds_sum 63.001700\n"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_classify),
            cmocka_unit_test(test_lifecycle),
            cmocka_unit_test(test_overlap),
            cmocka_unit_test(test_journal_kept),
            cmocka_unit_test(test_taint),
            cmocka_unit_test(test_clamp),
            cmocka_unit_test(test_cap),
            cmocka_unit_test(test_render),
            cmocka_unit_test(test_label_escape),
            cmocka_unit_test(test_histogram),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
