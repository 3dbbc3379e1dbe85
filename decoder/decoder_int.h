/*
 * Internals of liba2decoder shared between its files: the decoder's state,
 * the scanner's cursor and the byte-level helpers every scanning loop
 * inlines, and the functions one file calls in another.
 *
 *   scan.c     the JSON scanner: strings, numbers, literals, keys, skipping
 *   values.c   scalar texts -> numbers: integers, LSNs, timestamps
 *   rows.c     the a2 tables' columns: "columns"/"identity" arrays -> rows
 *   message.c  one wal2json message -> the decoder's a2_change
 *   decoder.c  the public entry points, lifetime, errors, copies
 * (classify.c, the cursor-transition classifier, needs none of this.)
 */
#ifndef A2_DECODER_INT_H
#define A2_DECODER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "a2/decoder.h"

/* ---- state ---- */

/* One element of a "columns" or "identity" array, as scanned. */
typedef struct a2__decoder_centry {
    a2_change_text name; /* may point into the line: not NUL-terminated */
    unsigned char vt;    /* the value's JSON type (rows.c) */
    bool b;
    bool num_int; /* V_NUM without fraction or exponent */
    bool fits;    /* num_int and within int64: iv is its value */
    int64_t iv;
    a2_change_text s; /* V_STR: unescaped; V_NUM: raw slice of the line */
    size_t voff;      /* offset of the value */
} a2__decoder_centry;

typedef struct a2__decoder_colarray {
    a2__decoder_centry e[A2_DECODER_MAX_COLUMNS];
    int map[A2_CURSOR_NCOLS]; /* spec column -> entry (-1: absent), once indexed
                               */
    bool indexed;
    size_t n;
    size_t off; /* offset of the array */
    bool seen;
} a2__decoder_colarray;

struct a2_decoder {
    size_t max_line;
    a2_decoder_error err;
    char *buf; /* string arena */
    size_t cap;
    size_t used;
    a2_change change;
    a2_row rows[2]; /* new, old */
    a2__decoder_colarray cols;
    a2__decoder_colarray ident;
    /* The last timestamp text parsed, and its value. */
    char ts_text[48];
    size_t ts_len;
    int64_t ts_us;
};

/* The scanner's cursor over one line. */
typedef struct a2__decoder_scan {
    a2_decoder *d;
    const unsigned char *base;
    const unsigned char *p;
    const unsigned char *end;
} a2__decoder_scan;

/* ---- errors (decoder.c) ---- */

/* Fills *err (when not NULL) and returns code. */
__attribute__((format(printf, 4, 5))) int
a2__decoder_fail(a2_decoder_error *err, int code, size_t off, const char *fmt,
                 ...);

/* Validates and skips the value at s->p (its container at depth), then fails
 * with A2_EDEC_TYPE at voff; an error inside the value is reported instead. */
__attribute__((format(printf, 4, 5))) int
a2__decoder_wrong_type(a2__decoder_scan *s, int depth, size_t voff,
                       const char *fmt, ...);

/* ---- byte-level helpers ---- */

/* Hex digit values, -1 for any other byte. */
extern const signed char a2__decoder_hexdigit[256];
/* Bytes a string holds as they are: printable ASCII except '"' and '\\'. */
extern const unsigned char a2__decoder_plain[256];

static inline size_t a2__decoder_off(const a2__decoder_scan *s)
{
    return (size_t)(s->p - s->base);
}

static inline void a2__decoder_skip_ws(a2__decoder_scan *s)
{
    if (s->p<s->end && * s->p> ' ')
        return; /* wal2json writes no whitespace */
    while (s->p < s->end &&
           (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

/* Right after an opening '{' or '[': skips whitespace and, when the next
 * byte is close (the container is empty), consumes it and returns true. */
static inline bool a2__decoder_closes(a2__decoder_scan *s, unsigned char close)
{
    a2__decoder_skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
    }
    return false;
}

/* Consumes the n bytes of lit when the input starts with them: the first
 * 8 as one word (lit is a constant, so this folds), the rest bytewise. */
static inline bool a2__decoder_starts(a2__decoder_scan *s, const char *lit,
                                      size_t n)
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

static inline bool a2__decoder_same_bytes(const char *a, const char *b,
                                          size_t n)
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

static inline int a2__decoder_hexval(unsigned char c)
{
    return a2__decoder_hexdigit[c];
}

#define ONES  UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Nonzero when one of the 8 bytes of v is not plain. Each term is the
 * classic exact-presence test: a byte below 0x20 (hasless), a '"' or a
 * '\\' (haszero of v xor the byte), a byte at or above 0x80 (its high bit). */
static inline uint64_t a2__decoder_not_plain8(uint64_t v)
{
    uint64_t q = v ^ (ONES * '"');
    uint64_t b = v ^ (ONES * '\\');
    return (((v - ONES * 0x20) & ~v) | ((q - ONES) & ~q) | ((b - ONES) & ~b) |
            v) &
           HIGHS;
}

#undef ONES
#undef HIGHS

/* The end of the run of plain bytes at p: 8 bytes at a time, then bytewise. */
static inline const unsigned char *
a2__decoder_plain_run(const unsigned char *p, const unsigned char *end)
{
    while (end - p >= 8) {
        uint64_t v, m;
        memcpy(&v, p, 8);
        m = a2__decoder_not_plain8(v);
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
    while (p < end && a2__decoder_plain[*p])
        p++;
    return p;
}

/* Consumes the literal lit (n bytes), or fails with A2_EDEC_SYNTAX. */
static inline int a2__decoder_scan_literal(a2__decoder_scan *s, const char *lit,
                                           size_t n)
{
    if (!a2__decoder_starts(s, lit, n))
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected byte");
    return 0;
}

/* ---- the scanner (scan.c); each returns 0 or a negative A2_EDEC_* code,
 * with the details in s->d->err ---- */

/* Skips whitespace and consumes the byte c, else fails naming what. */
int a2__decoder_expect(a2__decoder_scan *s, unsigned char c, const char *what);

/* The string at s->p (a '"'), unescaped; keep == false gives the arena
 * space back (out may then point into the line, not NUL-terminated). */
int a2__decoder_scan_string(a2__decoder_scan *s, a2_change_text *out,
                            bool keep);

/* The number at s->p: out is its raw slice, *is_int whether it is an
 * integer; with iv, its value and in *fits whether it fits an int64. */
int a2__decoder_scan_number(a2__decoder_scan *s, a2_change_text *out,
                            bool *is_int, int64_t *iv, bool *fits);

/* Validates and skips any value; depth is the depth of its container. */
int a2__decoder_skip_value(a2__decoder_scan *s, int depth);

/* An object's key and the ':' after it; the key is only for comparing. */
int a2__decoder_scan_key(a2__decoder_scan *s, a2_change_text *key);

/* After a member: ',' (returns 1) or the closing byte (returns 0). */
int a2__decoder_next_member(a2__decoder_scan *s, unsigned char close);

/* ---- scalar values (values.c); 0, or negative when the text is bad ---- */

/* A JSON integer slice (-?digits) exactly; A2_EDEC_RANGE past int64. */
int a2__decoder_parse_i64(const char *p, size_t n, int64_t *out);
/* "hi/lo" (1 to 8 hex digits each) -> a 64-bit LSN. */
int a2__decoder_parse_lsn(const char *p, size_t n, uint64_t *out);
/* PostgreSQL's timestamptz text (ISO DateStyle) -> Unix microseconds. */
int a2__decoder_parse_timestamp(const char *p, size_t n, int64_t *out);

/* ---- rows of the a2 tables (rows.c) ---- */

typedef enum a2__decoder_rowmode {
    A2__DECODER_ROW_INSERT, /* every column required */
    A2__DECODER_ROW_NEW,    /* update: columns, then identity; unchanged
                               TOAST allowed */
    A2__DECODER_ROW_OLD     /* identity: keys required (all when FULL) */
} a2__decoder_rowmode;

/* A "columns" or "identity" array at s->p into ca; what names it. */
int a2__decoder_scan_columns(a2__decoder_scan *s, a2__decoder_colarray *ca,
                             const char *what);

/* The row of table from the entries of prim, then of fb (NULL: none). */
int a2__decoder_fill_row(a2_decoder *d, a2_table table, a2_row *row,
                         a2__decoder_colarray *prim, a2__decoder_colarray *fb,
                         a2__decoder_rowmode mode);

/* The a2 table a change's schema and table name denote, or OTHER. */
a2_table a2__decoder_table_of(const a2_change *c);

/* Calls fn on each text and jsonb field of row, a row of table. */
typedef void (*a2__decoder_text_fn)(a2_change_text *t, void *arg);
void a2__decoder_visit_row(a2_table table, a2_row *row, a2__decoder_text_fn fn,
                           void *arg);

/* ---- messages (message.c) ---- */

/* The whole line at s (one wal2json message) into s->d->change. */
int a2__decoder_message(a2__decoder_scan *s);

#endif
