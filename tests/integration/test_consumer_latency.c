/*
 * Measures a2-consumer on a real slot and prints the figures: wake-up
 * latency from a commit to the worker's socket (synchronous_commit on and
 * off), and the catch-up rate from a backlog against pg_recvlogical. Asserts
 * every wake-up and audit line arrives, and loose bounds (a shared machine).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "consumer_harness.h"

#define A2C_TABLES                                                             \
    "public.a2_events,public.a2_cursors,public.a2_lane_events,"                \
    "public.a2_clears,public.a2_presence"

static PGconn *db;

static int setup(void **state)
{
    *state = db = a2_test_connect_reset("truncate a2_events, a2_cursors");
    return 0;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* n inserts, one at a time; returns the sorted latencies (µs). */
static void measure(a2_test_worker *w, int base, int n, int64_t *lat)
{
    char sql[512];
    a2_test_msg m;
    for (int i = 0; i < n; i++) {
        snprintf(sql, sizeof sql,
                 "insert into a2_cursors(session_id, consumer, cursor_key, "
                 "epoch, kind, head) values ('lat', 'c', '#%d', %d, 'event', "
                 "%d)",
                 base + i, base + i, base + i);
        int64_t t0 = now_us();
        a2_test_exec(db, sql);
        if (!a2_test_worker_wait_for(w, "wake", 5000, &m))
            fail_msg("wake %d missing", base + i);
        lat[i] = now_us() - t0;
        assert_int_equal(m.head, base + i);
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp64);
}

static void test_latency_and_throughput(void **state)
{
    (void)state;
    enum { N = 200 };
    int64_t on[N], off[N];
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_latency", &w, 0);

    measure(&w, 1, N, on);
    a2_test_exec(db, "set synchronous_commit = off");
    measure(&w, 1 + N, 20, off);
    a2_test_exec(db, "set synchronous_commit = on");

    a2_test_worker_close_stop(&w, &d);

    printf("a2-consumer wake-up latency, commit to worker socket (µs):\n");
    printf("  %-26s %8s %8s %8s\n", "", "p50", "p99", "max");
    printf("  %-26s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "synchronous_commit=on", on[N / 2], on[N * 99 / 100], on[N - 1]);
    printf("  %-26s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "synchronous_commit=off", off[10], off[19], off[19]);
    /* loose bounds for a shared machine */
    assert_true(on[N / 2] < 50000);
    a2_test_consumer_cleanup(&d);
}

/*
 * Catch-up from a backlog: BACKLOG single-row transactions on a2_cursors are
 * written while the consumer is down; then a2-consumer (decode, audit with
 * fsync, wake-ups, timers) and, as the baseline, pg_recvlogical with the same
 * wal2json options writing to /dev/null read them from two slots created at
 * the same point.
 */
static void test_backlog_catch_up(void **state)
{
    (void)state;
    enum { BACKLOG = 20000 };
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tc_backlog");
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    a2_test_exec(db,
                 "select pg_drop_replication_slot(slot_name) from "
                 "pg_replication_slots where slot_name = 'tc_backlog_base'");
    a2_test_exec(db, "select pg_create_logical_replication_slot("
                     "'tc_backlog_base', 'wal2json')");
    /* the backlog, each statement its own transaction */
    a2_test_exec(db, "do $$ begin for i in 1..20000 loop "
                     "insert into a2_cursors(session_id, consumer, cursor_key, "
                     "epoch, kind, head) values ('k' || i, 'c', '#1', 1, "
                     "'event', 1); commit; end loop; end $$");
    char *end = a2_test_scalar(db, "select pg_current_wal_lsn()::text");
    int before = a2_test_count_in_file(d.audit, "\n");
    char sql[256];
    snprintf(sql, sizeof sql,
             "select count(*) from pg_replication_slots where slot_name = "
             "'tc_backlog' and confirmed_flush_lsn >= '%s'",
             end);

    /* caught up: the flush position it confirms (durable audit lines only)
     * reached the end of the backlog */
    int64_t t0 = now_us();
    a2_test_consumer_start(&d);
    while (a2_test_int(db, sql) == 0) {
        if (now_us() - t0 > 120000000)
            fail_msg("did not catch up in 120 s");
        a2_test_sleep_ms(10);
    }
    int64_t ours = now_us() - t0;
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_int_equal(a2_test_count_in_file(d.audit, "\n"), before + BACKLOG);

    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/lib/postgresql/15/bin/pg_recvlogical -d '%s' -S "
             "tc_backlog_base --start -E %s -f /dev/null -o format-version=2 "
             "-o include-xids=1 -o include-timestamp=1 -o include-lsn=1 "
             "-o include-types=0 -o add-tables=" A2C_TABLES " 2>/dev/null",
             a2_test_db(), end);
    t0 = now_us();
    int rc = system(cmd);
    int64_t base = now_us() - t0;
    assert_int_equal(rc, 0);
    a2_test_exec(db, "select pg_drop_replication_slot('tc_backlog_base')");
    free(end);
    printf("catch-up from a backlog of %d single-row transactions:\n", BACKLOG);
    printf("  %-44s %8s %10s\n", "", "seconds", "tx/s");
    printf("  %-44s %8.2f %10.0f\n",
           "a2-consumer (decode, audit+fsync, wake-ups)", ours / 1e6,
           BACKLOG / (ours / 1e6));
    printf("  %-44s %8.2f %10.0f\n", "pg_recvlogical wal2json -> /dev/null",
           base / 1e6, BACKLOG / (base / 1e6));
    a2_test_consumer_cleanup(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_latency_and_throughput, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_backlog_catch_up, setup,
                                            a2_test_consumer_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
