/*
 * wal2json format-version 2 decoder: one line in, one typed change out.
 *
 * The public entry points of liba2decoder apart from the classifier: the
 * decoder's lifetime and its arena, a2_decoder_decode (which runs the
 * scanner and the message reader over the line), the errors and their
 * names, jsonb parsing with jansson, and the self-contained copies of a
 * change.
 */
#include "decoder_int.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An arena larger than this is released by a2_decoder_reset. */
#define KEEP_ARENA ((size_t)1 << 20)

/* ---- errors ---- */

__attribute__((format(printf, 4, 0))) static int
vfail(a2_decoder_error *err, int code, size_t off, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    err->offset = off;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return code;
}

int a2__decoder_fail(a2_decoder_error *err, int code, size_t off,
                     const char *fmt, ...)
{
    va_list ap;
    int r;
    va_start(ap, fmt);
    r = vfail(err, code, off, fmt, ap);
    va_end(ap);
    return r;
}

int a2__decoder_wrong_type(a2__decoder_scan *s, int depth, size_t voff,
                           const char *fmt, ...)
{
    va_list ap;
    int r;
    if (a2__decoder_skip_value(s, depth) < 0)
        return s->d->err.code;
    va_start(ap, fmt);
    r = vfail(&s->d->err, A2_EDEC_TYPE, voff, fmt, ap);
    va_end(ap);
    return r;
}

static void clear_error(a2_decoder_error *err)
{
    err->code = 0;
    err->offset = 0;
    err->message[0] = '\0';
}

/* ---- the decoder ---- */

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
    a2__decoder_scan s;

    if (out)
        *out = NULL;
    if (!d)
        return A2_EDEC_ARG;
    if (!out || (!line && len > 0))
        return a2__decoder_fail(&d->err, A2_EDEC_ARG, 0,
                                "no line or no place for the change");
    if (len > d->max_line)
        return a2__decoder_fail(
                &d->err, A2_EDEC_TOOLONG, d->max_line,
                "line of %zu bytes is longer than the limit of %zu", len,
                d->max_line);
    /* Every unescaped string plus its NUL fits in its quoted form. */
    if (d->cap < len + 1) {
        size_t cap = len + 1 < 4096 ? 4096 : len + 1;
        char *nb = malloc(cap);
        if (!nb)
            return a2__decoder_fail(&d->err, A2_EDEC_NOMEM, 0,
                                    "out of memory for a line of %zu bytes",
                                    len);
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
    clear_error(&d->err);

    s.d = d;
    s.base = (const unsigned char *)(line ? line : "");
    s.p = s.base;
    s.end = s.base + len;
    if (a2__decoder_message(&s) < 0) {
        memset(&d->change, 0, sizeof d->change);
        return d->err.code;
    }
    *out = &d->change;
    return 0;
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

    if (err)
        clear_error(err);
    if (!out)
        return a2__decoder_fail(err, A2_EDEC_ARG, 0, "no place for the value");
    *out = NULL;
    if (!v.ptr)
        return 0;
    if (json_depth(v.ptr, v.len) > A2_DECODER_MAX_JSONB_DEPTH)
        return a2__decoder_fail(err, A2_EDEC_DEPTH, 0,
                                "jsonb nesting deeper than %d",
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
        return a2__decoder_fail(err, code,
                                je.position > 0 ? (size_t)je.position : 0,
                                "jsonb: %.120s", je.text);
    }
    *out = j;
    return 0;
}

/* ---- copies ---- */

static void visit_texts(a2_change *c, a2_row *nr, a2_row *orow,
                        a2__decoder_text_fn fn, void *arg)
{
    fn(&c->timestamp, arg);
    fn(&c->schema, arg);
    fn(&c->table_name, arg);
    fn(&c->prefix, arg);
    fn(&c->content, arg);
    if (nr)
        a2__decoder_visit_row(c->table, nr, fn, arg);
    if (orow)
        a2__decoder_visit_row(c->table, orow, fn, arg);
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
