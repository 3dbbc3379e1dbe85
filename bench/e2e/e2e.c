/*
 * a2-bench-e2e: events appended -> claimed -> completed by N workers, each a
 * thread with an a2_worker_runner and an in-process handler that completes
 * at once.
 *
 *   --mode wal    each worker holds an a2_worker connection to a2-consumer
 *                 (--connect) and runs the sessions it is woken for
 *   --mode poll   each worker asks the store for the pending sessions every
 *                 --interval-ms (a2_worker_runner_pending) and runs those of
 *                 its share (sessions are split by number across workers)
 *
 * Writers append for --seconds at --rate events/s in all (0: as fast as they
 * can; session "<tag>.<s>", one
 * concurrent cursor of consumer "bench" each); the workers run until every
 * appended event is completed (bounded by --drain seconds). Prints one line:
 *   mode workers appended completed elapsed_s appended_per_s completed_per_s
 *   p50_us p99_us polls runs empty_runs
 * latencies from the append's acknowledgement to the handler (completed
 * counts the events handled; sessions are scheduled as a2-worker does, see
 * run_job); polls: pending
 * queries; runs: a2_worker_runner_run calls; empty_runs: those that claimed
 * nothing.
 */
#include "../common.h"

#include "../../common/clock.h"
#include "../../common/stat.h"
#include "a2/store.h"
#include "a2/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum mode { MODE_WAL, MODE_POLL };
static const char *const modes[] = {"wal", "poll", NULL};

static a2__bench_args cfg = {
        A2__BENCH_DEFAULTS,
        .workers = 4,
        .writers = 4,
        .drain_s = 20,
};

static int64_t *ack, *done_at;
static long maxidx;
static atomic_long appended, completed, polls, runs, empty_runs, errors;
static atomic_int writers_stop, workers_stop, go;

static int session_number(const char *s)
{
    return a2__bench_session_number(cfg.tag, cfg.sessions, s, false);
}

static void *writer(void *arg)
{
    a2_store *store = arg;
    a2_target target = {.consumer = "bench", .lane = NULL};
    a2_append_event ev = {.type = "bench.job",
                          .payload = "{\"n\":1}",
                          .targets = &target,
                          .ntargets = 1};
    char session[96];
    unsigned seed = (unsigned)((uintptr_t)arg >> 4);
    while (!atomic_load(&go))
        a2__sleep_ms(1);
    int64_t start = a2__mono_us();
    double gap_us = cfg.rate > 0 ? 1e6 * cfg.writers / cfg.rate : 0;
    for (long k = 0; !atomic_load(&writers_stop); k++) {
        if (gap_us > 0) {
            int64_t at = start + (int64_t)(gap_us * (double)k);
            a2__sleep_us(at - a2__mono_us());
        }
        if (atomic_load(&appended) >= cfg.max_events)
            break;
        int s = (int)(rand_r(&seed) % (unsigned)cfg.sessions);
        snprintf(session, sizeof session, "%s.%d", cfg.tag, s);
        a2_events out;
        int rc = a2_store_append(store, session, &ev, 1, NULL, &out);
        int64_t t = a2__mono_us();
        if (rc == 0 && out.count == 1 && out.items[0].index < maxidx) {
            ack[(size_t)s * (size_t)maxidx + (size_t)out.items[0].index] = t;
            atomic_fetch_add(&appended, 1);
        } else {
            atomic_fetch_add(&errors, 1);
        }
        a2_events_free(&out);
    }
    return NULL;
}

static int handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    (void)ctx;
    (void)reply;
    int s = session_number(head->event.session_id);
    int64_t i = head->event.index;
    if (s >= 0 && i >= 1 && i < maxidx) {
        int64_t zero = 0;
        if (__atomic_compare_exchange_n(
                    &done_at[(size_t)s * (size_t)maxidx + (size_t)i], &zero,
                    a2__mono_us(), false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            atomic_fetch_add(&completed, 1);
    }
    return 0;
}

/* A session to run, now or at `at` (epoch ms). rechecks: -1 when it came
 * from a poll; else how many times a run after a wake-up found nothing.
 * xid: the latest wake-up's commit, for the run to wait for (0: none). */
struct job {
    char *session;
    int64_t at;
    int rechecks;
    uint64_t xid;
};

struct worker_ctx {
    int id;
    a2_worker_runner *runner;
    a2_worker *conn;
    struct job *todo; /* to run this turn */
    size_t ntodo;
    struct job *later; /* to run at their time */
    size_t nlater;
};

/* Adds session to list (unless there), keeping the earliest time. */
static void add_job(struct job *list, size_t *n, const char *session,
                    int64_t at, int rechecks, uint64_t xid)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(list[i].session, session) == 0) {
            if (at < list[i].at)
                list[i].at = at;
            if (rechecks < list[i].rechecks)
                list[i].rechecks = rechecks;
            if (xid)
                list[i].xid = xid;
            return;
        }
    if (*n >= (size_t)cfg.sessions)
        return;
    list[*n].session = strdup(session);
    if (list[*n].session) {
        list[*n].at = at;
        list[*n].rechecks = rechecks;
        list[*n].xid = xid;
        (*n)++;
    }
}

/* Milliseconds until the first deferred run (capped at cap). */
static int later_timeout(const struct worker_ctx *wc, int cap)
{
    int64_t now = a2__real_ms(), t = cap;
    for (size_t i = 0; i < wc->nlater; i++)
        if (wc->later[i].at - now < t)
            t = wc->later[i].at - now;
    return t < 0 ? 0 : (int)t;
}

/*
 * Runs a session as a2-worker does: one claim round when a wake-up asked
 * for it (a2_worker_runner_run_woken), every round when polling; a busy
 * session again at the claim's retry_at. A wake-up can reach the worker
 * before its commit is visible to new snapshots: the run passes its xid and
 * the store waits for that commit; a wake-up without one that found nothing
 * to claim is looked at again after 20, 40 and 80 ms.
 */
static void run_job(struct worker_ctx *wc, const struct job *j)
{
    a2_worker_run_stats st;
    memset(&st, 0, sizeof st);
    atomic_fetch_add(&runs, 1);
    int rc = j->rechecks >= 0
                     ? a2_worker_runner_run_woken(wc->runner, j->session, false,
                                                  j->xid, &st)
                     : a2_worker_runner_run(wc->runner, j->session, false, &st);
    if (rc != 0)
        atomic_fetch_add(&errors, 1);
    if (st.claimed == 0)
        atomic_fetch_add(&empty_runs, 1);
    if (st.retry_at > 0)
        add_job(wc->later, &wc->nlater, j->session, st.retry_at, -1, 0);
    else if (st.claimed == 0 && !j->xid && j->rechecks >= 0 &&
             j->rechecks < 3)
        add_job(wc->later, &wc->nlater, j->session,
                a2__real_ms() + (20 << j->rechecks), j->rechecks + 1, 0);
}

static void run_todo(struct worker_ctx *wc)
{
    int64_t now = a2__real_ms();
    for (size_t i = 0; i < wc->nlater;) {
        if (wc->later[i].at > now) {
            i++;
            continue;
        }
        add_job(wc->todo, &wc->ntodo, wc->later[i].session, 0,
                wc->later[i].rechecks, 0);
        free(wc->later[i].session);
        wc->later[i] = wc->later[--wc->nlater];
    }
    for (size_t i = 0; i < wc->ntodo; i++) {
        run_job(wc, &wc->todo[i]);
        free(wc->todo[i].session);
    }
    wc->ntodo = 0;
}

static void on_pending(void *ctx, const char *session)
{
    struct worker_ctx *wc = ctx;
    int s = session_number(session);
    if (s >= 0 && s % cfg.workers == wc->id)
        add_job(wc->todo, &wc->ntodo, session, 0, -1, 0);
}

static void *worker_main(void *arg)
{
    struct worker_ctx *wc = arg;
    while (!atomic_load(&workers_stop)) {
        if (cfg.mode == MODE_POLL) {
            int64_t t = a2__mono_us();
            atomic_fetch_add(&polls, 1);
            if (a2_worker_runner_pending(wc->runner, on_pending, wc) < 0)
                atomic_fetch_add(&errors, 1);
            run_todo(wc);
            int64_t left =
                    (int64_t)cfg.interval_ms * 1000 - (a2__mono_us() - t);
            if (left / 1000 > later_timeout(wc, cfg.interval_ms))
                left = (int64_t)later_timeout(wc, cfg.interval_ms) * 1000;
            if (left > 0)
                a2__sleep_ms((int)(left / 1000));
            continue;
        }
        /* WAL push: coalesce the queued wake-ups by session, then run. */
        a2_worker_event ev;
        int rc = a2_worker_wait(wc->conn, &ev, later_timeout(wc, 50));
        while (rc == 1) {
            if (ev.type == A2_WORKER_EV_WAKE && ev.session)
                add_job(wc->todo, &wc->ntodo, ev.session, 0, 0, ev.xid);
            else if (ev.type == A2_WORKER_EV_RESYNC) {
                atomic_fetch_add(&polls, 1);
                if (a2_worker_runner_pending(wc->runner, on_pending, wc) < 0)
                    atomic_fetch_add(&errors, 1);
            }
            rc = a2_worker_next(wc->conn, &ev);
        }
        run_todo(wc);
    }
    return NULL;
}

static const char usage[] =
        "usage: a2-bench-e2e --db CONNINFO [--mode wal|poll]\n"
        "         [--connect unix:PATH] [--workers N] [--writers N]\n"
        "         [--sessions N] [--interval-ms MS] [--seconds S]\n"
        "         [--drain S] [--max-events N] [--tag T] [--rate R]\n";

int main(int argc, char **argv)
{
    int rc = a2__bench_parse(&cfg, argc, argv, "a2-bench-e2e", usage, modes);
    if (rc >= 0)
        return rc;
    if (!cfg.tag[0])
        snprintf(cfg.tag, sizeof cfg.tag, "e%ld-%ld", (long)getpid(),
                 (long)time(NULL));
    if (!cfg.db || cfg.workers < 1 || cfg.workers > 64 || cfg.writers < 1 ||
        cfg.writers > 64 || cfg.sessions < 1 || cfg.sessions > 10000 ||
        cfg.interval_ms < 1 || cfg.seconds <= 0 || cfg.seconds > 600 ||
        cfg.drain_s < 0 || cfg.drain_s > 600 || cfg.rate < 0 ||
        cfg.max_events < 1 || cfg.max_events > 10000000 ||
        (cfg.mode == MODE_WAL && !cfg.connect))
        return a2__bench_usage();
    maxidx = cfg.max_events + 2; /* one session may take every event */
    if (maxidx > cfg.max_events / cfg.sessions * 8 + 1024)
        maxidx = cfg.max_events / cfg.sessions * 8 + 1024;
    ack = calloc((size_t)cfg.sessions * (size_t)maxidx, sizeof *ack);
    done_at = calloc((size_t)cfg.sessions * (size_t)maxidx, sizeof *done_at);
    struct worker_ctx *wc = calloc((size_t)cfg.workers, sizeof *wc);
    pthread_t *wt = calloc((size_t)cfg.workers, sizeof *wt);
    pthread_t *pt = calloc((size_t)cfg.writers, sizeof *pt);
    a2_store **stores = calloc((size_t)cfg.writers, sizeof *stores);
    if (!ack || !done_at || !wc || !wt || !pt || !stores)
        return 1;

    a2_consumer served = {.name = "bench"};
    for (int i = 0; i < cfg.workers; i++) {
        char err[256], name[32];
        wc[i].id = i;
        wc[i].todo = calloc((size_t)cfg.sessions, sizeof *wc[i].todo);
        wc[i].later = calloc((size_t)cfg.sessions, sizeof *wc[i].later);
        a2_worker_runner_options ro = {.db = cfg.db,
                                       .consumers = &served,
                                       .nconsumers = 1,
                                       .handler = handler};
        wc[i].runner = a2_worker_runner_new(&ro, err, sizeof err);
        if (!wc[i].todo || !wc[i].later || !wc[i].runner) {
            fprintf(stderr, "a2-bench-e2e: runner: %s\n", err);
            return 1;
        }
        if (cfg.mode == MODE_WAL) {
            snprintf(name, sizeof name, "e2e-%d", i);
            wc[i].conn =
                    a2__bench_subscriber(cfg.connect, name, err, sizeof err);
            if (!wc[i].conn) {
                fprintf(stderr, "a2-bench-e2e: worker: %s\n", err);
                return 1;
            }
            if (!a2__bench_wait_connected(wc[i].conn)) {
                fprintf(stderr, "a2-bench-e2e: could not reach %s\n",
                        cfg.connect);
                return 1;
            }
        }
    }
    if (a2__bench_open_stores(cfg.db, stores, cfg.writers,
                              "a2-bench-e2e: store") != 0)
        return 1;
    for (int i = 0; i < cfg.workers; i++)
        pthread_create(&wt[i], NULL, worker_main, &wc[i]);
    for (int i = 0; i < cfg.writers; i++)
        pthread_create(&pt[i], NULL, writer, stores[i]);

    int64_t t0 = a2__mono_us();
    atomic_store(&go, 1);
    while (a2__mono_us() - t0 < (int64_t)(cfg.seconds * 1e6))
        a2__sleep_ms(10);
    atomic_store(&writers_stop, 1);
    for (int i = 0; i < cfg.writers; i++)
        pthread_join(pt[i], NULL);
    int64_t t_app = a2__mono_us();
    int64_t deadline = t_app + (int64_t)(cfg.drain_s * 1e6);
    while (atomic_load(&completed) < atomic_load(&appended) &&
           a2__mono_us() < deadline)
        a2__sleep_ms(5);
    atomic_store(&workers_stop, 1);
    for (int i = 0; i < cfg.workers; i++)
        pthread_join(wt[i], NULL);

    /* The last completion ends the run. */
    long n = 0;
    int64_t last = t0;
    size_t slots = (size_t)cfg.sessions * (size_t)maxidx;
    int64_t *lat = calloc((size_t)atomic_load(&appended) + 1, sizeof *lat);
    if (!lat)
        return 1;
    for (size_t i = 0; i < slots; i++) {
        if (!ack[i] || !done_at[i])
            continue;
        if (done_at[i] > last)
            last = done_at[i];
        if (n < atomic_load(&appended))
            lat[n++] = done_at[i] > ack[i] ? done_at[i] - ack[i] : 0;
    }
    a2__stat_sort_i64(lat, (size_t)n);
    double elapsed = (double)(last - t0) / 1e6;
    double app_s = (double)(t_app - t0) / 1e6;
    long a = atomic_load(&appended), d = atomic_load(&completed);
    printf("%s %d %ld %ld %.3f %.1f %.1f %" PRId64 " %" PRId64 " %ld %ld %ld\n",
           modes[cfg.mode], cfg.workers, a, d, elapsed, (double)a / app_s,
           elapsed > 0 ? (double)d / elapsed : 0.0,
           a2__stat_pct_i64(lat, (size_t)n, 0.50),
           a2__stat_pct_i64(lat, (size_t)n, 0.99), atomic_load(&polls),
           atomic_load(&runs), atomic_load(&empty_runs));
    if (atomic_load(&errors))
        fprintf(stderr, "a2-bench-e2e: %ld errors\n", atomic_load(&errors));

    for (int i = 0; i < cfg.writers; i++)
        a2_store_close(stores[i]);
    for (int i = 0; i < cfg.workers; i++) {
        a2_worker_runner_free(wc[i].runner);
        a2_worker_free(wc[i].conn);
        free(wc[i].todo);
        for (size_t k = 0; k < wc[i].nlater; k++)
            free(wc[i].later[k].session);
        free(wc[i].later);
    }
    free(lat);
    free(stores);
    free(pt);
    free(wt);
    free(wc);
    free(ack);
    free(done_at);
    return d == a && a > 0 ? 0 : 1;
}
