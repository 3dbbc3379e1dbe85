/*
 * a2-bench-decode FILE [MIN_SECONDS]: decodes every line of FILE (wal2json
 * output, one message per line, as pg_recvlogical writes it) with the a2
 * decoder, and parses every line with jansson's json_loadb as the baseline a
 * jansson-based decoder could at best reach. Each pass is repeated until it
 * has run MIN_SECONDS (default 2). Prints one line per pass:
 *   <name> <messages> <changes> <bytes> <seconds> <passes>
 * where changes counts I/U/D/T messages. Exits 1 if a line fails to decode.
 */
#include "a2/decoder.h"

#include "../../common/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    return (double)a2__mono_us() / 1e6;
}

static double cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct corpus {
    char *data;
    size_t size;
    size_t *off;
    size_t *len;
    size_t n;
} corpus;

static int load(const char *path, corpus *c)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0) {
        fclose(f);
        return -1;
    }
    c->size = (size_t)sz;
    c->data = malloc(c->size);
    if (!c->data || fread(c->data, 1, c->size, f) != c->size) {
        fclose(f);
        return -1;
    }
    fclose(f);
    size_t lines = 0;
    for (size_t i = 0; i < c->size; i++)
        lines += c->data[i] == '\n';
    c->off = malloc((lines + 1) * sizeof *c->off);
    c->len = malloc((lines + 1) * sizeof *c->len);
    if (!c->off || !c->len)
        return -1;
    size_t start = 0;
    for (size_t i = 0; i <= c->size; i++) {
        if (i == c->size || c->data[i] == '\n') {
            if (i > start) {
                c->off[c->n] = start;
                c->len[c->n] = i - start;
                c->n++;
            }
            start = i + 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    corpus c = {0};
    double min_secs = argc > 2 ? atof(argv[2]) : 2.0;
    if (argc < 2 || load(argv[1], &c) < 0) {
        fprintf(stderr, "a2-bench-decode: could not read %s\n",
                argc > 1 ? argv[1] : "(no file)");
        return 2;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < c.n; i++)
        bytes += c.len[i];

    a2_decoder *d = a2_decoder_new();
    if (!d)
        return 1;
    size_t changes = 0;
    int passes = 0;
    double t0 = now(), t, c0 = cpu();
    do {
        changes = 0;
        for (size_t i = 0; i < c.n; i++) {
            const a2_change *ch;
            if (a2_decoder_decode(d, c.data + c.off[i], c.len[i], &ch) != 0) {
                fprintf(stderr, "a2-bench-decode: line %zu: %s\n", i + 1,
                        a2_decoder_last_error(d)->message);
                return 1;
            }
            changes += ch->action != A2_ACTION_BEGIN &&
                       ch->action != A2_ACTION_COMMIT &&
                       ch->action != A2_ACTION_MESSAGE;
        }
        passes++;
        t = now() - t0;
    } while (t < min_secs);
    printf("a2_decoder %zu %zu %zu %.6f %d %.6f\n", c.n, changes, bytes, t,
           passes, cpu() - c0);

    /* The same lines through the decoder and a2_change_dup (the consumer's
     * path when it buffers a transaction). */
    passes = 0;
    t0 = now();
    c0 = cpu();
    do {
        for (size_t i = 0; i < c.n; i++) {
            const a2_change *ch;
            if (a2_decoder_decode(d, c.data + c.off[i], c.len[i], &ch) != 0)
                return 1;
            a2_change_free(a2_change_dup(ch));
        }
        passes++;
        t = now() - t0;
    } while (t < min_secs);
    printf("a2_decoder+dup %zu %zu %zu %.6f %d %.6f\n", c.n, changes, bytes, t,
           passes, cpu() - c0);
    a2_decoder_free(d);

    passes = 0;
    t0 = now();
    c0 = cpu();
    do {
        for (size_t i = 0; i < c.n; i++) {
            json_error_t err;
            json_t *j = json_loadb(c.data + c.off[i], c.len[i], 0, &err);
            if (!j)
                return 1;
            json_decref(j);
        }
        passes++;
        t = now() - t0;
    } while (t < min_secs);
    printf("jansson_loadb %zu %zu %zu %.6f %d %.6f\n", c.n, changes, bytes, t,
           passes, cpu() - c0);

    free(c.data);
    free(c.off);
    free(c.len);
    return 0;
}
