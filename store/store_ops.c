/*
 * liba2store operations: input checks, parameters, one a2_batch call each,
 * and the decoding of their rows into results.
 */
#include "store_int.h"
#include "store_sql.h"

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
        for (size_t t = 0; t < ev[i].ntargets; t++) {
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

/* ── parameters ──────────────────────────────────────────────────────── */

static json_t *cursor_key_of(const char *lane, int64_t index)
{
    return lane ? json_sprintf("lane:%s", lane)
                : json_sprintf("#%" PRId64, index);
}

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

static json_t *types_json(const a2_log_spec *log)
{
    if (!log->types)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < log->ntypes; i++)
        if (json_array_append_new(a, json_string(log->types[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *served_json(const a2_consumer *cons, size_t n)
{
    if (!cons)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(cons[i].name)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static bool set(json_t *o, const char *k, json_t *v)
{
    return v && json_object_set_new(o, k, v) == 0;
}

/* Adds the retype parameters for a cursor of `consumer` that moves. */
static bool set_retype(json_t *p, const char *consumer, const a2_consumer *cons,
                       size_t n)
{
    for (size_t i = 0; cons && i < n; i++)
        if (cons[i].log && strcmp(cons[i].name, consumer) == 0)
            return set(p, "retype", json_true()) &&
                   set(p, "types", types_json(cons[i].log));
    return set(p, "retype", json_false()) && set(p, "types", json_null());
}

typedef struct work {
    bool singles, queued, logs, started;
} work;

static bool type_followed(const a2_log_spec *log, const char *type)
{
    if (strcmp(type, A2_STORE_CLEAR_TYPE) == 0)
        return false;
    if (!log->types)
        return true;
    for (size_t i = 0; i < log->ntypes; i++)
        if (strcmp(log->types[i], type) == 0)
            return true;
    return false;
}

/* The cursor work a batch of events starts (the spec's enqueue). */
static bool enqueue(const a2_append_event *ev, size_t n,
                    const a2_consumer *cons, size_t ncons, json_t *p, work *w)
{
    memset(w, 0, sizeof *w);
    json_t *singles = json_array(), *queued = json_array(),
           *lanes = json_array(), *logs = json_array();
    bool ok = singles && queued && lanes && logs;
    for (size_t i = 0; ok && i < n; i++) {
        json_int_t ord = (json_int_t)i + 1;
        for (size_t t = 0; ok && t < ev[i].ntargets; t++) {
            const a2_target *tg = &ev[i].targets[t];
            bool served = !cons;
            for (size_t c = 0; !served && c < ncons; c++)
                served = strcmp(cons[c].name, tg->consumer) == 0;
            if (served)
                w->started = true;
            if (!tg->lane) {
                ok = json_array_append_new(
                             singles, json_pack("{s:s, s:I}", "consumer",
                                                tg->consumer, "ord", ord)) == 0;
                continue;
            }
            ok = json_array_append_new(queued,
                                       json_pack("{s:s, s:s, s:I}", "consumer",
                                                 tg->consumer, "lane", tg->lane,
                                                 "ord", ord)) == 0;
            bool seen = false;
            size_t k;
            json_t *l;
            json_array_foreach(lanes, k, l)
            {
                if (strcmp(json_string_value(json_object_get(l, "consumer")),
                           tg->consumer) == 0 &&
                    strcmp(json_string_value(json_object_get(l, "lane")),
                           tg->lane) == 0)
                    seen = true;
            }
            if (ok && !seen)
                ok = json_array_append_new(
                             lanes,
                             json_pack("{s:s, s:o, s:s, s:I}", "consumer",
                                       tg->consumer, "cursor_key",
                                       cursor_key_of(tg->lane, 0), "lane",
                                       tg->lane, "ord", ord)) == 0;
        }
    }
    for (size_t c = 0; ok && c < ncons; c++) {
        const a2_log_spec *log = cons[c].log;
        if (!log)
            continue;
        size_t first = n;
        for (size_t i = 0; i < n && first == n; i++)
            if (type_followed(log, ev[i].type))
                first = i;
        if (first == n)
            continue;
        ok = json_array_append_new(
                     logs, json_pack("{s:s, s:o, s:s, s:I, s:o, s:b}",
                                     "consumer", cons[c].name, "cursor_key",
                                     cursor_key_of(log->lane, 0), "lane",
                                     log->lane, "ord", (json_int_t)first + 1,
                                     "types", types_json(log), "backfill",
                                     log->backfill)) == 0;
    }
    if (ok) {
        w->singles = json_array_size(singles) > 0;
        w->queued = json_array_size(queued) > 0;
        w->logs = json_array_size(logs) > 0;
        if (w->logs)
            w->started = true;
    }
    ok = ok && set(p, "singles", json_incref(singles)) &&
         set(p, "queued", json_incref(queued)) &&
         set(p, "lanes", json_incref(lanes)) &&
         set(p, "logs", json_incref(logs)) &&
         set(p, "clearType", json_string(A2_STORE_CLEAR_TYPE));
    json_decref(singles);
    json_decref(queued);
    json_decref(lanes);
    json_decref(logs);
    return ok;
}

/* The events a batch inserts: [{ord, type, payload, id, cause}]. ids holds
 * each event's id (supplied or generated), owned by the caller. */
static json_t *event_rows(const a2_append_event *ev, size_t n, char **ids,
                          const a2_cause *cause_all)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++) {
        const a2_cause *c = cause_all ? cause_all : ev[i].cause;
        json_t *row = json_pack(
                "{s:I, s:s, s:o, s:s, s:o}", "ord", (json_int_t)i + 1, "type",
                ev[i].type, "payload", str_or_null(ev[i].payload), "id", ids[i],
                "cause", c ? cause_json(c) : json_null());
        if (json_array_append_new(rows, row) != 0) {
            json_decref(rows);
            return NULL;
        }
    }
    return rows;
}

/* ── decoding ────────────────────────────────────────────────────────── */

static void decode_cause(a2_store_arena *a, const json_t *c, a2_event *e)
{
    if (!json_is_object(c))
        return;
    e->has_cause = true;
    e->cause.consumer = a2__row_str(a, c, "consumer");
    e->cause.lane = a2__row_str(a, c, "lane");
    e->cause.index = a2__row_int(c, "index");
    int64_t att = a2__row_int(c, "attempt");
    e->cause.attempt = att == A2_STORE_NONE ? 0 : (int)att;
}

/* An event row (EVENT_FIELDS, or a head's e_ columns with prefix "e_"). */
static void decode_event(a2_store_arena *a, const json_t *row, const char *pfx,
                         a2_event *e)
{
    char k[32];
#define KEY(name) (snprintf(k, sizeof k, "%s%s", pfx, name), k)
    e->session_id = a2__row_str(a, row, "session_id");
    e->index = a2__row_int(row, KEY("idx"));
    e->type = a2__row_str(a, row, KEY("event_type"));
    e->payload = a2__row_str(a, row, KEY("payload"));
    e->id = a2__row_str(a, row, KEY("event_id"));
    e->created_at = a2__row_int(row, KEY("created_at"));
    decode_cause(a, json_object_get(row, KEY("cause")), e);
#undef KEY
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
    d->attempt_count = as_int(a2__row_int(row, "attempt_count"));
    d->first_claimed_at = a2__row_int(row, "first_claimed_at");
    d->last_claimed_at = a2__row_int(row, "last_claimed_at");
    d->claim_holder = a2__row_str(a, row, "claim_holder");
    d->claim_expires_at = a2__row_int(row, "claim_expires_at");
    d->failure_count = as_int(a2__row_int(row, "failure_count"));
    d->last_failed_at = a2__row_int(row, "last_failed_at");
    d->last_failed_attempt = a2__row_int(row, "last_failed_attempt");
    d->last_error = a2__row_str(a, row, "last_error");
    d->failed_at = a2__row_int(row, "failed_at");
}

static void fresh_dispatch(a2_store_arena *a, const json_t *row, a2_dispatch *d)
{
    memset(d, 0, sizeof *d);
    d->consumer = a2__row_str(a, row, "consumer");
    d->lane = a2__row_str(a, row, "lane");
    d->cursor_key = a2__row_str(a, row, "cursor_key");
    d->kind = a2__row_str(a, row, "kind");
    d->epoch = a2__row_int(row, "epoch");
    d->first_claimed_at = d->last_claimed_at = d->claim_expires_at =
            d->last_failed_at = d->last_failed_attempt = d->failed_at =
                    A2_STORE_NONE;
}

/* A cursor run as cursors() reports it, given the clear marker. */
static void decode_cursor(a2_store_arena *a, const json_t *row,
                          int64_t clear_index, a2_cursor *c)
{
    int64_t position = a2__row_int(row, "position");
    const char *kind = json_string_value(json_object_get(row, "kind"));
    bool is_log = kind && strcmp(kind, "log") == 0;
    if (!is_log || a2__row_int(row, "epoch") > clear_index) {
        decode_dispatch(a, row, &c->dispatch);
        c->position = position;
        c->head = a2__row_int(row, "head");
    } else {
        /* A clear supersedes a log cursor without touching its row: it
         * counts from the marker, with nothing to run. */
        fresh_dispatch(a, row, &c->dispatch);
        c->position = position > clear_index ? position : clear_index;
        c->head = A2_STORE_NONE;
    }
    if (is_log) {
        const json_t *t = json_object_get(row, "types");
        char *text =
                json_dumps(t ? t : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
        c->types = a2__arena_strdup(a, text ? text : "null");
        free(text);
    }
}

static void decode_head(a2_store_arena *a, const json_t *row, a2_head *h)
{
    decode_event(a, row, "e_", &h->event);
    decode_dispatch(a, row, &h->dispatch);
    int64_t ci = a2__row_int(row, "clear_index");
    h->clear_index = ci == A2_STORE_NONE ? 0 : ci;
}

/* ── helpers for results ─────────────────────────────────────────────── */

static int nomem(a2_store *s)
{
    return a2__store_fail(s, A2_ESTORE_NOMEM, "out of memory");
}

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

/* Runs a batch whose abort rows carry no meaning of their own. */
static int run_plain(a2_store *s, const char *const *st, size_t n, json_t *p,
                     json_t **rows)
{
    json_t *abort_row = NULL;
    int rc = a2__store_batch(s, st, n, p, rows, &abort_row);
    if (rc == A2__ABORTED) {
        json_decref(abort_row);
        rc = A2_ESTORE_FAILED;
    }
    return rc;
}

/* The last row holding key, or NULL. */
static json_t *row_with(json_t *rows, const char *key)
{
    for (size_t i = json_array_size(rows); i > 0; i--) {
        json_t *r = json_array_get(rows, i - 1);
        if (json_object_get(r, key))
            return r;
    }
    return NULL;
}

static const char *row_text(const json_t *row, const char *key)
{
    return json_string_value(json_object_get(row, key));
}

static json_t *new_params(a2_store *s, const char *session)
{
    json_t *p = json_object();
    if (!p || !set(p, "session", json_string(session))) {
        json_decref(p);
        nomem(s);
        return NULL;
    }
    return p;
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

/* Fills out with the events a batch inserted after base. */
static int inserted_events(a2_store *s, const char *session,
                           const a2_append_event *ev, size_t n, char **ids,
                           const a2_cause *cause_all, int64_t base, int64_t now,
                           a2_events *out)
{
    int rc = events_init(s, out, n);
    if (rc)
        return rc;
    a2_store_arena *a = out->arena_;
    for (size_t i = 0; i < n; i++) {
        a2_event *e = &out->items[i];
        e->session_id = a2__arena_strdup(a, session);
        e->index = base + 1 + (int64_t)i;
        e->type = a2__arena_strdup(a, ev[i].type);
        e->payload =
                a2__arena_strdup(a, ev[i].payload ? ev[i].payload : "null");
        e->id = a2__arena_strdup(a, ids[i]);
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

/* Fills out with committed rows, in the order of ids (a replay). Returns
 * 1 when some id has no row. */
static int replayed_events(a2_store *s, const json_t *rows, char **ids,
                           size_t n, a2_events *out)
{
    int rc = events_init(s, out, n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const json_t *found = NULL;
        size_t k;
        const json_t *r;
        json_array_foreach(rows, k, r)
        {
            const char *id = row_text(r, "event_id");
            if (id && strcmp(id, ids[i]) == 0)
                found = r;
        }
        if (!found)
            return 1;
        decode_event(out->arena_, found, "", &out->items[i]);
    }
    out->count = n;
    out->replayed = true;
    return a2__arena_failed(out->arena_) ? nomem(s) : 0;
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

    json_t *p = NULL, *rows = NULL, *abort_row = NULL;
    char **ids = NULL;
    p = new_params(s, session);
    if (!p)
        return A2_ESTORE_NOMEM;
    if (!set(p, "served", served_json(opts->consumers, opts->nconsumers))) {
        rc = nomem(s);
        goto done;
    }
    if (nevents == 0) {
        const char *st[] = {SQL_PENDING};
        rc = run_plain(s, st, 1, p, &rows);
        if (rc == 0) {
            rc = events_init(s, out, 0);
            out->has_pending =
                    a2__row_bool(json_array_get(rows, 0), "has_pending");
        }
        goto done;
    }
    ids = batch_ids(s, events, nevents, &rc);
    if (!ids)
        goto done;
    int64_t now = a2__store_now(s);
    json_t *supplied = json_array(), *causes = json_array();
    bool ok = supplied && causes;
    for (size_t i = 0; ok && i < nevents; i++)
        if (events[i].id)
            ok = json_array_append_new(supplied, json_string(events[i].id)) ==
                 0;
    /* Distinct causes, each fenced once. */
    for (size_t i = 0; ok && i < nevents; i++) {
        const a2_cause *c = events[i].cause;
        if (!c)
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) {
            const a2_cause *d = events[j].cause;
            seen = d && d->index == c->index && d->attempt == c->attempt &&
                   strcmp(d->consumer, c->consumer) == 0 &&
                   ((!d->lane && !c->lane) ||
                    (d->lane && c->lane && strcmp(d->lane, c->lane) == 0));
        }
        if (seen)
            continue;
        ok = json_array_append_new(
                     causes, json_pack("{s:I, s:s, s:o, s:I, s:i, s:I}", "ord",
                                       (json_int_t)json_array_size(causes) + 1,
                                       "consumer", c->consumer, "cursor_key",
                                       cursor_key_of(c->lane, c->index), "idx",
                                       (json_int_t)c->index, "attempt",
                                       c->attempt, "src", (json_int_t)i)) == 0;
    }
    size_t nsupplied = supplied ? json_array_size(supplied) : 0;
    size_t ncauses = causes ? json_array_size(causes) : 0;
    work w;
    ok = ok && set(p, "ids", json_incref(supplied)) &&
         set(p, "causes", json_incref(causes)) &&
         set(p, "count", json_integer((json_int_t)nevents)) &&
         set(p, "origin",
             opts->origin_index > 0 ? json_integer(opts->origin_index)
                                    : json_null()) &&
         set(p, "events", event_rows(events, nevents, ids, NULL)) &&
         set(p, "now", json_integer(now)) &&
         enqueue(events, nevents, opts->consumers, opts->nconsumers, p, &w);
    json_t *causes_kept = causes;
    json_decref(supplied);
    if (!ok) {
        json_decref(causes_kept);
        rc = nomem(s);
        goto done;
    }
    /* Without ids or causes the checks, the insert and the single targets
     * are one statement. */
    bool fresh = ncauses == 0 && nsupplied == 0;
    /* The fence runs before the session lock too: a completion holds its
     * cursor row while it waits for the session lock, so the causes' rows
     * are locked first; the run under the lock re-checks them against the
     * clear marker without waiting. */
    const char *st[] = {
            ncauses ? SQL_FENCE : NULL,
            SQL_LOCK_SESSION,
            !fresh      ? SQL_APPEND_CHECKS
            : w.started ? SQL_APPEND_FRESH_STARTING
                        : SQL_APPEND_FRESH,
            ncauses ? SQL_FENCE : NULL,
            nsupplied ? SQL_REUSE_IDS : NULL,
            fresh ? NULL : SQL_INSERT_EVENTS,
            !fresh && w.singles ? SQL_START_EVENTS : NULL,
            w.queued ? SQL_QUEUE_LANES : NULL,
            w.queued ? SQL_START_LANES : NULL,
            w.logs ? SQL_WAKE_LOGS : NULL,
    };
    rc = a2__store_batch(s, st, sizeof st / sizeof *st, p, &rows, &abort_row);
    if (rc == A2__ABORTED) {
        const char *why = row_text(abort_row, "abort");
        why = why ? why : "";
        if (strcmp(why, "mixed") == 0) {
            int64_t owned = a2__row_int(abort_row, "owned");
            rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                                "batch mixes %" PRId64
                                " already-appended and %" PRId64
                                " fresh events",
                                owned, (int64_t)nevents - owned);
        } else if (strcmp(why, "cleared") == 0) {
            rc = a2__store_fail(s, A2_ESESSION_CLEARED,
                                "scheduled work from event %" PRId64
                                " was cleared in session \"%s\"",
                                opts->origin_index, session);
        } else if (strcmp(why, "superseded") == 0) {
            int64_t ord = a2__row_int(abort_row, "ord");
            json_t *c = json_array_get(causes_kept, (size_t)(ord - 1));
            rc = a2__store_fail(
                    s, A2_ESUPERSEDED_ATTEMPT,
                    "attempt %" PRId64 " of %s at index %" PRId64
                    " in session \"%s\" is superseded",
                    a2__row_int(c, "attempt"),
                    row_text(c, "consumer") ? row_text(c, "consumer") : "?",
                    a2__row_int(c, "idx"), session);
        } else if (strcmp(why, "held") == 0) {
            rc = a2__store_fail(s, A2_ESTORE_UNAVAILABLE,
                                "an event id being reused is still held by "
                                "cleared work in session \"%s\"",
                                session);
        } else {
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "store operation aborted: %s", why);
        }
    }
    json_decref(causes_kept);
    if (rc)
        goto done;
    json_t *checked = NULL;
    size_t k;
    json_t *r;
    json_array_foreach(rows, k, r)
    {
        const char *stop = row_text(r, "stop");
        if ((stop && strcmp(stop, "replay") == 0) ||
            json_object_get(r, "base")) {
            checked = r;
            break;
        }
    }
    if (!checked) {
        rc = a2__store_fail(s, A2_ESTORE_FAILED, "append returned no checks");
        goto done;
    }
    if (json_object_get(checked, "stop")) {
        rc = replayed_events(s, json_object_get(checked, "events"), ids,
                             nevents, out);
        if (rc == 1)
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "replayed rows do not match the batch");
        out->has_pending = a2__row_bool(checked, "has_pending");
        goto done;
    }
    rc = inserted_events(s, session, events, nevents, ids, NULL,
                         a2__row_int(checked, "base"), now, out);
    out->has_pending = a2__row_bool(checked, "has_pending") || w.started;
done:
    if (rc)
        a2_events_free(out);
    else
        a2__store_ok(s);
    free_ids(ids, nevents);
    json_decref(abort_row);
    json_decref(rows);
    json_decref(p);
    return rc;
}

/* ── read, cursors, dead letters, wake_log ───────────────────────────── */

static int decode_event_rows(a2_store *s, json_t *rows, a2_events *out)
{
    size_t n = json_array_size(rows);
    int rc = events_init(s, out, n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        decode_event(out->arena_, json_array_get(rows, i), "", &out->items[i]);
    out->count = n;
    return a2__arena_failed(out->arena_) ? nomem(s) : 0;
}

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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    json_t *types = json_null();
    if (opts->types) {
        json_decref(types);
        types = json_array();
        for (size_t i = 0; types && i < opts->ntypes; i++)
            json_array_append_new(types, json_string(opts->types[i]));
    }
    if (!set(p, "after", json_integer(opts->after)) ||
        !set(p, "limit",
             opts->limit ? json_integer((json_int_t)opts->limit)
                         : json_null()) ||
        !set(p, "types", types)) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_READ};
    rc = run_plain(s, st, 1, p, &rows);
    if (rc == 0)
        rc = decode_event_rows(s, rows, out);
done:
    if (rc)
        a2_events_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}

static int cursors_init(a2_store *s, a2_cursors *out, size_t n)
{
    void *items = NULL;
    int rc = result_init(s, &out->arena_, &items, n, sizeof(a2_cursor));
    out->items = items;
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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    const char *st[] = {SQL_CURSORS};
    rc = run_plain(s, st, 1, p, &rows);
    if (rc == 0)
        rc = cursors_init(s, out, json_array_size(rows));
    if (rc == 0) {
        size_t k;
        json_t *r;
        json_array_foreach(rows, k, r)
        {
            int64_t ci = a2__row_int(r, "clear_index");
            decode_cursor(out->arena_, r, ci == A2_STORE_NONE ? 0 : ci,
                          &out->items[k]);
        }
        out->count = json_array_size(rows);
        if (a2__arena_failed(out->arena_))
            rc = nomem(s);
    }
    if (rc)
        a2_cursors_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}

static int heads_init(a2_store *s, a2_heads *out, size_t n)
{
    void *items = NULL;
    int rc = result_init(s, &out->arena_, &items, n, sizeof(a2_head));
    out->items = items;
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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    const char *st[] = {SQL_DEAD_LETTERS};
    rc = run_plain(s, st, 1, p, &rows);
    if (rc == 0)
        rc = heads_init(s, out, json_array_size(rows));
    if (rc == 0) {
        size_t k;
        json_t *r;
        json_array_foreach(rows, k, r)
                decode_head(out->arena_, r, &out->items[k]);
        out->count = json_array_size(rows);
        if (a2__arena_failed(out->arena_))
            rc = nomem(s);
    }
    if (rc)
        a2_heads_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}

int a2_store_wake_log(a2_store *s, const char *session,
                      const a2_consumer *consumer, a2_cursors *cursor_out,
                      int64_t *head_out)
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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    if (!set(p, "cursorKey", cursor_key_of(log->lane, 0)) ||
        !set(p, "consumer", json_string(consumer->name)) ||
        !set(p, "lane", json_string(log->lane)) ||
        !set(p, "types", types_json(log)) ||
        !set(p, "backfill", json_boolean(log->backfill)) ||
        !set(p, "clearType", json_string(A2_STORE_CLEAR_TYPE))) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_READ_LOG, SQL_LOCK_SESSION, SQL_WAKE_LOG};
    rc = run_plain(s, st, 3, p, &rows);
    if (rc)
        goto done;
    json_t *found = json_array_get(rows, json_array_size(rows) - 1);
    rc = cursors_init(s, cursor_out, 1);
    if (rc)
        goto done;
    a2_store_arena *a = cursor_out->arena_;
    a2_cursor *c = &cursor_out->items[0];
    cursor_out->count = 1;
    int64_t head;
    if (a2__row_bool(found, "empty")) {
        /* Nothing after the latest clear: a missing cursor stays missing. */
        head = a2__row_int(found, "head");
        memset(c, 0, sizeof *c);
        c->dispatch.consumer = a2__arena_strdup(a, consumer->name);
        c->dispatch.lane = a2__arena_strdup(a, log->lane);
        char key[A2_STORE_MAX_NAME + 8];
        snprintf(key, sizeof key, "lane:%s", log->lane);
        c->dispatch.cursor_key = a2__arena_strdup(a, key);
        c->dispatch.kind = "log";
        c->dispatch.epoch = A2_STORE_NONE;
        c->dispatch.first_claimed_at = c->dispatch.last_claimed_at =
                c->dispatch.claim_expires_at = c->dispatch.last_failed_at =
                        c->dispatch.last_failed_attempt =
                                c->dispatch.failed_at = A2_STORE_NONE;
        c->position = head;
        c->head = A2_STORE_NONE;
        json_t *t = types_json(log);
        char *text = t ? json_dumps(t, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        c->types = a2__arena_strdup(a, text ? text : "null");
        free(text);
        json_decref(t);
    } else {
        json_t *cur = json_object_get(found, "cursor");
        bool unchanged = row_text(found, "stop") &&
                         strcmp(row_text(found, "stop"), "unchanged") == 0;
        int64_t ci = a2__row_int(unchanged ? cur : found, "clear_index");
        head = a2__row_int(unchanged ? cur : found,
                           unchanged ? "session_head" : "head");
        decode_cursor(a, cur, ci == A2_STORE_NONE ? 0 : ci, c);
    }
    if (head_out)
        *head_out = head == A2_STORE_NONE ? 0 : head;
    if (a2__arena_failed(a))
        rc = nomem(s);
done:
    if (rc)
        a2_cursors_free(cursor_out);
    json_decref(rows);
    json_decref(p);
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
    json_t *p = new_params(s, session), *rows = NULL, *more = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    int64_t now = a2__store_now(s);
    json_t *excluded = json_array();
    for (size_t i = 0; excluded && i < req->nexclude; i++)
        if (json_array_append_new(
                    excluded,
                    json_pack("{s:s, s:o}", "consumer",
                              req->exclude[i].consumer, "cursor_key",
                              cursor_key_of(req->exclude[i].lane,
                                            req->exclude[i].index))) != 0) {
            json_decref(excluded);
            excluded = NULL;
        }
    if (!set(p, "now", json_integer(now)) ||
        !set(p, "served", served_json(req->consumers, req->nconsumers)) ||
        !set(p, "excluded", excluded) ||
        !set(p, "holder", json_string(req->holder)) ||
        !set(p, "expiresAt",
             json_integer(req->expires_at_ms ? req->expires_at_ms
                                             : now + req->ttl_ms)) ||
        !set(p, "maxFailures",
             req->max_failures ? json_integer(req->max_failures)
                               : json_null()) ||
        !set(p, "through",
             req->through ? json_integer(req->through) : json_null())) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_CLAIM, SQL_RELEASE_DEAD, SQL_RETRY_AT};
    rc = run_plain(s, st, 3, p, &rows);
    if (rc)
        goto done;
    /* Heads the claim waited on that moved to events its snapshot
     * predates: read them in a fresh statement. */
    json_t *unseen = json_array();
    if (!unseen) {
        rc = nomem(s);
        goto done;
    }
    size_t k;
    json_t *r;
    size_t nheads = 0;
    json_array_foreach(rows, k, r)
    {
        if (!json_object_get(r, "e_idx"))
            continue;
        nheads++;
        if (json_is_null(json_object_get(r, "e_idx")))
            json_array_append(unseen, json_object_get(r, "head"));
    }
    if (json_array_size(unseen) > 0) {
        json_t *q = new_params(s, session);
        if (!q || !set(q, "heads", json_incref(unseen))) {
            json_decref(q);
            json_decref(unseen);
            rc = nomem(s);
            goto done;
        }
        const char *st2[] = {SQL_HEAD_EVENTS};
        rc = run_plain(s, st2, 1, q, &more);
        json_decref(q);
        if (rc) {
            json_decref(unseen);
            goto done;
        }
        json_array_foreach(rows, k, r)
        {
            if (!json_is_null(json_object_get(r, "e_idx")) ||
                !json_object_get(r, "e_idx"))
                continue;
            size_t m;
            json_t *ev;
            json_array_foreach(more, m, ev)
            {
                if (a2__row_int(ev, "e_idx") == a2__row_int(r, "head"))
                    json_object_update(r, ev);
            }
        }
    }
    json_decref(unseen);
    if ((rc = heads_init(s, &out->heads, nheads)) != 0 ||
        (rc = heads_init(s, &out->dead_lettered, nheads)) != 0)
        goto done;
    int64_t session_head = 0;
    json_array_foreach(rows, k, r)
    {
        if (!json_object_get(r, "e_idx") ||
            json_is_null(json_object_get(r, "e_idx")))
            continue; /* cleared and reclaimed meanwhile: superseded */
        bool dead = !json_is_null(json_object_get(r, "failed_at")) &&
                    json_object_get(r, "failed_at");
        a2_heads *list = dead ? &out->dead_lettered : &out->heads;
        decode_head(list->arena_, r, &list->items[list->count++]);
        int64_t sh = a2__row_int(r, "session_head");
        if (sh != A2_STORE_NONE && sh > session_head)
            session_head = sh;
        int64_t idx = a2__row_int(r, "e_idx");
        if (!dead && idx > session_head)
            session_head = idx;
    }
    if (a2__arena_failed(out->heads.arena_) ||
        a2__arena_failed(out->dead_lettered.arena_)) {
        rc = nomem(s);
        goto done;
    }
    if (out->heads.count > 0) {
        out->outcome = A2_CLAIM_CLAIMED;
        out->session_head = session_head;
        out->retry_at = A2_STORE_NONE;
    } else {
        json_t *last = row_with(rows, "retry_at");
        int64_t at = last ? a2__row_int(last, "retry_at") : A2_STORE_NONE;
        out->outcome = at == A2_STORE_NONE ? A2_CLAIM_SETTLED : A2_CLAIM_BUSY;
        out->retry_at = at;
        out->session_head = A2_STORE_NONE;
    }
done:
    if (rc)
        a2_claim_result_free(out);
    json_decref(more);
    json_decref(rows);
    json_decref(p);
    return rc;
}

typedef struct sorted_ref {
    const a2_attempt_ref *ref;
    size_t ord;
} sorted_ref;

static int cmp_ref(const void *a, const void *b)
{
    const a2_attempt_ref *x = ((const sorted_ref *)a)->ref;
    const a2_attempt_ref *y = ((const sorted_ref *)b)->ref;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return strcmp(x->consumer, y->consumer);
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
    out->arena_ = a2__arena_new();
    sorted_ref *order = calloc(nclaims ? nclaims : 1, sizeof *order);
    json_t *p = new_params(s, session), *rows = NULL, *list = json_array();
    if (!out->arena_ || !order || !p || !list) {
        rc = nomem(s);
        goto done;
    }
    out->renewed = a2__arena_alloc(out->arena_, (nclaims ? nclaims : 1) *
                                                        sizeof(a2_head_ref));
    out->superseded = a2__arena_alloc(out->arena_, (nclaims ? nclaims : 1) *
                                                           sizeof(a2_head_ref));
    for (size_t i = 0; i < nclaims; i++)
        order[i] = (sorted_ref){&claims[i], i};
    qsort(order, nclaims, sizeof *order, cmp_ref);
    int64_t now = a2__store_now(s);
    bool ok = out->renewed && out->superseded;
    for (size_t i = 0; ok && i < nclaims; i++) {
        const a2_attempt_ref *c = order[i].ref;
        ok = json_array_append_new(list,
                                   json_pack("{s:I, s:s, s:o, s:I, s:i}", "ord",
                                             (json_int_t)i + 1, "consumer",
                                             c->consumer, "cursor_key",
                                             cursor_key_of(c->lane, c->index),
                                             "idx", (json_int_t)c->index,
                                             "attempt", c->attempt)) == 0;
    }
    if (!ok || !set(p, "claims", json_incref(list)) ||
        !set(p, "holder", json_string(holder)) ||
        !set(p, "now", json_integer(now)) ||
        !set(p, "expiresAt",
             json_integer(expires_at_ms ? expires_at_ms : now + ttl_ms))) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_RENEW};
    rc = run_plain(s, st, 1, p, &rows);
    if (rc)
        goto done;
    size_t k;
    json_t *r;
    json_array_foreach(rows, k, r)
    {
        int64_t ord = a2__row_int(r, "ord");
        if (ord < 1 || (size_t)ord > nclaims)
            continue;
        const a2_attempt_ref *c = order[ord - 1].ref;
        a2_head_ref ref = {a2__arena_strdup(out->arena_, c->consumer),
                           a2__arena_strdup(out->arena_, c->lane), c->index};
        if (a2__row_bool(r, "renewed")) {
            out->renewed[out->nrenewed++] = ref;
            continue;
        }
        if (a2__row_bool(r, "cleared")) {
            out->superseded[out->nsuperseded++] = ref;
            continue;
        }
        if (!a2__row_bool(r, "found"))
            continue;
        int64_t head = a2__row_int(r, "head");
        /* An event the cursor has not reached yet holds no claim. */
        if (head != c->index && a2__row_int(r, "position") < c->index)
            continue;
        if (head != c->index || a2__row_int(r, "attempt_count") > c->attempt)
            out->superseded[out->nsuperseded++] = ref;
    }
    if (a2__arena_failed(out->arena_))
        rc = nomem(s);
done:
    if (rc)
        a2_renew_result_free(out);
    free(order);
    json_decref(list);
    json_decref(rows);
    json_decref(p);
    return rc;
}

/* ── complete ────────────────────────────────────────────────────────── */

static bool same_text(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* A completion that does not hold its head: a stale attempt, or a retry
 * after an unknown acknowledgement, which replays the committed events. */
static int settle_unheld(a2_store *s, const char *session,
                         const a2_attempt_ref *at, const a2_append_event *ev,
                         size_t n, char **ids, bool duplicated,
                         a2_complete_result *out)
{
    json_t *p = new_params(s, session), *rows = NULL, *idl = json_array();
    int rc = 0;
    for (size_t i = 0; idl && i < n; i++)
        json_array_append_new(idl, json_string(ids[i]));
    if (!p || !idl ||
        !set(p, "cursorKey", cursor_key_of(at->lane, at->index)) ||
        !set(p, "consumer", json_string(at->consumer)) ||
        !set(p, "lane", str_or_null(at->lane)) ||
        !set(p, "index", json_integer(at->index)) ||
        !set(p, "ids", json_incref(idl))) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_SETTLE};
    rc = run_plain(s, st, 1, p, &rows);
    if (rc)
        goto done;
    json_t *c = json_array_get(rows, 0);
    out->outcome = A2_ATTEMPT_SUPERSEDED;
    if (!a2__row_bool(c, "found")) {
        if (!a2__row_bool(c, "has_event") && !a2__row_bool(c, "cleared"))
            rc = a2__store_fail(s, A2_ENO_SUCH_EVENT,
                                "no event at index %" PRId64
                                " in session \"%s\"",
                                at->index, session);
        goto done;
    }
    if (duplicated) {
        rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                            "returned event batch contains the same event id "
                            "more than once");
        goto done;
    }
    if (a2__row_int(c, "head") == at->index)
        goto done;
    int64_t attempt = A2_STORE_NONE;
    json_t *done_ids = NULL;
    bool completion = false;
    const char *kind = row_text(c, "kind");
    if (kind && strcmp(kind, "lane") == 0) {
        if (a2__row_bool(c, "lane_found")) {
            completion = true;
            attempt = a2__row_int(c, "lane_attempt");
            done_ids = json_object_get(c, "lane_ids");
        }
    } else if (a2__row_int(c, "completed_idx") == at->index) {
        completion = true;
        attempt = a2__row_int(c, "completed_attempt");
        done_ids = json_object_get(c, "returned_event_ids");
    }
    if (!completion || attempt != at->attempt)
        goto done;
    bool match = json_is_array(done_ids) && json_array_size(done_ids) == n;
    for (size_t i = 0; match && i < n; i++)
        match = same_text(json_string_value(json_array_get(done_ids, i)),
                          ids[i]);
    if (!match) {
        rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                            "completed attempt does not match the returned "
                            "event batch");
        goto done;
    }
    json_t *committed = json_object_get(c, "events");
    bool all = true, causes_match = true;
    for (size_t i = 0; i < n; i++) {
        const json_t *row = NULL;
        size_t k;
        json_t *r;
        json_array_foreach(committed, k, r)
        {
            if (same_text(row_text(r, "event_id"), ids[i]))
                row = r;
        }
        if (!row) {
            all = false;
            continue;
        }
        const json_t *cause = json_object_get(row, "cause");
        if (!same_text(row_text(cause, "consumer"), at->consumer) ||
            !same_text(row_text(cause, "lane"), at->lane) ||
            a2__row_int(cause, "index") != at->index ||
            a2__row_int(cause, "attempt") != at->attempt)
            causes_match = false;
    }
    if (!all && a2__row_bool(c, "cleared"))
        goto done;
    if (!all || !causes_match) {
        rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                            "returned event retry does not match the "
                            "committed batch");
        goto done;
    }
    (void)ev;
    out->outcome = A2_ATTEMPT_COMPLETED;
    rc = replayed_events(s, committed, ids, n, &out->events);
    if (rc == 1)
        rc = a2__store_fail(s, A2_ESTORE_FAILED,
                            "replayed rows do not match the batch");
done:
    json_decref(idl);
    json_decref(rows);
    json_decref(p);
    return rc;
}

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
    int dup = ids_repeat(events, nevents);
    if (dup < 0)
        return nomem(s);
    a2_cause cause = {attempt->consumer, attempt->lane, attempt->index,
                      attempt->attempt};
    int64_t now = a2__store_now(s);
    json_t *p = new_params(s, session), *rows = NULL, *abort_row = NULL;
    char **ids = NULL;
    work w = {0};
    if (!p)
        return A2_ESTORE_NOMEM;
    ids = batch_ids(s, events, nevents, &rc);
    if (!ids)
        goto done;
    json_t *idl = json_array();
    for (size_t i = 0; idl && i < nevents; i++)
        json_array_append_new(idl, json_string(ids[i]));
    bool appends = nevents > 0 && !dup;
    bool ok =
            idl && set(p, "ids", idl) &&
            set_retype(p, attempt->consumer, consumers, nconsumers) &&
            set(p, "cursorKey", cursor_key_of(attempt->lane, attempt->index)) &&
            set(p, "consumer", json_string(attempt->consumer)) &&
            set(p, "index", json_integer(attempt->index)) &&
            set(p, "attempt", json_integer(attempt->attempt)) &&
            set(p, "count", json_integer((json_int_t)nevents)) &&
            set(p, "now", json_integer(now)) &&
            set(p, "clearType", json_string(A2_STORE_CLEAR_TYPE));
    if (ok && appends) {
        ok = set(p, "events", event_rows(events, nevents, ids, &cause)) &&
             enqueue(events, nevents, consumers, nconsumers, p, &w);
        /* enqueue's clearType is the same constant. */
    }
    if (!ok) {
        rc = nomem(s);
        goto done;
    }
    bool concurrent = attempt->lane == NULL;
    const char *held_only[] = {SQL_HOLD};
    const char *appending[] = {
            SQL_HOLD,
            SQL_LOCK_SESSION,
            SQL_RETURN_CHECKS,
            SQL_REUSE_IDS,
            SQL_INSERT_EVENTS,
            w.singles ? SQL_START_EVENTS : NULL,
            w.queued ? SQL_QUEUE_LANES : NULL,
            w.queued ? SQL_START_LANES : NULL,
            w.logs ? SQL_WAKE_LOGS : NULL,
            concurrent ? SQL_COMPLETE_APPENDED_EVENT : SQL_COMPLETE_APPENDED,
    };
    /* A concurrent cursor never goes idle with a next head to find. */
    const char *plain[] = {SQL_HOLD, concurrent ? NULL : SQL_LOCK_IF_IDLE,
                           concurrent ? SQL_COMPLETE_EVENT : SQL_COMPLETE};
    if (dup)
        rc = a2__store_batch(s, held_only, 1, p, &rows, &abort_row);
    else if (appends)
        rc = a2__store_batch(s, appending, sizeof appending / sizeof *appending,
                             p, &rows, &abort_row);
    else
        rc = a2__store_batch(s, plain, 3, p, &rows, &abort_row);
    if (rc == A2__ABORTED) {
        const char *why = row_text(abort_row, "abort");
        if (why && strcmp(why, "owned") == 0)
            rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                                "returned event batch contains an "
                                "already-appended event id");
        else if (why && strcmp(why, "held") == 0)
            rc = a2__store_fail(s, A2_ESTORE_UNAVAILABLE,
                                "an event id being reused is still held by "
                                "cleared work in session \"%s\"",
                                session);
        else
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "store operation aborted: %s",
                                why ? why : "abort");
    }
    if (rc)
        goto done;
    json_t *held = json_array_get(rows, 0);
    const char *stop = row_text(held, "stop");
    if (stop && strcmp(stop, "superseded") == 0) {
        out->outcome = A2_ATTEMPT_SUPERSEDED;
        goto done;
    }
    if (stop && strcmp(stop, "unheld") == 0) {
        rc = settle_unheld(s, session, attempt, events, nevents, ids, dup != 0,
                           out);
        goto done;
    }
    if (dup) {
        rc = a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                            "returned event batch contains the same event id "
                            "more than once");
        goto done;
    }
    const char *last =
            row_text(json_array_get(rows, json_array_size(rows) - 1), "stop");
    if (last && strcmp(last, "superseded") == 0) {
        out->outcome = A2_ATTEMPT_SUPERSEDED;
        goto done;
    }
    out->outcome = A2_ATTEMPT_COMPLETED;
    json_t *checked = row_with(rows, "base");
    if (checked)
        rc = inserted_events(s, session, events, nevents, ids, &cause,
                             a2__row_int(checked, "base"), now, &out->events);
    else
        rc = events_init(s, &out->events, 0);
done:
    if (rc)
        a2_complete_result_free(out);
    else
        a2__store_ok(s);
    free_ids(ids, nevents);
    json_decref(abort_row);
    json_decref(rows);
    json_decref(p);
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
    int64_t now = a2__store_now(s);
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    if (!set(p, "cursorKey", cursor_key_of(attempt->lane, attempt->index)) ||
        !set(p, "consumer", json_string(attempt->consumer)) ||
        !set(p, "index", json_integer(attempt->index)) ||
        !set(p, "attempt", json_integer(attempt->attempt)) ||
        !set(p, "error", json_string(req->error ? req->error : "")) ||
        !set(p, "maxFailures", json_integer(req->max_failures)) ||
        !set(p, "now", json_integer(now)) ||
        !set(p, "retryAt",
             req->retry_after_ms > 0 ? json_integer(now + req->retry_after_ms)
                                     : json_null())) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_FAIL, SQL_FAIL_RELEASE, SQL_FAIL_MISSING};
    rc = run_plain(s, st, 3, p, &rows);
    if (rc)
        goto done;
    json_t *row = json_array_get(rows, 0);
    const char *outcome = row_text(row, "outcome");
    outcome = outcome ? outcome : "missing";
    out->failure_count = as_int(a2__row_int(row, "failure_count"));
    if (strcmp(outcome, "failed") == 0) {
        out->outcome = A2_ATTEMPT_FAILED;
    } else if (strcmp(outcome, "dead_lettered") == 0) {
        out->outcome = A2_ATTEMPT_DEAD_LETTERED;
    } else if (strcmp(outcome, "missing") == 0) {
        json_t *m = json_array_get(rows, json_array_size(rows) - 1);
        out->outcome = A2_ATTEMPT_SUPERSEDED;
        out->failure_count = 0;
        if (!a2__row_bool(m, "cursor_found") && !a2__row_bool(m, "has_event") &&
            !a2__row_bool(m, "cleared"))
            rc = a2__store_fail(s, A2_ENO_SUCH_EVENT,
                                "no event at index %" PRId64
                                " in session \"%s\"",
                                attempt->index, session);
    } else {
        out->outcome = A2_ATTEMPT_SUPERSEDED;
        out->failure_count = 0;
    }
done:
    if (rc)
        memset(out, 0, sizeof *out);
    json_decref(rows);
    json_decref(p);
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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    if (!set_retype(p, consumer, consumers, nconsumers) ||
        !set(p, "consumer", json_string(consumer)) ||
        !set(p, "index", json_integer(index)) ||
        !set(p, "served", served_json(consumers, nconsumers)) ||
        !set(p, "clearType", json_string(A2_STORE_CLEAR_TYPE))) {
        rc = nomem(s);
        goto done;
    }
    bool skip = action == A2_REDRIVE_SKIP;
    /* A skip promotes lane work, so it reads under the session lock; the
     * dead letter's row is locked before that lock, as a completion does. */
    const char *st[] = {skip ? SQL_LOCK_DEAD : NULL,
                        skip ? SQL_LOCK_SESSION : NULL, SQL_LOCK_DEAD,
                        skip ? SQL_SKIP_DEAD : SQL_RETRY_DEAD, SQL_PENDING};
    rc = run_plain(s, st, sizeof st / sizeof *st, p, &rows);
    if (rc)
        goto done;
    out->redriven = a2__row_bool(row_with(rows, "redriven"), "redriven");
    out->has_pending = a2__row_bool(
            json_array_get(rows, json_array_size(rows) - 1), "has_pending");
done:
    json_decref(rows);
    json_decref(p);
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
    int64_t now = a2__store_now(s);
    json_t *p = new_params(s, session), *rows = NULL, *abort_row = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    if (!set(p, "causeKey",
             cause ? cursor_key_of(cause->lane, cause->index) : json_null()) ||
        !set(p, "causeConsumer", str_or_null(cause ? cause->consumer : NULL)) ||
        !set(p, "causeIndex",
             cause ? json_integer(cause->index) : json_null()) ||
        !set(p, "causeAttempt",
             cause ? json_integer(cause->attempt) : json_null()) ||
        !set(p, "ifLast",
             if_last_index == A2_STORE_NONE ? json_null()
                                            : json_integer(if_last_index)) ||
        !set(p, "clearType", json_string(A2_STORE_CLEAR_TYPE)) ||
        !set(p, "markerId", json_string(marker_id)) ||
        !set(p, "now", json_integer(now))) {
        rc = nomem(s);
        goto done;
    }
    /* The cause's row is locked before the session lock, as by append. */
    const char *st[] = {cause ? SQL_CLEAR_FENCE : NULL, SQL_LOCK_SESSION,
                        cause ? SQL_CLEAR_FENCE : NULL, SQL_CLEAR_CHECK,
                        SQL_CLEAR_WRITE};
    rc = a2__store_batch(s, st, sizeof st / sizeof *st, p, &rows, &abort_row);
    if (rc == A2__ABORTED)
        rc = a2__store_fail(s, A2_ESUPERSEDED_ATTEMPT,
                            "attempt %d of %s at index %" PRId64
                            " in session \"%s\" is superseded",
                            cause ? cause->attempt : 0,
                            cause ? cause->consumer : "?",
                            cause ? cause->index : 0, session);
    if (rc)
        goto done;
    json_t *last = json_array_get(rows, json_array_size(rows) - 1);
    out->cleared = a2__row_bool(last, "cleared");
    out->index = a2__row_int(last, "index");
    out->clear_index = a2__row_int(last, "clear_index");
done:
    json_decref(abort_row);
    json_decref(rows);
    json_decref(p);
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
    json_t *p = new_params(s, session), *rows = NULL;
    if (!p)
        return A2_ESTORE_NOMEM;
    const char *st[] = {SQL_RECLAIM_BATCH, SQL_RECLAIM_REMAINING,
                        SQL_RECLAIM_SWEEP};
    rc = run_plain(s, st, 3, p, &rows);
    if (rc)
        goto done;
    json_t *first = json_array_get(rows, 0);
    out->deleted = a2__row_int(first, "deleted");
    if (a2__row_int(first, "clear_index") == 0) {
        out->deleted = 0;
        out->done = true;
        goto done;
    }
    json_t *second = json_array_get(rows, 1);
    const char *stop = row_text(second, "stop");
    if (stop && strcmp(stop, "more") == 0) {
        out->done = false;
        goto done;
    }
    json_t *swept = row_with(rows, "skipped");
    out->done = swept && a2__row_int(swept, "skipped") == 0;
done:
    json_decref(rows);
    json_decref(p);
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
    json_t *p = json_object(), *rows = NULL, *list = json_array();
    for (size_t i = 0; list && i < nconsumers; i++)
        json_array_append_new(list, json_string(consumers[i]));
    if (!p || !set(p, "consumers", list) ||
        !set(p, "after", str_or_null(after)) ||
        !set(p, "limit", json_integer((json_int_t)limit)) ||
        !set(p, "now", json_integer(a2__store_now(s)))) {
        rc = nomem(s);
        goto done;
    }
    const char *st[] = {SQL_PENDING_SESSIONS};
    rc = run_plain(s, st, 1, p, &rows);
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
    json_decref(p);
    return rc;
}
