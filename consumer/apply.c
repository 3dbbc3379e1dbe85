/*
 * Transaction applier: buffered changes → audit lines, wake-ups, timers.
 */
#include "apply.h"

#include <inttypes.h>
#include <jansson.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "a2/store.h"

typedef enum {
    ACT_WAKE,
    ACT_TIMER_SET,
    ACT_TIMER_CANCEL,
    ACT_LOG,
    ACT_CLEARED,
    ACT_PRESENCE,
    ACT_TRUNCATE,
} act_kind;

typedef struct {
    act_kind kind;
    char *s1, *s2, *s3,
            *s4; /* session/consumer/key, or ns/participant/field/value */
    int64_t n1, n2, n3; /* head/idx, epoch, deadline; presence: expires_at,
                           PRESENCE_KEPT when the value did not change */
} action;

/* An ACT_PRESENCE update that left a TOASTed value as it was: no patch, but
 * its new expiry counts. */
#define PRESENCE_KEPT 1

struct a2__apply {
    a2__audit *audit;
    a2__timers *timers;
    a2__sink sink;

    uint64_t done;        /* transactions ending at or before: applied */
    uint64_t partial_lsn; /* transaction whose first lines are written */
    size_t partial_lines;
    uint64_t applied;

    /* The open transaction. */
    int in_txn;
    uint64_t end; /* its commit end LSN (B's nextlsn) */
    char xid[32];
    uint64_t xid_n; /* the transaction's id, 0 when unknown */
    char at[40];
    char head[128]; /* {"lsn":"X/Y","xid":N,"at":"..." of the transaction */
    size_t head_len;
    int skip_all;
    size_t skip_lines;    /* lines already in the file to skip */
    size_t written_early; /* lines of this transaction already written */
    char *buf;
    size_t len, cap;
    size_t buf_lines;
    action *acts;
    size_t nacts, capacts;
    int overflow;

    int64_t commit_us; /* the open transaction's commit time, 0: unknown */
    a2__backlog *backlog;

    char tick_secret[A2C_TICK_SECRET_LEN + 1]; /* "": none */

    /* session -> clear marker (tsearch tree of clear_entry) */
    void *clears;
    size_t nclears;

    /* Live presence fields: ns -> participant -> field -> expires_at. */
    json_t *expiries;
    size_t nexpiries;
    int64_t expiry_due;  /* earliest of them, or earlier; INT64_MAX: none */
    int64_t expire_tick; /* > 0: the open transaction carries an expiry tick
                            of that time */

    a2__apply_stats stats;
};

typedef struct {
    int64_t clear_index;
    char session[]; /* NUL-terminated */
} clear_entry;

static int clear_cmp(const void *a, const void *b)
{
    return strcmp(((const clear_entry *)a)->session,
                  ((const clear_entry *)b)->session);
}

static void forget_clears(a2__apply *ap)
{
    tdestroy(ap->clears, free);
    ap->clears = NULL;
    ap->nclears = 0;
}

/* Remembers session's clear marker (markers only grow). */
static void remember_clear(a2__apply *ap, const char *session, size_t len,
                           int64_t clear_index)
{
    clear_entry *e = malloc(sizeof *e + len + 1);
    if (!e)
        return;
    memcpy(e->session, session, len);
    e->session[len] = '\0';
    e->clear_index = clear_index;
    clear_entry **found = tfind(e, &ap->clears, clear_cmp);
    if (found) {
        if ((*found)->clear_index < clear_index)
            (*found)->clear_index = clear_index;
        free(e);
        return;
    }
    if (ap->nclears >= A2C_APPLY_MAX_CLEARS)
        forget_clears(ap);
    if (!tsearch(e, &ap->clears, clear_cmp)) {
        free(e);
        return;
    }
    ap->nclears++;
}

/* The session's clear marker, as the stream showed it (the store writes it
 * again ahead of the deletes it makes: a2__announce_clear); -1 when
 * unknown. */
static int64_t clear_index_of(a2__apply *ap, a2_change_text session)
{
    if (!session.ptr || !ap->clears)
        return -1;
    /* the key on the stack when it fits (the common case: per change) */
    union {
        clear_entry e;
        char bytes[sizeof(clear_entry) + 256];
    } local;
    clear_entry *key = &local.e;
    if (session.len >= 256 && !(key = malloc(sizeof *key + session.len + 1)))
        return -1;
    memcpy(key->session, session.ptr, session.len);
    key->session[session.len] = '\0';
    clear_entry **found = tfind(key, &ap->clears, clear_cmp);
    int64_t idx = found ? (*found)->clear_index : -1;
    if (key != &local.e)
        free(key);
    return idx;
}

void a2__apply_remember_clear(a2__apply *ap, const char *session,
                              int64_t clear_index)
{
    if (ap && session)
        remember_clear(ap, session, strlen(session), clear_index);
}

void a2__apply_set_backlog(a2__apply *ap, a2__backlog *bl)
{
    ap->backlog = bl;
}

/* The clear marker that classifies row r for the backlog (0: none known). */
static int64_t backlog_clear(a2__apply *ap, const a2_cursor_row *r)
{
    if (!r || r->head.null)
        return 0; /* counts nowhere whatever the marker */
    int64_t idx = clear_index_of(ap, r->session_id);
    return idx < 0 ? 0 : idx;
}

static char *tdup(a2_change_text t)
{
    if (!t.ptr)
        return NULL;
    char *s = malloc(t.len + 1);
    if (s) {
        memcpy(s, t.ptr, t.len);
        s[t.len] = '\0';
    }
    return s;
}

static int teq(a2_change_text t, const char *s)
{
    return t.ptr && strlen(s) == t.len && memcmp(t.ptr, s, t.len) == 0;
}

char *a2__format_time_ms(int64_t us, char *buf, size_t len)
{
    /* The date and time of the last second formatted: transactions come many
     * to a second, and gmtime_r and strftime cost more than the rest. */
    static __thread int64_t cached_secs = INT64_MIN;
    static __thread char cached[32];
    static __thread size_t cached_len;
    int64_t secs = us / 1000000, ms = (us % 1000000) / 1000;
    if (ms < 0) {
        ms += 1000;
        secs--;
    }
    if (secs != cached_secs) {
        time_t t = (time_t)secs;
        struct tm tm;
        gmtime_r(&t, &tm);
        cached_len = strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
        cached_secs = secs;
    }
    char t[48];
    memcpy(t, cached, cached_len);
    size_t n = cached_len;
    t[n++] = '.';
    n += a2__put_uint(t + n, (uint64_t)ms, 10, 3);
    t[n++] = 'Z';
    return a2__put_text(buf, len, t, n);
}

a2__apply *a2__apply_new(a2__audit *audit, a2__timers *timers,
                         const a2__sink *sink, const a2__audit_resume *resume)
{
    a2__apply *ap = calloc(1, sizeof *ap);
    if (!ap)
        return NULL;
    ap->audit = audit;
    ap->timers = timers;
    if (sink)
        ap->sink = *sink;
    if (resume) {
        ap->done = resume->done;
        ap->partial_lsn = resume->partial_lsn;
        ap->partial_lines = resume->partial_lines;
    }
    ap->applied = ap->done;
    ap->expiries = json_object();
    ap->expiry_due = INT64_MAX;
    if (!ap->expiries) {
        free(ap);
        return NULL;
    }
    return ap;
}

static void free_actions(a2__apply *ap)
{
    for (size_t i = 0; i < ap->nacts; i++) {
        free(ap->acts[i].s1);
        free(ap->acts[i].s2);
        free(ap->acts[i].s3);
        free(ap->acts[i].s4);
    }
    ap->nacts = 0;
}

void a2__apply_free(a2__apply *ap)
{
    if (!ap)
        return;
    free_actions(ap);
    free(ap->acts);
    free(ap->buf);
    forget_clears(ap);
    json_decref(ap->expiries);
    free(ap);
}

int a2__apply_track_presence(a2__apply *ap, const char *ns,
                             const char *participant, const char *field,
                             int64_t expires_at)
{
    json_t *byp = json_object_get(ap->expiries, ns);
    json_t *f = byp ? json_object_get(byp, participant) : NULL;
    if (expires_at <= 0) {
        if (!f || !json_object_get(f, field))
            return 0;
        json_object_del(f, field);
        ap->nexpiries--;
        if (json_object_size(f) == 0)
            json_object_del(byp, participant);
        if (json_object_size(byp) == 0)
            json_object_del(ap->expiries, ns);
        return 0;
    }
    int fresh = !f || !json_object_get(f, field);
    if (fresh && ap->nexpiries >= A2C_APPLY_MAX_PRESENCE)
        return -1;
    if (!byp) {
        byp = json_object();
        if (json_object_set_new(ap->expiries, ns, byp) != 0)
            return -1;
    }
    if (!f) {
        f = json_object();
        if (json_object_set_new(byp, participant, f) != 0)
            return -1;
    }
    if (json_object_set_new(f, field, json_integer(expires_at)) != 0)
        return -1;
    if (fresh)
        ap->nexpiries++;
    if (expires_at < ap->expiry_due)
        ap->expiry_due = expires_at;
    return 0;
}

void a2__apply_forget_presence(a2__apply *ap)
{
    json_object_clear(ap->expiries);
    ap->nexpiries = 0;
    ap->expiry_due = INT64_MAX;
}

int64_t a2__apply_expiry_due(const a2__apply *ap)
{
    return ap->expiry_due;
}

/* The expiry tick of time now_ms: a `presence` patch (nil values) for each
 * participant with fields expired by then, at the tick's commit end; the
 * fields are forgotten. */
static void push_expired(a2__apply *ap, int64_t now_ms)
{
    int64_t due = INT64_MAX;
    const char *ns, *pa, *field;
    json_t *byp, *f, *e;
    void *t1, *t2, *t3;
    json_object_foreach_safe(ap->expiries, t1, ns, byp)
    {
        json_object_foreach_safe(byp, t2, pa, f)
        {
            json_t *gone = NULL;
            json_object_foreach_safe(f, t3, field, e)
            {
                int64_t at = json_integer_value(e);
                if (at <= now_ms && !gone)
                    gone = json_object();
                if (at > now_ms || !gone ||
                    json_object_set_new(gone, field, json_null()) != 0) {
                    if (at < due) /* kept: its time is still to come, or
                                     there was no memory to say it */
                        due = at;
                    continue;
                }
                json_object_del(f, field);
                ap->nexpiries--;
            }
            char *text = gone ? json_dumps(gone, JSON_COMPACT) : NULL;
            if (text && ap->sink.presence)
                ap->sink.presence(ap->sink.ctx, ns, pa, text, ap->end);
            if (text) {
                ap->stats.presence++;
                ap->stats.presence_expired += json_object_size(gone);
            }
            free(text);
            json_decref(gone);
            if (json_object_size(f) == 0)
                json_object_del(byp, pa);
        }
        if (json_object_size(byp) == 0)
            json_object_del(ap->expiries, ns);
    }
    ap->expiry_due = due;
}

/* Adds an action; on overflow or out of memory, drops every action and asks
 * for a resync at commit. Takes ownership of the strings. */
static void add_action(a2__apply *ap, act_kind kind, char *s1, char *s2,
                       char *s3, char *s4, int64_t n1, int64_t n2, int64_t n3)
{
    if (ap->overflow)
        goto drop;
    if (ap->nacts >= A2C_APPLY_MAX_ACTIONS)
        goto overflow;
    if (ap->nacts == ap->capacts) {
        size_t ncap = ap->capacts ? ap->capacts * 2 : 16;
        action *n = realloc(ap->acts, ncap * sizeof *n);
        if (!n)
            goto overflow;
        ap->acts = n;
        ap->capacts = ncap;
    }
    ap->acts[ap->nacts++] = (action){kind, s1, s2, s3, s4, n1, n2, n3};
    return;
overflow:
    free_actions(ap);
    ap->overflow = 1;
drop:
    free(s1);
    free(s2);
    free(s3);
    free(s4);
}

static int buf_append(a2__apply *ap, const char *s, size_t n)
{
    if (ap->len + n + 1 > ap->cap) {
        size_t ncap = ap->cap ? ap->cap : 4096;
        while (ap->len + n + 1 > ncap)
            ncap *= 2;
        char *nb = realloc(ap->buf, ncap);
        if (!nb)
            return -1;
        ap->buf = nb;
        ap->cap = ncap;
    }
    memcpy(ap->buf + ap->len, s, n);
    ap->len += n;
    return 0;
}

/* Appends one JSON line (takes obj). */
static int append_line(a2__apply *ap, json_t *obj, char *err, size_t errlen)
{
    char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (!text || buf_append(ap, text, strlen(text)) != 0 ||
        buf_append(ap, "\n", 1) != 0) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    free(text);
    ap->buf_lines++;
    return 0;
}

static int flush_buffer(a2__apply *ap, char *err, size_t errlen)
{
    if (ap->len == 0)
        return 0;
    if (ap->audit && a2__audit_write(ap->audit, ap->buf, ap->len, ap->buf_lines,
                                     err, errlen) != 0)
        return -1;
    ap->stats.audit_lines += ap->buf_lines;
    ap->written_early += ap->buf_lines;
    ap->len = 0;
    ap->buf_lines = 0;
    return 0;
}

static void lsn_text(uint64_t lsn, char *buf, size_t len)
{
    a2__lsn_format(lsn, buf, len);
}

static json_t *line_head(a2__apply *ap, const char *op, const char *transition)
{
    char l[32];
    lsn_text(ap->end, l, sizeof l);
    json_t *o = json_object();
    json_object_set_new(o, "lsn", json_string(l));
    json_object_set_new(o, "xid",
                        ap->xid[0] ? json_integer(strtoll(ap->xid, NULL, 10))
                                   : json_null());
    json_object_set_new(o, "at", ap->at[0] ? json_string(ap->at) : json_null());
    json_object_set_new(o, "op", json_string(op));
    json_object_set_new(o, "transition", json_string(transition));
    return o;
}

/* ---- audit lines written directly (the per-change hot path) ---- */

static int buf_lit(a2__apply *ap, const char *s)
{
    return buf_append(ap, s, strlen(s));
}

/* A JSON string: the decoder hands out valid UTF-8 without NUL, so only
 * quotes, backslashes and control characters need escapes. */
static int buf_jstr(a2__apply *ap, const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_append(ap, "\"", 1) != 0)
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        if (buf_append(ap, p + run, i - run) != 0)
            return -1;
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (ch) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            elen = 6;
        }
        if (buf_append(ap, esc, elen) != 0)
            return -1;
        run = i + 1;
    }
    if (buf_append(ap, p + run, n - run) != 0)
        return -1;
    return buf_append(ap, "\"", 1);
}

static int buf_text(a2__apply *ap, a2_change_text t)
{
    return t.ptr ? buf_jstr(ap, t.ptr, t.len) : buf_lit(ap, "null");
}

static int buf_i64(a2__apply *ap, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof tmp, *q = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--q = '-';
    return buf_append(ap, q, (size_t)(e - q));
}

static int buf_nint(a2__apply *ap, a2_change_int v)
{
    return v.null ? buf_lit(ap, "null") : buf_i64(ap, v.value);
}

static int buf_row(a2__apply *ap, const a2_cursor_row *r)
{
    if (!r)
        return buf_lit(ap, "null");
    int rc = 0;
    rc |= buf_lit(ap, "{\"head\":");
    rc |= buf_nint(ap, r->head);
    rc |= buf_lit(ap, ",\"position\":");
    rc |= buf_i64(ap, r->position);
    rc |= buf_lit(ap, ",\"attempt\":");
    rc |= buf_i64(ap, r->attempt_count);
    rc |= buf_lit(ap, ",\"holder\":");
    rc |= buf_text(ap, r->claim_holder);
    rc |= buf_lit(ap, ",\"expires_at\":");
    rc |= buf_nint(ap, r->claim_expires_at);
    rc |= buf_lit(ap, ",\"failures\":");
    rc |= buf_i64(ap, r->failure_count);
    rc |= buf_lit(ap, ",\"failed_at\":");
    rc |= buf_nint(ap, r->failed_at);
    rc |= buf_lit(ap, ",\"error\":");
    rc |= buf_text(ap, r->last_error);
    rc |= buf_lit(ap, "}");
    return rc ? -1 : 0;
}

static int audit_cursor(a2__apply *ap, const a2_change *c, char *err,
                        size_t errlen)
{
    if (ap->skip_all)
        return 0;
    if (ap->skip_lines > 0) {
        ap->skip_lines--;
        return 0;
    }
    const a2_cursor_row *before = c->old_row ? &c->old_row->cursor : NULL;
    const a2_cursor_row *after = c->new_row ? &c->new_row->cursor : NULL;
    const a2_cursor_row *key = after ? after : before;
    const char *op = c->action == A2_ACTION_INSERT   ? "insert"
                     : c->action == A2_ACTION_UPDATE ? "update"
                                                     : "delete";
    size_t mark = ap->len;
    int rc = 0;
    /* {"lsn":..,"xid":..,"at":.. is the same for the whole transaction */
    rc |= buf_append(ap, ap->head, ap->head_len);
    rc |= buf_lit(ap, ",\"op\":\"");
    rc |= buf_lit(ap, op);
    rc |= buf_lit(ap, "\",\"transition\":\"");
    a2_transition tr = a2_change_transition(c);
    /* A deleted run with a head: retired when the clear marker passed it. */
    if (tr == A2_TRANSITION_DELETED && before && !before->head.null) {
        int64_t clear_index = clear_index_of(ap, before->session_id);
        if (clear_index >= 0)
            tr = a2_transition_classify_cleared(before, NULL, clear_index);
    }
    rc |= buf_lit(ap, a2_transition_name(tr));
    rc |= buf_lit(ap, "\",\"session\":");
    rc |= key ? buf_text(ap, key->session_id) : buf_lit(ap, "null");
    rc |= buf_lit(ap, ",\"consumer\":");
    rc |= key ? buf_text(ap, key->consumer) : buf_lit(ap, "null");
    rc |= buf_lit(ap, ",\"cursor\":");
    rc |= key ? buf_text(ap, key->cursor_key) : buf_lit(ap, "null");
    rc |= buf_lit(ap, ",\"epoch\":");
    rc |= key ? buf_i64(ap, key->epoch) : buf_lit(ap, "null");
    rc |= buf_lit(ap, ",\"kind\":");
    rc |= key ? buf_text(ap, key->kind) : buf_lit(ap, "null");
    rc |= buf_lit(ap, ",\"before\":");
    rc |= buf_row(ap, before);
    rc |= buf_lit(ap, ",\"after\":");
    rc |= buf_row(ap, after);
    rc |= buf_lit(ap, "}\n");
    if (rc) {
        ap->len = mark;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ap->buf_lines++;
    if (ap->len >= A2C_APPLY_MAX_AUDIT_BUFFER)
        return flush_buffer(ap, err, errlen);
    return 0;
}

/* Wake-up and timer actions of one a2_cursors change (DESIGN's table). */
static void cursor_actions(a2__apply *ap, const a2_change *c)
{
    const a2_cursor_row *o = c->old_row ? &c->old_row->cursor : NULL;
    const a2_cursor_row *n = c->new_row ? &c->new_row->cursor : NULL;
    if (c->action == A2_ACTION_DELETE || !n) {
        if (o && !ap->overflow)
            add_action(ap, ACT_TIMER_CANCEL, tdup(o->session_id),
                       tdup(o->consumer), tdup(o->cursor_key), NULL, 0,
                       o->epoch, 0);
        return;
    }
    if (ap->overflow)
        return; /* the commit resyncs instead: copy nothing */
    int live = !n->head.null && n->failed_at.null;
    int wake = 0;
    if (c->action == A2_ACTION_INSERT || !o) {
        wake = live;
    } else {
        if (live && (o->head.null || o->head.value != n->head.value))
            wake = 1; /* head moved to a new head */
        if (live && !o->failed_at.null)
            wake = 1; /* dead letter retried */
    }
    /* A head held until a time (a delayed event) is woken by its timer. */
    if (!n->claim_holder.ptr && !n->claim_expires_at.null)
        wake = 0;
    if (wake)
        add_action(ap, ACT_WAKE, tdup(n->session_id), tdup(n->consumer),
                   tdup(n->cursor_key), NULL, n->head.value, n->epoch, 0);
    if (live && !n->claim_expires_at.null)
        add_action(ap, ACT_TIMER_SET, tdup(n->session_id), tdup(n->consumer),
                   tdup(n->cursor_key), NULL, n->head.value, n->epoch,
                   n->claim_expires_at.value);
    else
        add_action(ap, ACT_TIMER_CANCEL, tdup(n->session_id), tdup(n->consumer),
                   tdup(n->cursor_key), NULL, 0, -1, 0);
    /* A key change (epoch) leaves the old run's timer behind: cancel it. */
    if (o && o->epoch != n->epoch)
        add_action(ap, ACT_TIMER_CANCEL, tdup(o->session_id), tdup(o->consumer),
                   tdup(o->cursor_key), NULL, 0, o->epoch, 0);
}

static void begin(a2__apply *ap, const a2_change *c)
{
    ap->in_txn = 1;
    ap->end = c->has_nextlsn ? c->nextlsn : 0;
    ap->xid[0] = '\0';
    ap->xid_n = !c->xid.null && c->xid.value > 0 ? (uint64_t)c->xid.value : 0;
    if (!c->xid.null) {
        size_t k = 0;
        if (c->xid.value < 0)
            ap->xid[k++] = '-';
        k += a2__put_uint(ap->xid + k,
                          c->xid.value < 0 ? 0 - (uint64_t)c->xid.value
                                           : (uint64_t)c->xid.value,
                          10, 1);
        ap->xid[k] = '\0';
    }
    ap->at[0] = '\0';
    ap->commit_us = c->has_time ? c->time_us : 0;
    if (c->has_time)
        a2__format_time_ms(c->time_us, ap->at, sizeof ap->at);
    a2__backlog_abort(ap->backlog);
    char lsn[32];
    a2__lsn_format(ap->end, lsn, sizeof lsn);
    /* {"lsn":"X/Y","xid":N,"at":"T" (or null), built without printf: it is
     * made for every transaction. */
    const char *parts[] = {"{\"lsn\":\"",
                           lsn,
                           "\",\"xid\":",
                           ap->xid[0] ? ap->xid : "null",
                           ",\"at\":",
                           ap->at[0] ? "\"" : "",
                           ap->at[0] ? ap->at : "null",
                           ap->at[0] ? "\"" : ""};
    size_t hn = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        size_t k = strlen(parts[i]);
        memcpy(ap->head + hn, parts[i], k); /* 23 + 17 + 21 + 41 < 128 */
        hn += k;
    }
    ap->head[hn] = '\0';
    ap->head_len = hn;
    uint64_t done = ap->done > ap->applied ? ap->done : ap->applied;
    ap->skip_all = ap->end != 0 && ap->end <= done;
    ap->skip_lines = ap->end == ap->partial_lsn ? ap->partial_lines : 0;
    ap->written_early = 0;
    ap->len = 0;
    ap->buf_lines = 0;
    free_actions(ap);
    ap->overflow = 0;
}

void a2__apply_abort_txn(a2__apply *ap)
{
    if (!ap->in_txn)
        return;
    if (ap->written_early > 0) {
        size_t before = ap->end == ap->partial_lsn ? ap->partial_lines : 0;
        ap->partial_lsn = ap->end;
        ap->partial_lines = before + ap->written_early;
    }
    ap->in_txn = 0;
    ap->len = 0;
    ap->buf_lines = 0;
    free_actions(ap);
    ap->overflow = 0;
    ap->expire_tick = 0;
    a2__backlog_abort(ap->backlog);
}

/* Sends the presence patches of the transaction, one per (ns, participant). */
static void push_presence(a2__apply *ap)
{
    for (size_t i = 0; i < ap->nacts; i++) {
        action *a = &ap->acts[i];
        if (a->kind != ACT_PRESENCE || !a->s1 || a->n2 == PRESENCE_KEPT)
            continue;
        json_t *fields = json_object();
        for (size_t j = i; j < ap->nacts; j++) {
            action *b = &ap->acts[j];
            if (b->kind != ACT_PRESENCE || !b->s1 || b->n2 == PRESENCE_KEPT ||
                strcmp(a->s1, b->s1) != 0 || strcmp(a->s2, b->s2) != 0)
                continue;
            json_t *v = NULL;
            if (b->s4)
                v = json_loads(b->s4, JSON_DECODE_ANY, NULL);
            json_object_set_new(fields, b->s3, v ? v : json_null());
            if (j != i) {
                free(b->s1);
                b->s1 = NULL;
            }
        }
        char *text = json_dumps(fields, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(fields);
        if (text && ap->sink.presence)
            ap->sink.presence(ap->sink.ctx, a->s1, a->s2, text, ap->end);
        free(text);
        ap->stats.presence++;
    }
}

static int commit(a2__apply *ap, const a2_change *c, uint64_t data_start,
                  char *err, size_t errlen)
{
    uint64_t end = ap->end ? ap->end : data_start;
    if (c->has_nextlsn && c->nextlsn)
        end = c->nextlsn;
    ap->end = end;
    ap->in_txn = 0;
    if (ap->skip_all) {
        ap->stats.skipped++;
        if (ap->expire_tick > 0)
            ap->stats.expire_ticks++;
        ap->expire_tick = 0;
        free_actions(ap);
        a2__backlog_abort(ap->backlog);
        if (end > ap->applied)
            ap->applied = end;
        return 0;
    }
    if (flush_buffer(ap, err, errlen) != 0)
        return -1;
    if (ap->audit)
        a2__audit_mark(ap->audit, end);
    if (end >= ap->partial_lsn) {
        ap->partial_lsn = 0;
        ap->partial_lines = 0;
    }
    if (ap->overflow) {
        ap->stats.overflows++;
        if (ap->sink.resync)
            ap->sink.resync(ap->sink.ctx);
    }
    /* cleared: once per (session, index) per transaction */
    for (size_t i = 0; i < ap->nacts; i++) {
        action *a = &ap->acts[i];
        switch (a->kind) {
        case ACT_WAKE:
            if (ap->sink.wake)
                ap->sink.wake(ap->sink.ctx, a->s2, a->s1, a->s3, a->n1, end,
                              ap->xid_n, ap->commit_us);
            ap->stats.wakes++;
            break;
        case ACT_TIMER_SET:
            if (a2__timers_set(ap->timers, a->s1, a->s2, a->s3, a->n2, a->n1,
                               a->n3) != 0) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            break;
        case ACT_TIMER_CANCEL:
            a2__timers_cancel(ap->timers, a->s1, a->s2, a->s3, a->n2);
            break;
        case ACT_LOG:
            if (ap->sink.log)
                ap->sink.log(ap->sink.ctx, a->s1, a->n1, a->s2, end, ap->xid_n);
            ap->stats.logs++;
            break;
        case ACT_CLEARED: {
            int dup = 0;
            for (size_t j = 0; j < i; j++)
                if (ap->acts[j].kind == ACT_CLEARED &&
                    ap->acts[j].n1 == a->n1 &&
                    strcmp(ap->acts[j].s1, a->s1) == 0)
                    dup = 1;
            if (!dup) {
                if (ap->sink.cleared)
                    ap->sink.cleared(ap->sink.ctx, a->s1, a->n1, end);
                ap->stats.cleared++;
            }
            break;
        }
        case ACT_TRUNCATE:
            a2__timers_clear(ap->timers);
            if (ap->sink.resync)
                ap->sink.resync(ap->sink.ctx);
            break;
        case ACT_PRESENCE:
            /* a tombstone or a delete ends the field's life */
            if (a->s1 && a->s2 && a->s3)
                (void)a2__apply_track_presence(
                        ap, a->s1, a->s2, a->s3,
                        a->s4 || a->n2 == PRESENCE_KEPT ? a->n1 : 0);
            break;
        }
    }
    push_presence(ap);
    if (ap->expire_tick > 0) {
        push_expired(ap, ap->expire_tick);
        ap->expire_tick = 0;
        ap->stats.expire_ticks++;
    }
    free_actions(ap);
    a2__backlog_commit(ap->backlog, ap->xid_n, end);
    ap->applied = end;
    ap->stats.transactions++;
    return 0;
}

void a2__apply_set_tick_secret(a2__apply *ap, const char *secret)
{
    if (ap && secret && strlen(secret) == A2C_TICK_SECRET_LEN)
        memcpy(ap->tick_secret, secret, A2C_TICK_SECRET_LEN + 1);
}

/* The time of one of this daemon's expiry ticks (A2C_EXPIRE_TICK
 * "<secret> <ms>"), or 0; a tick message without the secret is counted as
 * forged. */
static int64_t tick_time(a2__apply *ap, const a2_change *c)
{
    const size_t k = sizeof A2C_EXPIRE_TICK - 1;
    if (!teq(c->prefix, A2C_TICK_PREFIX) || !c->content.ptr ||
        c->content.len <= k || memcmp(c->content.ptr, A2C_EXPIRE_TICK, k) != 0)
        return 0;
    const char *p = c->content.ptr + k;
    size_t n = c->content.len - k;
    if (!ap->tick_secret[0] || n <= A2C_TICK_SECRET_LEN + 1 ||
        memcmp(p, ap->tick_secret, A2C_TICK_SECRET_LEN) != 0 ||
        p[A2C_TICK_SECRET_LEN] != ' ') {
        ap->stats.forged_ticks++;
        return 0;
    }
    p += A2C_TICK_SECRET_LEN + 1;
    n -= A2C_TICK_SECRET_LEN + 1;
    if (n >= 24)
        return 0;
    char ms[24], *end;
    memcpy(ms, p, n);
    ms[n] = '\0';
    long long v = strtoll(ms, &end, 10);
    return *end == '\0' && v > 0 ? v : 0;
}

int a2__apply_change(a2__apply *ap, const a2_change *c, uint64_t data_start,
                     char *err, size_t errlen)
{
    switch (c->action) {
    case A2_ACTION_BEGIN:
        if (ap->in_txn)
            a2__apply_abort_txn(ap);
        begin(ap, c);
        return 0;
    case A2_ACTION_COMMIT:
        if (!ap->in_txn) {
            snprintf(err, errlen, "commit without begin at %X/%X",
                     (unsigned)(data_start >> 32), (unsigned)data_start);
            return 1;
        }
        return commit(ap, c, data_start, err, errlen);
    case A2_ACTION_MESSAGE:
        if (!c->transactional && !ap->in_txn)
            a2__apply_note_position(ap, data_start);
        if (c->transactional && ap->in_txn) {
            int64_t t = tick_time(ap, c);
            if (t > 0)
                ap->expire_tick = t;
        }
        return 0;
    default:
        break;
    }
    if (!ap->in_txn) {
        snprintf(err, errlen, "change outside a transaction at %X/%X",
                 (unsigned)(data_start >> 32), (unsigned)data_start);
        return 1;
    }
    ap->stats.changes++;
    if (c->action == A2_ACTION_TRUNCATE) {
        if (c->table == A2_TABLE_CURSORS || c->table == A2_TABLE_CLEARS)
            a2__backlog_taint(ap->backlog);
        if (c->table == A2_TABLE_CURSORS) {
            if (!ap->skip_all) {
                json_t *o = line_head(ap, "truncate", "truncated");
                if (append_line(ap, o, err, errlen) != 0)
                    return -1;
            }
            add_action(ap, ACT_TRUNCATE, NULL, NULL, NULL, NULL, 0, 0, 0);
        }
        if (c->table == A2_TABLE_PRESENCE)
            a2__apply_forget_presence(ap);
        return 0;
    }
    switch (c->table) {
    case A2_TABLE_CURSORS:
        if (audit_cursor(ap, c, err, errlen) != 0)
            return -1;
        cursor_actions(ap, c);
        if (ap->backlog && !ap->skip_all) {
            const a2_cursor_row *o = c->old_row ? &c->old_row->cursor : NULL;
            const a2_cursor_row *n = c->new_row ? &c->new_row->cursor : NULL;
            a2__backlog_change(ap->backlog, o, backlog_clear(ap, o), n,
                               backlog_clear(ap, n));
        }
        break;
    case A2_TABLE_EVENTS:
        if (c->action == A2_ACTION_INSERT && c->new_row && !ap->overflow) {
            const a2_event_row *e = &c->new_row->event;
            if (teq(e->event_type, A2_STORE_CLEAR_TYPE))
                add_action(ap, ACT_CLEARED, tdup(e->session_id), NULL, NULL,
                           NULL, e->idx, 0, 0);
            else /* a log cursor may start later in this transaction */
                add_action(ap, ACT_LOG, tdup(e->session_id),
                           tdup(e->event_type), NULL, NULL, e->idx, 0, 0);
        }
        break;
    case A2_TABLE_CLEARS:
        /* A marker that moves (up, or away) changes which heads count: the
         * same marker written again (a2__announce_clear) does not. */
        if (ap->backlog && !ap->skip_all &&
            (c->action != A2_ACTION_UPDATE || !c->new_row ||
             c->new_row->clear.clear_index >
                     clear_index_of(ap, c->new_row->clear.session_id)))
            a2__backlog_taint(ap->backlog);
        if (c->new_row && c->new_row->clear.session_id.ptr)
            remember_clear(ap, c->new_row->clear.session_id.ptr,
                           c->new_row->clear.session_id.len,
                           c->new_row->clear.clear_index);
        if (c->new_row && !ap->overflow)
            add_action(ap, ACT_CLEARED, tdup(c->new_row->clear.session_id),
                       NULL, NULL, NULL, c->new_row->clear.clear_index, 0, 0);
        break;
    case A2_TABLE_PRESENCE: {
        const a2_presence_row *p =
                c->new_row ? &c->new_row->presence
                           : (c->old_row ? &c->old_row->presence : NULL);
        if (!p || ap->overflow)
            break;
        int64_t expires =
                p->present & (1u << A2_PRESENCE_EXPIRES_AT) ? p->expires_at : 0;
        /* an update that left a TOASTed value unchanged does not carry it:
         * no patch, only its new expiry */
        if (c->action == A2_ACTION_UPDATE &&
            !(p->present & (1u << A2_PRESENCE_VALUE))) {
            if (expires > 0)
                add_action(ap, ACT_PRESENCE, tdup(p->ns), tdup(p->participant),
                           tdup(p->field), NULL, expires, PRESENCE_KEPT, 0);
            break;
        }
        char *value = NULL;
        if (c->action != A2_ACTION_DELETE && p->value.ptr &&
            !teq(p->value, "null"))
            value = tdup(p->value);
        add_action(ap, ACT_PRESENCE, tdup(p->ns), tdup(p->participant),
                   tdup(p->field), value,
                   c->action == A2_ACTION_DELETE ? 0 : expires, 0, 0);
        break;
    }
    default:
        break;
    }
    return 0;
}

int a2__apply_in_txn(const a2__apply *ap)
{
    return ap->in_txn;
}

uint64_t a2__apply_applied(const a2__apply *ap)
{
    return ap->applied;
}

void a2__apply_note_position(a2__apply *ap, uint64_t lsn)
{
    if (ap->in_txn)
        return;
    if (lsn > ap->applied)
        ap->applied = lsn;
    if (ap->audit)
        a2__audit_mark(ap->audit, ap->applied);
}

size_t a2__apply_fire_timers(a2__apply *ap, int64_t now_ms)
{
    size_t n = 0;
    a2__timer t;
    while (a2__timers_pop(ap->timers, now_ms, &t)) {
        if (ap->sink.wake)
            ap->sink.wake(ap->sink.ctx, t.consumer, t.session, t.cursor_key,
                          t.head, ap->applied, 0, 0);
        ap->stats.timer_wakes++;
        n++;
    }
    return n;
}

int a2__apply_gap(a2__apply *ap, uint64_t from, uint64_t to, const char *reason,
                  char *err, size_t errlen)
{
    char f[32], t[32];
    uint64_t saved_end = ap->end;
    ap->end = to;
    ap->xid[0] = '\0';
    ap->at[0] = '\0';
    json_t *o = line_head(ap, "gap", "gap");
    ap->end = saved_end;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char at[40];
    a2__format_time_ms((int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000, at,
                       sizeof at);
    json_object_set_new(o, "at", json_string(at));
    json_object_set_new(o, "from",
                        json_string(a2__lsn_format(from, f, sizeof f)));
    json_object_set_new(o, "to", json_string(a2__lsn_format(to, t, sizeof t)));
    json_object_set_new(o, "reason", json_string(reason ? reason : ""));
    size_t saved_len = ap->len, saved_lines = ap->buf_lines;
    ap->len = 0;
    ap->buf_lines = 0;
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    int rc = -1;
    if (!text) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    size_t n = strlen(text);
    text[n] = '\n';
    if (ap->audit &&
        a2__audit_write(ap->audit, text, n + 1, 1, err, errlen) != 0)
        goto done;
    ap->stats.audit_lines++;
    if (to > ap->applied)
        ap->applied = to;
    if (ap->audit)
        a2__audit_mark(ap->audit, ap->applied);
    rc = 0;
done:
    free(text);
    ap->len = saved_len;
    ap->buf_lines = saved_lines;
    return rc;
}

void a2__apply_get_stats(const a2__apply *ap, a2__apply_stats *out)
{
    *out = ap->stats;
}
