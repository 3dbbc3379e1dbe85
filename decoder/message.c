/*
 * One wal2json message into the decoder's a2_change: the top-level keys
 * (action, xid, timestamp, lsn, nextlsn, schema, table, columns, identity,
 * transactional, prefix, content; any other key is validated and skipped),
 * then the checks per action and the rows of an a2 table's I/U/D.
 */
#include "decoder_int.h"

enum {
    KEY_ACTION = 1u << 0,
    KEY_XID = 1u << 1,
    KEY_TIMESTAMP = 1u << 2,
    KEY_LSN = 1u << 3,
    KEY_NEXTLSN = 1u << 4,
    KEY_SCHEMA = 1u << 5,
    KEY_TABLE = 1u << 6,
    KEY_COLUMNS = 1u << 7,
    KEY_IDENTITY = 1u << 8,
    KEY_TRANSACTIONAL = 1u << 9,
    KEY_PREFIX = 1u << 10,
    KEY_CONTENT = 1u << 11,
    KEY_ORIGIN = 1u << 12,
    KEY_PK = 1u << 13
};

#define IS(lit) a2__decoder_same_bytes(k->ptr, lit, sizeof(lit) - 1)

/* The KEY_* bit of a top-level key, 0 for one a2 skips. */
static unsigned top_key(const a2_change_text *k)
{
    switch (k->len) {
    case 2:
        return IS("pk") ? KEY_PK : 0;
    case 3:
        return IS("xid") ? KEY_XID : IS("lsn") ? KEY_LSN : 0;
    case 5:
        return IS("table") ? KEY_TABLE : 0;
    case 6:
        return IS("action")   ? KEY_ACTION
               : IS("schema") ? KEY_SCHEMA
               : IS("prefix") ? KEY_PREFIX
               : IS("origin") ? KEY_ORIGIN
                              : 0;
    case 7:
        return IS("columns")   ? KEY_COLUMNS
               : IS("nextlsn") ? KEY_NEXTLSN
               : IS("content") ? KEY_CONTENT
                               : 0;
    case 8:
        return IS("identity") ? KEY_IDENTITY : 0;
    case 9:
        return IS("timestamp") ? KEY_TIMESTAMP : 0;
    case 13:
        return IS("transactional") ? KEY_TRANSACTIONAL : 0;
    default:
        return 0;
    }
}
#undef IS

/* A string member, or null when nullable. */
static int member_string(a2__decoder_scan *s, const char *key, bool nullable,
                         a2_change_text *out)
{
    size_t voff = a2__decoder_off(s);
    if (s->p < s->end && *s->p == '"')
        return a2__decoder_scan_string(s, out, true);
    if (nullable && s->p < s->end && *s->p == 'n') {
        out->ptr = NULL;
        out->len = 0;
        return a2__decoder_scan_literal(s, "null", 4);
    }
    return a2__decoder_wrong_type(s, 1, voff, "\"%s\": expected a string%s",
                                  key, nullable ? " or null" : "");
}

/* The top-level keys whose value is a string member of a2_change. */
typedef struct string_key {
    unsigned bit;
    const char *name;
    size_t off;
} string_key;

static const string_key string_keys[] = {
        {KEY_SCHEMA, "schema", offsetof(a2_change, schema)},
        {KEY_TABLE, "table", offsetof(a2_change, table_name)},
        {KEY_PREFIX, "prefix", offsetof(a2_change, prefix)},
        {KEY_CONTENT, "content", offsetof(a2_change, content)},
};

/* The string key of bit, one of string_keys. */
static const string_key *string_key_of(unsigned bit)
{
    size_t i = 0;
    while (i + 1 < sizeof string_keys / sizeof string_keys[0] &&
           string_keys[i].bit != bit)
        i++;
    return &string_keys[i];
}

static int parse_top(a2__decoder_scan *s, unsigned *seen)
{
    a2_decoder *d = s->d;
    a2_change *c = &d->change;
    a2_change_text key, t;
    int r;

    a2__decoder_skip_ws(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "empty line");
    if (*s->p != '{')
        return a2__decoder_fail(&d->err, A2_EDEC_TYPE, a2__decoder_off(s),
                                "expected a JSON object");
    s->p++;
    if (a2__decoder_closes(s, '}'))
        return 0;
    do {
        size_t koff = a2__decoder_off(s);
        unsigned bit = 0;
        if (a2__decoder_scan_key(s, &key) < 0)
            return d->err.code;
        a2__decoder_skip_ws(s);
        bit = top_key(&key);
        if (bit & *seen)
            return a2__decoder_fail(
                    &d->err, A2_EDEC_VALUE, koff, "duplicate key \"%.*s\"",
                    (int)(key.len > 32 ? 32 : key.len), key.ptr);
        *seen |= bit;
        size_t voff = a2__decoder_off(s);
        switch (bit) {
        case KEY_ACTION:
            if (member_string(s, "action", false, &t) < 0)
                return d->err.code;
            if (t.len != 1 || !strchr("BCIUDMT", t.ptr[0]))
                return a2__decoder_fail(&d->err, A2_EDEC_VALUE, voff,
                                        "unknown action \"%.16s\"", t.ptr);
            c->action = (a2_action)t.ptr[0];
            break;
        case KEY_XID:
            if (s->p < s->end && *s->p == 'n') {
                if (a2__decoder_scan_literal(s, "null", 4) < 0)
                    return d->err.code;
                c->xid.null = true;
                c->xid.value = 0;
                break;
            }
            if (s->p < s->end &&
                (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
                bool is_int;
                int64_t v;
                if (a2__decoder_scan_number(s, &t, &is_int, NULL, NULL) < 0)
                    return d->err.code;
                if (!is_int)
                    return a2__decoder_fail(&d->err, A2_EDEC_TYPE, voff,
                                            "\"xid\": expected an integer");
                if (a2__decoder_parse_i64(t.ptr, t.len, &v) < 0 || v < 0 ||
                    v > UINT32_MAX)
                    return a2__decoder_fail(&d->err, A2_EDEC_RANGE, voff,
                                            "\"xid\": %.*s is out of range",
                                            (int)(t.len > 32 ? 32 : t.len),
                                            t.ptr);
                c->xid.null = false;
                c->xid.value = v;
                break;
            }
            return a2__decoder_wrong_type(
                    s, 1, voff, "\"xid\": expected an integer or null");
        case KEY_TIMESTAMP:
            if (member_string(s, "timestamp", true, &c->timestamp) < 0)
                return d->err.code;
            if (c->timestamp.ptr) {
                /* A transaction's messages all carry its commit time. */
                if (c->timestamp.len == d->ts_len &&
                    c->timestamp.len < sizeof d->ts_text &&
                    a2__decoder_same_bytes(c->timestamp.ptr, d->ts_text,
                                           d->ts_len)) {
                    c->time_us = d->ts_us;
                } else {
                    if (a2__decoder_parse_timestamp(c->timestamp.ptr,
                                                    c->timestamp.len,
                                                    &c->time_us) < 0)
                        return a2__decoder_fail(&d->err, A2_EDEC_VALUE, voff,
                                                "bad timestamp \"%.40s\"",
                                                c->timestamp.ptr);
                    if (c->timestamp.len < sizeof d->ts_text) {
                        memcpy(d->ts_text, c->timestamp.ptr, c->timestamp.len);
                        d->ts_len = c->timestamp.len;
                        d->ts_us = c->time_us;
                    }
                }
                c->has_time = true;
            }
            break;
        case KEY_LSN:
        case KEY_NEXTLSN: {
            const char *name = bit == KEY_LSN ? "lsn" : "nextlsn";
            uint64_t *dst = bit == KEY_LSN ? &c->lsn : &c->nextlsn;
            size_t save = d->used;
            if (member_string(s, name, false, &t) < 0)
                return d->err.code;
            if (a2__decoder_parse_lsn(t.ptr, t.len, dst) < 0)
                return a2__decoder_fail(&d->err, A2_EDEC_VALUE, voff,
                                        "\"%s\": bad LSN \"%.24s\"", name,
                                        t.ptr);
            d->used = save;
            if (bit == KEY_LSN)
                c->has_lsn = true;
            else
                c->has_nextlsn = true;
            break;
        }
        case KEY_SCHEMA:
        case KEY_TABLE:
        case KEY_PREFIX:
        case KEY_CONTENT: {
            const string_key *sk = string_key_of(bit);
            if (member_string(s, sk->name, false,
                              (a2_change_text *)((char *)c + sk->off)) < 0)
                return d->err.code;
            break;
        }
        case KEY_COLUMNS:
        case KEY_IDENTITY:
            if (a2__decoder_scan_columns(
                        s, bit == KEY_COLUMNS ? &d->cols : &d->ident,
                        bit == KEY_COLUMNS ? "columns" : "identity") < 0)
                return d->err.code;
            break;
        case KEY_TRANSACTIONAL:
            if (s->p < s->end && *s->p == 't') {
                c->transactional = true;
                r = a2__decoder_scan_literal(s, "true", 4);
            } else if (s->p < s->end && *s->p == 'f') {
                c->transactional = false;
                r = a2__decoder_scan_literal(s, "false", 5);
            } else {
                r = a2__decoder_wrong_type(
                        s, 1, voff, "\"transactional\": expected a boolean");
            }
            if (r < 0)
                return r;
            break;
        default: /* origin, pk, anything else: validated and skipped */
            if (a2__decoder_skip_value(s, 1) < 0)
                return d->err.code;
            break;
        }
    } while ((r = a2__decoder_next_member(s, '}')) == 1);
    return r;
}

/* 0 when seen holds bit, else A2_EDEC_MISSING with the message
 * "[<what>: ]key \"<key>\" is missing". */
static int need_key(a2_decoder *d, unsigned seen, unsigned bit, size_t off,
                    const char *what, const char *key)
{
    if (seen & bit)
        return 0;
    return a2__decoder_fail(&d->err, A2_EDEC_MISSING, off,
                            "%s%skey \"%s\" is missing", what,
                            *what ? ": " : "", key);
}

/* The checks per action once the object is read (off: the line's end), and
 * the rows it holds. */
static int finish(a2_decoder *d, unsigned seen, size_t off)
{
    a2_change *c = &d->change;

    if (need_key(d, seen, KEY_ACTION, off, "", "action") < 0)
        return d->err.code;
    switch (c->action) {
    case A2_ACTION_BEGIN:
    case A2_ACTION_COMMIT:
        return 0;
    case A2_ACTION_MESSAGE:
        if (need_key(d, seen, KEY_TRANSACTIONAL, off, "message",
                     "transactional") < 0 ||
            need_key(d, seen, KEY_PREFIX, off, "message", "prefix") < 0 ||
            need_key(d, seen, KEY_CONTENT, off, "message", "content") < 0)
            return d->err.code;
        return 0;
    default:
        break;
    }
    if (need_key(d, seen, KEY_TABLE, off, "", "table") < 0)
        return d->err.code;
    c->table = a2__decoder_table_of(c);
    if (c->action == A2_ACTION_TRUNCATE || c->table == A2_TABLE_OTHER)
        return 0;

    a2_row *nr = &d->rows[0], *orow = &d->rows[1];
    switch (c->action) {
    case A2_ACTION_INSERT:
        if (need_key(d, seen, KEY_COLUMNS, off, "insert", "columns") < 0 ||
            a2__decoder_fill_row(d, c->table, nr, &d->cols, NULL,
                                 A2__DECODER_ROW_INSERT) < 0)
            return d->err.code;
        c->new_row = nr;
        return 0;
    case A2_ACTION_UPDATE:
        if (need_key(d, seen, KEY_COLUMNS, off, "update", "columns") < 0 ||
            need_key(d, seen, KEY_IDENTITY, off, "update", "identity") < 0 ||
            a2__decoder_fill_row(d, c->table, nr, &d->cols, &d->ident,
                                 A2__DECODER_ROW_NEW) < 0 ||
            a2__decoder_fill_row(d, c->table, orow, &d->ident, NULL,
                                 A2__DECODER_ROW_OLD) < 0)
            return d->err.code;
        c->new_row = nr;
        c->old_row = orow;
        return 0;
    default: /* delete */
        if (need_key(d, seen, KEY_IDENTITY, off, "delete", "identity") < 0 ||
            a2__decoder_fill_row(d, c->table, orow, &d->ident, NULL,
                                 A2__DECODER_ROW_OLD) < 0)
            return d->err.code;
        c->old_row = orow;
        return 0;
    }
}

int a2__decoder_message(a2__decoder_scan *s)
{
    a2_decoder *d = s->d;
    unsigned seen = 0;

    if (parse_top(s, &seen) < 0)
        return d->err.code;
    a2__decoder_skip_ws(s);
    if (s->p != s->end)
        return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "trailing bytes after the object");
    return finish(d, seen, (size_t)(s->end - s->base));
}
