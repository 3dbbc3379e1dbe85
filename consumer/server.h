/*
 * The worker server of a2-consumer: accepts workers on a Unix socket and
 * optionally TCP, speaks wire protocol v1 (include/a2/wire.h), keeps each
 * worker's subscriptions, routes wake-ups to them and queues what they have
 * not read yet.
 *
 * Single-threaded. The server owns one epoll descriptor (a2__server_fd) that
 * the daemon's loop polls for readability; a2__server_run then does all the
 * pending socket work without blocking. Nothing here ever blocks on a worker:
 * a worker's outbound queue coalesces by (consumer, session, cursor key) and,
 * past its bound, is dropped and replaced by one `resync` sent when the worker
 * drains.
 *
 * Routing. A wake-up for (consumer, session) goes to one live subscriber of
 * the consumer chosen by rendezvous hashing on the session
 * (A2C_ROUTE_AFFINITY), or to every subscriber (A2C_ROUTE_BROADCAST). When a
 * worker leaves, the sessions it was routed are moved: the remaining
 * subscribers of its consumers get a `resync` naming those sessions (or all,
 * when unknown).
 *
 * Details of the implementation (server.c, server_*.c):
 * - A worker's first frame must be `hello` with v = 1 (over TCP with the
 *   token, compared in constant time); the reply is `welcome` {v, lsn}. Each
 *   `subscribe` is answered with `resync` {consumer, nil}; `ping` with `pong`.
 * - A bad frame (malformed, over 64 KiB, unknown or unexpected type, wrong
 *   version or token, no hello in time) gets an `error` {code, message}
 *   (codes A2_WIRE_CODE_* of a2/wire.h); the server then shuts the socket
 *   for writing and closes it on EOF or after 500 ms, so the worker reads the
 *   error rather than a reset. Other workers are not affected.
 * - The worker identity for routing is the hash of its hello name; workers
 *   should use unique names (two workers of the same name: the older one
 *   takes every session until it leaves).
 * - Up to 4096 distinct sessions routed to a worker are remembered for the
 *   move on departure; past that, the move is a `resync` of all sessions
 *   (always correct, less targeted). A moved session goes where its next
 *   wake-up will (rendezvous over the remaining subscribers) while the
 *   departure's move_budget lasts; the rest go to a subscriber chosen by
 *   the session's hash alone (its next wake-up may go to another: still
 *   correct, one head off its worker).
 * - A worker that never reads costs at most queue_limit frames plus 64 KiB.
 *   On overflow the queue is dropped (stats.overflows counts it), frames are
 *   dropped until the socket drains, then the worker gets one `resync`
 *   {consumer, nil} per subscribed consumer. Presence patches dropped that
 *   way are not replayed.
 * - Stats count frames handed to the socket (wakes coalesced in a queue
 *   count once).
 */
#ifndef A2_CONSUMER_SERVER_H
#define A2_CONSUMER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

typedef struct a2__server a2__server;

typedef enum {
    A2C_ROUTE_AFFINITY = 0,
    A2C_ROUTE_BROADCAST = 1,
} a2__route;

typedef struct {
    const char *unix_path; /* socket path; NULL for none */
    const char *tcp_host;  /* NULL for no TCP listener */
    const char *tcp_port;  /* "0" picks a free port (a2__server_tcp_port) */
    const char *token;     /* required when tcp_host is set */
    a2__route route;
    /* Frames queued per worker before overflow; 0 = 10000. */
    size_t queue_limit;
    /* A worker that sends no hello in time is dropped; 0 = 5000 ms. */
    int hello_timeout_ms;
    /* A worker that said hello and has subscribed to nothing this long
     * after it is dropped; 0 = 10000 ms. */
    int subscribe_timeout_ms;
    /* Connections at once (past it a new one gets an error frame and is
     * closed); 0 = A2C_DEFAULT_MAX_CONNECTIONS. */
    size_t max_connections;
    /* Where the server's log lines go (failed authentications); NULL: none. */
    void (*log)(void *arg, const char *line);
    void *log_arg;
    /* A failed authentication is answered this long after the hello, and
     * at most one in auth_spacing_ms; 0 = 1000 and 100. */
    int auth_delay_ms;
    int auth_spacing_ms;
    /* Wake-ups of commits carry their `trace` (a2-consumer --trace-wakes). */
    int trace_wakes;
    /* Rendezvous scores one departure may compute for one consumer (each
     * moved session costs one a live subscriber); past it the rest of its
     * sessions are spread by their hash alone, so that many workers leaving
     * at once cannot stall the loop; 0 = A2C_DEFAULT_MOVE_BUDGET. */
    size_t move_budget;
} a2__server_options;

#define A2C_DEFAULT_MOVE_BUDGET 262144

#define A2C_DEFAULT_MAX_CONNECTIONS 16384

/* Log subscriptions (a subscribe with log_types, or nil for every type):
 * at most A2C_MAX_LOG_SUBS per connection and A2C_MAX_LOG_SUBS_ALL on the
 * server, each naming at most A2C_MAX_LOG_TYPES types. Past a cap the
 * subscribe is refused with an error frame and the connection closed. */
#define A2C_MAX_LOG_SUBS     64
#define A2C_MAX_LOG_SUBS_ALL 1024
#define A2C_MAX_LOG_TYPES    256

/* Counters for metrics. */
typedef struct {
    uint64_t workers; /* connected and said hello */
    uint64_t wakes_sent;
    uint64_t logs_sent;
    uint64_t cleared_sent;
    uint64_t resyncs_sent;
    uint64_t presence_sent;
    uint64_t overflows;
    uint64_t protocol_errors;
    uint64_t standby_refusals; /* hellos a standby refused */
    uint64_t connections;   /* open now, with or without a hello */
    uint64_t refused;       /* connections refused: the cap, or no descriptor */
    uint64_t auth_failures; /* hellos with a wrong or missing token */
    uint64_t log_consumers; /* log consumers with a live subscriber */
    uint64_t log_checks;    /* subscriptions looked at to route `log`s */
    /* From a wake-up's commit (its time in the stream) to its frame moved
     * to the worker's socket, when wakes_sent counts it; wake-ups of
     * timers carry no commit and are not in it. */
    a2__hist wake_latency;
} a2__server_stats;

/*
 * Opens the listeners. Returns NULL with a one-line reason in err (e.g.
 * "could not bind unix:/run/a2.sock: Address already in use").
 */
a2__server *a2__server_new(const a2__server_options *opts, char *err,
                           size_t errlen);

/* Closes every connection and listener, removes the Unix socket. NULL-safe. */
void a2__server_free(a2__server *srv);

/* The descriptor to poll for readability (an epoll fd). */
int a2__server_fd(const a2__server *srv);

/* The bound TCP port, or 0 without a TCP listener. */
int a2__server_tcp_port(const a2__server *srv);

/*
 * Does every pending accept, read, write and timeout without blocking;
 * returns 0, or -1 when the server itself failed (not a worker).
 */
int a2__server_run(a2__server *srv);

/*
 * Sends what the wake-up calls below queued since the last flush
 * (a2__server_run flushes too): the daemon calls it once per turn, after the
 * turn's replication messages, so a burst of wake-ups leaves in one write per
 * worker. A worker whose socket is full is written when it drains.
 */
void a2__server_flush(a2__server *srv);

/*
 * A standby (message set) answers every hello, once its token is checked,
 * with an `error` frame of code "standby" and that message, and closes;
 * NULL makes it active. Connections already live are not touched. 0, or -1
 * when out of memory.
 */
int a2__server_set_standby(a2__server *srv, const char *message);

/* The current LSN the daemon has applied, sent in `welcome`. */
void a2__server_set_lsn(a2__server *srv, uint64_t lsn);

/* `wake` for (consumer, session): routed to one subscriber (or all). xid:
 * the commit's transaction id, for the claim to wait for (0: none). */
void a2__server_wake(a2__server *srv, const char *consumer, const char *session,
                     const char *cursor_key, int64_t head, uint64_t lsn,
                     uint64_t xid);

/* a2__server_wake for a commit whose times on its way are trace_us
 * (A2_WIRE_TRACE_COMMIT, _SENT, _RECV: µs since the Unix epoch, 0 unknown;
 * NULL: none), whose time from the commit to the socket
 * stats.wake_latency counts. A wake coalesced in a worker's queue counts
 * once, from the earliest commit it stands for, and carries that commit's
 * trace when the server traces wake-ups (trace_wakes). */
void a2__server_wake_at(a2__server *srv, const char *consumer,
                        const char *session, const char *cursor_key,
                        int64_t head, uint64_t lsn, uint64_t xid,
                        const int64_t *trace_us);

/* `log`, for an event of type: to every log consumer that a live worker
 * follows type for (nil log_types = every type; a subscriber without
 * log_types gets no `log`), to one of its subscribers by rendezvous hashing
 * on the session (A2C_ROUTE_AFFINITY), or all of them (A2C_ROUTE_BROADCAST).
 * The cost is that of the subscriptions that follow type: an index by type
 * of the live log subscriptions, rebuilt when they change. */
void a2__server_log(a2__server *srv, const char *session, int64_t idx,
                    const char *type, uint64_t lsn, uint64_t xid);

/* `cleared`: to every worker that has subscribed at least one consumer (the
 * simplest correct rule: routing is per consumer, a clear is per session). */
void a2__server_cleared(a2__server *srv, const char *session,
                        int64_t clear_index, uint64_t lsn);

/* `resync` of every consumer, all sessions, to every worker. */
void a2__server_resync_all(a2__server *srv);

/*
 * `presence` patch to the workers subscribed to namespace ns. fields_json is
 * a JSON object text (a null value means deleted); lsn the change's commit
 * end.
 */
void a2__server_presence(a2__server *srv, const char *ns,
                         const char *participant, const char *fields_json,
                         uint64_t lsn);

void a2__server_get_stats(const a2__server *srv, a2__server_stats *out);

#endif
