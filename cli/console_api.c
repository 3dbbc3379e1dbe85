/*
 * `a2 console`: the JSON API under /api/ (console.c has checked the
 * request before it gets here). Reads and actions go through liba2store on
 * a small pool of connections; the overview adds the audit trail's recent
 * completions and a2-consumer's metrics, an event's page its audited
 * history.
 *
 *   GET  /api/session-info       the CSRF token, read-only, what is enabled
 *   GET  /api/overview           each consumer's backlog, completions per
 *                                minute, a2-consumer's lag and workers
 *   GET  /api/dead-letters       across sessions, by filter, newest first
 *   GET  /api/dead-letters/count how many match the filter
 *   GET  /api/session?id=S       its events, cursors and dead letters
 *   GET  /api/event?session=S&index=N
 *                                the event, its cursors, its audit history
 *   POST /api/redrive            retry or skip one dead letter
 *   POST /api/redrive-matching   retry or skip every dead letter matching a
 *                                filter, at most the count confirmed
 *   POST /api/cancel             cancel a pending head (refused when
 *                                running)
 */
#include "cli.h"
#include "console.h"

#include "../common/clock.h"
#include "../common/num.h"
#include "a2/version.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_PAYLOAD_MAX   2048         /* bytes of a payload in lists */
#define EVENT_PAYLOAD_MAX  (256 * 1024) /* on an event's page */
#define BULK_MAX           100000
#define RECENT_WINDOW_MS   (5 * 60 * 1000)
#define METRICS_TIMEOUT_MS 2000

/* ── JSON values ─────────────────────────────────────────────────────── */

json_t *a2__con_jstrn(const char *s, size_t n)
{
    if (!s)
        return json_null();
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return NULL;
    size_t o = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = a2_wire_utf8_seq(u + i, n - i);
        if (k == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(buf + o, u + i, k);
            o += k;
            i += k;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

json_t *a2__con_jstr(const char *s)
{
    return s ? a2__con_jstrn(s, strlen(s)) : json_null();
}

a2__con_reply a2__con_error(unsigned status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *o = json_object();
    json_object_set_new(o, "error", a2__con_jstr(msg));
    return (a2__con_reply){status, o};
}

static a2__con_reply ok(json_t *doc)
{
    return (a2__con_reply){200, doc};
}

/* A payload's text, cut at max bytes (on a character boundary). */
static void set_payload(json_t *o, const char *p, size_t max)
{
    if (!p) {
        json_object_set_new(o, "payload", json_null());
        json_object_set_new(o, "payload_truncated", json_false());
        return;
    }
    size_t n = strlen(p);
    bool cut = n > max;
    if (cut) {
        n = max;
        while (n > 0 && ((unsigned char)p[n] & 0xC0) == 0x80)
            n--;
    }
    json_object_set_new(o, "payload", a2__con_jstrn(p, n));
    json_object_set_new(o, "payload_truncated", json_boolean(cut));
    json_object_set_new(o, "payload_bytes",
                        json_integer((json_int_t)strlen(p)));
}

static json_t *event_json(const a2_event *e, size_t payload_max)
{
    json_t *o = a2__cli_event_fields(e, a2__con_jstr);
    set_payload(o, e->payload, payload_max);
    json_object_set_new(o, "cause", a2__cli_cause_json(e, a2__con_jstr));
    return o;
}

/* The CLI's dispatch state, with the claim and failure times the pages
 * show. */
static json_t *dispatch_json(json_t *o, const a2_dispatch *d)
{
    a2__cli_dispatch_json(o, d);
    json_object_set_new(o, "first_claimed_at",
                        a2__cli_json_i64(d->first_claimed_at));
    json_object_set_new(o, "last_claimed_at",
                        a2__cli_json_i64(d->last_claimed_at));
    json_object_set_new(o, "last_failed_attempt",
                        a2__cli_json_i64(d->last_failed_attempt));
    return o;
}

static json_t *head_json(const a2_head *h, size_t payload_max)
{
    json_t *o = dispatch_json(json_object(), &h->dispatch);
    json_object_set_new(o, "session", a2__con_jstr(h->event.session_id));
    json_object_set_new(o, "index", json_integer(h->event.index));
    json_object_set_new(o, "event", event_json(&h->event, payload_max));
    return o;
}

static json_t *cursor_json(const a2_cursor *c)
{
    json_t *o = dispatch_json(json_object(), &c->dispatch);
    json_object_set_new(o, "position", json_integer(c->position));
    json_object_set_new(o, "head", a2__cli_json_i64(c->head));
    json_object_set_new(o, "types", a2__con_jstr(c->types));
    return o;
}

/* ── the store pool ──────────────────────────────────────────────────── */

/* Takes a free connection (opening it when needed): its slot, or -1 with
 * *fail set. */
static int pool_take(a2__console *con, a2__con_reply *fail)
{
    pthread_mutex_lock(&con->mu);
    int slot = -1;
    for (;;) {
        for (int i = 0; i < A2__CONSOLE_STORES; i++)
            if (!con->busy[i] && (slot < 0 || con->stores[i]))
                slot = i;
        if (slot >= 0)
            break;
        pthread_cond_wait(&con->cv, &con->mu);
    }
    con->busy[slot] = true;
    bool have = con->stores[slot] != NULL;
    pthread_mutex_unlock(&con->mu);
    if (have)
        return slot;
    a2_store *st = NULL;
    a2_store_error err = {0};
    if (a2_store_open(&st, con->db, &err) != 0 ||
        (!getenv("A2_STORE_TIMEOUT_MS") && a2_store_set_timeout(st, 15000))) {
        a2_store_close(st);
        pthread_mutex_lock(&con->mu);
        con->busy[slot] = false;
        pthread_cond_signal(&con->cv);
        pthread_mutex_unlock(&con->mu);
        *fail = a2__con_error(503, "database unavailable: %s",
                              err.message[0] ? err.message
                                             : "could not connect");
        return -1;
    }
    pthread_mutex_lock(&con->mu);
    con->stores[slot] = st;
    pthread_mutex_unlock(&con->mu);
    return slot;
}

static void pool_give(a2__console *con, int slot)
{
    pthread_mutex_lock(&con->mu);
    con->busy[slot] = false;
    pthread_cond_signal(&con->cv);
    pthread_mutex_unlock(&con->mu);
}

void a2__con_pool_close(a2__console *con)
{
    for (int i = 0; i < A2__CONSOLE_STORES; i++) {
        a2_store_close(con->stores[i]);
        con->stores[i] = NULL;
    }
}

/* The failed call's answer: its status by code, the store's message. */
static a2__con_reply store_failed(a2_store *st, const char *what)
{
    const a2_store_error *e = a2_store_last_error(st);
    int code = e ? e->code : A2_ESTORE_FAILED;
    unsigned status = 500;
    switch (code) {
    case A2_EINVALID_ARGUMENT:
        status = 400;
        break;
    case A2_ENO_SUCH_EVENT:
        status = 404;
        break;
    case A2_ESTORE_UNAVAILABLE:
    case A2_ESCHEMA_MISSING:
        status = 503;
        break;
    default:
        break;
    }
    a2__con_reply r =
            a2__con_error(status, "%s: %s", what,
                          e && e->message[0] ? e->message : "unknown error");
    json_object_set_new(r.doc, "code", json_string(a2_store_code_name(code)));
    return r;
}

/* Gives the slot back after a call that returned rc; when rc is not 0, *fail
 * first gets the answer to the failed call what. Returns rc. */
static int pool_give_rc(a2__console *con, int slot, int rc, const char *what,
                        a2__con_reply *fail)
{
    if (rc != 0)
        *fail = store_failed(con->stores[slot], what);
    pool_give(con, slot);
    return rc;
}

/* ── arguments ───────────────────────────────────────────────────────── */

/* Reads a JSON object's members as a2__con_arg_fn does query parameters:
 * strings as they are, integers as decimal text. */
typedef struct {
    const json_t *obj;
    char num[32];
} body_args;

static const char *body_arg(void *ctx, const char *key)
{
    body_args *b = ctx;
    const json_t *v = b->obj ? json_object_get(b->obj, key) : NULL;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        return *s ? s : NULL;
    }
    if (json_is_integer(v)) {
        snprintf(b->num, sizeof b->num, "%lld",
                 (long long)json_integer_value(v));
        return b->num;
    }
    return NULL;
}

/* A time: epoch ms or RFC 3339 UTC (2026-11-29T08:22:33.205Z). */
static int parse_time(const char *s, int64_t *out)
{
    if (!s)
        return 0;
    if (a2__num_parse_i64(s, 0, INT64_MAX / 2, out) == 0)
        return 0;
    int64_t ms = a2__con_parse_rfc3339(s);
    if (ms < 0)
        return -1;
    *out = ms;
    return 0;
}

/* The dead letter filter from arg; 0, or -1 with *fail set. */
static int parse_filter(a2__con_arg_fn arg, void *ctx, a2_dead_letter_filter *f,
                        a2__con_reply *fail)
{
    f->consumer = arg(ctx, "consumer");
    f->type = arg(ctx, "type");
    f->error = arg(ctx, "error");
    f->failed_after = f->failed_before = A2_STORE_NONE;
    if (parse_time(arg(ctx, "failed_after"), &f->failed_after) != 0 ||
        parse_time(arg(ctx, "failed_before"), &f->failed_before) != 0) {
        *fail = a2__con_error(400, "failed_after and failed_before are epoch "
                                   "milliseconds or UTC times like "
                                   "2026-11-29T08:22:33Z");
        return -1;
    }
    return 0;
}

static json_t *filter_json(const a2_dead_letter_filter *f)
{
    json_t *o = json_object();
    json_object_set_new(o, "consumer", a2__con_jstr(f->consumer));
    json_object_set_new(o, "type", a2__con_jstr(f->type));
    json_object_set_new(o, "error", a2__con_jstr(f->error));
    json_object_set_new(o, "failed_after", a2__cli_json_i64(f->failed_after));
    json_object_set_new(o, "failed_before", a2__cli_json_i64(f->failed_before));
    return o;
}

/* An integer argument in [min, max] (def when absent); 0 or -1. */
static int int_arg(const a2__con_request *req, const char *key, int64_t min,
                   int64_t max, int64_t def, int64_t *out)
{
    const char *v = req->arg(req->arg_ctx, key);
    if (!v) {
        *out = def;
        return 0;
    }
    return a2__num_parse_i64(v, min, max, out);
}

/* ── GET ─────────────────────────────────────────────────────────────── */

static a2__con_reply get_session_info(a2__console *con)
{
    json_t *o = json_object();
    json_object_set_new(o, "csrf", json_string(con->csrf));
    json_object_set_new(o, "csrf_header", json_string("X-A2-CSRF"));
    json_object_set_new(o, "read_only", json_boolean(con->read_only));
    json_object_set_new(o, "token", json_boolean(con->token != NULL));
    json_object_set_new(o, "audit", a2__con_jstr(con->audit_path));
    json_object_set_new(o, "metrics", a2__con_jstr(con->metrics_url));
    json_object_set_new(o, "version", json_string("a2 " A2_VERSION_LINE));
    json_object_set_new(o, "now", json_integer(a2__real_ms()));
    return ok(o);
}

static json_t *backlog_row(const char *consumer)
{
    json_t *o = json_object();
    json_object_set_new(o, "consumer", a2__con_jstr(consumer));
    json_object_set_new(o, "pending", json_integer(0));
    json_object_set_new(o, "running", json_integer(0));
    json_object_set_new(o, "dead_letters", json_integer(0));
    json_object_set_new(o, "oldest_pending_at", json_null());
    return o;
}

static int cmp_consumer(const void *a, const void *b)
{
    const char *x =
            json_string_value(json_object_get(*(json_t *const *)a, "consumer"));
    const char *y =
            json_string_value(json_object_get(*(json_t *const *)b, "consumer"));
    return strcmp(x ? x : "", y ? y : "");
}

static a2__con_reply get_overview(a2__console *con)
{
    a2__con_reply fail;
    int slot = pool_take(con, &fail);
    if (slot < 0)
        return fail;
    a2_backlog bl;
    int rc = a2_store_backlog(con->stores[slot], NULL, 0, &bl);
    if (pool_give_rc(con, slot, rc, "backlog", &fail) != 0) {
        a2_backlog_free(&bl);
        return fail;
    }
    int64_t now = a2__real_ms();
    json_t *rows = json_object(); /* consumer -> row */
    for (size_t i = 0; i < bl.count; i++) {
        const a2_backlog_row *b = &bl.items[i];
        json_t *o = backlog_row(b->consumer);
        json_object_set_new(o, "pending", json_integer(b->pending));
        json_object_set_new(o, "running", json_integer(b->running));
        json_object_set_new(o, "dead_letters", json_integer(b->dead_letters));
        json_object_set_new(o, "oldest_pending_at",
                            a2__cli_json_i64(b->oldest_pending_at));
        json_object_set_new(o, "oldest_pending_age_ms",
                            b->oldest_pending_at == A2_STORE_NONE
                                    ? json_null()
                                    : json_integer(now - b->oldest_pending_at));
        json_object_set_new(rows, b->consumer, o);
    }
    a2_backlog_free(&bl);

    json_t *doc = json_object();
    json_t *recent = NULL;
    if (con->audit_path) {
        recent = a2__con_audit_recent(con->audit_path, now, RECENT_WINDOW_MS);
        json_t *per = json_object_get(recent, "per_consumer");
        json_int_t covered =
                json_integer_value(json_object_get(recent, "covered_ms"));
        const char *name;
        json_t *count;
        json_object_foreach(per, name, count)
        {
            if (!json_object_get(rows, name))
                json_object_set_new(rows, name, backlog_row(name));
        }
        const char *key;
        json_t *row;
        json_object_foreach(rows, key, row)
        {
            json_int_t n = json_integer_value(json_object_get(per, key));
            double rate =
                    covered > 0 ? (double)n * 60000.0 / (double)covered : 0.0;
            json_object_set_new(row, "completions_per_minute", json_real(rate));
            json_object_set_new(row, "completions", json_integer(n));
        }
    }
    /* Rows in consumer order. */
    size_t n = json_object_size(rows), k = 0;
    json_t **list = calloc(n ? n : 1, sizeof *list);
    json_t *arr = json_array();
    if (list) {
        const char *key;
        json_t *row;
        json_object_foreach(rows, key, row)
        {
            list[k++] = row;
        }
        qsort(list, k, sizeof *list, cmp_consumer);
        for (size_t i = 0; i < k; i++)
            json_array_append(arr, list[i]);
        free(list);
    }
    json_decref(rows);
    json_object_set_new(doc, "consumers", arr);
    if (recent) {
        json_object_del(recent, "per_consumer");
        json_object_set_new(recent, "path", a2__con_jstr(con->audit_path));
        json_object_set_new(doc, "audit", recent);
    } else {
        json_object_set_new(doc, "audit", json_null());
    }
    json_object_set_new(doc, "metrics",
                        con->metrics_url
                                ? a2__con_metrics_scrape(con->metrics_url,
                                                         METRICS_TIMEOUT_MS)
                                : json_null());
    json_object_set_new(doc, "now", json_integer(now));
    return ok(doc);
}

/* The paging key of a page argument: a JSON array [failed_at, session,
 * consumer, cursor_key, epoch]. 0, or -1. */
static int parse_page(const char *text, json_t **holder,
                      a2_dead_letter_key *key)
{
    *holder = NULL;
    if (!text)
        return 1;
    json_t *a = json_loads(text, 0, NULL);
    if (!json_is_array(a) || json_array_size(a) != 5 ||
        !json_is_integer(json_array_get(a, 0)) ||
        !json_is_string(json_array_get(a, 1)) ||
        !json_is_string(json_array_get(a, 2)) ||
        !json_is_string(json_array_get(a, 3)) ||
        !json_is_integer(json_array_get(a, 4))) {
        json_decref(a);
        return -1;
    }
    key->failed_at = json_integer_value(json_array_get(a, 0));
    key->session_id = json_string_value(json_array_get(a, 1));
    key->consumer = json_string_value(json_array_get(a, 2));
    key->cursor_key = json_string_value(json_array_get(a, 3));
    key->epoch = json_integer_value(json_array_get(a, 4));
    *holder = a;
    return 0;
}

static json_t *page_of(const a2_head *h)
{
    json_t *a = json_array();
    json_array_append_new(a, json_integer(h->dispatch.failed_at));
    json_array_append_new(a, a2__con_jstr(h->event.session_id));
    json_array_append_new(a, a2__con_jstr(h->dispatch.consumer));
    json_array_append_new(a, a2__con_jstr(h->dispatch.cursor_key));
    json_array_append_new(a, json_integer(h->dispatch.epoch));
    return a;
}

static a2__con_reply get_dead_letters(a2__console *con,
                                      const a2__con_request *req)
{
    a2__con_reply fail;
    a2_dead_letter_filter f;
    if (parse_filter(req->arg, req->arg_ctx, &f, &fail) != 0)
        return fail;
    int64_t limit;
    if (int_arg(req, "limit", 1, 1000, 100, &limit) != 0)
        return a2__con_error(400, "limit must be 1 to 1000");
    json_t *holder;
    a2_dead_letter_key key;
    int prc = parse_page(req->arg(req->arg_ctx, "page"), &holder, &key);
    if (prc < 0)
        return a2__con_error(400, "page must be the next key a previous "
                                  "answer gave");
    int slot = pool_take(con, &fail);
    if (slot < 0) {
        json_decref(holder);
        return fail;
    }
    a2_heads out;
    int rc = a2_store_find_dead_letters(
            con->stores[slot], &f, prc == 0 ? &key : NULL, (size_t)limit, &out);
    pool_give_rc(con, slot, rc, "dead letters", &fail);
    json_decref(holder);
    if (rc != 0) {
        a2_heads_free(&out);
        return fail;
    }
    json_t *doc = json_object(), *arr = json_array();
    for (size_t i = 0; i < out.count; i++)
        json_array_append_new(arr, head_json(&out.items[i], LIST_PAYLOAD_MAX));
    json_object_set_new(doc, "items", arr);
    json_object_set_new(doc, "next",
                        out.count == (size_t)limit && out.count > 0
                                ? page_of(&out.items[out.count - 1])
                                : json_null());
    json_object_set_new(doc, "filter", filter_json(&f));
    a2_heads_free(&out);
    return ok(doc);
}

static a2__con_reply get_dead_letter_count(a2__console *con,
                                           const a2__con_request *req)
{
    a2__con_reply fail;
    a2_dead_letter_filter f;
    if (parse_filter(req->arg, req->arg_ctx, &f, &fail) != 0)
        return fail;
    int slot = pool_take(con, &fail);
    if (slot < 0)
        return fail;
    int64_t count = 0;
    int rc = a2_store_count_dead_letters(con->stores[slot], &f, &count);
    if (pool_give_rc(con, slot, rc, "dead letter count", &fail) != 0)
        return fail;
    json_t *doc = json_object();
    json_object_set_new(doc, "count", json_integer(count));
    json_object_set_new(doc, "filter", filter_json(&f));
    return ok(doc);
}

/* The session's events (by ro), its cursors and, with dead, its dead
 * letters, on a pooled connection: 0, or -1 with *fail. */
static int read_session(a2__console *con, const char *session,
                        const a2_read_options *ro, a2_events *ev,
                        a2_cursors *cur, a2_heads *dead, a2__con_reply *fail)
{
    int slot = pool_take(con, fail);
    if (slot < 0)
        return -1;
    a2_store *st = con->stores[slot];
    int rc = a2_store_read(st, session, ro, ev);
    if (rc != 0)
        *fail = store_failed(st, "read");
    if (rc == 0 && (rc = a2_store_cursors(st, session, cur)) != 0)
        *fail = store_failed(st, "cursors");
    if (rc == 0 && dead && (rc = a2_store_dead_letters(st, session, dead)) != 0)
        *fail = store_failed(st, "dead letters");
    pool_give(con, slot);
    return rc == 0 ? 0 : -1;
}

static a2__con_reply get_session(a2__console *con, const a2__con_request *req)
{
    const char *session = req->arg(req->arg_ctx, "id");
    if (!session)
        return a2__con_error(400, "id (the session) is required");
    int64_t after, limit;
    if (int_arg(req, "after", 0, INT64_MAX, 0, &after) != 0)
        return a2__con_error(400, "after must be an index >= 0");
    if (int_arg(req, "limit", 1, 1000, 100, &limit) != 0)
        return a2__con_error(400, "limit must be 1 to 1000");
    a2__con_reply fail;
    a2_events ev = {0};
    a2_cursors cur = {0};
    a2_heads dead = {0};
    a2_read_options ro = {.after = after, .limit = (size_t)limit};
    int rc = read_session(con, session, &ro, &ev, &cur, &dead, &fail);
    json_t *doc = NULL;
    if (rc == 0) {
        doc = json_object();
        json_object_set_new(doc, "session", a2__con_jstr(session));
        json_t *a = json_array();
        for (size_t i = 0; i < ev.count; i++)
            json_array_append_new(a,
                                  event_json(&ev.items[i], LIST_PAYLOAD_MAX));
        json_object_set_new(doc, "events", a);
        json_object_set_new(doc, "next_after",
                            ev.count == (size_t)limit && ev.count > 0
                                    ? json_integer(ev.items[ev.count - 1].index)
                                    : json_null());
        a = json_array();
        for (size_t i = 0; i < cur.count; i++)
            json_array_append_new(a, cursor_json(&cur.items[i]));
        json_object_set_new(doc, "cursors", a);
        a = json_array();
        for (size_t i = 0; i < dead.count; i++)
            json_array_append_new(a,
                                  head_json(&dead.items[i], LIST_PAYLOAD_MAX));
        json_object_set_new(doc, "dead_letters", a);
        json_object_set_new(doc, "now", json_integer(a2__real_ms()));
    }
    a2_events_free(&ev);
    a2_cursors_free(&cur);
    a2_heads_free(&dead);
    return rc == 0 ? ok(doc) : fail;
}

static a2__con_reply get_event(a2__console *con, const a2__con_request *req)
{
    const char *session = req->arg(req->arg_ctx, "session");
    int64_t index;
    if (!session)
        return a2__con_error(400, "session is required");
    if (int_arg(req, "index", 1, INT64_MAX, 0, &index) != 0 || index == 0)
        return a2__con_error(400, "index must be an event index >= 1");
    a2__con_reply fail;
    a2_events ev = {0};
    a2_cursors cur = {0};
    a2_read_options ro = {.after = index - 1, .limit = 1};
    if (read_session(con, session, &ro, &ev, &cur, NULL, &fail) != 0) {
        a2_events_free(&ev);
        a2_cursors_free(&cur);
        return fail;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "session", a2__con_jstr(session));
    json_object_set_new(doc, "index", json_integer(index));
    if (ev.count == 1 && ev.items[0].index == index)
        json_object_set_new(doc, "event",
                            event_json(&ev.items[0], EVENT_PAYLOAD_MAX));
    else
        json_object_set_new(doc, "event", json_null());
    json_t *a = json_array();
    for (size_t i = 0; i < cur.count; i++)
        if (cur.items[i].head == index)
            json_array_append_new(a, cursor_json(&cur.items[i]));
    json_object_set_new(doc, "cursors", a);
    json_object_set_new(doc, "history",
                        con->audit_path ? a2__con_audit_history(con->audit_path,
                                                                session, index)
                                        : json_null());
    json_object_set_new(doc, "now", json_integer(a2__real_ms()));
    a2_events_free(&ev);
    a2_cursors_free(&cur);
    return ok(doc);
}

a2__con_reply a2__con_api_get(a2__console *con, const char *path,
                              const a2__con_request *req)
{
    if (strcmp(path, "/api/session-info") == 0)
        return get_session_info(con);
    if (strcmp(path, "/api/overview") == 0)
        return get_overview(con);
    if (strcmp(path, "/api/dead-letters") == 0)
        return get_dead_letters(con, req);
    if (strcmp(path, "/api/dead-letters/count") == 0)
        return get_dead_letter_count(con, req);
    if (strcmp(path, "/api/session") == 0)
        return get_session(con, req);
    if (strcmp(path, "/api/event") == 0)
        return get_event(con, req);
    return a2__con_error(404, "no such API: %s", path);
}

/* ── POST ────────────────────────────────────────────────────────────── */

static int parse_action(const char *s, int *action)
{
    if (s && strcmp(s, "retry") == 0)
        *action = A2_REDRIVE_RETRY;
    else if (s && strcmp(s, "skip") == 0)
        *action = A2_REDRIVE_SKIP;
    else
        return -1;
    return 0;
}

/* The head an action names. */
typedef struct {
    const char *session, *consumer;
    int64_t index;
} head_ref;

/* session, consumer and index of a body; 0, or -1 with *fail set. */
static int head_args(body_args *b, head_ref *h, a2__con_reply *fail)
{
    h->session = body_arg(b, "session");
    h->consumer = body_arg(b, "consumer");
    const char *idx = body_arg(b, "index");
    if (!h->session || !h->consumer || !idx) {
        *fail = a2__con_error(400, "session, consumer and index are required");
        return -1;
    }
    if (a2__num_parse_i64(idx, 1, INT64_MAX, &h->index) != 0) {
        *fail = a2__con_error(400, "index must be an event index >= 1");
        return -1;
    }
    return 0;
}

/* The head and whether its cursor has more pending, added to an answer. */
static void set_head(json_t *doc, const head_ref *h, bool has_pending)
{
    json_object_set_new(doc, "session", a2__con_jstr(h->session));
    json_object_set_new(doc, "consumer", a2__con_jstr(h->consumer));
    json_object_set_new(doc, "index", json_integer(h->index));
    json_object_set_new(doc, "has_pending", json_boolean(has_pending));
}

static a2__con_reply post_redrive(a2__console *con, const a2__con_request *req)
{
    body_args b = {.obj = req->body};
    head_ref h;
    int action;
    a2__con_reply fail;
    if (head_args(&b, &h, &fail) != 0)
        return fail;
    if (parse_action(body_arg(&b, "action"), &action) != 0)
        return a2__con_error(400, "action must be retry or skip");
    int slot = pool_take(con, &fail);
    if (slot < 0)
        return fail;
    a2_redrive_result out = {0};
    int rc = a2_store_redrive(con->stores[slot], h.session, h.consumer, h.index,
                              action, NULL, 0, &out);
    if (pool_give_rc(con, slot, rc, "redrive", &fail) != 0)
        return fail;
    if (!out.redriven) {
        a2__con_reply r =
                a2__con_error(409,
                              "no dead letter of %s at index %lld "
                              "in %s",
                              h.consumer, (long long)h.index, h.session);
        json_object_set_new(r.doc, "redriven", json_false());
        return r;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "redriven", json_true());
    json_object_set_new(
            doc, "action",
            json_string(action == A2_REDRIVE_RETRY ? "retry" : "skip"));
    set_head(doc, &h, out.has_pending);
    return ok(doc);
}

static a2__con_reply post_redrive_matching(a2__console *con,
                                           const a2__con_request *req)
{
    body_args b = {.obj = req->body};
    int action;
    if (parse_action(body_arg(&b, "action"), &action) != 0)
        return a2__con_error(400, "action must be retry or skip");
    const json_t *fobj = json_object_get(req->body, "filter");
    if (fobj && !json_is_object(fobj))
        return a2__con_error(400, "filter must be an object");
    const char *exp = body_arg(&b, "expected");
    int64_t expected;
    if (!exp || a2__num_parse_i64(exp, 1, BULK_MAX, &expected) != 0)
        return a2__con_error(400,
                             "expected (the count the operator confirmed) "
                             "must be 1 to %d",
                             BULK_MAX);
    body_args fb = {.obj = fobj};
    a2_dead_letter_filter f;
    a2__con_reply fail;
    if (parse_filter(body_arg, &fb, &f, &fail) != 0)
        return fail;
    int slot = pool_take(con, &fail);
    if (slot < 0)
        return fail;
    int64_t total = 0;
    bool more = false;
    while (total < expected) {
        int64_t n = expected - total;
        if (n > 10000)
            n = 10000;
        a2_bulk_result out = {0};
        if (a2_store_redrive_matching(con->stores[slot], &f, action, (size_t)n,
                                      &out) != 0) {
            fail = store_failed(con->stores[slot], "bulk redrive");
            pool_give(con, slot);
            json_object_set_new(fail.doc, "count", json_integer(total));
            return fail;
        }
        total += out.count;
        more = out.more;
        if (!out.more || out.count == 0)
            break;
    }
    pool_give(con, slot);
    json_t *doc = json_object();
    json_object_set_new(
            doc, "action",
            json_string(action == A2_REDRIVE_RETRY ? "retry" : "skip"));
    json_object_set_new(doc, "count", json_integer(total));
    json_object_set_new(doc, "more", json_boolean(more));
    json_object_set_new(doc, "filter", filter_json(&f));
    return ok(doc);
}

static a2__con_reply post_cancel(a2__console *con, const a2__con_request *req)
{
    body_args b = {.obj = req->body};
    head_ref h;
    a2__con_reply fail;
    if (head_args(&b, &h, &fail) != 0)
        return fail;
    const char *reason = body_arg(&b, "reason");
    int slot = pool_take(con, &fail);
    if (slot < 0)
        return fail;
    a2_cancel_result out = {0};
    int rc = a2_store_cancel(con->stores[slot], h.session, h.consumer, h.index,
                             reason, NULL, 0, &out);
    if (pool_give_rc(con, slot, rc, "cancel", &fail) != 0) {
        a2_cancel_result_free(&out);
        return fail;
    }
    a2__con_reply r;
    if (out.outcome == A2_CANCEL_CANCELLED) {
        r = ok(json_object());
        json_object_set_new(r.doc, "outcome", json_string("cancelled"));
    } else if (out.outcome == A2_CANCEL_RUNNING) {
        char until[40];
        a2__cli_fmt_ms(out.expires_at, until, sizeof until);
        r = a2__con_error(409,
                          "%s's head #%lld in %s is running (held by %s until "
                          "%s): a running head is not cancelled",
                          h.consumer, (long long)h.index, h.session,
                          out.holder ? out.holder : "?", until);
        json_object_set_new(r.doc, "outcome", json_string("running"));
        json_object_set_new(r.doc, "holder", a2__con_jstr(out.holder));
        json_object_set_new(r.doc, "expires_at",
                            a2__cli_json_i64(out.expires_at));
    } else {
        r = a2__con_error(409,
                          "no pending head of %s at index %lld in %s (done, "
                          "dead-lettered, cleared or never targeted)",
                          h.consumer, (long long)h.index, h.session);
        json_object_set_new(r.doc, "outcome", json_string("not_pending"));
    }
    set_head(r.doc, &h, out.has_pending);
    a2_cancel_result_free(&out);
    return r;
}

a2__con_reply a2__con_api_post(a2__console *con, const char *path,
                               const a2__con_request *req)
{
    if (strcmp(path, "/api/redrive") == 0)
        return post_redrive(con, req);
    if (strcmp(path, "/api/redrive-matching") == 0)
        return post_redrive_matching(con, req);
    if (strcmp(path, "/api/cancel") == 0)
        return post_cancel(con, req);
    return a2__con_error(404, "no such action: %s", path);
}
