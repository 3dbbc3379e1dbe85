/*
 * Audit line text: the JSON lines of the audit trail (a cursor change, a
 * truncate, a gap) and the number, LSN and time formatting they are built
 * with. The per-change line is written straight into the transaction's
 * buffer, without jansson or printf.
 */
#include "audit.h"

#include "../common/buf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t a2__put_uint(char *out, uint64_t v, unsigned base, int width)
{
    static const char digits[] = "0123456789ABCDEF";
    char tmp[64];
    size_t n = 0;
    do {
        tmp[n++] = digits[v % base];
        v /= base;
    } while (v);
    while ((int)n < width && n < sizeof tmp)
        tmp[n++] = '0';
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

char *a2__put_text(char *buf, size_t len, const char *text, size_t n)
{
    if (len == 0)
        return buf;
    if (n >= len)
        n = len - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return buf;
}

char *a2__lsn_format(uint64_t lsn, char *buf, size_t len)
{
    char t[20];
    size_t n = a2__put_uint(t, lsn >> 32, 16, 1);
    t[n++] = '/';
    n += a2__put_uint(t + n, (uint32_t)lsn, 16, 1);
    return a2__put_text(buf, len, t, n);
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

/* ---- the transaction's buffer ---- */

void a2__audit_text_begin(a2__audit_text *t, uint64_t lsn, a2_change_int xid,
                          bool has_time, int64_t time_us)
{
    t->lsn = lsn;
    t->xid[0] = '\0';
    if (!xid.null) {
        size_t k = 0;
        if (xid.value < 0)
            t->xid[k++] = '-';
        k += a2__put_uint(t->xid + k,
                          xid.value < 0 ? 0 - (uint64_t)xid.value
                                        : (uint64_t)xid.value,
                          10, 1);
        t->xid[k] = '\0';
    }
    t->at[0] = '\0';
    if (has_time)
        a2__format_time_ms(time_us, t->at, sizeof t->at);
    char l[32];
    a2__lsn_format(lsn, l, sizeof l);
    /* {"lsn":"X/Y","xid":N,"at":"T" (or null), built without printf: it is
     * made for every transaction. */
    const char *parts[] = {"{\"lsn\":\"",
                           l,
                           "\",\"xid\":",
                           t->xid[0] ? t->xid : "null",
                           ",\"at\":",
                           t->at[0] ? "\"" : "",
                           t->at[0] ? t->at : "null",
                           t->at[0] ? "\"" : ""};
    size_t hn = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        size_t k = strlen(parts[i]);
        memcpy(t->head + hn, parts[i], k); /* 23 + 17 + 21 + 41 < 128 */
        hn += k;
    }
    t->head[hn] = '\0';
    t->head_len = hn;
    a2__audit_text_clear(t);
}

void a2__audit_text_clear(a2__audit_text *t)
{
    t->len = 0;
    t->lines = 0;
}

void a2__audit_text_free(a2__audit_text *t)
{
    free(t->buf);
    t->buf = NULL;
    t->len = t->cap = t->lines = 0;
}

static int put(a2__audit_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        char *nb = a2__buf_grow(t->buf, &t->cap, 4096, t->len + n + 1);
        if (!nb)
            return -1;
        t->buf = nb;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    return 0;
}

static int put_lit(a2__audit_text *t, const char *s)
{
    return put(t, s, strlen(s));
}

/* A JSON string: the decoder hands out valid UTF-8 without NUL, so only
 * quotes, backslashes and control characters need escapes. */
static int put_jstr(a2__audit_text *t, const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* The characters with a short escape, and the letter of each. */
    static const char shortened[] = "\"\\\n\r\t\b\f", letter[] = "\"\\nrtbf";
    if (put(t, "\"", 1) != 0)
        return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        if (put(t, p + run, i - run) != 0)
            return -1;
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t elen = 2;
        const char *k = memchr(shortened, ch, sizeof shortened - 1);
        if (k) {
            esc[1] = letter[k - shortened];
        } else {
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            elen = 6;
        }
        if (put(t, esc, elen) != 0)
            return -1;
        run = i + 1;
    }
    if (put(t, p + run, n - run) != 0)
        return -1;
    return put(t, "\"", 1);
}

static int put_text(a2__audit_text *t, a2_change_text v)
{
    return v.ptr ? put_jstr(t, v.ptr, v.len) : put_lit(t, "null");
}

static int put_i64(a2__audit_text *t, int64_t v)
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
    return put(t, q, (size_t)(e - q));
}

static int put_nint(a2__audit_text *t, a2_change_int v)
{
    return v.null ? put_lit(t, "null") : put_i64(t, v.value);
}

static int put_row(a2__audit_text *t, const a2_cursor_row *r)
{
    if (!r)
        return put_lit(t, "null");
    int rc = 0;
    rc |= put_lit(t, "{\"head\":");
    rc |= put_nint(t, r->head);
    rc |= put_lit(t, ",\"position\":");
    rc |= put_i64(t, r->position);
    rc |= put_lit(t, ",\"attempt\":");
    rc |= put_i64(t, r->attempt_count);
    rc |= put_lit(t, ",\"holder\":");
    rc |= put_text(t, r->claim_holder);
    rc |= put_lit(t, ",\"expires_at\":");
    rc |= put_nint(t, r->claim_expires_at);
    rc |= put_lit(t, ",\"failures\":");
    rc |= put_i64(t, r->failure_count);
    rc |= put_lit(t, ",\"failed_at\":");
    rc |= put_nint(t, r->failed_at);
    rc |= put_lit(t, ",\"error\":");
    rc |= put_text(t, r->last_error);
    rc |= put_lit(t, "}");
    return rc ? -1 : 0;
}

int a2__audit_text_cursor(a2__audit_text *t, const a2_change *c,
                          const char *transition)
{
    const a2_cursor_row *before = c->old_row ? &c->old_row->cursor : NULL;
    const a2_cursor_row *after = c->new_row ? &c->new_row->cursor : NULL;
    const a2_cursor_row *key = after ? after : before;
    const char *op = c->action == A2_ACTION_INSERT   ? "insert"
                     : c->action == A2_ACTION_UPDATE ? "update"
                                                     : "delete";
    size_t mark = t->len;
    int rc = 0;
    /* {"lsn":..,"xid":..,"at":.. is the same for the whole transaction */
    rc |= put(t, t->head, t->head_len);
    rc |= put_lit(t, ",\"op\":\"");
    rc |= put_lit(t, op);
    rc |= put_lit(t, "\",\"transition\":\"");
    rc |= put_lit(t, transition);
    rc |= put_lit(t, "\",\"session\":");
    rc |= key ? put_text(t, key->session_id) : put_lit(t, "null");
    rc |= put_lit(t, ",\"consumer\":");
    rc |= key ? put_text(t, key->consumer) : put_lit(t, "null");
    rc |= put_lit(t, ",\"cursor\":");
    rc |= key ? put_text(t, key->cursor_key) : put_lit(t, "null");
    rc |= put_lit(t, ",\"epoch\":");
    rc |= key ? put_i64(t, key->epoch) : put_lit(t, "null");
    rc |= put_lit(t, ",\"kind\":");
    rc |= key ? put_text(t, key->kind) : put_lit(t, "null");
    rc |= put_lit(t, ",\"before\":");
    rc |= put_row(t, before);
    rc |= put_lit(t, ",\"after\":");
    rc |= put_row(t, after);
    rc |= put_lit(t, "}\n");
    if (rc) {
        t->len = mark;
        return -1;
    }
    t->lines++;
    return 0;
}

/* ---- lines built with jansson (rare) ---- */

static json_t *line_head(uint64_t lsn, const char *xid, const char *at,
                         const char *op, const char *transition)
{
    char l[32];
    a2__lsn_format(lsn, l, sizeof l);
    json_t *o = json_object();
    json_object_set_new(o, "lsn", json_string(l));
    json_object_set_new(o, "xid",
                        xid[0] ? json_integer(strtoll(xid, NULL, 10))
                               : json_null());
    json_object_set_new(o, "at", at[0] ? json_string(at) : json_null());
    json_object_set_new(o, "op", json_string(op));
    json_object_set_new(o, "transition", json_string(transition));
    return o;
}

int a2__audit_text_truncate(a2__audit_text *t)
{
    json_t *o = line_head(t->lsn, t->xid, t->at, "truncate", "truncated");
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text || put(t, text, strlen(text)) != 0 || put(t, "\n", 1) != 0) {
        free(text);
        return -1;
    }
    free(text);
    t->lines++;
    return 0;
}

char *a2__audit_gap_line(uint64_t from, uint64_t to, const char *reason,
                         int64_t now_us, size_t *len)
{
    char f[32], l[32], at[40];
    json_t *o = line_head(to, "", "", "gap", "gap");
    a2__format_time_ms(now_us, at, sizeof at);
    json_object_set_new(o, "at", json_string(at));
    json_object_set_new(o, "from",
                        json_string(a2__lsn_format(from, f, sizeof f)));
    json_object_set_new(o, "to", json_string(a2__lsn_format(to, l, sizeof l)));
    json_object_set_new(o, "reason", json_string(reason ? reason : ""));
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    text[n] = '\n';
    *len = n + 1;
    return text;
}
