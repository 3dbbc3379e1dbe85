/*
 * a2-consumer: streams the WAL of an a2 database through a logical slot
 * (wal2json), writes the audit trail of every cursor transition, pushes
 * wake-ups to the workers and keeps the lease and retry timers.
 *
 * One thread, one poll() loop over: the replication socket, the worker
 * server, the metrics listener, a signalfd, the tick and backlog-read
 * connections, and the nearest deadline (timer, status update, group fsync,
 * heartbeat, stream timeout, reconnect, backlog read).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "../common/addr.h"
#include "../common/clock.h"
#include "../common/lsn.h"
#include "a2/decoder.h"
#include "a2/schema.h"
#include "a2/version.h"
#include "a2/wire.h"
#include "active.h"
#include "apply.h"
#include "audit.h"
#include "backlog.h"
#include "metrics.h"
#include "repl.h"
#include "server.h"
#include "timers.h"

#define FSYNC_GROUP_MS        100
#define FSYNC_GROUP_LINES     10000
#define STATE_INTERVAL_MS     1000
#define BACKOFF_MIN_MS        100
#define BACKOFF_MAX_MS        10000
#define MAX_MESSAGES_PER_TURN 5000
#define LAG_WARN_SECONDS      10.0
/* A presence expiry tick not back through the stream after this is sent
 * again; ticks are at least EXPIRE_SPACING_MS apart (expiries due meanwhile
 * go out together). */
#define EXPIRE_RETRY_MS       1000
#define EXPIRE_SPACING_MS     50
/* A resync whose table reads failed reads them again after this. */
#define REBUILD_RETRY_MS      1000
#define STANDBY_POLL_MS       200 /* a standby looks at the file lock */
/* Backlog reads go at most once in this long, and at most once in ten
 * times what the last one took; the clear markers a read returns are at
 * most half of what the applier keeps. */
#define BACKLOG_INTERVAL_MS   1000
#define BACKLOG_MAX_MARKERS   (A2C_APPLY_MAX_CLEARS / 2)

typedef struct {
    /* options */
    const char *conninfo;
    const char *slot;
    const char *plugin;
    const char *audit_path;
    const char *unix_path;
    char *tcp_host, *tcp_port;
    char *metrics_host, *metrics_port;
    char *token;
    a2__route route;
    int status_interval_ms;
    int heartbeat_ms;
    int stream_timeout_ms; /* 0: never give up on a silent stream */

    /* state */
    PGconn *db;
    a2__repl *repl;
    a2__audit *audit;
    a2__audit_resume resume;
    a2__timers *timers;
    a2__apply *apply;
    a2_decoder *dec;
    a2__server *srv;
    a2__metrics *met;
    int sigfd;
    int stop;

    int streaming;
    int64_t reconnect_at_ms;
    int backoff_ms;
    char down_reason[256];
    int need_resync;
    /* when the timers and presence fields are to be read again (mono ms);
     * 0: not due */
    int64_t rebuild_at_ms;

    uint64_t received; /* highest LSN seen on the stream */
    uint64_t flush_sent;
    int64_t last_status_ms;
    int64_t last_activity_ms;
    int64_t last_heartbeat_ms;
    int64_t last_recv_ms;   /* the last message of any kind from the server */
    int64_t ping_sent_ms;   /* when a reply was requested since it, or 0 */
    int walsender_pid;      /* of the last stream, which may outlive it */
    PGconn *tick_db;        /* heartbeats and presence expiry ticks:
                               nonblocking, their own connection */
    int tick_busy;          /* a message was sent and has not answered yet */
    int tick_kind;          /* which: TICK_EXPIRE, TICK_HEARTBEAT, TICK_WAL */
    uint64_t server_wal_lsn; /* the server's WAL position, last read */
    char tick_secret[A2C_TICK_SECRET_LEN + 1]; /* carried by its ticks */
    int64_t wal_read_ms;     /* when it was asked for (mono) */
    int64_t tick_sent_ms;   /* when (mono) */
    int64_t expire_sent_ms; /* the last presence expiry tick (mono) */
    uint64_t expire_sent_seen; /* ticks applied when it was sent */
    double lag_seconds;
    int64_t last_lag_log_ms;

    a2__backlog *backlog;
    PGconn *backlog_db;      /* the backlog reads: nonblocking, their own
                                connection */
    int backlog_busy;        /* a read was sent and has not answered yet */
    PGresult *backlog_res;   /* its rows, as they arrive */
    int64_t backlog_sent_ms; /* when (mono) */
    int64_t backlog_next_ms; /* the earliest the next may go (mono) */

    size_t max_connections; /* worker connections at once */

    /* active and standby (active.h) */
    a2__active *active;
    int standby;           /* waiting for the active lock */
    char standby_msg[512]; /* who holds it */
    int lock_lost;         /* the lock's connection broke: retake it first */

    uint64_t reconnects;
    uint64_t decode_errors;
    uint64_t gaps;
} a2__daemon;

__attribute__((format(printf, 1, 2))) static void logline(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "a2-consumer: %s\n", buf);
}

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
            "  --status-interval MS   standby status update interval (default "
            "10000)\n"
            "  --heartbeat-interval MS  heartbeat when the stream is idle "
            "(default 10000)\n"
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
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > INT_MAX)
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
        logline("worker connections capped at %zu (descriptor limit %llu; "
                "raise it with ulimit -n or LimitNOFILE=)",
                fit, (unsigned long long)rl.rlim_cur);
        return fit;
    }
    return want;
}

/* ---- sink: from the applier to the worker server ---- */

static void server_log(void *arg, const char *line)
{
    (void)arg;
    logline("%s", line);
}

static void sink_wake(void *ctx, const char *consumer, const char *session,
                      const char *cursor_key, int64_t head, uint64_t lsn,
                      uint64_t xid, int64_t commit_us)
{
    a2__daemon *d = ctx;
    a2__server_wake_at(d->srv, consumer, session, cursor_key, head, lsn, xid,
                       commit_us);
}

static void sink_log(void *ctx, const char *session, int64_t idx,
                     const char *type, uint64_t lsn, uint64_t xid)
{
    a2__daemon *d = ctx;
    a2__server_log(d->srv, session, idx, type, lsn, xid);
}

static void sink_cleared(void *ctx, const char *session, int64_t clear_index,
                         uint64_t lsn)
{
    a2__daemon *d = ctx;
    a2__server_cleared(d->srv, session, clear_index, lsn);
}

static void sink_presence(void *ctx, const char *ns, const char *participant,
                          const char *fields_json, uint64_t lsn)
{
    a2__daemon *d = ctx;
    a2__server_presence(d->srv, ns, participant, fields_json, lsn);
}

static void sink_resync(void *ctx)
{
    a2__daemon *d = ctx;
    d->need_resync = 1;
}

/* The session's clear marker, read on the normal connection; -1 when it
 * cannot be read now (the audit then names the delete without it). */
/* ---- database ---- */

static int ensure_db(a2__daemon *d, char *err, size_t errlen)
{
    if (d->db && PQstatus(d->db) == CONNECTION_OK)
        return 0;
    if (d->db) {
        PQreset(d->db);
        if (PQstatus(d->db) == CONNECTION_OK)
            return 0;
        PQfinish(d->db);
        d->db = NULL;
    }
    d->db = a2__db_connect(d->conninfo, err, errlen);
    return d->db ? 0 : -1;
}

/* Reads the live claims and retry holds and the live presence fields. 0, or -1
 * with the reason in err: the caller reads them all again later. */
static int rebuild_timers(a2__daemon *d, char *err, size_t errlen)
{
    if (ensure_db(d, err, errlen) != 0)
        return -1;
    PGresult *res = a2__db_query(
            d->db,
            "select session_id, consumer, cursor_key, epoch, head, "
            "claim_expires_at from a2_cursors where claim_expires_at is not "
            "null and head is not null and failed_at is null",
            0, NULL, "read the live claims", err, errlen);
    if (!res)
        return -1;
    a2__timers_clear(d->timers);
    for (int i = 0; i < PQntuples(res); i++) {
        if (a2__timers_set(d->timers, PQgetvalue(res, i, 0),
                           PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
                           strtoll(PQgetvalue(res, i, 3), NULL, 10),
                           strtoll(PQgetvalue(res, i, 4), NULL, 10),
                           strtoll(PQgetvalue(res, i, 5), NULL, 10)) != 0) {
            snprintf(err, errlen, "out of memory");
            PQclear(res);
            return -1;
        }
    }
    PQclear(res);
    /* live presence fields, whose expiry the stream alone would only show
     * for the ones written from now on */
    res = a2__db_query(d->db,
                       "select ns, participant, field, expires_at from "
                       "a2_presence where value <> 'null'::jsonb",
                       0, NULL, "read the presence fields", err, errlen);
    if (!res)
        return -1;
    a2__apply_forget_presence(d->apply);
    int kept = 0;
    for (int i = 0; i < PQntuples(res); i++)
        if (a2__apply_track_presence(
                    d->apply, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                    PQgetvalue(res, i, 2),
                    strtoll(PQgetvalue(res, i, 3), NULL, 10)) == 0)
            kept++;
    if (kept < PQntuples(res))
        logline("keeping the expiry of %d of %d presence fields; the others "
                "show when a read or a reap deletes them",
                kept, PQntuples(res));
    PQclear(res);
    return 0;
}

/* When the next presence expiry tick may be sent (mono ms): the last one
 * came back through the stream, or was sent EXPIRE_RETRY_MS ago. */
static int64_t expire_next_ms(const a2__daemon *d)
{
    if (!d->expire_sent_ms)
        return 0;
    a2__apply_stats as;
    a2__apply_get_stats(d->apply, &as);
    return d->expire_sent_ms + (as.expire_ticks > d->expire_sent_seen
                                        ? EXPIRE_SPACING_MS
                                        : EXPIRE_RETRY_MS);
}

enum { TICK_EXPIRE, TICK_HEARTBEAT, TICK_WAL };

/* What the messages of the tick connection are called in the log. */
static const struct {
    const char *what;  /* "could not <what>: ..." */
    const char *name;  /* "<name> got no answer ..." */
    const char *after; /* what happens next */
} tick_kinds[] = {
        [TICK_EXPIRE] = {"commit a presence expiry tick",
                         "a presence expiry tick",
                         "sending it on a new connection"},
        [TICK_HEARTBEAT] = {"send a heartbeat", "a heartbeat",
                            "the next goes out on a new connection"},
        [TICK_WAL] = {"read the server's WAL position",
                      "a read of the server's WAL position",
                      "the next goes out on a new connection"},
};

static void drop_tick_db(a2__daemon *d)
{
    PQfinish(d->tick_db);
    d->tick_db = NULL;
    d->tick_busy = 0;
}

/* Reads the answer to the message in flight. */
static void tick_answer(a2__daemon *d)
{
    char err[512], value[64] = "";
    int rc = a2__db_message_poll(d->tick_db, tick_kinds[d->tick_kind].what,
                                 value, sizeof value, err, sizeof err);
    if (rc == 0) {
        d->tick_busy = 0;
        uint64_t lsn;
        if (d->tick_kind == TICK_WAL && a2__lsn_parse(value, &lsn) == 0)
            d->server_wal_lsn = lsn;
    } else if (rc < 0) {
        logline("%s", err);
        drop_tick_db(d);
    }
}

/* A message unanswered for the stream timeout is given up with its
 * connection; the next one goes out on a new connection. */
static void tick_overdue(a2__daemon *d)
{
    if (!d->tick_busy || d->stream_timeout_ms <= 0 ||
        a2__mono_ms() - d->tick_sent_ms < d->stream_timeout_ms)
        return;
    logline("%s got no answer from the server in %.1f s (--stream-timeout); "
            "%s",
            tick_kinds[d->tick_kind].name,
            (double)d->stream_timeout_ms / 1000.0,
            tick_kinds[d->tick_kind].after);
    drop_tick_db(d);
}

/* Sends a heartbeat or an expiry tick on the tick connection (opened when
 * needed) without waiting for it; tick_answer reads the answer. */
static void tick_send(a2__daemon *d, int kind)
{
    char err[512];
    if (d->tick_db && PQstatus(d->tick_db) != CONNECTION_OK)
        drop_tick_db(d);
    if (!d->tick_db) {
        d->tick_db = a2__db_connect(d->conninfo, err, sizeof err);
        if (!d->tick_db) {
            logline("%s", err);
            return;
        }
    }
    int rc = kind == TICK_HEARTBEAT
                     ? a2__db_heartbeat_send(d->tick_db, err, sizeof err)
             : kind == TICK_WAL
                     ? a2__db_wal_position_send(d->tick_db, err, sizeof err)
                     : a2__db_expire_tick_send(d->tick_db, d->tick_secret,
                                               a2__real_ms(), err,
                                               sizeof err);
    if (rc != 0) {
        logline("%s", err);
        drop_tick_db(d);
        return;
    }
    d->tick_busy = 1;
    d->tick_kind = kind;
    d->tick_sent_ms = a2__mono_ms();
}

/* Sends a presence expiry tick when the earliest kept field is due; its
 * commit (a WAL flush) is not waited for. */
static void expire_presence(a2__daemon *d)
{
    if (!d->streaming || d->tick_busy ||
        a2__apply_expiry_due(d->apply) == INT64_MAX)
        return;
    int64_t now = a2__mono_ms();
    if (a2__apply_expiry_due(d->apply) > a2__real_ms() ||
        now < expire_next_ms(d))
        return;
    a2__apply_stats as;
    a2__apply_get_stats(d->apply, &as);
    d->expire_sent_ms = now;
    d->expire_sent_seen = as.expire_ticks;
    tick_send(d, TICK_EXPIRE);
}

/* ---- backlog reads ---- */

static void drop_backlog_db(a2__daemon *d)
{
    PQclear(d->backlog_res);
    d->backlog_res = NULL;
    PQfinish(d->backlog_db);
    d->backlog_db = NULL;
    d->backlog_busy = 0;
}

/* A read that failed: asked for again after REBUILD_RETRY_MS. */
static void backlog_failed(a2__daemon *d, const char *err)
{
    logline("%s; reading the backlog again in %d ms", err, REBUILD_RETRY_MS);
    drop_backlog_db(d);
    a2__backlog_want(d->backlog);
    d->backlog_next_ms = a2__mono_ms() + REBUILD_RETRY_MS;
}

/* Sends the backlog read when one is wanted and may go; its answer is read
 * by backlog_answer, the loop goes on meanwhile. */
static void backlog_send(a2__daemon *d)
{
    char err[512];
    int64_t now = a2__mono_ms();
    if (!d->streaming || d->backlog_busy ||
        !a2__backlog_wants_read(d->backlog) || now < d->backlog_next_ms)
        return;
    if (d->backlog_db && PQstatus(d->backlog_db) != CONNECTION_OK)
        drop_backlog_db(d);
    if (!d->backlog_db) {
        d->backlog_db = a2__db_connect(d->conninfo, err, sizeof err);
        if (!d->backlog_db) {
            backlog_failed(d, err);
            return;
        }
    }
    if (a2__db_backlog_send(d->backlog_db, BACKLOG_MAX_MARKERS, err,
                            sizeof err) != 0) {
        backlog_failed(d, err);
        return;
    }
    a2__backlog_read_sent(d->backlog);
    d->backlog_busy = 1;
    d->backlog_sent_ms = a2__mono_ms();
}

/* Applies the rows of a backlog read (backlog.sql). */
static void backlog_load(a2__daemon *d, PGresult *res)
{
    int n = PQntuples(res);
    a2__backlog_row *rows = calloc((size_t)n + 1, sizeof *rows);
    if (!rows) {
        backlog_failed(d, "could not read the backlog: out of memory");
        return;
    }
    size_t nrows = 0;
    const char *snapshot = NULL;
    uint64_t lsn = 0;
    for (int i = 0; i < n; i++) {
        const char *kind = PQgetvalue(res, i, 0);
        const char *name = PQgetvalue(res, i, 1);
        if (kind[0] == 's') {
            snapshot = name;
            if (a2__lsn_parse(PQgetvalue(res, i, 5), &lsn) != 0)
                lsn = 0;
        } else if (kind[0] == 'c') {
            rows[nrows++] = (a2__backlog_row){
                    name, strtoll(PQgetvalue(res, i, 2), NULL, 10),
                    strtoll(PQgetvalue(res, i, 3), NULL, 10),
                    strtoll(PQgetvalue(res, i, 4), NULL, 10)};
        } else if (kind[0] == 'm') {
            a2__apply_remember_clear(d->apply, name,
                                     strtoll(PQgetvalue(res, i, 2), NULL, 10));
        }
    }
    int rc = snapshot ? a2__backlog_load(d->backlog, snapshot, lsn, rows, nrows)
                      : -1;
    free(rows);
    int64_t now = a2__mono_ms(), took = now - d->backlog_sent_ms;
    int64_t wait =
            took * 10 > BACKLOG_INTERVAL_MS ? took * 10 : BACKLOG_INTERVAL_MS;
    d->backlog_next_ms = d->backlog_sent_ms + wait;
    if (rc < 0)
        backlog_failed(d, "could not read the backlog: no snapshot in the "
                          "answer");
}

/* Reads what arrived for the backlog read in flight. */
static void backlog_answer(a2__daemon *d)
{
    char err[512];
    int rc = a2__db_result_poll(d->backlog_db, "read the backlog",
                                &d->backlog_res, err, sizeof err);
    if (rc > 0)
        return;
    if (rc < 0) {
        backlog_failed(d, err);
        return;
    }
    d->backlog_busy = 0;
    PGresult *res = d->backlog_res;
    d->backlog_res = NULL;
    if (res)
        backlog_load(d, res);
    else
        backlog_failed(d, "could not read the backlog: no rows");
    PQclear(res);
}

/* A read unanswered for the stream timeout is given up with its
 * connection, and sent again later on a new one. */
static void backlog_overdue(a2__daemon *d)
{
    if (!d->backlog_busy || d->stream_timeout_ms <= 0 ||
        a2__mono_ms() - d->backlog_sent_ms < d->stream_timeout_ms)
        return;
    char err[160];
    snprintf(err, sizeof err,
             "the backlog read got no answer from the server in %.1f s "
             "(--stream-timeout)",
             (double)d->stream_timeout_ms / 1000.0);
    backlog_failed(d, err);
}

/* ---- replication ---- */

static void stream_down(a2__daemon *d, const char *reason)
{
    if (d->repl) {
        d->walsender_pid = a2__repl_backend_pid(d->repl);
        a2__repl_close(d->repl);
        d->repl = NULL;
    }
    /* The server may have restarted: the other connections are then gone
     * too, and would only say so at their next query. Open them afresh. */
    if (d->db) {
        PQfinish(d->db);
        d->db = NULL;
    }
    if (d->tick_db)
        drop_tick_db(d);
    if (d->backlog_db)
        drop_backlog_db(d);
    a2__apply_abort_txn(d->apply);
    d->streaming = 0;
    snprintf(d->down_reason, sizeof d->down_reason, "%s", reason);
    if (d->backoff_ms < BACKOFF_MIN_MS)
        d->backoff_ms = BACKOFF_MIN_MS;
    d->reconnect_at_ms = a2__mono_ms() + d->backoff_ms;
    logline("%s; reconnecting in %d ms", reason, d->backoff_ms);
    d->backoff_ms *= 2;
    if (d->backoff_ms > BACKOFF_MAX_MS)
        d->backoff_ms = BACKOFF_MAX_MS;
}

/* The last commit whose lines the audit file holds: what was applied, or
 * the transaction whose lines end the file on open (a2__audit_resume: it
 * may look partial, but a slot that confirmed it saw all of it durable). */
static uint64_t audit_holds(const a2__daemon *d)
{
    uint64_t have = a2__apply_applied(d->apply);
    return d->resume.partial_lsn > have ? d->resume.partial_lsn : have;
}

/* Drops and recreates an invalidated slot, records the gap. */
static int recreate_slot(a2__daemon *d, const char *why, char *err, size_t errlen)
{
    if (a2__db_drop_slot(d->db, d->slot, err, errlen) != 0)
        return -1;
    int created;
    uint64_t consistent;
    char st[6];
    if (a2__repl_create_slot(d->repl, d->slot, d->plugin, &created, &consistent,
                             err, errlen, st) != 0)
        return -1;
    uint64_t from = a2__apply_applied(d->apply);
    logline("replication slot \"%s\" was %s; recreated at %X/%X, changes "
            "after %X/%X are lost",
            d->slot, why, A2__LSN_ARGS(consistent), A2__LSN_ARGS(from));
    if (a2__apply_gap(d->apply, from, consistent, why, err, errlen) != 0)
        return -1;
    d->gaps++;
    d->need_resync = 1;
    return 0;
}

/*
 * Connects and starts streaming. Returns 0, -1 on a transient failure (retry
 * later), -2 on a fatal one (only at startup).
 */
static int stream_up(a2__daemon *d, int startup, char *err, size_t errlen)
{
    a2__slot_info info;
    if (ensure_db(d, err, errlen) != 0)
        return startup ? -2 : -1;
    /* After a lost connection, "is active for PID" (the old walsender has
     * not noticed yet) and the like are retried with backoff. At startup a
     * walsender of a killed predecessor gets a moment to go away. */
    for (int tries = 0;; tries++) {
        if (a2__db_check(d->db, d->slot, d->plugin, &info, err, errlen) == 0)
            break;
        if (info.active_pid && info.active_pid == d->walsender_pid)
            snprintf(err, errlen,
                     "replication slot \"%s\" is still held by the walsender "
                     "of this consumer's last stream (PID %d), which has not "
                     "exited yet",
                     d->slot, info.active_pid);
        if (!startup)
            return -1;
        if (!strstr(err, "is active for PID") || tries >= 25)
            return -2;
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
    }
    d->repl = a2__repl_connect(d->conninfo, err, errlen);
    if (!d->repl)
        return startup ? -2 : -1;
    char st[6] = "";
    if (!info.exists) {
        int created;
        uint64_t consistent;
        if (a2__repl_create_slot(d->repl, d->slot, d->plugin, &created,
                                 &consistent, err, errlen, st) != 0)
            goto fail;
        if (created) {
            logline("created replication slot \"%s\" at %X/%X", d->slot,
                    A2__LSN_ARGS(consistent));
            uint64_t applied = a2__apply_applied(d->apply);
            if (applied > 0 && consistent > applied) {
                if (a2__apply_gap(d->apply, applied, consistent, "slot missing",
                                  err, errlen) != 0)
                    goto fail;
                d->gaps++;
                d->need_resync = 1;
            }
        }
    } else if (info.lost) {
        if (recreate_slot(d, "invalidated", err, errlen) != 0)
            goto fail;
    } else if (d->audit && info.confirmed > audit_holds(d)) {
        /* The slot confirmed what this audit file does not hold (a file
         * lost, replaced or truncated, or another host's): the stream
         * resumes at the slot, so say what the trail misses. */
        uint64_t from = audit_holds(d);
        logline("audit file \"%s\" ends at %X/%X but slot \"%s\" confirmed "
                "%X/%X: the transitions between are not in the file",
                d->audit_path, A2__LSN_ARGS(from), d->slot,
                A2__LSN_ARGS(info.confirmed));
        if (a2__apply_gap(d->apply, from, info.confirmed, "audit behind slot",
                          err, errlen) != 0)
            goto fail;
        d->gaps++;
        d->need_resync = 1;
    }
    uint64_t start = a2__apply_applied(d->apply);
    if (a2__repl_start(d->repl, d->slot, d->plugin, start, err, errlen, st) !=
        0) {
        if (strcmp(st, "55000") == 0 && strstr(err, "cannot read from")) {
            if (recreate_slot(d, "invalidated", err, errlen) != 0)
                goto fail;
            start = a2__apply_applied(d->apply);
            if (a2__repl_start(d->repl, d->slot, d->plugin, start, err, errlen,
                               st) == 0)
                goto started;
        }
        goto fail;
    }
started:
    d->streaming = 1;
    /* what the stream missed while down, and the start: read it whole */
    a2__backlog_want(d->backlog);
    d->backoff_ms = BACKOFF_MIN_MS;
    d->down_reason[0] = '\0';
    d->last_activity_ms = a2__mono_ms();
    d->last_recv_ms = d->last_activity_ms;
    d->ping_sent_ms = 0;
    d->last_status_ms = 0;
    logline("streaming from slot \"%s\" at %X/%X", d->slot,
            A2__LSN_ARGS(start));
    return 0;
fail:
    a2__repl_close(d->repl);
    d->repl = NULL;
    return startup ? -2 : -1;
}

static uint64_t flush_lsn(const a2__daemon *d)
{
    if (d->audit)
        return a2__audit_durable(d->audit);
    return a2__apply_applied(d->apply);
}

static int send_status(a2__daemon *d, int reply, char *err, size_t errlen)
{
    uint64_t flush = flush_lsn(d);
    if (flush < d->flush_sent)
        flush = d->flush_sent;
    uint64_t write = d->received > flush ? d->received : flush;
    if (a2__repl_feedback(d->repl, write, flush, reply, err, errlen) != 0)
        return -1;
    d->flush_sent = flush;
    d->last_status_ms = a2__mono_ms();
    return 0;
}

static int handle_message(a2__daemon *d, const a2__msg *m, int *reply, char *err,
                          size_t errlen)
{
    if (m->type == 'k') {
        if (m->wal_end > d->received)
            d->received = m->wal_end;
        if (!a2__apply_in_txn(d->apply)) {
            a2__apply_note_position(d->apply, m->wal_end);
            d->lag_seconds = 0;
        }
        if (m->reply_requested)
            *reply = 1;
        return 0;
    }
    if (m->data_start > d->received)
        d->received = m->data_start;
    d->last_activity_ms = d->last_recv_ms; /* this turn's time */
    const a2_change *c = NULL;
    if (a2_decoder_decode(d->dec, m->data, m->len, &c) != 0) {
        const a2_decoder_error *e = a2_decoder_last_error(d->dec);
        d->decode_errors++;
        logline("could not decode the change at %X/%X: %s (byte %zu)",
                A2__LSN_ARGS(m->data_start), e->message, e->offset);
        d->need_resync = 1;
        /* its backlog change is lost: a read must see its transaction */
        if (a2__apply_in_txn(d->apply))
            a2__backlog_taint(d->backlog);
        return 0;
    }
    int rc = a2__apply_change(d->apply, c, m->data_start, err, errlen);
    if (rc < 0)
        return -1;
    if (rc > 0)
        logline("%s", err);
    if (c->action == A2_ACTION_COMMIT && c->has_time) {
        d->lag_seconds = (double)(a2__real_us() - c->time_us) / 1e6;
        /* say so when falling behind, at most once a minute */
        if (d->lag_seconds >= LAG_WARN_SECONDS &&
            a2__mono_ms() - d->last_lag_log_ms >= 60000) {
            d->last_lag_log_ms = a2__mono_ms();
            logline("falling behind: the commit at %X/%X was applied %.1f s "
                    "after it was made (received up to %X/%X)",
                    A2__LSN_ARGS(m->data_start), d->lag_seconds,
                    A2__LSN_ARGS(d->received));
        }
    }
    return 0;
}

/*
 * A stream the server has sent nothing on for half the stream timeout is
 * asked for a reply (a standby status update with its reply flag; the
 * walsender answers with a keepalive). One still silent at the full timeout,
 * and half of it after the request, is dropped and opened again: a stopped
 * or hung walsender, or a network path that lost the connection without
 * closing it. The second condition keeps a stall of this loop (a slow query
 * on the normal connection) from counting against the stream.
 */
static int64_t silence_deadline(const a2__daemon *d)
{
    int64_t half = d->stream_timeout_ms / 2;
    if (!d->ping_sent_ms)
        return d->last_recv_ms + half;
    int64_t a = d->last_recv_ms + d->stream_timeout_ms;
    int64_t b = d->ping_sent_ms + half;
    return a > b ? a : b;
}

static void check_silence(a2__daemon *d, int64_t now)
{
    if (!d->streaming || d->stream_timeout_ms <= 0 || now < silence_deadline(d))
        return;
    if (d->ping_sent_ms) {
        char why[160];
        snprintf(why, sizeof why,
                 "the server sent nothing for %.1f s (--stream-timeout)",
                 (double)(now - d->last_recv_ms) / 1000.0);
        stream_down(d, why);
        return;
    }
    char err[512];
    if (send_status(d, 1, err, sizeof err) != 0)
        stream_down(d, err);
    else
        d->ping_sent_ms = now;
}

/* ---- metrics ---- */

static char *render_metrics(void *ctx, int health, int *healthy)
{
    a2__daemon *d = ctx;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    *healthy = d->streaming;
    if (d->standby || !d->apply) {
        /* a standby, or starting (before the locks): no stream to report */
        *healthy = 0;
        if (health) {
            if (d->standby)
                a2__metrics_appendf(&buf, &len, &cap, "standby: %s\n",
                                    d->standby_msg);
            else
                a2__metrics_appendf(&buf, &len, &cap, "starting\n");
        } else {
            a2__server_stats ss;
            a2__server_get_stats(d->srv, &ss);
            a2__metrics_appendf(
                    &buf, &len, &cap,
                    "# HELP a2_consumer_active 1 when this consumer streams "
                    "the slot, 0 while it is a standby\n"
                    "# TYPE a2_consumer_active gauge\na2_consumer_active 0\n"
                    "# HELP a2_consumer_standby_refusals_total worker hellos "
                    "refused as a standby\n"
                    "# TYPE a2_consumer_standby_refusals_total counter\n"
                    "a2_consumer_standby_refusals_total %" PRIu64 "\n"
                    "# HELP a2_consumer_build_info the release and the "
                    "schema and wire protocol versions it speaks\n"
                    "# TYPE a2_consumer_build_info gauge\n"
                    "a2_consumer_build_info{version=\"%s\",schema=\"%s\","
                    "wire=\"%d\"} 1\n",
                    ss.standby_refusals, A2_VERSION, A2_SCHEMA_VERSION,
                    A2_WIRE_VERSION);
        }
        return buf;
    }
    if (health) {
        if (d->streaming)
            a2__metrics_appendf(&buf, &len, &cap, "ok\n");
        else
            a2__metrics_appendf(&buf, &len, &cap, "replication down: %s\n",
                                d->down_reason[0] ? d->down_reason
                                                  : "starting");
        return buf;
    }
    a2__apply_stats as;
    a2__apply_get_stats(d->apply, &as);
    a2__server_stats ss;
    a2__server_get_stats(d->srv, &ss);
    /* The server's WAL position, as the tick connection last read it. */
    uint64_t current = d->server_wal_lsn;
    uint64_t flush = d->flush_sent;
    uint64_t lag = current > flush ? current - flush : 0;
#define G(name, help, type, fmt, val)                                          \
    a2__metrics_appendf(&buf, &len, &cap,                                      \
                        "# HELP " name " " help "\n# TYPE " name " " type      \
                        "\n" name " " fmt "\n",                                \
                        val)
    a2__metrics_appendf(
            &buf, &len, &cap,
            "# HELP a2_consumer_build_info the release and the schema and "
            "wire protocol versions it speaks\n"
            "# TYPE a2_consumer_build_info gauge\n"
            "a2_consumer_build_info{version=\"%s\",schema=\"%s\","
            "wire=\"%d\"} 1\n",
            A2_VERSION, A2_SCHEMA_VERSION, A2_WIRE_VERSION);
    G("a2_consumer_up", "1 while streaming from the slot", "gauge", "%d",
      d->streaming);
    G("a2_consumer_active",
      "1 when this consumer streams the slot, 0 while it is a standby",
      "gauge", "%d", 1);
    G("a2_consumer_standby_refusals_total",
      "worker hellos refused as a standby", "counter", "%" PRIu64,
      ss.standby_refusals);
    G("a2_consumer_lag_bytes",
      "WAL bytes between the server and the confirmed "
      "flush position",
      "gauge", "%" PRIu64, lag);
    G("a2_consumer_lag_seconds", "age of the last applied commit when applied",
      "gauge", "%.3f", d->lag_seconds);
    G("a2_consumer_confirmed_lsn", "flush LSN last confirmed to the server",
      "gauge", "%" PRIu64, flush);
    G("a2_consumer_applied_lsn", "end LSN of the last applied commit", "gauge",
      "%" PRIu64, a2__apply_applied(d->apply));
    G("a2_consumer_changes_decoded_total", "row changes decoded", "counter",
      "%" PRIu64, as.changes);
    G("a2_consumer_transactions_total", "transactions applied", "counter",
      "%" PRIu64, as.transactions);
    G("a2_consumer_decode_errors_total", "messages that did not decode",
      "counter", "%" PRIu64, d->decode_errors);
    G("a2_consumer_presence_expired_total",
      "presence fields pushed as expired at their time", "counter", "%" PRIu64,
      as.presence_expired);
    G("a2_consumer_forged_ticks_total",
      "expiry tick messages without this consumer's secret, ignored",
      "counter", "%" PRIu64, as.forged_ticks);
    a2__metrics_appendf(
            &buf, &len, &cap,
            "# HELP a2_consumer_wakeups_sent_total wake-ups sent to workers\n"
            "# TYPE a2_consumer_wakeups_sent_total counter\n"
            "a2_consumer_wakeups_sent_total{type=\"wake\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"log\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"cleared\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"resync\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"presence\"} %" PRIu64 "\n",
            ss.wakes_sent, ss.logs_sent, ss.cleared_sent, ss.resyncs_sent,
            ss.presence_sent);
    G("a2_consumer_timer_wakeups_total",
      "wake-ups caused by lapsed leases "
      "and retry times",
      "counter", "%" PRIu64, as.timer_wakes);
    G("a2_consumer_workers", "workers connected", "gauge", "%" PRIu64,
      ss.workers);
    G("a2_consumer_connections", "worker connections open, with or without "
      "a hello", "gauge", "%" PRIu64, ss.connections);
    G("a2_consumer_auth_failures_total",
      "worker hellos with a wrong or missing token (each answered after 1 s)",
      "counter", "%" PRIu64, ss.auth_failures);
    G("a2_consumer_connections_refused_total",
      "worker connections refused: past --max-connections or no descriptor "
      "free", "counter", "%" PRIu64, ss.refused);
    G("a2_consumer_queue_overflows_total",
      "worker queues dropped for a "
      "resync",
      "counter", "%" PRIu64, ss.overflows);
    G("a2_consumer_protocol_errors_total",
      "workers disconnected for bad "
      "frames",
      "counter", "%" PRIu64, ss.protocol_errors);
    G("a2_consumer_timers_pending", "lease and retry timers pending", "gauge",
      "%zu", a2__timers_count(d->timers));
    G("a2_consumer_audit_lines_total", "audit lines written", "counter",
      "%" PRIu64, as.audit_lines);
    G("a2_consumer_reconnects_total", "replication reconnect attempts",
      "counter", "%" PRIu64, d->reconnects);
    G("a2_consumer_gaps_total", "slots recreated with a data gap", "counter",
      "%" PRIu64, d->gaps);
#undef G
    a2__hist_render(&ss.wake_latency, "a2_consumer_commit_to_wake_seconds",
                    "time from a commit (its timestamp in the stream) to its "
                    "wake-up frame handed to a worker's socket",
                    &buf, &len, &cap);
    a2__backlog_render(d->backlog, &buf, &len, &cap);
    return buf;
}

/* ---- main loop ---- */

/*
 * Group fsync: in the background when the group is due (FSYNC_GROUP_MS after
 * its first line, or FSYNC_GROUP_LINES lines, or a status update is due), so
 * the loop never waits for the disk; wait = fsync here (the clean stop). The
 * group's lines are written with one write(2) as its fsync starts.
 */
static int sync_audit(a2__daemon *d, int due, int wait, char *err, size_t errlen)
{
    if (!d->audit)
        return 0;
    if (wait)
        return a2__audit_sync(d->audit, 0, err, errlen);
    if (a2__audit_sync_finish(d->audit, err, errlen) != 0)
        return -1;
    if (!a2__audit_dirty(d->audit) || a2__audit_busy(d->audit))
        return 0;
    int64_t since = a2__audit_dirty_since(d->audit);
    if (!due && a2__mono_ms() - since < FSYNC_GROUP_MS &&
        a2__audit_pending_lines(d->audit) < FSYNC_GROUP_LINES)
        return 0;
    return a2__audit_sync_start(d->audit, STATE_INTERVAL_MS, err, errlen);
}

static int handle_signals(a2__daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            char err[512];
            if (d->audit && a2__audit_reopen(d->audit, err, sizeof err) != 0)
                logline("%s", err);
            else if (d->audit)
                logline("reopened audit file \"%s\"", d->audit_path);
        } else {
            d->stop = 1;
        }
    }
    return 0;
}

/*
 * Becomes the active consumer of the slot (active.h), a standby until then:
 * the worker listener answers every hello with a "standby" error, /healthz
 * says "standby". 0 active; 1 a signal stopped it first; -1 an error at the
 * first step (the database unreachable at start: fatal, as for the stream).
 */
static int wait_active(a2__daemon *d)
{
    char msg[512], err[512];
    int64_t next_ms = 0, last_error_ms = 0;
    for (;;) {
        int64_t now = a2__mono_ms();
        if (now >= next_ms) {
            int r = a2__active_step(d->active, msg, sizeof msg, err,
                                    sizeof err);
            next_ms = now + STANDBY_POLL_MS;
            if (r == 1) {
                if (d->standby) {
                    logline("taking over slot \"%s\": this consumer is "
                            "active now",
                            d->slot);
                    d->standby = 0;
                    if (a2__server_set_standby(d->srv, NULL) != 0)
                        return -1;
                }
                return 0;
            }
            if (r < 0 && !d->standby) {
                logline("%s", err);
                return -1;
            }
            if (r < 0 && now - last_error_ms >= 10000) {
                last_error_ms = now;
                logline("standby: %s; trying again", err);
            }
            if (r < 0)
                next_ms = now + 1000;
            if (r == 0 && strcmp(msg, d->standby_msg) != 0) {
                snprintf(d->standby_msg, sizeof d->standby_msg, "%s", msg);
                logline("standby: %s; taking over when it ends", msg);
                if (a2__server_set_standby(d->srv, msg) != 0)
                    return -1;
            }
            d->standby = 1;
        }
        struct pollfd pfd[4];
        int n = 0, imet = -1, ilock = -1;
        pfd[n++] = (struct pollfd){d->sigfd, POLLIN, 0};
        pfd[n++] = (struct pollfd){a2__server_fd(d->srv), POLLIN, 0};
        if (d->met) {
            imet = n;
            pfd[n++] = (struct pollfd){a2__metrics_fd(d->met), POLLIN, 0};
        }
        if (a2__active_fd(d->active) >= 0) {
            ilock = n;
            pfd[n++] = (struct pollfd){a2__active_fd(d->active), POLLIN, 0};
        }
        int64_t timeout = next_ms - a2__mono_ms();
        int pr = poll(pfd, (nfds_t)n, timeout < 0 ? 0 : (int)timeout);
        if (pr < 0 && errno != EINTR) {
            logline("could not poll: %s", strerror(errno));
            return -1;
        }
        if (pr > 0 && (pfd[0].revents & POLLIN))
            handle_signals(d);
        if (d->stop)
            return 1;
        if (pr > 0 && pfd[1].revents && a2__server_run(d->srv) != 0) {
            logline("the worker server failed");
            return -1;
        }
        if (imet >= 0 && pr > 0 && (pfd[imet].revents & POLLIN))
            a2__metrics_handle(d->met);
        if (ilock >= 0 && pr > 0 && pfd[ilock].revents)
            next_ms = 0; /* the lock's answer: look at once */
    }
}

static int run(a2__daemon *d)
{
    char err[1024];
    int more = 0;
    for (;;) {
        if (d->stop)
            break;
        int64_t now = a2__mono_ms();
        /* deadlines */
        int64_t timeout = 1000;
        int64_t next_timer = a2__timers_next(d->timers);
        if (next_timer != INT64_MAX) {
            int64_t t = next_timer - a2__real_ms();
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->streaming) {
            int64_t t = d->last_status_ms + d->status_interval_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
            t = d->last_activity_ms + d->heartbeat_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
            if (d->stream_timeout_ms > 0) {
                t = silence_deadline(d) - now;
                if (t < timeout)
                    timeout = t < 0 ? 0 : t;
            }
        } else {
            int64_t t = d->reconnect_at_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->streaming && !d->tick_busy &&
            a2__apply_expiry_due(d->apply) != INT64_MAX) {
            int64_t t = a2__apply_expiry_due(d->apply) - a2__real_ms();
            int64_t next = expire_next_ms(d) - now;
            if (next > t)
                t = next;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->tick_busy && d->stream_timeout_ms > 0) {
            int64_t t = d->tick_sent_ms + d->stream_timeout_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->rebuild_at_ms) {
            int64_t t = d->rebuild_at_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->streaming && !d->backlog_busy &&
            a2__backlog_wants_read(d->backlog)) {
            int64_t t = d->backlog_next_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->backlog_busy && d->stream_timeout_ms > 0) {
            int64_t t = d->backlog_sent_ms + d->stream_timeout_ms - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }
        if (d->audit && a2__audit_dirty(d->audit) &&
            !a2__audit_busy(d->audit)) {
            int64_t t = a2__audit_dirty_since(d->audit) + FSYNC_GROUP_MS - now;
            if (t < timeout)
                timeout = t < 0 ? 0 : t;
        }

        struct pollfd pfd[8];
        int n = 0, irepl = -1, isrv, imet = -1, isig, itick = -1, iback = -1,
            ilock = -1;
        if (!d->lock_lost && a2__active_fd(d->active) >= 0) {
            ilock = n;
            pfd[n++] = (struct pollfd){a2__active_fd(d->active), POLLIN, 0};
        }
        if (d->audit && a2__audit_event_fd(d->audit) >= 0)
            pfd[n++] = (struct pollfd){a2__audit_event_fd(d->audit), POLLIN, 0};
        isig = n;
        pfd[n++] = (struct pollfd){d->sigfd, POLLIN, 0};
        isrv = n;
        pfd[n++] = (struct pollfd){a2__server_fd(d->srv), POLLIN, 0};
        if (d->met) {
            imet = n;
            pfd[n++] = (struct pollfd){a2__metrics_fd(d->met), POLLIN, 0};
        }
        if (d->streaming) {
            irepl = n;
            pfd[n++] = (struct pollfd){a2__repl_socket(d->repl), POLLIN, 0};
        }
        if (d->tick_busy) {
            itick = n;
            short ev = POLLIN;
            if (PQflush(d->tick_db) == 1)
                ev |= POLLOUT;
            pfd[n++] = (struct pollfd){PQsocket(d->tick_db), ev, 0};
        }
        if (d->backlog_busy) {
            iback = n;
            short ev = POLLIN;
            if (PQflush(d->backlog_db) == 1)
                ev |= POLLOUT;
            pfd[n++] = (struct pollfd){PQsocket(d->backlog_db), ev, 0};
        }
        if (more)
            timeout =
                    0; /* libpq may hold messages the socket no longer shows */
        int pr = poll(pfd, (nfds_t)n, (int)timeout);
        if (pr < 0 && errno != EINTR) {
            logline("could not poll: %s", strerror(errno));
            return 1;
        }
        if (pr > 0 && (pfd[isig].revents & POLLIN))
            handle_signals(d);
        if (irepl >= 0 && pr > 0 && pfd[irepl].revents)
            a2__repl_readable(d->repl);
        if (d->stop)
            break;
        if (ilock >= 0 && pr > 0 && pfd[ilock].revents &&
            a2__active_check(d->active, err, sizeof err) != 0) {
            /* Without its lock a consumer must not stream: a standby may
             * be taking over. Stream again only once the lock is back. */
            d->lock_lost = 1;
            if (d->streaming)
                stream_down(d, err);
            else
                logline("%s", err);
        }
        if (pr > 0 && pfd[isrv].revents) {
            if (a2__server_run(d->srv) != 0) {
                logline("the worker server failed");
                return 1;
            }
        }
        if (imet >= 0 && pr > 0 && (pfd[imet].revents & POLLIN))
            a2__metrics_handle(d->met);
        if (itick >= 0 && pr > 0 && pfd[itick].revents)
            tick_answer(d);
        tick_overdue(d);
        if (iback >= 0 && pr > 0 && pfd[iback].revents)
            backlog_answer(d);
        backlog_overdue(d);

        /* reconnect */
        if (!d->streaming && a2__mono_ms() >= d->reconnect_at_ms) {
            d->reconnects++;
            int lock = d->lock_lost ? a2__active_retake(d->active, err,
                                                        sizeof err)
                                    : 1;
            if (lock == 0) {
                logline("another a2-consumer took the active lock of slot "
                        "\"%s\" while this one had lost it: stopping",
                        d->slot);
                return 1;
            }
            if (lock == 1)
                d->lock_lost = 0;
            if (lock < 0 || stream_up(d, 0, err, sizeof err) != 0)
                stream_down(d, err);
        }

        /* stream */
        int reply = 0;
        more = 0;
        if (d->streaming) {
            for (int i = 0; i < MAX_MESSAGES_PER_TURN; i++) {
                a2__msg m;
                int rc = a2__repl_read(d->repl, &m, err, sizeof err);
                if (rc == 0)
                    break;
                if (i == MAX_MESSAGES_PER_TURN - 1)
                    more = 1;
                if (rc < 0) {
                    stream_down(d, err);
                    break;
                }
                if (i == 0) {
                    d->last_recv_ms = a2__mono_ms();
                    d->ping_sent_ms = 0;
                }
                if (handle_message(d, &m, &reply, err, sizeof err) != 0) {
                    logline("%s", err);
                    return 1;
                }
            }
        }

        int resync = d->need_resync;
        if (resync) {
            d->need_resync = 0;
            d->rebuild_at_ms = a2__mono_ms();
            a2__backlog_want(d->backlog);
        }
        if (d->rebuild_at_ms && a2__mono_ms() >= d->rebuild_at_ms) {
            if (rebuild_timers(d, err, sizeof err) == 0) {
                d->rebuild_at_ms = 0;
            } else {
                /* the stream cleared what this read replaces: try again */
                logline("%s; reading again in %d ms", err, REBUILD_RETRY_MS);
                d->rebuild_at_ms = a2__mono_ms() + REBUILD_RETRY_MS;
            }
        }
        if (resync)
            a2__server_resync_all(d->srv);
        backlog_send(d);

        a2__apply_fire_timers(d->apply, a2__real_ms());
        expire_presence(d);
        a2__server_flush(d->srv); /* this turn's wake-ups, one send each */

        now = a2__mono_ms();
        check_silence(d, now);
        int status_due = d->streaming &&
                         now - d->last_status_ms >= d->status_interval_ms;
        if (sync_audit(d, reply || status_due, 0, err, sizeof err) != 0) {
            logline("%s", err);
            return 1;
        }
        a2__server_set_lsn(d->srv, a2__apply_applied(d->apply));
        if (d->streaming && (reply || status_due)) {
            if (send_status(d, 0, err, sizeof err) != 0)
                stream_down(d, err);
        }
        /* heartbeat: a quiet database still moves the slot (a message in
         * flight on the tick connection moves it too, or is overdue; a WAL
         * position read does not, and is waited for) */
        if (d->streaming && now - d->last_activity_ms >= d->heartbeat_ms &&
            now - d->last_heartbeat_ms >= d->heartbeat_ms &&
            !(d->tick_busy && d->tick_kind == TICK_WAL)) {
            d->last_heartbeat_ms = now;
            d->last_activity_ms = now;
            if (!d->tick_busy)
                tick_send(d, TICK_HEARTBEAT);
        }
        /* the server's WAL position for the lag metric, once a second */
        if (d->met && !d->tick_busy && now - d->wal_read_ms >= 1000) {
            d->wal_read_ms = now;
            tick_send(d, TICK_WAL);
        }
    }
    /* clean stop */
    if (sync_audit(d, 1, 1, err, sizeof err) != 0)
        logline("%s", err);
    if (d->streaming) {
        uint64_t flush = flush_lsn(d);
        if (flush < d->flush_sent)
            flush = d->flush_sent;
        a2__repl_stop(d->repl, d->received > flush ? d->received : flush,
                      flush);
        logline("stopped at %X/%X", A2__LSN_ARGS(flush));
    }
    return 0;
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
    if (d->db)
        PQfinish(d->db);
    if (d->tick_db)
        PQfinish(d->tick_db);
    PQclear(d->backlog_res);
    if (d->backlog_db)
        PQfinish(d->backlog_db);
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
    d.heartbeat_ms = 10000;
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
            logline("%s", err);
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
        logline("could not create signalfd: %s", strerror(errno));
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
            .log = server_log,
            .max_connections = fit_connections(
                    d.max_connections ? d.max_connections
                                      : A2C_DEFAULT_MAX_CONNECTIONS),
    };
    d.srv = a2__server_new(&so, err, sizeof err);
    if (!d.srv) {
        logline("%s", err);
        goto done;
    }
    if (d.metrics_host) {
        d.met = a2__metrics_new(d.metrics_host, d.metrics_port, render_metrics,
                                &d, err, sizeof err);
        if (!d.met) {
            logline("%s", err);
            goto done;
        }
    }
    /* Active or standby: the audit file is opened (and repaired) only by
     * the consumer that holds the locks. */
    d.active = a2__active_new(d.conninfo, d.slot, d.audit_path, err,
                              sizeof err);
    if (!d.active) {
        logline("%s", err);
        goto done;
    }
    int w = wait_active(&d);
    if (w != 0) {
        rc = w > 0 ? 0 : 1;
        goto done;
    }

    if (d.audit_path) {
        d.audit = a2__audit_open(d.audit_path, &d.resume, err, sizeof err);
        if (!d.audit) {
            logline("%s", err);
            goto done;
        }
        if (d.resume.truncated_bytes)
            logline("cut a torn last line of %zu bytes from audit file \"%s\"",
                    d.resume.truncated_bytes, d.audit_path);
    }
    d.timers = a2__timers_new();
    d.dec = a2_decoder_new();
    /* the backlog gauges are only for /metrics: without it, no reads */
    d.backlog = d.metrics_host ? a2__backlog_new() : NULL;
    a2__sink sink = {
            &d,          sink_wake,       sink_log, sink_cleared, sink_presence,
            sink_resync};
    d.apply = a2__apply_new(d.audit, d.timers, &sink, &d.resume);
    if (d.apply) {
        /* The secret this run's expiry ticks carry: a tick any role could
         * emit without it is not acted on. */
        unsigned char raw[A2C_TICK_SECRET_LEN / 2];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
            logline("could not draw a secret for the expiry ticks: %s",
                    strerror(errno));
            goto done;
        }
        for (size_t i = 0; i < sizeof raw; i++)
            snprintf(d.tick_secret + 2 * i, 3, "%02x", raw[i]);
        a2__apply_set_tick_secret(d.apply, d.tick_secret);
    }
    if (d.apply)
        a2__apply_set_backlog(d.apply, d.backlog);
    if (!d.timers || !d.dec || !d.apply || (d.metrics_host && !d.backlog)) {
        logline("out of memory");
        goto done;
    }

    int up = stream_up(&d, 1, err, sizeof err);
    if (up != 0) {
        logline("%s", err);
        goto done;
    }
    if (rebuild_timers(&d, err, sizeof err) != 0) {
        logline("%s", err);
        goto done;
    }
    logline("ready: %zu timers, resume after %X/%X", a2__timers_count(d.timers),
            A2__LSN_ARGS(a2__apply_applied(d.apply)));
    a2__server_resync_all(d.srv);
    d.need_resync = 0;
    rc = run(&d);
done:
    cleanup(&d);
    return rc;
}
