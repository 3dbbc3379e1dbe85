/*
 * wal2json format-version 2 decoder: one line in, one typed change out.
 *
 * A strict single-pass JSON scanner specialised to wal2json's shapes: it
 * validates the whole line (grammar, UTF-8, nesting) and keeps only what a2
 * needs. Strings are unescaped into one arena whose size is bounded by the
 * line's length (an unescaped string plus its NUL never exceeds its quoted
 * form), so a line never costs more than a fixed block plus its own length.
 */
#include "a2/decoder.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An arena larger than this is released by a2_decoder_reset. */
#define KEEP_ARENA ((size_t)1 << 20)

/* ---- column specs of the a2 tables ---- */

enum kind { K_TEXT, K_JSONB, K_I64, K_I32, K_BOOL };
#define F_NULL 1u /* nullable: the field is a2_change_int / NULL text */
#define F_KEY  2u /* primary-key column: always in identity */

typedef struct colspec {
    const char *name;
    size_t len;
    unsigned char kind;
    unsigned char flags;
    size_t off;
} colspec;

#define COL(type, field, k, f)                                                 \
    {                                                                          \
#field, sizeof(#field) - 1, k, f, offsetof(type, field)                \
    }

static const colspec event_cols[A2_EVENT_NCOLS] = {
        COL(a2_event_row, session_id, K_TEXT, F_KEY),
        COL(a2_event_row, idx, K_I64, F_KEY),
        COL(a2_event_row, event_type, K_TEXT, 0),
        COL(a2_event_row, payload, K_JSONB, 0),
        COL(a2_event_row, event_id, K_TEXT, 0),
        COL(a2_event_row, created_at, K_I64, 0),
        COL(a2_event_row, cause, K_JSONB, F_NULL),
};

static const colspec cursor_cols[A2_CURSOR_NCOLS] = {
        COL(a2_cursor_row, session_id, K_TEXT, F_KEY),
        COL(a2_cursor_row, consumer, K_TEXT, F_KEY),
        COL(a2_cursor_row, cursor_key, K_TEXT, F_KEY),
        COL(a2_cursor_row, epoch, K_I64, F_KEY),
        COL(a2_cursor_row, kind, K_TEXT, 0),
        COL(a2_cursor_row, lane, K_TEXT, F_NULL),
        COL(a2_cursor_row, position, K_I64, 0),
        COL(a2_cursor_row, head, K_I64, F_NULL),
        COL(a2_cursor_row, types, K_JSONB, F_NULL),
        COL(a2_cursor_row, attempt_count, K_I32, 0),
        COL(a2_cursor_row, first_claimed_at, K_I64, F_NULL),
        COL(a2_cursor_row, last_claimed_at, K_I64, F_NULL),
        COL(a2_cursor_row, claim_holder, K_TEXT, F_NULL),
        COL(a2_cursor_row, claim_expires_at, K_I64, F_NULL),
        COL(a2_cursor_row, failure_count, K_I32, 0),
        COL(a2_cursor_row, last_failed_at, K_I64, F_NULL),
        COL(a2_cursor_row, last_failed_attempt, K_I32, F_NULL),
        COL(a2_cursor_row, last_error, K_TEXT, F_NULL),
        COL(a2_cursor_row, failed_at, K_I64, F_NULL),
        COL(a2_cursor_row, completed_idx, K_I64, F_NULL),
        COL(a2_cursor_row, completed_attempt, K_I32, F_NULL),
        COL(a2_cursor_row, returned_event_ids, K_JSONB, F_NULL),
};

static const colspec clear_cols[A2_CLEAR_NCOLS] = {
        COL(a2_clear_row, session_id, K_TEXT, F_KEY),
        COL(a2_clear_row, clear_index, K_I64, 0),
};

static const colspec lane_event_cols[A2_LANE_EVENT_NCOLS] = {
        COL(a2_lane_event_row, session_id, K_TEXT, F_KEY),
        COL(a2_lane_event_row, consumer, K_TEXT, F_KEY),
        COL(a2_lane_event_row, lane, K_TEXT, F_KEY),
        COL(a2_lane_event_row, idx, K_I64, F_KEY),
        COL(a2_lane_event_row, done, K_BOOL, 0),
        COL(a2_lane_event_row, completed_attempt, K_I32, F_NULL),
        COL(a2_lane_event_row, returned_event_ids, K_JSONB, F_NULL),
};

static const colspec presence_cols[A2_PRESENCE_NCOLS] = {
        COL(a2_presence_row, ns, K_TEXT, F_KEY),
        COL(a2_presence_row, participant, K_TEXT, F_KEY),
        COL(a2_presence_row, field, K_TEXT, F_KEY),
        COL(a2_presence_row, value, K_JSONB, 0),
        COL(a2_presence_row, seen, K_I64, F_NULL),
        COL(a2_presence_row, at, K_I64, 0),
        COL(a2_presence_row, expires_at, K_I64, 0),
};

typedef struct tablespec {
    const char *name;
    size_t len;
    const colspec *cols;
    size_t ncols;
    bool full_identity; /* REPLICA IDENTITY FULL: old rows are complete */
} tablespec;

/* Indexed by a2_table. */
static const tablespec tables[] = {
        [A2_TABLE_NONE] = {"", 0, NULL, 0, false},
        [A2_TABLE_EVENTS] = {"a2_events", 9, event_cols, A2_EVENT_NCOLS, false},
        [A2_TABLE_CURSORS] = {"a2_cursors", 10, cursor_cols, A2_CURSOR_NCOLS,
                              true},
        [A2_TABLE_CLEARS] = {"a2_clears", 9, clear_cols, A2_CLEAR_NCOLS, false},
        [A2_TABLE_LANE_EVENTS] = {"a2_lane_events", 14, lane_event_cols,
                                  A2_LANE_EVENT_NCOLS, false},
        [A2_TABLE_PRESENCE] = {"a2_presence", 11, presence_cols,
                               A2_PRESENCE_NCOLS, false},
        [A2_TABLE_OTHER] = {"", 0, NULL, 0, false},
};

/* ---- the decoder ---- */

enum vtype { V_NULL, V_BOOL, V_NUM, V_STR, V_OTHER };

/* One element of a "columns" or "identity" array, as scanned. */
typedef struct centry {
    a2_change_text name; /* may point into the line: not NUL-terminated */
    unsigned char vt;
    bool b;
    bool num_int; /* V_NUM without fraction or exponent */
    bool fits;    /* num_int and within int64: iv is its value */
    int64_t iv;
    a2_change_text s; /* V_STR: unescaped; V_NUM: raw slice of the line */
    size_t voff;      /* offset of the value */
} centry;

typedef struct colarray {
    centry e[A2_DECODER_MAX_COLUMNS];
    int map[A2_CURSOR_NCOLS]; /* spec column -> entry (-1: absent), once indexed
                               */
    bool indexed;
    size_t n;
    size_t off; /* offset of the array */
    bool seen;
} colarray;

struct a2_decoder {
    size_t max_line;
    a2_decoder_error err;
    char *buf; /* string arena */
    size_t cap;
    size_t used;
    a2_change change;
    a2_row rows[2]; /* new, old */
    colarray cols;
    colarray ident;
    /* The last timestamp text parsed, and its value. */
    char ts_text[48];
    size_t ts_len;
    int64_t ts_us;
};

typedef struct scan {
    a2_decoder *d;
    const unsigned char *base;
    const unsigned char *p;
    const unsigned char *end;
} scan;

__attribute__((format(printf, 4, 5))) static int
fail(a2_decoder_error *err, int code, size_t off, const char *fmt, ...)
{
    va_list ap;
    if (!err)
        return code;
    err->code = code;
    err->offset = off;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

#define OFF(s) ((size_t)((s)->p - (s)->base))

static inline void skip_ws(scan *s)
{
    if (s->p<s->end && * s->p> ' ')
        return; /* wal2json writes no whitespace */
    while (s->p < s->end &&
           (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

/* Consumes the n bytes of lit when the input starts with them: the first
 * 8 as one word (lit is a constant, so this folds), the rest bytewise. */
static inline bool starts(scan *s, const char *lit, size_t n)
{
    size_t i = 0;
    if ((size_t)(s->end - s->p) < n)
        return false;
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s->p, 8);
        memcpy(&b, lit, 8);
        if (a != b)
            return false;
        i = 8;
    }
    for (; i < n; i++)
        if (s->p[i] != (unsigned char)lit[i])
            return false;
    s->p += n;
    return true;
}

static inline bool same_bytes(const char *a, const char *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return false;
    }
    for (; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static int expect(scan *s, unsigned char c, const char *what)
{
    skip_ws(s);
    if (s->p >= s->end)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                    "unexpected end of line, expected %s", what);
    if (*s->p != c)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "expected %s", what);
    s->p++;
    return 0;
}

/* Hex digit values, -1 for any other byte. */
static const signed char hexdigit[256] = {
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0,  1,  2,  3,  4,  5,
        6,  7,  8,  9,  -1, -1, -1, -1, -1, -1, -1, 10, 11, 12, 13, 14, 15, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1,
};

static inline int hexval(unsigned char c)
{
    return hexdigit[c];
}

static int read_u4(scan *s, const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    if (s->end - p < 4)
        return fail(&s->d->err, A2_EDEC_SYNTAX, (size_t)(p - s->base),
                    "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return fail(&s->d->err, A2_EDEC_SYNTAX, (size_t)(p - s->base),
                        "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* Bytes a string holds as they are: printable ASCII except '"' and '\\'. */
static const unsigned char plain[256] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

#define ONES  UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Nonzero when one of the 8 bytes of v is not plain. Each term is the
 * classic exact-presence test: a byte below 0x20 (hasless), a '"' or a
 * '\\' (haszero of v xor the byte), a byte at or above 0x80 (its high bit). */
static inline uint64_t not_plain8(uint64_t v)
{
    uint64_t q = v ^ (ONES * '"');
    uint64_t b = v ^ (ONES * '\\');
    return (((v - ONES * 0x20) & ~v) | ((q - ONES) & ~q) | ((b - ONES) & ~b) |
            v) &
           HIGHS;
}

/* The end of the run of plain bytes at p: 8 bytes at a time, then bytewise. */
static inline const unsigned char *plain_run(const unsigned char *p,
                                             const unsigned char *end)
{
    while (end - p >= 8) {
        uint64_t v, m;
        memcpy(&v, p, 8);
        m = not_plain8(v);
        if (m) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            /* The tests have no false positives below the first true hit,
             * so the lowest flagged byte is the first non-plain one. */
            return p + (__builtin_ctzll(m) >> 3);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && plain[*p])
        p++;
    return p;
}

/*
 * Scans the string at s->p (a '"'), unescaping it into the arena. The
 * result is NUL-terminated. keep == false gives the arena space back, and a
 * string without escapes or non-ASCII bytes is then not copied at all: out
 * points into the line (not NUL-terminated; for comparing only).
 */
static int scan_string(scan *s, a2_change_text *out, bool keep)
{
    a2_decoder *d = s->d;
    const unsigned char *p = s->p + 1;
    const unsigned char *end = s->end;
    char *start = d->buf + d->used;
    char *dst = start;

    /* The string, unescaped, fits in what is left of the line; the arena
     * holds the line's length, and its use never passes the bytes scanned. */
    if (d->used + (size_t)(end - s->p) > d->cap)
        return fail(&d->err, A2_EDEC_NOMEM, (size_t)(s->p - s->base),
                    "internal: string arena bound exceeded");

    /* Fast path: a run of plain bytes up to the closing quote. */
    p = plain_run(p, end);
    size_t n = (size_t)(p - (s->p + 1));
    if (p < end && *p == '"') {
        if (keep) {
            memcpy(start, s->p + 1, n);
            start[n] = '\0';
            out->ptr = start;
            d->used += n + 1;
        } else {
            out->ptr = (const char *)s->p + 1;
        }
        out->len = n;
        s->p = p + 1;
        return 0;
    }
    memcpy(dst, s->p + 1, n);
    dst += n;

    for (;;) {
        const unsigned char *run = p;
        p = plain_run(p, end);
        memcpy(dst, run, (size_t)(p - run));
        dst += p - run;
        if (p >= end)
            return fail(&d->err, A2_EDEC_SYNTAX, (size_t)(s->p - s->base),
                        "unterminated string");
        unsigned c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            if (end - p < 2)
                return fail(&d->err, A2_EDEC_SYNTAX, (size_t)(p - s->base),
                            "unterminated string");
            unsigned e = p[1];
            switch (e) {
            case '"':
            case '\\':
            case '/':
                *dst++ = (char)e;
                p += 2;
                continue;
            case 'b':
                *dst++ = '\b';
                p += 2;
                continue;
            case 'f':
                *dst++ = '\f';
                p += 2;
                continue;
            case 'n':
                *dst++ = '\n';
                p += 2;
                continue;
            case 'r':
                *dst++ = '\r';
                p += 2;
                continue;
            case 't':
                *dst++ = '\t';
                p += 2;
                continue;
            case 'u':
                break;
            default:
                return fail(&d->err, A2_EDEC_SYNTAX, (size_t)(p - s->base),
                            "bad escape in string");
            }
            unsigned cp;
            size_t at = (size_t)(p - s->base);
            if (read_u4(s, p + 2, &cp) < 0)
                return d->err.code;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(&d->err, A2_EDEC_UTF8, at,
                            "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return fail(&d->err, A2_EDEC_UTF8, at,
                                "lone high surrogate in \\u escape");
                if (read_u4(s, p + 2, &lo) < 0)
                    return d->err.code;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(&d->err, A2_EDEC_UTF8, at,
                                "lone high surrogate in \\u escape");
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                return fail(&d->err, A2_EDEC_UTF8, at, "\\u0000 in string");
            if (cp < 0x80)
                *dst++ = (char)cp;
            else if (cp < 0x800) {
                *dst++ = (char)(0xC0 | cp >> 6);
                *dst++ = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *dst++ = (char)(0xE0 | cp >> 12);
                *dst++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *dst++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *dst++ = (char)(0xF0 | cp >> 18);
                *dst++ = (char)(0x80 | (cp >> 12 & 0x3F));
                *dst++ = (char)(0x80 | (cp >> 6 & 0x3F));
                *dst++ = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        }
        if (c < 0x20)
            return fail(&d->err, A2_EDEC_SYNTAX, (size_t)(p - s->base),
                        "control character in string");
        size_t u = utf8_len(p, end);
        if (u == 0)
            return fail(&d->err, A2_EDEC_UTF8, (size_t)(p - s->base),
                        "invalid UTF-8 in string");
        memcpy(dst, p, u);
        dst += u;
        p += u;
    }
    *dst = '\0';
    out->ptr = start;
    out->len = (size_t)(dst - start);
    if (keep)
        d->used += out->len + 1;
    s->p = p + 1;
    return 0;
}

/*
 * Scans a JSON number at s->p; out is the raw slice. When iv is not NULL and
 * the number is an integer, *iv is its value and *fits says whether it fits
 * an int64 (an integer of more than 19 digits never does).
 */
static int scan_number(scan *s, a2_change_text *out, bool *is_int, int64_t *iv,
                       bool *fits)
{
    const unsigned char *p = s->p;
    const unsigned char *end = s->end;
    bool integer = true, neg = false;
    uint64_t v = 0;
    const unsigned char *digits;
    if (p < end && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "bad number");
    digits = p;
    if (*p == '0')
        p++;
    else
        while (p < end && *p >= '0' && *p <= '9') {
            v = v * 10 +
                (uint64_t)(*p - '0'); /* wraps past 19 digits: unused then */
            p++;
        }
    if (iv) {
        *fits = p - digits <= 19 && v <= (uint64_t)INT64_MAX + (neg ? 1 : 0);
        *iv = !*fits                         ? 0
              : !neg                         ? (int64_t)v
              : v == (uint64_t)INT64_MAX + 1 ? INT64_MIN
                                             : -(int64_t)v;
    }
    if (p < end && *p == '.') {
        integer = false;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "bad number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = false;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "bad number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    out->ptr = (const char *)s->p;
    out->len = (size_t)(p - s->p);
    *is_int = integer;
    s->p = p;
    return 0;
}

static int scan_literal(scan *s, const char *lit, size_t n)
{
    if (!starts(s, lit, n))
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "unexpected byte");
    return 0;
}

/* Validates and skips any value; depth is the depth of its container. */
static int skip_value(scan *s, int depth)
{
    a2_change_text t;
    bool is_int;
    skip_ws(s);
    if (s->p >= s->end)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                    "unexpected end of line, expected a value");
    switch (*s->p) {
    case '"':
        return scan_string(s, &t, false);
    case 't':
        return scan_literal(s, "true", 4);
    case 'f':
        return scan_literal(s, "false", 5);
    case 'n':
        return scan_literal(s, "null", 4);
    case '{':
    case '[': {
        unsigned char close = *s->p == '{' ? '}' : ']';
        bool obj = *s->p == '{';
        if (depth + 1 > A2_DECODER_MAX_DEPTH)
            return fail(&s->d->err, A2_EDEC_DEPTH, OFF(s),
                        "nesting deeper than %d", A2_DECODER_MAX_DEPTH);
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            return 0;
        }
        for (;;) {
            if (obj) {
                skip_ws(s);
                if (s->p >= s->end || *s->p != '"')
                    return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                                "expected a key");
                if (scan_string(s, &t, false) < 0 || expect(s, ':', "':'") < 0)
                    return s->d->err.code;
            }
            if (skip_value(s, depth + 1) < 0)
                return s->d->err.code;
            skip_ws(s);
            if (s->p >= s->end)
                return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                            "unexpected end of line");
            if (*s->p == ',') {
                s->p++;
                continue;
            }
            if (*s->p == close) {
                s->p++;
                return 0;
            }
            return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                        "expected ',' or '%c'", close);
        }
    }
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return scan_number(s, &t, &is_int, NULL, NULL);
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "unexpected byte");
    }
}

/*
 * Scans the key at s->p and the ':' after it. The key is unescaped into the
 * arena and given back at once: it is only compared.
 */
static int scan_key(scan *s, a2_change_text *key)
{
    skip_ws(s);
    if (s->p >= s->end)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                    "unexpected end of line, expected a key");
    if (*s->p != '"')
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "expected a key");
    /* Fast path: a plain key and its ':' right after it. */
    const unsigned char *q = plain_run(s->p + 1, s->end);
    if (s->end - q >= 2 && q[0] == '"' && q[1] == ':') {
        key->ptr = (const char *)s->p + 1;
        key->len = (size_t)(q - (s->p + 1));
        s->p = q + 2;
        return 0;
    }
    if (scan_string(s, key, false) < 0)
        return s->d->err.code;
    return expect(s, ':', "':'");
}

/* After a member: ',' (returns 1) or the closing byte (returns 0). */
static int next_member(scan *s, unsigned char close)
{
    skip_ws(s);
    if (s->p >= s->end)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                    "unexpected end of line");
    if (*s->p == ',') {
        s->p++;
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s), "expected ',' or '%c'",
                close);
}

static bool key_is(const a2_change_text *k, const char *lit)
{
    size_t n = strlen(lit);
    return k->len == n && memcmp(k->ptr, lit, n) == 0;
}

/* Scans a column's value (any JSON value) into ce. */
static int scan_cvalue(scan *s, centry *ce)
{
    ce->voff = OFF(s);
    if (s->p >= s->end)
        return fail(&s->d->err, A2_EDEC_SYNTAX, OFF(s),
                    "unexpected end of line, expected a value");
    switch (*s->p) {
    case '"':
        ce->vt = V_STR;
        return scan_string(s, &ce->s, true);
    case 'n':
        ce->vt = V_NULL;
        return scan_literal(s, "null", 4);
    case 't':
        ce->vt = V_BOOL;
        ce->b = true;
        return scan_literal(s, "true", 4);
    case 'f':
        ce->vt = V_BOOL;
        ce->b = false;
        return scan_literal(s, "false", 5);
    case '{':
    case '[':
        ce->vt = V_OTHER;
        return skip_value(s, 3);
    default:
        ce->vt = V_NUM;
        return scan_number(s, &ce->s, &ce->num_int, &ce->iv, &ce->fits);
    }
}

/* One column object {"name":..,"type":..,"value":..}; depth 3. */
static int scan_column(scan *s, centry *ce)
{
    a2_change_text key;
    bool have_name = false, have_value = false;
    size_t start = OFF(s);
    int r;

    ce->name.ptr = NULL;
    ce->name.len = 0;
    if (expect(s, '{', "'{' (a column)") < 0)
        return s->d->err.code;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        goto done;
    }
    do {
        size_t koff;
        int kid;
        skip_ws(s);
        koff = OFF(s);
        /* wal2json's own keys, as it writes them, without unescaping. */
        if (starts(s, "\"name\":", 7)) {
            kid = 1;
        } else if (starts(s, "\"value\":", 8)) {
            kid = 2;
        } else if (starts(s, "\"type\":\"", 8)) {
            s->p--; /* the type's opening quote */
            kid = 0;
        } else {
            if (scan_key(s, &key) < 0)
                return s->d->err.code;
            kid = key_is(&key, "name") ? 1 : key_is(&key, "value") ? 2 : 0;
        }
        skip_ws(s);
        if (kid == 1) {
            if (have_name)
                return fail(&s->d->err, A2_EDEC_VALUE, koff,
                            "duplicate key \"name\"");
            if (s->p >= s->end || *s->p != '"') {
                size_t voff = OFF(s);
                if (skip_value(s, 3) < 0)
                    return s->d->err.code;
                return fail(&s->d->err, A2_EDEC_TYPE, voff,
                            "column \"name\": expected a string");
            }
            if (scan_string(s, &ce->name, true) < 0)
                return s->d->err.code;
            have_name = true;
        } else if (kid == 2) {
            if (have_value)
                return fail(&s->d->err, A2_EDEC_VALUE, koff,
                            "duplicate key \"value\"");
            have_value = true;
            if (scan_cvalue(s, ce) < 0)
                return s->d->err.code;
        } else if (skip_value(s, 3) < 0) {
            return s->d->err.code;
        }
    } while ((r = next_member(s, '}')) == 1);
    if (r < 0)
        return r;
done:
    if (!have_name)
        return fail(&s->d->err, A2_EDEC_MISSING, start,
                    "column without \"name\"");
    if (!have_value)
        return fail(&s->d->err, A2_EDEC_MISSING, start,
                    "column \"%.*s\" without \"value\"",
                    (int)(ce->name.len > 64 ? 64 : ce->name.len), ce->name.ptr);
    return 0;
}

/*
 * The column exactly as wal2json writes it, {"name":"..","type":"..",
 * "value":..} or, with include-types off, {"name":"..","value":..}, with
 * plain (unescaped ASCII) name and type. Returns 1 when it matched, 0 to
 * take the generic path from the same place, or an error.
 */
static int scan_column_fast(scan *s, centry *ce)
{
    const unsigned char *start = s->p, *p, *q;
    size_t used = s->d->used;
    if (!starts(s, "{\"name\":\"", 9))
        return 0;
    p = s->p;
    q = plain_run(p, s->end);
    if (q >= s->end || *q != '"')
        goto generic;
    ce->name.ptr = (const char *)p;
    ce->name.len = (size_t)(q - p);
    s->p = q + 1;
    if (starts(s, ",\"type\":\"", 9)) {
        q = plain_run(s->p, s->end);
        if (q >= s->end || *q != '"')
            goto generic;
        s->p = q + 1;
    }
    if (!starts(s, ",\"value\":", 9))
        goto generic;
    if (scan_cvalue(s, ce) < 0)
        return s->d->err.code;
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 1;
    }
generic:
    /* Give back what the value kept: the generic path scans it again, and
     * the arena's bound (its use never passes the bytes scanned) needs each
     * string kept once. */
    s->p = start;
    s->d->used = used;
    memset(ce, 0, sizeof *ce);
    return 0;
}

static int scan_columns(scan *s, colarray *ca, const char *what)
{
    int r;
    ca->off = OFF(s);
    ca->n = 0;
    ca->seen = true;
    if (s->p >= s->end || *s->p != '[') {
        if (skip_value(s, 1) < 0)
            return s->d->err.code;
        return fail(&s->d->err, A2_EDEC_TYPE, ca->off,
                    "\"%s\": expected an array", what);
    }
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    do {
        if (ca->n >= A2_DECODER_MAX_COLUMNS)
            return fail(&s->d->err, A2_EDEC_VALUE, OFF(s),
                        "\"%s\": more than %d columns", what,
                        A2_DECODER_MAX_COLUMNS);
        centry *ce = &ca->e[ca->n]; /* every field is set before it is read */
        skip_ws(s);
        int fast = scan_column_fast(s, ce);
        if (fast < 0 || (fast == 0 && scan_column(s, ce) < 0))
            return s->d->err.code;
        ca->n++;
    } while ((r = next_member(s, ']')) == 1);
    return r;
}

/* ---- values ---- */

/* Parses an integer slice (a JSON integer: -?digits) exactly; 0, or
 * A2_EDEC_RANGE when it does not fit an int64. */
static int parse_i64(const char *p, size_t n, int64_t *out)
{
    bool neg = n > 0 && p[0] == '-';
    size_t i = neg ? 1 : 0;
    uint64_t v = 0;
    /* Up to 19 digits fit in a uint64 without overflow (10^19 < 2^64). */
    if (n - i > 19)
        return A2_EDEC_RANGE;
    for (; i < n; i++)
        v = v * 10 + (uint64_t)(p[i] - '0');
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
        return A2_EDEC_RANGE;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

static int parse_lsn(const char *p, size_t n, uint64_t *out)
{
    uint64_t hi = 0, lo = 0;
    size_t i = 0, digits = 0;
    for (; i < n && p[i] != '/'; i++) {
        int h = hexval((unsigned char)p[i]);
        if (h < 0 || ++digits > 8)
            return -1;
        hi = hi << 4 | (uint64_t)h;
    }
    if (digits == 0 || i >= n)
        return -1;
    digits = 0;
    for (i++; i < n; i++) {
        int h = hexval((unsigned char)p[i]);
        if (h < 0 || ++digits > 8)
            return -1;
        lo = lo << 4 | (uint64_t)h;
    }
    if (digits == 0)
        return -1;
    *out = hi << 32 | lo;
    return 0;
}

static int digits_at(const char *p, size_t n, size_t *i, size_t count, int *out)
{
    int v = 0;
    if (*i + count > n)
        return -1;
    for (size_t k = 0; k < count; k++) {
        char c = p[*i + k];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *i += count;
    *out = v;
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, int m, int dd)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/*
 * PostgreSQL's timestamptz text in ISO DateStyle:
 * "YYYY-MM-DD HH:MM:SS[.ffffff]{+|-}HH[:MM[:SS]]" -> Unix microseconds.
 */
static int parse_timestamp(const char *p, size_t n, int64_t *out)
{
    size_t i = 0;
    int y, mo, dd, h, mi, sec, oh = 0, om = 0, os = 0;
    int64_t frac = 0;
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (digits_at(p, n, &i, 4, &y) < 0 || i >= n || p[i++] != '-' ||
        digits_at(p, n, &i, 2, &mo) < 0 || i >= n || p[i++] != '-' ||
        digits_at(p, n, &i, 2, &dd) < 0 || i >= n || p[i++] != ' ' ||
        digits_at(p, n, &i, 2, &h) < 0 || i >= n || p[i++] != ':' ||
        digits_at(p, n, &i, 2, &mi) < 0 || i >= n || p[i++] != ':' ||
        digits_at(p, n, &i, 2, &sec) < 0)
        return -1;
    if (i < n && p[i] == '.') {
        int scale = 0;
        i++;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            if (++scale > 6)
                return -1;
            frac = frac * 10 + (p[i] - '0');
            i++;
        }
        if (scale == 0)
            return -1;
        for (; scale < 6; scale++)
            frac *= 10;
    }
    if (i >= n || (p[i] != '+' && p[i] != '-'))
        return -1;
    int sign = p[i++] == '-' ? -1 : 1;
    if (digits_at(p, n, &i, 2, &oh) < 0)
        return -1;
    if (i < n && p[i] == ':') {
        i++;
        if (digits_at(p, n, &i, 2, &om) < 0)
            return -1;
        if (i < n && p[i] == ':') {
            i++;
            if (digits_at(p, n, &i, 2, &os) < 0)
                return -1;
        }
    }
    if (i != n || mo < 1 || mo > 12 || dd < 1 || dd > mdays[mo - 1] || h > 23 ||
        mi > 59 || sec > 60 || oh > 15 || om > 59 || os > 59)
        return -1;
    if (mo == 2 && dd == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return -1;
    int64_t secs =
            days_from_civil(y, mo, dd) * 86400 + h * 3600 + mi * 60 + sec;
    secs -= sign * (oh * 3600 + om * 60 + os);
    *out = secs * 1000000 + frac;
    return 0;
}

/* ---- rows ---- */

/* The spec index of column `name`; wal2json sends columns in table order,
 * so the one after the previous match (*guess) is tried first. */
static int find_col(const tablespec *t, const a2_change_text *name,
                    size_t *guess)
{
    size_t g = *guess;
    if (g < t->ncols && t->cols[g].len == name->len &&
        same_bytes(t->cols[g].name, name->ptr, name->len)) {
        *guess = g + 1;
        return (int)g;
    }
    for (size_t i = 0; i < t->ncols; i++)
        if (t->cols[i].len == name->len &&
            same_bytes(t->cols[i].name, name->ptr, name->len)) {
            *guess = i + 1;
            return (int)i;
        }
    return -1;
}

/* Maps each known column to its entry in ca (-1 when absent), once. */
static int index_cols(a2_decoder *d, const tablespec *t, colarray *ca)
{
    int *map = ca->map;
    size_t guess = 0;
    if (ca->indexed)
        return 0;
    ca->indexed = true;
    for (size_t i = 0; i < t->ncols; i++)
        map[i] = -1;
    for (size_t k = 0; k < ca->n; k++) {
        int c = find_col(t, &ca->e[k].name, &guess);
        if (c < 0)
            continue; /* a column a2 does not know: skipped */
        if (map[c] >= 0)
            return fail(&d->err, A2_EDEC_VALUE, ca->e[k].voff,
                        "duplicate column \"%s\" in %s", t->cols[c].name,
                        t->name);
        map[c] = (int)k;
    }
    return 0;
}

static int set_field(a2_decoder *d, const tablespec *t, const colspec *c,
                     const centry *ce, a2_row *row)
{
    char *field = (char *)row + c->off;
    bool nullable = c->flags & F_NULL;

    if (ce->vt == V_NULL) {
        if (!nullable)
            return fail(&d->err, A2_EDEC_TYPE, ce->voff,
                        "column \"%s\" of %s: null in a not-null column",
                        c->name, t->name);
        if (c->kind == K_TEXT || c->kind == K_JSONB) {
            a2_change_text nul = {NULL, 0};
            memcpy(field, &nul, sizeof nul);
        } else {
            a2_change_int nul = {0, true};
            memcpy(field, &nul, sizeof nul);
        }
        return 0;
    }
    switch (c->kind) {
    case K_TEXT:
    case K_JSONB:
        if (ce->vt != V_STR)
            return fail(&d->err, A2_EDEC_TYPE, ce->voff,
                        "column \"%s\" of %s: expected a string", c->name,
                        t->name);
        memcpy(field, &ce->s, sizeof ce->s);
        return 0;
    case K_I64:
    case K_I32: {
        int64_t v;
        if (ce->vt != V_NUM || !ce->num_int)
            return fail(&d->err, A2_EDEC_TYPE, ce->voff,
                        "column \"%s\" of %s: expected an integer", c->name,
                        t->name);
        v = ce->iv;
        if (!ce->fits || (c->kind == K_I32 && (v < INT32_MIN || v > INT32_MAX)))
            return fail(&d->err, A2_EDEC_RANGE, ce->voff,
                        "column \"%s\" of %s: %.*s is out of range for %s",
                        c->name, t->name,
                        (int)(ce->s.len > 40 ? 40 : ce->s.len), ce->s.ptr,
                        c->kind == K_I32 ? "integer" : "bigint");
        if (nullable) {
            a2_change_int iv = {v, false};
            memcpy(field, &iv, sizeof iv);
        } else {
            memcpy(field, &v, sizeof v);
        }
        return 0;
    }
    default: /* K_BOOL */
        if (ce->vt != V_BOOL)
            return fail(&d->err, A2_EDEC_TYPE, ce->voff,
                        "column \"%s\" of %s: expected a boolean", c->name,
                        t->name);
        memcpy(field, &ce->b, sizeof ce->b);
        return 0;
    }
}

enum rowmode {
    ROW_INSERT, /* every column required */
    ROW_NEW,    /* update: columns, then identity; unchanged TOAST allowed */
    ROW_OLD     /* identity: keys required (all when FULL) */
};

static int fill_row(a2_decoder *d, const tablespec *t, a2_row *row,
                    colarray *prim, colarray *fb, enum rowmode mode)
{
    const int *pmap = prim->map, *fmap = fb ? fb->map : NULL;
    uint32_t present = 0;

    memset(row, 0, sizeof *row);
    if (index_cols(d, t, prim) < 0)
        return d->err.code;
    if (fb && index_cols(d, t, fb) < 0)
        return d->err.code;
    for (size_t i = 0; i < t->ncols; i++) {
        const colspec *c = &t->cols[i];
        const centry *ce = NULL;
        if (pmap[i] >= 0)
            ce = &prim->e[pmap[i]];
        else if (fb && fmap[i] >= 0)
            ce = &fb->e[fmap[i]];
        if (!ce) {
            bool required;
            if (mode == ROW_INSERT)
                required = true;
            else if (mode == ROW_NEW)
                required = (c->flags & F_KEY) ||
                           (c->kind != K_TEXT && c->kind != K_JSONB);
            else
                required = (c->flags & F_KEY) || t->full_identity;
            if (required)
                return fail(&d->err, A2_EDEC_MISSING, prim->off,
                            "%s of %s: column \"%s\" is missing",
                            mode == ROW_OLD ? "identity" : "columns", t->name,
                            c->name);
            continue;
        }
        if (set_field(d, t, c, ce, row) < 0)
            return d->err.code;
        present |= 1u << i;
    }
    /* present is the first member of every row struct. */
    memcpy(row, &present, sizeof present);
    return 0;
}

/* ---- top level ---- */

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

#define IS(lit) same_bytes(k->ptr, lit, sizeof(lit) - 1)

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
static int member_string(scan *s, const char *key, bool nullable,
                         a2_change_text *out)
{
    size_t voff = OFF(s);
    if (s->p < s->end && *s->p == '"')
        return scan_string(s, out, true);
    if (nullable && s->p < s->end && *s->p == 'n') {
        out->ptr = NULL;
        out->len = 0;
        return scan_literal(s, "null", 4);
    }
    if (skip_value(s, 1) < 0)
        return s->d->err.code;
    return fail(&s->d->err, A2_EDEC_TYPE, voff, "\"%s\": expected a string%s",
                key, nullable ? " or null" : "");
}

static int parse_top(scan *s, unsigned *seen)
{
    a2_decoder *d = s->d;
    a2_change *c = &d->change;
    a2_change_text key, t;
    int r;

    skip_ws(s);
    if (s->p >= s->end)
        return fail(&d->err, A2_EDEC_SYNTAX, OFF(s), "empty line");
    if (*s->p != '{')
        return fail(&d->err, A2_EDEC_TYPE, OFF(s), "expected a JSON object");
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    do {
        size_t koff = OFF(s);
        unsigned bit = 0;
        if (scan_key(s, &key) < 0)
            return d->err.code;
        skip_ws(s);
        bit = top_key(&key);
        if (bit & *seen)
            return fail(&d->err, A2_EDEC_VALUE, koff, "duplicate key \"%.*s\"",
                        (int)(key.len > 32 ? 32 : key.len), key.ptr);
        *seen |= bit;
        size_t voff = OFF(s);
        switch (bit) {
        case KEY_ACTION:
            if (member_string(s, "action", false, &t) < 0)
                return d->err.code;
            if (t.len != 1 || !strchr("BCIUDMT", t.ptr[0]))
                return fail(&d->err, A2_EDEC_VALUE, voff,
                            "unknown action \"%.16s\"", t.ptr);
            c->action = (a2_action)t.ptr[0];
            break;
        case KEY_XID:
            if (s->p < s->end && *s->p == 'n') {
                if (scan_literal(s, "null", 4) < 0)
                    return d->err.code;
                c->xid.null = true;
                c->xid.value = 0;
                break;
            }
            if (s->p < s->end &&
                (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
                bool is_int;
                int64_t v;
                if (scan_number(s, &t, &is_int, NULL, NULL) < 0)
                    return d->err.code;
                if (!is_int)
                    return fail(&d->err, A2_EDEC_TYPE, voff,
                                "\"xid\": expected an integer");
                if (parse_i64(t.ptr, t.len, &v) < 0 || v < 0 || v > UINT32_MAX)
                    return fail(&d->err, A2_EDEC_RANGE, voff,
                                "\"xid\": %.*s is out of range",
                                (int)(t.len > 32 ? 32 : t.len), t.ptr);
                c->xid.null = false;
                c->xid.value = v;
                break;
            }
            if (skip_value(s, 1) < 0)
                return d->err.code;
            return fail(&d->err, A2_EDEC_TYPE, voff,
                        "\"xid\": expected an integer or null");
        case KEY_TIMESTAMP:
            if (member_string(s, "timestamp", true, &c->timestamp) < 0)
                return d->err.code;
            if (c->timestamp.ptr) {
                /* A transaction's messages all carry its commit time. */
                if (c->timestamp.len == d->ts_len &&
                    c->timestamp.len < sizeof d->ts_text &&
                    same_bytes(c->timestamp.ptr, d->ts_text, d->ts_len)) {
                    c->time_us = d->ts_us;
                } else {
                    if (parse_timestamp(c->timestamp.ptr, c->timestamp.len,
                                        &c->time_us) < 0)
                        return fail(&d->err, A2_EDEC_VALUE, voff,
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
            if (parse_lsn(t.ptr, t.len, dst) < 0)
                return fail(&d->err, A2_EDEC_VALUE, voff,
                            "\"%s\": bad LSN \"%.24s\"", name, t.ptr);
            d->used = save;
            if (bit == KEY_LSN)
                c->has_lsn = true;
            else
                c->has_nextlsn = true;
            break;
        }
        case KEY_SCHEMA:
            if (member_string(s, "schema", false, &c->schema) < 0)
                return d->err.code;
            break;
        case KEY_TABLE:
            if (member_string(s, "table", false, &c->table_name) < 0)
                return d->err.code;
            break;
        case KEY_COLUMNS:
            if (scan_columns(s, &d->cols, "columns") < 0)
                return d->err.code;
            break;
        case KEY_IDENTITY:
            if (scan_columns(s, &d->ident, "identity") < 0)
                return d->err.code;
            break;
        case KEY_TRANSACTIONAL:
            if (s->p < s->end && *s->p == 't') {
                c->transactional = true;
                r = scan_literal(s, "true", 4);
            } else if (s->p < s->end && *s->p == 'f') {
                c->transactional = false;
                r = scan_literal(s, "false", 5);
            } else {
                if (skip_value(s, 1) < 0)
                    return d->err.code;
                r = fail(&d->err, A2_EDEC_TYPE, voff,
                         "\"transactional\": expected a boolean");
            }
            if (r < 0)
                return r;
            break;
        case KEY_PREFIX:
            if (member_string(s, "prefix", false, &c->prefix) < 0)
                return d->err.code;
            break;
        case KEY_CONTENT:
            if (member_string(s, "content", false, &c->content) < 0)
                return d->err.code;
            break;
        default: /* origin, pk, anything else: validated and skipped */
            if (skip_value(s, 1) < 0)
                return d->err.code;
            break;
        }
    } while ((r = next_member(s, '}')) == 1);
    return r;
}

static a2_table table_of(const a2_change *c)
{
    if (c->schema.ptr &&
        !(c->schema.len == 6 && memcmp(c->schema.ptr, "public", 6) == 0))
        return A2_TABLE_OTHER;
    for (int t = A2_TABLE_EVENTS; t < A2_TABLE_OTHER; t++)
        if (tables[t].len == c->table_name.len &&
            memcmp(tables[t].name, c->table_name.ptr, c->table_name.len) == 0)
            return (a2_table)t;
    return A2_TABLE_OTHER;
}

static int finish(a2_decoder *d, unsigned seen, size_t end_off)
{
    a2_change *c = &d->change;

    if (!(seen & KEY_ACTION))
        return fail(&d->err, A2_EDEC_MISSING, end_off,
                    "key \"action\" is missing");
    switch (c->action) {
    case A2_ACTION_BEGIN:
    case A2_ACTION_COMMIT:
        return 0;
    case A2_ACTION_MESSAGE:
        if (!(seen & KEY_TRANSACTIONAL))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "message: key \"transactional\" is missing");
        if (!(seen & KEY_PREFIX))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "message: key \"prefix\" is missing");
        if (!(seen & KEY_CONTENT))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "message: key \"content\" is missing");
        return 0;
    default:
        break;
    }
    if (!(seen & KEY_TABLE))
        return fail(&d->err, A2_EDEC_MISSING, end_off,
                    "key \"table\" is missing");
    c->table = table_of(c);
    if (c->action == A2_ACTION_TRUNCATE || c->table == A2_TABLE_OTHER)
        return 0;

    const tablespec *t = &tables[c->table];
    a2_row *nr = &d->rows[0], *orow = &d->rows[1];
    switch (c->action) {
    case A2_ACTION_INSERT:
        if (!(seen & KEY_COLUMNS))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "insert: key \"columns\" is missing");
        if (fill_row(d, t, nr, &d->cols, NULL, ROW_INSERT) < 0)
            return d->err.code;
        c->new_row = nr;
        return 0;
    case A2_ACTION_UPDATE:
        if (!(seen & KEY_COLUMNS))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "update: key \"columns\" is missing");
        if (!(seen & KEY_IDENTITY))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "update: key \"identity\" is missing");
        if (fill_row(d, t, nr, &d->cols, &d->ident, ROW_NEW) < 0 ||
            fill_row(d, t, orow, &d->ident, NULL, ROW_OLD) < 0)
            return d->err.code;
        c->new_row = nr;
        c->old_row = orow;
        return 0;
    default: /* delete */
        if (!(seen & KEY_IDENTITY))
            return fail(&d->err, A2_EDEC_MISSING, end_off,
                        "delete: key \"identity\" is missing");
        if (fill_row(d, t, orow, &d->ident, NULL, ROW_OLD) < 0)
            return d->err.code;
        c->old_row = orow;
        return 0;
    }
}

a2_decoder *a2_decoder_new(void)
{
    a2_decoder *d = calloc(1, sizeof *d);
    if (d)
        d->max_line = A2_DECODER_MAX_LINE;
    return d;
}

void a2_decoder_free(a2_decoder *d)
{
    if (!d)
        return;
    free(d->buf);
    free(d);
}

void a2_decoder_set_max_line(a2_decoder *d, size_t max_line)
{
    if (!d)
        return;
    if (max_line < 1)
        max_line = 1;
    if (max_line > A2_DECODER_MAX_LINE)
        max_line = A2_DECODER_MAX_LINE;
    d->max_line = max_line;
}

int a2_decoder_decode(a2_decoder *d, const char *line, size_t len,
                      const a2_change **out)
{
    scan s;
    unsigned seen = 0;

    if (out)
        *out = NULL;
    if (!d)
        return A2_EDEC_ARG;
    if (!out || (!line && len > 0))
        return fail(&d->err, A2_EDEC_ARG, 0,
                    "no line or no place for the change");
    if (len > d->max_line)
        return fail(&d->err, A2_EDEC_TOOLONG, d->max_line,
                    "line of %zu bytes is longer than the limit of %zu", len,
                    d->max_line);
    /* Every unescaped string plus its NUL fits in its quoted form. */
    if (d->cap < len + 1) {
        size_t cap = len + 1 < 4096 ? 4096 : len + 1;
        char *nb = malloc(cap);
        if (!nb)
            return fail(&d->err, A2_EDEC_NOMEM, 0,
                        "out of memory for a line of %zu bytes", len);
        free(d->buf);
        d->buf = nb;
        d->cap = cap;
    }
    d->used = 0;
    memset(&d->change, 0, sizeof d->change);
    d->change.xid.null = true;
    d->cols.n = d->ident.n = 0;
    d->cols.seen = d->ident.seen = false;
    d->cols.indexed = d->ident.indexed = false;
    d->err.code = 0;
    d->err.offset = 0;
    d->err.message[0] = '\0';

    s.d = d;
    s.base = (const unsigned char *)(line ? line : "");
    s.p = s.base;
    s.end = s.base + len;
    if (parse_top(&s, &seen) < 0)
        goto error;
    skip_ws(&s);
    if (s.p != s.end) {
        fail(&d->err, A2_EDEC_SYNTAX, OFF(&s),
             "trailing bytes after the object");
        goto error;
    }
    if (finish(d, seen, len) < 0)
        goto error;
    *out = &d->change;
    return 0;

error:
    memset(&d->change, 0, sizeof d->change);
    return d->err.code;
}

void a2_decoder_reset(a2_decoder *d)
{
    if (!d)
        return;
    memset(&d->change, 0, sizeof d->change);
    d->used = 0;
    if (d->cap > KEEP_ARENA) {
        free(d->buf);
        d->buf = NULL;
        d->cap = 0;
    }
}

const a2_decoder_error *a2_decoder_last_error(const a2_decoder *d)
{
    return d ? &d->err : NULL;
}

const char *a2_decoder_strerror(int code)
{
    switch (code) {
    case 0:
        return "ok";
    case A2_EDEC_NOMEM:
        return "out of memory";
    case A2_EDEC_ARG:
        return "bad argument";
    case A2_EDEC_TOOLONG:
        return "line too long";
    case A2_EDEC_SYNTAX:
        return "syntax";
    case A2_EDEC_UTF8:
        return "utf8";
    case A2_EDEC_DEPTH:
        return "depth";
    case A2_EDEC_TYPE:
        return "type";
    case A2_EDEC_RANGE:
        return "range";
    case A2_EDEC_MISSING:
        return "missing";
    case A2_EDEC_VALUE:
        return "value";
    default:
        return "unknown error";
    }
}

/* Nesting depth of JSON text, counting brackets outside strings. */
static size_t json_depth(const char *p, size_t n)
{
    size_t depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"')
            in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > max)
                max = depth;
        } else if (c == ']' || c == '}')
            depth = depth ? depth - 1 : 0;
    }
    return max;
}

int a2_decoder_parse_jsonb(a2_change_text v, struct json_t **out,
                           a2_decoder_error *err)
{
    json_error_t je;
    json_t *j;

    if (err) {
        err->code = 0;
        err->offset = 0;
        err->message[0] = '\0';
    }
    if (!out)
        return fail(err, A2_EDEC_ARG, 0, "no place for the value");
    *out = NULL;
    if (!v.ptr)
        return 0;
    if (json_depth(v.ptr, v.len) > A2_DECODER_MAX_JSONB_DEPTH)
        return fail(err, A2_EDEC_DEPTH, 0, "jsonb nesting deeper than %d",
                    A2_DECODER_MAX_JSONB_DEPTH);
    j = json_loadb(v.ptr, v.len, JSON_DECODE_ANY, &je);
    if (!j) {
        int code = A2_EDEC_SYNTAX;
        if (json_error_code(&je) == json_error_numeric_overflow)
            code = A2_EDEC_RANGE;
        else if (json_error_code(&je) == json_error_invalid_utf8)
            code = A2_EDEC_UTF8;
        else if (json_error_code(&je) == json_error_out_of_memory)
            code = A2_EDEC_NOMEM;
        return fail(err, code, je.position > 0 ? (size_t)je.position : 0,
                    "jsonb: %.120s", je.text);
    }
    *out = j;
    return 0;
}

/* ---- copies ---- */

typedef void (*text_fn)(a2_change_text *t, void *arg);

static void visit_row(a2_table table, a2_row *row, text_fn fn, void *arg)
{
    const tablespec *t = &tables[table];
    for (size_t i = 0; i < t->ncols; i++)
        if (t->cols[i].kind == K_TEXT || t->cols[i].kind == K_JSONB)
            fn((a2_change_text *)(void *)((char *)row + t->cols[i].off), arg);
}

static void visit_texts(a2_change *c, a2_row *nr, a2_row *orow, text_fn fn,
                        void *arg)
{
    fn(&c->timestamp, arg);
    fn(&c->schema, arg);
    fn(&c->table_name, arg);
    fn(&c->prefix, arg);
    fn(&c->content, arg);
    if (nr)
        visit_row(c->table, nr, fn, arg);
    if (orow)
        visit_row(c->table, orow, fn, arg);
}

static void count_text(a2_change_text *t, void *arg)
{
    if (t->ptr)
        *(size_t *)arg += t->len + 1;
}

static void copy_text(a2_change_text *t, void *arg)
{
    char **dst = arg;
    if (!t->ptr)
        return;
    memcpy(*dst, t->ptr, t->len);
    (*dst)[t->len] = '\0';
    t->ptr = *dst;
    *dst += t->len + 1;
}

a2_change *a2_change_dup(const a2_change *c)
{
    a2_change tmp;
    a2_row nr, orow;
    size_t size = 0;
    char *block, *strings;

    if (!c)
        return NULL;
    tmp = *c;
    if (c->new_row)
        nr = *c->new_row;
    if (c->old_row)
        orow = *c->old_row;
    visit_texts(&tmp, c->new_row ? &nr : NULL, c->old_row ? &orow : NULL,
                count_text, &size);
    size += sizeof(a2_change) + 2 * sizeof(a2_row);
    block = malloc(size);
    if (!block)
        return NULL;
    a2_change *copy = (a2_change *)(void *)block;
    a2_row *rows = (a2_row *)(void *)(block + sizeof(a2_change));
    strings = block + sizeof(a2_change) + 2 * sizeof(a2_row);
    *copy = tmp;
    copy->new_row = copy->old_row = NULL;
    if (c->new_row) {
        rows[0] = nr;
        copy->new_row = &rows[0];
    }
    if (c->old_row) {
        rows[1] = orow;
        copy->old_row = &rows[1];
    }
    visit_texts(copy, c->new_row ? &rows[0] : NULL,
                c->old_row ? &rows[1] : NULL, copy_text, &strings);
    return copy;
}

void a2_change_free(a2_change *c)
{
    free(c);
}

const char *a2_table_name(a2_table t)
{
    if (t < A2_TABLE_NONE || t > A2_TABLE_OTHER)
        return "";
    return tables[t].name;
}
