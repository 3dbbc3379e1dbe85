/*
 * Encoders of wire protocol v1 frames (msgpack maps) into an a2_wire_buf.
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "a2/wire.h"
#include "wire_int.h"

#include "../common/buf.h"

void a2_wire_buf_init(a2_wire_buf *b)
{
    if (b)
        memset(b, 0, sizeof *b);
}

void a2_wire_buf_free(a2_wire_buf *b)
{
    if (!b)
        return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

void a2_wire_buf_consume(a2_wire_buf *b, size_t n)
{
    if (!b)
        return;
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

size_t a2__wire_max_frame(a2_wire_from from)
{
    return from == A2_WIRE_FROM_WORKER ? A2_WIRE_MAX_WORKER_FRAME
                                       : A2_WIRE_MAX_CONSUMER_FRAME;
}

/* Packing state: the buffer plus the first error seen. */
typedef struct {
    a2_wire_buf *b;
    int err;
} packctx;

/* Makes room for len more bytes; 0 or -1 with c->err set. */
static int reserve(packctx *c, size_t len)
{
    a2_wire_buf *b = c->b;
    char *p;

    if (b->cap - b->len >= len)
        return 0;
    if (len > SIZE_MAX / 4 - b->len) {
        c->err = A2_WIRE_ENOMEM;
        return -1;
    }
    p = a2__buf_grow(b->data, &b->cap, 256, b->len + len);
    if (!p) {
        c->err = A2_WIRE_ENOMEM;
        return -1;
    }
    b->data = p;
    return 0;
}

/* msgpack_packer's write callback. After an error the frame is discarded by
 * a2_wire_encode, so writes may go on meanwhile. */
static int buf_write(void *data, const char *buf, size_t len)
{
    packctx *c = data;
    a2_wire_buf *b = c->b;

    if (b->cap - b->len < len && reserve(c, len) != 0)
        return -1;
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    return 0;
}

static void pack_str(msgpack_packer *pk, packctx *c, const char *s)
{
    size_t n = strlen(s);
    if (n > A2_WIRE_MAX_STRING) {
        if (!c->err)
            c->err = A2_WIRE_ETOOBIG;
        return;
    }
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_str(msgpack_packer *pk, packctx *c, const char *k,
                        const char *v)
{
    pack_str(pk, c, k);
    pack_str(pk, c, v);
}

static void pack_kv_u64(msgpack_packer *pk, packctx *c, const char *k,
                        uint64_t v)
{
    pack_str(pk, c, k);
    msgpack_pack_uint64(pk, v);
}

static void pack_kv_i64(msgpack_packer *pk, packctx *c, const char *k,
                        int64_t v)
{
    pack_str(pk, c, k);
    msgpack_pack_int64(pk, v);
}

static void pack_strs(msgpack_packer *pk, packctx *c, const char *const *v,
                      size_t n)
{
    if (n > A2_WIRE_MAX_ARRAY) {
        if (!c->err)
            c->err = A2_WIRE_ETOOBIG;
        return;
    }
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n && !c->err; i++) {
        if (!v[i]) {
            c->err = A2_WIRE_EINVAL;
            return;
        }
        pack_str(pk, c, v[i]);
    }
}

/* A JSON value as msgpack; depth is the depth of the container holding it. */
static void pack_json(msgpack_packer *pk, packctx *c, json_t *v, int depth)
{
    if (c->err)
        return;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        if (depth + 1 > A2_WIRE_MAX_DEPTH) {
            c->err = A2_WIRE_ETYPE;
            return;
        }
        if (json_object_size(v) > A2_WIRE_MAX_FIELDS) {
            c->err = A2_WIRE_ETOOBIG;
            return;
        }
        msgpack_pack_map(pk, json_object_size(v));
        json_object_foreach(v, k, m)
        {
            if (strlen(k) > A2_WIRE_MAX_STRING) {
                c->err = A2_WIRE_ETOOBIG;
                return;
            }
            pack_str(pk, c, k);
            pack_json(pk, c, m, depth + 1);
        }
        break;
    }
    case JSON_ARRAY: {
        if (depth + 1 > A2_WIRE_MAX_DEPTH) {
            c->err = A2_WIRE_ETYPE;
            return;
        }
        if (json_array_size(v) > A2_WIRE_MAX_ARRAY) {
            c->err = A2_WIRE_ETOOBIG;
            return;
        }
        msgpack_pack_array(pk, json_array_size(v));
        for (size_t i = 0; i < json_array_size(v); i++)
            pack_json(pk, c, json_array_get(v, i), depth + 1);
        break;
    }
    case JSON_STRING: {
        size_t n = json_string_length(v);
        if (n > A2_WIRE_MAX_STRING) {
            c->err = A2_WIRE_ETOOBIG;
            return;
        }
        if (memchr(json_string_value(v), 0, n)) {
            c->err = A2_WIRE_ETYPE;
            return;
        }
        msgpack_pack_str(pk, n);
        msgpack_pack_str_body(pk, json_string_value(v), n);
        break;
    }
    case JSON_INTEGER:
        msgpack_pack_int64(pk, (int64_t)json_integer_value(v));
        break;
    case JSON_REAL:
        msgpack_pack_double(pk, json_real_value(v));
        break;
    case JSON_TRUE:
        msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        msgpack_pack_false(pk);
        break;
    case JSON_NULL:
        msgpack_pack_nil(pk);
        break;
    }
}

static int required(const char *s)
{
    return s != NULL;
}

/* Whether a wake carries its trace (any time set). */
static int has_trace(const a2_wire_msg *m)
{
    for (int i = 0; i < A2_WIRE_TRACE_N; i++)
        if (m->trace_us[i])
            return 1;
    return 0;
}

int a2_wire_encode(a2_wire_buf *b, const a2_wire_msg *m)
{
    packctx c = {b, 0};
    msgpack_packer pk;
    size_t start;
    json_t *fields = NULL;
    a2_wire_from from = A2_WIRE_FROM_CONSUMER;

    if (!b || !m)
        return A2_WIRE_EINVAL;
    start = b->len;
    msgpack_packer_init(&pk, &c, buf_write);
    if (reserve(&c, 256) != 0) /* most frames fit: one check, no regrowth */
        return c.err;

    switch (m->type) {
    case A2_WIRE_HELLO:
        from = A2_WIRE_FROM_WORKER;
        if (!required(m->name) || (m->v != 0 && m->v != A2_WIRE_VERSION))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, m->token ? 4 : 3);
        pack_kv_str(&pk, &c, "t", "hello");
        pack_kv_u64(&pk, &c, "v", A2_WIRE_VERSION);
        pack_kv_str(&pk, &c, "name", m->name);
        if (m->token)
            pack_kv_str(&pk, &c, "token", m->token);
        break;
    case A2_WIRE_SUBSCRIBE:
        from = A2_WIRE_FROM_WORKER;
        if (!required(m->consumer) ||
            (m->log_filter == A2_WIRE_LOG_TYPES && m->n_log_types &&
             !m->log_types) ||
            (m->log_filter != A2_WIRE_LOG_NONE &&
             m->log_filter != A2_WIRE_LOG_ALL &&
             m->log_filter != A2_WIRE_LOG_TYPES))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, m->log_filter == A2_WIRE_LOG_NONE ? 2 : 3);
        pack_kv_str(&pk, &c, "t", "subscribe");
        pack_kv_str(&pk, &c, "consumer", m->consumer);
        if (m->log_filter == A2_WIRE_LOG_ALL) {
            pack_str(&pk, &c, "log_types");
            msgpack_pack_nil(&pk);
        } else if (m->log_filter == A2_WIRE_LOG_TYPES) {
            pack_str(&pk, &c, "log_types");
            pack_strs(&pk, &c, m->log_types, m->n_log_types);
        }
        break;
    case A2_WIRE_PRESENCE_SUB:
        from = A2_WIRE_FROM_WORKER;
        if (!required(m->ns))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 2);
        pack_kv_str(&pk, &c, "t", "presence");
        pack_kv_str(&pk, &c, "ns", m->ns);
        break;
    case A2_WIRE_PING:
    case A2_WIRE_PONG:
        from = m->type == A2_WIRE_PING ? A2_WIRE_FROM_WORKER
                                       : A2_WIRE_FROM_CONSUMER;
        msgpack_pack_map(&pk, 2);
        pack_kv_str(&pk, &c, "t", m->type == A2_WIRE_PING ? "ping" : "pong");
        pack_kv_u64(&pk, &c, "id", m->id);
        break;
    case A2_WIRE_WELCOME:
        if (m->v != 0 && m->v != A2_WIRE_VERSION)
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 3);
        pack_kv_str(&pk, &c, "t", "welcome");
        pack_kv_u64(&pk, &c, "v", A2_WIRE_VERSION);
        pack_kv_u64(&pk, &c, "lsn", m->lsn);
        break;
    case A2_WIRE_WAKE:
        if (!required(m->consumer) || !required(m->session) ||
            !required(m->cursor))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 6 + (m->xid != 0) + has_trace(m));
        pack_kv_str(&pk, &c, "t", "wake");
        pack_kv_str(&pk, &c, "consumer", m->consumer);
        pack_kv_str(&pk, &c, "session", m->session);
        pack_kv_str(&pk, &c, "cursor", m->cursor);
        pack_kv_i64(&pk, &c, "head", m->head);
        pack_kv_u64(&pk, &c, "lsn", m->lsn);
        if (m->xid)
            pack_kv_u64(&pk, &c, "xid", m->xid);
        if (has_trace(m)) {
            pack_str(&pk, &c, "trace");
            msgpack_pack_array(&pk, A2_WIRE_TRACE_N);
            for (int i = 0; i < A2_WIRE_TRACE_N; i++)
                msgpack_pack_int64(&pk, m->trace_us[i]);
        }
        break;
    case A2_WIRE_LOG:
        if (!required(m->consumer) || !required(m->session) ||
            !required(m->event_type))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, m->xid ? 7 : 6);
        pack_kv_str(&pk, &c, "t", "log");
        pack_kv_str(&pk, &c, "consumer", m->consumer);
        pack_kv_str(&pk, &c, "session", m->session);
        pack_kv_i64(&pk, &c, "idx", m->idx);
        pack_kv_str(&pk, &c, "type", m->event_type);
        pack_kv_u64(&pk, &c, "lsn", m->lsn);
        if (m->xid)
            pack_kv_u64(&pk, &c, "xid", m->xid);
        break;
    case A2_WIRE_CLEARED:
        if (!required(m->session))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 4);
        pack_kv_str(&pk, &c, "t", "cleared");
        pack_kv_str(&pk, &c, "session", m->session);
        pack_kv_i64(&pk, &c, "clear_index", m->clear_index);
        pack_kv_u64(&pk, &c, "lsn", m->lsn);
        break;
    case A2_WIRE_RESYNC:
        if (!required(m->consumer) ||
            (!m->all_sessions && m->n_sessions && !m->sessions))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 3);
        pack_kv_str(&pk, &c, "t", "resync");
        pack_kv_str(&pk, &c, "consumer", m->consumer);
        pack_str(&pk, &c, "sessions");
        if (m->all_sessions)
            msgpack_pack_nil(&pk);
        else
            pack_strs(&pk, &c, m->sessions, m->n_sessions);
        break;
    case A2_WIRE_PRESENCE: {
        json_error_t jerr;
        if (!required(m->ns) || !required(m->participant) ||
            !required(m->fields_json))
            return A2_WIRE_EINVAL;
        fields = json_loads(m->fields_json, JSON_REJECT_DUPLICATES, &jerr);
        if (!fields || !json_is_object(fields)) {
            json_decref(fields);
            return A2_WIRE_ETYPE;
        }
        msgpack_pack_map(&pk, 5);
        pack_kv_str(&pk, &c, "t", "presence");
        pack_kv_str(&pk, &c, "ns", m->ns);
        pack_kv_str(&pk, &c, "participant", m->participant);
        pack_str(&pk, &c, "fields");
        pack_json(&pk, &c, fields, 1);
        pack_kv_u64(&pk, &c, "lsn", m->lsn);
        json_decref(fields);
        break;
    }
    case A2_WIRE_ERROR:
        if (!required(m->code) || !required(m->message))
            return A2_WIRE_EINVAL;
        msgpack_pack_map(&pk, 3);
        pack_kv_str(&pk, &c, "t", "error");
        pack_kv_str(&pk, &c, "code", m->code);
        pack_kv_str(&pk, &c, "message", m->message);
        break;
    default:
        return A2_WIRE_EINVAL;
    }

    if (!c.err && b->len - start > a2__wire_max_frame(from))
        c.err = A2_WIRE_ETOOBIG;
    if (c.err) {
        b->len = start;
        return c.err;
    }
    return 0;
}

int a2_wire_encode_hello(a2_wire_buf *b, const char *name, const char *token)
{
    a2_wire_msg m = {.type = A2_WIRE_HELLO, .name = name, .token = token};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_subscribe(a2_wire_buf *b, const char *consumer,
                             a2_wire_log_filter filter,
                             const char *const *types, size_t n)
{
    a2_wire_msg m = {.type = A2_WIRE_SUBSCRIBE,
                     .consumer = consumer,
                     .log_filter = filter};
    if (filter == A2_WIRE_LOG_TYPES) {
        m.log_types = types;
        m.n_log_types = n;
    }
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_presence_sub(a2_wire_buf *b, const char *ns)
{
    a2_wire_msg m = {.type = A2_WIRE_PRESENCE_SUB, .ns = ns};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_ping(a2_wire_buf *b, uint64_t id)
{
    a2_wire_msg m = {.type = A2_WIRE_PING, .id = id};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_welcome(a2_wire_buf *b, uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_WELCOME, .lsn = lsn};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_wake(a2_wire_buf *b, const char *consumer,
                        const char *session, const char *cursor, int64_t head,
                        uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_WAKE,
                     .consumer = consumer,
                     .session = session,
                     .cursor = cursor,
                     .head = head,
                     .lsn = lsn};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_log(a2_wire_buf *b, const char *consumer,
                       const char *session, int64_t idx, const char *type,
                       uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_LOG,
                     .consumer = consumer,
                     .session = session,
                     .idx = idx,
                     .event_type = type,
                     .lsn = lsn};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_cleared(a2_wire_buf *b, const char *session,
                           int64_t clear_index, uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_CLEARED,
                     .session = session,
                     .clear_index = clear_index,
                     .lsn = lsn};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_resync(a2_wire_buf *b, const char *consumer,
                          const char *const *sessions, size_t n)
{
    a2_wire_msg m = {.type = A2_WIRE_RESYNC,
                     .consumer = consumer,
                     .all_sessions = sessions == NULL,
                     .sessions = sessions,
                     .n_sessions = sessions ? n : 0};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_presence(a2_wire_buf *b, const char *ns,
                            const char *participant, const char *fields_json)
{
    a2_wire_msg m = {.type = A2_WIRE_PRESENCE,
                     .ns = ns,
                     .participant = participant,
                     .fields_json = fields_json};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_pong(a2_wire_buf *b, uint64_t id)
{
    a2_wire_msg m = {.type = A2_WIRE_PONG, .id = id};
    return a2_wire_encode(b, &m);
}

int a2_wire_encode_error(a2_wire_buf *b, const char *code, const char *message)
{
    a2_wire_msg m = {.type = A2_WIRE_ERROR, .code = code, .message = message};
    return a2_wire_encode(b, &m);
}

const char *a2_wire_type_name(a2_wire_type type)
{
    switch (type) {
    case A2_WIRE_HELLO:
        return "hello";
    case A2_WIRE_SUBSCRIBE:
        return "subscribe";
    case A2_WIRE_PRESENCE_SUB:
        return "presence";
    case A2_WIRE_PING:
        return "ping";
    case A2_WIRE_WELCOME:
        return "welcome";
    case A2_WIRE_WAKE:
        return "wake";
    case A2_WIRE_LOG:
        return "log";
    case A2_WIRE_CLEARED:
        return "cleared";
    case A2_WIRE_RESYNC:
        return "resync";
    case A2_WIRE_PRESENCE:
        return "presence";
    case A2_WIRE_PONG:
        return "pong";
    case A2_WIRE_ERROR:
        return "error";
    default:
        return "?";
    }
}

const char *a2_wire_strerror(int code)
{
    switch (code) {
    case 0:
        return "ok";
    case A2_WIRE_EINVAL:
        return "invalid argument";
    case A2_WIRE_ENOMEM:
        return "out of memory";
    case A2_WIRE_EFORMAT:
        return "malformed frame";
    case A2_WIRE_ETOOBIG:
        return "over a size limit";
    case A2_WIRE_EDEPTH:
        return "nested too deep";
    case A2_WIRE_EMISSING:
        return "missing key";
    case A2_WIRE_ETYPE:
        return "wrong type";
    case A2_WIRE_EUNKNOWN:
        return "unknown message";
    case A2_WIRE_EVERSION:
        return "unsupported protocol version";
    default:
        return "unknown error";
    }
}
