/*
 * a2-bench-commit: commits per second of N writer threads, each on its own
 * connection, for a fixed time.
 *
 *   --mode store    a2_store_append of one event targeted at a consumer
 *   --mode raw      a single-row INSERT into bench_raw (autocommit)
 *   --mode notify   like store, plus a LISTEN client draining the NOTIFYs a
 *                   trigger on a2_events sends (the trigger is the caller's)
 *   --mode floor    select bench_floor(session, payload): the least an append
 *                   on the a2 tables does (the session lock, max(idx), the
 *                   event row, one event cursor) in one server function (the
 *                   caller's), the ceiling of any append on this schema
 *
 * --subscribe unix:PATH adds a liba2worker connection to a2-consumer that
 * serves consumer "bench" and counts the wake-ups pushed to it (reported as
 * the notifications), so the consumer does the whole job of a wake-up.
 * Connections are opened one after the other before the clock starts.
 *
 * Prints one line: mode writers sessions commits seconds commits_per_s
 * [notifications]. Bounded by --seconds and by --max-commits.
 */
#include "../common.h"

#include "../../common/clock.h"
#include "a2/store.h"
#include "a2/worker.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mode { MODE_STORE, MODE_RAW, MODE_NOTIFY, MODE_FLOOR };
static const char *const modes[] = {"store", "raw", "notify", "floor", NULL};

/* Raw and floor writers run one prepared statement on a plain connection. */
#define PLAIN_MODE(m) ((m) == MODE_RAW || (m) == MODE_FLOOR)

static const char usage[] =
        "usage: a2-bench-commit --db CONNINFO [--mode store|raw|notify|floor]\n"
        "                       [--writers N] [--sessions N] [--seconds S]\n"
        "                       [--max-commits N] [--prefix P]\n"
        "                       [--subscribe unix:PATH]\n";

static a2__bench_args cfg = {
        A2__BENCH_DEFAULTS,
        .writers = 1,
        .max_commits = 5000000,
        .prefix = "b",
};

static atomic_long total_commits;
static atomic_long total_errors;
static atomic_long notifications;
static atomic_int stop_flag;

static double now_s(void)
{
    return (double)a2__mono_us() / 1e6;
}

static const a2_target target = {.consumer = "bench", .lane = NULL};
static const a2_append_event tick = {
        .type = "bench.tick",
        .payload = "{\"n\":1}",
        .targets = &target,
        .ntargets = 1,
};

struct writer_arg {
    int id;
    a2_store *store;
    PGconn *conn;
};

/* One commit to session: a2_store_append, or the prepared statement on a
 * plain connection. 0 or -1. */
static int commit_one(const struct writer_arg *wa, const char *session)
{
    if (!PLAIN_MODE(cfg.mode)) {
        a2_events out;
        int rc = a2_store_append(wa->store, session, &tick, 1, NULL, &out);
        a2_events_free(&out);
        return rc == 0 ? 0 : -1;
    }
    const char *values[2] = {session, tick.payload};
    PGresult *res = PQexecPrepared(wa->conn, "ins", 2, values, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK ||
             PQresultStatus(res) == PGRES_TUPLES_OK;
    PQclear(res);
    return ok ? 0 : -1;
}

static void *writer(void *arg)
{
    const struct writer_arg *wa = arg;
    char session[64];
    for (long i = 0; !atomic_load(&stop_flag); i++) {
        int s = (int)((wa->id + i * cfg.writers) % cfg.sessions);
        snprintf(session, sizeof session, "%s-%d", cfg.prefix, s);
        if (commit_one(wa, session) == 0) {
            if (atomic_fetch_add(&total_commits, 1) + 1 >= cfg.max_commits)
                atomic_store(&stop_flag, 1);
        } else {
            atomic_fetch_add(&total_errors, 1);
        }
    }
    return NULL;
}

/* The LISTEN client: drains notifications until told to stop. */
static void *listener(void *arg)
{
    PGconn *conn = arg;
    while (!atomic_load(&stop_flag)) {
        struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
        int rc = poll(&pfd, 1, 50);
        if (rc < 0 && errno != EINTR)
            break;
        if (!PQconsumeInput(conn))
            break;
        PGnotify *n;
        while ((n = PQnotifies(conn)) != NULL) {
            atomic_fetch_add(&notifications, 1);
            PQfreemem(n);
        }
    }
    return NULL;
}

/* The a2-consumer subscriber: counts the wake-ups pushed to it. */
static void *subscriber(void *arg)
{
    a2_worker *w = arg;
    while (!atomic_load(&stop_flag)) {
        a2_worker_event ev;
        int rc = a2_worker_wait(w, &ev, 50);
        if (rc == 1 && ev.type == A2_WORKER_EV_WAKE)
            atomic_fetch_add(&notifications, 1);
        else if (rc < 0 && rc != A2_WORKER_EINTR)
            break;
    }
    return NULL;
}

/* Opens writer i's connection: 0, or -1 with a message. */
static int open_writer(struct writer_arg *wa, int i)
{
    wa->id = i;
    if (!PLAIN_MODE(cfg.mode))
        return a2__bench_open_stores(cfg.db, &wa->store, 1,
                                     "a2-bench-commit: could not open store");
    wa->conn = PQconnectdb(cfg.db);
    if (PQstatus(wa->conn) != CONNECTION_OK) {
        fprintf(stderr, "a2-bench-commit: could not connect: %s",
                PQerrorMessage(wa->conn));
        return -1;
    }
    PGresult *res = PQprepare(wa->conn, "ins",
                              cfg.mode == MODE_RAW
                                      ? "insert into bench_raw (session_id, "
                                        "payload) values ($1, $2::jsonb)"
                                      : "select bench_floor($1, $2::jsonb)",
                              2, NULL);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "a2-bench-commit: prepare: %s",
                PQerrorMessage(wa->conn));
    PQclear(res);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    int rc = a2__bench_parse(&cfg, argc, argv, "a2-bench-commit", usage, modes);
    if (rc >= 0)
        return rc;
    if (!cfg.db || cfg.writers < 1 || cfg.writers > 256 || cfg.sessions < 1 ||
        cfg.seconds <= 0 || cfg.seconds > 600)
        return a2__bench_usage();

    PGconn *lconn = NULL;
    pthread_t lthread;
    if (cfg.mode == MODE_NOTIFY) {
        lconn = PQconnectdb(cfg.db);
        if (a2__bench_listen(lconn, "a2-bench-commit: could not listen") != 0)
            return 1;
        pthread_create(&lthread, NULL, listener, lconn);
    }

    a2_worker *sub = NULL;
    pthread_t sthread;
    if (cfg.subscribe) {
        char err[256];
        sub = a2__bench_subscriber(cfg.subscribe, "bench", err, sizeof err);
        if (!sub) {
            fprintf(stderr, "a2-bench-commit: subscribe: %s\n", err);
            return 1;
        }
        if (!a2__bench_wait_connected(sub)) {
            fprintf(stderr, "a2-bench-commit: could not reach %s\n",
                    cfg.subscribe);
            return 1;
        }
        pthread_create(&sthread, NULL, subscriber, sub);
    }

    pthread_t *th = calloc((size_t)cfg.writers, sizeof *th);
    struct writer_arg *wa = calloc((size_t)cfg.writers, sizeof *wa);
    if (!th || !wa)
        return 1;
    for (int i = 0; i < cfg.writers; i++)
        if (open_writer(&wa[i], i) != 0)
            return 1;
    double t0 = now_s();
    for (int i = 0; i < cfg.writers; i++)
        pthread_create(&th[i], NULL, writer, &wa[i]);
    while (!atomic_load(&stop_flag) && now_s() - t0 < cfg.seconds)
        a2__sleep_ms(10);
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < cfg.writers; i++)
        pthread_join(th[i], NULL);
    double elapsed = now_s() - t0;
    for (int i = 0; i < cfg.writers; i++) {
        a2_store_close(wa[i].store);
        PQfinish(wa[i].conn);
    }
    free(wa);
    free(th);
    if (sub) {
        pthread_join(sthread, NULL);
        a2_worker_free(sub);
    }
    if (lconn) {
        pthread_join(lthread, NULL);
        PQfinish(lconn);
    }
    long commits = atomic_load(&total_commits);
    printf("%s %d %d %ld %.3f %.1f %ld %ld\n", modes[cfg.mode], cfg.writers,
           cfg.sessions, commits, elapsed, (double)commits / elapsed,
           atomic_load(&notifications), atomic_load(&total_errors));
    return atomic_load(&total_errors) > 0 && commits == 0 ? 1 : 0;
}
