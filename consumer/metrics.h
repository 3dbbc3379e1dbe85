/*
 * a2-consumer's metrics endpoint: GET /metrics answers the Prometheus text
 * the render callback builds, GET /healthz answers "ok" (200) or the reason
 * (503). HTTP runs on a thread of its own (libmicrohttpd); the render
 * callback runs on the caller's thread, in a2c_metrics_handle, when a
 * request asked for a fresh snapshot.
 */
#ifndef A2_CONSUMER_METRICS_H
#define A2_CONSUMER_METRICS_H

#include <stddef.h>

typedef struct a2c_metrics a2c_metrics;

/*
 * Builds the answer: for /metrics (health = 0) the Prometheus text, for
 * /healthz (health = 1) "ok" or a reason, setting *healthy. Returns a new
 * malloc'd string (the endpoint frees it) or NULL. Called on the thread
 * that calls a2c_metrics_new and a2c_metrics_handle.
 */
typedef char *(*a2c_metrics_render)(void *ctx, int health, int *healthy);

/* Listens on host:port ("0" = any free port) and starts the HTTP thread
 * (render is called once here for a first snapshot). NULL with err. */
a2c_metrics *a2c_metrics_new(const char *host, const char *port,
                             a2c_metrics_render render, void *ctx, char *err,
                             size_t errlen);

/* NULL-safe. */
void a2c_metrics_free(a2c_metrics *m);

/* A descriptor to poll for readability: a request waits for a snapshot. */
int a2c_metrics_fd(const a2c_metrics *m);

/* The bound port. */
int a2c_metrics_port(const a2c_metrics *m);

/* Publishes a fresh snapshot when a request asked for one (never waits). */
void a2c_metrics_handle(a2c_metrics *m);

#endif
