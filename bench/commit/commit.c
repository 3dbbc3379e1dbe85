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
#include "a2/store.h"
#include "a2/worker.h"

#include <errno.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum mode { MODE_STORE, MODE_RAW, MODE_NOTIFY, MODE_FLOOR };

/* Raw and floor writers run one prepared statement on a plain connection. */
#define PLAIN_MODE(m) ((m) == MODE_RAW || (m) == MODE_FLOOR)

struct config {
    const char *db;
    enum mode mode;
    int writers;
    int sessions;
    double seconds;
    long max_commits;
    const char *prefix;
    const char *subscribe;
};

static struct config cfg = {
        .db = NULL,
        .mode = MODE_STORE,
        .writers = 1,
        .sessions = 64,
        .seconds = 3.0,
        .max_commits = 5000000,
        .prefix = "b",
};

static atomic_long total_commits;
static atomic_long total_errors;
static atomic_long notifications;
static atomic_int stop_flag;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct writer_arg {
    int id;
    a2_store *store;
    PGconn *conn;
};

static void *store_writer(void *arg)
{
    const struct writer_arg *wa = arg;
    int id = wa->id;
    a2_store *store = wa->store;
    a2_target target = {.consumer = "bench", .lane = NULL};
    a2_append_event ev = {
            .type = "bench.tick",
            .payload = "{\"n\":1}",
            .targets = &target,
            .ntargets = 1,
    };
    char session[64];
    for (long i = 0; !atomic_load(&stop_flag); i++) {
        int s = (int)((id + i * cfg.writers) % cfg.sessions);
        snprintf(session, sizeof session, "%s-%d", cfg.prefix, s);
        a2_events out;
        if (a2_store_append(store, session, &ev, 1, NULL, &out) == 0) {
            if (atomic_fetch_add(&total_commits, 1) + 1 >= cfg.max_commits)
                atomic_store(&stop_flag, 1);
        } else {
            atomic_fetch_add(&total_errors, 1);
        }
        a2_events_free(&out);
    }
    return NULL;
}

static void *raw_writer(void *arg)
{
    const struct writer_arg *wa = arg;
    int id = wa->id;
    PGconn *conn = wa->conn;
    PGresult *res;
    char session[64];
    for (long i = 0; !atomic_load(&stop_flag); i++) {
        int s = (int)((id + i * cfg.writers) % cfg.sessions);
        snprintf(session, sizeof session, "%s-%d", cfg.prefix, s);
        const char *values[2] = {session, "{\"n\":1}"};
        res = PQexecPrepared(conn, "ins", 2, values, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_COMMAND_OK ||
            PQresultStatus(res) == PGRES_TUPLES_OK) {
            if (atomic_fetch_add(&total_commits, 1) + 1 >= cfg.max_commits)
                atomic_store(&stop_flag, 1);
        } else {
            atomic_fetch_add(&total_errors, 1);
        }
        PQclear(res);
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
    if (!PLAIN_MODE(cfg.mode)) {
        a2_store_error err;
        if (a2_store_open(&wa->store, cfg.db, &err) != 0) {
            fprintf(stderr, "a2-bench-commit: could not open store: %s\n",
                    err.message);
            return -1;
        }
        return 0;
    }
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

static void usage(FILE *f)
{
    fprintf(f, "usage: a2-bench-commit --db CONNINFO [--mode "
               "store|raw|notify|floor]\n"
               "                       [--writers N] [--sessions N] [--seconds "
               "S]\n"
               "                       [--max-commits N] [--prefix P]\n"
               "                       [--subscribe unix:PATH]\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
            {"db", required_argument, NULL, 'd'},
            {"mode", required_argument, NULL, 'm'},
            {"writers", required_argument, NULL, 'w'},
            {"sessions", required_argument, NULL, 's'},
            {"seconds", required_argument, NULL, 't'},
            {"max-commits", required_argument, NULL, 'n'},
            {"prefix", required_argument, NULL, 'p'},
            {"subscribe", required_argument, NULL, 'S'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            cfg.db = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "store") == 0)
                cfg.mode = MODE_STORE;
            else if (strcmp(optarg, "raw") == 0)
                cfg.mode = MODE_RAW;
            else if (strcmp(optarg, "notify") == 0)
                cfg.mode = MODE_NOTIFY;
            else if (strcmp(optarg, "floor") == 0)
                cfg.mode = MODE_FLOOR;
            else {
                fprintf(stderr, "a2-bench-commit: unknown mode %s\n", optarg);
                return 2;
            }
            break;
        case 'w':
            cfg.writers = atoi(optarg);
            break;
        case 's':
            cfg.sessions = atoi(optarg);
            break;
        case 't':
            cfg.seconds = atof(optarg);
            break;
        case 'n':
            cfg.max_commits = atol(optarg);
            break;
        case 'p':
            cfg.prefix = optarg;
            break;
        case 'S':
            cfg.subscribe = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!cfg.db)
        cfg.db = getenv("A2_DB");
    if (!cfg.db || cfg.writers < 1 || cfg.writers > 256 || cfg.sessions < 1 ||
        cfg.seconds <= 0 || cfg.seconds > 600) {
        usage(stderr);
        return 2;
    }

    PGconn *lconn = NULL;
    pthread_t lthread;
    if (cfg.mode == MODE_NOTIFY) {
        lconn = PQconnectdb(cfg.db);
        PGresult *res = PQexec(lconn, "listen a2_events");
        if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            fprintf(stderr, "a2-bench-commit: could not listen: %s",
                    PQerrorMessage(lconn));
            return 1;
        }
        PQclear(res);
        pthread_create(&lthread, NULL, listener, lconn);
    }

    a2_worker *sub = NULL;
    pthread_t sthread;
    if (cfg.subscribe) {
        char err[256];
        a2_worker_options o = {.connect = cfg.subscribe, .name = "bench"};
        sub = a2_worker_new(&o, err, sizeof err);
        if (!sub || a2_worker_subscribe(sub, "bench", 0, NULL, 0) != 0) {
            fprintf(stderr, "a2-bench-commit: subscribe: %s\n", err);
            return 1;
        }
        /* Wait for the welcome. */
        for (int i = 0; i < 100 && !a2_worker_connected(sub); i++) {
            a2_worker_event ev;
            if (a2_worker_wait(sub, &ev, 50) < 0)
                break;
        }
        if (!a2_worker_connected(sub)) {
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
        pthread_create(&th[i], NULL,
                       PLAIN_MODE(cfg.mode) ? raw_writer : store_writer,
                       &wa[i]);
    while (!atomic_load(&stop_flag) && now_s() - t0 < cfg.seconds) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
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
    static const char *names[] = {"store", "raw", "notify", "floor"};
    printf("%s %d %d %ld %.3f %.1f %ld %ld\n", names[cfg.mode], cfg.writers,
           cfg.sessions, commits, elapsed, (double)commits / elapsed,
           atomic_load(&notifications), atomic_load(&total_errors));
    return atomic_load(&total_errors) > 0 && commits == 0 ? 1 : 0;
}
