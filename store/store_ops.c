/*
 * liba2store operations: input checks, the arguments of one store function
 * call each (sql/src), and the decoding of its result.
 */
#include "store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING_LIMIT 10000
#define ID_BUF            256

/* ── input checks ────────────────────────────────────────────────────── */

static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        size_t n;
        unsigned cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
            (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += n + 1;
    }
    return true;
}

static int check_name(a2_store *s, const char *what, const char *v)
{
    if (!v || !*v)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s must not be empty",
                              what);
    if (strlen(v) > A2_STORE_MAX_NAME)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "%s is longer than %d bytes", what,
                              A2_STORE_MAX_NAME);
    if (!utf8_valid(v))
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s is not valid UTF-8",
                              what);
    return 0;
}

static int check_opt_name(a2_store *s, const char *what, const char *v)
{
    return v ? check_name(s, what, v) : 0;
}

static int check_cause(a2_store *s, const char *what, const a2_cause *c)
{
    int rc = check_name(s, "a cause's consumer", c->consumer);
    if (rc == 0)
        rc = check_opt_name(s, "a cause's lane", c->lane);
    if (rc == 0 && (c->index < 1 || c->attempt < 1))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "%s needs an index and an attempt of at least 1",
                            what);
    return rc;
}

static int check_attempt(a2_store *s, const a2_attempt_ref *a)
{
    if (!a)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "attempt must not be NULL");
    int rc = check_name(s, "consumer", a->consumer);
    if (rc == 0)
        rc = check_opt_name(s, "lane", a->lane);
    if (rc == 0 && (a->index < 1 || a->attempt < 1))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "index and attempt must be at least 1");
    return rc;
}

static int check_consumers(a2_store *s, const a2_consumer *cons, size_t n)
{
    if (!cons && n > 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "consumers must not be NULL when counted");
    for (size_t i = 0; i < n; i++) {
        int rc = check_name(s, "a consumer's name", cons[i].name);
        if (rc)
            return rc;
        const a2_log_spec *log = cons[i].log;
        if (!log)
            continue;
        rc = check_name(s, "a log consumer's lane", log->lane);
        if (rc)
            return rc;
        if (!log->types && log->ntypes > 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "log types must not be NULL when counted");
        for (size_t t = 0; t < log->ntypes; t++) {
            rc = check_name(s, "a log type", log->types[t]);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int check_events(a2_store *s, const a2_append_event *ev, size_t n,
                        bool ids_required)
{
    if (!ev && n > 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "events must not be NULL when counted");
    if (n > A2_STORE_MAX_EVENTS)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d events in one batch",
                              A2_STORE_MAX_EVENTS);
    for (size_t i = 0; i < n; i++) {
        int rc = check_name(s, "an event's type", ev[i].type);
        if (rc)
            return rc;
        if (strcmp(ev[i].type, A2_STORE_CLEAR_TYPE) == 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "event type %s is reserved for clear markers",
                                  A2_STORE_CLEAR_TYPE);
        if (ev[i].id || ids_required) {
            rc = check_name(s, "an event's id", ev[i].id);
            if (rc)
                return rc;
        }
        if (ev[i].payload) {
            if (strlen(ev[i].payload) > A2_STORE_MAX_PAYLOAD)
                return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                      "payload of event %zu is too large",
                                      i + 1);
            json_error_t jerr;
            json_t *v = json_loads(ev[i].payload,
                                   JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL,
                                   &jerr);
            if (!v)
                return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                      "payload of event %zu is not valid "
                                      "JSON: %s",
                                      i + 1, jerr.text);
            json_decref(v);
        }
        if (ev[i].cause && !ids_required) {
            rc = check_cause(s, "a cause", ev[i].cause);
            if (rc)
                return rc;
        }
        if (!ev[i].targets && ev[i].ntargets > 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "targets must not be NULL when counted");
        if (ev[i].ntargets > A2_STORE_MAX_TARGETS)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "more than %d targets on one event",
                                  A2_STORE_MAX_TARGETS);
        if (ev[i].not_before < 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "not_before must not be negative");
        for (size_t t = 0; t < ev[i].ntargets; t++) {
            if (ev[i].targets[t].not_before < 0)
                return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                      "a target's not_before must not be "
                                      "negative");
            rc = check_name(s, "a target's consumer",
                            ev[i].targets[t].consumer);
            if (rc == 0)
                rc = check_opt_name(s, "a target's lane",
                                    ev[i].targets[t].lane);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether a supplied id repeats in the batch; -1 when out of memory. */
static int ids_repeat(const a2_append_event *ev, size_t n)
{
    const char **ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].id)
            ids[k++] = ev[i].id;
    qsort(ids, k, sizeof *ids, cmp_str);
    int dup = 0;
    for (size_t i = 1; i < k; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            dup = 1;
    free(ids);
    return dup;
}


/* ── the calls ───────────────────────────────────────────────────────── */

/* Each operation is one call of its function (sql/src); payloads travel as
 * their JSON text (payload_text) and come back as text (text_payloads), so
 * numbers keep the caller's precision both ways. */
#define SQL_APPEND                                                             \
    "select a2_append(session => $1, events => $2::jsonb, consumers => "     \
    "$3::jsonb, origin => $4::bigint, now_ms => $5::bigint, text_payloads "  \
    "=> true)"
#define SQL_READ                                                               \
    "select * from a2_read(session => $1, after => $2::bigint, max_events "  \
    "=> $3::bigint, types => $4::jsonb)"
#define SQL_CURSORS      "select * from a2_cursors(session => $1)"
#define SQL_DEAD_LETTERS "select * from a2_dead_letters(session => $1)"
#define SQL_WAKE_LOG                                                           \
    "select a2_wake_log(session => $1, consumer => $2, lane => $3, types => " \
    "$4::jsonb, backfill => $5::boolean, after_xid => $6::bigint)"
#define SQL_CLAIM                                                              \
    "select a2_claim(session => $1, holder => $2, expires_at => $3::bigint, " \
    "consumers => $4::jsonb, exclude => $5::jsonb, max_failures => "         \
    "$6::integer, through => $7::bigint, now_ms => $8::bigint, "             \
    "text_payloads => true, after_xid => $9::bigint, wait_ms => $10::bigint)"
#define SQL_RENEW                                                              \
    "select a2_renew(session => $1, holder => $2, claims => $3::jsonb, "     \
    "expires_at => $4::bigint, now_ms => $5::bigint)"
#define SQL_COMPLETE                                                           \
    "select a2_complete(session => $1, consumer => $2, lane => $3, index => " \
    "$4::bigint, attempt => $5::integer, events => $6::jsonb, consumers => " \
    "$7::jsonb, now_ms => $8::bigint, text_payloads => true)"
#define SQL_FAIL                                                               \
    "select a2_fail(session => $1, consumer => $2, lane => $3, index => "    \
    "$4::bigint, attempt => $5::integer, error => $6, max_failures => "      \
    "$7::integer, retry_after_ms => $8::bigint, now_ms => $9::bigint)"
#define SQL_REDRIVE                                                            \
    "select a2_redrive(session => $1, consumer => $2, index => $3::bigint, " \
    "action => $4, consumers => $5::jsonb)"
#define SQL_CLEAR                                                              \
    "select a2_clear(session => $1, if_last => $2::bigint, cause => "        \
    "$3::jsonb, marker_id => $4, now_ms => $5::bigint)"
#define SQL_RECLAIM "select a2_reclaim(session => $1)"
#define SQL_PENDING_SESSIONS                                                   \
    "select session from a2_pending_sessions(consumers => $1::jsonb, after " \
    "=> $2, max_sessions => $3::integer, now_ms => $4::bigint)"

/* The text parameters of one call. */
#define MAX_PARAMS 10
typedef struct params {
    const char *v[MAX_PARAMS];
    char *owned[MAX_PARAMS];
    int n;
    bool failed;
} params;

/* A text parameter (borrowed; NULL: SQL null). */
static void p_text(params *p, const char *v)
{
    p->v[p->n++] = v;
}

/* An integer parameter; A2_STORE_NONE: SQL null. */
static void p_int(params *p, int64_t v)
{
    char *t = NULL;
    if (v != A2_STORE_NONE && asprintf(&t, "%" PRId64, v) < 0) {
        t = NULL;
        p->failed = true;
    }
    p->owned[p->n] = t;
    p->v[p->n++] = t;
}

/* A JSON parameter, stolen; NULL (out of memory) fails the call, JSON null
 * is SQL null. */
static void p_json(params *p, json_t *j)
{
    char *t = NULL;
    if (!j)
        p->failed = true;
    else if (!json_is_null(j) &&
             !(t = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY)))
        p->failed = true;
    json_decref(j);
    p->owned[p->n] = t;
    p->v[p->n++] = t;
}

static void params_free(params *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->owned[i]);
}

static int nomem(a2_store *s)
{
    return a2__store_fail(s, A2_ESTORE_NOMEM, "out of memory");
}

/* The call of sql with p (freed here); *out as a2__store_call's. */
static int call(a2_store *s, const char *sql, params *p, bool rows,
                json_t **out)
{
    *out = NULL;
    int rc = p->failed ? nomem(s)
                       : a2__store_call(s, sql, p->n, p->v, rows, out);
    params_free(p);
    return rc;
}

/* ── arguments ───────────────────────────────────────────────────────── */

static json_t *str_or_null(const char *v)
{
    return v ? json_string(v) : json_null();
}

static json_t *cause_json(const a2_cause *c)
{
    return json_pack("{s:s, s:o, s:I, s:i}", "consumer", c->consumer, "lane",
                     str_or_null(c->lane), "index", (json_int_t)c->index,
                     "attempt", c->attempt);
}

static json_t *strings_json(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *types_json(const a2_log_spec *log)
{
    return log->types ? strings_json(log->types, log->ntypes) : json_null();
}

/* The served consumers: null (every one), or [{"name", "log"}]. */
static json_t *consumers_json(const a2_consumer *cons, size_t n)
{
    if (!cons)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const a2_log_spec *log = cons[i].log;
        json_t *c = log ? json_pack("{s:s, s:{s:s, s:o, s:b}}", "name",
                                    cons[i].name, "log", "lane", log->lane,
                                    "types", types_json(log), "backfill",
                                    log->backfill)
                        : json_pack("{s:s}", "name", cons[i].name);
        if (json_array_append_new(a, c) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The events of an append or a completion, ids[i] each one's id (cause:
 * the append's own; completions pass none, their function sets it). */
static json_t *events_json(const a2_append_event *ev, size_t n, char **ids,
                           bool causes)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *targets = json_array();
        for (size_t t = 0; targets && t < ev[i].ntargets; t++) {
            const a2_target *tg = &ev[i].targets[t];
            json_t *o = json_pack("{s:s, s:o}", "consumer", tg->consumer,
                                  "lane", str_or_null(tg->lane));
            if (o && tg->not_before &&
                json_object_set_new(o, "not_before",
                                    json_integer(tg->not_before)) != 0) {
                json_decref(o);
                o = NULL;
            }
            if (json_array_append_new(targets, o) != 0) {
                json_decref(targets);
                targets = NULL;
            }
        }
        json_t *e = json_pack("{s:s, s:s, s:o}", "type", ev[i].type, "id",
                              ids[i], "targets", targets);
        if (e && ev[i].payload &&
            json_object_set_new(e, "payload_text",
                                json_string(ev[i].payload)) != 0) {
            json_decref(e);
            e = NULL;
        }
        if (e && ev[i].not_before &&
            json_object_set_new(e, "not_before",
                                json_integer(ev[i].not_before)) != 0) {
            json_decref(e);
            e = NULL;
        }
        if (e && causes && ev[i].cause &&
            json_object_set_new(e, "cause", cause_json(ev[i].cause)) != 0) {
            json_decref(e);
            e = NULL;
        }
        if (json_array_append_new(a, e) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Ids for a batch: supplied or generated. */
static char **batch_ids(a2_store *s, const a2_append_event *ev, size_t n,
                        int *rc)
{
    char **ids = calloc(n ? n : 1, sizeof *ids);
    if (!ids) {
        *rc = nomem(s);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (ev[i].id) {
            ids[i] = strdup(ev[i].id);
        } else {
            char buf[ID_BUF];
            *rc = a2__store_new_id(s, buf, sizeof buf);
            if (*rc == 0 && (check_name(s, "a generated id", buf) != 0))
                *rc = A2_ESTORE_FAILED;
            if (*rc != 0)
                goto fail;
            ids[i] = strdup(buf);
        }
        if (!ids[i]) {
            *rc = nomem(s);
            goto fail;
        }
    }
    *rc = 0;
    return ids;
fail:
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    return NULL;
}

static void free_ids(char **ids, size_t n)
{
    if (!ids)
        return;
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

/* ── decoding ────────────────────────────────────────────────────────── */

static const char *row_text(const json_t *row, const char *key)
{
    return json_string_value(json_object_get(row, key));
}

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
        int64_t att = a2__row_int(c, "attempt");
        e->cause.attempt = att == A2_STORE_NONE ? 0 : (int)att;
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

static int as_int(int64_t v)
{
    return v == A2_STORE_NONE ? 0 : (int)v;
}

static void decode_dispatch(a2_store_arena *a, const json_t *row,
                            a2_dispatch *d)
{
    d->consumer = a2__row_str(a, row, "consumer");
    d->lane = a2__row_str(a, row, "lane");
    d->cursor_key = a2__row_str(a, row, "cursor_key");
    d->kind = a2__row_str(a, row, "kind");
    d->epoch = a2__row_int(row, "epoch");
    d->attempt_count = as_int(a2__row_int(row, "attempt"));
    d->first_claimed_at = a2__row_int(row, "first_claimed_at");
    d->last_claimed_at = a2__row_int(row, "last_claimed_at");
    d->claim_holder = a2__row_str(a, row, "holder");
    d->claim_expires_at = a2__row_int(row, "expires_at");
    d->failure_count = as_int(a2__row_int(row, "failure_count"));
    d->last_failed_at = a2__row_int(row, "last_failed_at");
    d->last_failed_attempt = a2__row_int(row, "last_failed_attempt");
    d->last_error = a2__row_str(a, row, "last_error");
    d->failed_at = a2__row_int(row, "failed_at");
}

/* A cursor as a2_cursors reports it (a row, or a2_wake_log's object, whose
 * types are JSON). */
static void decode_cursor(a2_store_arena *a, const json_t *row, a2_cursor *c)
{
    decode_dispatch(a, row, &c->dispatch);
    c->position = a2__row_int(row, "position");
    c->head = a2__row_int(row, "head");
    const char *kind = row_text(row, "kind");
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

static void decode_head(a2_store_arena *a, const json_t *row,
                        const char *session, a2_head *h)
{
    decode_event(a, row, session, &h->event);
    decode_dispatch(a, row, &h->dispatch);
    int64_t ci = a2__row_int(row, "clear_index");
    h->clear_index = ci == A2_STORE_NONE ? 0 : ci;
}

/* ── results ─────────────────────────────────────────────────────────── */

/* A result's arena and its array of n items of size bytes (at least one,
 * so an empty result still has an array). */
static int result_init(a2_store *s, a2_store_arena **arena, void **items,
                       size_t n, size_t size)
{
    *arena = a2__arena_new();
    if (!*arena)
        return nomem(s);
    *items = a2__arena_alloc(*arena, (n ? n : 1) * size);
    return *items ? 0 : nomem(s);
}

static int events_init(a2_store *s, a2_events *out, size_t n)
{
    void *items = NULL;
    int rc = result_init(s, &out->arena_, &items, n, sizeof(a2_event));
    out->items = items;
    return rc;
}

static int heads_init(a2_store *s, a2_heads *out, size_t n)
{
    void *items = NULL;
    int rc = result_init(s, &out->arena_, &items, n, sizeof(a2_head));
    out->items = items;
    return rc;
}

static int cursors_init(a2_store *s, a2_cursors *out, size_t n)
{
    void *items = NULL;
    int rc = result_init(s, &out->arena_, &items, n, sizeof(a2_cursor));
    out->items = items;
    return rc;
}

void a2_events_free(a2_events *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

void a2_heads_free(a2_heads *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

void a2_cursors_free(a2_cursors *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

void a2_claim_result_free(a2_claim_result *r)
{
    if (!r)
        return;
    a2_heads_free(&r->heads);
    a2_heads_free(&r->dead_lettered);
    memset(r, 0, sizeof *r);
}

void a2_renew_result_free(a2_renew_result *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

void a2_complete_result_free(a2_complete_result *r)
{
    if (!r)
        return;
    a2_events_free(&r->events);
    memset(r, 0, sizeof *r);
}

void a2_sessions_free(a2_sessions *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

/* out: the events of a list (a table's rows, or a result's "events"). */
static int decode_events(a2_store *s, const json_t *list, const char *session,
                         a2_events *out)
{
    size_t n = json_array_size(list);
    int rc = events_init(s, out, n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        decode_event(out->arena_, json_array_get(list, i), session,
                     &out->items[i]);
    out->count = n;
    return a2__arena_failed(out->arena_) ? nomem(s) : 0;
}

static int decode_heads(a2_store *s, const json_t *list, const char *session,
                        a2_heads *out)
{
    size_t n = json_array_size(list);
    int rc = heads_init(s, out, n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        decode_head(out->arena_, json_array_get(list, i), session,
                    &out->items[i]);
    out->count = n;
    return a2__arena_failed(out->arena_) ? nomem(s) : 0;
}

/*
 * out: the events an append or a completion stored, from the call's input
 * and the result's [{"index", "id"}] (cause_all: every event's cause, else
 * each one's own), or the committed rows of a replay.
 */
static int stored_events(a2_store *s, const char *session, const json_t *res,
                         const a2_append_event *ev, size_t n,
                         const a2_cause *cause_all, int64_t now,
                         a2_events *out)
{
    const json_t *list = json_object_get(res, "events");
    if (json_is_true(json_object_get(res, "replayed")) ||
        (row_text(res, "outcome") &&
         strcmp(row_text(res, "outcome"), "replayed") == 0)) {
        int rc = decode_events(s, list, session, out);
        out->replayed = true;
        return rc;
    }
    if (json_array_size(list) != n)
        return a2__store_fail(s, A2_ESTORE_FAILED,
                              "the store stored %zu events of %zu",
                              json_array_size(list), n);
    int rc = events_init(s, out, n);
    if (rc)
        return rc;
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
    return a2__arena_failed(a) ? nomem(s) : 0;
}

/* ── append ──────────────────────────────────────────────────────────── */

int a2_store_append(a2_store *s, const char *session,
                    const a2_append_event *events, size_t nevents,
                    const a2_append_options *opts, a2_events *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    a2_append_options none = {0};
    if (!opts)
        opts = &none;
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_events(s, events, nevents, false);
    if (rc == 0)
        rc = check_consumers(s, opts->consumers, opts->nconsumers);
    if (rc == 0 && opts->origin_index < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "origin index must not be negative");
    if (rc)
        return rc;
    int dup = ids_repeat(events, nevents);
    if (dup < 0)
        return nomem(s);
    if (dup)
        return a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                              "batch contains the same event id more than "
                              "once");
    char **ids = batch_ids(s, events, nevents, &rc);
    if (!ids)
        return rc;
    int64_t now = a2__store_now(s);
    params p = {0};
    p_text(&p, session);
    p_json(&p, events_json(events, nevents, ids, true));
    p_json(&p, consumers_json(opts->consumers, opts->nconsumers));
    p_int(&p, opts->origin_index > 0 ? opts->origin_index : A2_STORE_NONE);
    p_int(&p, now);
    json_t *res = NULL;
    rc = call(s, SQL_APPEND, &p, false, &res);
    if (rc == 0)
        rc = stored_events(s, session, res, events, nevents, NULL, now, out);
    if (rc == 0) {
        out->has_pending = json_is_true(json_object_get(res, "has_pending"));
        a2__store_ok(s);
    } else {
        a2_events_free(out);
    }
    free_ids(ids, nevents);
    json_decref(res);
    return rc;
}

/* ── read, cursors, dead letters, wake_log ───────────────────────────── */

int a2_store_read(a2_store *s, const char *session, const a2_read_options *opts,
                  a2_events *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    a2_read_options none = {0};
    if (!opts)
        opts = &none;
    int rc = check_name(s, "session", session);
    if (rc == 0 && opts->after < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "after must not be negative");
    if (rc == 0 && !opts->types && opts->ntypes > 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "types must not be NULL when counted");
    for (size_t i = 0; rc == 0 && opts->types && i < opts->ntypes; i++)
        rc = check_name(s, "a type", opts->types[i]);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    p_int(&p, opts->after);
    p_int(&p, opts->limit ? (int64_t)opts->limit : A2_STORE_NONE);
    p_json(&p, opts->types ? strings_json(opts->types, opts->ntypes)
                           : json_null());
    json_t *rows = NULL;
    rc = call(s, SQL_READ, &p, true, &rows);
    if (rc == 0)
        rc = decode_events(s, rows, session, out);
    if (rc)
        a2_events_free(out);
    json_decref(rows);
    return rc;
}

int a2_store_cursors(a2_store *s, const char *session, a2_cursors *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    json_t *rows = NULL;
    rc = call(s, SQL_CURSORS, &p, true, &rows);
    if (rc == 0)
        rc = cursors_init(s, out, json_array_size(rows));
    if (rc == 0) {
        size_t k;
        json_t *r;
        json_array_foreach(rows, k, r)
                decode_cursor(out->arena_, r, &out->items[k]);
        out->count = json_array_size(rows);
        if (a2__arena_failed(out->arena_))
            rc = nomem(s);
    }
    if (rc)
        a2_cursors_free(out);
    json_decref(rows);
    return rc;
}

int a2_store_dead_letters(a2_store *s, const char *session, a2_heads *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    json_t *rows = NULL;
    rc = call(s, SQL_DEAD_LETTERS, &p, true, &rows);
    if (rc == 0)
        rc = decode_heads(s, rows, session, out);
    if (rc)
        a2_heads_free(out);
    json_decref(rows);
    return rc;
}

int a2_store_wake_log(a2_store *s, const char *session,
                      const a2_consumer *consumer, uint64_t after_xid,
                      a2_cursors *cursor_out, int64_t *head_out)
{
    if (!s || !cursor_out)
        return A2_EINVALID_ARGUMENT;
    memset(cursor_out, 0, sizeof *cursor_out);
    if (head_out)
        *head_out = 0;
    int rc = check_name(s, "session", session);
    if (rc == 0 && (!consumer || !consumer->log))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "wake_log needs a log consumer");
    if (rc == 0)
        rc = check_consumers(s, consumer, 1);
    if (rc)
        return rc;
    const a2_log_spec *log = consumer->log;
    params p = {0};
    p_text(&p, session);
    p_text(&p, consumer->name);
    p_text(&p, log->lane);
    p_json(&p, types_json(log));
    p_text(&p, log->backfill ? "true" : "false");
    p_int(&p, after_xid ? (int64_t)after_xid : A2_STORE_NONE);
    json_t *res = NULL;
    rc = call(s, SQL_WAKE_LOG, &p, false, &res);
    if (rc == 0)
        rc = cursors_init(s, cursor_out, 1);
    if (rc == 0) {
        decode_cursor(cursor_out->arena_, json_object_get(res, "cursor"),
                      &cursor_out->items[0]);
        cursor_out->count = 1;
        int64_t head = a2__row_int(res, "head");
        if (head_out)
            *head_out = head == A2_STORE_NONE ? 0 : head;
        if (a2__arena_failed(cursor_out->arena_))
            rc = nomem(s);
    }
    if (rc)
        a2_cursors_free(cursor_out);
    json_decref(res);
    return rc;
}

/* ── claim, renew ────────────────────────────────────────────────────── */

int a2_store_claim(a2_store *s, const char *session,
                   const a2_claim_request *req, a2_claim_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0 && !req)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "claim request must not be NULL");
    if (rc == 0)
        rc = check_name(s, "holder", req->holder);
    if (rc == 0 && (req->ttl_ms < 0 || req->expires_at_ms < 0 ||
                    (req->expires_at_ms == 0 && req->ttl_ms <= 0)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "a claim needs a positive ttl or an expiry");
    if (rc == 0 && req->max_failures < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "max failures must be at least 1 (0: no limit)");
    if (rc == 0 && req->through < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "through must not be negative");
    if (rc == 0)
        rc = check_consumers(s, req->consumers, req->nconsumers);
    if (rc == 0 && !req->exclude && req->nexclude > 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "exclude must not be NULL when counted");
    for (size_t i = 0; rc == 0 && i < req->nexclude; i++) {
        rc = check_name(s, "an excluded consumer", req->exclude[i].consumer);
        if (rc == 0)
            rc = check_opt_name(s, "an excluded lane", req->exclude[i].lane);
    }
    if (rc)
        return rc;
    int64_t now = a2__store_now(s);
    json_t *excluded = json_array();
    for (size_t i = 0; excluded && i < req->nexclude; i++)
        if (json_array_append_new(
                    excluded,
                    json_pack("{s:s, s:o, s:I}", "consumer",
                              req->exclude[i].consumer, "lane",
                              str_or_null(req->exclude[i].lane), "index",
                              (json_int_t)req->exclude[i].index)) != 0) {
            json_decref(excluded);
            excluded = NULL;
        }
    params p = {0};
    p_text(&p, session);
    p_text(&p, req->holder);
    p_int(&p, req->expires_at_ms ? req->expires_at_ms : now + req->ttl_ms);
    p_json(&p, consumers_json(req->consumers, req->nconsumers));
    p_json(&p, excluded);
    p_int(&p, req->max_failures ? req->max_failures : A2_STORE_NONE);
    p_int(&p, req->through ? req->through : A2_STORE_NONE);
    p_int(&p, now);
    p_int(&p, req->after_xid ? (int64_t)req->after_xid : A2_STORE_NONE);
    p_int(&p, req->wait_ms > 0 ? req->wait_ms : 1000);
    json_t *res = NULL;
    rc = call(s, SQL_CLAIM, &p, false, &res);
    if (rc)
        goto done;
    const char *outcome = row_text(res, "outcome");
    outcome = outcome ? outcome : "";
    if ((rc = decode_heads(s, json_object_get(res, "heads"), session,
                           &out->heads)) != 0 ||
        (rc = decode_heads(s, json_object_get(res, "dead_lettered"), session,
                           &out->dead_lettered)) != 0)
        goto done;
    if (strcmp(outcome, "claimed") == 0) {
        out->outcome = A2_CLAIM_CLAIMED;
        out->session_head = a2__row_int(res, "session_head");
        out->retry_at = A2_STORE_NONE;
    } else {
        out->outcome =
                strcmp(outcome, "busy") == 0 ? A2_CLAIM_BUSY : A2_CLAIM_SETTLED;
        out->retry_at = a2__row_int(res, "retry_at");
        out->session_head = A2_STORE_NONE;
        int64_t w = a2__row_int(res, "waiting_for");
        out->waiting_for = w == A2_STORE_NONE ? 0 : (uint64_t)w;
    }
done:
    if (rc)
        a2_claim_result_free(out);
    json_decref(res);
    return rc;
}

/* A result's list of heads [{"consumer", "lane", "index"}] into refs. */
static void decode_refs(a2_store_arena *a, const json_t *list,
                        a2_head_ref *refs, size_t *n)
{
    size_t k;
    const json_t *r;
    json_array_foreach(list, k, r)
    {
        refs[*n].consumer = a2__row_str(a, r, "consumer");
        refs[*n].lane = a2__row_str(a, r, "lane");
        refs[*n].index = a2__row_int(r, "index");
        (*n)++;
    }
}

int a2_store_renew(a2_store *s, const char *session, const char *holder,
                   const a2_attempt_ref *claims, size_t nclaims, int64_t ttl_ms,
                   int64_t expires_at_ms, a2_renew_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_name(s, "holder", holder);
    if (rc == 0 && (ttl_ms < 0 || expires_at_ms < 0 ||
                    (expires_at_ms == 0 && ttl_ms <= 0)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "a renewal needs a positive ttl or an expiry");
    if (rc == 0 && !claims && nclaims > 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "claims must not be NULL when counted");
    for (size_t i = 0; rc == 0 && i < nclaims; i++)
        rc = check_attempt(s, &claims[i]);
    if (rc)
        return rc;
    int64_t now = a2__store_now(s);
    json_t *list = json_array();
    for (size_t i = 0; list && i < nclaims; i++)
        if (json_array_append_new(
                    list, json_pack("{s:s, s:o, s:I, s:i}", "consumer",
                                    claims[i].consumer, "lane",
                                    str_or_null(claims[i].lane), "index",
                                    (json_int_t)claims[i].index, "attempt",
                                    claims[i].attempt)) != 0) {
            json_decref(list);
            list = NULL;
        }
    params p = {0};
    p_text(&p, session);
    p_text(&p, holder);
    p_json(&p, list);
    p_int(&p, expires_at_ms ? expires_at_ms : now + ttl_ms);
    p_int(&p, now);
    json_t *res = NULL;
    rc = call(s, SQL_RENEW, &p, false, &res);
    if (rc)
        goto done;
    const json_t *renewed = json_object_get(res, "renewed");
    const json_t *superseded = json_object_get(res, "superseded");
    out->arena_ = a2__arena_new();
    size_t nr = json_array_size(renewed), ns = json_array_size(superseded);
    if (out->arena_) {
        out->renewed = a2__arena_alloc(out->arena_,
                                       (nr ? nr : 1) * sizeof(a2_head_ref));
        out->superseded = a2__arena_alloc(out->arena_,
                                          (ns ? ns : 1) * sizeof(a2_head_ref));
    }
    if (!out->renewed || !out->superseded) {
        rc = nomem(s);
        goto done;
    }
    decode_refs(out->arena_, renewed, out->renewed, &out->nrenewed);
    decode_refs(out->arena_, superseded, out->superseded, &out->nsuperseded);
    if (a2__arena_failed(out->arena_))
        rc = nomem(s);
done:
    if (rc)
        a2_renew_result_free(out);
    json_decref(res);
    return rc;
}

/* ── complete ────────────────────────────────────────────────────────── */

int a2_store_complete(a2_store *s, const char *session,
                      const a2_attempt_ref *attempt,
                      const a2_append_event *events, size_t nevents,
                      const a2_consumer *consumers, size_t nconsumers,
                      a2_complete_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_attempt(s, attempt);
    if (rc == 0)
        rc = check_events(s, events, nevents, true);
    if (rc == 0)
        rc = check_consumers(s, consumers, nconsumers);
    if (rc)
        return rc;
    char **ids = batch_ids(s, events, nevents, &rc);
    if (!ids)
        return rc;
    a2_cause cause = {attempt->consumer, attempt->lane, attempt->index,
                      attempt->attempt};
    int64_t now = a2__store_now(s);
    params p = {0};
    p_text(&p, session);
    p_text(&p, attempt->consumer);
    p_text(&p, attempt->lane);
    p_int(&p, attempt->index);
    p_int(&p, attempt->attempt);
    p_json(&p, events_json(events, nevents, ids, false));
    p_json(&p, consumers_json(consumers, nconsumers));
    p_int(&p, now);
    json_t *res = NULL;
    rc = call(s, SQL_COMPLETE, &p, false, &res);
    if (rc)
        goto done;
    const char *outcome = row_text(res, "outcome");
    if (outcome && strcmp(outcome, "completed") == 0) {
        out->outcome = A2_ATTEMPT_COMPLETED;
        rc = stored_events(s, session, res, events, nevents, &cause, now,
                           &out->events);
    } else {
        out->outcome = A2_ATTEMPT_SUPERSEDED;
    }
done:
    if (rc)
        a2_complete_result_free(out);
    else
        a2__store_ok(s);
    free_ids(ids, nevents);
    json_decref(res);
    return rc;
}

/* ── fail ────────────────────────────────────────────────────────────── */

int a2_store_fail(a2_store *s, const char *session,
                  const a2_attempt_ref *attempt, const a2_fail_request *req,
                  a2_fail_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_attempt(s, attempt);
    if (rc == 0 && !req)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "fail request must not be NULL");
    if (rc == 0 && req->max_failures < 1)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "max failures must be at least 1");
    if (rc == 0 && req->retry_after_ms < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "retry-after must not be negative");
    if (rc == 0 && req->error &&
        (strlen(req->error) > A2_STORE_MAX_ERROR_TEXT ||
         !utf8_valid(req->error)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "error text is too long or not valid UTF-8");
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    p_text(&p, attempt->consumer);
    p_text(&p, attempt->lane);
    p_int(&p, attempt->index);
    p_int(&p, attempt->attempt);
    p_text(&p, req->error ? req->error : "");
    p_int(&p, req->max_failures);
    p_int(&p, req->retry_after_ms);
    p_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = call(s, SQL_FAIL, &p, false, &res);
    if (rc == 0) {
        const char *outcome = row_text(res, "outcome");
        outcome = outcome ? outcome : "";
        out->outcome = strcmp(outcome, "failed") == 0 ? A2_ATTEMPT_FAILED
                       : strcmp(outcome, "dead_lettered") == 0
                               ? A2_ATTEMPT_DEAD_LETTERED
                               : A2_ATTEMPT_SUPERSEDED;
        out->failure_count = as_int(a2__row_int(res, "failure_count"));
    }
    json_decref(res);
    return rc;
}

/* ── redrive, clear, reclaim ─────────────────────────────────────────── */

int a2_store_redrive(a2_store *s, const char *session, const char *consumer,
                     int64_t index, int action, const a2_consumer *consumers,
                     size_t nconsumers, a2_redrive_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_name(s, "consumer", consumer);
    if (rc == 0 && index < 1)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "index must be at least 1");
    if (rc == 0 && action != A2_REDRIVE_RETRY && action != A2_REDRIVE_SKIP)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "action must be retry or skip");
    if (rc == 0)
        rc = check_consumers(s, consumers, nconsumers);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    p_text(&p, consumer);
    p_int(&p, index);
    p_text(&p, action == A2_REDRIVE_SKIP ? "skip" : "retry");
    p_json(&p, consumers_json(consumers, nconsumers));
    json_t *res = NULL;
    rc = call(s, SQL_REDRIVE, &p, false, &res);
    if (rc == 0) {
        out->redriven = a2__row_bool(res, "redriven");
        out->has_pending = a2__row_bool(res, "has_pending");
    }
    json_decref(res);
    return rc;
}

int a2_store_clear(a2_store *s, const char *session, int64_t if_last_index,
                   const a2_cause *cause, a2_clear_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0 && if_last_index != A2_STORE_NONE && if_last_index < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "if-last index must not be negative");
    if (rc == 0 && cause)
        rc = check_cause(s, "a clear's cause", cause);
    if (rc)
        return rc;
    char marker_id[ID_BUF];
    rc = a2__store_new_id(s, marker_id, sizeof marker_id);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    p_int(&p, if_last_index);
    p_json(&p, cause ? cause_json(cause) : json_null());
    p_text(&p, marker_id);
    p_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = call(s, SQL_CLEAR, &p, false, &res);
    if (rc == 0) {
        out->cleared = a2__row_bool(res, "cleared");
        out->index = a2__row_int(res, "index");
        out->clear_index = a2__row_int(res, "clear_index");
    }
    json_decref(res);
    return rc;
}

int a2_store_reclaim(a2_store *s, const char *session, a2_reclaim_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    json_t *res = NULL;
    rc = call(s, SQL_RECLAIM, &p, false, &res);
    if (rc == 0) {
        out->deleted = a2__row_int(res, "deleted");
        out->done = a2__row_bool(res, "done");
    }
    json_decref(res);
    return rc;
}

/* ── pending sessions ────────────────────────────────────────────────── */

int a2_store_pending_sessions(a2_store *s, const char *const *consumers,
                              size_t nconsumers, const char *after,
                              size_t limit, a2_sessions *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (!consumers || nconsumers == 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "pending sessions needs at least one consumer");
    for (size_t i = 0; rc == 0 && i < nconsumers; i++)
        rc = check_name(s, "a consumer", consumers[i]);
    if (rc == 0)
        rc = check_opt_name(s, "after", after);
    if (rc == 0 && (limit < 1 || limit > MAX_PENDING_LIMIT))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "limit must be between 1 and %d",
                            MAX_PENDING_LIMIT);
    if (rc)
        return rc;
    params p = {0};
    p_json(&p, strings_json(consumers, nconsumers));
    p_text(&p, after);
    p_int(&p, (int64_t)limit);
    p_int(&p, a2__store_now(s));
    json_t *rows = NULL;
    rc = call(s, SQL_PENDING_SESSIONS, &p, true, &rows);
    if (rc)
        goto done;
    size_t n = json_array_size(rows);
    out->arena_ = a2__arena_new();
    out->items = out->arena_ ? a2__arena_alloc(out->arena_,
                                               (n ? n : 1) * sizeof(char *))
                             : NULL;
    if (!out->items) {
        rc = nomem(s);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        out->items[i] = (char *)a2__row_str(out->arena_,
                                            json_array_get(rows, i), "session");
    out->count = n;
    if (a2__arena_failed(out->arena_))
        rc = nomem(s);
done:
    if (rc)
        a2_sessions_free(out);
    json_decref(rows);
    return rc;
}

/* ── operators: across sessions ──────────────────────────────────────── */

#define SQL_FIND_DEAD_LETTERS                                                  \
    "select * from a2_find_dead_letters(consumer_name => $1, event_type => " \
    "$2, error_text => $3, failed_after => $4::bigint, failed_before => "    \
    "$5::bigint, after => $6::jsonb, max_rows => $7::integer)"
#define SQL_REDRIVE_MATCHING                                                   \
    "select a2_redrive_matching(action => $1, consumer_name => $2, "         \
    "event_type => $3, error_text => $4, failed_after => $5::bigint, "       \
    "failed_before => $6::bigint, max_rows => $7::integer)"
#define SQL_CANCEL                                                             \
    "select a2_cancel(session => $1, consumer => $2, index => $3::bigint, "  \
    "reason => $4, consumers => $5::jsonb)"
#define SQL_BACKLOG "select * from a2_backlog(consumers => $1::jsonb)"
#define SQL_COUNT_DEAD_LETTERS                                                 \
    "select a2_count_dead_letters(consumer_name => $1, event_type => $2, "   \
    "error_text => $3, failed_after => $4::bigint, failed_before => "        \
    "$5::bigint)"

static int check_filter(a2_store *s, const a2_dead_letter_filter *f)
{
    if (!f)
        return 0;
    int rc = check_opt_name(s, "consumer", f->consumer);
    if (rc == 0 && f->type && (!f->type[0] || strlen(f->type) > 1024))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "type must be a name of 1 to 1024 bytes");
    if (rc == 0 && f->error && (strlen(f->error) > 1024 || !utf8_valid(f->error)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "error filter must be UTF-8 of at most 1024 bytes");
    if (rc == 0 && f->type && !utf8_valid(f->type))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT, "type must be UTF-8");
    return rc;
}

/* The filter's five parameters, in the order of the calls above. */
static void p_filter(params *p, const a2_dead_letter_filter *f)
{
    p_text(p, f ? f->consumer : NULL);
    p_text(p, f ? f->type : NULL);
    p_text(p, f ? f->error : NULL);
    p_int(p, f ? f->failed_after : A2_STORE_NONE);
    p_int(p, f ? f->failed_before : A2_STORE_NONE);
}

int a2_store_find_dead_letters(a2_store *s, const a2_dead_letter_filter *filter,
                               const a2_dead_letter_key *after, size_t limit,
                               a2_heads *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_filter(s, filter);
    if (rc == 0 && (limit < 1 || limit > 1000))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "limit must be between 1 and 1000");
    if (rc == 0 && after) {
        rc = check_name(s, "after's session", after->session_id);
        if (rc == 0)
            rc = check_name(s, "after's consumer", after->consumer);
        if (rc == 0)
            rc = check_name(s, "after's cursor key", after->cursor_key);
    }
    if (rc)
        return rc;
    params p = {0};
    p_filter(&p, filter);
    p_json(&p, after ? json_pack("{s:I, s:s, s:s, s:s, s:I}", "failed_at",
                                 (json_int_t)after->failed_at, "session",
                                 after->session_id, "consumer", after->consumer,
                                 "cursor_key", after->cursor_key, "epoch",
                                 (json_int_t)after->epoch)
                     : json_null());
    p_int(&p, (int64_t)limit);
    json_t *rows = NULL;
    rc = call(s, SQL_FIND_DEAD_LETTERS, &p, true, &rows);
    if (rc == 0) {
        size_t n = json_array_size(rows);
        rc = heads_init(s, out, n);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const json_t *row = json_array_get(rows, i);
            decode_head(out->arena_, row, row_text(row, "session_id"),
                        &out->items[i]);
        }
        out->count = rc == 0 ? n : 0;
        if (rc == 0 && a2__arena_failed(out->arena_))
            rc = nomem(s);
    }
    if (rc)
        a2_heads_free(out);
    json_decref(rows);
    return rc;
}

int a2_store_count_dead_letters(a2_store *s,
                                const a2_dead_letter_filter *filter,
                                int64_t *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    *out = 0;
    int rc = check_filter(s, filter);
    if (rc)
        return rc;
    params p = {0};
    p_filter(&p, filter);
    json_t *res = NULL;
    rc = call(s, SQL_COUNT_DEAD_LETTERS, &p, false, &res);
    if (rc == 0) {
        if (json_is_integer(res))
            *out = (int64_t)json_integer_value(res);
        else
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "count of dead letters is not a number");
    }
    json_decref(res);
    return rc;
}

int a2_store_redrive_matching(a2_store *s, const a2_dead_letter_filter *filter,
                              int action, size_t limit, a2_bulk_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_filter(s, filter);
    if (rc == 0 && action != A2_REDRIVE_RETRY && action != A2_REDRIVE_SKIP)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "action must be retry or skip");
    if (rc == 0 && (limit < 1 || limit > 10000))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "limit must be between 1 and 10000");
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, action == A2_REDRIVE_SKIP ? "skip" : "retry");
    p_filter(&p, filter);
    p_int(&p, (int64_t)limit);
    json_t *res = NULL;
    rc = call(s, SQL_REDRIVE_MATCHING, &p, false, &res);
    if (rc == 0) {
        out->count = a2__row_int(res, "count");
        out->more = a2__row_bool(res, "more");
    }
    json_decref(res);
    return rc;
}

void a2_cancel_result_free(a2_cancel_result *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

int a2_store_cancel(a2_store *s, const char *session, const char *consumer,
                    int64_t index, const char *reason,
                    const a2_consumer *consumers, size_t nconsumers,
                    a2_cancel_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_name(s, "consumer", consumer);
    if (rc == 0 && index < 1)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "index must be at least 1");
    if (rc == 0 && reason && (strlen(reason) > 65536 || !utf8_valid(reason)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "reason must be UTF-8 of at most 64 KiB");
    if (rc == 0)
        rc = check_consumers(s, consumers, nconsumers);
    if (rc)
        return rc;
    params p = {0};
    p_text(&p, session);
    p_text(&p, consumer);
    p_int(&p, index);
    p_text(&p, reason);
    p_json(&p, consumers_json(consumers, nconsumers));
    json_t *res = NULL;
    rc = call(s, SQL_CANCEL, &p, false, &res);
    if (rc == 0) {
        const char *o = row_text(res, "outcome");
        out->outcome = !o                             ? 0
                       : strcmp(o, "cancelled") == 0 ? A2_CANCEL_CANCELLED
                       : strcmp(o, "running") == 0   ? A2_CANCEL_RUNNING
                                                     : A2_CANCEL_NOT_PENDING;
        out->has_pending = a2__row_bool(res, "has_pending");
        out->expires_at = a2__row_int(res, "expires_at");
        out->arena_ = a2__arena_new();
        if (!out->arena_) {
            rc = nomem(s);
        } else {
            out->holder = a2__row_str(out->arena_, res, "holder");
            if (a2__arena_failed(out->arena_))
                rc = nomem(s);
        }
        if (rc == 0 && !out->outcome)
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "cancel returned no outcome");
    }
    if (rc)
        a2_cancel_result_free(out);
    json_decref(res);
    return rc;
}

void a2_backlog_free(a2_backlog *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

int a2_store_backlog(a2_store *s, const char *const *consumers,
                     size_t nconsumers, a2_backlog *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = 0;
    for (size_t i = 0; rc == 0 && consumers && i < nconsumers; i++)
        rc = check_name(s, "consumer", consumers[i]);
    if (rc)
        return rc;
    params p = {0};
    p_json(&p, consumers ? strings_json(consumers, nconsumers) : json_null());
    json_t *rows = NULL;
    rc = call(s, SQL_BACKLOG, &p, true, &rows);
    if (rc == 0) {
        size_t n = json_array_size(rows);
        void *items = NULL;
        rc = result_init(s, &out->arena_, &items, n, sizeof(a2_backlog_row));
        out->items = items;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            const json_t *row = json_array_get(rows, i);
            a2_backlog_row *b = &out->items[i];
            b->consumer = a2__row_str(out->arena_, row, "consumer");
            b->pending = a2__row_int(row, "pending");
            b->running = a2__row_int(row, "running");
            b->dead_letters = a2__row_int(row, "dead_letters");
            b->oldest_pending_at = a2__row_int(row, "oldest_pending_at");
        }
        if (rc == 0) {
            out->count = n;
            if (a2__arena_failed(out->arena_))
                rc = nomem(s);
        }
    }
    if (rc)
        a2_backlog_free(out);
    json_decref(rows);
    return rc;
}
