/*
 * liba2worker: what a worker links to be woken by a2-consumer, and a helper
 * that runs the claimed work.
 *
 * Two objects:
 *
 *  a2_worker — the connection to a2-consumer (wire protocol v1, include/a2/
 *  wire.h) over a Unix socket or TCP with a token. It subscribes to the
 *  consumers (and log types, presence namespaces) the caller serves, and turns
 *  what arrives into a2_worker_event values: wake, log, cleared, resync,
 *  presence. Given several addresses (an active a2-consumer and its
 *  standbys), it tries them in turn and stays with the one that welcomes it.
 *  It reconnects by itself with exponential backoff and, once back,
 *  reports a resync of every subscribed consumer (wake-ups may have been
 *  missed). While a2-consumer cannot be reached and a database is configured,
 *  it runs a slow sweep of the store's pending sessions (every
 *  degraded_sweep_ms) and reports each pending session as a SWEEP event, so
 *  work keeps moving; the sweep stops the moment the consumer is back. There
 *  is no polling of the database while connected.
 *
 *  It never blocks and owns no thread: drive it from any event loop with
 *  a2_worker_fd / a2_worker_poll_events / a2_worker_timeout, call
 *  a2_worker_process when the descriptor is ready or the timeout passed, then
 *  take events with a2_worker_next. a2_worker_wait does all of that as one
 *  blocking call. (The degraded sweep is one store query that does block
 *  for the time of the query.)
 *
 *  a2_worker_runner — claim -> handle -> complete/fail for one session:
 *  claims every eligible head for its holder, calls the handler for each,
 *  completes it (with the events the handler returned) or fails it (with the
 *  handler's error text, retry-after and max-failures), and claims again until
 *  the session is settled or busy. While a handler runs, a thread of the
 *  runner renews the lease of every unfinished head of the claim at a third
 *  of the ttl, on its own connection, so a long handler is never taken over.
 *
 * And a scheduler built on the runner:
 *
 *  a2_worker_pool — N slots, each a thread with its own runner, fed by a
 *  table of sessions: the caller hands it what its a2_worker reports
 *  (a2_worker_pool_event), and the pool runs each named session on a free
 *  slot, one slot per session at a time, in the order they were named. A
 *  session named again while it waits is run once; named while it runs, it
 *  runs once more afterwards. A busy session is run again when its retry
 *  hold ends, a failed run a second later, and a wake-up without a
 *  transaction id that found nothing is looked at again after 20, 40 and
 *  80 ms (a wake-up with one makes the store wait for its commit instead).
 *
 * Errors: functions return 0 (or a count) or a negative A2_WORKER_E* code,
 * with a one-line reason from the object's last_error or the caller's err
 * buffer. Nothing here prints, exits or aborts; diagnostics go to the
 * optional log callback, one line each (PostgreSQL's message style).
 *
 * Threading: an a2_worker is used from one thread. A runner is used from one
 * thread at a time (its renewal thread is internal); a2_worker_runner_stop is
 * the exception and may be called from any thread or a signal handler. A
 * pool owns its threads (one per slot, and one for its timers); it is fed
 * from one thread (typically the one that drives the a2_worker), and its
 * handler is called on the slot threads.
 */
#ifndef A2_WORKER_H
#define A2_WORKER_H

#include "a2/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define A2_WORKER_MUST_CHECK __attribute__((warn_unused_result))

/* Error codes (negative). */
#define A2_WORKER_EINVAL   (-1) /* bad argument or option */
#define A2_WORKER_ENOMEM   (-2) /* out of memory */
#define A2_WORKER_EIO      (-3) /* a system call failed (poll, socket...) */
#define A2_WORKER_ESTORE   (-4) /* the store failed (details in last_error) */
#define A2_WORKER_EINTR    (-5) /* a2_worker_wait: interrupted by a signal */
#define A2_WORKER_ESTOPPED (-6) /* runner: stopped before it claimed */

/* Defaults for zero-valued options. */
#define A2_WORKER_DEFAULT_SWEEP_MS         30000
#define A2_WORKER_DEFAULT_RECONNECT_MIN_MS 100
#define A2_WORKER_DEFAULT_RECONNECT_MAX_MS 5000
#define A2_WORKER_DEFAULT_PING_MS          15000
#define A2_WORKER_DEFAULT_TTL_MS           30000
#define A2_WORKER_DEFAULT_RETRY_AFTER_MS   1000
#define A2_WORKER_DEFAULT_MAX_FAILURES     5

/* Limits. */
#define A2_WORKER_MAX_SUBSCRIPTIONS 64
#define A2_WORKER_MAX_ERROR_TEXT    4096 /* bytes of a failure text kept */
#define A2_WORKER_MAX_SLOTS         256  /* slots of a pool */

/* A diagnostic line (no newline), for the caller to print or drop. */
typedef void (*a2_worker_log_fn)(void *ctx, const char *line);

/* ── the connection to a2-consumer ─────────────────────────────────────── */

typedef struct a2_worker a2_worker;

typedef struct a2_worker_options {
    /* "unix:PATH" or "tcp:HOST:PORT" (IPv6 as tcp:[::1]:PORT). NULL (and
     * nconnects 0): the worker never connects and relies on the degraded
     * sweep alone. */
    const char *connect;
    /*
     * Several addresses instead of connect (which must then be NULL), used
     * when nconnects > 0: a2-consumers for one slot, the active one and its
     * standbys, in any order (copied). The worker tries them in turn: a
     * connect that fails, no welcome within 5 s, a close before the
     * welcome, or a standby's refusal (error code "standby") moves to the
     * next address at once; once every address failed in a row, the next
     * round waits the backoff. A connection lost after its welcome moves to
     * the next address too, as the first failure of a new round (a standby
     * may have taken over elsewhere). A welcome ends the round and resets
     * the backoff. One connect is in progress at a time.
     */
    const char *const *connects;
    size_t nconnects;
    const char *token; /* required with any tcp: address, sent in hello to
                          tcp: addresses only */
    const char *name;  /* hello name; NULL: "<hostname>:<pid>" */
    /* Conninfo for the degraded sweep; NULL: no sweep while disconnected
     * ("" uses the PG* variables). */
    const char *db;
    int degraded_sweep_ms; /* 0: A2_WORKER_DEFAULT_SWEEP_MS */
    int reconnect_min_ms;  /* 0: A2_WORKER_DEFAULT_RECONNECT_MIN_MS */
    int reconnect_max_ms;  /* 0: A2_WORKER_DEFAULT_RECONNECT_MAX_MS */
    int ping_ms; /* idle ping; no pong within it reconnects; 0: default */
    a2_worker_log_fn log; /* NULL: no diagnostics */
    void *log_ctx;
} a2_worker_options;

typedef enum a2_worker_event_type {
    A2_WORKER_EV_WAKE = 1,     /* consumer, session, cursor, head, lsn, xid */
    A2_WORKER_EV_LOG,          /* consumer, session, idx, event_type, lsn:
                                  claim with a2_claim_request.wake_logs
                                  and log_from = idx */
    A2_WORKER_EV_CLEARED,      /* session, clear_index, lsn */
    A2_WORKER_EV_RESYNC,       /* consumer; sessions[nsessions], or
                                  all_sessions: claim whatever is pending */
    A2_WORKER_EV_PRESENCE,     /* ns, participant, fields_json, lsn (the
                                  change's commit end; a2/state.h) */
    A2_WORKER_EV_CONNECTED,    /* welcome received; lsn */
    A2_WORKER_EV_DISCONNECTED, /* message: why, naming the address (or
                                  saying it is a standby); the worker
                                  reconnects. Reported when an outage
                                  begins, and for each connection that
                                  failed in its handshake, but a standby's
                                  refusal once per outage */
    A2_WORKER_EV_SWEEP,        /* degraded: consumer has work in session */
} a2_worker_event_type;

/* An event. Every pointer is borrowed from the worker until the next
 * a2_worker_next / a2_worker_wait / a2_worker_free call. */
typedef struct a2_worker_event {
    int type; /* a2_worker_event_type */
    const char *consumer;
    const char *session;
    const char *cursor;
    int64_t head;
    int64_t idx;
    const char *event_type;
    int64_t clear_index;
    uint64_t lsn;
    uint64_t xid; /* WAKE, LOG: the commit's transaction id (0: none, as for a
                     lapsed lease's wake-up): a2_claim_request.after_xid */
    bool all_sessions;
    const char *const *sessions;
    size_t nsessions;
    const char *ns;
    const char *participant;
    const char *fields_json;
    const char *message;
    /* WAKE from an a2-consumer started with --trace-wakes: its commit's
     * times on the way (a2_wire_msg.trace_us, index A2_WIRE_TRACE_* of
     * <a2/wire.h>: commit, walsender send, read, push; µs since the Unix
     * epoch); all 0 otherwise. */
    int64_t trace_us[4];
} a2_worker_event;

/*
 * A new worker (nothing connects until the first a2_worker_process or
 * a2_worker_wait). NULL on bad options (connect and connects both given, an
 * address that does not parse, a tcp: address without a token...) or no
 * memory, with the reason in err. Options are copied.
 */
a2_worker *a2_worker_new(const a2_worker_options *opts, char *err,
                         size_t errlen);

/* Closes the connection and frees everything. NULL-safe. */
void a2_worker_free(a2_worker *w);

/*
 * Serves consumer: asks a2-consumer for its wake-ups (now, and after every
 * reconnect). log_filter: A2_WIRE_LOG_NONE (0) for a lane/event consumer,
 * A2_WIRE_LOG_ALL (1) for a log consumer of every type, A2_WIRE_LOG_TYPES (2)
 * with types[ntypes]. Strings are copied. Returns 0, A2_WORKER_EINVAL (bad
 * arguments, more than A2_WORKER_MAX_SUBSCRIPTIONS) or A2_WORKER_ENOMEM.
 */
A2_WORKER_MUST_CHECK int a2_worker_subscribe(a2_worker *w, const char *consumer,
                                             int log_filter,
                                             const char *const *types,
                                             size_t ntypes);

/* Asks for presence patches of namespace ns (now, and after every
 * reconnect). Same returns as a2_worker_subscribe. */
A2_WORKER_MUST_CHECK int a2_worker_watch_presence(a2_worker *w, const char *ns);

/* The descriptor to poll now (it changes across reconnects: ask before every
 * poll), or -1 while there is none (then only the timeout matters). */
int a2_worker_fd(const a2_worker *w);

/* The poll(2) events to wait for on a2_worker_fd (POLLIN, plus POLLOUT while
 * output is queued or a connect is in progress). */
short a2_worker_poll_events(const a2_worker *w);

/* Milliseconds until a2_worker_process must run even without I/O (a
 * reconnect, a ping, a sweep); 0 when events are queued; -1: no deadline. */
int a2_worker_timeout(const a2_worker *w);

/*
 * Does every pending connect, read, write and timer without blocking (a
 * degraded sweep blocks for its query). Connection failures are not errors:
 * they become DISCONNECTED events and a reconnect. Returns 0, or
 * A2_WORKER_ENOMEM, A2_WORKER_EIO (poll(2) failed), A2_WORKER_EINVAL (w is
 * NULL).
 */
A2_WORKER_MUST_CHECK int a2_worker_process(a2_worker *w);

/* Takes the next event: 1 with *ev filled, 0 when none is queued. */
int a2_worker_next(a2_worker *w, a2_worker_event *ev);

/*
 * Blocking: processes until an event is queued or timeout_ms passed (-1:
 * forever). Returns 1 with *ev, 0 on timeout, A2_WORKER_EINTR when a signal
 * interrupted the wait, or another negative code.
 */
A2_WORKER_MUST_CHECK int a2_worker_wait(a2_worker *w, a2_worker_event *ev,
                                        int timeout_ms);

/* True after welcome, until the connection drops. */
bool a2_worker_connected(const a2_worker *w);

/* The last problem as one line ("" when none). Borrowed. */
const char *a2_worker_last_error(const a2_worker *w);

/* Counters. */
typedef struct a2_worker_stats {
    uint64_t connects; /* welcomes received */
    uint64_t disconnects;
    uint64_t frames; /* frames read */
    uint64_t sweeps; /* degraded sweeps run */
    /* hellos a standby a2-consumer refused (error code "standby") */
    uint64_t standby_refusals;
} a2_worker_stats;
void a2_worker_get_stats(const a2_worker *w, a2_worker_stats *out);

/* ── the claim -> handle -> complete/fail helper ───────────────────────── */

typedef struct a2_worker_runner a2_worker_runner;

/* What a handler gives back: returned events (on success) or an error text
 * (on failure), added with the functions below; the runner owns the memory. */
typedef struct a2_worker_reply a2_worker_reply;

/*
 * Adds a returned event (appended atomically with the completion, its cause
 * being this attempt). payload: JSON text or NULL (null); id: NULL derives a
 * stable one from the head and the event's position. Copied. 0 or
 * A2_WORKER_EINVAL (invalid JSON, empty type) / A2_WORKER_ENOMEM.
 */
A2_WORKER_MUST_CHECK int a2_worker_reply_add(a2_worker_reply *reply,
                                             const char *type,
                                             const char *payload,
                                             const char *id);

/* Sets the failure text (the tail is kept past A2_WORKER_MAX_ERROR_TEXT). */
void a2_worker_reply_error(a2_worker_reply *reply, const char *text);

/*
 * Runs one claimed head. head is borrowed for the call (session in
 * head->event.session_id, attempt in head->dispatch.attempt_count).
 * Return 0 to complete the head with the reply's events, non-zero to fail it
 * with the reply's error text.
 */
typedef int (*a2_worker_handler)(void *ctx, const a2_head *head,
                                 a2_worker_reply *reply);

typedef struct a2_worker_runner_options {
    const char *db;               /* conninfo ("" or NULL: PG* variables) */
    const char *holder;           /* claim holder; NULL: "<host>:<pid>:<n>" */
    const a2_consumer *consumers; /* served consumers (copied); required */
    size_t nconsumers;
    int64_t ttl_ms;            /* lease; 0: A2_WORKER_DEFAULT_TTL_MS */
    int max_failures;          /* 0: A2_WORKER_DEFAULT_MAX_FAILURES */
    int64_t retry_after_ms;    /* <0: none; 0: default */
    a2_worker_handler handler; /* required */
    void *ctx;
    a2_worker_log_fn log; /* NULL: no diagnostics */
    void *log_ctx;
} a2_worker_runner_options;

/* What one a2_worker_runner_run did. */
typedef struct a2_worker_run_stats {
    uint64_t claimed;
    uint64_t completed;
    uint64_t failed;           /* failed and held for a retry */
    uint64_t dead_lettered;    /* failed for the last time (or taken over) */
    uint64_t superseded;       /* the attempt lost its head meanwhile */
    uint64_t renewals;         /* lease renewals made */
    int64_t retry_at;          /* busy: epoch ms to claim again; 0: settled */
    uint64_t visibility_waits; /* claims that waited a second for the
                                  wake-up's commit and still found it
                                  invisible (then claimed again) */
    uint64_t settled_together; /* heads settled with others in one round
                                  trip (a2_store_settle_sessions) */
    uint64_t handler_us;       /* time spent in handler calls (µs) */
    uint64_t claimed_next;     /* heads of a lane (or a log) claimed by the
                                  completion of the lane's previous head,
                                  in its round trip (counted in claimed) */
} a2_worker_run_stats;

/*
 * A runner: opens two store connections (claims and renewals) and starts the
 * renewal thread. NULL with the reason in err. The connections take their
 * timeout from A2_STORE_TIMEOUT_MS (see a2_store_open and
 * a2_store_set_timeout), as each reconnection does. The claims connection
 * is warmed (a2_store_warm) when it opens and when it reconnects, so that
 * the first head a runner claims is not slowed by the server planning its
 * functions; a warm-up the server refuses is logged, not fatal.
 */
a2_worker_runner *a2_worker_runner_new(const a2_worker_runner_options *opts,
                                       char *err, size_t errlen);

/* Stops the renewal thread, closes the connections. NULL-safe. Call it
 * only when no run is in progress. */
void a2_worker_runner_free(a2_worker_runner *r);

/*
 * Works session: (wake_log: first brings every served log consumer's cursor
 * up to date as a2_store_wake_log does, in the first claim's transaction
 * and round trip), then claim -> handle -> complete/fail
 * until the session is settled (stats->retry_at 0) or busy (stats->retry_at
 * set: claim again then). Returns 0, A2_WORKER_ESTOPPED when stopped before
 * claiming, or A2_WORKER_ESTORE (the reason in a2_worker_runner_last_error;
 * the runner reconnects on its next run). stats may be NULL.
 */
A2_WORKER_MUST_CHECK int a2_worker_runner_run(a2_worker_runner *r,
                                              const char *session,
                                              bool wake_log,
                                              a2_worker_run_stats *stats);

/*
 * A run for a caller that a2-consumer wakes (a wake-up, a log message or a
 * resync): as a2_worker_runner_run, but it ends after the first claim's
 * heads are handled when that claim dead-lettered nothing, since such a
 * claim took every head that was eligible then, and a2-consumer wakes the
 * caller again for every head that becomes claimable later (new events, a
 * lane's next head, a lapsed lease, a retry hold that ends). That saves the
 * claim that would find the session settled. stats->retry_at is 0 then.
 * A wake-up can reach the caller before its commit is visible to new
 * snapshots: pass its xid (a2_worker_event.xid; 0 for a resync or a sweep)
 * as after_xid, and the store waits for that commit before it claims (and
 * before wake_log), claiming again for as long as it is not visible. A
 * caller that polls, or has lost its a2-consumer, uses
 * a2_worker_runner_run.
 */
A2_WORKER_MUST_CHECK int a2_worker_runner_run_woken(a2_worker_runner *r,
                                                    const char *session,
                                                    bool wake_log,
                                                    uint64_t after_xid,
                                                    a2_worker_run_stats *stats);

/*
 * a2_worker_runner_run_woken for n woken sessions at once
 * (1..A2_STORE_MAX_SETTLE, none twice; each with its wake-up's xid as
 * after_xid and, after `log` wake-ups, the earliest idx they named as
 * log_from; with wake_log when the runner serves a log consumer): one
 * claim round trip for all of them, log wake-ups included
 * (a2_store_claim_sessions), their heads handled session by session in the
 * order given (each session's in its claim's order, so every lane keeps its
 * order), the outcomes settled together (a2_store_settle_sessions) as a
 * claim's are. Under load, when several sessions wait for a free worker,
 * that is two round trips for all of them instead of two for each. A
 * session whose claim dead-lettered a head, that still waits for its
 * wake-up's commit, or all of them should the store refuse the claim of
 * several (a deadlock), then run on their own as run_woken runs them.
 * stats: n entries, one per session (the renewals of the shared run count
 * in the first). Returns 0, A2_WORKER_ESTOPPED, A2_WORKER_EINVAL,
 * A2_WORKER_ESTORE or A2_WORKER_ENOMEM, as run_woken.
 */
A2_WORKER_MUST_CHECK int
a2_worker_runner_run_sessions(a2_worker_runner *r,
                              const a2_claim_session *sessions, size_t n,
                              a2_worker_run_stats *stats);

/* Asks a run in progress to stop after the heads it has claimed: no new
 * claim is made. Async-signal-safe. */
void a2_worker_runner_stop(a2_worker_runner *r);

/* The runner's holder name. Borrowed. */
const char *a2_worker_runner_holder(const a2_worker_runner *r);

/* The last problem as one line ("" when none). Borrowed. */
const char *a2_worker_runner_last_error(const a2_worker_runner *r);

/*
 * Pages through the sessions where the served consumers have pending work
 * (a2_store_pending_sessions on the runner's connection): calls fn for each
 * one. For a resync of every session. Returns the number of sessions, or a
 * negative code.
 */
A2_WORKER_MUST_CHECK int
a2_worker_runner_pending(a2_worker_runner *r,
                         void (*fn)(void *ctx, const char *session), void *ctx);

/* ── the pool: sessions scheduled over N runners ───────────────────────── */

typedef struct a2_worker_pool a2_worker_pool;

/*
 * A pool's handler: as a2_worker_handler, called on the thread of slot
 * (1..slots, as in the slot's holder "<name>/<slot>"). A slot runs one
 * handler at a time, so per-slot state indexed by slot needs no lock. A
 * slot that frees up while no other waits for work takes as many of the
 * sessions queued as its handlers run in about 5 ms (by the handler time a
 * session of its last run; at most 32) and runs them together
 * (a2_worker_runner_run_sessions: one claim and one settlement round trip
 * for all, their handlers one after the other on that slot; a session no
 * wake-up named, from a sweep or a resync, is queued again while its claim
 * takes heads, so it still runs to its end); a slot whose handlers take
 * 5 ms or more a session takes one.
 */
typedef int (*a2_worker_pool_handler)(void *ctx, int slot, const a2_head *head,
                                      a2_worker_reply *reply);

typedef struct a2_worker_pool_options {
    const char *db;   /* conninfo ("" or NULL: PG* variables) */
    const char *name; /* slot N's holder: "<name>/<N>"; NULL: "<host>:<pid>" */
    const a2_consumer *consumers; /* served consumers (copied); required */
    size_t nconsumers;
    int slots; /* 1..A2_WORKER_MAX_SLOTS; 0: 1 */
    /* As a2_worker_runner_options, for every slot's runner. */
    int64_t ttl_ms;
    int max_failures;
    int64_t retry_after_ms;
    a2_worker_pool_handler handler; /* required */
    void *ctx;
    /* Called on slot's thread as it begins a run of nsessions sessions,
     * before their claim (with ctx): for tracing the hand-off from the
     * feeding thread to a slot. NULL: none. */
    void (*run_start)(void *ctx, int slot, size_t nsessions);
    /* The pool's problems: a run that failed (the runner's last_error), a
     * resync that failed, no memory to queue a session. NULL: none. Called
     * on the slot threads and the feeding thread. */
    a2_worker_log_fn log;
    void *log_ctx;
    /* Every runner's diagnostics (a2_worker_runner_options.log): completed,
     * failed, dead-lettered, lease renewals that failed. NULL: none. */
    a2_worker_log_fn runner_log;
    void *runner_log_ctx;
} a2_worker_pool_options;

/*
 * A pool: a runner per slot (two store connections each, see
 * a2_worker_runner_new) and its thread, and the timer thread. NULL with the
 * reason in err (bad options, a runner that could not connect, a thread
 * that could not start). Options are copied.
 */
a2_worker_pool *a2_worker_pool_new(const a2_worker_pool_options *opts,
                                   char *err, size_t errlen);

/* a2_worker_pool_stop, then frees everything. NULL-safe. */
void a2_worker_pool_free(a2_worker_pool *p);

/*
 * What an a2_worker reported, for the pool: WAKE and LOG run the session
 * (a2_worker_pool_wake, LOG with wake_log, a new log cursor starting at
 * its event: a2_claim_request.log_from), SWEEP runs it
 * (a2_worker_pool_queue), RESYNC runs the sessions it names, or, with
 * all_sessions, those the store reports pending (a2_worker_pool_resync).
 * SWEEP and a RESYNC's sessions start the log cursors' runs when
 * ev->consumer is a log consumer. Events of a consumer the pool does not
 * serve, and the other types, are ignored. Returns 0 or a negative code as
 * the call it makes.
 */
int a2_worker_pool_event(a2_worker_pool *p, const a2_worker_event *ev);

/*
 * Runs session because a2-consumer named it: with a2_worker_runner_run_woken
 * (one claim round), xid its wake-up's commit (a2_worker_event.xid, 0:
 * none), wake_log to bring the log cursors up to date first. A session
 * already queued is run once, with the latest xid and either wake_log; one
 * running is run once more when its run ends. Returns 0,
 * A2_WORKER_ESTOPPED, A2_WORKER_ENOMEM or A2_WORKER_EINVAL. Any thread.
 */
int a2_worker_pool_wake(a2_worker_pool *p, const char *session, bool wake_log,
                        uint64_t xid);

/*
 * Runs session to its end with a2_worker_runner_run: for a session found by
 * a sweep or a resync, which no wake-up announced. Merged as
 * a2_worker_pool_wake; a session a wake-up named stays woken until its runs
 * end. Same returns. Any thread.
 */
int a2_worker_pool_queue(a2_worker_pool *p, const char *session, bool wake_log);

/*
 * Queues every session where consumer (one the pool serves; NULL: every
 * served consumer) has pending work, paging a2_store_pending_sessions on a
 * connection of the pool's own (opened on first use, on the caller's
 * thread). *sessions (may be NULL): how many were found, also when a page
 * failed. Returns 0, A2_WORKER_ESTORE (logged as "could not resync: ..."),
 * A2_WORKER_EINVAL (a consumer not served) or A2_WORKER_ESTOPPED.
 */
int a2_worker_pool_resync(a2_worker_pool *p, const char *consumer,
                          size_t *sessions);

/*
 * Stops: no run starts any more, every run in progress ends after the heads
 * it has claimed (a2_worker_runner_stop), and waits for them; what was
 * queued or on a timer is dropped, and the runners' connections closed.
 * Later calls to wake, queue and resync return A2_WORKER_ESTOPPED. Not from
 * a handler. NULL-safe; a second call does nothing.
 */
void a2_worker_pool_stop(a2_worker_pool *p);

/* Counters and the table's state now. */
typedef struct a2_worker_pool_stats {
    size_t sessions;      /* known: queued, running or on a timer */
    size_t queued;        /* waiting for a free slot */
    size_t running;       /* being run by a slot */
    size_t timers;        /* waiting for a timer (retry hold, recheck, error) */
    uint64_t runs;        /* runs ended */
    uint64_t woken_runs;  /* of which one claim round (a wake-up) */
    uint64_t failed_runs; /* ended with an error, run again after 1 s */
    uint64_t merged;      /* wakes and queues merged into a session already
                             queued or running */
    uint64_t timer_runs;  /* runs queued by a timer */
    uint64_t rechecks;    /* looks again at a wake-up that found nothing */
    uint64_t empty_runs;  /* runs that ended well and claimed nothing */
    uint64_t empty_woken_runs; /* of which woken: the wake-up's heads were
                                  gone (another run took them) or not yet
                                  visible */
    /* a2_worker_run_stats summed over the runs */
    uint64_t claimed;
    uint64_t completed;
    uint64_t failed;
    uint64_t dead_lettered;
    uint64_t superseded;
    uint64_t renewals;
    uint64_t visibility_waits;
    uint64_t together_runs; /* runs made with others: one claim and one
                               settlement round trip for several sessions
                               (a2_worker_runner_run_sessions) */
} a2_worker_pool_stats;

/* Fills *out (zeros for a NULL pool). Any thread. */
void a2_worker_pool_get_stats(a2_worker_pool *p, a2_worker_pool_stats *out);

#endif
