/*
 * Measures a2-consumer on a real slot and prints the figures: wake-up
 * latency from a commit to the worker's socket (synchronous_commit on and
 * off), and audit throughput for a burst of single-row transactions. Asserts
 * every wake-up arrives and loose upper bounds (a shared machine).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_consumer_util.h"

static PGconn *db;

static int
setup(void **state)
{
    (void)state;
    db = a2_test_connect();
    a2_test_exec(db, "truncate a2_events, a2_cursors");
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    PQfinish(db);
    return 0;
}

static int64_t
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* n inserts, one at a time; returns the sorted latencies (µs). */
static void
measure(tc_worker *w, int base, int n, int64_t *lat)
{
    char sql[512];
    tc_msg m;
    for (int i = 0; i < n; i++) {
        snprintf(sql, sizeof sql,
                 "insert into a2_cursors(session_id, consumer, cursor_key, "
                 "epoch, kind, head) values ('lat', 'c', '#%d', %d, 'event', "
                 "%d)",
                 base + i, base + i, base + i);
        int64_t t0 = now_us();
        a2_test_exec(db, sql);
        if (!tc_wait_for(w, "wake", 5000, &m))
            fail_msg("wake %d missing", base + i);
        lat[i] = now_us() - t0;
        assert_int_equal(m.head, base + i);
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp64);
}

static void
test_latency_and_throughput(void **state)
{
    (void)state;
    enum { N = 200, BURST = 5000 };
    int64_t on[N], off[N];
    tc_daemon d;
    tc_worker w;
    tc_msg m;
    tc_init(&d, "tc_latency");
    tc_start(&d);
    tc_worker_open(&w, d.sock, "w1", "c", NULL);
    assert_true(tc_wait_for(&w, "welcome", 5000, &m));

    measure(&w, 1, N, on);
    a2_test_exec(db, "set synchronous_commit = off");
    measure(&w, 1 + N, 20, off);
    a2_test_exec(db, "set synchronous_commit = on");

    /* burst: every transaction written to the audit */
    int before = tc_count_in_file(d.audit, "\n");
    int64_t t0 = now_us();
    char sql[256];
    for (int i = 0; i < BURST; i++) {
        snprintf(sql, sizeof sql,
                 "insert into a2_cursors(session_id, consumer, cursor_key, "
                 "epoch, kind, head) values ('b%d', 'c', '#1', 1, 'event', 1)",
                 i);
        a2_test_exec(db, sql);
    }
    int64_t produced = now_us() - t0;
    while (tc_count_in_file(d.audit, "\n") < before + BURST) {
        if (now_us() - t0 > 60000000)
            fail_msg("audit did not catch up in 60 s");
        tc_sleep_ms(5);
    }
    int64_t consumed = now_us() - t0;
    tc_worker_close(&w);
    assert_int_equal(tc_stop(&d), 0);

    printf("a2-consumer wake-up latency, commit to worker socket (µs):\n");
    printf("  %-26s %8s %8s %8s\n", "", "p50", "p99", "max");
    printf("  %-26s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "synchronous_commit=on", on[N / 2], on[N * 99 / 100], on[N - 1]);
    printf("  %-26s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "synchronous_commit=off", off[10], off[19], off[19]);
    printf("audit throughput: %d single-row transactions, producer %.0f tx/s, "
           "audit caught up after %.2f s (%.0f lines/s)\n",
           BURST, BURST / (produced / 1e6), consumed / 1e6,
           BURST / (consumed / 1e6));
    /* loose bounds for a shared machine */
    assert_true(on[N / 2] < 50000);
    assert_true(consumed < 60000000);
    tc_cleanup(&d);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_latency_and_throughput, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
