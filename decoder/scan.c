/*
 * The JSON scanner of the decoder, specialised to wal2json's shapes: one
 * strict pass that validates grammar, UTF-8 and nesting while it reads
 * strings, numbers, literals and keys, and skips what a2 does not keep.
 *
 * Strings are unescaped into the decoder's arena, whose size is bounded by
 * the line's length (an unescaped string plus its NUL never exceeds its
 * quoted form), so a line never costs more than a fixed block plus its own
 * length.
 */
#include "decoder_int.h"

int a2__decoder_expect(a2__decoder_scan *s, unsigned char c, const char *what)
{
    a2__decoder_skip_ws(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected end of line, expected %s", what);
    if (*s->p != c)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "expected %s", what);
    s->p++;
    return 0;
}

const signed char a2__decoder_hexdigit[256] = {
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

static int read_u4(a2__decoder_scan *s, const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    if (s->end - p < 4)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX,
                                (size_t)(p - s->base), "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        int h = a2__decoder_hexval(p[i]);
        if (h < 0)
            return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX,
                                    (size_t)(p - s->base), "bad \\u escape");
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

const unsigned char a2__decoder_plain[256] = {
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

/*
 * Scans the string at s->p (a '"'), unescaping it into the arena. The
 * result is NUL-terminated. keep == false gives the arena space back, and a
 * string without escapes or non-ASCII bytes is then not copied at all: out
 * points into the line (not NUL-terminated; for comparing only).
 */
int a2__decoder_scan_string(a2__decoder_scan *s, a2_change_text *out, bool keep)
{
    a2_decoder *d = s->d;
    const unsigned char *p = s->p + 1;
    const unsigned char *end = s->end;
    char *start = d->buf + d->used;
    char *dst = start;

    /* The string, unescaped, fits in what is left of the line; the arena
     * holds the line's length, and its use never passes the bytes scanned. */
    if (d->used + (size_t)(end - s->p) > d->cap)
        return a2__decoder_fail(&d->err, A2_EDEC_NOMEM,
                                (size_t)(s->p - s->base),
                                "internal: string arena bound exceeded");

    /* Fast path: a run of plain bytes up to the closing quote. */
    p = a2__decoder_plain_run(p, end);
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
        p = a2__decoder_plain_run(p, end);
        memcpy(dst, run, (size_t)(p - run));
        dst += p - run;
        if (p >= end)
            return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX,
                                    (size_t)(s->p - s->base),
                                    "unterminated string");
        unsigned c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            if (end - p < 2)
                return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX,
                                        (size_t)(p - s->base),
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
                return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX,
                                        (size_t)(p - s->base),
                                        "bad escape in string");
            }
            unsigned cp;
            size_t at = (size_t)(p - s->base);
            if (read_u4(s, p + 2, &cp) < 0)
                return d->err.code;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return a2__decoder_fail(&d->err, A2_EDEC_UTF8, at,
                                        "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return a2__decoder_fail(
                            &d->err, A2_EDEC_UTF8, at,
                            "lone high surrogate in \\u escape");
                if (read_u4(s, p + 2, &lo) < 0)
                    return d->err.code;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return a2__decoder_fail(
                            &d->err, A2_EDEC_UTF8, at,
                            "lone high surrogate in \\u escape");
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                return a2__decoder_fail(&d->err, A2_EDEC_UTF8, at,
                                        "\\u0000 in string");
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
            return a2__decoder_fail(&d->err, A2_EDEC_SYNTAX,
                                    (size_t)(p - s->base),
                                    "control character in string");
        size_t u = utf8_len(p, end);
        if (u == 0)
            return a2__decoder_fail(&d->err, A2_EDEC_UTF8,
                                    (size_t)(p - s->base),
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

/* The end of the one or more digits at p, or NULL when none is there. */
static const unsigned char *digit_run(const unsigned char *p,
                                      const unsigned char *end)
{
    if (p >= end || *p < '0' || *p > '9')
        return NULL;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    return p;
}

/*
 * Scans a JSON number at s->p; out is the raw slice. When iv is not NULL and
 * the number is an integer, *iv is its value and *fits says whether it fits
 * an int64 (an integer of more than 19 digits never does).
 */
int a2__decoder_scan_number(a2__decoder_scan *s, a2_change_text *out,
                            bool *is_int, int64_t *iv, bool *fits)
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
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "bad number");
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
        if (!(p = digit_run(p + 1, end)))
            return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX,
                                    a2__decoder_off(s), "bad number");
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = false;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!(p = digit_run(p, end)))
            return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX,
                                    a2__decoder_off(s), "bad number");
    }
    out->ptr = (const char *)s->p;
    out->len = (size_t)(p - s->p);
    *is_int = integer;
    s->p = p;
    return 0;
}

/* Validates and skips any value; depth is the depth of its container. */
int a2__decoder_skip_value(a2__decoder_scan *s, int depth)
{
    a2_change_text t;
    bool is_int;
    a2__decoder_skip_ws(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected end of line, expected a value");
    switch (*s->p) {
    case '"':
        return a2__decoder_scan_string(s, &t, false);
    case 't':
        return a2__decoder_scan_literal(s, "true", 4);
    case 'f':
        return a2__decoder_scan_literal(s, "false", 5);
    case 'n':
        return a2__decoder_scan_literal(s, "null", 4);
    case '{':
    case '[': {
        unsigned char close = *s->p == '{' ? '}' : ']';
        bool obj = *s->p == '{';
        if (depth + 1 > A2_DECODER_MAX_DEPTH)
            return a2__decoder_fail(
                    &s->d->err, A2_EDEC_DEPTH, a2__decoder_off(s),
                    "nesting deeper than %d", A2_DECODER_MAX_DEPTH);
        s->p++;
        if (a2__decoder_closes(s, close))
            return 0;
        for (;;) {
            if (obj) {
                a2__decoder_skip_ws(s);
                if (s->p >= s->end || *s->p != '"')
                    return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX,
                                            a2__decoder_off(s),
                                            "expected a key");
                if (a2__decoder_scan_string(s, &t, false) < 0 ||
                    a2__decoder_expect(s, ':', "':'") < 0)
                    return s->d->err.code;
            }
            if (a2__decoder_skip_value(s, depth + 1) < 0)
                return s->d->err.code;
            int r = a2__decoder_next_member(s, close);
            if (r <= 0)
                return r;
        }
    }
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return a2__decoder_scan_number(s, &t, &is_int, NULL, NULL);
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected byte");
    }
}

/*
 * Scans the key at s->p and the ':' after it. The key is unescaped into the
 * arena and given back at once: it is only compared.
 */
int a2__decoder_scan_key(a2__decoder_scan *s, a2_change_text *key)
{
    a2__decoder_skip_ws(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected end of line, expected a key");
    if (*s->p != '"')
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "expected a key");
    /* Fast path: a plain key and its ':' right after it. */
    const unsigned char *q = a2__decoder_plain_run(s->p + 1, s->end);
    if (s->end - q >= 2 && q[0] == '"' && q[1] == ':') {
        key->ptr = (const char *)s->p + 1;
        key->len = (size_t)(q - (s->p + 1));
        s->p = q + 2;
        return 0;
    }
    if (a2__decoder_scan_string(s, key, false) < 0)
        return s->d->err.code;
    return a2__decoder_expect(s, ':', "':'");
}

/* After a member: ',' (returns 1) or the closing byte (returns 0). */
int a2__decoder_next_member(a2__decoder_scan *s, unsigned char close)
{
    a2__decoder_skip_ws(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected end of line");
    if (*s->p == ',') {
        s->p++;
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                            "expected ',' or '%c'", close);
}
