/*
 * Writes the seed corpus of the wire reader fuzz target: one file per
 * message of each direction (control byte 0 or 1, then the frame), a stream
 * of several frames fed in 3-byte chunks, and a few broken frames.
 * Usage: gen_corpus DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2/wire.h"

static void put(const char *dir, const char *name, unsigned char ctl,
                const void *p, size_t n)
{
    char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputc(ctl, f);
    fwrite(p, 1, n, f);
    fclose(f);
}

#define ENC(call)                                                              \
    do {                                                                       \
        if ((call) != 0) {                                                     \
            fprintf(stderr, "encode failed: %s\n", #call);                     \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    a2_wire_buf b = {0}, all = {0};
    const char *types[] = {"chat.msg", "chat.edit"};
    const char *sessions[] = {"s1", "s2"};
    const char *d = argc > 1 ? argv[1] : ".";

#define ONE(name, ctl, call)                                                   \
    do {                                                                       \
        b.len = 0;                                                             \
        ENC(call);                                                             \
        put(d, name, ctl, b.data, b.len);                                      \
    } while (0)

    ONE("hello", 0, a2_wire_encode_hello(&b, "worker-1", "tok"));
    ONE("hello_notoken", 0, a2_wire_encode_hello(&b, "worker-1", NULL));
    ONE("subscribe", 0,
        a2_wire_encode_subscribe(&b, "mailer", A2_WIRE_LOG_NONE, NULL, 0));
    ONE("subscribe_all", 0,
        a2_wire_encode_subscribe(&b, "idx", A2_WIRE_LOG_ALL, NULL, 0));
    ONE("subscribe_types", 0,
        a2_wire_encode_subscribe(&b, "idx", A2_WIRE_LOG_TYPES, types, 2));
    ONE("presence_sub", 0, a2_wire_encode_presence_sub(&b, "room"));
    ONE("ping", 0, a2_wire_encode_ping(&b, 12345));
    ONE("welcome", 1, a2_wire_encode_welcome(&b, 0x1234567890ULL));
    ONE("wake", 1, a2_wire_encode_wake(&b, "mailer", "s1", "main", 7, 99));
    ONE("log", 1, a2_wire_encode_log(&b, "idx", "s1", 3, "chat.msg", 99));
    ONE("cleared", 1, a2_wire_encode_cleared(&b, "s1", 10, 99));
    ONE("resync", 1, a2_wire_encode_resync(&b, "mailer", sessions, 2));
    ONE("resync_all", 1, a2_wire_encode_resync(&b, "mailer", NULL, 0));
    ONE("presence", 1,
        a2_wire_encode_presence(&b, "room", "alice",
                                "{\"typing\":true,\"gone\":null,"
                                "\"pos\":{\"x\":1.5,\"y\":[1,2,\"z\"]}}"));
    ONE("pong", 1, a2_wire_encode_pong(&b, 12345));
    ONE("error", 1, a2_wire_encode_error(&b, "protocol", "bad frame"));

    ENC(a2_wire_encode_welcome(&all, 5));
    ENC(a2_wire_encode_wake(&all, "c", "s", "k", 1, 6));
    ENC(a2_wire_encode_resync(&all, "c", NULL, 0));
    ENC(a2_wire_encode_pong(&all, 1));
    put(d, "stream_chunked", 1 | (3 << 1), all.data, all.len);
    put(d, "not_a_map", 0, "\x92\x01\x02", 3);
    put(d, "huge_map_header", 0, "\xdf\xff\xff\xff\xff", 5);
    put(d, "unknown_type", 0, "\x81\xa1t\xa3zzz", 6);
    a2_wire_buf_free(&b);
    a2_wire_buf_free(&all);
    return 0;
}
