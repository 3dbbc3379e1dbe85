/*
 * wal2json format-version 2 decoder (placeholder until the scanner lands).
 */
#include "a2/decoder.h"

#include <stdlib.h>
#include <string.h>

struct a2_decoder {
    size_t max_line;
    a2_decoder_error err;
};

a2_decoder *a2_decoder_new(void)
{
    a2_decoder *d = calloc(1, sizeof *d);
    if (d)
        d->max_line = A2_DECODER_MAX_LINE;
    return d;
}

void a2_decoder_free(a2_decoder *d)
{
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
    (void)line;
    (void)len;
    if (out)
        *out = NULL;
    if (!d)
        return A2_EDEC_ARG;
    d->err.code = A2_EDEC_SYNTAX;
    d->err.offset = 0;
    strcpy(d->err.message, "not implemented");
    return A2_EDEC_SYNTAX;
}

void a2_decoder_reset(a2_decoder *d)
{
    (void)d;
}

const a2_decoder_error *a2_decoder_last_error(const a2_decoder *d)
{
    return d ? &d->err : NULL;
}

const char *a2_decoder_strerror(int code)
{
    (void)code;
    return "error";
}

int a2_decoder_parse_jsonb(a2_change_text v, struct json_t **out,
                           a2_decoder_error *err)
{
    (void)v;
    (void)err;
    if (out)
        *out = NULL;
    return A2_EDEC_SYNTAX;
}

a2_change *a2_change_dup(const a2_change *c)
{
    (void)c;
    return NULL;
}

void a2_change_free(a2_change *c)
{
    free(c);
}

const char *a2_table_name(a2_table t)
{
    (void)t;
    return "";
}

a2_transition a2_transition_classify(const a2_cursor_row *before,
                                     const a2_cursor_row *after)
{
    (void)before;
    (void)after;
    return A2_TRANSITION_OTHER;
}

a2_transition a2_change_transition(const a2_change *c)
{
    (void)c;
    return A2_TRANSITION_OTHER;
}

const char *a2_transition_name(a2_transition t)
{
    (void)t;
    return "other";
}
