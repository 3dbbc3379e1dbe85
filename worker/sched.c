/*
 * The pool's table of sessions: a hash table of jobs, the FIFO ready queue,
 * the heap of timers, and the decision after each run (sched.h).
 */
#include "sched.h"

#include "../common/hash.h"

#include <stdlib.h>
#include <string.h>

struct a2__job {
    char *session;
    int wake_log;     /* run a2_store_wake_log first */
    int queued;       /* in the ready queue */
    int running;      /* a slot works it */
    int again;        /* woken while running: run once more */
    int64_t at;       /* timer (monotonic ms), 0: none */
    size_t heap_at;   /* its place in the timer heap + 1, 0: none (at 0) */
    int hinted;       /* a wake-up named work here */
    int rechecks;     /* runs that found nothing after a wake-up */
    uint64_t xid;     /* the latest wake-up's commit, which the next run
                         waits for (0: none) */
    int64_t log_from; /* the earliest index log wake-ups named (0: none) */
    int run_wake_log; /* the run in progress: its wake_log */
    uint64_t run_xid; /* ... its xid */
    int64_t run_log_from; /* ... and its log_from */
    a2__job *hnext;  /* hash chain */
    a2__job *rnext;  /* ready queue */
};

struct a2__sched {
    a2__job **buckets; /* sessions by name */
    size_t nbuckets;
    size_t njobs;
    a2__job *ready_head; /* FIFO of sessions to run */
    a2__job *ready_tail;
    size_t nqueued;
    /* sessions with a timer (at > 0, neither queued nor running), a
     * min-heap by at; room for every job */
    a2__job **heap;
    size_t nheap, capheap;
    size_t nrunning;
    int stopping;
    uint64_t merged;
    uint64_t timer_runs;
    uint64_t rechecks;
};

a2__next a2__after_run(const a2__ran *r)
{
    a2__next n = {A2W_DONE, 0, 0, r->wake_log};
    if (r->again) {
        n.kind = A2W_RUN_AGAIN;
    } else if (r->failed) {
        n.kind = A2W_TIMER;
        n.delay_ms = A2W_STORE_RETRY_MS;
    } else if (r->retry_at > 0) {
        int64_t due = r->retry_at - r->now;
        n.kind = A2W_TIMER;
        n.delay_ms = (due > 0 ? due : 0) + 5;
    } else if (r->partial && r->claimed) {
        n.kind = A2W_RUN_AGAIN;
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

/* ── the hash table ───────────────────────────────────────────────────── */

static size_t hash_of(const char *s)
{
    return (size_t)a2__table_hash(s, strlen(s));
}

static a2__job *find_job(const a2__sched *s, const char *session)
{
    if (!s->nbuckets)
        return NULL;
    for (a2__job *j = s->buckets[hash_of(session) & (s->nbuckets - 1)]; j;
         j = j->hnext)
        if (strcmp(j->session, session) == 0)
            return j;
    return NULL;
}

/* Adds a job for session to the table; NULL when out of memory. */
static a2__job *add_job(a2__sched *s, const char *session)
{
    if (s->njobs >= s->nbuckets) {
        size_t n = s->nbuckets ? s->nbuckets * 2 : 256;
        a2__job **nb = calloc(n, sizeof *nb);
        if (!nb)
            return NULL;
        for (size_t i = 0; i < s->nbuckets; i++)
            for (a2__job *k = s->buckets[i], *next; k; k = next) {
                next = k->hnext;
                size_t b = hash_of(k->session) & (n - 1);
                k->hnext = nb[b];
                nb[b] = k;
            }
        free(s->buckets);
        s->buckets = nb;
        s->nbuckets = n;
    }
    if (s->njobs >= s->capheap) {
        size_t n = s->capheap ? s->capheap * 2 : 256;
        a2__job **h = realloc(s->heap, n * sizeof *h);
        if (!h)
            return NULL;
        s->heap = h;
        s->capheap = n;
    }
    a2__job *j = calloc(1, sizeof *j);
    if (!j || !(j->session = strdup(session))) {
        free(j);
        return NULL;
    }
    size_t b = hash_of(session) & (s->nbuckets - 1);
    j->hnext = s->buckets[b];
    s->buckets[b] = j;
    s->njobs++;
    return j;
}

/* ── the timer heap ───────────────────────────────────────────────────── */

static void heap_place(a2__sched *s, size_t i, a2__job *j)
{
    s->heap[i] = j;
    j->heap_at = i + 1;
}

static void sift_up(a2__sched *s, size_t i)
{
    a2__job *j = s->heap[i];
    while (i > 0 && s->heap[(i - 1) / 2]->at > j->at) {
        heap_place(s, i, s->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_place(s, i, j);
}

static void sift_down(a2__sched *s, size_t i)
{
    a2__job *j = s->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->nheap)
            break;
        if (c + 1 < s->nheap && s->heap[c + 1]->at < s->heap[c]->at)
            c++;
        if (s->heap[c]->at >= j->at)
            break;
        heap_place(s, i, s->heap[c]);
        i = c;
    }
    heap_place(s, i, j);
}

/* Takes j's timer out of the heap (none: nothing to do). */
static void heap_remove(a2__sched *s, a2__job *j)
{
    if (!j->heap_at)
        return;
    size_t i = j->heap_at - 1;
    j->heap_at = 0;
    a2__job *last = s->heap[--s->nheap];
    if (i == s->nheap)
        return;
    heap_place(s, i, last);
    sift_up(s, i);
    sift_down(s, last->heap_at - 1);
}

/* Removes and frees a job that is not in the ready queue. */
static void remove_job(a2__sched *s, a2__job *dead)
{
    for (a2__job **p = &s->buckets[hash_of(dead->session) & (s->nbuckets - 1)];
         *p; p = &(*p)->hnext)
        if (*p == dead) {
            *p = dead->hnext;
            break;
        }
    heap_remove(s, dead);
    s->njobs--;
    free(dead->session);
    free(dead);
}

a2__sched *a2__sched_new(void)
{
    return calloc(1, sizeof(a2__sched));
}

void a2__sched_free(a2__sched *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (a2__job *k = s->buckets[i], *next; k; k = next) {
            next = k->hnext;
            free(k->session);
            free(k);
        }
    free(s->buckets);
    free(s->heap);
    free(s);
}

/* ── the ready queue and the timers ───────────────────────────────────── */

static void push_ready(a2__sched *s, a2__job *j)
{
    j->queued = 1;
    j->rnext = NULL;
    if (s->ready_tail)
        s->ready_tail->rnext = j;
    else
        s->ready_head = j;
    s->ready_tail = j;
    s->nqueued++;
}

static a2__job *pop_ready(a2__sched *s)
{
    a2__job *j = s->ready_head;
    if (!j)
        return NULL;
    s->ready_head = j->rnext;
    if (!s->ready_head)
        s->ready_tail = NULL;
    j->rnext = NULL;
    j->queued = 0;
    s->nqueued--;
    return j;
}

/* Sets (or moves) j's timer to at (> 0); the heap has room (add_job). */
static void set_timer(a2__sched *s, a2__job *j, int64_t at)
{
    j->at = at;
    if (!j->heap_at)
        heap_place(s, s->nheap++, j);
    sift_up(s, j->heap_at - 1);
    sift_down(s, j->heap_at - 1);
}

/* The earlier of two event indexes (0: none). */
static int64_t earliest(int64_t a, int64_t b)
{
    return a == 0 || (b != 0 && b < a) ? b : a;
}

int a2__sched_add(a2__sched *s, const char *session, int wake_log, int hinted,
                   uint64_t xid, int64_t log_from)
{
    if (s->stopping)
        return A2_WORKER_ESTOPPED;
    a2__job *j = find_job(s, session);
    if (!j && !(j = add_job(s, session)))
        return A2_WORKER_ENOMEM;
    j->wake_log |= wake_log;
    if (xid)
        j->xid = xid;
    j->log_from = earliest(j->log_from, log_from);
    if (hinted && !j->hinted) {
        j->hinted = 1;
        j->rechecks = 0;
    }
    j->at = 0; /* cancels a timer */
    heap_remove(s, j);
    if (j->running) {
        j->again = 1;
        s->merged++;
        return 0;
    }
    if (j->queued) {
        s->merged++;
        return 0;
    }
    push_ready(s, j);
    return 1;
}

a2__job *a2__sched_take(a2__sched *s, a2__run *run)
{
    a2__job *j = s->stopping ? NULL : pop_ready(s);
    if (!j)
        return NULL;
    j->running = 1;
    j->again = 0;
    j->run_wake_log = j->wake_log;
    j->wake_log = 0;
    j->run_xid = j->xid;
    j->xid = 0;
    j->run_log_from = j->log_from;
    j->log_from = 0;
    s->nrunning++;
    run->session = j->session;
    run->wake_log = j->run_wake_log;
    run->xid = j->run_xid;
    run->log_from = j->run_log_from;
    /* Woken by a2-consumer, which announces every head that becomes
     * claimable: one claim round is enough. */
    run->woken = j->hinted;
    return j;
}

a2__next a2__sched_done(a2__sched *s, a2__job *j, const a2__run_end *end,
                          int64_t now_real, int64_t now_mono)
{
    s->nrunning--;
    j->running = 0;
    a2__ran ran = {
            .again = j->again,
            .failed = end->failed,
            .retry_at = end->retry_at,
            .now = now_real,
            .hinted = j->hinted,
            .claimed = end->claimed,
            .rechecks = j->rechecks,
            .waited = j->run_xid != 0,
            .wake_log = j->run_wake_log,
            .partial = end->partial,
    };
    a2__next next = a2__after_run(&ran);
    if (s->stopping || next.kind == A2W_DONE) {
        remove_job(s, j);
        next.kind = A2W_DONE;
        return next;
    }
    j->wake_log |= next.wake_log;
    if (next.wake_log)
        j->log_from = earliest(j->log_from, j->run_log_from);
    if (next.kind == A2W_RUN_AGAIN) {
        j->again = 0;
        push_ready(s, j);
    } else {
        set_timer(s, j, now_mono + next.delay_ms);
        j->rechecks += next.recheck;
        s->rechecks += (uint64_t)next.recheck;
    }
    return next;
}

int a2__sched_fire(a2__sched *s, int64_t now_mono, int64_t *next)
{
    int fired = 0;
    while (s->nheap > 0 && s->heap[0]->at <= now_mono) {
        a2__job *j = s->heap[0];
        heap_remove(s, j);
        j->at = 0;
        push_ready(s, j);
        s->timer_runs++;
        fired++;
    }
    *next = s->nheap > 0 ? s->heap[0]->at : -1;
    return fired;
}

void a2__sched_stop(a2__sched *s)
{
    s->stopping = 1;
}

void a2__sched_counts(const a2__sched *s, a2_worker_pool_stats *out)
{
    out->sessions = s->njobs;
    out->queued = s->nqueued;
    out->running = s->nrunning;
    out->timers = s->nheap;
    out->merged = s->merged;
    out->timer_runs = s->timer_runs;
    out->rechecks = s->rechecks;
}
