/*
 * a2-consumer's resource bounds, on a real slot: a 1-million-row
 * transaction, a 10 MB payload, 10 000 idle worker connections, a worker
 * that never reads, and a descriptor limit of 160. In each, the consumer's resident memory stays under the
 * bound this test states: BOUND_MIB plus PER_CONN_KIB per open worker
 * connection (four times that under ASan, whose allocator keeps quarantined
 * memory), and it keeps serving a live worker: a wake-up for that worker
 * arrives within seconds. The figures are printed.
 *
 * A2_BOUNDS_ROWS changes the size of the big transaction (default 1000000).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "consumer_harness.h"

/* The bound this test holds a2-consumer to (release build). */
#define BOUND_MIB    64
#define PER_CONN_KIB 16

/* The consumer's CPU (seconds) for routing 5000 wake-ups among 10 000
 * connections, from the commit to the live worker's next wake-up. Measured
 * on 2 busy CPUs: 0.11 to 0.13 s in release, 0.22 to 0.47 s under ASan
 * (0.25 typical); with a scan of every connection per wake-up (5000 x
 * 10 000 = 5e7 visits; server.c's cached candidates disabled) 1.50 to
 * 2.56 s in release and 1.31 to 2.65 s under ASan. The bounds are about 4
 * times the typical figure. */
#define ROUTE_CPU_RELEASE 0.6
#define ROUTE_CPU_ASAN    1.0

static PGconn *db;
static a2_test_consumer d;
static long conns; /* worker connections open at the peak */
/* Set by each test as it ends; when unset, teardown shows the consumer's
 * log. */
static int passed;

static long bound_kib(void)
{
    const char *bin = getenv("A2_BIN");
    long k = BOUND_MIB * 1024L + PER_CONN_KIB * conns;
    return bin && strstr(bin, "asan") ? 4 * k : k;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* The largest RSS seen by sample(). */
static long peak;

static void sample(void)
{
    long k = rss_kib(d.pid);
    if (k > peak)
        peak = k;
}

static void assert_bounded(const char *what)
{
    sample();
    printf("  %s: a2-consumer peak RSS %ld KiB (bound %ld KiB)\n", what, peak,
           bound_kib());
    if (peak > bound_kib())
        fail_msg("%s: a2-consumer RSS %ld KiB is over its bound of %ld KiB",
                 what, peak, bound_kib());
}

/* Sleeps up to ms in steps, sampling the consumer's RSS. */
static void sample_for(int ms)
{
    for (int t = 0; t < ms; t += 50) {
        sample();
        a2_test_sleep_ms(50);
    }
}

/* CPU seconds (user + system) the process has used. */
static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* past the command name */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                            "%lu %lu",
                     &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* When the harness (tests/run, which exports A2_TEST_TIMEOUT in seconds)
 * would kill this executable, less a margin: the long waits end before it,
 * with a message. 0: no bound known. */
static int64_t run_deadline;

/* want, or less when the harness's bound comes sooner. */
static int budget_ms(int want)
{
    if (!run_deadline)
        return want;
    int64_t left = run_deadline - a2_test_now_ms();
    if (left < 1000)
        fail_msg("out of time: the harness's bound (A2_TEST_TIMEOUT) is near");
    return left < want ? (int)left : want;
}

static int n_live;

/* A wake-up for the live worker arrives within timeout_ms of the commit;
 * returns the delay. */
static int64_t live_wake(a2_test_worker *live, int timeout_ms)
{
    char sql[512];
    n_live++;
    int64_t t0 = a2_test_now_ms();
    snprintf(sql, sizeof sql,
             "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
             "kind, head) values ('live-%d', 'live', '#1', 1, 'event', 1)",
             n_live);
    a2_test_exec(db, sql);
    char want[64];
    snprintf(want, sizeof want, "live-%d", n_live);
    a2_test_msg m;
    while (a2_test_now_ms() - t0 < timeout_ms) {
        sample();
        int rc = a2_test_worker_next(live, 100, &m);
        if (rc < 0)
            fail_msg("the consumer closed the live worker's connection");
        if (rc == 1 && strcmp(m.t, "wake") == 0 && strcmp(m.session, want) == 0)
            return a2_test_now_ms() - t0;
    }
    fail_msg("no wake-up for %s within %d ms", want, timeout_ms);
    return -1;
}

static int setup(void **state)
{
    (void)state;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 10500) {
        rl.rlim_cur = rl.rlim_max < 10500 ? rl.rlim_max : 10500;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Under ASan, a small quarantine for the consumer, so that its RSS
     * measures what it keeps rather than what ASan holds back. */
    static char asan[512];
    const char *o = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%squarantine_size_mb=8", o ? o : "",
             o && *o ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    db = a2_test_connect();
    a2_test_exec(db, "truncate a2_events, a2_cursors, a2_clears, "
                     "a2_lane_events");
    /* A log cursor: the consumer learns the log consumer "biglog" at start,
     * so every event inserted is an action for it. */
    a2_test_exec(db, "insert into a2_cursors(session_id, consumer, "
                     "cursor_key, epoch, kind, types) values ('seed', "
                     "'biglog', 'lane:log', 0, 'log', '[\"big\"]')");
    a2_test_consumer_run(&d, "bounds");
    passed = 0;
    peak = 0;
    conns = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (!passed) {
        char *log = a2_test_read_file(d.log);
        size_t n = log ? strlen(log) : 0;
        fprintf(stderr, "a2-consumer's log (end):\n%s\n",
                log ? log + (n > 3000 ? n - 3000 : 0) : "(none)");
        free(log);
    }
    a2_test_consumer_cleanup(&d);
    a2_test_kill_leftovers();
    PQfinish(db);
    return 0;
}

static void open_live(a2_test_worker *live)
{
    a2_test_msg m;
    a2_test_worker_open(live, d.sock, "live", "live", NULL);
    assert_true(a2_test_worker_wait_for(live, "welcome", 10000, &m));
}

/* One transaction of N rows: the applier drops its wake-ups past its bound
 * and asks for one resync; the memory stays bounded and the live worker is
 * served as soon as the stream is past it. */
static void test_million_row_transaction(void **state)
{
    (void)state;
    const char *env = getenv("A2_BOUNDS_ROWS");
    long rows = env ? atol(env) : 1000000;
    a2_test_worker live, logw;
    a2_test_msg m;
    open_live(&live);
    a2_test_worker_open(&logw, d.sock, "biglog", "biglog", "*");
    assert_true(a2_test_worker_wait_for(&logw, "welcome", 10000, &m));
    assert_true(a2_test_worker_wait_for(&logw, "resync", 10000, &m));
    int64_t t0 = a2_test_now_ms();
    char sql[512];
    snprintf(sql, sizeof sql,
             "insert into a2_events(session_id, idx, event_type, event_id, "
             "created_at) select 'big', g, 'big', 'e' || g, 1 from "
             "generate_series(1, %ld) g",
             rows);
    a2_test_exec(db, sql);
    int64_t t1 = a2_test_now_ms();
    int64_t wake = live_wake(&live, budget_ms(600000));
    /* The log worker: its log wake-ups were dropped for one resync. */
    int resyncs = 0, logs = 0;
    while (a2_test_worker_next(&logw, 200, &m) == 1) {
        if (strcmp(m.t, "resync") == 0)
            resyncs++;
        if (strcmp(m.t, "log") == 0)
            logs++;
    }
    printf("  %ld-row transaction: committed in %lld ms, the next wake-up "
           "%lld ms after it; log worker got %d resync(s), %d log(s)\n",
           rows, (long long)(t1 - t0), (long long)wake, resyncs, logs);
    if (rows > 100000) {
        assert_true(resyncs >= 1);
        assert_true(logs < 100000);
    }
    assert_bounded("big transaction");
    a2_test_worker_close(&logw);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

/* The consumer's memory per delayed head waiting on its timer, and the
 * bound a million of them must stay under (MiB) beyond the base one.
 * Measured (release, 1M heads in 20 commits): see DELAYED_BOUND_MIB's use. */
#define DELAYED_HEADS     1000000
#define DELAYED_BOUND_MIB 256

/* A million delayed heads spread over a day, appended in 20 commits: the
 * consumer keeps one timer each, its memory stays under a stated bound,
 * and a live worker is still served at once. After a restart the timers
 * come back from the read at start, within the same bound. */
static void test_million_delayed_heads(void **state)
{
    (void)state;
    const char *env = getenv("A2_BOUNDS_ROWS");
    long rows = env ? atol(env) : DELAYED_HEADS;
    a2_test_worker live;
    open_live(&live);
    sample();
    long before = peak;
    int64_t t0 = a2_test_now_ms();
    long per = rows / 20 > 0 ? rows / 20 : 1;
    for (long from = 0; from < rows; from += per) {
        char sql[768];
        snprintf(sql, sizeof sql,
                 "insert into a2_cursors(session_id, consumer, cursor_key, "
                 "epoch, kind, head, claim_expires_at) select 'dh-' || g, "
                 "'later', '#1', 1, 'event', 1, a2__now_ms() + 3600000 + g * "
                 "86 from generate_series(%ld, %ld) g",
                 from, from + per - 1 < rows - 1 ? from + per - 1 : rows - 1);
        a2_test_exec(db, sql);
        sample();
    }
    int64_t wake = live_wake(&live, budget_ms(600000));
    sample_for(500);
    long grown = peak - before;
    printf("  %ld delayed heads: appended in %lld ms, the next wake-up %lld "
           "ms after; consumer RSS grew %ld KiB (%ld bytes a head)\n",
           rows, (long long)(a2_test_now_ms() - t0), (long long)wake, grown,
           rows ? grown * 1024 / rows : 0);
    const char *bin = getenv("A2_BIN");
    long bound = (DELAYED_BOUND_MIB * 1024L) * (bin && strstr(bin, "asan") ? 4 : 1);
    if (grown > bound)
        fail_msg("%ld delayed heads grew the consumer by %ld KiB, over %ld KiB",
                 rows, grown, bound);
    a2_test_worker_close(&live);
    /* The restart reads them back. */
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    peak = 0;
    a2_test_consumer_start(&d);
    open_live(&live);
    wake = live_wake(&live, budget_ms(600000));
    sample_for(500);
    char want[64];
    snprintf(want, sizeof want, "ready: %ld timers", rows);
    assert_int_equal(a2_test_count_in_file(d.log, want), 1);
    printf("  after a restart: %s, peak RSS %ld KiB, next wake-up %lld ms\n",
           want, peak, (long long)wake);
    if (peak > bound + BOUND_MIB * 1024L)
        fail_msg("the restart with %ld delayed heads peaked at %ld KiB", rows,
                 peak);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

/* A 10 MB payload goes through the decoder; the consumer's memory grows by
 * about the message's size, no more, and the stream moves on. */
static void test_ten_megabyte_payload(void **state)
{
    (void)state;
    a2_test_worker live, logw;
    a2_test_msg m;
    open_live(&live);
    a2_test_worker_open(&logw, d.sock, "biglog", "biglog", "*");
    assert_true(a2_test_worker_wait_for(&logw, "welcome", 10000, &m));
    for (int i = 1; i <= 3; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "insert into a2_events(session_id, idx, event_type, "
                 "event_id, created_at, payload) values ('huge', %d, 'big', "
                 "'h%d', 1, jsonb_build_object('x', repeat('a', 10 * 1024 * "
                 "1024)))",
                 i, i);
        a2_test_exec(db, sql);
        int64_t wake = live_wake(&live, 60000);
        printf("  10 MB payload %d: the next wake-up %lld ms after it\n", i,
               (long long)wake);
    }
    /* The log worker heard of each of them. */
    int logs = 0;
    while (logs < 3 && a2_test_worker_wait_for(&logw, "log", 10000, &m))
        if (strcmp(m.session, "huge") == 0)
            logs++;
    assert_int_equal(logs, 3);
    assert_bounded("10 MB payloads");
    a2_test_worker_close(&logw);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

/* 10 000 idle workers (hello, then nothing): each is welcomed and kept; the
 * live worker is still served promptly. */
static void test_ten_thousand_idle_connections(void **state)
{
    (void)state;
    enum { N = 10000 };
    a2_test_worker live;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < N + 200) {
        printf("  skipped: RLIMIT_NOFILE is %ld, %d connections need %d\n",
               (long)rl.rlim_cur, N, N + 200);
        skip();
    }
    open_live(&live);
    int *fds = calloc(N, sizeof *fds);
    assert_non_null(fds);
    conns = N + 1;
    int64_t t0 = a2_test_now_ms();
    for (int i = 0; i < N; i++) {
        a2_test_worker w;
        char name[32];
        snprintf(name, sizeof name, "idle-%d", i);
        a2_test_worker_open(&w, d.sock, name, i % 2 ? "idle" : "quiet", NULL);
        fds[i] = w.fd;
        msgpack_unpacker_destroy(&w.up);
        if (i % 500 == 0)
            sample();
    }
    int64_t t1 = a2_test_now_ms();
    sample_for(1000);
    int64_t wake = live_wake(&live, 20000);
    /* Wake-ups for the idle consumer reach its subscribers without growing
     * the consumer past its bound. */
    double c0 = cpu_seconds(d.pid);
    a2_test_exec(db, "insert into a2_cursors(session_id, consumer, "
                     "cursor_key, epoch, kind, head) select 'i' || g, "
                     "'idle', '#1', 1, 'event', 1 from generate_series(1, "
                     "5000) g");
    /* 60 s: a hang guard, not the measure (that is the CPU below) */
    int64_t wake2 = live_wake(&live, 60000);
    double cpu = cpu_seconds(d.pid) - c0;
    /* Every idle connection is still open: its welcome is readable (polled
     * for, all within one deadline) and it is not at EOF. */
    int open_ok = 0;
    int64_t until = a2_test_now_ms() + 20000;
    for (int i = 0; i < N; i++) {
        int64_t left = until - a2_test_now_ms();
        struct pollfd p = {fds[i], POLLIN, 0};
        char b;
        if (poll(&p, 1, left > 0 ? (int)left : 0) == 1 &&
            recv(fds[i], &b, 1, MSG_DONTWAIT | MSG_PEEK) == 1)
            open_ok++;
    }
    printf("  %d idle connections opened in %lld ms, %d welcomed and open; "
           "live wake-up %lld ms, after 5000 wakes to idle workers %lld ms "
           "(consumer CPU %.2f s)\n",
           N, (long long)(t1 - t0), open_ok, (long long)wake, (long long)wake2,
           cpu);
    assert_int_equal(open_ok, N);
    /* Routing 5000 wake-ups among 10 000 connections (5000 subscribers)
     * costs the consumer a fraction of a second of CPU (ROUTE_CPU_*); a
     * busy host stretches the wall time, not the CPU. */
    const char *bin = getenv("A2_BIN");
    double limit =
            bin && strstr(bin, "asan") ? ROUTE_CPU_ASAN : ROUTE_CPU_RELEASE;
    assert_true(c0 >= 0);
    if (cpu > limit)
        fail_msg("routing 5000 wake-ups among %d connections took %.2f s of "
                 "the consumer's CPU (bound %.2f s)",
                 N, cpu, limit);
    assert_bounded("10 000 idle connections");
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(fds);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

/* A worker that never reads: its queue is dropped past the bound, the
 * consumer's memory stays bounded, the live worker is served, and once the
 * slow worker reads it finds a resync (nothing lost: claim what is
 * pending). */
static void test_worker_that_never_reads(void **state)
{
    (void)state;
    a2_test_worker live, slow;
    a2_test_msg m;
    open_live(&live);
    int fd = a2_test_connect_unix(d.sock);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    a2_test_worker_open_fd(&slow, fd, "slow", NULL, "slow", NULL);
    /* 60 000 wake-ups for the slow worker, in transactions of 5000. */
    for (int b = 0; b < 12; b++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "insert into a2_cursors(session_id, consumer, cursor_key, "
                 "epoch, kind, head) select 'slow-' || g, 'slow', '#1', 1, "
                 "'event', 1 from generate_series(%d, %d) g",
                 b * 5000 + 1, b * 5000 + 5000);
        a2_test_exec(db, sql);
        sample();
    }
    int64_t wake = live_wake(&live, 30000);
    sample_for(1000);
    /* Now it reads: wakes, then the resync that replaced what was dropped. */
    int wakes = 0, resync = 0;
    int64_t t0 = a2_test_now_ms();
    while (!resync && a2_test_now_ms() - t0 < 30000) {
        int rc = a2_test_worker_next(&slow, 1000, &m);
        if (rc < 0)
            fail_msg("the consumer dropped the slow worker");
        if (rc == 1 && strcmp(m.t, "wake") == 0)
            wakes++;
        if (rc == 1 && strcmp(m.t, "resync") == 0 && m.all_sessions &&
            strcmp(m.consumer, "slow") == 0 && wakes > 0)
            resync = 1;
    }
    printf("  worker that never reads: live wake-up %lld ms; the slow "
           "worker then read %d wakes and a resync of all sessions\n",
           (long long)wake, wakes);
    assert_true(resync);
    assert_true(wakes < 60000);
    assert_bounded("worker that never reads");
    a2_test_worker_close(&slow);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

/* Under RLIMIT_NOFILE 160 (soft and hard, as prlimit --nofile=160 sets)
 * the consumer caps its worker connections at what fits and says so; a
 * connection past the cap gets an error frame and is closed; the loop does
 * not spin; /healthz answers; the live worker is woken and the audit trail
 * and its FILE.lsn keep being written. */
static void test_descriptor_limit(void **state)
{
    (void)state;
    enum { LIMIT = 160, CAP = LIMIT - 96, EXTRA = 20 };
    static a2_test_worker ws[CAP + EXTRA];
    a2_test_worker live;
    a2_test_msg m;
    char metrics[64], want[128];
    int port = a2_test_free_port();

    assert_int_equal(a2_test_consumer_stop(&d), 0);
    snprintf(metrics, sizeof metrics, "tcp:127.0.0.1:%d", port);
    const char *extra[] = {"--metrics", metrics, NULL};
    a2_test_consumer_set_nofile(LIMIT);
    a2_test_consumer_start_args(&d, 0, extra);
    a2_test_consumer_set_nofile(0);
    snprintf(want, sizeof want,
             "worker connections capped at %d (descriptor limit %d", CAP,
             LIMIT);
    assert_int_equal(a2_test_count_in_file(d.log, want), 1);

    open_live(&live);
    int welcomed = 0, refused = 0;
    for (int i = 0; i < CAP - 1 + EXTRA; i++) {
        char name[32];
        snprintf(name, sizeof name, "w-%d", i);
        a2_test_worker_open(&ws[i], d.sock, name, "idle", NULL);
        if (a2_test_worker_next(&ws[i], 10000, &m) != 1)
            fail_msg("connection %d: no answer", i);
        if (strcmp(m.t, "welcome") == 0) {
            welcomed++;
            continue;
        }
        assert_string_equal(m.t, "error");
        snprintf(want, sizeof want, "too many connections (at most %d)", CAP);
        assert_string_equal(m.message, want);
        assert_int_equal(a2_test_worker_next(&ws[i], 10000, &m), -1);
        refused++;
    }
    assert_int_equal(welcomed, CAP - 1);
    assert_int_equal(refused, EXTRA);

    /* A burst of connections nobody reads, then quiet: a loop spinning on
     * a readable listener would burn the whole 2 s. */
    int burst[EXTRA];
    for (int i = 0; i < EXTRA; i++)
        burst[i] = a2_test_connect_unix(d.sock);
    double c0 = cpu_seconds(d.pid);
    a2_test_sleep_ms(2000);
    double used = cpu_seconds(d.pid) - c0;
    printf("  at the cap: %d refused, consumer CPU over 2 s: %.2f s\n",
           refused + EXTRA, used);
    assert_true(c0 >= 0);
    assert_true(used < 0.5);
    for (int i = 0; i < EXTRA; i++)
        close(burst[i]);

    a2_test_expect_healthz(port);
    char *body = a2_test_http_get(port, "/metrics");
    assert_non_null(body);
    snprintf(want, sizeof want, "a2_consumer_connections %d\n", CAP);
    assert_non_null(strstr(body, want));
    snprintf(want, sizeof want, "a2_consumer_connections_refused_total %d\n",
             2 * EXTRA);
    assert_non_null(strstr(body, want));
    free(body);

    char lsnpath[160];
    snprintf(lsnpath, sizeof lsnpath, "%s.lsn", d.audit);
    char *before = a2_test_read_file(lsnpath);
    live_wake(&live, 20000);
    snprintf(want, sizeof want, "live-%d", n_live);
    assert_true(a2_test_wait_in_file(d.audit, want, 1, 10000) >= 1);
    int moved = 0;
    for (int t = 0; t < 500 && !moved; t++) {
        char *now = a2_test_read_file(lsnpath);
        moved = now && (!before || strcmp(now, before) != 0);
        free(now);
        if (!moved)
            a2_test_sleep_ms(20);
    }
    free(before);
    assert_true(moved);

    for (int i = 0; i < CAP - 1 + EXTRA; i++)
        a2_test_worker_close(&ws[i]);
    a2_test_worker_close_stop(&live, &d);
    passed = 1;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *t = getenv("A2_TEST_TIMEOUT");
    if (t && atoi(t) > 0) {
        int64_t ms = atoi(t) * 1000LL;
        run_deadline =
                a2_test_now_ms() + ms - (ms / 10 < 30000 ? ms / 10 : 30000);
    }
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_ten_megabyte_payload, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_worker_that_never_reads, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_descriptor_limit, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_ten_thousand_idle_connections,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_million_delayed_heads, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_million_row_transaction, setup,
                                            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
