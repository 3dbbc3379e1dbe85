/*
 * a2-consumer: streams the WAL of an a2 database through a logical slot
 * (wal2json), writes the audit trail of every cursor transition, pushes
 * wake-ups to the workers and keeps the lease and retry timers.
 *
 * This file: the options (--help, parsing, validation) and the wiring that
 * builds the daemon (daemon.h) and hands it to the loop (loop.c).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "../common/addr.h"
#include "../common/num.h"
#include "../common/random.h"
#include "a2/version.h"
#include "a2/wire.h"
#include "daemon.h"

static void usage(FILE *f)
{
    fprintf(f,
            "a2-consumer streams an a2 database's WAL (logical slot, "
            "wal2json), "
            "pushes\nwake-ups to workers and writes the audit trail of cursor "
            "transitions.\n\n"
            "Usage:\n  a2-consumer [OPTION]...\n\n"
            "Options:\n"
            "  --db CONNINFO          libpq conninfo or URI (else A2_DB, else "
            "PG* variables)\n"
            "  --slot NAME            logical replication slot (default a2)\n"
            "  --listen unix:PATH     worker socket (mode 0660)\n"
            "  --listen tcp:HOST:PORT worker TCP listener (needs "
            "--token-file)\n"
            "  --token-file FILE      token TCP workers must send in hello\n"
            "  --audit FILE           audit trail (JSON lines); FILE.lsn holds "
            "its position\n"
            "  --metrics tcp:HOST:PORT  Prometheus /metrics and /healthz\n"
            "  --route affinity|broadcast  wake-up routing (default affinity)\n"
            "  --trace-wakes          a commit's wake-up carries its times "
            "(commit,\n"
            "                         walsender send, read, push: "
            "docs/protocol.md)\n"
            "  --status-interval MS   standby status update interval (default "
            "10000)\n"
            "  --heartbeat-interval MS  heartbeat when the stream is idle "
            "(default 30000)\n"
            "  --stream-timeout MS    reconnect when the server sends "
            "nothing for this\n"
            "                         long (a reply is requested at half of "
            "it), and\n"
            "                         give up a query unanswered this long "
            "(default\n"
            "                         60000, 0: never)\n"
            "  --max-connections N    worker connections at once (default "
            "16384, and\n"
            "                         never more than the descriptor limit "
            "allows);\n"
            "                         past it a new one gets an error and is "
            "closed\n"
            "  --plugin NAME          output plugin of a new slot (default "
            "wal2json;\n"
            "                         other values are for tests)\n"
            "  --help                 show this help\n"
            "  --version              show the version\n\n"
            "Signals: SIGTERM/SIGINT stop cleanly, SIGHUP reopens the audit "
            "file.\n"
            "Exit status: 0 on a clean stop, 1 on a runtime error, 2 on a "
            "usage error.\n");
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt,
                                                             ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr,
            "a2-consumer: %s\n"
            "Try \"a2-consumer --help\" for more information.\n",
            buf);
    return 2;
}

/* Splits "tcp:HOST:PORT" (HOST may be [v6]) into *host and *port (the
 * caller frees both); 0, or -1 for any other address. */
static int split_tcp(const char *spec, char **host, char **port)
{
    a2__addr a;
    int rc = -1;
    if (a2__addr_parse(spec, &a) == A2__ADDR_OK && a.kind == A2__ADDR_TCP) {
        *host = a.host;
        *port = a.port;
        a.host = a.port = NULL;
        rc = 0;
    }
    a2__addr_clear(&a);
    return rc;
}

static int parse_ms(const char *s, int min, int *out)
{
    int64_t v;
    if (a2__num_parse_i64(s, min, INT_MAX, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* Descriptors the daemon keeps besides its workers': the database
 * connections, the audit file, epoll, timers, signals, and the metrics
 * listener with its CONNECTION_LIMIT connections. */
#define FD_RESERVE 96

/*
 * Raises the soft RLIMIT_NOFILE to the hard one and returns how many
 * worker connections fit under it, at most `want`. A cap the limit lowers
 * is logged: a refused worker then has a reason an operator can find.
 */
static size_t fit_connections(size_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = rl;
        up.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        return want;
    size_t fit = rl.rlim_cur > FD_RESERVE + 1 ? rl.rlim_cur - FD_RESERVE : 1;
    if (fit < want) {
        a2__daemon_log(
                "worker connections capped at %zu (descriptor limit %llu; "
                "raise it with ulimit -n or LimitNOFILE=)",
                fit, (unsigned long long)rl.rlim_cur);
        return fit;
    }
    return want;
}

static void cleanup(a2__daemon *d)
{
    a2__repl_close(d->repl);
    a2__server_free(d->srv);
    a2__metrics_free(d->met);
    a2__apply_free(d->apply);
    a2__timers_free(d->timers);
    a2__audit_close(d->audit);
    a2_decoder_free(d->dec);
    a2__queries_reset(d);
    a2__backlog_free(d->backlog);
    if (d->sigfd >= 0)
        close(d->sigfd);
    free(d->tcp_host);
    free(d->tcp_port);
    free(d->metrics_host);
    free(d->metrics_port);
    free(d->token);
    a2__active_free(d->active); /* last: a standby takes over after this */
}

int main(int argc, char **argv)
{
    a2__daemon d;
    memset(&d, 0, sizeof d);
    d.sigfd = -1;
    d.slot = "a2";
    d.plugin = "wal2json";
    d.status_interval_ms = 10000;
    d.heartbeat_ms = 30000;
    d.stream_timeout_ms = 60000;
    d.route = A2C_ROUTE_AFFINITY;
    const char *token_file = NULL;
    int rc = 1;
    char err[1024];

    enum {
        O_DB = 256,
        O_SLOT,
        O_LISTEN,
        O_TOKEN,
        O_AUDIT,
        O_METRICS,
        O_ROUTE,
        O_STATUS,
        O_HB,
        O_STREAM_TIMEOUT,
        O_PLUGIN,
        O_MAX_CONN,
        O_TRACE,
        O_HELP,
        O_VERSION
    };
    static const struct option longopts[] = {
            {"db", required_argument, NULL, O_DB},
            {"slot", required_argument, NULL, O_SLOT},
            {"listen", required_argument, NULL, O_LISTEN},
            {"token-file", required_argument, NULL, O_TOKEN},
            {"audit", required_argument, NULL, O_AUDIT},
            {"metrics", required_argument, NULL, O_METRICS},
            {"route", required_argument, NULL, O_ROUTE},
            {"status-interval", required_argument, NULL, O_STATUS},
            {"heartbeat-interval", required_argument, NULL, O_HB},
            {"stream-timeout", required_argument, NULL, O_STREAM_TIMEOUT},
            {"plugin", required_argument, NULL, O_PLUGIN},
            {"max-connections", required_argument, NULL, O_MAX_CONN},
            {"trace-wakes", no_argument, NULL, O_TRACE},
            {"help", no_argument, NULL, O_HELP},
            {"version", no_argument, NULL, O_VERSION},
            {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_DB:
            d.conninfo = optarg;
            break;
        case O_SLOT:
            if (!*optarg) {
                rc = usage_error("invalid slot name \"%s\"", optarg);
                goto done;
            }
            d.slot = optarg;
            break;
        case O_LISTEN:
            if (a2__addr_kind(optarg) == A2__ADDR_UNIX && optarg[5]) {
                d.unix_path = optarg + 5;
            } else if (a2__addr_kind(optarg) == A2__ADDR_TCP) {
                free(d.tcp_host);
                free(d.tcp_port);
                d.tcp_host = d.tcp_port = NULL;
                if (split_tcp(optarg, &d.tcp_host, &d.tcp_port) != 0) {
                    rc = usage_error("invalid --listen address \"%s\"", optarg);
                    goto done;
                }
            } else {
                rc = usage_error("invalid --listen address \"%s\" (expected "
                                 "unix:PATH or tcp:HOST:PORT)",
                                 optarg);
                goto done;
            }
            break;
        case O_TOKEN:
            token_file = optarg;
            break;
        case O_AUDIT:
            d.audit_path = optarg;
            break;
        case O_METRICS:
            free(d.metrics_host);
            free(d.metrics_port);
            d.metrics_host = d.metrics_port = NULL;
            if (split_tcp(optarg, &d.metrics_host, &d.metrics_port) != 0) {
                rc = usage_error("invalid --metrics address \"%s\" (expected "
                                 "tcp:HOST:PORT)",
                                 optarg);
                goto done;
            }
            break;
        case O_TRACE:
            d.trace_wakes = 1;
            break;
        case O_ROUTE:
            if (strcmp(optarg, "affinity") == 0)
                d.route = A2C_ROUTE_AFFINITY;
            else if (strcmp(optarg, "broadcast") == 0)
                d.route = A2C_ROUTE_BROADCAST;
            else {
                rc = usage_error("invalid --route \"%s\" (expected affinity "
                                 "or broadcast)",
                                 optarg);
                goto done;
            }
            break;
        case O_STATUS:
            if (parse_ms(optarg, 1, &d.status_interval_ms) != 0) {
                rc = usage_error("invalid --status-interval \"%s\"", optarg);
                goto done;
            }
            break;
        case O_HB:
            if (parse_ms(optarg, 1, &d.heartbeat_ms) != 0) {
                rc = usage_error("invalid --heartbeat-interval \"%s\"", optarg);
                goto done;
            }
            break;
        case O_STREAM_TIMEOUT:
            if (parse_ms(optarg, 0, &d.stream_timeout_ms) != 0 ||
                (d.stream_timeout_ms > 0 && d.stream_timeout_ms < 100)) {
                rc = usage_error("invalid --stream-timeout \"%s\" (0, or at "
                                 "least 100 ms)",
                                 optarg);
                goto done;
            }
            break;
        case O_PLUGIN:
            d.plugin = optarg;
            break;
        case O_MAX_CONN: {
            int n;
            if (parse_ms(optarg, 1, &n) != 0 || n > 1000000) {
                rc = usage_error("invalid --max-connections \"%s\" (1 to "
                                 "1000000)",
                                 optarg);
                goto done;
            }
            d.max_connections = (size_t)n;
            break;
        }
        case O_HELP:
            usage(stdout);
            rc = 0;
            goto done;
        case O_VERSION:
            puts("a2-consumer " A2_VERSION_LINE);
            rc = 0;
            goto done;
        case ':':
            rc = usage_error("option \"%s\" needs a value", argv[optind - 1]);
            goto done;
        default:
            rc = usage_error("unknown option \"%s\"", argv[optind - 1]);
            goto done;
        }
    }
    if (optind < argc) {
        rc = usage_error("unexpected argument \"%s\"", argv[optind]);
        goto done;
    }
    if (d.tcp_host && !token_file) {
        rc = usage_error("%s", "--listen tcp: needs --token-file");
        goto done;
    }
    /* The queries of the normal connection wait no longer than the stream
     * does: a hung server must not hold the loop, and its wake-ups, for
     * ever. */
    a2__db_set_timeout(d.stream_timeout_ms);
    if (!d.unix_path && !d.tcp_host) {
        rc = usage_error("%s", "no worker listener: give --listen unix:PATH "
                               "or --listen tcp:HOST:PORT");
        goto done;
    }
    if (!d.conninfo)
        d.conninfo = getenv("A2_DB");

    if (token_file) {
        d.token = a2_wire_read_token(token_file, err, sizeof err);
        if (!d.token) {
            a2__daemon_log("%s", err);
            goto done;
        }
    }

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (d.sigfd < 0) {
        a2__daemon_log("could not create signalfd: %s", strerror(errno));
        goto done;
    }

    /* What is local first (the listeners, the metrics port): a start that
     * fails on them must not have created the slot. Workers that connect
     * before the stream is up wait in the backlog; a standby refuses them. */
    a2__server_options so = {
            .unix_path = d.unix_path,
            .tcp_host = d.tcp_host,
            .tcp_port = d.tcp_port,
            .token = d.token,
            .route = d.route,
            .trace_wakes = d.trace_wakes,
            .log = a2__sinks_server_log,
            .max_connections = fit_connections(
                    d.max_connections ? d.max_connections
                                      : A2C_DEFAULT_MAX_CONNECTIONS),
    };
    d.srv = a2__server_new(&so, err, sizeof err);
    if (!d.srv) {
        a2__daemon_log("%s", err);
        goto done;
    }
    if (d.metrics_host) {
        d.met = a2__metrics_new(d.metrics_host, d.metrics_port,
                                a2__loop_publish, &d, err, sizeof err);
        if (!d.met) {
            a2__daemon_log("%s", err);
            goto done;
        }
    }
    /* Active or standby: the audit file is opened (and repaired) only by
     * the consumer that holds the locks. */
    d.active =
            a2__active_new(d.conninfo, d.slot, d.audit_path, err, sizeof err);
    if (!d.active) {
        a2__daemon_log("%s", err);
        goto done;
    }
    int w = a2__loop_wait_active(&d);
    if (w != 0) {
        rc = w > 0 ? 0 : 1;
        goto done;
    }

    if (d.audit_path) {
        d.audit = a2__audit_open(d.audit_path, &d.resume, err, sizeof err);
        if (!d.audit) {
            a2__daemon_log("%s", err);
            goto done;
        }
        if (d.resume.truncated_bytes)
            a2__daemon_log(
                    "cut a torn last line of %zu bytes from audit file \"%s\"",
                    d.resume.truncated_bytes, d.audit_path);
    }
    d.timers = a2__timers_new();
    d.dec = a2_decoder_new();
    /* the backlog gauges are only for /metrics: without it, no reads */
    d.backlog = d.metrics_host ? a2__backlog_new() : NULL;
    a2__sink sink = a2__sinks_for(&d);
    d.apply = a2__apply_new(d.audit, d.timers, &sink, &d.resume);
    if (d.apply) {
        /* The secret this run's expiry ticks carry: a tick any role could
         * emit without it is not acted on. */
        if (a2__random_hex(d.tick_secret, A2C_TICK_SECRET_LEN / 2) != 0) {
            a2__daemon_log("could not draw a secret for the expiry ticks: %s",
                           strerror(errno));
            goto done;
        }
        a2__apply_set_tick_secret(d.apply, d.tick_secret);
    }
    if (d.apply)
        a2__apply_set_backlog(d.apply, d.backlog);
    if (!d.timers || !d.dec || !d.apply || (d.metrics_host && !d.backlog)) {
        a2__daemon_log("out of memory");
        goto done;
    }

    rc = a2__loop_run(&d);
done:
    cleanup(&d);
    return rc;
}
