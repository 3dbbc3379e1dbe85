/*
 * Frame scanner: finds the end of one msgpack frame from its headers and
 * enforces the size, count and depth limits before msgpack-c decodes it (its
 * unpacker allocates what an array or map header claims, so a 5-byte header
 * must never reach it unchecked). Only lengths are read here; msgpack-c does
 * the decoding.
 */
#include <string.h>

#include "wire_int.h"

void a2__wire_scan_reset(a2__wire_scan *s)
{
    memset(s, 0, sizeof *s);
}

static uint32_t be(const unsigned char *p, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* One element finished: count it against the open containers. Returns 1 when
 * the whole frame is complete. */
static int finish(a2__wire_scan *s)
{
    while (s->depth > 0) {
        if (--s->rem[s->depth - 1] > 0)
            return 0;
        s->depth--;
    }
    return 1;
}

int a2__wire_scan_step(a2__wire_scan *s, const unsigned char *buf, size_t len,
                       size_t max_frame, size_t *frame_len, const char **why)
{
    for (;;) {
        size_t p = s->pos;
        size_t hdr;        /* header bytes */
        uint64_t body = 0; /* bytes after the header */
        uint32_t count = 0;
        int container = 0; /* 1 array, 2 map */
        unsigned char b;

        if (p >= max_frame) {
            *why = "frame exceeds the size limit";
            return A2_WIRE_ETOOBIG;
        }
        if (p >= len)
            return 0;
        b = buf[p];
        if (!s->started && !(b >= 0x80 && b <= 0x8f) && b != 0xde &&
            b != 0xdf) {
            *why = "frame is not a map";
            return A2_WIRE_EFORMAT;
        }

        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            hdr = 1;
        } else if (b <= 0x8f) {
            hdr = 1;
            container = 2;
            count = b & 0x0f;
        } else if (b <= 0x9f) {
            hdr = 1;
            container = 1;
            count = b & 0x0f;
        } else if (b <= 0xbf) {
            hdr = 1;
            body = b & 0x1f;
        } else {
            switch (b) {
            case 0xca:
                hdr = 5;
                break;
            case 0xcb:
                hdr = 9;
                break;
            case 0xcc:
            case 0xd0:
                hdr = 2;
                break;
            case 0xcd:
            case 0xd1:
                hdr = 3;
                break;
            case 0xce:
            case 0xd2:
                hdr = 5;
                break;
            case 0xcf:
            case 0xd3:
                hdr = 9;
                break;
            case 0xd9:
                hdr = 2;
                break;
            case 0xda:
                hdr = 3;
                break;
            case 0xdb:
                hdr = 5;
                break;
            case 0xdc:
            case 0xde:
                hdr = 3;
                break;
            case 0xdd:
            case 0xdf:
                hdr = 5;
                break;
            case 0xc1:
                *why = "invalid msgpack type byte 0xc1";
                return A2_WIRE_EFORMAT;
            default: /* bin, ext, fixext */
                *why = "binary and extension types are not allowed";
                return A2_WIRE_EFORMAT;
            }
            if (p + hdr > max_frame) {
                *why = "frame exceeds the size limit";
                return A2_WIRE_ETOOBIG;
            }
            if (p + hdr > len)
                return 0;
            if (b == 0xd9)
                body = buf[p + 1];
            else if (b == 0xda)
                body = be(buf + p + 1, 2);
            else if (b == 0xdb)
                body = be(buf + p + 1, 4);
            else if (b == 0xdc || b == 0xdd) {
                container = 1;
                count = be(buf + p + 1, (int)hdr - 1);
            } else if (b == 0xde || b == 0xdf) {
                container = 2;
                count = be(buf + p + 1, (int)hdr - 1);
            }
        }

        if (body > A2_WIRE_MAX_STRING) {
            *why = "string exceeds the size limit";
            return A2_WIRE_ETOOBIG;
        }
        if (container == 1 && count > A2_WIRE_MAX_ARRAY) {
            *why = "array exceeds the length limit";
            return A2_WIRE_ETOOBIG;
        }
        if (container == 2 && count > A2_WIRE_MAX_FIELDS) {
            *why = "map exceeds the length limit";
            return A2_WIRE_ETOOBIG;
        }
        if (p + hdr + body > max_frame) {
            *why = "frame exceeds the size limit";
            return A2_WIRE_ETOOBIG;
        }
        if (p + hdr + body > len)
            return 0;

        s->started = 1;
        s->pos = p + hdr + (size_t)body;
        if (container && count > 0) {
            if (s->depth >= A2_WIRE_MAX_DEPTH) {
                *why = "nesting exceeds the depth limit";
                return A2_WIRE_EDEPTH;
            }
            s->rem[s->depth++] = container == 2 ? count * 2 : count;
            continue;
        }
        if (container && s->depth >= A2_WIRE_MAX_DEPTH) {
            *why = "nesting exceeds the depth limit";
            return A2_WIRE_EDEPTH;
        }
        if (finish(s)) {
            *frame_len = s->pos;
            return 1;
        }
    }
}
