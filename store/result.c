/*
 * liba2store results: the arenas results live in, the decoding of the
 * store functions' rows and jsonb results into events, heads and cursors,
 * the events an append or a completion stored, and the release of these
 * results.
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

/* ── arena ───────────────────────────────────────────────────────────── */

typedef struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
} block;

struct a2_store_arena {
    block *head;
    bool failed;
};

a2_store_arena *a2__arena_new(void)
{
    return calloc(1, sizeof(a2_store_arena));
}

void a2__arena_free(a2_store_arena *a)
{
    if (!a)
        return;
    block *b = a->head;
    while (b) {
        block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

void *a2__arena_alloc(a2_store_arena *a, size_t size)
{
    size_t align = sizeof(max_align_t);
    size = (size + align - 1) / align * align;
    if (size == 0)
        size = align;
    block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 16384 ? size : 16384;
        b = malloc(sizeof(block) + cap);
        if (!b) {
            a->failed = true;
            return NULL;
        }
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

bool a2__arena_failed(const a2_store_arena *a)
{
    return !a || a->failed;
}

char *a2__arena_strdup(a2_store_arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = a2__arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void a2__store_free_result(a2_store_arena *arena, void *r, size_t size)
{
    a2__arena_free(arena);
    memset(r, 0, size);
}

void *a2__store_result_init(a2_store *s, a2_store_arena **arena, size_t n,
                            size_t size)
{
    *arena = a2__arena_new();
    void *items = *arena ? a2__arena_alloc(*arena, (n ? n : 1) * size) : NULL;
    if (!items)
        a2__store_nomem(s);
    return items;
}

/* ── members ─────────────────────────────────────────────────────────── */

int64_t a2__row_int(const json_t *row, const char *key)
{
    const json_t *v = json_object_get(row, key);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v))
        return (int64_t)json_real_value(v);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return A2_STORE_NONE;
}

const char *a2__row_str(a2_store_arena *a, const json_t *row, const char *key)
{
    const json_t *v = json_object_get(row, key);
    if (!json_is_string(v))
        return NULL;
    return a2__arena_strdup(a, json_string_value(v));
}

bool a2__row_bool(const json_t *row, const char *key)
{
    return json_is_true(json_object_get(row, key));
}

const char *a2__row_text(const json_t *row, const char *key)
{
    return json_string_value(json_object_get(row, key));
}

bool a2__store_outcome_is(const json_t *res, const char *name)
{
    const char *o = a2__row_text(res, "outcome");
    return o && strcmp(o, name) == 0;
}

int a2__store_as_int(int64_t v)
{
    return v == A2_STORE_NONE ? 0 : (int)v;
}

/* ── rows ────────────────────────────────────────────────────────────── */

/* A cause as a result holds it: an object, or (from a table function's
 * row) its JSON text. */
static void decode_cause(a2_store_arena *a, const json_t *c, a2_event *e)
{
    json_t *parsed = NULL;
    if (json_is_string(c))
        c = parsed = json_loads(json_string_value(c), 0, NULL);
    if (json_is_object(c)) {
        e->has_cause = true;
        e->cause.consumer = a2__row_str(a, c, "consumer");
        e->cause.lane = a2__row_str(a, c, "lane");
        e->cause.index = a2__row_int(c, "index");
        e->cause.attempt = a2__store_as_int(a2__row_int(c, "attempt"));
    }
    json_decref(parsed);
}

/* An event (index, type, payload as text, id, created_at, cause); session
 * is the call's. */
static void decode_event(a2_store_arena *a, const json_t *row,
                         const char *session, a2_event *e)
{
    e->session_id = a2__arena_strdup(a, session);
    e->index = a2__row_int(row, "index");
    e->type = a2__row_str(a, row, "type");
    e->payload = a2__row_str(a, row, "payload");
    e->id = a2__row_str(a, row, "id");
    e->created_at = a2__row_int(row, "created_at");
    decode_cause(a, json_object_get(row, "cause"), e);
}

static void decode_dispatch(a2_store_arena *a, const json_t *row,
                            a2_dispatch *d)
{
    d->consumer = a2__row_str(a, row, "consumer");
    d->lane = a2__row_str(a, row, "lane");
    d->cursor_key = a2__row_str(a, row, "cursor_key");
    d->kind = a2__row_str(a, row, "kind");
    d->epoch = a2__row_int(row, "epoch");
    d->attempt_count = a2__store_as_int(a2__row_int(row, "attempt"));
    d->first_claimed_at = a2__row_int(row, "first_claimed_at");
    d->last_claimed_at = a2__row_int(row, "last_claimed_at");
    d->claim_holder = a2__row_str(a, row, "holder");
    d->claim_expires_at = a2__row_int(row, "expires_at");
    d->failure_count = a2__store_as_int(a2__row_int(row, "failure_count"));
    d->last_failed_at = a2__row_int(row, "last_failed_at");
    d->last_failed_attempt = a2__row_int(row, "last_failed_attempt");
    d->last_error = a2__row_str(a, row, "last_error");
    d->failed_at = a2__row_int(row, "failed_at");
}

void a2__store_decode_cursor(a2_store_arena *a, const json_t *row,
                             a2_cursor *c)
{
    decode_dispatch(a, row, &c->dispatch);
    c->position = a2__row_int(row, "position");
    c->head = a2__row_int(row, "head");
    const char *kind = a2__row_text(row, "kind");
    if (kind && strcmp(kind, "log") == 0) {
        const json_t *t = json_object_get(row, "types");
        if (json_is_string(t)) {
            c->types = a2__arena_strdup(a, json_string_value(t));
        } else {
            char *text = json_dumps(t ? t : json_null(),
                                    JSON_COMPACT | JSON_ENCODE_ANY);
            c->types = a2__arena_strdup(a, text ? text : "null");
            free(text);
        }
    }
}

/* A head; session NULL: the row's "session_id". */
static void decode_head(a2_store_arena *a, const json_t *row,
                        const char *session, a2_head *h)
{
    decode_event(a, row, session ? session : a2__row_text(row, "session_id"),
                 &h->event);
    decode_dispatch(a, row, &h->dispatch);
    int64_t ci = a2__row_int(row, "clear_index");
    h->clear_index = ci == A2_STORE_NONE ? 0 : ci;
}

/* ── lists ───────────────────────────────────────────────────────────── */

void *a2__store_decode_rows(a2_store *s, const json_t *list, size_t size,
                            a2__store_row_fn fn, const void *ctx,
                            a2_store_arena **arena, size_t *count)
{
    size_t n = json_array_size(list);
    char *items = a2__store_result_init(s, arena, n, size);
    if (!items)
        return NULL;
    for (size_t i = 0; i < n; i++)
        fn(*arena, json_array_get(list, i), ctx, items + i * size);
    *count = n;
    if (a2__arena_failed(*arena)) {
        a2__store_nomem(s);
        return NULL;
    }
    return items;
}

void *a2__store_run_rows(a2_store *s, const char *sql, a2__store_params *p,
                         size_t size, a2__store_row_fn fn, const void *ctx,
                         a2_store_arena **arena, size_t *count, int *rc)
{
    json_t *rows = NULL;
    *rc = a2__store_run(s, sql, p, true, &rows);
    void *items = NULL;
    if (*rc == 0) {
        items = a2__store_decode_rows(s, rows, size, fn, ctx, arena, count);
        *rc = items ? 0 : A2_ESTORE_NOMEM;
    }
    json_decref(rows);
    if (!items) {
        a2__arena_free(*arena);
        *arena = NULL;
        *count = 0;
    }
    return items;
}

void *a2__store_session_rows(a2_store *s, const char *sql, const char *session,
                             size_t size, a2__store_row_fn fn,
                             a2_store_arena **arena, size_t *count, int *rc)
{
    a2__store_params p = {0};
    *rc = a2__store_param_session(s, &p, session);
    return *rc ? NULL
               : a2__store_run_rows(s, sql, &p, size, fn, session, arena, count,
                                    rc);
}

void a2__store_cursor_row(a2_store_arena *a, const json_t *row, const void *ctx,
                          void *item)
{
    (void)ctx;
    a2__store_decode_cursor(a, row, item);
}

void a2__store_event_row(a2_store_arena *a, const json_t *row,
                         const void *session, void *item)
{
    decode_event(a, row, session, item);
}

void a2__store_head_row(a2_store_arena *a, const json_t *row,
                        const void *session, void *item)
{
    decode_head(a, row, session, item);
}

int a2__store_decode_heads(a2_store *s, const json_t *list,
                           const char *session, a2_heads *out)
{
    out->items =
            a2__store_decode_rows(s, list, sizeof(a2_head), a2__store_head_row,
                                  session, &out->arena_, &out->count);
    return out->items ? 0 : A2_ESTORE_NOMEM;
}

int a2__store_stored_events(a2_store *s, const char *session,
                            const json_t *res, const a2_append_event *ev,
                            size_t n, const a2_cause *cause_all, int64_t now,
                            a2_events *out)
{
    const json_t *list = json_object_get(res, "events");
    if (json_is_true(json_object_get(res, "replayed")) ||
        a2__store_outcome_is(res, "replayed")) {
        out->items = a2__store_decode_rows(s, list, sizeof(a2_event),
                                           a2__store_event_row, session,
                                           &out->arena_, &out->count);
        out->replayed = true;
        return out->items ? 0 : A2_ESTORE_NOMEM;
    }
    if (json_array_size(list) != n)
        return a2__store_fail(s, A2_ESTORE_FAILED,
                              "the store stored %zu events of %zu",
                              json_array_size(list), n);
    out->items = a2__store_result_init(s, &out->arena_, n, sizeof(a2_event));
    if (!out->items)
        return A2_ESTORE_NOMEM;
    a2_store_arena *a = out->arena_;
    for (size_t i = 0; i < n; i++) {
        const json_t *stored = json_array_get(list, i);
        a2_event *e = &out->items[i];
        e->session_id = a2__arena_strdup(a, session);
        e->index = a2__row_int(stored, "index");
        e->type = a2__arena_strdup(a, ev[i].type);
        e->payload =
                a2__arena_strdup(a, ev[i].payload ? ev[i].payload : "null");
        e->id = a2__row_str(a, stored, "id");
        e->created_at = now;
        const a2_cause *c = cause_all ? cause_all : ev[i].cause;
        if (c) {
            e->has_cause = true;
            e->cause.consumer = a2__arena_strdup(a, c->consumer);
            e->cause.lane = a2__arena_strdup(a, c->lane);
            e->cause.index = c->index;
            e->cause.attempt = c->attempt;
        }
    }
    out->count = n;
    return a2__arena_failed(a) ? a2__store_nomem(s) : 0;
}

/* ── release ─────────────────────────────────────────────────────────── */

void a2_events_free(a2_events *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

void a2_heads_free(a2_heads *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

void a2_cursors_free(a2_cursors *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

void a2_sessions_free(a2_sessions *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}
