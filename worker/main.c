/*
 * a2-worker: runs a command for every event claimed for a consumer.
 *
 * The main thread parses the options and holds the connection to
 * a2-consumer (a2_worker); what it reports feeds an a2_worker_pool, whose
 * --concurrency slots each run sessions with a runner (claim -> handle ->
 * complete/fail, leases renewed while a handler runs). The pool's handler
 * (handle, below) hands the event to CMD run by /bin/sh -c: with --exec
 * once per event, the event as JSON on stdin (worker/handler.c); with
 * --serve once per slot and kept running, one JSON line in and one JSON
 * line out per event, its processes owned by a thread of their own
 * (worker/handler_serve.c). See docs/worker.md.
 */
#include "../common/addr.h"
#include "../common/clock.h"
#include "../common/num.h"
#include "a2/store.h"
#include "a2/version.h"
#include "a2/wire.h"
#include "a2/worker.h"
#include "handler.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CONCURRENCY A2_WORKER_MAX_SLOTS

static const char usage_text[] =
        "usage: a2-worker --consumer NAME (--exec CMD | --serve CMD) "
        "[options]\n"
        "\n"
        "With --exec CMD, runs CMD (with /bin/sh -c) for every event claimed "
        "for\n"
        "consumer NAME: the event as JSON on stdin; A2_SESSION, A2_CONSUMER,\n"
        "A2_INDEX, A2_ATTEMPT (and A2_LANE, A2_EVENT_TYPE, A2_EVENT_ID) in "
        "its\n"
        "environment.\n"
        "Exit 0 completes the event, and every stdout line that is a JSON "
        "object\n"
        "with a \"type\" is appended as a returned event ({\"type\", "
        "\"payload\",\n"
        "\"id\"}); a non-zero exit fails it with the tail of stderr as the "
        "error.\n"
        "\n"
        "With --serve CMD, CMD is started once per --concurrency slot and "
        "kept\n"
        "running (A2_CONSUMER and A2_SLOT in its environment): each event "
        "goes\n"
        "to its stdin as one JSON line, and it answers each with one line on\n"
        "stdout, {\"ok\":true,\"events\":[...]} or "
        "{\"ok\":false,\"error\":\"...\"},\n"
        "within --ttl. A handler that exits is restarted (100 ms back-off,\n"
        "doubling to 10 s); its event in flight fails.\n"
        "\n"
        "Options:\n"
        "  --consumer NAME        the consumer to serve (required)\n"
        "  --exec CMD             the handler command, run once per event\n"
        "  --serve CMD            the handler command, kept running (one of\n"
        "                         --exec and --serve is required)\n"
        "  --connect ADDR         a2-consumer at unix:PATH or tcp:HOST:PORT;\n"
        "                         repeat for a standby consumer (the "
        "addresses\n"
        "                         are tried in turn, the active one is "
        "kept)\n"
        "                         (default: none, degraded sweep only)\n"
        "  --token-file F         token for a tcp: connection\n"
        "  --db CONNINFO          database (default: $A2_DB, else PG* "
        "variables)\n"
        "  --concurrency N        handlers run at once, 1..256 (default 1)\n"
        "  --ttl MS               claim lease, renewed while a handler runs\n"
        "                         (default 30000)\n"
        "  --max-failures N       failures that dead-letter an event (default "
        "5)\n"
        "  --retry-after MS       hold after a failure before a retry\n"
        "                         (default 1000)\n"
        "  --lane-only            serve targeted events and lanes (the "
        "default)\n"
        "  --log TYPES            be a log consumer of TYPES "
        "(comma-separated;\n"
        "                         '*' for every type)\n"
        "  --degraded-sweep MS    while a2-consumer is unreachable, sweep the\n"
        "                         store's pending sessions this often\n"
        "                         (default 30000)\n"
        "  --name NAME            this worker's name (default host:pid)\n"
        "  -q, --quiet            log only problems\n"
        "  -h, --help             this help\n"
        "  --version              the version\n"
        "\n"
        "Environment: A2_STORE_TIMEOUT_MS bounds each store call (default: "
        "none;\n"
        "see a2_store_set_timeout in <a2/store.h>).\n"
        "SIGTERM or SIGINT: stop claiming, let running handlers finish, exit "
        "0\n"
        "(--serve: then close the handlers' stdin and wait for them to exit).\n"
        "Exit status: 0 success, 1 runtime error, 2 usage error.\n";

typedef struct {
    /* options */
    const char *consumer;
    int serve_mode; /* --serve: the command is kept running, one per slot */
    const char **connects; /* every --connect, in order */
    size_t nconnects;
    const char *db;
    char *token;
    const char *name;
    int concurrency;
    int64_t ttl_ms;
    int max_failures;
    int64_t retry_after_ms;
    int degraded_sweep_ms;
    char **log_types;
    size_t nlog_types;
    int log_all;

    a2__cmd hc; /* the handler command (and consumer, quiet) */
    a2_consumer cons;
    a2_log_spec log_spec;

    a2_worker_pool *pool;
    a2__serve *srv; /* --serve */
    int sigpipe[2];
} app;

static volatile sig_atomic_t got_signal;
static int signal_fd = -1;

static void on_signal(int sig)
{
    got_signal = sig;
    if (signal_fd >= 0) {
        int saved = errno;
        char c = 1;
        ssize_t n = write(signal_fd, &c, 1);
        (void)n;
        errno = saved;
    }
}

static void lib_log(void *ctx, const char *line)
{
    (void)ctx;
    a2__log("a2-worker", "%s", line);
}

/* ── the pool's handler ───────────────────────────────────────────────── */

static int handle(void *ctx, int slot, const a2_head *h, a2_worker_reply *reply)
{
    app *a = ctx;
    const a2_event *e = &h->event;
    size_t len = 0;
    char *line = a2__event_line(&a->hc, h, &len);
    if (!line) {
        a2_worker_reply_error(reply, "could not render the event as JSON");
        return 1;
    }
    if (!a->hc.quiet)
        a2__log("a2-worker", "run %s #%lld %s attempt %d%s%s", e->session_id,
                 (long long)e->index, e->type, h->dispatch.attempt_count,
                 h->dispatch.lane ? " lane " : "",
                 h->dispatch.lane ? h->dispatch.lane : "");
    int64_t start = a2__mono_ms();
    char why[A2W_STDERR_TAIL + 512] = "";
    size_t returned = 0;
    int rc = a->srv ? a2__serve_event(a->srv, slot, h, line, len, reply, why,
                                       sizeof why, &returned)
                    : a2__exec_event(&a->hc, h, line, len, reply, why,
                                      sizeof why, &returned);
    free(line);
    int64_t ms = a2__mono_ms() - start;
    if (rc == 0) {
        if (!a->hc.quiet)
            a2__log("a2-worker", "ok %s #%lld in %lld ms, %zu returned",
                     e->session_id, (long long)e->index, (long long)ms,
                     returned);
    } else {
        a2__utf8_clean(why);
        a2_worker_reply_error(reply, why);
        a2__log("a2-worker", "failed %s #%lld attempt %d in %lld ms: %s",
                 e->session_id, (long long)e->index, h->dispatch.attempt_count,
                 (long long)ms, why);
    }
    return rc;
}

/* ── the main loop ────────────────────────────────────────────────────── */

static void on_event(app *a, const a2_worker_event *ev)
{
    int quiet = a->hc.quiet;
    switch (ev->type) {
    case A2_WORKER_EV_WAKE:
        if (!quiet)
            a2__log("a2-worker", "wake %s %s head %lld", ev->session,
                     ev->cursor ? ev->cursor : "", (long long)ev->head);
        break;
    case A2_WORKER_EV_LOG:
        if (!quiet)
            a2__log("a2-worker", "log %s #%lld %s", ev->session,
                     (long long)ev->idx, ev->event_type ? ev->event_type : "");
        break;
    case A2_WORKER_EV_RESYNC:
        if (ev->all_sessions) {
            size_t total = 0;
            (void)a2_worker_pool_resync(a->pool, ev->consumer, &total);
            if (!quiet)
                a2__log("a2-worker", "resync: %zu session%s with pending work",
                         total, total == 1 ? "" : "s");
            return;
        }
        if (!quiet)
            a2__log("a2-worker", "resync of %zu session%s", ev->nsessions,
                     ev->nsessions == 1 ? "" : "s");
        break;
    case A2_WORKER_EV_CLEARED:
        if (!quiet)
            a2__log("a2-worker", "cleared %s at #%lld", ev->session,
                     (long long)ev->clear_index);
        break;
    default:
        break; /* connected/disconnected are logged by the library */
    }
    /* Wake-ups, sweeps and resyncs queue sessions (a failure is logged). */
    (void)a2_worker_pool_event(a->pool, ev);
}

static int usage_error(const char *fmt, ...)
        __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    a2__log_v("a2-worker", fmt, ap);
    va_end(ap);
    return 2;
}

static int parse_args(app *a, int argc, char **argv)
{
    static const struct option opts[] = {
            {"consumer", required_argument, NULL, 'c'},
            {"exec", required_argument, NULL, 'e'},
            {"serve", required_argument, NULL, 'S'},
            {"connect", required_argument, NULL, 'C'},
            {"token-file", required_argument, NULL, 'T'},
            {"db", required_argument, NULL, 'd'},
            {"concurrency", required_argument, NULL, 'n'},
            {"ttl", required_argument, NULL, 't'},
            {"max-failures", required_argument, NULL, 'm'},
            {"retry-after", required_argument, NULL, 'r'},
            {"lane-only", no_argument, NULL, 'L'},
            {"log", required_argument, NULL, 'l'},
            {"degraded-sweep", required_argument, NULL, 's'},
            {"name", required_argument, NULL, 'N'},
            {"quiet", no_argument, NULL, 'q'},
            {"help", no_argument, NULL, 'h'},
            {"version", no_argument, NULL, 'V'},
            {NULL, 0, NULL, 0},
    };
    const char *token_file = NULL, *log_arg = NULL, *exec_cmd = NULL,
               *serve_cmd = NULL;
    int lane_only = 0;
    int64_t v;
    int c;
    /* Room for every --connect: there are fewer than argc. */
    a->connects = calloc((size_t)argc, sizeof *a->connects);
    if (!a->connects)
        return 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            a->consumer = optarg;
            break;
        case 'e':
            exec_cmd = optarg;
            break;
        case 'S':
            serve_cmd = optarg;
            break;
        case 'C':
            a->connects[a->nconnects++] = optarg;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 'd':
            a->db = optarg;
            break;
        case 'n':
            if (a2__num_parse_i64(optarg, 1, MAX_CONCURRENCY, &v) != 0)
                return usage_error("--concurrency needs 1..%d, not '%s'",
                                   MAX_CONCURRENCY, optarg);
            a->concurrency = (int)v;
            break;
        case 't':
            if (a2__num_parse_i64(optarg, 10, 86400000LL, &v) != 0)
                return usage_error("--ttl needs milliseconds in "
                                   "10..86400000, not '%s'",
                                   optarg);
            a->ttl_ms = v;
            break;
        case 'm':
            if (a2__num_parse_i64(optarg, 1, 1000000, &v) != 0)
                return usage_error("--max-failures needs a count >= 1, not "
                                   "'%s'",
                                   optarg);
            a->max_failures = (int)v;
            break;
        case 'r':
            if (a2__num_parse_i64(optarg, 0, 86400000LL, &v) != 0)
                return usage_error("--retry-after needs milliseconds in "
                                   "0..86400000, not '%s'",
                                   optarg);
            a->retry_after_ms = v == 0 ? -1 : v;
            break;
        case 'L':
            lane_only = 1;
            break;
        case 'l':
            log_arg = optarg;
            break;
        case 's':
            if (a2__num_parse_i64(optarg, 10, 86400000LL, &v) != 0)
                return usage_error("--degraded-sweep needs milliseconds in "
                                   "10..86400000, not '%s'",
                                   optarg);
            a->degraded_sweep_ms = (int)v;
            break;
        case 'N':
            a->name = optarg;
            break;
        case 'q':
            a->hc.quiet = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return -1;
        case 'V':
            puts("a2-worker " A2_VERSION_LINE);
            return -1;
        case ':':
            return usage_error("option %s needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option %s (see a2-worker --help)",
                               argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s' (quote CMD in --exec or "
                           "--serve)",
                           argv[optind]);
    if (!a->consumer || !*a->consumer)
        return usage_error("--consumer NAME is required");
    if (exec_cmd && serve_cmd)
        return usage_error("--exec and --serve exclude each other");
    a->hc.cmd = serve_cmd ? serve_cmd : exec_cmd;
    a->serve_mode = serve_cmd != NULL;
    if (!a->hc.cmd || !*a->hc.cmd)
        return usage_error(a->serve_mode ? "--serve CMD must not be empty"
                                         : "--exec CMD is required (or "
                                           "--serve CMD)");
    if (lane_only && log_arg)
        return usage_error("--lane-only and --log exclude each other");
    for (size_t i = 0; i < a->nconnects; i++) {
        if (!a2__addr_kind(a->connects[i]))
            return usage_error("--connect needs unix:PATH or tcp:HOST:PORT, "
                               "not '%s'",
                               a->connects[i]);
        if (a2__addr_kind(a->connects[i]) == A2__ADDR_TCP && !token_file)
            return usage_error("--connect tcp: needs --token-file");
    }
    if (token_file) {
        char err[512];
        a->token = a2_wire_read_token(token_file, err, sizeof err);
        if (!a->token) {
            a2__log("a2-worker", "%s", err);
            return 1;
        }
    }
    if (log_arg) {
        if (strcmp(log_arg, "*") == 0) {
            a->log_all = 1;
        } else {
            char *copy = strdup(log_arg);
            if (!copy)
                return 1;
            size_t n = 1;
            for (char *p = copy; *p; p++)
                n += *p == ',';
            a->log_types = calloc(n, sizeof *a->log_types);
            if (!a->log_types) {
                free(copy);
                return 1;
            }
            char *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (!*t)
                    continue;
                a->log_types[a->nlog_types] = strdup(t);
                if (!a->log_types[a->nlog_types]) {
                    free(copy);
                    return 1;
                }
                a->nlog_types++;
            }
            free(copy);
            if (a->nlog_types == 0)
                return usage_error("--log needs event types (or '*')");
        }
    }
    if (!a->db) {
        const char *env = getenv("A2_DB");
        a->db = env ? env : "";
    }
    return 0;
}
int main(int argc, char **argv)
{
    app a = {.concurrency = 1, .sigpipe = {-1, -1}};
    int rc = parse_args(&a, argc, argv);
    if (rc != 0) {
        for (size_t i = 0; i < a.nlog_types; i++)
            free(a.log_types[i]);
        free(a.log_types);
        free(a.token);
        free(a.connects);
        return rc < 0 ? 0 : rc;
    }
    a2_worker *w = NULL;
    int quiet = a.hc.quiet;
    a.hc.consumer = a.consumer;
    a.cons.name = a.consumer;
    if (a.log_all || a.nlog_types) {
        a.log_spec.lane = "log";
        a.log_spec.types = a.log_all ? NULL : (const char *const *)a.log_types;
        a.log_spec.ntypes = a.log_all ? 0 : a.nlog_types;
        a.log_spec.backfill = false;
        a.cons.log = &a.log_spec;
    }
    if (pipe2(a.sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        a2__log("a2-worker", "could not create a pipe: %s",
                strerror(errno));
        rc = 1;
        goto done;
    }
    signal_fd = a.sigpipe[1];
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Check the store is reachable before starting anything. */
    a2_store *store = NULL;
    a2_store_error serr = {0};
    if (a2_store_open(&store, a.db, &serr) != 0) {
        a2__log("a2-worker", "%s",
                serr.message[0] ? serr.message
                                : "could not connect to the database");
        rc = serr.code == A2_EINVALID_ARGUMENT ? 2 : 1;
        goto done;
    }
    a2_store_close(store);
    int64_t ttl = a.ttl_ms ? a.ttl_ms : A2_WORKER_DEFAULT_TTL_MS;
    if (a.serve_mode &&
        !(a.srv = a2__serve_start(&a.hc, a.concurrency, ttl))) {
        a2__log("a2-worker", "could not start the handlers' thread");
        rc = 1;
        goto done;
    }
    char err[1024];
    a2_worker_pool_options po = {
            .db = a.db,
            .name = a.name,
            .consumers = &a.cons,
            .nconsumers = 1,
            .slots = a.concurrency,
            .ttl_ms = a.ttl_ms,
            .max_failures = a.max_failures,
            .retry_after_ms = a.retry_after_ms,
            .handler = handle,
            .ctx = &a,
            .log = lib_log,
            .runner_log = quiet ? NULL : lib_log,
    };
    a.pool = a2_worker_pool_new(&po, err, sizeof err);
    if (!a.pool) {
        a2__log("a2-worker", "%s", err);
        rc = 1;
        goto done;
    }

    a2_worker_options wo = {
            .connects = a.connects,
            .nconnects = a.nconnects,
            .token = a.token,
            .name = a.name,
            .db = a.db,
            .degraded_sweep_ms = a.degraded_sweep_ms,
            .log = lib_log,
    };
    w = a2_worker_new(&wo, err, sizeof err);
    if (!w) {
        a2__log("a2-worker", "%s", err);
        rc = 1;
        goto done;
    }
    int lf = a.cons.log ? (a.log_all ? A2_WIRE_LOG_ALL : A2_WIRE_LOG_TYPES)
                        : A2_WIRE_LOG_NONE;
    if (a2_worker_subscribe(w, a.consumer, lf, (const char *const *)a.log_types,
                            a.nlog_types) != 0) {
        a2__log("a2-worker", "could not subscribe to %s", a.consumer);
        rc = 1;
        goto done;
    }
    if (!quiet) {
        char where[2048] = "";
        size_t off = 0;
        for (size_t i = 0; i < a.nconnects && off < sizeof where; i++) {
            int n = snprintf(where + off, sizeof where - off, "%s%s",
                             i ? ", " : "", a.connects[i]);
            if (n < 0)
                break;
            off += (size_t)n;
        }
        a2__log("a2-worker", "serving %s%s with %d %shandler%s, ttl %lld ms, %s",
                 a.consumer, a.cons.log ? " (log consumer)" : "", a.concurrency,
                 a.serve_mode ? "long-lived " : "",
                 a.concurrency == 1 ? "" : "s", (long long)ttl,
                 a.nconnects ? where : "no a2-consumer (degraded sweep only)");
    }

    while (!got_signal) {
        int prc = a2_worker_process(w);
        if (prc != 0) {
            a2__log("a2-worker", "%s",
                     prc == A2_WORKER_ENOMEM ? "out of memory" : "poll failed");
            rc = 1;
            break;
        }
        a2_worker_event ev;
        while (a2_worker_next(w, &ev) == 1)
            on_event(&a, &ev);
        struct pollfd p[2];
        int np = 0;
        p[np++] = (struct pollfd){a.sigpipe[0], POLLIN, 0};
        if (a2_worker_fd(w) >= 0)
            p[np++] = (struct pollfd){a2_worker_fd(w), a2_worker_poll_events(w),
                                      0};
        if (poll(p, (nfds_t)np, a2_worker_timeout(w)) > 0 &&
            (p[0].revents & POLLIN)) {
            char buf[64];
            while (read(a.sigpipe[0], buf, sizeof buf) > 0)
                ;
        }
    }
    if (got_signal) {
        a2_worker_pool_stats st;
        a2_worker_pool_get_stats(a.pool, &st);
        a2__log("a2-worker", "%s received, draining %zu running handler%s",
                 got_signal == SIGTERM ? "SIGTERM" : "SIGINT", st.running,
                 st.running == 1 ? "" : "s");
    }
done:
    a2_worker_pool_stop(a.pool);
    if (a.srv) {
        if (!quiet)
            a2__log("a2-worker", "closing %d handler%s", a.concurrency,
                     a.concurrency == 1 ? "" : "s");
        a2__serve_stop(a.srv);
    }
    if (a.pool && !quiet) {
        a2_worker_pool_stats st;
        a2_worker_pool_get_stats(a.pool, &st);
        a2__log("a2-worker",
                 "stopped after %llu handler runs in %llu session runs "
                 "(%llu of them woken, %llu run together with other "
                 "sessions)",
                 (unsigned long long)(st.completed + st.failed +
                                      st.dead_lettered),
                 (unsigned long long)st.runs,
                 (unsigned long long)st.woken_runs,
                 (unsigned long long)st.together_runs);
    }
    a2_worker_pool_free(a.pool);
    a2_worker_free(w);
    signal_fd = -1;
    if (a.sigpipe[0] >= 0)
        close(a.sigpipe[0]);
    if (a.sigpipe[1] >= 0)
        close(a.sigpipe[1]);
    for (size_t i = 0; i < a.nlog_types; i++)
        free(a.log_types[i]);
    free(a.log_types);
    free(a.token);
    free(a.connects);
    return rc;
}
