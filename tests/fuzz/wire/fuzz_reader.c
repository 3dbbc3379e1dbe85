/*
 * libFuzzer target for the wire reader. Input: one control byte (bit 0: the
 * direction read, bits 1-7: the chunk size the rest is fed in, 0 = whole),
 * then the byte stream. Every message taken is encoded again and must decode
 * to the same type; errors must be final and leave the reader usable for
 * free only. Crashes, leaks and UB are the findings.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "a2/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const a2_wire_msg *m)
{
    a2_wire_buf b = {0};
    int rc = a2_wire_encode(&b, m);
    if (rc == A2_WIRE_ETOOBIG) { /* e.g. float32 widened to float64 */
        a2_wire_buf_free(&b);
        return;
    }
    if (rc != 0)
        __builtin_trap();
    a2_wire_from from = m->type <= A2_WIRE_PING ? A2_WIRE_FROM_WORKER
                                                : A2_WIRE_FROM_CONSUMER;
    a2_wire_reader *r = a2_wire_reader_new(from);
    a2_wire_msg again;
    if (!r)
        __builtin_trap();
    if (a2_wire_reader_feed(r, b.data, b.len) != 0 ||
        a2_wire_reader_next(r, &again) != 1 || again.type != m->type)
        __builtin_trap();
    if (m->session && strcmp(m->session, again.session) != 0)
        __builtin_trap();
    if (m->fields_json && strcmp(m->fields_json, again.fields_json) != 0)
        __builtin_trap();
    if (m->n_sessions != again.n_sessions ||
        m->n_log_types != again.n_log_types || m->lsn != again.lsn)
        __builtin_trap();
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    a2_wire_from from =
            (data[0] & 1) ? A2_WIRE_FROM_CONSUMER : A2_WIRE_FROM_WORKER;
    size_t chunk = data[0] >> 1;
    a2_wire_reader *r = a2_wire_reader_new(from);
    a2_wire_msg m;
    int err = 0;

    if (!r)
        return 0;
    data++;
    size--;
    if (chunk == 0)
        chunk = size ? size : 1;
    for (size_t off = 0; off < size && !err; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (a2_wire_reader_feed(r, data + off, n) != 0)
            break;
        for (int i = 0; i < 100000; i++) {
            int rc = a2_wire_reader_next(r, &m);
            if (rc == 1) {
                check_roundtrip(&m);
                continue;
            }
            if (rc < 0) {
                err = rc;
                if (a2_wire_reader_next(r, &m) != rc ||
                    a2_wire_reader_error(r)[0] == '\0')
                    __builtin_trap();
            }
            break;
        }
    }
    a2_wire_reader_free(r);
    return 0;
}
