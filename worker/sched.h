/*
 * The pool's table of sessions (worker/sched.c), internal to liba2worker:
 * the ready queue, the timers and the decision after a run, without threads
 * or clocks (the caller passes the time), so the rules are tested on their
 * own (tests/unit/test_worker_sched.c). worker/pool.c runs it under its
 * mutex.
 */
#ifndef A2_WORKER_SCHED_H
#define A2_WORKER_SCHED_H

#include "a2/worker.h"

#include <stdint.h>

#define A2W_STORE_RETRY_MS  1000
#define A2W_WAKE_RECHECKS   3
#define A2W_WAKE_RECHECK_MS 20

typedef enum {
    A2W_RUN_AGAIN, /* queue it now: a wake-up came during the run */
    A2W_TIMER,     /* run it after delay_ms */
    A2W_DONE,      /* forget it until the next wake-up */
} a2__next_kind;

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
    int partial;      /* one claim round of a run meant to go to the end
                         (not woken, run with others): run again while it
                         claims */
} a2__ran;

typedef struct {
    a2__next_kind kind;
    int64_t delay_ms; /* A2W_TIMER */
    int recheck;      /* A2W_TIMER: a recheck (count it) */
    int wake_log;     /* the next run starts log cursors' runs too */
} a2__next;

/*
 * The next step. A wake-up can outrun the visibility of its commit to new
 * snapshots: a run given the wake-up's xid has the store wait for that
 * commit; one without (from a consumer that sends none) that claimed
 * nothing looks again after 20, 40 and 80 ms. A log wake-up (and the index
 * it named) is kept for
 * every run scheduled after it (again, a store retry, a lease retry, a
 * recheck) until one ends with nothing left to do: the run that took it may
 * not have seen its events yet, and starting a log cursor's run is
 * idempotent. A partial run that claimed runs again: a run of a session no
 * wake-up named goes on until a claim finds nothing.
 */
a2__next a2__after_run(const a2__ran *r);

/* ── the table ────────────────────────────────────────────────────────── */

typedef struct a2__sched a2__sched;
typedef struct a2__job a2__job;

/* What a run is to do (a2__sched_take). */
typedef struct {
    const char *session; /* borrowed until a2__sched_done */
    int wake_log;        /* bring the log cursors up to date first */
    uint64_t xid;        /* the wake-up's commit to wait for, 0: none */
    int64_t log_from;    /* the earliest index its log wake-ups named (a
                            new log cursor starts there), 0: none */
    int woken;           /* a wake-up named it: one claim round */
} a2__run;

/* How a run ended (a2__sched_done). */
typedef struct {
    int failed;       /* an error other than A2_WORKER_ESTOPPED */
    int64_t retry_at; /* a2_worker_run_stats.retry_at */
    int claimed;      /* it claimed a head */
    int partial;      /* a2__ran.partial */
} a2__run_end;

/* An empty table; NULL when out of memory. */
a2__sched *a2__sched_new(void);
void a2__sched_free(a2__sched *s);

/*
 * Schedules session: hinted when a2-consumer named it (a wake-up), with
 * wake_log, xid and log_from (the index a log wake-up named, 0: none; the
 * earliest is kept) for its next run. Returns 1 when it joined the tail of
 * the ready queue (its timer, if any, cancelled), 0 when it was merged into
 * its place in the queue or into its run in progress (run once more
 * afterwards), A2_WORKER_ESTOPPED or A2_WORKER_ENOMEM.
 */
int a2__sched_add(a2__sched *s, const char *session, int wake_log, int hinted,
                   uint64_t xid, int64_t log_from);

/* Takes the head of the ready queue for a run (*run filled); NULL when the
 * queue is empty or the table stopped. */
a2__job *a2__sched_take(a2__sched *s, a2__run *run);

/*
 * The end of j's run (now_real: epoch ms, now_mono: monotonic ms): applies
 * a2__after_run and returns its decision (A2W_DONE when stopped). With
 * A2W_RUN_AGAIN, j is back at the tail of the queue; with A2W_TIMER, it is
 * due at now_mono + delay_ms; with A2W_DONE, j is freed.
 */
a2__next a2__sched_done(a2__sched *s, a2__job *j, const a2__run_end *end,
                          int64_t now_real, int64_t now_mono);

/* Due timers (at <= now_mono) join the ready queue; returns how many. *next:
 * when the earliest timer left is due (monotonic ms), -1: none. */
int a2__sched_fire(a2__sched *s, int64_t now_mono, int64_t *next);

/* Refuses new sessions, takes none, and forgets each session whose run
 * ends. */
void a2__sched_stop(a2__sched *s);

/* sessions, queued, running, timers, merged, timer_runs and rechecks of
 * *out; the other fields are left alone. */
void a2__sched_counts(const a2__sched *s, a2_worker_pool_stats *out);

#endif
