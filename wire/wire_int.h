/*
 * Internals of liba2wire shared between its files.
 */
#ifndef A2_WIRE_INT_H
#define A2_WIRE_INT_H

#include <stddef.h>

#include "a2/wire.h"

/* Frame limit for frames sent by `from`. */
size_t a2__wire_max_frame(a2_wire_from from);

/*
 * Incremental frame scanner: walks msgpack headers only (no decoding) to find
 * where the frame that starts at the beginning of the buffer ends, enforcing
 * the limits before msgpack-c allocates anything. State survives between
 * calls so bytes arriving one at a time are scanned once.
 */
typedef struct {
    size_t pos;                      /* bytes of the frame scanned */
    int depth;                       /* open containers */
    int started;                     /* the frame's first header was read */
    uint32_t rem[A2_WIRE_MAX_DEPTH]; /* elements left in each container */
} a2__wire_scan;

void a2__wire_scan_reset(a2__wire_scan *s);

/*
 * Continues scanning buf[0 .. len). Returns 1 with *frame_len set when a
 * frame is complete, 0 when more bytes are needed, or a negative A2_WIRE_E*
 * code with a reason in why.
 */
int a2__wire_scan_step(a2__wire_scan *s, const unsigned char *buf, size_t len,
                       size_t max_frame, size_t *frame_len, const char **why);

#endif
