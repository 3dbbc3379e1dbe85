/*
 * A tiny HTTP responder for a2-consumer's metrics: GET /metrics answers the
 * Prometheus text the render callback builds, GET /healthz answers "ok" (200)
 * or the reason (503). One request per connection, answered at once.
 */
#ifndef A2_CONSUMER_METRICS_H
#define A2_CONSUMER_METRICS_H

#include <stddef.h>

typedef struct a2c_metrics a2c_metrics;

/*
 * Builds the answer: for /metrics (health = 0) the Prometheus text, for
 * /healthz (health = 1) "ok" or a reason, setting *healthy. Returns a new
 * malloc'd string (freed by the responder) or NULL.
 */
typedef char *(*a2c_metrics_render)(void *ctx, int health, int *healthy);

/* Listens on host:port ("0" = any free port). NULL with err. */
a2c_metrics *a2c_metrics_new(const char *host, const char *port,
                             a2c_metrics_render render, void *ctx, char *err,
                             size_t errlen);

/* NULL-safe. */
void a2c_metrics_free(a2c_metrics *m);

/* The listening descriptor to poll for readability. */
int a2c_metrics_fd(const a2c_metrics *m);

/* The bound port. */
int a2c_metrics_port(const a2c_metrics *m);

/* Accepts and answers the pending connections (waits at most ~50 ms for a
 * slow client's request line). */
void a2c_metrics_handle(a2c_metrics *m);

#endif
