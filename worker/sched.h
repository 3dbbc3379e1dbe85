/*
 * What a2-worker does with a session after running it: pure, so the rules
 * are tested on their own (tests/unit/test_worker_sched.c).
 */
#ifndef A2_WORKER_SCHED_H
#define A2_WORKER_SCHED_H

#include <stdint.h>

#define A2W_STORE_RETRY_MS  1000
#define A2W_WAKE_RECHECKS   3
#define A2W_WAKE_RECHECK_MS 20

typedef enum {
    A2W_RUN_AGAIN, /* queue it now: a wake-up came during the run */
    A2W_TIMER,     /* run it after delay_ms */
    A2W_DONE,      /* forget it until the next wake-up */
} a2w_next_kind;

/* The run that just ended. */
typedef struct {
    int again;        /* a wake-up for the session came while it ran */
    int failed;       /* the store call failed */
    int64_t retry_at; /* epoch ms of the session's next retry, or 0 */
    int64_t now;      /* epoch ms when the run ended */
    int hinted;       /* woken by a2-consumer */
    int claimed;      /* the run claimed a head */
    int rechecks;     /* rechecks already made for this wake-up */
    int waited;       /* the run waited for the wake-up's commit (its xid) */
    int wake_log;     /* the run was asked to start log cursors' runs */
} a2w_ran;

typedef struct {
    a2w_next_kind kind;
    int64_t delay_ms; /* A2W_TIMER */
    int recheck;      /* A2W_TIMER: a recheck (count it) */
    int wake_log;     /* the next run starts log cursors' runs too */
} a2w_next;

/*
 * The next step. A wake-up can outrun the visibility of its commit to new
 * snapshots: a run given the wake-up's xid has the store wait for that
 * commit; one without (from a consumer that sends none) that claimed
 * nothing looks again after 20, 40 and 80 ms. A log wake-up is kept for every run scheduled after it (again, a
 * store retry, a lease retry, a recheck) until one ends with nothing left to
 * do: the run that took it may not have seen its events yet, and starting a
 * log cursor's run is idempotent.
 */
static inline a2w_next a2w_after_run(const a2w_ran *r)
{
    a2w_next n = {A2W_DONE, 0, 0, r->wake_log};
    if (r->again) {
        n.kind = A2W_RUN_AGAIN;
    } else if (r->failed) {
        n.kind = A2W_TIMER;
        n.delay_ms = A2W_STORE_RETRY_MS;
    } else if (r->retry_at > 0) {
        int64_t due = r->retry_at - r->now;
        n.kind = A2W_TIMER;
        n.delay_ms = (due > 0 ? due : 0) + 5;
    } else if (r->hinted && r->claimed == 0 && !r->waited &&
               r->rechecks < A2W_WAKE_RECHECKS) {
        n.kind = A2W_TIMER;
        n.delay_ms = (int64_t)A2W_WAKE_RECHECK_MS << r->rechecks;
        n.recheck = 1;
    } else {
        n.wake_log = 0;
    }
    return n;
}

#endif
