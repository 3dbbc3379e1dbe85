/*
 * libFuzzer target of the decoder: the input is decoded as one line, then
 * split at '\n' and decoded line by line with one decoder (its arena reused
 * across lines). Every decoded change is copied, classified, and its jsonb
 * columns parsed, so every code path that reads a change runs on it.
 */
#include "a2/decoder.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static a2_decoder *dec;

static void jsonb(a2_change_text t)
{
    json_t *j = NULL;
    a2_decoder_error err;
    if (a2_decoder_parse_jsonb(t, &j, &err) == 0)
        json_decref(j);
    else if (err.code >= 0 || err.message[0] == '\0')
        abort();
}

static void use(const a2_change *c)
{
    a2_change *copy = a2_change_dup(c);
    if (copy) {
        if (a2_change_transition(copy) != a2_change_transition(c))
            abort();
        a2_change_free(copy);
    }
    (void)a2_transition_name(a2_change_transition(c));
    if (c->table == A2_TABLE_CURSORS && c->old_row)
        (void)a2_transition_classify_cleared(
                &c->old_row->cursor, c->new_row ? &c->new_row->cursor : NULL,
                5);
    const a2_row *rows[2] = {c->new_row, c->old_row};
    for (int i = 0; i < 2; i++) {
        if (!rows[i])
            continue;
        switch (c->table) {
        case A2_TABLE_EVENTS:
            jsonb(rows[i]->event.payload);
            jsonb(rows[i]->event.cause);
            break;
        case A2_TABLE_CURSORS:
            jsonb(rows[i]->cursor.types);
            jsonb(rows[i]->cursor.returned_event_ids);
            break;
        case A2_TABLE_PRESENCE:
            jsonb(rows[i]->presence.value);
            break;
        default:
            break;
        }
    }
    /* Strings are NUL-terminated where the header says so. */
    if (c->content.ptr && c->content.ptr[c->content.len] != '\0')
        abort();
}

static void one(const uint8_t *p, size_t n)
{
    const a2_change *c = NULL;
    int r = a2_decoder_decode(dec, (const char *)p, n, &c);
    if (r == 0) {
        if (!c)
            abort();
        use(c);
    } else {
        const a2_decoder_error *e = a2_decoder_last_error(dec);
        if (c || e->code != r || e->message[0] == '\0' ||
            (e->offset > n && r != A2_EDEC_TOOLONG))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dec) {
        dec = a2_decoder_new();
        if (!dec)
            abort();
    }
    /* A small limit now and then, to reach the too-long path. */
    a2_decoder_set_max_line(
            dec, size > 0 && data[0] == ' ' ? 64 : A2_DECODER_MAX_LINE);
    one(data, size);
    const uint8_t *p = data, *end = data + size;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        one(p, n);
        p += n + (nl ? 1 : 0);
    }
    a2_decoder_reset(dec);
    return 0;
}
