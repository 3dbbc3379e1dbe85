/*
 * a2-bench-wake: wake-up latency from a commit to the worker, measured in one
 * process with CLOCK_MONOTONIC.
 *
 * Writers append --batch events at a time (default 1) with liba2store
 * (session "<tag>.<s>", the tag new in every run, so sessions start at index
 * 1; one concurrent cursor of consumer "bench" each) on a Poisson schedule of
 * --rate events/s (--rate / --batch appends/s); each records the time its
 * commit was acknowledged (the append's return) for every event it carried. A
 * receiver records when the event reaches it:
 *
 *   --mode wal      N a2_worker connections (liba2worker) to a2-consumer's
 *                   socket (--connect); the wake frame's session and head
 *                   name the event
 *   --mode listen   a LISTEN client; a trigger the caller created sends
 *                   NOTIFY a2_events with payload "<session>:<idx>"
 *   --mode poll     a polling loop: every --interval-ms one query for the
 *                   events created since the last poll
 *
 * Latency is arrival - acknowledgement (0 when the wake-up came first).
 * Prints one line:
 *   mode rate achieved sent received p50 p95 p99 max queries_per_s early
 * (latencies in microseconds). Bounded by --seconds and --max-events.
 * --dump FILE writes every event: slot, commit time from the start and
 * latency (µs; -1: never arrived).
 */
#include "../common.h"

#include "../../common/clock.h"
#include "../../common/stat.h"
#include "a2/store.h"
#include "a2/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum mode { MODE_WAL, MODE_LISTEN, MODE_POLL };
static const char *const modes[] = {"wal", "listen", "poll", NULL};

static const char usage[] =
        "usage: a2-bench-wake --db CONNINFO [--mode wal|listen|poll]\n"
        "         [--connect unix:PATH] [--workers N] [--rate R]\n"
        "         [--seconds S] [--writers N] [--sessions N]\n"
        "         [--interval-ms MS] [--max-events N] [--drain S]\n"
        "         [--batch N] [--tag T] [--dump FILE]\n";

#define SEED 1 /* of the Poisson schedule */

static a2__bench_args cfg = {
        A2__BENCH_DEFAULTS, .rate = 10, .workers = 1, .batch = 1, .drain_s = 2,
};

static long nevents;   /* scheduled events */
static long ntickets;  /* scheduled appends, --batch events each */
static int64_t *sched; /* per ticket: scheduled start, µs from t0 */
static int64_t *ack;   /* per slot (session, idx): commit acknowledged */
static int64_t *arr;   /* per slot: arrival at the receiver */
static long maxidx;    /* idx capacity per session */
static atomic_long next_ticket;
static atomic_long sent;
static atomic_long received;
static atomic_long send_errors;
static atomic_long queries;
static atomic_int writers_done;
static atomic_int stop_receiver;
static atomic_int ready;
static atomic_int go; /* t0_us is set */
static int64_t t0_us;

/* "<tag>.<s>" (or "<tag>.<s>:<idx>") -> s, or -1 (another run's session). */
static int session_number(const char *s)
{
    return a2__bench_session_number(cfg.tag, cfg.sessions, s, true);
}

static void mark_arrival(int s, int64_t idx, int64_t t)
{
    if (s < 0 || idx < 1 || idx >= maxidx)
        return;
    int64_t *slot = &arr[(size_t)s * (size_t)maxidx + (size_t)idx];
    int64_t zero = 0;
    if (__atomic_compare_exchange_n(slot, &zero, t, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        atomic_fetch_add(&received, 1);
}

/* ── writers ──────────────────────────────────────────────────────────── */

static void *writer(void *arg)
{
    a2_store *store = arg;
    a2_target target = {.consumer = "bench", .lane = NULL};
    a2_append_event ev[100];
    for (int k = 0; k < cfg.batch; k++)
        ev[k] = (a2_append_event){
                .type = "bench.tick",
                .payload = "{\"n\":1}",
                .targets = &target,
                .ntargets = 1,
        };
    while (!atomic_load(&go))
        a2__sleep_us(1000);
    char session[96];
    for (;;) {
        long t = atomic_fetch_add(&next_ticket, 1);
        if (t >= ntickets)
            break;
        int64_t at = t0_us + sched[t],
                end = t0_us + (int64_t)(cfg.seconds * 1e6);
        /* Behind schedule (an overloaded machine): the cell still ends. */
        if (at > end || a2__mono_us() > end)
            break;
        a2__sleep_us(at - a2__mono_us());
        int s = (int)(t % cfg.sessions);
        snprintf(session, sizeof session, "%s.%d", cfg.tag, s);
        a2_events out;
        int rc = a2_store_append(store, session, ev, (size_t)cfg.batch, NULL,
                                 &out);
        int64_t done = a2__mono_us();
        if (rc == 0 && out.count == (size_t)cfg.batch) {
            for (size_t k = 0; k < out.count; k++) {
                if (out.items[k].index >= maxidx)
                    continue;
                ack[(size_t)s * (size_t)maxidx + (size_t)out.items[k].index] =
                        done;
                atomic_fetch_add(&sent, 1);
            }
        } else {
            atomic_fetch_add(&send_errors, 1);
        }
        a2_events_free(&out);
    }
    atomic_fetch_add(&writers_done, 1);
    return NULL;
}

/* ── receivers ────────────────────────────────────────────────────────── */

static int64_t drain_deadline(void)
{
    return a2__mono_us() + (int64_t)(cfg.drain_s * 1e6);
}

/* True once the writers finished and everything arrived or time ran out. */
static bool receiver_finished(int64_t *deadline)
{
    if (atomic_load(&stop_receiver))
        return true;
    if (atomic_load(&writers_done) < cfg.writers)
        return false;
    if (*deadline == 0)
        *deadline = drain_deadline();
    return atomic_load(&received) >= atomic_load(&sent) ||
           a2__mono_us() > *deadline;
}

static void *wal_receiver(void *arg)
{
    a2_worker **w = arg;
    struct pollfd *pfd = calloc((size_t)cfg.workers, sizeof *pfd);
    int *slot = calloc((size_t)cfg.workers, sizeof *slot);
    int64_t *due = calloc((size_t)cfg.workers, sizeof *due);
    if (!pfd || !slot || !due) {
        free(pfd);
        free(slot);
        free(due);
        atomic_store(&ready, 1);
        return NULL;
    }
    int64_t deadline = 0;
    int connected = 0;
    int64_t connect_deadline = a2__mono_us() + 20 * 1000000LL;
    while (!receiver_finished(&deadline)) {
        int n = 0, timeout = 20;
        int64_t t = a2__mono_us();
        for (int i = 0; i < cfg.workers; i++) {
            int to = a2_worker_timeout(w[i]);
            due[i] = to >= 0 ? t + (int64_t)to * 1000 : INT64_MAX;
            if (to >= 0 && to < timeout)
                timeout = to;
            int fd = a2_worker_fd(w[i]);
            slot[i] = -1;
            if (fd < 0)
                continue;
            pfd[n].fd = fd;
            pfd[n].events = a2_worker_poll_events(w[i]);
            pfd[n].revents = 0;
            slot[i] = n++;
        }
        int rc = poll(pfd, (nfds_t)n, timeout);
        if (rc < 0 && errno != EINTR)
            break;
        t = a2__mono_us();
        /* The ready ones, and those whose timer (reconnect, ping) is due. */
        for (int i = 0; i < cfg.workers; i++) {
            bool ready_fd = slot[i] >= 0 && rc > 0 && pfd[slot[i]].revents;
            if (!ready_fd && t < due[i])
                continue;
            if (a2_worker_process(w[i]) != 0)
                continue;
            a2_worker_event ev;
            while (a2_worker_next(w[i], &ev) == 1) {
                if (ev.type == A2_WORKER_EV_WAKE)
                    mark_arrival(session_number(ev.session), ev.head, t);
            }
        }
        if (!atomic_load(&ready)) {
            /* A failed attempt reports DISCONNECTED too: ask each one. */
            connected = 0;
            for (int i = 0; i < cfg.workers; i++)
                connected += a2_worker_connected(w[i]);
        }
        if (!atomic_load(&ready) && connected >= cfg.workers)
            atomic_store(&ready, 1);
        if (!atomic_load(&ready) && a2__mono_us() > connect_deadline) {
            fprintf(stderr, "a2-bench-wake: %d of %d workers connected\n",
                    connected, cfg.workers);
            for (int i = 0, shown = 0; i < cfg.workers && shown < 3; i++)
                if (!a2_worker_connected(w[i])) {
                    a2_worker_stats st;
                    a2_worker_get_stats(w[i], &st);
                    fprintf(stderr,
                            "a2-bench-wake: worker %d: %s (%lu connects, "
                            "%lu disconnects)\n",
                            i, a2_worker_last_error(w[i]),
                            (unsigned long)st.connects,
                            (unsigned long)st.disconnects);
                    shown++;
                }
            atomic_store(&ready, 1);
        }
    }
    free(pfd);
    free(slot);
    free(due);
    return NULL;
}

/* --mode listen: waits up to 20 ms for notifications and takes them; -1
 * when the connection failed. */
static int listen_once(PGconn *conn)
{
    struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
    int rc = poll(&pfd, 1, 20);
    if (rc < 0 && errno != EINTR)
        return -1;
    int64_t t = a2__mono_us();
    if (!PQconsumeInput(conn))
        return -1;
    PGnotify *n;
    while ((n = PQnotifies(conn)) != NULL) {
        const char *colon = strchr(n->extra, ':');
        if (colon)
            mark_arrival(session_number(n->extra), atoll(colon + 1), t);
        PQfreemem(n);
    }
    return 0;
}

/* --mode poll: at *next, one query for the events created since the last
 * one. */
static void poll_once(PGconn *conn, int64_t *next)
{
    a2__sleep_us(*next - a2__mono_us());
    *next += (int64_t)cfg.interval_ms * 1000;
    /* created_at is the store's clock (epoch ms); a margin covers the
     * commits still in flight when the previous poll ran. */
    char since[32];
    snprintf(since, sizeof since, "%" PRId64, a2__real_ms() - 10000);
    char like[80];
    snprintf(like, sizeof like, "%s.%%", cfg.tag);
    const char *params[2] = {since, like};
    PGresult *res = PQexecParams(conn,
                                 "select session_id, idx from a2_events "
                                 "where created_at >= $1 and session_id "
                                 "like $2",
                                 2, NULL, params, NULL, NULL, 0);
    int64_t t = a2__mono_us();
    atomic_fetch_add(&queries, 1);
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        for (int r = 0; r < PQntuples(res); r++)
            mark_arrival(session_number(PQgetvalue(res, r, 0)),
                         atoll(PQgetvalue(res, r, 1)), t);
    } else {
        fprintf(stderr, "a2-bench-wake: poll: %s", PQerrorMessage(conn));
    }
    PQclear(res);
    if (a2__mono_us() > *next)
        *next = a2__mono_us();
}

/* The receiver of --mode listen and --mode poll. */
static void *pg_receiver(void *arg)
{
    PGconn *conn = arg;
    int64_t deadline = 0;
    atomic_store(&ready, 1);
    int64_t next = a2__mono_us();
    while (!receiver_finished(&deadline)) {
        if (cfg.mode == MODE_POLL)
            poll_once(conn, &next);
        else if (listen_once(conn) != 0)
            break;
    }
    return NULL;
}

/* ── main ─────────────────────────────────────────────────────────────── */

static PGconn *connect_db(void)
{
    PGconn *conn = PQconnectdb(cfg.db);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "a2-bench-wake: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

int main(int argc, char **argv)
{
    int rc = a2__bench_parse(&cfg, argc, argv, "a2-bench-wake", usage, modes);
    if (rc >= 0)
        return rc;
    double appends = cfg.batch >= 1 ? cfg.rate / cfg.batch : cfg.rate;
    if (cfg.writers == 0)
        cfg.writers = appends <= 200 ? 1 : appends <= 2000 ? 8 : 32;
    if (!cfg.tag[0])
        snprintf(cfg.tag, sizeof cfg.tag, "b%ld-%ld", (long)getpid(),
                 (long)time(NULL));
    if (!cfg.db || cfg.rate <= 0 || cfg.rate > 100000 || cfg.seconds <= 0 ||
        cfg.seconds > 600 || cfg.writers < 1 || cfg.writers > 64 ||
        cfg.sessions < 1 || cfg.sessions > 100000 || cfg.workers < 1 ||
        cfg.workers > 5000 || cfg.interval_ms < 1 || cfg.max_events < 1 ||
        cfg.max_events > 10000000 || cfg.drain_s < 0 || cfg.drain_s > 60 ||
        cfg.batch < 1 || cfg.batch > 100 ||
        (cfg.mode == MODE_WAL && !cfg.connect))
        return a2__bench_usage();

    /* The Poisson schedule. */
    nevents = (long)(cfg.rate * cfg.seconds * 1.2) + 16;
    if (nevents > cfg.max_events)
        nevents = cfg.max_events;
    ntickets = nevents / cfg.batch + 1;
    sched = calloc((size_t)ntickets, sizeof *sched);
    maxidx = nevents / cfg.sessions + 2 * cfg.batch + 2;
    ack = calloc((size_t)cfg.sessions * (size_t)maxidx, sizeof *ack);
    arr = calloc((size_t)cfg.sessions * (size_t)maxidx, sizeof *arr);
    if (!sched || !ack || !arr)
        return 1;
    srand48(SEED);
    double t = 0;
    for (long i = 0; i < ntickets; i++) {
        t += -log(1.0 - drand48()) / appends;
        sched[i] = (int64_t)(t * 1e6);
    }

    pthread_t rthread;
    PGconn *rconn = NULL;
    a2_worker **w = NULL;
    if (cfg.mode == MODE_WAL) {
        w = calloc((size_t)cfg.workers, sizeof *w);
        if (!w)
            return 1;
        for (int i = 0; i < cfg.workers; i++) {
            char err[256], name[32];
            snprintf(name, sizeof name, "bench-%d", i);
            w[i] = a2__bench_subscriber(cfg.connect, name, err, sizeof err);
            if (!w[i]) {
                fprintf(stderr, "a2-bench-wake: worker: %s\n", err);
                return 1;
            }
        }
        pthread_create(&rthread, NULL, wal_receiver, w);
    } else {
        rconn = connect_db();
        if (!rconn)
            return 1;
        if (cfg.mode == MODE_LISTEN &&
            a2__bench_listen(rconn, "a2-bench-wake: listen") != 0)
            return 1;
        pthread_create(&rthread, NULL, pg_receiver, rconn);
    }

    /* The writers' connections, opened one after the other. */
    pthread_t *th = calloc((size_t)cfg.writers, sizeof *th);
    a2_store **stores = calloc((size_t)cfg.writers, sizeof *stores);
    if (!th || !stores)
        return 1;
    if (a2__bench_open_stores(cfg.db, stores, cfg.writers,
                              "a2-bench-wake: could not open store") != 0) {
        atomic_store(&stop_receiver, 1);
        pthread_join(rthread, NULL);
        return 1;
    }
    for (int i = 0; i < cfg.writers; i++)
        pthread_create(&th[i], NULL, writer, stores[i]);
    while (!atomic_load(&ready))
        a2__sleep_us(1000);
    t0_us = a2__mono_us() + 200000;
    atomic_store(&go, 1);
    for (int i = 0; i < cfg.writers; i++)
        pthread_join(th[i], NULL);
    double elapsed = (double)(a2__mono_us() - t0_us) / 1e6;
    pthread_join(rthread, NULL);
    int64_t q_end = a2__mono_us();

    /* Latencies of the events that were sent. */
    long ns = atomic_load(&sent), nr = 0, early = 0;
    int64_t *lat = calloc((size_t)(ns > 0 ? ns : 1), sizeof *lat);
    if (!lat)
        return 1;
    for (size_t i = 0; i < (size_t)cfg.sessions * (size_t)maxidx; i++) {
        if (!ack[i] || !arr[i])
            continue;
        int64_t d = arr[i] - ack[i];
        if (d < 0) {
            early++;
            d = 0;
        }
        if (nr < ns)
            lat[nr++] = d;
    }
    a2__stat_sort_i64(lat, (size_t)nr);
    if (cfg.dump) { /* every event: commit time from the start, latency */
        FILE *f = fopen(cfg.dump, "w");
        for (size_t i = 0; f && i < (size_t)cfg.sessions * (size_t)maxidx; i++)
            if (ack[i])
                fprintf(f, "%zu %" PRId64 " %" PRId64 "\n", i, ack[i] - t0_us,
                        arr[i] ? arr[i] - ack[i] : -1);
        if (f)
            fclose(f);
    }
#define PCT(p) a2__stat_pct_i64(lat, (size_t)nr, p)
    double qps =
            (double)atomic_load(&queries) / ((double)(q_end - t0_us) / 1e6);
    printf("%s %.0f %.1f %ld %ld %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
           " %.1f %ld\n",
           modes[cfg.mode], cfg.rate, (double)ns / elapsed, ns, nr, PCT(0.50),
           PCT(0.95), PCT(0.99), PCT(1.0), qps, early);
    if (atomic_load(&send_errors))
        fprintf(stderr, "a2-bench-wake: %ld appends failed\n",
                atomic_load(&send_errors));

    free(lat);
    free(th);
    for (int i = 0; i < cfg.writers; i++)
        a2_store_close(stores[i]);
    free(stores);
    if (w) {
        for (int i = 0; i < cfg.workers; i++)
            a2_worker_free(w[i]);
        free(w);
    }
    PQfinish(rconn);
    free(sched);
    free(ack);
    free(arr);
    return ns > 0 && nr > 0 ? 0 : 1;
}
