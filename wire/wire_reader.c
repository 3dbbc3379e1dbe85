/*
 * The streaming reader of wire protocol v1: bytes in, typed messages out.
 * Framing and limits are checked by the scanner (wire_scan.c), decoding is
 * msgpack-c's msgpack_unpack_next, and the message is then checked key by
 * key against the v1 table.
 */
#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2/wire.h"
#include "wire_int.h"

#include "../common/buf.h"

/* A chunk of the per-message arena. */
typedef struct chunk {
    struct chunk *next;
    size_t used;
    size_t cap;
    max_align_t data[];
} chunk;

struct a2_wire_reader {
    a2_wire_from from;
    size_t max_frame;
    unsigned char *buf; /* fed bytes; buf[start .. len) not taken yet */
    size_t start;
    size_t len;
    size_t cap;
    a2__wire_scan scan;
    int err;
    char errmsg[160];
    /* What the last message borrows. */
    chunk *arena;
    char *fields_json;
};

a2_wire_reader *a2_wire_reader_new(a2_wire_from from)
{
    a2_wire_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->from = from == A2_WIRE_FROM_CONSUMER ? A2_WIRE_FROM_CONSUMER
                                            : A2_WIRE_FROM_WORKER;
    r->max_frame = a2__wire_max_frame(r->from);
    return r;
}

/* Chunks up to this size are kept from one message to the next. */
#define KEEP_CHUNK (64 * 1024)

static void release_message(a2_wire_reader *r)
{
    /* The oldest chunk is last; keep it (when small) for the next message. */
    while (r->arena && (r->arena->next || r->arena->cap > KEEP_CHUNK)) {
        chunk *n = r->arena->next;
        free(r->arena);
        r->arena = n;
    }
    if (r->arena)
        r->arena->used = 0;
    free(r->fields_json);
    r->fields_json = NULL;
}

void a2_wire_reader_free(a2_wire_reader *r)
{
    if (!r)
        return;
    release_message(r);
    free(r->arena);
    free(r->buf);
    free(r);
}

const char *a2_wire_reader_error(const a2_wire_reader *r)
{
    return r ? r->errmsg : "";
}

size_t a2_wire_reader_buffered(const a2_wire_reader *r)
{
    return r ? r->len - r->start : 0;
}

__attribute__((format(printf, 3, 4))) static int
fail(a2_wire_reader *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof r->errmsg, fmt, ap);
    va_end(ap);
    r->err = code;
    return code;
}

int a2_wire_reader_feed(a2_wire_reader *r, const void *data, size_t n)
{
    if (!r || (!data && n))
        return A2_WIRE_EINVAL;
    if (r->err)
        return r->err;
    if (n == 0)
        return 0;
    if (r->start > 0 && r->len + n > r->cap) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
    }
    if (n > SIZE_MAX / 2 - r->len)
        return A2_WIRE_ENOMEM;
    if (r->len + n > r->cap) {
        unsigned char *p = a2__buf_grow(r->buf, &r->cap, 4096, r->len + n);
        if (!p)
            return A2_WIRE_ENOMEM;
        r->buf = p;
    }
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    return 0;
}

static void *arena_alloc(a2_wire_reader *r, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) *
        sizeof(max_align_t);
    if (!r->arena || r->arena->cap - r->arena->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        chunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = r->arena;
        c->used = 0;
        c->cap = cap;
        r->arena = c;
    }
    void *p = (char *)r->arena->data + r->arena->used;
    r->arena->used += n;
    return p;
}

/* msgpack-c leaves ptr NULL for empty strings: never hand that to mem*(). */
static int str_eq(const msgpack_object_str *a, const char *b, size_t bl)
{
    return a->size == bl && (bl == 0 || memcmp(a->ptr, b, bl) == 0);
}

static int has_nul(const msgpack_object_str *a)
{
    return a->size > 0 && memchr(a->ptr, 0, a->size) != NULL;
}

/* Decoding of one frame's map. */
typedef struct {
    a2_wire_reader *r;
    const msgpack_object_map *map;
    const char *t;
} frame;

static const msgpack_object *lookup(const frame *f, const char *key)
{
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < f->map->size; i++) {
        const msgpack_object *k = &f->map->ptr[i].key;
        if (str_eq(&k->via.str, key, kl))
            return &f->map->ptr[i].val;
    }
    return NULL;
}

static int copy_str(frame *f, const char *key, const msgpack_object *o,
                    const char **out)
{
    char *s;
    if (o->type != MSGPACK_OBJECT_STR)
        return fail(f->r, A2_WIRE_ETYPE, "%s: key %s is not a string", f->t,
                    key);
    if (has_nul(&o->via.str))
        return fail(f->r, A2_WIRE_EFORMAT, "%s: key %s contains a NUL byte",
                    f->t, key);
    if (!a2_wire_utf8_valid(o->via.str.ptr, o->via.str.size))
        return fail(f->r, A2_WIRE_EFORMAT, "%s: key %s is not UTF-8 text",
                    f->t, key);
    s = arena_alloc(f->r, o->via.str.size + 1);
    if (!s)
        return fail(f->r, A2_WIRE_ENOMEM, "out of memory");
    if (o->via.str.size)
        memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    *out = s;
    return 0;
}

static int get_str(frame *f, const char *key, const char **out)
{
    const msgpack_object *o = lookup(f, key);
    if (!o)
        return fail(f->r, A2_WIRE_EMISSING, "%s: missing key %s", f->t, key);
    return copy_str(f, key, o, out);
}

static int get_u64(frame *f, const char *key, uint64_t *out)
{
    const msgpack_object *o = lookup(f, key);
    if (!o)
        return fail(f->r, A2_WIRE_EMISSING, "%s: missing key %s", f->t, key);
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return fail(f->r, A2_WIRE_ETYPE,
                    "%s: key %s is not an unsigned integer", f->t, key);
    *out = o->via.u64;
    return 0;
}

static int get_i64(frame *f, const char *key, int64_t *out)
{
    const msgpack_object *o = lookup(f, key);
    if (!o)
        return fail(f->r, A2_WIRE_EMISSING, "%s: missing key %s", f->t, key);
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > INT64_MAX)
        return fail(f->r, A2_WIRE_ETYPE,
                    "%s: key %s is not a 64-bit signed integer", f->t, key);
    *out = (int64_t)o->via.u64;
    return 0;
}

/* A wake's optional `trace`: an array of A2_WIRE_TRACE_N signed integers;
 * absent leaves out as it is. */
static int get_trace(frame *f, int64_t *out)
{
    const msgpack_object *o = lookup(f, "trace");
    if (!o)
        return 0;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != A2_WIRE_TRACE_N)
        return fail(f->r, A2_WIRE_ETYPE,
                    "%s: key trace is not an array of %d integers", f->t,
                    A2_WIRE_TRACE_N);
    for (uint32_t i = 0; i < A2_WIRE_TRACE_N; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            out[i] = e->via.i64;
        else if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                 e->via.u64 <= INT64_MAX)
            out[i] = (int64_t)e->via.u64;
        else
            return fail(f->r, A2_WIRE_ETYPE,
                        "%s: key trace is not an array of %d integers", f->t,
                        A2_WIRE_TRACE_N);
    }
    return 0;
}

/* An array of strings, or nil (*is_nil = 1). Absent gives *present = 0. */
static int get_strs(frame *f, const char *key, int *present, int *is_nil,
                    const char *const **out, size_t *n)
{
    const msgpack_object *o = lookup(f, key);
    const char **v;

    *present = o != NULL;
    *is_nil = 0;
    *out = NULL;
    *n = 0;
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_NIL) {
        *is_nil = 1;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return fail(f->r, A2_WIRE_ETYPE, "%s: key %s is not an array or nil",
                    f->t, key);
    v = arena_alloc(f->r, (o->via.array.size + 1) * sizeof *v);
    if (!v)
        return fail(f->r, A2_WIRE_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_STR)
            return fail(f->r, A2_WIRE_ETYPE,
                        "%s: key %s has a non-string element", f->t, key);
        int rc = copy_str(f, key, e, &v[i]);
        if (rc)
            return rc;
    }
    v[o->via.array.size] = NULL;
    *out = v;
    *n = o->via.array.size;
    return 0;
}

/* A msgpack value as a new JSON value; NULL with *why set when it has none. */
static json_t *to_json(const msgpack_object *o, const char **why)
{
    json_t *j = NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > INT64_MAX) {
            *why = "integer out of range";
            return NULL;
        }
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64)) {
            *why = "number is not finite";
            return NULL;
        }
        j = json_real(o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        j = json_stringn(o->via.str.size ? o->via.str.ptr : "",
                         o->via.str.size);
        if (!j || has_nul(&o->via.str)) {
            json_decref(j);
            *why = "string is not UTF-8 text";
            return NULL;
        }
        return j;
    case MSGPACK_OBJECT_ARRAY:
        j = json_array();
        for (uint32_t i = 0; j && i < o->via.array.size; i++) {
            json_t *e = to_json(&o->via.array.ptr[i], why);
            if (!e || json_array_append_new(j, e)) {
                json_decref(j);
                return NULL;
            }
        }
        break;
    case MSGPACK_OBJECT_MAP:
        j = json_object();
        for (uint32_t i = 0; j && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            json_t *e;
            char key[A2_WIRE_MAX_STRING + 1];
            if (k->type != MSGPACK_OBJECT_STR || has_nul(&k->via.str)) {
                *why = "map key is not a string";
                json_decref(j);
                return NULL;
            }
            if (k->via.str.size)
                memcpy(key, k->via.str.ptr, k->via.str.size);
            key[k->via.str.size] = '\0';
            e = to_json(&o->via.map.ptr[i].val, why);
            if (!e || json_object_set_new(j, key, e)) {
                if (e && !*why)
                    *why = "map key is not UTF-8 text";
                json_decref(j);
                return NULL;
            }
        }
        break;
    default:
        *why = "unsupported value type";
        return NULL;
    }
    if (!j && !*why)
        *why = "out of memory";
    return j;
}

static int get_fields(frame *f, const char **out)
{
    const msgpack_object *o = lookup(f, "fields");
    const char *why = NULL;
    json_t *j;

    if (!o)
        return fail(f->r, A2_WIRE_EMISSING, "%s: missing key fields", f->t);
    if (o->type != MSGPACK_OBJECT_MAP)
        return fail(f->r, A2_WIRE_ETYPE, "%s: key fields is not a map", f->t);
    j = to_json(o, &why);
    if (!j)
        return fail(f->r, A2_WIRE_ETYPE, "%s: key fields: %s", f->t,
                    why ? why : "invalid value");
    f->r->fields_json = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!f->r->fields_json)
        return fail(f->r, A2_WIRE_ENOMEM, "out of memory");
    *out = f->r->fields_json;
    return 0;
}

static int check_version(frame *f, uint64_t v)
{
    if (v != A2_WIRE_VERSION)
        return fail(f->r, A2_WIRE_EVERSION,
                    "%s: unsupported protocol version %llu (want %d)", f->t,
                    (unsigned long long)v, A2_WIRE_VERSION);
    return 0;
}

/* Fills *m from the frame's map (type already known). */
static int decode(frame *f, a2_wire_msg *m)
{
    int rc = 0, present = 0, is_nil = 0;

    switch (m->type) {
    case A2_WIRE_HELLO: {
        const msgpack_object *tok;
        if ((rc = get_u64(f, "v", &m->v)) || (rc = check_version(f, m->v)) ||
            (rc = get_str(f, "name", &m->name)))
            return rc;
        tok = lookup(f, "token");
        if (tok && (rc = copy_str(f, "token", tok, &m->token)))
            return rc;
        return 0;
    }
    case A2_WIRE_SUBSCRIBE:
        if ((rc = get_str(f, "consumer", &m->consumer)) ||
            (rc = get_strs(f, "log_types", &present, &is_nil, &m->log_types,
                           &m->n_log_types)))
            return rc;
        m->log_filter = !present ? A2_WIRE_LOG_NONE
                        : is_nil ? A2_WIRE_LOG_ALL
                                 : A2_WIRE_LOG_TYPES;
        return 0;
    case A2_WIRE_PRESENCE_SUB:
        return get_str(f, "ns", &m->ns);
    case A2_WIRE_PING:
    case A2_WIRE_PONG:
        return get_u64(f, "id", &m->id);
    case A2_WIRE_WELCOME:
        if ((rc = get_u64(f, "v", &m->v)) || (rc = check_version(f, m->v)))
            return rc;
        return get_u64(f, "lsn", &m->lsn);
    case A2_WIRE_WAKE:
        if ((rc = get_str(f, "consumer", &m->consumer)) ||
            (rc = get_str(f, "session", &m->session)) ||
            (rc = get_str(f, "cursor", &m->cursor)) ||
            (rc = get_i64(f, "head", &m->head)) ||
            (rc = get_u64(f, "lsn", &m->lsn)) || (rc = get_trace(f, m->trace_us)))
            return rc;
        /* xid: absent from a timer's wake-up and from older consumers */
        return lookup(f, "xid") ? get_u64(f, "xid", &m->xid) : 0;
    case A2_WIRE_LOG:
        if ((rc = get_str(f, "consumer", &m->consumer)) ||
            (rc = get_str(f, "session", &m->session)) ||
            (rc = get_i64(f, "idx", &m->idx)) ||
            (rc = get_str(f, "type", &m->event_type)) ||
            (rc = get_u64(f, "lsn", &m->lsn)))
            return rc;
        return lookup(f, "xid") ? get_u64(f, "xid", &m->xid) : 0;
    case A2_WIRE_CLEARED:
        if ((rc = get_str(f, "session", &m->session)) ||
            (rc = get_i64(f, "clear_index", &m->clear_index)))
            return rc;
        return get_u64(f, "lsn", &m->lsn);
    case A2_WIRE_RESYNC:
        if ((rc = get_str(f, "consumer", &m->consumer)) ||
            (rc = get_strs(f, "sessions", &present, &is_nil, &m->sessions,
                           &m->n_sessions)))
            return rc;
        if (!present)
            return fail(f->r, A2_WIRE_EMISSING, "%s: missing key sessions",
                        f->t);
        m->all_sessions = is_nil;
        return 0;
    case A2_WIRE_PRESENCE:
        if ((rc = get_str(f, "ns", &m->ns)) ||
            (rc = get_str(f, "participant", &m->participant)))
            return rc;
        /* lsn: absent from a consumer that predates it */
        if (lookup(f, "lsn") && (rc = get_u64(f, "lsn", &m->lsn)))
            return rc;
        return get_fields(f, &m->fields_json);
    case A2_WIRE_ERROR:
        if ((rc = get_str(f, "code", &m->code)))
            return rc;
        return get_str(f, "message", &m->message);
    default:
        return fail(f->r, A2_WIRE_EUNKNOWN, "unknown message");
    }
}

static const struct {
    const char *name;
    a2_wire_type worker;   /* as sent by a worker */
    a2_wire_type consumer; /* as sent by the consumer */
} types[] = {
        {"hello", A2_WIRE_HELLO, A2_WIRE_NONE},
        {"subscribe", A2_WIRE_SUBSCRIBE, A2_WIRE_NONE},
        {"presence", A2_WIRE_PRESENCE_SUB, A2_WIRE_PRESENCE},
        {"ping", A2_WIRE_PING, A2_WIRE_NONE},
        {"welcome", A2_WIRE_NONE, A2_WIRE_WELCOME},
        {"wake", A2_WIRE_NONE, A2_WIRE_WAKE},
        {"log", A2_WIRE_NONE, A2_WIRE_LOG},
        {"cleared", A2_WIRE_NONE, A2_WIRE_CLEARED},
        {"resync", A2_WIRE_NONE, A2_WIRE_RESYNC},
        {"pong", A2_WIRE_NONE, A2_WIRE_PONG},
        {"error", A2_WIRE_NONE, A2_WIRE_ERROR},
};

/* Orders string keys by length, then bytes. */
static int key_order(const void *pa, const void *pb)
{
    const msgpack_object_str *a = *(const msgpack_object_str *const *)pa;
    const msgpack_object_str *b = *(const msgpack_object_str *const *)pb;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return a->size ? memcmp(a->ptr, b->ptr, a->size) : 0;
}

/* Whether the map of string keys holds a key twice (-1: out of memory):
 * pair by pair for a frame's few keys, by sorting for up to
 * A2_WIRE_MAX_FIELDS of them (a hostile frame's). */
static int has_duplicate_key(const msgpack_object_map *map)
{
    uint32_t n = map->size;
    if (n <= 16) {
        for (uint32_t i = 1; i < n; i++) {
            const msgpack_object_str *k = &map->ptr[i].key.via.str;
            for (uint32_t j = 0; j < i; j++)
                if (str_eq(&map->ptr[j].key.via.str, k->ptr, k->size))
                    return 1;
        }
        return 0;
    }
    const msgpack_object_str **keys = malloc(n * sizeof *keys);
    if (!keys)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        keys[i] = &map->ptr[i].key.via.str;
    qsort(keys, n, sizeof *keys, key_order);
    int dup = 0;
    for (uint32_t i = 1; i < n && !dup; i++)
        dup = key_order(&keys[i - 1], &keys[i]) == 0;
    free(keys);
    return dup;
}

static int parse_frame(a2_wire_reader *r, const msgpack_object *root,
                       a2_wire_msg *m)
{
    frame f = {r, NULL, "frame"};
    const msgpack_object *t;
    char tname[32];

    if (root->type != MSGPACK_OBJECT_MAP)
        return fail(r, A2_WIRE_EFORMAT, "frame is not a map");
    f.map = &root->via.map;
    for (uint32_t i = 0; i < f.map->size; i++)
        if (f.map->ptr[i].key.type != MSGPACK_OBJECT_STR)
            return fail(r, A2_WIRE_EFORMAT, "frame has a non-string key");
    int dup = has_duplicate_key(f.map);
    if (dup < 0)
        return fail(r, A2_WIRE_ENOMEM, "out of memory");
    if (dup)
        return fail(r, A2_WIRE_EFORMAT, "frame has a duplicate key");
    t = lookup(&f, "t");
    if (!t)
        return fail(r, A2_WIRE_EMISSING, "frame has no key t");
    if (t->type != MSGPACK_OBJECT_STR)
        return fail(r, A2_WIRE_ETYPE, "key t is not a string");
    m->type = A2_WIRE_NONE;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (str_eq(&t->via.str, types[i].name, strlen(types[i].name))) {
            m->type = r->from == A2_WIRE_FROM_WORKER ? types[i].worker
                                                     : types[i].consumer;
            f.t = types[i].name;
            break;
        }
    }
    if (m->type == A2_WIRE_NONE) {
        size_t n = t->via.str.size < sizeof tname - 1 ? t->via.str.size
                                                      : sizeof tname - 1;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)t->via.str.ptr[i];
            tname[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
        tname[n] = '\0';
        return fail(r, A2_WIRE_EUNKNOWN, "unknown message type \"%s\" from %s",
                    tname,
                    r->from == A2_WIRE_FROM_WORKER ? "a worker"
                                                   : "the consumer");
    }
    return decode(&f, m);
}

int a2_wire_reader_next(a2_wire_reader *r, a2_wire_msg *out)
{
    size_t flen = 0, off = 0;
    const char *why = "malformed frame";
    msgpack_unpacked unp;
    int rc;

    if (!r || !out)
        return A2_WIRE_EINVAL;
    memset(out, 0, sizeof *out);
    release_message(r);
    if (r->err)
        return r->err;

    rc = a2__wire_scan_step(&r->scan, r->buf + r->start, r->len - r->start,
                            r->max_frame, &flen, &why);
    if (rc < 0)
        return fail(r, rc, "%s", why);
    if (rc == 0) {
        if (r->start == r->len)
            r->start = r->len = 0;
        return 0;
    }

    msgpack_unpacked_init(&unp);
    msgpack_unpack_return ur = msgpack_unpack_next(
            &unp, (const char *)r->buf + r->start, flen, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = fail(r, A2_WIRE_ENOMEM, "out of memory");
        goto cleanup;
    }
    if (ur != MSGPACK_UNPACK_SUCCESS || off != flen) {
        rc = fail(r, A2_WIRE_EFORMAT, "malformed msgpack frame");
        goto cleanup;
    }
    rc = parse_frame(r, &unp.data, out);
    if (rc == 0)
        rc = 1;
    r->start += flen;
    a2__wire_scan_reset(&r->scan);
    if (r->start == r->len)
        r->start = r->len = 0;

cleanup:
    msgpack_unpacked_destroy(&unp);
    if (rc < 0) {
        memset(out, 0, sizeof *out);
        release_message(r);
    }
    return rc;
}
