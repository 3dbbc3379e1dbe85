/*
 * Internals of `a2 console` (cli/console*.c): the operator console served
 * over HTTP by libmicrohttpd. console.c parses the command line, listens,
 * checks every request (token, Host, CSRF, read-only) and serves the
 * embedded page; console_api.c answers the JSON API from the store;
 * console_audit.c reads the audit trail (recent completions, one event's
 * history, the live tail); console_metrics.c scrapes a2-consumer's
 * /metrics.
 */
#ifndef A2_CLI_CONSOLE_H
#define A2_CLI_CONSOLE_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "a2/store.h"

/* A file embedded by deploy/embed-assets (the same definition is in the
 * generated C file). */
#ifndef A2_EMBEDDED_FILE_DEFINED
#define A2_EMBEDDED_FILE_DEFINED
struct a2_embedded_file {
    const char *name;
    const unsigned char *data;
    size_t size;
};
#endif
/* The files of cli/console/, ended by an entry whose name is NULL. */
extern const struct a2_embedded_file a2__console_assets[];

/* Store connections the console keeps open at most. */
#define A2__CONSOLE_STORES 4

typedef struct a2__console {
    const char *db;          /* libpq conninfo */
    char *token;             /* --token-file's token, or NULL */
    char login[65];          /* the cookie a token login sets (hex) */
    char csrf[65];           /* the CSRF token of this process (hex) */
    bool read_only;          /* --read-only */
    bool check_host;         /* loopback without token: Host must be local */
    const char *audit_path;  /* --audit, or NULL */
    const char *metrics_url; /* --consumer-metrics, or NULL */
    atomic_int stopping;     /* set on SIGINT/SIGTERM */
    atomic_int tails;        /* live tails open */
    pthread_mutex_t mu;      /* guards the pool */
    pthread_cond_t cv;
    a2_store *stores[A2__CONSOLE_STORES];
    bool busy[A2__CONSOLE_STORES];
} a2__console;

/* ── JSON and HTTP answers (console_api.c) ───────────────────────────── */

/* A JSON string of s (NULL: null); bytes that are not UTF-8 become
 * U+FFFD, so that no value is ever dropped. */
json_t *a2__con_jstr(const char *s);
/* The same, for the first n bytes of s. */
json_t *a2__con_jstrn(const char *s, size_t n);

/* What an API handler answers: status and a JSON document (owned). */
typedef struct a2__con_reply {
    unsigned status;
    json_t *doc;
} a2__con_reply;

/* {"error": message} with status. */
a2__con_reply a2__con_error(unsigned status, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Query parameters and a POST body, as console.c hands them over. */
typedef const char *(*a2__con_arg_fn)(void *ctx, const char *key);
typedef struct a2__con_request {
    a2__con_arg_fn arg; /* a query parameter ("" reads as absent) */
    void *arg_ctx;
    json_t *body; /* POST: the parsed JSON object; NULL otherwise */
} a2__con_request;

/* The API's GET and POST handlers by path; status 404 when none. */
a2__con_reply a2__con_api_get(a2__console *con, const char *path,
                              const a2__con_request *req);
a2__con_reply a2__con_api_post(a2__console *con, const char *path,
                               const a2__con_request *req);

/* Closes the pooled store connections. */
void a2__con_pool_close(a2__console *con);

/* ── the audit trail (console_audit.c) ───────────────────────────────── */

/* Completions (completed, went_idle) per consumer in the last window_ms,
 * from a bounded read of the file's end, as a JSON object:
 * {"per_consumer": {name: count}, "window_ms", "covered_ms", "error"?}. */
json_t *a2__con_audit_recent(const char *path, int64_t now_ms,
                             int64_t window_ms);

/* The audited transitions of the event at index in session, oldest first,
 * from a bounded read of the file's end: {"lines": [...], "scanned_bytes",
 * "truncated", "error"?}. */
json_t *a2__con_audit_history(const char *path, const char *session,
                              int64_t index);

/* Epoch ms of an RFC 3339 UTC time as the audit writes it
 * (2026-11-29T08:22:33.205Z), or -1. */
int64_t a2__con_parse_rfc3339(const char *s);

/* A live tail: the state of one text/event-stream answer. */
typedef struct a2__con_tail a2__con_tail;

typedef struct a2__con_tail_opts {
    const char *consumer; /* filters (NULL: any) */
    const char *session;
    const char *transition;
    int last;            /* matching lines from before the start */
    const char *last_id; /* Last-Event-ID of a reconnecting client */
    int client_fd;       /* the connection's socket, polled for hang-up */
} a2__con_tail_opts;

/* NULL when out of memory. */
a2__con_tail *a2__con_tail_new(a2__console *con, const char *path,
                               const a2__con_tail_opts *opts);
/* libmicrohttpd's content reader: blocks until there is something to send
 * (lines, a notice, a keep-alive), the client hangs up, or the console
 * stops. */
ssize_t a2__con_tail_read(void *cls, uint64_t pos, char *buf, size_t max);
void a2__con_tail_free(void *cls);

/* ── a2-consumer's /metrics (console_metrics.c) ──────────────────────── */

/* Checks a --consumer-metrics value (http://HOST:PORT[/PATH],
 * tcp:HOST:PORT or HOST:PORT): 0, or -1 with err. */
int a2__con_metrics_check(const char *url, char *err, size_t errlen);

/* Scrapes it within timeout_ms: {"url", "up", "workers", "connections",
 * "lag_bytes", "lag_seconds", "metrics": {name: value}} or {"url",
 * "error"}. */
json_t *a2__con_metrics_scrape(const char *url, int timeout_ms);

#endif
