/*
 * liba2store: the a2 event store over PostgreSQL (libpq).
 *
 * Producers append events to per-session logs; consumers work through them
 * with cursors: a concurrent cursor runs one event, a lane cursor runs a FIFO
 * lane in index order, a log cursor follows the session log filtered by event
 * types. Every operation below is one round trip: one call of its SQL
 * function (a2_append, a2_claim, ... of sql/schema.sql, docs/sql.md), in a
 * transaction of its own. The call texts are constants of the library;
 * every value a caller passes travels as a parameter and never enters SQL
 * text; no prepared statement is left on the connection, so a store works
 * behind a pooler in transaction mode. A program that wants an operation in
 * its own transaction calls the SQL function on its own connection.
 *
 * Threading: one a2_store owns one connection and is not thread-safe. Use one
 * store per thread (each opens its own connection); a store may move between
 * threads when calls on it never overlap. A store whose connection broke
 * reports A2_ESTORE_UNAVAILABLE once and connects again on its next call.
 *
 * Locks: appends, clears, wake_log and redrive-skip take the session's
 * advisory lock first; a completion locks its cursor row first and then the
 * session lock (when it appends, or its lane/log cursor goes idle). An append
 * with a cause waits (for share) on that cause's cursor row, so a worker
 * must not run a completion and a caused append of the same attempt at the
 * same time on two connections.
 *
 * Errors: every function that can fail returns 0 or a negative a2_store_code.
 * After a failed call, a2_store_last_error() describes it (code, SQLSTATE,
 * one-line message in PostgreSQL's style). A failed operation writes nothing:
 * its transaction rolls back whole. Bad input is refused with
 * A2_EINVALID_ARGUMENT before any I/O. The library never prints, exits or
 * aborts.
 *
 * Memory: inputs are borrowed for the duration of the call. Each result
 * struct is filled by the library and owns everything it points to; release
 * it with its _free function (NULL-safe, idempotent: the struct is zeroed).
 * A result is zeroed on entry, so it may be freed after a failed call too.
 *
 * Absent integers (a null timestamp, an idle cursor's head, no claim limit)
 * read as A2_STORE_NONE.
 *
 * Cursor keys (a2_cursors.cursor_key): a concurrent cursor's key is
 * "#<index>" (e.g. "#42"), a lane or log cursor's is "lane:<lane>". Clear
 * markers are events of type A2_STORE_CLEAR_TYPE.
 */
#ifndef A2_STORE_H
#define A2_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define A2_STORE_MUST_CHECK __attribute__((warn_unused_result))

/* An absent integer: a null timestamp, an idle head, no limit. */
#define A2_STORE_NONE INT64_MIN

/* The event type of a clear marker; appends of this type are refused. */
#define A2_STORE_CLEAR_TYPE "a2.cleared"

/* Input limits (A2_EINVALID_ARGUMENT past them). */
#define A2_STORE_MAX_EVENTS  10000 /* events in one append or completion */
#define A2_STORE_MAX_TARGETS 256   /* targets of one event */
#define A2_STORE_MAX_NAME                                                      \
    1024 /* bytes of a session, id, type, consumer, lane, holder */
#define A2_STORE_MAX_PAYLOAD    (64 << 20) /* bytes of one payload's JSON text */
#define A2_STORE_MAX_ERROR_TEXT 65536      /* bytes of a failure's error text */

/* Result codes: 0 or one of these. */
typedef enum a2_store_code {
    A2_STORE_OK = 0,
    /* Bad input (NULL or empty names, invalid JSON, negative ttl, ...). */
    A2_EINVALID_ARGUMENT = -1,
    /* No connection: the server cannot be reached or the connection broke.
     * Also an event id being reused that cleared work still holds. */
    A2_ESTORE_UNAVAILABLE = -2,
    /* The a2 tables or functions are missing: apply sql/schema.sql. */
    A2_ESCHEMA_MISSING = -3,
    /* An append or completion mixes ids already stored with fresh ones, or
     * repeats an id, or a retried completion does not match the committed one.
     */
    A2_EPARTIAL_DUPLICATE_BATCH = -4,
    /* A cause's attempt no longer owns its head (taken over, completed,
     * dead-lettered or cleared). */
    A2_ESUPERSEDED_ATTEMPT = -5,
    /* Scheduled work whose origin the session's clear marker passed. */
    A2_ESESSION_CLEARED = -6,
    /* No event at the index the call names (and none was cleared there). */
    A2_ENO_SUCH_EVENT = -7,
    /* The server refused the operation for another reason (SQLSTATE in the
     * error details; a deadlock would be 40P01). */
    A2_ESTORE_FAILED = -8,
    /* Out of memory. */
    A2_ESTORE_NOMEM = -9,
} a2_store_code;

/* The code's name as the spec spells it ("PARTIAL_DUPLICATE_BATCH", ...);
 * a static string. */
const char *a2_store_code_name(int code);

/* Details of the last failure. */
typedef struct a2_store_error {
    int code;          /* a2_store_code */
    char sqlstate[6];  /* the server's SQLSTATE, or "" */
    char message[512]; /* one line, no trailing period */
} a2_store_error;

typedef struct a2_store a2_store;

/* A clock: epoch milliseconds. */
typedef int64_t (*a2_store_clock_fn)(void *ctx);
/*
 * An id generator: writes a new NUL-terminated, non-empty id of at most
 * len - 1 bytes (len is at least 64) into buf and returns 0, or returns
 * non-zero on failure.
 */
typedef int (*a2_store_id_fn)(void *ctx, char *buf, size_t len);

/*
 * Connects to conninfo (a libpq conninfo; NULL or "" uses the PG* variables)
 * and returns a new store in *out. Checks nothing about the schema: a missing
 * table shows as A2_ESCHEMA_MISSING on the first operation. On failure *out
 * is NULL and err (when not NULL) holds the reason (A2_ESTORE_UNAVAILABLE).
 * The store's timeout (a2_store_set_timeout) starts as A2_STORE_TIMEOUT_MS
 * when that is set and not empty; a value that is not a whole number of
 * milliseconds from 0 to 86400000 fails the open with A2_EINVALID_ARGUMENT.
 */
A2_STORE_MUST_CHECK int a2_store_open(a2_store **out, const char *conninfo,
                                      a2_store_error *err);

/*
 * Bounds every later call on the store (0: no bound, the default).
 * - The server cancels a call still running after timeout_ms (each call
 *   sets statement_timeout for its own transaction, in the same round
 *   trip; the session keeps its own): the call fails with A2_ESTORE_FAILED
 *   and SQLSTATE 57014, writes nothing, and the next call runs normally. A
 *   call waiting for its session's lock is such a statement.
 * - A call still unanswered half as long again after that (at least a
 *   second more: a stopped server, a network that drops everything) fails
 *   with A2_ESTORE_UNAVAILABLE, and the connection is dropped: whether the
 *   call took effect is unknown, as when a connection is lost (appends with
 *   ids can be repeated safely). The next call connects again.
 * - Connecting (a2_store_open, and a call after a dropped connection) is
 *   given up after the same wait, with A2_ESTORE_UNAVAILABLE; conninfo's
 *   connect_timeout then does not apply.
 * Without a timeout, connecting is bounded by connect_timeout (10 s unless
 * conninfo or PGCONNECT_TIMEOUT says), a vanished server fails a call within
 * about a minute (TCP keepalives, tcp_user_timeout), and
 * options='-c statement_timeout=5s' in conninfo bounds only the server's
 * side.
 * Returns 0, or A2_EINVALID_ARGUMENT when timeout_ms is not from 0 to
 * 86400000 (one day).
 */
A2_STORE_MUST_CHECK int a2_store_set_timeout(a2_store *store, int timeout_ms);

/*
 * Readies the connection for its first operations (a2_warm, docs/sql.md):
 * the server compiles and plans the functions a worker calls (append,
 * claim, a2_batch's complete and fail) and loads their tables' catalog
 * entries, some 10 to 50 ms that the first claim would otherwise add to the
 * first head's pickup. It writes nothing that stays: its rows are rolled
 * back. Returns 0, or A2_ESTORE_FAILED when the cycle stopped part way (a
 * read-only standby, a schema older than version 5), or the connection's
 * error; the store stays usable either way. a2_worker_runner_new calls it.
 */
A2_STORE_MUST_CHECK int a2_store_warm(a2_store *store);

/* Closes the connection and frees the store. NULL-safe. */
void a2_store_close(a2_store *store);

/* The last failure on this store (code 0 after a success). Borrowed: valid
 * until the next call on the store. */
const a2_store_error *a2_store_last_error(const a2_store *store);

/* Replaces the clock (default: the system's real-time clock). NULL restores
 * the default. */
void a2_store_set_clock(a2_store *store, a2_store_clock_fn fn, void *ctx);

/* Replaces the id generator (default: 128 random bits from getrandom(2) as
 * 32 hex digits, collision-safe). NULL restores the default. */
void a2_store_set_ids(a2_store *store, a2_store_id_fn fn, void *ctx);

/* Round trips to the server this store has made (for benchmarks: every
 * operation adds 1). */
uint64_t a2_store_round_trips(const a2_store *store);

/* ── values ───────────────────────────────────────────────────────────── */

/* The head an attempt ran: consumer, its lane (NULL: a concurrent cursor),
 * the event index and the attempt number (from 1). */
typedef struct a2_cause {
    const char *consumer;
    const char *lane;
    int64_t index;
    int attempt;
} a2_cause;

/* A head without an attempt (exclusions, renew results). */
typedef struct a2_head_ref {
    const char *consumer;
    const char *lane; /* NULL: a concurrent cursor */
    int64_t index;
} a2_head_ref;

/* Where an appended event is dispatched: a consumer's lane, or NULL for a
 * concurrent run of the event alone. */
typedef struct a2_target {
    const char *consumer;
    const char *lane;
    int64_t not_before; /* epoch ms: this target's head is not claimable
                           before it (0: the event's) */
} a2_target;

/* A stored event. */
typedef struct a2_event {
    const char *session_id;
    int64_t index;
    const char *type;
    const char *payload; /* JSON text as the server renders jsonb */
    const char *id;
    int64_t created_at; /* epoch ms from the store's clock */
    bool has_cause;
    a2_cause cause; /* valid when has_cause */
} a2_event;

/* An event to append (or to return from a completion). */
typedef struct a2_append_event {
    const char *type;         /* required, non-empty, not A2_STORE_CLEAR_TYPE */
    const char *payload;      /* JSON text; NULL stores JSON null */
    const char *id;           /* NULL: generated (required in completions) */
    const a2_cause *cause;    /* NULL: none (ignored in completions) */
    const a2_target *targets; /* may be NULL when ntargets is 0 */
    size_t ntargets;
    /* epoch ms: the event's heads are not claimable before it (0: at once).
     * Until then a claim is BUSY with retry_at that time, a lane holds its
     * later events behind it, and a2-consumer wakes it at that time; the
     * event itself is stored and readable at once. */
    int64_t not_before;
} a2_append_event;

/* A log consumer's specification. */
typedef struct a2_log_spec {
    const char *lane;         /* names the log cursor (key "lane:<lane>") */
    const char *const *types; /* the types it follows; NULL: every type */
    size_t ntypes;
    bool backfill; /* a new cursor starts at the beginning of the log */
} a2_log_spec;

/* A consumer the caller serves. */
typedef struct a2_consumer {
    const char *name;
    const a2_log_spec *log; /* NULL: not a log consumer */
} a2_consumer;

/* A cursor's dispatch state. */
typedef struct a2_dispatch {
    const char *consumer;
    const char *lane; /* NULL for a concurrent cursor */
    const char *cursor_key;
    const char *kind; /* "event", "lane" or "log" */
    int64_t epoch;
    int attempt_count;
    int64_t first_claimed_at; /* A2_STORE_NONE when null, as below */
    int64_t last_claimed_at;
    const char *claim_holder; /* NULL when unclaimed */
    int64_t claim_expires_at; /* lease end, or retry hold after a failure */
    int failure_count;
    int64_t last_failed_at;
    int64_t last_failed_attempt;
    const char *last_error; /* NULL when none */
    int64_t failed_at;      /* set when dead-lettered */
} a2_dispatch;

/* A head: its event and its cursor's dispatch state. */
typedef struct a2_head {
    a2_event event;
    a2_dispatch dispatch;
    int64_t clear_index; /* the session's clear marker, 0 when none */
} a2_head;

/* A cursor run as cursors() reports it. */
typedef struct a2_cursor {
    a2_dispatch dispatch;
    int64_t position;  /* the last index it passed */
    int64_t head;      /* A2_STORE_NONE when idle */
    const char *types; /* a log cursor's types as JSON (array or null); NULL
                          otherwise */
} a2_cursor;

/* ── results ──────────────────────────────────────────────────────────── */

typedef struct a2_store_arena a2_store_arena; /* internal */

typedef struct a2_events {
    a2_event *items;
    size_t count;
    bool has_pending; /* append: a served consumer has work in the session */
    bool replayed;    /* append/complete: every id was there; these are the
                         committed rows */
    a2_store_arena *arena_;
} a2_events;
void a2_events_free(a2_events *r);

typedef struct a2_heads {
    a2_head *items;
    size_t count;
    a2_store_arena *arena_;
} a2_heads;
void a2_heads_free(a2_heads *r);

typedef struct a2_cursors {
    a2_cursor *items;
    size_t count;
    a2_store_arena *arena_;
} a2_cursors;
void a2_cursors_free(a2_cursors *r);

/* ── operations ───────────────────────────────────────────────────────── */

typedef struct a2_append_options {
    /* The consumers this caller serves; NULL: every consumer. Log consumers
     * among them get their log cursors started. has_pending reports work
     * for these. */
    const a2_consumer *consumers;
    size_t nconsumers;
    /* Scheduled work: the index it came from; 0: none. An origin at or below
     * the clear marker fails with A2_ESESSION_CLEARED. */
    int64_t origin_index;
} a2_append_options;

/*
 * Appends events (in order, dense indexes) to session, under the session's
 * advisory lock, and starts the cursor work their targets and the served
 * log consumers call for. opts may be NULL. Outcomes:
 *   - 0, out->items: the stored events, in order;
 *   - 0 with out->replayed: every supplied id was already stored (a retry):
 *     the committed rows, nothing written;
 *   - A2_EPARTIAL_DUPLICATE_BATCH: some ids stored and some not, or one id
 *     twice in the batch;
 *   - A2_ESESSION_CLEARED: opts->origin_index at or below the clear marker;
 *   - A2_ESUPERSEDED_ATTEMPT: an event's cause no longer holds its head;
 *   - A2_ESTORE_UNAVAILABLE: an id below the clear marker is being reused
 *     while a reclaim holds its row (retry later).
 * Ids below the clear marker belong to nobody and are reused. nevents 0 only
 * reports has_pending.
 */
A2_STORE_MUST_CHECK int a2_store_append(a2_store *store, const char *session,
                                        const a2_append_event *events,
                                        size_t nevents,
                                        const a2_append_options *opts,
                                        a2_events *out);

/* Reads events after index `after` (0: from the start), at most limit (0: no
 * limit), of the listed types (NULL: every type), from the clear marker on. */
typedef struct a2_read_options {
    int64_t after;
    size_t limit;
    const char *const *types;
    size_t ntypes;
} a2_read_options;
A2_STORE_MUST_CHECK int a2_store_read(a2_store *store, const char *session,
                                      const a2_read_options *opts,
                                      a2_events *out);

/* The session's cursor runs still current (consumer, then lane, concurrent
 * cursors last by head). */
A2_STORE_MUST_CHECK int a2_store_cursors(a2_store *store, const char *session,
                                         a2_cursors *out);

/*
 * Brings a log consumer's cursor up to date (consumer->log required): starts
 * a run at the next event of its types when it has none, or retypes a kept
 * run. *cursor_out is its cursor (count 1), *head_out the session's head
 * index. A consumer with no cursor and nothing after the latest clear stays
 * without one: the cursor reported is idle at the head. after_xid: the
 * `xid` of the log message that asked for this (0: none), whose commit is
 * waited for first, at most a second (see a2_claim_request). A new cursor
 * starts after the session's head (at the beginning of the log with
 * backfill); a claim with wake_logs and log_from starts it at the event a
 * log message named instead.
 */
A2_STORE_MUST_CHECK int a2_store_wake_log(a2_store *store, const char *session,
                                          const a2_consumer *consumer,
                                          uint64_t after_xid,
                                          a2_cursors *cursor_out,
                                          int64_t *head_out);

typedef struct a2_claim_request {
    const char *holder;         /* required */
    int64_t ttl_ms;             /* > 0, unless expires_at_ms is set */
    int64_t expires_at_ms;      /* 0: now + ttl_ms */
    const a2_head_ref *exclude; /* heads not to take */
    size_t nexclude;
    const a2_consumer *consumers; /* served; NULL: every consumer */
    size_t nconsumers;
    int max_failures; /* 0: no limit; else >= 1: a takeover spending the
                         last failure dead-letters the head */
    int64_t through;  /* 0: none; else only heads at or below it */
    /* The `xid` of the wake-up that asked for this claim (0: none). A
     * wake-up can arrive before its commit is visible to new snapshots; the
     * claim waits for that commit in the server, at most wait_ms (0: 1000),
     * and when it is still not visible returns BUSY with waiting_for set:
     * claim again with the same after_xid. */
    uint64_t after_xid;
    int64_t wait_ms;
    /* First bring the session's cursor of each log consumer in consumers
     * up to date, as a2_store_wake_log does (after after_xid), in the
     * claim's transaction and round trip: one commit where a wake-up of a
     * log consumer took two. */
    bool wake_logs;
    /* With wake_logs: the earliest event index the `log` wake-ups named
     * (a2_worker_event.idx; 0: none). A log cursor this claim starts (the
     * consumer has none in the session yet, no backfill) starts at that
     * event, so the event that woke the consumer is its first, rather than
     * after the session's head. */
    int64_t log_from;
} a2_claim_request;

typedef enum a2_claim_outcome {
    A2_CLAIM_CLAIMED = 1, /* heads holds the claimed heads */
    A2_CLAIM_BUSY = 2,    /* a live claim or retry hold blocks; retry_at */
    A2_CLAIM_SETTLED = 3, /* nothing to run */
} a2_claim_outcome;

typedef struct a2_claim_result {
    int outcome;    /* a2_claim_outcome */
    a2_heads heads; /* CLAIMED: by index, then consumer; attempt_count is the
                       attempt */
    int64_t session_head;   /* CLAIMED: the session's head index */
    int64_t retry_at;       /* BUSY: epoch ms */
    a2_heads dead_lettered; /* heads a takeover dead-lettered (any outcome) */
    uint64_t waiting_for;   /* BUSY: after_xid, still not visible (else 0) */
} a2_claim_result;
void a2_claim_result_free(a2_claim_result *r);

/*
 * Claims every eligible head of the session for holder: unclaimed heads and
 * lapsed claims (a takeover: attempt + 1, failure + 1). A takeover that
 * spends the last of max_failures dead-letters the head instead (those are
 * in out->dead_lettered, whatever the outcome). A lane runs one head at a
 * time, in index order. Outcomes: CLAIMED (out->heads), else BUSY when a
 * live claim or retry hold blocks an eligible head (out->retry_at: when the
 * earliest ends), else SETTLED. Racing claims lock cursor rows in one fixed
 * order and never deadlock; a head another claim is taking is waited for and
 * then re-checked.
 */
A2_STORE_MUST_CHECK int a2_store_claim(a2_store *store, const char *session,
                                       const a2_claim_request *req,
                                       a2_claim_result *out);

/* One session of a2_store_claim_sessions: its name, the `xid` of the
 * wake-up that asked for its claim (0: none; see after_xid above) and the
 * earliest index its `log` wake-ups named (0: none; see log_from above). */
typedef struct a2_claim_session {
    const char *session;
    uint64_t after_xid;
    int64_t log_from;
} a2_claim_session;

/*
 * Claims for each of n sessions (1..A2_STORE_MAX_SETTLE, none twice) what
 * a2_store_claim would with req (req->after_xid and req->log_from are not
 * used: each session has its own), in one transaction and one round trip
 * (a2_batch), all or nothing. out (n entries) gets each session's result
 * in the order given; free each with a2_claim_result_free. a2_batch takes
 * the sessions' locks in the byte order of their names, so two such calls
 * never wait on each other in a cycle; the locks are held to the call's
 * commit, and a claim that waits for its wake-up's commit (at most
 * req->wait_ms) holds those of the sessions claimed before it meanwhile.
 * A2_ESTORE_FAILED for a deadlock with another transaction: nothing was
 * claimed, claim again.
 */
A2_STORE_MUST_CHECK int
a2_store_claim_sessions(a2_store *store, const a2_claim_session *sessions,
                        size_t n, const a2_claim_request *req,
                        a2_claim_result *out);

typedef struct a2_attempt_ref {
    const char *consumer;
    const char *lane; /* NULL: a concurrent cursor */
    int64_t index;
    int attempt;
} a2_attempt_ref;

typedef struct a2_renew_result {
    a2_head_ref *renewed; /* claims extended */
    size_t nrenewed;
    a2_head_ref *superseded; /* claims this holder lost (taken over, done,
                                cleared) */
    size_t nsuperseded;
    a2_store_arena *arena_;
} a2_renew_result;
void a2_renew_result_free(a2_renew_result *r);

/* Extends holder's live claims to now + ttl_ms (or expires_at_ms when not
 * 0). A claim neither renewed nor superseded is in neither list. */
A2_STORE_MUST_CHECK int
a2_store_renew(a2_store *store, const char *session, const char *holder,
               const a2_attempt_ref *claims, size_t nclaims, int64_t ttl_ms,
               int64_t expires_at_ms, a2_renew_result *out);

typedef enum a2_attempt_outcome {
    A2_ATTEMPT_COMPLETED = 1,
    A2_ATTEMPT_SUPERSEDED = 2,
    A2_ATTEMPT_FAILED = 3,
    A2_ATTEMPT_DEAD_LETTERED = 4,
} a2_attempt_outcome;

typedef struct a2_complete_result {
    int outcome;      /* COMPLETED or SUPERSEDED */
    a2_events events; /* COMPLETED: the returned events as stored */
} a2_complete_result;
void a2_complete_result_free(a2_complete_result *r);

/*
 * Completes attempt `attempt` of the head (consumer, lane, index): appends
 * the returned events (each with an id; their cause is this attempt) and
 * moves the cursor to its next head. consumers (may be NULL) are the served
 * consumers, as in append. Outcomes:
 *   - COMPLETED with the stored events; a retry after an unknown
 *     acknowledgement replays the committed events (events.replayed);
 *   - SUPERSEDED: the attempt no longer holds the head;
 *   - A2_EPARTIAL_DUPLICATE_BATCH: an id repeated, an id a live event owns,
 *     or a retry that does not match the committed completion;
 *   - A2_ENO_SUCH_EVENT: no event at index.
 */
A2_STORE_MUST_CHECK int
a2_store_complete(a2_store *store, const char *session,
                  const a2_attempt_ref *attempt, const a2_append_event *events,
                  size_t nevents, const a2_consumer *consumers,
                  size_t nconsumers, a2_complete_result *out);

typedef struct a2_fail_request {
    const char *error;      /* the failure's text (NULL: empty) */
    int max_failures;       /* >= 1: the failure count that dead-letters */
    int64_t retry_after_ms; /* >= 0: hold the head this long (0: no hold) */
} a2_fail_request;

typedef struct a2_fail_result {
    int outcome; /* FAILED, DEAD_LETTERED or SUPERSEDED */
    int failure_count;
} a2_fail_result;

/* Records a failed attempt. A2_ENO_SUCH_EVENT when there is no event at the
 * index. */
A2_STORE_MUST_CHECK int a2_store_fail(a2_store *store, const char *session,
                                      const a2_attempt_ref *attempt,
                                      const a2_fail_request *req,
                                      a2_fail_result *out);

/* At most this many settlements in one a2_store_settle. */
#define A2_STORE_MAX_SETTLE 1000

/* One settlement of a2_store_settle: a completion with its returned events
 * (fail NULL), or a failure (fail set; events unused). */
typedef struct a2_settlement {
    a2_attempt_ref attempt;
    const a2_append_event *events;
    size_t nevents;
    const a2_fail_request *fail;
    /* A completion of a lane's head (or a log consumer's) may claim the
     * lane's next head in the same transaction, for claim_next's holder,
     * lease, consumers and max_failures (its exclude, through, after_xid
     * and wake_logs apply too): a FIFO lane then takes one commit a head,
     * not a completion's and a claim's. NULL: no claim. Set on a failure
     * or on an attempt without a lane: A2_EINVALID_ARGUMENT. */
    const a2_claim_request *claim_next;
} a2_settlement;

typedef struct a2_settle_result {
    int outcome;       /* COMPLETED, SUPERSEDED, FAILED or DEAD_LETTERED */
    int failure_count; /* a failure's count (0 for a completion) */
    a2_events events;  /* COMPLETED: the returned events as stored */
    /* claim_next: the claim of the lane's next head, as a2_store_claim's
     * result (CLAIMED with that head, or BUSY or SETTLED: nothing of the
     * lane to run), made after the completion whatever its outcome. */
    a2_claim_result next;
} a2_settle_result;
/* Frees the n results of an a2_store_settle. NULL-safe. */
void a2_settle_results_free(a2_settle_result *results, size_t n);

/*
 * Settles n attempts of one session (1..A2_STORE_MAX_SETTLE, claims of
 * claim_next counted) in one call (a2_batch): each completion and failure
 * as a2_store_complete and a2_store_fail would, each claim_next right after
 * its completion, in one transaction and one round trip, all or
 * nothing. out (n entries) gets each one's outcome, in order; on an error
 * nothing is settled (the error is the first settlement that raised it, as
 * its own call would report it, or A2_ESTORE_FAILED for a deadlock with
 * another transaction: settle again).
 */
A2_STORE_MUST_CHECK int a2_store_settle(a2_store *store, const char *session,
                                        const a2_settlement *settlements,
                                        size_t n, const a2_consumer *consumers,
                                        size_t nconsumers,
                                        a2_settle_result *out);

/* a2_store_settle of the settlements of several sessions: sessions[i] is
 * the session of settlements[i]. One transaction and one round trip, all or
 * nothing; a2_batch settles them grouped by session (in the byte order of
 * the names), each session's in the order given. */
A2_STORE_MUST_CHECK int
a2_store_settle_sessions(a2_store *store, const char *const *sessions,
                         const a2_settlement *settlements, size_t n,
                         const a2_consumer *consumers, size_t nconsumers,
                         a2_settle_result *out);

/* The session's dead-lettered heads above the clear marker. */
A2_STORE_MUST_CHECK int
a2_store_dead_letters(a2_store *store, const char *session, a2_heads *out);

typedef enum a2_redrive_action {
    A2_REDRIVE_RETRY = 1, /* run the head again (failures reset) */
    A2_REDRIVE_SKIP = 2,  /* pass it: the cursor moves to its next head */
} a2_redrive_action;

typedef struct a2_redrive_result {
    bool redriven;    /* false: no dead letter of consumer at index */
    bool has_pending; /* a served consumer has work in the session */
} a2_redrive_result;

/* Retries or skips consumer's dead letter at index. consumers: served
 * (NULL: every consumer). */
A2_STORE_MUST_CHECK int
a2_store_redrive(a2_store *store, const char *session, const char *consumer,
                 int64_t index, int action, const a2_consumer *consumers,
                 size_t nconsumers, a2_redrive_result *out);

typedef struct a2_clear_result {
    bool cleared;        /* false: if_last_index no longer matches the head */
    int64_t index;       /* the marker's index, or the head when none written */
    int64_t clear_index; /* the session's clear marker after the call */
} a2_clear_result;

/*
 * Clears the session: appends a marker event of type A2_STORE_CLEAR_TYPE;
 * events below it are gone for reads, cursors at or below it are superseded.
 * if_last_index: A2_STORE_NONE, or the head index the caller saw (a retry of
 * the same clear reports cleared without a second marker). cause (NULL: none)
 * is a clearing consumer's attempt: fenced like an append's cause
 * (A2_ESUPERSEDED_ATTEMPT), and its head is released.
 */
A2_STORE_MUST_CHECK int a2_store_clear(a2_store *store, const char *session,
                                       int64_t if_last_index,
                                       const a2_cause *cause,
                                       a2_clear_result *out);

typedef struct a2_reclaim_result {
    int64_t deleted; /* events deleted by this call */
    bool done;       /* nothing below the marker is left */
} a2_reclaim_result;

/* Deletes one batch of what lies below the clear marker (events, lane
 * entries, superseded cursor runs, snapshots). Call until done. */
A2_STORE_MUST_CHECK int a2_store_reclaim(a2_store *store, const char *session,
                                         a2_reclaim_result *out);

typedef struct a2_sessions {
    char **items;
    size_t count;
    a2_store_arena *arena_;
} a2_sessions;
void a2_sessions_free(a2_sessions *r);

/*
 * The sessions (ordered by id, after `after`, NULL: from the first; at most
 * limit, 1..10000) where one of the consumers has a head that is claimable
 * now or held by a live or lapsed claim (not dead-lettered, above the clear
 * marker). A worker calls it on a resync; page with the last id returned.
 * Served by the a2_cursors_pending index.
 */
A2_STORE_MUST_CHECK int
a2_store_pending_sessions(a2_store *store, const char *const *consumers,
                          size_t nconsumers, const char *after, size_t limit,
                          a2_sessions *out);

/* ── operators: across sessions ───────────────────────────────────────── */

/* Which dead letters an operator means. Every field is optional (NULL or
 * A2_STORE_NONE: any). error matches a substring of the last error,
 * ignoring case; failed_after and failed_before bound failed_at (epoch ms,
 * inclusive after, exclusive before). */
typedef struct a2_dead_letter_filter {
    const char *consumer;
    const char *type; /* the event's type, exactly */
    const char *error;
    int64_t failed_after;
    int64_t failed_before;
} a2_dead_letter_filter;

/* A dead letter's place in the order of a2_store_find_dead_letters (newest
 * failure first): the key of the last row of a page. */
typedef struct a2_dead_letter_key {
    int64_t failed_at;
    const char *session_id;
    const char *consumer;
    const char *cursor_key;
    int64_t epoch;
} a2_dead_letter_key;

/*
 * Dead letters across sessions matching filter (NULL: all), newest failure
 * first, after key (NULL: from the newest), at most limit (1..1000). Each
 * head's event carries its session_id. Page by passing the last row's key
 * (failed_at, session_id, dispatch.consumer, dispatch.cursor_key,
 * dispatch.epoch). Served by the a2_cursors_dead indexes.
 */
A2_STORE_MUST_CHECK int
a2_store_find_dead_letters(a2_store *store, const a2_dead_letter_filter *filter,
                           const a2_dead_letter_key *after, size_t limit,
                           a2_heads *out);

/* How many dead letters match filter (NULL: all): what a bulk redrive of
 * it takes, call after call. */
A2_STORE_MUST_CHECK int
a2_store_count_dead_letters(a2_store *store,
                            const a2_dead_letter_filter *filter, int64_t *out);

typedef struct a2_bulk_result {
    int64_t count; /* dead letters redriven by this call */
    bool more;     /* the filter matched more than limit: call again */
} a2_bulk_result;

/*
 * Retries or skips (a2_redrive_action) up to limit (1..10000) dead letters
 * matching filter (NULL: all), oldest failure first, each as
 * a2_store_redrive would, in one transaction. Call again while more.
 */
A2_STORE_MUST_CHECK int
a2_store_redrive_matching(a2_store *store, const a2_dead_letter_filter *filter,
                          int action, size_t limit, a2_bulk_result *out);

typedef enum a2_cancel_outcome {
    A2_CANCEL_CANCELLED = 1,   /* the cursor passed the head */
    A2_CANCEL_RUNNING = 2,     /* refused: a live claim holds it */
    A2_CANCEL_NOT_PENDING = 3, /* no pending head of consumer at index (done,
                                  dead-lettered, cleared or never targeted) */
} a2_cancel_outcome;

typedef struct a2_cancel_result {
    int outcome;        /* a2_cancel_outcome */
    const char *holder; /* RUNNING: the claim's holder */
    int64_t expires_at; /* RUNNING: its lease end */
    bool has_pending;   /* a served consumer has work in the session */
    a2_store_arena *arena_;
} a2_cancel_result;
void a2_cancel_result_free(a2_cancel_result *r);

/*
 * Cancels consumer's pending head at index (waiting, delayed, held for a
 * retry, or with a lapsed claim): the cursor passes it without running it.
 * The audit shows it as "cancelled" (the reason as its error), then
 * "skipped". A head a live claim holds is refused (A2_CANCEL_RUNNING).
 * reason: NULL or text up to 64 KiB. consumers: served (NULL: every one),
 * for has_pending. Takes the cursor row, then the session's advisory lock.
 */
A2_STORE_MUST_CHECK int
a2_store_cancel(a2_store *store, const char *session, const char *consumer,
                int64_t index, const char *reason, const a2_consumer *consumers,
                size_t nconsumers, a2_cancel_result *out);

/* A consumer's backlog. Heads at or below a clear marker are not counted. */
typedef struct a2_backlog_row {
    const char *consumer;
    int64_t pending; /* heads not dead-lettered (running included) */
    int64_t running; /* of those, held by a claim (live or lapsed) */
    int64_t dead_letters;
    int64_t oldest_pending_at; /* created_at of the oldest pending head's
                                  event; A2_STORE_NONE when none */
} a2_backlog_row;

typedef struct a2_backlog {
    a2_backlog_row *items;
    size_t count;
    a2_store_arena *arena_;
} a2_backlog;
void a2_backlog_free(a2_backlog *r);

/* Backlog of the named consumers (NULL, 0: every consumer with a head or a
 * dead letter), by consumer name. */
A2_STORE_MUST_CHECK int a2_store_backlog(a2_store *store,
                                         const char *const *consumers,
                                         size_t nconsumers, a2_backlog *out);

#endif
