/*
 * liba2store internals: the store handle, the call of a store function,
 * result arenas and row decoding. Not installed.
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

/*
 * One round trip: runs sql, the call of one store function (sql/src) with
 * nparams text parameters, in a transaction of its own (with the store's
 * timeout as its statement_timeout, when set). rows false: the function
 * returns one jsonb, parsed into *out (a new reference; null as JSON null).
 * rows true: a table function; *out is a new array of its rows, each an
 * object of its columns by name with their text (null: JSON null). Returns 0,
 * or a negative code with the store's error set: an A2xxx SQLSTATE maps to
 * its a2_store_code with the function's message (without its "NAME: ").
 */
int a2__store_call(a2_store *s, const char *sql, int nparams,
                   const char *const *values, bool rows, json_t **out);

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
