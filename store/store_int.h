/*
 * liba2store internals: the store handle, the a2_batch call, result arenas
 * and row decoding. Not installed.
 */
#ifndef A2_STORE_INT_H
#define A2_STORE_INT_H

#include "a2/store.h"

#include <jansson.h>
#include <libpq-fe.h>

struct a2_store {
    PGconn *conn;
    char *conninfo;
    bool prepared;
    a2_store_error err;
    a2_store_clock_fn clock;
    void *clock_ctx;
    a2_store_id_fn ids;
    void *ids_ctx;
    uint64_t round_trips;
    int timeout_ms;         /* a2_store_set_timeout; 0: none */
    int timeout_applied_ms; /* the statement_timeout this store set on the
                               connection (0: none, the session's own) */
};

/* Statements of one batch, NULL entries skipped. */
#define A2__BATCH_MAX 16

/* a2_batch raised an abort row: *abort_row holds it. */
#define A2__ABORTED 1

/* Sets the store's error (printf-style message) and returns code. */
int a2__store_fail(a2_store *s, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Clears the store's error; returns 0. */
int a2__store_ok(a2_store *s);

/*
 * Runs one a2_batch call: statements (NULL entries skipped) with params (a
 * JSON object; borrowed; "session" is added by the caller). On success
 * *rows is a new JSON array of the returned rows (objects) and 0 is
 * returned. When a statement aborted, returns A2__ABORTED with the abort row
 * in *abort_row (new reference) and the store's error set to
 * A2_ESTORE_FAILED for the caller to refine. Otherwise a negative code.
 */
int a2__store_batch(a2_store *s, const char *const *statements, size_t n,
                    json_t *params, json_t **rows, json_t **abort_row);

/* Now, from the store's clock. */
int64_t a2__store_now(a2_store *s);

/* A new id from the store's generator into buf (len >= 64). */
int a2__store_new_id(a2_store *s, char *buf, size_t len);

/* Arena: blocks freed together. */
a2_store_arena *a2__arena_new(void);
void a2__arena_free(a2_store_arena *a);
void *a2__arena_alloc(a2_store_arena *a, size_t size);
char *a2__arena_strdup(a2_store_arena *a, const char *s);
/* Whether an allocation of the arena failed (or a is NULL). */
bool a2__arena_failed(const a2_store_arena *a);

/* Row decoding: a member as an integer (A2_STORE_NONE when null/absent),
 * a string copied into the arena (NULL when null/absent), a boolean. */
int64_t a2__row_int(const json_t *row, const char *key);
const char *a2__row_str(a2_store_arena *a, const json_t *row, const char *key);
bool a2__row_bool(const json_t *row, const char *key);

#endif
