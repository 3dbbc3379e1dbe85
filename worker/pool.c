/*
 * a2_worker_pool: the table of sessions (sched.c) under a mutex, a thread
 * per slot with its own runner that takes sessions from the ready queue,
 * and a timer thread that queues the sessions whose timer is due.
 */
#include "a2/worker.h"

#include "../common/clock.h"
#include "sched.h"
#include "worker_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RESYNC_PAGE 1000

typedef struct {
    a2_worker_pool *pool;
    int id; /* 1..nslots */
    pthread_t thread;
    int started;
    a2_worker_runner *runner;
    int64_t session_us; /* handler time a session in its last run (µs) */
} pool_slot;

struct a2_worker_pool {
    char *db;
    char **names; /* the served consumers */
    unsigned char *is_log;
    size_t nconsumers;
    a2_worker_pool_handler handler;
    void *ctx;
    void (*run_start)(void *ctx, int slot, size_t nsessions);
    a2_worker_log_fn log;
    void *log_ctx;
    a2_store *store; /* resync, on the feeding thread */
    int stopped;     /* the feeding thread: a2_worker_pool_stop ran */

    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* slots: a session is ready, or stopping */
    pthread_cond_t timer_cv; /* the timer thread: a timer was set, or
                                stopping */
    /* Under mu. */
    a2__sched *sched;
    int stopping;
    int64_t timer_wait; /* the timer thread sleeps until (monotonic ms), -1:
                           until signalled */
    a2_worker_pool_stats sums;
    int idle; /* slots waiting for work */

    pthread_t timer_thread;
    int timer_started;
    pool_slot *slots;
    int nslots;
};

/* A line to the pool's log (the room of a whole runner's last_error). */
static void plog(const a2_worker_pool *p, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void plog(const a2_worker_pool *p, const char *fmt, ...)
{
    if (!p->log)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->log(p->log_ctx, line);
}

/* ── threads ──────────────────────────────────────────────────────────── */

static int slot_handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    pool_slot *s = ctx;
    return s->pool->handler(s->pool->ctx, s->id, head, reply);
}

/* A timer was set for at (under mu): wakes the timer thread when it sleeps
 * past it. */
static void timer_set(a2_worker_pool *p, int64_t at)
{
    if (p->timer_wait < 0 || at < p->timer_wait)
        pthread_cond_signal(&p->timer_cv);
}

/* At most this many woken sessions one slot runs together, and about this
 * much handler time (µs) among them. */
#define POOL_MAX_TOGETHER 32
#define POOL_TOGETHER_US 5000

size_t a2__pool_take_count(int64_t session_us)
{
    int64_t n = session_us > 0 ? POOL_TOGETHER_US / session_us
                               : POOL_MAX_TOGETHER;
    return n < 1 ? 1 : n > POOL_MAX_TOGETHER ? POOL_MAX_TOGETHER : (size_t)n;
}

/* Runs n taken jobs on slot s (outside mu): several together
 * (a2_worker_runner_run_sessions: one claim round each, a session no
 * wake-up named then runs again while it claims), one on its own.
 * rcs[i], st[i]: each job's result; together_of[i]: it ran with others. */
static void run_jobs(pool_slot *s, const a2__run *runs, size_t n, int *rcs,
                     a2_worker_run_stats *st, unsigned char *together_of)
{
    a2_claim_session together[POOL_MAX_TOGETHER];
    size_t place[POOL_MAX_TOGETHER];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (n > 1) {
            together[k] = (a2_claim_session){runs[i].session, runs[i].xid,
                                             runs[i].log_from};
            place[k++] = i;
        } else if (runs[i].log_from > 0) {
            /* a log wake-up's: a new log cursor starts at its event */
            a2_claim_session one = {runs[i].session, runs[i].xid,
                                    runs[i].log_from};
            rcs[i] = a2_worker_runner_run_sessions(s->runner, &one, 1, &st[i]);
        } else if (runs[i].woken) {
            rcs[i] = a2_worker_runner_run_woken(s->runner, runs[i].session,
                                                runs[i].wake_log != 0,
                                                runs[i].xid, &st[i]);
        } else {
            rcs[i] = a2_worker_runner_run(s->runner, runs[i].session,
                                          runs[i].wake_log != 0, &st[i]);
        }
    }
    if (k == 0)
        return;
    a2_worker_run_stats kst[POOL_MAX_TOGETHER];
    int rc = a2_worker_runner_run_sessions(s->runner, together, k, kst);
    for (size_t i = 0; i < k; i++) {
        rcs[place[i]] = rc;
        st[place[i]] = kst[i];
        together_of[place[i]] = k > 1;
    }
}

static void *slot_main(void *arg)
{
    pool_slot *s = arg;
    a2_worker_pool *p = s->pool;
    a2__job *jobs[POOL_MAX_TOGETHER];
    a2__run runs[POOL_MAX_TOGETHER];
    int rcs[POOL_MAX_TOGETHER];
    a2_worker_run_stats st[POOL_MAX_TOGETHER];
    unsigned char together_of[POOL_MAX_TOGETHER];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        size_t n = 0;
        jobs[0] = p->stopping ? NULL : a2__sched_take(p->sched, &runs[0]);
        if (!jobs[0]) {
            if (p->stopping)
                break;
            p->idle++;
            pthread_cond_wait(&p->work_cv, &p->mu);
            p->idle--;
            continue;
        }
        n = 1;
        /* Sessions queued while no other slot waits for work: this slot
         * takes those its handlers run in about 5 ms, and runs them in one
         * claim and one settlement round trip. Slow handlers gain little
         * from that and would wait for each other. */
        size_t take =
                p->idle == 0 ? a2__pool_take_count(s->session_us) : 1;
        while (n < take && (jobs[n] = a2__sched_take(p->sched, &runs[n])))
            n++;
        pthread_mutex_unlock(&p->mu);
        if (p->run_start)
            p->run_start(p->ctx, s->id, n);

        /* runs[i].session stays valid: only this thread ends the job. */
        memset(st, 0, n * sizeof *st);
        memset(rcs, 0, n * sizeof *rcs);
        memset(together_of, 0, n);
        run_jobs(s, runs, n, rcs, st, together_of);

        uint64_t us = 0;
        for (size_t i = 0; i < n; i++)
            us += st[i].handler_us;
        s->session_us = (int64_t)(us / n);
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < n; i++) {
            int failed = rcs[i] != 0 && rcs[i] != A2_WORKER_ESTOPPED;
            if (failed && (i == 0 || rcs[i] != rcs[i - 1]))
                plog(p, "%s",
                     rcs[i] == A2_WORKER_ESTORE
                             ? a2_worker_runner_last_error(s->runner)
                             : "out of memory");
            a2_worker_pool_stats *m = &p->sums;
            m->runs++;
            m->woken_runs += runs[i].woken != 0;
            int empty = rcs[i] == 0 && st[i].claimed == 0;
            m->empty_runs += empty;
            m->empty_woken_runs += empty && runs[i].woken;
            m->failed_runs += failed;
            m->claimed += st[i].claimed;
            m->completed += st[i].completed;
            m->failed += st[i].failed;
            m->dead_lettered += st[i].dead_lettered;
            m->superseded += st[i].superseded;
            m->renewals += st[i].renewals;
            m->visibility_waits += st[i].visibility_waits;
            m->together_runs += together_of[i];
            a2__run_end end = {.failed = failed,
                                .retry_at = st[i].retry_at,
                                .claimed = st[i].claimed > 0,
                                .partial = n > 1 && !runs[i].woken};
            int64_t now = a2__mono_ms();
            a2__next next = a2__sched_done(p->sched, jobs[i], &end,
                                           a2__real_ms(), now);
            if (next.kind == A2W_RUN_AGAIN)
                pthread_cond_signal(&p->work_cv);
            else if (next.kind == A2W_TIMER)
                timer_set(p, now + next.delay_ms);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void *timer_main(void *arg)
{
    a2_worker_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stopping) {
        int64_t next;
        int fired = a2__sched_fire(p->sched, a2__mono_ms(), &next);
        if (fired == 1)
            pthread_cond_signal(&p->work_cv);
        else if (fired > 1)
            pthread_cond_broadcast(&p->work_cv);
        p->timer_wait = next;
        if (next < 0) {
            pthread_cond_wait(&p->timer_cv, &p->mu);
        } else {
            struct timespec ts = a2__mono_timespec(next);
            pthread_cond_timedwait(&p->timer_cv, &p->mu, &ts);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ── construction ─────────────────────────────────────────────────────── */

static int bad(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return -1;
}

static int check_options(const a2_worker_pool_options *o, char *err,
                         size_t errlen)
{
    if (!o || !o->handler || !o->consumers || o->nconsumers == 0)
        return bad(err, errlen, "a pool needs a handler and consumers");
    if (a2__worker_check_names(o->consumers, o->nconsumers, err, errlen) != 0)
        return -1;
    if (o->slots < 0 || o->slots > A2_WORKER_MAX_SLOTS) {
        snprintf(err, errlen, "slots must be 1..%d, not %d",
                 A2_WORKER_MAX_SLOTS, o->slots);
        return -1;
    }
    if (o->name && !*o->name)
        return bad(err, errlen, "the pool's name must not be empty");
    return 0;
}

a2_worker_pool *a2_worker_pool_new(const a2_worker_pool_options *o, char *err,
                                   size_t errlen)
{
    char spare[8];
    a2__worker_err_init(&err, &errlen, spare, sizeof spare);
    if (check_options(o, err, errlen) != 0)
        return NULL;
    a2_worker_pool *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    a2__mono_cond_init(&p->timer_cv);
    p->timer_wait = -1;
    p->handler = o->handler;
    p->ctx = o->ctx;
    p->run_start = o->run_start;
    p->log = o->log;
    p->log_ctx = o->log_ctx;
    int nslots = o->slots ? o->slots : 1;
    p->db = strdup(o->db ? o->db : "");
    p->sched = a2__sched_new();
    p->names = calloc(o->nconsumers, sizeof *p->names);
    p->is_log = calloc(o->nconsumers, 1);
    p->slots = calloc((size_t)nslots, sizeof *p->slots);
    if (!p->db || !p->sched || !p->names || !p->is_log || !p->slots) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    for (size_t i = 0; i < o->nconsumers; i++) {
        if (!(p->names[i] = strdup(o->consumers[i].name))) {
            snprintf(err, errlen, "out of memory");
            goto error;
        }
        p->nconsumers = i + 1;
        p->is_log[i] = o->consumers[i].log != NULL;
    }
    char name[300];
    if (o->name)
        snprintf(name, sizeof name, "%s", o->name);
    else
        a2__worker_default_name(name, sizeof name);
    for (int i = 0; i < nslots; i++) {
        pool_slot *s = &p->slots[i];
        char holder[400];
        snprintf(holder, sizeof holder, "%s/%d", name, i + 1);
        a2_worker_runner_options ro = {
                .db = p->db,
                .holder = holder,
                .consumers = o->consumers,
                .nconsumers = o->nconsumers,
                .ttl_ms = o->ttl_ms,
                .max_failures = o->max_failures,
                .retry_after_ms = o->retry_after_ms,
                .handler = slot_handler,
                .ctx = s,
                .log = o->runner_log,
                .log_ctx = o->runner_log_ctx,
        };
        s->pool = p;
        s->id = i + 1;
        s->runner = a2_worker_runner_new(&ro, err, errlen);
        if (!s->runner)
            goto error;
        p->nslots = i + 1;
        if (pthread_create(&s->thread, NULL, slot_main, s) != 0) {
            snprintf(err, errlen, "could not start a thread");
            goto error;
        }
        s->started = 1;
    }
    if (pthread_create(&p->timer_thread, NULL, timer_main, p) != 0) {
        snprintf(err, errlen, "could not start a thread");
        goto error;
    }
    p->timer_started = 1;
    return p;
error:
    a2_worker_pool_free(p);
    return NULL;
}

void a2_worker_pool_stop(a2_worker_pool *p)
{
    if (!p || p->stopped)
        return;
    p->stopped = 1;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    if (p->sched)
        a2__sched_stop(p->sched);
    for (int i = 0; i < p->nslots; i++)
        a2_worker_runner_stop(p->slots[i].runner);
    pthread_cond_broadcast(&p->work_cv);
    pthread_cond_signal(&p->timer_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].started) {
            pthread_join(p->slots[i].thread, NULL);
            p->slots[i].started = 0;
        }
    if (p->timer_started) {
        pthread_join(p->timer_thread, NULL);
        p->timer_started = 0;
    }
    for (int i = 0; i < p->nslots; i++) {
        a2_worker_runner_free(p->slots[i].runner);
        p->slots[i].runner = NULL;
    }
    a2_store_close(p->store);
    p->store = NULL;
}

void a2_worker_pool_free(a2_worker_pool *p)
{
    if (!p)
        return;
    a2_worker_pool_stop(p);
    a2__sched_free(p->sched);
    for (size_t i = 0; i < p->nconsumers; i++)
        free(p->names[i]);
    free(p->names);
    free(p->is_log);
    free(p->slots);
    free(p->db);
    pthread_cond_destroy(&p->timer_cv);
    pthread_cond_destroy(&p->work_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ── feeding it ───────────────────────────────────────────────────────── */

/* Schedules session under mu. */
static int add_locked(a2_worker_pool *p, const char *session, bool wake_log,
                      int hinted, uint64_t xid, int64_t log_from)
{
    int rc = a2__sched_add(p->sched, session, wake_log, hinted, xid, log_from);
    if (rc == 1) {
        pthread_cond_signal(&p->work_cv);
        return 0;
    }
    if (rc == A2_WORKER_ENOMEM)
        plog(p, "out of memory queuing %s", session);
    return rc;
}

static int add(a2_worker_pool *p, const char *session, bool wake_log,
               int hinted, uint64_t xid, int64_t log_from)
{
    if (!p || !session || !*session)
        return A2_WORKER_EINVAL;
    pthread_mutex_lock(&p->mu);
    int rc = add_locked(p, session, wake_log, hinted, xid, log_from);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int a2_worker_pool_wake(a2_worker_pool *p, const char *session, bool wake_log,
                        uint64_t xid)
{
    return add(p, session, wake_log, 1, xid, 0);
}

int a2_worker_pool_queue(a2_worker_pool *p, const char *session, bool wake_log)
{
    return add(p, session, wake_log, 0, 0, 0);
}

/* The index of consumer among the served ones, -1: not served. */
static int served(const a2_worker_pool *p, const char *consumer)
{
    for (size_t i = 0; i < p->nconsumers; i++)
        if (strcmp(p->names[i], consumer) == 0)
            return (int)i;
    return -1;
}

int a2_worker_pool_resync(a2_worker_pool *p, const char *consumer,
                          size_t *sessions)
{
    size_t local;
    if (!sessions)
        sessions = &local;
    *sessions = 0;
    if (!p)
        return A2_WORKER_EINVAL;
    int ci = consumer ? served(p, consumer) : -1;
    if (consumer && ci < 0)
        return A2_WORKER_EINVAL;
    if (p->stopped)
        return A2_WORKER_ESTOPPED;
    if (!p->store) {
        a2_store_error err = {0};
        if (a2_store_open(&p->store, p->db, &err) != 0) {
            plog(p, "could not resync: %s", err.message);
            return A2_WORKER_ESTORE;
        }
    }
    const char *const *names = (const char *const *)p->names;
    size_t nnames = p->nconsumers;
    if (consumer) {
        names = (const char *const *)&p->names[ci];
        nnames = 1;
    }
    char *after = NULL;
    int rc = 0;
    for (;;) {
        a2_sessions page = {0};
        if (a2_store_pending_sessions(p->store, names, nnames, after,
                                      RESYNC_PAGE, &page) != 0) {
            const a2_store_error *e = a2_store_last_error(p->store);
            plog(p, "could not resync: %s", e->message);
            if (e->code == A2_ESTORE_UNAVAILABLE) {
                a2_store_close(p->store);
                p->store = NULL;
            }
            a2_sessions_free(&page);
            rc = A2_WORKER_ESTORE;
            break;
        }
        pthread_mutex_lock(&p->mu);
        for (size_t i = 0; i < page.count; i++) {
            int arc = add_locked(p, page.items[i], false, 0, 0, 0);
            if (arc < 0 && rc == 0)
                rc = arc;
        }
        pthread_mutex_unlock(&p->mu);
        *sessions += page.count;
        free(after);
        after = page.count == RESYNC_PAGE ? strdup(page.items[RESYNC_PAGE - 1])
                                          : NULL;
        a2_sessions_free(&page);
        if (!after)
            break;
    }
    free(after);
    return rc;
}

int a2_worker_pool_event(a2_worker_pool *p, const a2_worker_event *ev)
{
    if (!p || !ev)
        return A2_WORKER_EINVAL;
    int ci = ev->consumer ? served(p, ev->consumer) : -1;
    if (ev->consumer && ci < 0)
        return 0; /* another pool's */
    /* ev->consumer's log cursors (every served one's without a consumer) */
    bool is_log = false;
    for (size_t i = 0; i < p->nconsumers; i++)
        if ((ci < 0 || (int)i == ci) && p->is_log[i])
            is_log = true;
    switch (ev->type) {
    case A2_WORKER_EV_WAKE:
        return a2_worker_pool_wake(p, ev->session, false, ev->xid);
    case A2_WORKER_EV_LOG: /* a new log cursor starts at its event */
        return add(p, ev->session, true, 1, ev->xid, ev->idx > 0 ? ev->idx : 0);
    case A2_WORKER_EV_SWEEP:
        return a2_worker_pool_queue(p, ev->session, is_log);
    case A2_WORKER_EV_RESYNC: {
        if (ev->all_sessions)
            return a2_worker_pool_resync(p, ev->consumer, NULL);
        int rc = 0;
        for (size_t i = 0; i < ev->nsessions; i++) {
            int qrc = a2_worker_pool_queue(p, ev->sessions[i], is_log);
            if (qrc != 0 && rc == 0)
                rc = qrc;
        }
        return rc;
    }
    default:
        return 0;
    }
}

void a2_worker_pool_get_stats(a2_worker_pool *p, a2_worker_pool_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    *out = p->sums;
    if (p->sched)
        a2__sched_counts(p->sched, out);
    pthread_mutex_unlock(&p->mu);
}
