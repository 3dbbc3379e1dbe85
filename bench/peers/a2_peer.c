/*
 * a2-bench-peers: the a2 side of bench/peers (a2 against Graphile Worker and
 * pg-boss). Four modes, each one process (--log 1 in any: the jobs target
 * no consumer and the worker is a log consumer of their type):
 *
 *   produce --db C --rate R --seconds S --max N --producers P --sessions K
 *           --out FILE
 *       P threads, each with its own warmed store connection, append one
 *       event ({"seq":N}, consumer "bench", a concurrent cursor) per call
 *       to session "s<N % K>" at R events/s in all (0: as fast as they
 *       can), for S seconds or N events. FILE gets "seq ack_ns" per
 *       acknowledged append (CLOCK_MONOTONIC). Prints "produced N errors E
 *       elapsed_s T per_s X"; the connections close a second after the
 *       last append (PRODUCE_HOLD_MS).
 *
 *   bulk --db C --count N --sessions K [--lane 1]
 *       appends N events (seq 0..N-1, session s<seq % K>) with one append
 *       per session (with --lane 1, to the consumer's lane "q" of each
 *       session: K FIFOs) (with --log, naming the log consumer, whose cursors the
 *       appends start, as an application that names its log consumers
 *       does: the worker's sweep finds them). Prints "bulk N elapsed_s T".
 *
 *   delay --db C --count N --sessions K --t0-ms T --spread-ms S --out FILE
 *       as bulk, seq i not before T + floor(i * S / N) epoch ms
 *       (CLOCK_REALTIME, the store's clock). FILE gets "seq due_ms". Prints
 *       "delayed N elapsed_s T late_s L" (L: how far past T the last
 *       append was acknowledged; negative: before the first was due).
 *
 *   work --db C --connect ADDR --slots M --out FILE
 *        [--expect N | --expect-file F] [--drain S] [--seconds S]
 *        [--max-seconds S] [--until-ms T] [--clock realtime]
 *       a worker as a C user writes one (<a2/worker.h>): an a2_worker
 *       connection to a2-consumer whose events feed an a2_worker_pool of M
 *       slots, and a no-op handler that records its start by the
 *       payload's seq. Prints "ready" once connected; ends when N handlers
 *       started (--expect, or the count written to F by the producer; "N T"
 *       there also sets --until-ms T), S seconds after the count is known
 *       (--drain; not with --until-ms), at epoch ms T (--until-ms), after
 *       an idle --seconds, or at --max-seconds. FILE gets "seq start_ns"
 *       per handler run (CLOCK_MONOTONIC, or CLOCK_REALTIME). Prints the
 *       pool's stats (a2_worker_pool_stats; empty_woken: woken runs that
 *       claimed nothing; timer_runs: runs of the pool's own timers), the
 *       wake-ups and the all-session resyncs received. --wakes W (with
 *       the producer's --sessions K): W gets "seq ns" per event from the
 *       first wake-up that named its head (session s<seq % K>, head
 *       seq / K + 1). --hops H (a2-consumer with --trace-wakes;
 *       --sessions K): H gets "seq commit sent read push woken pick start"
 *       per handler run, µs since the Unix epoch: the first wake-up's trace
 *       (A2_WIRE_TRACE_*), its read here, the start of the slot's run
 *       (a2_worker_pool_options.run_start), the handler's start.
 */
#include "../../common/clock.h"
#include "../common.h"
#include "a2/store.h"
#include "a2/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CONSUMER      "bench"
#define EVENT_TYPE    "bench.job"
#define MAX_SESSIONS  1024
#define MAX_SLOTS     64
#define MAX_PRODUCERS 64
#define MAX_JOBS      1000000
/* produce: how long the connections are kept after the last job */
#define PRODUCE_HOLD_MS 1000

static struct {
    const char *db, *connect, *out, *expect_file, *wakes, *hops;
    double rate, seconds, drain, max_seconds;
    int64_t t0_ms, spread_ms, until_ms;
    long max, expect;
    int producers, sessions, slots;
    int realtime;
    int log; /* --log 1: jobs target no consumer, a log consumer runs them */
    int lane; /* bulk --lane 1: jobs target the consumer's lane "q" */
} cfg = {
        .seconds = 0,
        .drain = 5,
        .max_seconds = 120,
        .max = 10000,
        .expect = -1,
        .producers = 1,
        .sessions = 64,
        .slots = 4,
};

/* Writes "seq ns" for every non-zero entry of at[0..n). */
static int write_times(const char *path, const int64_t *at, long n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "a2-bench-peers: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (long i = 0; i < n; i++)
        if (at[i])
            fprintf(f, "%ld %" PRId64 "\n", i, at[i]);
    if (fclose(f) != 0) {
        fprintf(stderr, "a2-bench-peers: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void session_name(char *buf, size_t len, long seq)
{
    snprintf(buf, len, "s%ld", seq % cfg.sessions);
}

/* ── produce ──────────────────────────────────────────────────────────── */

static int64_t *acks;
static atomic_long next_seq, produced, produce_errors;
static int64_t produce_t0;

/* --log: the log consumer's spec (the job type, from the log's start). */
static const char *const log_types[] = {EVENT_TYPE};
static const a2_log_spec log_spec = {
        .lane = "bench", .types = log_types, .ntypes = 1, .backfill = true};

static void *producer_main(void *arg)
{
    a2_store *st = arg;
    a2_target target = {.consumer = CONSUMER, .lane = NULL};
    int64_t end = produce_t0 + (int64_t)(cfg.seconds * 1e9);
    char session[32], payload[48];
    for (;;) {
        long seq = atomic_fetch_add(&next_seq, 1);
        if (seq >= cfg.max)
            break;
        if (cfg.rate > 0)
            a2__sleep_us((produce_t0 + (int64_t)((double)seq * 1e9 / cfg.rate) -
                          a2__mono_ns()) /
                         1000);
        if (a2__mono_ns() >= end)
            break;
        session_name(session, sizeof session, seq);
        snprintf(payload, sizeof payload, "{\"seq\":%ld}", seq);
        a2_append_event ev = {.type = EVENT_TYPE,
                              .payload = payload,
                              .targets = cfg.log ? NULL : &target,
                              .ntargets = cfg.log ? 0 : 1};
        a2_events out = {0};
        if (a2_store_append(st, session, &ev, 1, NULL, &out) == 0) {
            acks[seq] = a2__mono_ns();
            atomic_fetch_add(&produced, 1);
        } else {
            if (atomic_fetch_add(&produce_errors, 1) == 0)
                fprintf(stderr, "a2-bench-peers: append: %s\n",
                        a2_store_last_error(st)->message);
        }
        a2_events_free(&out);
    }
    return NULL;
}

static int run_produce(void)
{
    a2_store *stores[MAX_PRODUCERS];
    pthread_t th[MAX_PRODUCERS];
    acks = calloc((size_t)cfg.max, sizeof *acks);
    if (!acks)
        return 1;
    if (a2__bench_open_stores(cfg.db, stores, cfg.producers,
                              "a2-bench-peers: store") != 0)
        return 1;
    /* As an application warms its pooled connections: the first append of
     * each is not planned while the clock runs. */
    for (int i = 0; i < cfg.producers; i++)
        if (a2_store_warm(stores[i]) != 0) {
            fprintf(stderr, "a2-bench-peers: warm: %s\n",
                    a2_store_last_error(stores[i])->message);
            return 1;
        }
    produce_t0 = a2__mono_ns();
    for (int i = 0; i < cfg.producers; i++)
        if (pthread_create(&th[i], NULL, producer_main, stores[i]) != 0) {
            fprintf(stderr, "a2-bench-peers: could not start a producer\n");
            return 1;
        }
    for (int i = 0; i < cfg.producers; i++)
        pthread_join(th[i], NULL);
    double elapsed = (double)(a2__mono_ns() - produce_t0) / 1e9;
    /* An application's connections outlive its last job: closing all of
     * them at once made the server slow the pickup of the last jobs (16
     * backends exiting on two cores: 50 to 110 ms on a cell's last job). */
    a2__sleep_us(PRODUCE_HOLD_MS * 1000);
    for (int i = 0; i < cfg.producers; i++)
        a2_store_close(stores[i]);
    long n = atomic_load(&produced);
    printf("produced %ld errors %ld elapsed_s %.3f per_s %.1f\n", n,
           atomic_load(&produce_errors), elapsed,
           elapsed > 0 ? (double)n / elapsed : 0.0);
    int rc = cfg.out ? write_times(cfg.out, acks, cfg.max) : 0;
    free(acks);
    return rc != 0 || n == 0;
}

/* ── bulk, delay ──────────────────────────────────────────────────────── */

static int64_t due_ms(long seq)
{
    return cfg.t0_ms + (int64_t)((double)seq * (double)cfg.spread_ms /
                                 (double)cfg.max);
}

/* Appends cfg.max events over cfg.sessions, one append per session; with
 * delayed, event seq is due at due_ms(seq) (not_before) and the due times
 * go to cfg.out. */
static int run_bulk(bool delayed)
{
    a2_store *st;
    a2_store_error err;
    if (a2_store_open(&st, cfg.db, &err) != 0) {
        fprintf(stderr, "a2-bench-peers: store: %s\n", err.message);
        return 1;
    }
    long per = cfg.max / cfg.sessions + 1;
    a2_append_event *ev = calloc((size_t)per, sizeof *ev);
    char (*payload)[32] = calloc((size_t)per, sizeof *payload);
    int64_t *due = delayed ? calloc((size_t)cfg.max, sizeof *due) : NULL;
    if (!ev || !payload || (delayed && !due))
        return 1;
    a2_target target = {.consumer = CONSUMER, .lane = cfg.lane ? "q" : NULL};
    int64_t t0 = a2__mono_ns();
    long total = 0;
    int rc = 0;
    for (int s = 0; s < cfg.sessions && rc == 0; s++) {
        size_t n = 0;
        for (long seq = s; seq < cfg.max; seq += cfg.sessions) {
            snprintf(payload[n], sizeof payload[n], "{\"seq\":%ld}", seq);
            ev[n] = (a2_append_event){.type = EVENT_TYPE,
                                      .payload = payload[n],
                                      .targets = cfg.log ? NULL : &target,
                                      .ntargets = cfg.log ? 0 : 1,
                                      .not_before = delayed ? due_ms(seq) : 0};
            n++;
        }
        if (n == 0)
            continue;
        if (n > A2_STORE_MAX_EVENTS) {
            fprintf(stderr, "a2-bench-peers: too many events per session\n");
            rc = 1;
            break;
        }
        char session[32];
        session_name(session, sizeof session, s);
        a2_events out = {0};
        a2_consumer served = {.name = CONSUMER, .log = &log_spec};
        a2_append_options ao = {.consumers = &served, .nconsumers = 1};
        if (a2_store_append(st, session, ev, n, cfg.log ? &ao : NULL, &out) !=
            0) {
            fprintf(stderr, "a2-bench-peers: append: %s\n",
                    a2_store_last_error(st)->message);
            rc = 1;
        } else {
            total += (long)out.count;
            for (long seq = s; delayed && seq < cfg.max; seq += cfg.sessions)
                due[seq] = due_ms(seq);
        }
        a2_events_free(&out);
    }
    if (delayed)
        printf("delayed %ld elapsed_s %.3f late_s %.3f\n", total,
               (double)(a2__mono_ns() - t0) / 1e9,
               (double)(a2__real_ms() - cfg.t0_ms) / 1e3);
    else
        printf("bulk %ld elapsed_s %.3f\n", total,
               (double)(a2__mono_ns() - t0) / 1e9);
    if (delayed && cfg.out && write_times(cfg.out, due, cfg.max) != 0)
        rc = 1;
    free(ev);
    free(payload);
    free(due);
    a2_store_close(st);
    return rc;
}

/* ── work ─────────────────────────────────────────────────────────────── */

static int64_t *starts;
static int64_t *wake_at; /* --wakes: first wake-up per seq (loop thread) */
/* --hops: per head position (session s, head h: s + (h - 1) * K) the
 * first wake-up's trace and its read (loop thread); per payload seq the
 * position it ran at, when its slot began the run (run_start) and the
 * handler's start (slot threads), µs of CLOCK_REALTIME */
#define HOP_N 5
static int64_t (*hop_wake)[HOP_N];
static int64_t *hop_pos, *hop_pick, *hop_start;
static _Thread_local int64_t slot_pick_us; /* the slot's last run_start */
static atomic_long started, run_errors;
static atomic_llong first_start, last_start;

/* The position of head in session s<S> (S + (head - 1) * --sessions), or -1
 * when it is none of the producer's or past --max. */
static long position(const char *session, int64_t head)
{
    if (!session || session[0] != 's' || head < 1)
        return -1;
    char *end;
    long s = strtol(session + 1, &end, 10);
    if (*end || s < 0 || s >= cfg.sessions)
        return -1;
    long seq = s + (long)(head - 1) * cfg.sessions;
    return seq < cfg.max ? seq : -1;
}

static int handler(void *ctx, int slot, const a2_head *head,
                   a2_worker_reply *reply)
{
    (void)ctx;
    (void)slot;
    (void)reply;
    int64_t t = cfg.realtime ? a2__real_ns() : a2__mono_ns();
    const char *p = head->event.payload ? strstr(head->event.payload, "seq")
                                        : NULL;
    long seq = -1;
    if (p) {
        p += 3;
        while (*p && (*p < '0' || *p > '9'))
            p++;
        seq = strtol(p, NULL, 10);
    }
    if (seq >= 0 && seq < cfg.max) {
        if (!starts[seq]) {
            starts[seq] = t;
            atomic_fetch_add(&started, 1);
            if (hop_pos) {
                hop_start[seq] = a2__real_us();
                hop_pick[seq] = slot_pick_us;
                hop_pos[seq] = position(head->event.session_id, head->event.index);
            }
        }
    }
    long long zero = 0;
    atomic_compare_exchange_strong(&first_start, &zero, (long long)t);
    atomic_store(&last_start, (long long)t);
    return 0;
}

/* --hops: when a slot took sessions from the pool's queue. */
static void run_start(void *ctx, int slot, size_t nsessions)
{
    (void)ctx;
    (void)slot;
    (void)nsessions;
    if (hop_pick)
        slot_pick_us = a2__real_us();
}

/* The pool's problems (a failed run, a failed resync): the first few. */
static void pool_log(void *ctx, const char *line)
{
    (void)ctx;
    if (atomic_fetch_add(&run_errors, 1) < 5)
        fprintf(stderr, "a2-bench-peers: %s\n", line);
}

/* The count in the expect file, -1 while there is none; a second number
 * there is an end time as --until-ms gives it. */
static long read_expect_file(void)
{
    FILE *f = fopen(cfg.expect_file, "r");
    if (!f)
        return -1;
    long n = -1;
    long long until = 0;
    int got = fscanf(f, "%ld %lld", &n, &until);
    if (got < 1)
        n = -1;
    else if (got == 2 && until > 0)
        cfg.until_ms = (int64_t)until;
    fclose(f);
    return n;
}

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    (void)sig;
    got_signal = 1;
}

/* Records when the first wake-up for an event's head arrived (--wakes), and
 * its trace (--hops). */
static void note_wake(const a2_worker_event *ev)
{
    long seq = position(ev->session,
                        ev->type == A2_WORKER_EV_LOG ? ev->idx : ev->head);
    if (seq < 0)
        return;
    if (wake_at && !wake_at[seq])
        wake_at[seq] = cfg.realtime ? a2__real_ns() : a2__mono_ns();
    if (hop_wake && !hop_wake[seq][HOP_N - 1]) {
        memcpy(hop_wake[seq], ev->trace_us, sizeof ev->trace_us);
        hop_wake[seq][HOP_N - 1] = a2__real_us();
    }
}

/* --hops: "seq commit sent read push woken pick start" for every handler
 * run whose head's first wake-up carried a trace. */
static int write_hops(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "a2-bench-peers: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (long i = 0; i < cfg.max; i++) {
        long p = hop_pos[i];
        if (!hop_start[i] || p < 0 || p >= cfg.max || !hop_wake[p][0])
            continue;
        fprintf(f, "%ld", i);
        for (int k = 0; k < HOP_N; k++)
            fprintf(f, " %" PRId64, hop_wake[p][k]);
        fprintf(f, " %" PRId64 " %" PRId64 "\n", hop_pick[i], hop_start[i]);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "a2-bench-peers: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Why the work loop should end now, or NULL. */
static const char *work_done(int ready, int64_t t0, int64_t ready_at,
                             long *expect, int64_t *expect_at)
{
    int64_t now = a2__mono_ms();
    if (got_signal)
        return "signal";
    if (now - t0 > (int64_t)(cfg.max_seconds * 1000))
        return "max-seconds";
    if (ready && cfg.seconds > 0 &&
        now - ready_at >= (int64_t)(cfg.seconds * 1000))
        return "seconds";
    if (*expect < 0 && cfg.expect_file) {
        *expect = read_expect_file();
        if (*expect >= 0)
            *expect_at = now;
    } else if (*expect >= 0 && !*expect_at) {
        *expect_at = now;
    }
    if (*expect >= 0 && atomic_load(&started) >= *expect)
        return "expected";
    if (cfg.until_ms > 0 && a2__real_ms() >= cfg.until_ms)
        return "until";
    if (*expect >= 0 && cfg.expect_file && cfg.until_ms <= 0 &&
        now - *expect_at >= (int64_t)(cfg.drain * 1000))
        return "drain";
    return NULL;
}

/* A worker as <a2/worker.h> describes one: an a2_worker connection whose
 * events feed an a2_worker_pool of --slots runners. */
static int run_work(void)
{
    starts = calloc((size_t)cfg.max, sizeof *starts);
    if (cfg.wakes)
        wake_at = calloc((size_t)cfg.max, sizeof *wake_at);
    if (cfg.hops) {
        hop_wake = calloc((size_t)cfg.max, sizeof *hop_wake);
        hop_pos = calloc((size_t)cfg.max, sizeof *hop_pos);
        hop_pick = calloc((size_t)cfg.max, sizeof *hop_pick);
        hop_start = calloc((size_t)cfg.max, sizeof *hop_start);
    }
    if (!starts || (cfg.wakes && !wake_at) ||
        (cfg.hops && (!hop_wake || !hop_pos || !hop_pick || !hop_start)))
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    a2_consumer served = {.name = CONSUMER, .log = cfg.log ? &log_spec : NULL};
    char err[512], name[64];
    snprintf(name, sizeof name, "peers-%ld", (long)getpid());
    a2_worker_pool_options po = {.db = cfg.db,
                                 .name = name,
                                 .consumers = &served,
                                 .nconsumers = 1,
                                 .slots = cfg.slots,
                                 .handler = handler,
                                 .run_start = run_start,
                                 .log = pool_log};
    a2_worker_pool *pool = a2_worker_pool_new(&po, err, sizeof err);
    if (!pool) {
        fprintf(stderr, "a2-bench-peers: pool: %s\n", err);
        return 1;
    }
    a2_worker_options wo = {.connect = cfg.connect, .name = "bench-peers"};
    a2_worker *w = a2_worker_new(&wo, err, sizeof err);
    if (!w || a2_worker_subscribe(w, CONSUMER, cfg.log,
                                  cfg.log ? log_types : NULL,
                                  cfg.log ? 1 : 0) != 0) {
        fprintf(stderr, "a2-bench-peers: worker: %s\n", w ? "subscribe" : err);
        a2_worker_pool_free(pool);
        a2_worker_free(w);
        return 1;
    }

    int ready = 0;
    int64_t t0 = a2__mono_ms(), ready_at = 0, expect_at = 0;
    long expect = cfg.expect, wakes = 0, resyncs = 0;
    const char *why;
    while (!(why = work_done(ready, t0, ready_at, &expect, &expect_at))) {
        int timeout = a2_worker_timeout(w);
        if (timeout < 0 || timeout > 100)
            timeout = 100;
        struct pollfd pfd = {.fd = a2_worker_fd(w),
                             .events = a2_worker_poll_events(w)};
        if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
            fprintf(stderr, "a2-bench-peers: poll: %s\n", strerror(errno));
            why = "error";
            break;
        }
        if (a2_worker_process(w) != 0) {
            fprintf(stderr, "a2-bench-peers: %s\n", a2_worker_last_error(w));
            why = "error";
            break;
        }
        a2_worker_event ev;
        while (a2_worker_next(w, &ev) == 1) {
            if (ev.type == A2_WORKER_EV_WAKE || ev.type == A2_WORKER_EV_LOG) {
                wakes++;
                note_wake(&ev);
            } else if (ev.type == A2_WORKER_EV_RESYNC && ev.all_sessions) {
                resyncs++;
            } else if (ev.type == A2_WORKER_EV_CONNECTED && !ready) {
                ready = 1;
                ready_at = a2__mono_ms();
                printf("ready\n");
                fflush(stdout);
            } else if (ev.type == A2_WORKER_EV_DISCONNECTED) {
                fprintf(stderr, "a2-bench-peers: disconnected: %s\n",
                        ev.message ? ev.message : "");
            }
            /* A run the pool could not queue is logged by the pool. */
            (void)a2_worker_pool_event(pool, &ev);
        }
    }

    a2_worker_pool_stop(pool);
    a2_worker_pool_stats st;
    a2_worker_pool_get_stats(pool, &st);
    long long f = atomic_load(&first_start), l = atomic_load(&last_start);
    printf("started %ld first_ns %lld last_ns %lld runs %llu woken_runs %llu "
           "empty_woken %llu empty_runs %llu claimed %llu completed %llu "
           "failed %llu errors %llu wakes %ld resyncs %ld "
           "visibility_waits %llu timer_runs %llu together_runs %llu "
           "end %s\n",
           atomic_load(&started), f, l, (unsigned long long)st.runs,
           (unsigned long long)st.woken_runs,
           (unsigned long long)st.empty_woken_runs,
           (unsigned long long)st.empty_runs, (unsigned long long)st.claimed,
           (unsigned long long)st.completed,
           (unsigned long long)(st.failed + st.dead_lettered + st.superseded),
           (unsigned long long)st.failed_runs, wakes, resyncs,
           (unsigned long long)st.visibility_waits,
           (unsigned long long)st.timer_runs,
           (unsigned long long)st.together_runs, why);
    int rc = cfg.out ? write_times(cfg.out, starts, cfg.max) : 0;
    if (cfg.wakes && write_times(cfg.wakes, wake_at, cfg.max) != 0)
        rc = 1;
    if (cfg.hops && write_hops(cfg.hops) != 0)
        rc = 1;
    free(wake_at);
    free(hop_wake);
    free(hop_pos);
    free(hop_pick);
    free(hop_start);
    a2_worker_pool_free(pool);
    a2_worker_free(w);
    free(starts);
    return rc;
}

/* ── main ─────────────────────────────────────────────────────────────── */

static int usage(void)
{
    fprintf(stderr,
            "usage: a2-bench-peers produce|bulk|delay|work --db CONNINFO "
            "[options]\n"
            "  produce: --rate R --seconds S --max N --producers P "
            "--sessions K --out FILE\n"
            "  bulk:    --count N --sessions K [--lane 1]\n"
            "  delay:   --count N --sessions K --t0-ms T --spread-ms S "
            "--out FILE\n"
            "  work:    --connect ADDR --slots M --out FILE --max N\n"
            "           [--expect N | --expect-file F] [--drain S] "
            "[--seconds S] [--max-seconds S]\n"
            "           [--until-ms T] [--clock monotonic|realtime]\n"
            "           [--wakes FILE --sessions K] [--hops FILE]\n"
            "  any: --log 1 (the jobs for a log consumer)\n");
    return 2;
}

/* Sets option k (each takes a value): 0, or -1 when k is not one or v
 * not one of its values. */
static int set_option(const char *k, const char *v)
{
    static const struct {
        const char *name;
        char kind; /* s: text, d: double, l: long, L: int64_t, i: int */
        void *at;
    } opts[] = {
            {"--db", 's', &cfg.db},
            {"--connect", 's', &cfg.connect},
            {"--out", 's', &cfg.out},
            {"--wakes", 's', &cfg.wakes},
            {"--hops", 's', &cfg.hops},
            {"--expect-file", 's', &cfg.expect_file},
            {"--rate", 'd', &cfg.rate},
            {"--seconds", 'd', &cfg.seconds},
            {"--drain", 'd', &cfg.drain},
            {"--max-seconds", 'd', &cfg.max_seconds},
            {"--max", 'l', &cfg.max},
            {"--count", 'l', &cfg.max},
            {"--t0-ms", 'L', &cfg.t0_ms},
            {"--spread-ms", 'L', &cfg.spread_ms},
            {"--until-ms", 'L', &cfg.until_ms},
            {"--expect", 'l', &cfg.expect},
            {"--producers", 'i', &cfg.producers},
            {"--sessions", 'i', &cfg.sessions},
            {"--slots", 'i', &cfg.slots},
            {"--log", 'i', &cfg.log},
            {"--lane", 'i', &cfg.lane},
    };
    if (strcmp(k, "--clock") == 0) {
        if (strcmp(v, "realtime") == 0)
            cfg.realtime = 1;
        else if (strcmp(v, "monotonic") != 0)
            return -1;
        return 0;
    }
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        if (strcmp(k, opts[i].name) != 0)
            continue;
        switch (opts[i].kind) {
        case 's':
            *(const char **)opts[i].at = v;
            break;
        case 'd':
            *(double *)opts[i].at = atof(v);
            break;
        case 'l':
            *(long *)opts[i].at = atol(v);
            break;
        case 'L':
            *(int64_t *)opts[i].at = strtoll(v, NULL, 10);
            break;
        default:
            *(int *)opts[i].at = atoi(v);
            break;
        }
        return 0;
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *mode = argv[1];
    for (int i = 2; i < argc; i += 2)
        if (i + 1 >= argc || set_option(argv[i], argv[i + 1]) != 0)
            return usage();
    if (!cfg.db || cfg.max < 1 || cfg.max > MAX_JOBS || cfg.sessions < 1 ||
        cfg.sessions > MAX_SESSIONS || cfg.producers < 1 ||
        cfg.producers > MAX_PRODUCERS || cfg.slots < 1 ||
        cfg.slots > MAX_SLOTS || cfg.rate < 0 || cfg.seconds < 0 ||
        cfg.seconds > 3600 || cfg.max_seconds <= 0 || cfg.max_seconds > 3600)
        return usage();
    if (strcmp(mode, "produce") == 0)
        return cfg.seconds > 0 ? run_produce() : usage();
    if (strcmp(mode, "bulk") == 0)
        return run_bulk(false);
    if (strcmp(mode, "delay") == 0)
        return cfg.t0_ms > 0 && cfg.spread_ms >= 0 ? run_bulk(true) : usage();
    if (strcmp(mode, "work") == 0)
        return cfg.connect ? run_work() : usage();
    return usage();
}
