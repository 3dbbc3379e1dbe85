/*
 * a2-worker's handler processes: CMD run by /bin/sh -c once per event
 * (--exec, worker/handler.c) or once per slot and kept running (--serve,
 * worker/handler_serve.c), and the JSON line of an event they read. These
 * are the program's: they sit in worker/ and so in liba2worker.a, but the
 * library's API (include/a2/worker.h) neither declares nor uses them.
 * docs/worker.md has the handler contract.
 */
#ifndef A2_WORKER_HANDLER_H
#define A2_WORKER_HANDLER_H

#include "a2/worker.h"

#include "../common/log.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define A2W_MAX_STDOUT  ((size_t)16 * 1024 * 1024) /* an event's output */
#define A2W_STDERR_TAIL 2048

/* What runs the handlers. Borrowed: it outlives them. */
typedef struct {
    const char *cmd;      /* run by /bin/sh -c */
    const char *consumer; /* A2_CONSUMER, and "consumer" of the event line */
    int quiet;            /* log only problems */
} a2__cmd;


/* The event as the line a handler reads (a JSON object and a newline), its
 * length in *len; NULL on ENOMEM. */
char *a2__event_line(const a2__cmd *c, const a2_head *h, size_t *len);

/* Replaces each byte of s that is not part of well-formed UTF-8 with '?'. */
void a2__utf8_clean(char *s);

/*
 * One event through --exec: runs CMD with line on its stdin. 0 with the
 * returned events added to reply (*returned counts them), or 1 with the
 * reason in why.
 */
int a2__exec_event(const a2__cmd *c, const a2_head *h, const char *line,
                    size_t len, a2_worker_reply *reply, char *why,
                    size_t whylen, size_t *returned);

/* ── --serve ──────────────────────────────────────────────────────────── */

typedef struct a2__serve a2__serve;

/* Starts the thread that owns the handlers of slots 1..slots (and starts
 * them); ttl_ms: the time a handler has to answer. NULL on failure. */
a2__serve *a2__serve_start(const a2__cmd *c, int slots, int64_t ttl_ms);

/* Closes the handlers' stdin, waits (bounded) for them to exit, frees. Call
 * it once no event is in flight. NULL-safe. */
void a2__serve_stop(a2__serve *sv);

/* One event through slot's handler (1..slots; from that slot's thread): as
 * a2__exec_event. */
int a2__serve_event(a2__serve *sv, int slot, const a2_head *h,
                     const char *line, size_t len, a2_worker_reply *reply,
                     char *why, size_t whylen, size_t *returned);

/* ── what the two share ───────────────────────────────────────────────── */

/* The last bytes a handler wrote to stderr. */
typedef struct {
    char buf[A2W_STDERR_TAIL + 1];
    size_t len;
} a2__tail;

void a2__tail_add(a2__tail *t, const char *buf, size_t n);
void a2__tail_clear(a2__tail *t);
/* The tail as one line: trailing newlines dropped, the others as spaces. */
void a2__tail_line(const a2__tail *t, char *out, size_t len);

/* Closes *fd when open and sets it to -1. */
void a2__close_fd(int *fd);

/* environ without the variables a2-worker sets for its handlers, plus
 * vars[0..nvars) (NULL entries skipped); NULL on ENOMEM. */
char **a2__build_env(char **vars, size_t nvars);

/* A waitpid status: "exit status 7" / "killed by signal 9", or with
 * verbs, "exited with status 7" / "killed by signal 9". */
void a2__status_text(int status, int verbs, char *buf, size_t len);

/*
 * Starts /bin/sh -c CMD with env in its own process group (a terminal's
 * Ctrl-C reaches a2-worker, which lets the handler finish), its stdin,
 * stdout and stderr on pipes whose other ends go to fds[0..2]
 * (close-on-exec; stdin non-blocking, and with nonblock the other two).
 * Returns the pid, or -1 with the reason in err.
 */
pid_t a2__spawn(const a2__cmd *c, char **env, int fds[3], int nonblock,
                 char *err, size_t errlen);

/* Adds v (a JSON object with a string "type", and "payload" and "id") to
 * reply as returned event nth (from 1); 1 with the reason in why when the
 * event is refused. */
int a2__add_returned(a2_worker_reply *reply, json_t *v, size_t nth, char *why,
                      size_t whylen);

#endif
