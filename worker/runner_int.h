/*
 * liba2worker's runner, inside: its state, shared by runner.c (claims,
 * handlers, settlements) and renew.c (the renewal thread).
 */
#ifndef A2_WORKER_RUNNER_INT_H
#define A2_WORKER_RUNNER_INT_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "a2/store.h"
#include "a2/worker.h"
#include "worker_int.h"

typedef struct {
    a2_consumer consumer;
    a2_log_spec log;
    char *name;
    char *lane;
    char **types;
    size_t ntypes;
} a2__runner_consumer;

struct a2_worker_runner {
    char *db;
    char *holder;
    a2__runner_consumer *cons;
    a2_consumer *consumers; /* views into cons, for the store */
    size_t nconsumers;
    int64_t ttl_ms;
    int max_failures;
    int64_t retry_after_ms;
    a2_worker_handler handler;
    void *ctx;
    a2_worker_log_fn log;
    void *log_ctx;

    a2_store *store;
    a2_store *renew_store;
    volatile sig_atomic_t stopping;

    /* Shared with the renewal thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started;
    int quit;
    const char **sessions;  /* per head of the run (head_run): its session */
    a2_attempt_ref *refs;   /* the heads */
    unsigned char *done;    /* per head: finished */
    unsigned char *renewed; /* per head: renewed in this round */
    size_t nrefs;
    int renew_busy;     /* a renewal is in flight */
    int64_t next_renew; /* monotonic ms */
    uint64_t renewals;
    uint64_t lost; /* heads the renewal found superseded */

    char last_error[1200];
};

#define RLOG(r, ...) a2__worker_logf((r)->log, (r)->log_ctx, __VA_ARGS__)

/* The renewal thread (renew.c): while a run is published, renews the
 * leases of its unfinished heads every ttl/3, one session's heads a call,
 * on its own connection, until quit. arg: the runner. */
void *a2__runner_renew_main(void *arg);

#endif
