/*
 * a2-consumer's metrics endpoint: GET /metrics answers the Prometheus text
 * the render callback builds, GET /healthz answers "ok" (200) or the reason
 * (503). HTTP runs on a thread of its own (libmicrohttpd); the render
 * callback runs on the caller's thread, in a2__metrics_handle, when a
 * request asked for a fresh snapshot, and builds both answers at once.
 */
#ifndef A2_CONSUMER_METRICS_H
#define A2_CONSUMER_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct a2__metrics a2__metrics;

/*
 * Builds the answers from one look at the caller's state: *text, the
 * Prometheus text of /metrics, and *health, "ok" or a reason for /healthz,
 * setting *healthy. Each a new malloc'd string (the endpoint frees it) or
 * NULL. Called on the thread that calls a2__metrics_new and
 * a2__metrics_handle.
 */
typedef void (*a2__metrics_render)(void *ctx, char **text, char **health,
                                   int *healthy);

/* Listens on host:port ("0" = any free port) and starts the HTTP thread
 * (render is called once here for a first snapshot). NULL with err. */
a2__metrics *a2__metrics_new(const char *host, const char *port,
                             a2__metrics_render render, void *ctx, char *err,
                             size_t errlen);

/* NULL-safe. */
void a2__metrics_free(a2__metrics *m);

/* A descriptor to poll for readability: a request waits for a snapshot. */
int a2__metrics_fd(const a2__metrics *m);

/* The bound port. */
int a2__metrics_port(const a2__metrics *m);

/* Publishes a fresh snapshot when a request asked for one (never waits). */
void a2__metrics_handle(a2__metrics *m);

/* ---- building the Prometheus text (pure helpers) ---- */

/* Appends printf output to the growing string *buf (length *len, capacity
 * *cap; all zero to start). Out of memory leaves it as it was. */
void a2__metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

/* Appends the label value v escaped as the text format wants it: backslash,
 * double quote and line feed as \\, \" and \n; every other byte as it is
 * (names come from the database: valid UTF-8 without NUL). */
void a2__metrics_append_label(char **buf, size_t *len, size_t *cap,
                              const char *v);

/* A latency histogram with fixed buckets (upper bounds in microseconds,
 * A2C_HIST_BOUNDS_US; one more bucket, +Inf, past the last). */
#define A2C_HIST_NBOUNDS 14
#define A2C_HIST_BOUNDS_US                                                     \
    {                                                                          \
        500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,    \
                1000000, 2500000, 5000000, 10000000                            \
    }

typedef struct a2__hist {
    uint64_t bucket[A2C_HIST_NBOUNDS + 1]; /* not cumulative */
    uint64_t count;
    uint64_t sum_us;
} a2__hist;

/* Counts one observation of us microseconds (below 0 counts as 0). */
void a2__hist_observe(a2__hist *h, int64_t us);

/* Appends the histogram as the text format's name_bucket{le=...} (cumulative,
 * in seconds), name_sum (seconds) and name_count, after its HELP and TYPE
 * lines. */
void a2__hist_render(const a2__hist *h, const char *name, const char *help,
                     char **buf, size_t *len, size_t *cap);

#endif
