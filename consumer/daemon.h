/*
 * The a2-consumer daemon's state and what its files share:
 *   main.c         options and wiring: builds an a2__daemon, calls the loop
 *   loop.c         the poll() loop: events, signals, deadlines, the active
 *                  lock's wait, the snapshot /metrics is rendered from
 *   stream.c       the replication stream: slot, START_REPLICATION, its
 *                  messages, standby status updates, up and down
 *   queries.c      the normal connections: the timer and presence read, the
 *                  tick connection (heartbeats, expiry ticks, WAL position),
 *                  the backlog reads
 *   sinks.c        where the parts' output goes: the log on stderr, the
 *                  applier's wake-ups to the worker server
 *   metrics_text.c the text of /metrics and /healthz, from a snapshot
 * One thread runs all of it.
 */
#ifndef A2_CONSUMER_DAEMON_H
#define A2_CONSUMER_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "a2/decoder.h"
#include "active.h"
#include "apply.h"
#include "audit.h"
#include "backlog.h"
#include "metrics.h"
#include "repl.h"
#include "server.h"
#include "timers.h"

/* A read of the normal connection that failed (the timers and presence
 * fields, the backlog) goes again after this. */
#define A2C_REBUILD_RETRY_MS 1000

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
    int trace_wakes; /* --trace-wakes */
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
    int64_t last_recv_ms;    /* the last message of any kind from the server */
    int64_t ping_sent_ms;    /* when a reply was requested since it, or 0 */
    int walsender_pid;       /* of the last stream, which may outlive it */
    PGconn *tick_db;         /* heartbeats and presence expiry ticks:
                                nonblocking, their own connection */
    int tick_busy;           /* a message was sent and has not answered yet */
    PGresult *tick_res;      /* its answer, as it arrives */
    int tick_kind;           /* which (queries.c) */
    uint64_t server_wal_lsn; /* the server's WAL position, last read */
    char tick_secret[A2C_TICK_SECRET_LEN + 1]; /* carried by its ticks */
    int64_t wal_read_ms;       /* when it was asked for (mono) */
    int64_t tick_sent_ms;      /* when (mono) */
    int64_t expire_sent_ms;    /* the last presence expiry tick (mono) */
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

/* ---- sinks.c ---- */

/* "a2-consumer: <line>" on stderr (a line past 1 KiB is cut). */
__attribute__((format(printf, 1, 2))) void a2__daemon_log(const char *fmt, ...);

/* The worker server's log callback (a2__server_options.log). */
void a2__sinks_server_log(void *arg, const char *line);

/* The applier's sink: wake-ups, logs, clears and presence go to d's worker
 * server, a resync request sets d->need_resync. */
a2__sink a2__sinks_for(a2__daemon *d);

/* ---- queries.c ---- */

/* Opens the normal connection, or checks and resets the one open. 0, or -1
 * with the reason in err. */
int a2__queries_ensure_db(a2__daemon *d, char *err, size_t errlen);

/* Reads the live claims and retry holds and the live presence fields. 0, or
 * -1 with the reason in err: the caller reads them all again later. */
int a2__queries_rebuild_timers(a2__daemon *d, char *err, size_t errlen);

/* Closes the normal, tick and backlog connections (the next use opens them
 * again); a message or read in flight is forgotten. */
void a2__queries_reset(a2__daemon *d);

/* When the next presence expiry tick may be sent (mono ms). */
int64_t a2__queries_expire_next_ms(const a2__daemon *d);

/* Sends a presence expiry tick when the earliest kept field is due. */
void a2__queries_expire_presence(a2__daemon *d);

/* Sends a heartbeat when the stream was idle for --heartbeat-interval. */
void a2__queries_heartbeat(a2__daemon *d, int64_t now);

/* Asks for the server's WAL position (the lag metric), once a second while
 * there is a metrics endpoint. */
void a2__queries_read_wal(a2__daemon *d, int64_t now);

/* Reads the answer of the tick connection (its descriptor is readable). */
void a2__queries_tick_answer(a2__daemon *d);

/* Gives up a tick message unanswered for the stream timeout. */
void a2__queries_tick_overdue(a2__daemon *d);

/* Sends the backlog read when one is wanted and may go. */
void a2__queries_backlog_send(a2__daemon *d);

/* Reads what arrived for the backlog read in flight. */
void a2__queries_backlog_answer(a2__daemon *d);

/* Gives up a backlog read unanswered for the stream timeout. */
void a2__queries_backlog_overdue(a2__daemon *d);

/* ---- stream.c ---- */

/* Connects and starts streaming. Returns 0, -1 on a transient failure
 * (retry later), -2 on a fatal one (only at startup). */
int a2__stream_up(a2__daemon *d, int startup, char *err, size_t errlen);

/* Closes the stream and the other connections, logs reason and sets when
 * to reconnect (with backoff). */
void a2__stream_down(a2__daemon *d, const char *reason);

/*
 * Reads and applies what the stream has, at most one turn's worth: *reply
 * is set when the server asked for a status update, *more when messages may
 * be left. A broken stream is taken down. 0, or -1 on a fatal error
 * (logged): an audit write failed.
 */
int a2__stream_read(a2__daemon *d, int *reply, int *more);

/* Sends a standby status update (reply: asks the server for one). 0, or
 * -1 with the reason in err. */
int a2__stream_send_status(a2__daemon *d, int reply, char *err, size_t errlen);

/* When the silent stream is next looked at (mono ms; --stream-timeout). */
int64_t a2__stream_silence_deadline(const a2__daemon *d);

/* Asks a silent stream for a reply, or takes it down when it stays silent. */
void a2__stream_check_silence(a2__daemon *d, int64_t now);

/* The clean stop: confirms what is durable and ends the stream. */
void a2__stream_stop(a2__daemon *d);

/* ---- loop.c ---- */

/*
 * Becomes the active consumer of the slot (active.h), a standby until then.
 * 0 active; 1 a signal stopped it first; -1 an error (logged).
 */
int a2__loop_wait_active(a2__daemon *d);

/*
 * Starts the stream, reads the timers, then runs the loop until a signal
 * stops it. The exit status: 0 on a clean stop, 1 on an error (logged).
 */
int a2__loop_run(a2__daemon *d);

/* The metrics endpoint's render callback (metrics.h; ctx: the daemon):
 * fills a snapshot of the daemon, then renders both answers from it. */
void a2__loop_publish(void *ctx, char **text, char **health, int *healthy);

/* ---- metrics_text.c ---- */

/* What /metrics and /healthz report, copied from the daemon. */
typedef struct {
    int standby;  /* waiting for the active lock */
    int starting; /* before the locks: no applier yet */
    int streaming;
    char standby_msg[512]; /* who holds the lock */
    char down_reason[256];
    a2__server_stats server;
    /* the rest: only while active (neither standby nor starting) */
    a2__apply_stats apply;
    uint64_t applied;        /* end LSN of the last applied commit */
    uint64_t server_wal_lsn; /* the server's WAL position, last read */
    uint64_t flush_sent;
    double lag_seconds;
    uint64_t decode_errors;
    size_t timers;
    uint64_t reconnects;
    uint64_t gaps;
    /* its gauges are rendered by backlog.h from the backlog itself:
     * borrowed, read-only, valid until the loop goes on (NULL: none kept) */
    const a2__backlog *backlog;
} a2__daemon_snapshot;

/* The /metrics text (health = 0) or the /healthz answer (health = 1), with
 * *healthy; a new malloc'd string, or NULL when out of memory. */
char *a2__daemon_render(const a2__daemon_snapshot *s, int health, int *healthy);

#endif
