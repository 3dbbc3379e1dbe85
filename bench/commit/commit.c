/*
 * a2-bench-commit: commits per second of N writer threads, each on its own
 * connection, for a fixed time.
 *
 *   --mode store    a2_store_append of one event targeted at a consumer
 *   --mode raw      a single-row INSERT into bench_raw (autocommit)
 *   --mode notify   like store, plus a LISTEN client draining the NOTIFYs a
 *                   trigger on a2_events sends (the trigger is the caller's)
 *
 * Prints one line: mode writers sessions commits seconds commits_per_s
 * [notifications]. Bounded by --seconds and by --max-commits.
 */
#include "a2/store.h"

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

enum mode { MODE_STORE, MODE_RAW, MODE_NOTIFY };

struct config {
    const char *db;
    enum mode mode;
    int writers;
    int sessions;
    double seconds;
    long max_commits;
    const char *prefix;
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

static void *store_writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    a2_store *store = NULL;
    a2_store_error err;
    if (a2_store_open(&store, cfg.db, &err) != 0) {
        fprintf(stderr, "a2-bench-commit: could not open store: %s\n",
                err.message);
        atomic_fetch_add(&total_errors, 1);
        return NULL;
    }
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
    a2_store_close(store);
    return NULL;
}

static void *raw_writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    PGconn *conn = PQconnectdb(cfg.db);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "a2-bench-commit: could not connect: %s",
                PQerrorMessage(conn));
        PQfinish(conn);
        atomic_fetch_add(&total_errors, 1);
        return NULL;
    }
    PGresult *res = PQprepare(conn, "ins",
                              "insert into bench_raw (session_id, payload) "
                              "values ($1, $2::jsonb)",
                              2, NULL);
    PQclear(res);
    char session[64];
    for (long i = 0; !atomic_load(&stop_flag); i++) {
        int s = (int)((id + i * cfg.writers) % cfg.sessions);
        snprintf(session, sizeof session, "%s-%d", cfg.prefix, s);
        const char *values[2] = {session, "{\"n\":1}"};
        res = PQexecPrepared(conn, "ins", 2, values, NULL, NULL, 0);
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            if (atomic_fetch_add(&total_commits, 1) + 1 >= cfg.max_commits)
                atomic_store(&stop_flag, 1);
        } else {
            atomic_fetch_add(&total_errors, 1);
        }
        PQclear(res);
    }
    PQfinish(conn);
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: a2-bench-commit --db CONNINFO [--mode store|raw|notify]\n"
            "                       [--writers N] [--sessions N] [--seconds S]\n"
            "                       [--max-commits N] [--prefix P]\n");
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

    pthread_t *th = calloc((size_t)cfg.writers, sizeof *th);
    if (!th)
        return 1;
    double t0 = now_s();
    for (int i = 0; i < cfg.writers; i++)
        pthread_create(&th[i], NULL,
                       cfg.mode == MODE_RAW ? raw_writer : store_writer,
                       (void *)(intptr_t)i);
    while (!atomic_load(&stop_flag) && now_s() - t0 < cfg.seconds) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < cfg.writers; i++)
        pthread_join(th[i], NULL);
    double elapsed = now_s() - t0;
    free(th);
    if (lconn) {
        pthread_join(lthread, NULL);
        PQfinish(lconn);
    }
    long commits = atomic_load(&total_commits);
    static const char *names[] = {"store", "raw", "notify"};
    printf("%s %d %d %ld %.3f %.1f %ld %ld\n", names[cfg.mode], cfg.writers,
           cfg.sessions, commits, elapsed, (double)commits / elapsed,
           atomic_load(&notifications), atomic_load(&total_errors));
    return atomic_load(&total_errors) > 0 && commits == 0 ? 1 : 0;
}
