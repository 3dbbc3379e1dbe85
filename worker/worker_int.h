/* Internals shared by liba2worker's files. */
#ifndef A2_WORKER_INT_H
#define A2_WORKER_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "a2/store.h"
#include "a2/worker.h"

/* A handler's reply (worker/reply.c): its returned events, their strings
 * (owned), the error of a failed attempt, and the head it answers. */
struct a2_worker_reply {
    a2_append_event *events;
    size_t nevents;
    size_t cap;
    char **owned; /* type, payload, id of every event: 3 per event */
    char *error;
    const a2_head *head;
};

/* Frees what the reply holds (not the reply itself). */
void a2__worker_reply_free(a2_worker_reply *rp);

/* vsnprintf into buf and, when log is set, hands the line to it. */
void a2__worker_logf(void (*log)(void *, const char *), void *ctx,
                     const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* "<hostname>:<pid>" into buf. */
void a2__worker_default_name(char *buf, size_t len);

/* The start of a constructor's error reporting: when the caller gave no
 * buffer (err NULL or errlen 0), *err and *errlen become spare's; then the
 * buffer is emptied. */
void a2__worker_err_init(char **err, size_t *errlen, char *spare,
                         size_t sparelen);

/* 0 when each of the n consumers has a name; else -1 with
 * "consumer <i> has no name" in err. */
int a2__worker_check_names(const a2_consumer *consumers, size_t n, char *err,
                           size_t errlen);

/* How many queued woken sessions a pool slot takes at once, after a run
 * whose handlers took session_us a session: as many as run in about 5 ms,
 * 1 to 32 (worker/pool.c). */
size_t a2__pool_take_count(int64_t session_us);

#endif
