/*
 * liba2store internals, shared by the operations' files: the store handle,
 * its errors and the call of a store function (store.c); the input checks
 * (check.c); a call's arguments (args.c); result arenas, row decoding and
 * the decoding of results (result.c). Not installed.
 */
#ifndef A2_STORE_INT_H
#define A2_STORE_INT_H

#include "a2/store.h"

#include <jansson.h>
#include <libpq-fe.h>

struct a2_store {
    PGconn *conn;
    char *conninfo;
    a2_store_error err;
    a2_store_clock_fn clock;
    void *clock_ctx;
    a2_store_id_fn ids;
    void *ids_ctx;
    uint64_t round_trips;
    int timeout_ms; /* a2_store_set_timeout; 0: none */
};

/* Sets the store's error (printf-style message) and returns code. */
int a2__store_fail(a2_store *s, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Clears the store's error; returns 0. */
int a2__store_ok(a2_store *s);

/* Sets the store's error to out of memory and returns A2_ESTORE_NOMEM. */
int a2__store_nomem(a2_store *s);

/*
 * One round trip: runs sql, the call of one store function (sql/src) with
 * nparams parameters (their text, and their types' oids), in a transaction
 * of its own (with the store's timeout as its statement_timeout, when set).
 * rows false: the function returns one jsonb, parsed into *out (a new
 * reference; null as JSON null). rows true: a table function; *out is a new
 * array of its rows, each an object of its columns by name with their text
 * (null: JSON null). Returns 0, or a negative code with the store's error
 * set: an A2xxx SQLSTATE maps to its a2_store_code with the function's
 * message (without its "NAME: ").
 */
int a2__store_call(a2_store *s, const char *sql, int nparams,
                   const Oid *types, const char *const *values, bool rows,
                   json_t **out);

/* Now, from the store's clock. */
int64_t a2__store_now(a2_store *s);

/* A new id from the store's generator into buf (len >= 64). */
int a2__store_new_id(a2_store *s, char *buf, size_t len);

/* ── input checks (check.c): 0, or A2_EINVALID_ARGUMENT with the store's
 * error naming what was wrong ("what" names the value in the message) ── */

/* Whether v is UTF-8 of at most max bytes. */
bool a2__store_text_ok(const char *v, size_t max);

/* A name: not NULL or empty, at most A2_STORE_MAX_NAME bytes, UTF-8. */
int a2__store_check_name(a2_store *s, const char *what, const char *v);
/* A name, or NULL. */
int a2__store_check_opt_name(a2_store *s, const char *what, const char *v);
/* Each of the n names of v (none when v is NULL). */
int a2__store_check_names(a2_store *s, const char *what,
                          const char *const *v, size_t n);
/* A consumer's name and its lane (NULL: none), named cwhat and lwhat. */
int a2__store_check_consumer_lane(a2_store *s, const char *cwhat,
                                  const char *lwhat, const char *consumer,
                                  const char *lane);
/* An array p of n items: not NULL when n > 0. */
int a2__store_check_counted(a2_store *s, const char *what, const void *p,
                            size_t n);
/* v >= 0. */
int a2__store_check_not_negative(a2_store *s, const char *what, int64_t v);
/* 1 <= limit <= max. */
int a2__store_check_limit(a2_store *s, size_t limit, int max);
/* A lease: a positive ttl or an expiry (what: "a claim", "a renewal"). */
int a2__store_check_lease(a2_store *s, const char *what, int64_t ttl_ms,
                          int64_t expires_at_ms);
/* An event of a session's consumer: both names, index >= 1. */
int a2__store_check_event_ref(a2_store *s, const char *session,
                              const char *consumer, int64_t index);
/* A cause (what names it in the message). */
int a2__store_check_cause(a2_store *s, const char *what, const a2_cause *c);
/* An attempt: not NULL, its names, index and attempt >= 1. */
int a2__store_check_attempt(a2_store *s, const a2_attempt_ref *a);
/* The served consumers of a call and their log specs. */
int a2__store_check_consumers(a2_store *s, const a2_consumer *cons,
                              size_t n);
/* The events of an append (ids optional, causes checked) or a completion
 * (ids_required; the completion is the cause). */
int a2__store_check_events(a2_store *s, const a2_append_event *ev, size_t n,
                           bool ids_required);
/* Sorts the n strings of v; the first that repeats, or NULL. */
const char *a2__store_first_repeat(const char **v, size_t n);
/* Whether a supplied id repeats in the batch: 1, 0, or -1 when out of
 * memory. */
int a2__store_ids_repeat(const a2_append_event *ev, size_t n);

/* ── a call's arguments (args.c) ── */

/* The buffer of a generated id. */
#define A2__STORE_ID_BUF 256

/* The parameters of one call, in order, as text with their types (text,
 * bigint, jsonb), the owned ones freed by a2__store_run. The calls a
 * producer and a worker make (append, claim, renew, complete, fail,
 * a2_batch) give every argument, typed, in the function's order: planned
 * so, a call neither resolves a parameter's type nor matches argument names
 * nor fills in a default (a one-event append runs 6 % faster than with
 * every argument named, docs/sql.md). */
#define A2__STORE_MAX_PARAMS 12
typedef struct a2__store_params {
    const char *v[A2__STORE_MAX_PARAMS];
    Oid t[A2__STORE_MAX_PARAMS];
    char *owned[A2__STORE_MAX_PARAMS];
    int n;
    bool failed;
} a2__store_params;

/* A text parameter (borrowed; NULL: SQL null). */
void a2__store_param_text(a2__store_params *p, const char *v);
/* An integer parameter; A2_STORE_NONE: SQL null. */
void a2__store_param_int(a2__store_params *p, int64_t v);
/* A JSON parameter, stolen; NULL (out of memory) fails the call, JSON null
 * is SQL null. */
void a2__store_param_json(a2__store_params *p, json_t *j);
/* The three parameters of an event of a session's consumer: session,
 * consumer, index. */
void a2__store_param_event_ref(a2__store_params *p, const char *session,
                               const char *consumer, int64_t index);
/* The call of sql with p (freed here); *out as a2__store_call's. */
int a2__store_run(a2_store *s, const char *sql, a2__store_params *p,
                  bool rows, json_t **out);
/* The call of sql on one event of a session's consumer (its reference
 * checked by the caller) with one text argument and the served consumers,
 * checked here: parameters session, consumer, index, text, consumers; *out
 * as a2__store_run's (one jsonb). */
int a2__store_run_on_event(a2_store *s, const char *sql, const char *session,
                           const char *consumer, int64_t index,
                           const char *text, const a2_consumer *consumers,
                           size_t nconsumers, json_t **out);
/* The session, checked as a name, as the one parameter of p; 0 or the
 * check's code. */
int a2__store_param_session(a2_store *s, a2__store_params *p,
                            const char *session);

/* JSON of the arguments; NULL when out of memory. */
json_t *a2__store_str_or_null(const char *v);
/* Appends v (stolen) to array a; NULL (a released) when that fails. */
json_t *a2__store_push(json_t *a, json_t *v);
/* {"consumer", "lane", "index"} */
json_t *a2__store_head_json(const char *consumer, const char *lane,
                            int64_t index);
/* {"consumer", "lane", "index", "attempt"} */
json_t *a2__store_cause_json(const a2_cause *c);
/* The cause an attempt is to the events its completion appends. */
a2_cause a2__store_attempt_cause(const a2_attempt_ref *a);
/* An array of strings. */
json_t *a2__store_strings_json(const char *const *v, size_t n);
/* A log consumer's types: an array, or null (every type). */
json_t *a2__store_types_json(const a2_log_spec *log);
/* The served consumers: null (every one), or [{"name", "log"}]. */
json_t *a2__store_consumers_json(const a2_consumer *cons, size_t n);
/* The events of an append or a completion, ids[i] each one's id (causes:
 * the append's own; completions pass none, their function sets it). */
json_t *a2__store_events_json(const a2_append_event *ev, size_t n,
                              char **ids, bool causes);
/* Ids for a batch: supplied or generated; NULL with *rc set on failure. */
char **a2__store_batch_ids(a2_store *s, const a2_append_event *ev, size_t n,
                           int *rc);
void a2__store_free_ids(char **ids, size_t n);

/* ── results (result.c) ── */

/* Arena: blocks freed together. */
a2_store_arena *a2__arena_new(void);
void a2__arena_free(a2_store_arena *a);
void *a2__arena_alloc(a2_store_arena *a, size_t size);
char *a2__arena_strdup(a2_store_arena *a, const char *s);
/* Whether an allocation of the arena failed (or a is NULL). */
bool a2__arena_failed(const a2_store_arena *a);

/* A result's release: frees arena and zeroes the size bytes of r. */
void a2__store_free_result(a2_store_arena *arena, void *r, size_t size);

/* Row decoding: a member as an integer (A2_STORE_NONE when null/absent),
 * a string copied into the arena (NULL when null/absent), a boolean. */
int64_t a2__row_int(const json_t *row, const char *key);
const char *a2__row_str(a2_store_arena *a, const json_t *row, const char *key);
bool a2__row_bool(const json_t *row, const char *key);
/* A string member, borrowed from row (NULL when not a string). */
const char *a2__row_text(const json_t *row, const char *key);

/* Whether the result's "outcome" is name. */
bool a2__store_outcome_is(const json_t *res, const char *name);
/* v as an int; A2_STORE_NONE as 0. */
int a2__store_as_int(int64_t v);
/* A result's new arena (*arena) and its array of n items of size bytes (at
 * least one, so an empty result still has an array); NULL when out of
 * memory, with the store's error set. */
void *a2__store_result_init(a2_store *s, a2_store_arena **arena, size_t n,
                            size_t size);
/* Decodes one row of a list into item (ctx: the caller's). */
typedef void (*a2__store_row_fn)(a2_store_arena *a, const json_t *row,
                                 const void *ctx, void *item);
/* The rows of list decoded by fn into a new arena's (*arena) array of items
 * of size bytes (as a2__store_result_init's), *count their number; NULL
 * when out of memory, with the store's error set. */
void *a2__store_decode_rows(a2_store *s, const json_t *list, size_t size,
                            a2__store_row_fn fn, const void *ctx,
                            a2_store_arena **arena, size_t *count);
/* The call of sql, a table function, with p (freed here), its rows decoded
 * as a2__store_decode_rows does; *rc 0, or the code of the call or of the
 * decoding, when NULL is returned with *arena freed and *count 0. */
void *a2__store_run_rows(a2_store *s, const char *sql, a2__store_params *p,
                         size_t size, a2__store_row_fn fn, const void *ctx,
                         a2_store_arena **arena, size_t *count, int *rc);
/* The same call of sql, whose one parameter is the session (checked as a
 * name first), with the session as fn's ctx. */
void *a2__store_session_rows(a2_store *s, const char *sql, const char *session,
                             size_t size, a2__store_row_fn fn,
                             a2_store_arena **arena, size_t *count, int *rc);
/* Rows as a2_cursors, a2_read and a2_dead_letters return them: a cursor;
 * an event of the session ctx; a head of the session ctx (NULL: the row's
 * "session_id"). */
void a2__store_cursor_row(a2_store_arena *a, const json_t *row, const void *ctx,
                          void *item);
void a2__store_event_row(a2_store_arena *a, const json_t *row,
                         const void *session, void *item);
void a2__store_head_row(a2_store_arena *a, const json_t *row,
                        const void *session, void *item);
/* A cursor as a2_cursors reports it (a row, or a2_wake_log's object, whose
 * types are JSON). */
void a2__store_decode_cursor(a2_store_arena *a, const json_t *row,
                             a2_cursor *c);
/* out: the heads of a list; session NULL: each row's "session_id". */
int a2__store_decode_heads(a2_store *s, const json_t *list,
                           const char *session, a2_heads *out);
/*
 * out: the events an append or a completion stored, from the call's input
 * and the result's [{"index", "id"}] (cause_all: every event's cause, else
 * each one's own), or the committed rows of a replay.
 */
int a2__store_stored_events(a2_store *s, const char *session,
                            const json_t *res, const a2_append_event *ev,
                            size_t n, const a2_cause *cause_all, int64_t now,
                            a2_events *out);

#endif
