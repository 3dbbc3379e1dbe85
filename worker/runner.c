/*
 * a2_worker_runner: claim -> handle -> complete/fail for one session (the
 * outcomes of a claim's fast handlers settled together in one round trip),
 * with a
 * renewal thread that extends the leases of the unfinished heads of a claim
 * at a third of the ttl, on its own store connection.
 */
#include "a2/worker.h"

#include "../common/clock.h"
#include "worker_int.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct a2_worker_reply {
    a2_append_event *events;
    size_t nevents;
    size_t cap;
    char **owned; /* type, payload, id of every event: 3 per event */
    char *error;
    const a2_head *head;
};

typedef struct {
    a2_consumer consumer;
    a2_log_spec log;
    char *name;
    char *lane;
    char **types;
    size_t ntypes;
} consumer_copy;

struct a2_worker_runner {
    char *db;
    char *holder;
    consumer_copy *cons;
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
    const char *session;  /* the session of the claim being run */
    a2_attempt_ref *refs; /* its heads */
    unsigned char *done;  /* per head: finished */
    size_t nrefs;
    int renew_busy;     /* a renewal is in flight */
    int64_t next_renew; /* monotonic ms */
    uint64_t renewals;
    uint64_t lost; /* heads the renewal found superseded */

    char last_error[1200];
};

#define RLOG(r, ...) a2__worker_logf((r)->log, (r)->log_ctx, __VA_ARGS__)

/* ── replies ──────────────────────────────────────────────────────────── */

static void reply_reset(a2_worker_reply *rp)
{
    for (size_t i = 0; i < rp->nevents * 3; i++)
        free(rp->owned[i]);
    rp->nevents = 0;
    free(rp->error);
    rp->error = NULL;
}

static void reply_free(a2_worker_reply *rp)
{
    reply_reset(rp);
    free(rp->events);
    free(rp->owned);
}

int a2_worker_reply_add(a2_worker_reply *reply, const char *type,
                        const char *payload, const char *id)
{
    if (!reply || !type || !*type || (id && !*id))
        return A2_WORKER_EINVAL;
    if (payload) {
        json_t *v = json_loads(payload, JSON_DECODE_ANY, NULL);
        if (!v)
            return A2_WORKER_EINVAL;
        json_decref(v);
    }
    if (reply->nevents >= A2_STORE_MAX_EVENTS)
        return A2_WORKER_EINVAL;
    if (reply->nevents == reply->cap) {
        size_t cap = reply->cap ? reply->cap * 2 : 8;
        a2_append_event *ev = realloc(reply->events, cap * sizeof *ev);
        if (!ev)
            return A2_WORKER_ENOMEM;
        reply->events = ev;
        char **ow = realloc(reply->owned, cap * 3 * sizeof *ow);
        if (!ow)
            return A2_WORKER_ENOMEM;
        reply->owned = ow;
        reply->cap = cap;
    }
    char genid[A2_STORE_MAX_NAME];
    if (!id) {
        const a2_head *h = reply->head;
        snprintf(genid, sizeof genid, "ret-%s-%lld-%zu",
                 h && h->dispatch.consumer ? h->dispatch.consumer : "?",
                 h ? (long long)h->event.index : 0LL, reply->nevents + 1);
        id = genid;
    }
    char **o = &reply->owned[reply->nevents * 3];
    o[0] = strdup(type);
    o[1] = payload ? strdup(payload) : NULL;
    o[2] = strdup(id);
    if (!o[0] || (payload && !o[1]) || !o[2]) {
        free(o[0]);
        free(o[1]);
        free(o[2]);
        return A2_WORKER_ENOMEM;
    }
    a2_append_event *e = &reply->events[reply->nevents];
    memset(e, 0, sizeof *e);
    e->type = o[0];
    e->payload = o[1];
    e->id = o[2];
    reply->nevents++;
    return 0;
}

void a2_worker_reply_error(a2_worker_reply *reply, const char *text)
{
    if (!reply)
        return;
    free(reply->error);
    reply->error = NULL;
    if (!text)
        return;
    size_t n = strlen(text);
    if (n > A2_WORKER_MAX_ERROR_TEXT)
        text += n - A2_WORKER_MAX_ERROR_TEXT;
    reply->error = strdup(text);
}

/* ── the renewal thread ───────────────────────────────────────────────── */

static void *renew_main(void *arg)
{
    a2_worker_runner *r = arg;
    a2_attempt_ref *batch = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        size_t live = 0;
        for (size_t i = 0; i < r->nrefs; i++)
            if (!r->done[i])
                live++;
        if (live == 0) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        int64_t now = a2__mono_ms();
        if (now < r->next_renew) {
            struct timespec ts = a2__mono_timespec(r->next_renew);
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            continue;
        }
        if (live > cap) {
            a2_attempt_ref *nb = realloc(batch, live * sizeof *nb);
            if (!nb) {
                r->next_renew = now + r->ttl_ms / 3;
                continue;
            }
            batch = nb;
            cap = live;
        }
        size_t n = 0;
        for (size_t i = 0; i < r->nrefs; i++)
            if (!r->done[i])
                batch[n++] = r->refs[i];
        const char *session = r->session;
        r->renew_busy = 1;
        r->next_renew = now + (r->ttl_ms / 3 > 0 ? r->ttl_ms / 3 : 1);
        pthread_mutex_unlock(&r->mu);

        a2_renew_result res = {0};
        int rc = -1;
        if (!r->renew_store) {
            a2_store_error err = {0};
            if (a2_store_open(&r->renew_store, r->db, &err) != 0)
                RLOG(r, "could not renew leases in %s: %s", session,
                     err.message);
        }
        if (r->renew_store) {
            rc = a2_store_renew(r->renew_store, session, r->holder, batch, n,
                                r->ttl_ms, 0, &res);
            if (rc != 0) {
                const a2_store_error *e = a2_store_last_error(r->renew_store);
                RLOG(r, "could not renew leases in %s: %s", session,
                     e->message);
                if (e->code == A2_ESTORE_UNAVAILABLE) {
                    a2_store_close(r->renew_store);
                    r->renew_store = NULL;
                }
            }
        }
        for (size_t i = 0; rc == 0 && i < res.nsuperseded; i++)
            RLOG(r, "lease of %s %s #%lld lost (taken over, done or cleared)",
                 session, res.superseded[i].consumer,
                 (long long)res.superseded[i].index);

        pthread_mutex_lock(&r->mu);
        if (rc == 0) {
            r->renewals += res.nrenewed;
            r->lost += res.nsuperseded;
        }
        a2_renew_result_free(&res);
        r->renew_busy = 0;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    free(batch);
    return NULL;
}

/* ── construction ─────────────────────────────────────────────────────── */

static void consumers_free(a2_worker_runner *r)
{
    for (size_t i = 0; r->cons && i < r->nconsumers; i++) {
        free(r->cons[i].name);
        free(r->cons[i].lane);
        for (size_t j = 0; j < r->cons[i].ntypes; j++)
            free(r->cons[i].types[j]);
        free(r->cons[i].types);
    }
    free(r->cons);
    free(r->consumers);
}

static int consumers_copy(a2_worker_runner *r, const a2_consumer *src, size_t n)
{
    r->cons = calloc(n, sizeof *r->cons);
    r->consumers = calloc(n, sizeof *r->consumers);
    if (!r->cons || !r->consumers)
        return -1;
    r->nconsumers = n;
    for (size_t i = 0; i < n; i++) {
        consumer_copy *c = &r->cons[i];
        c->name = strdup(src[i].name);
        if (!c->name)
            return -1;
        r->consumers[i].name = c->name;
        if (!src[i].log)
            continue;
        const a2_log_spec *l = src[i].log;
        c->lane = l->lane ? strdup(l->lane) : NULL;
        if (l->lane && !c->lane)
            return -1;
        if (l->types && l->ntypes) {
            c->types = calloc(l->ntypes, sizeof *c->types);
            if (!c->types)
                return -1;
            for (size_t j = 0; j < l->ntypes; j++) {
                c->types[j] = strdup(l->types[j]);
                if (!c->types[j])
                    return -1;
                c->ntypes = j + 1;
            }
        }
        c->log.lane = c->lane;
        c->log.types = (const char *const *)c->types;
        c->log.ntypes = c->ntypes;
        c->log.backfill = l->backfill;
        r->consumers[i].log = &r->cons[i].log;
    }
    return 0;
}

int a2__worker_check_names(const a2_consumer *consumers, size_t n, char *err,
                           size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (!consumers[i].name || !*consumers[i].name) {
            snprintf(err, errlen, "consumer %zu has no name", i);
            return -1;
        }
    return 0;
}

/* Connects *st to db; -1 with the reason in err when it cannot. */
static int open_store(a2_store **st, const char *db, char *err, size_t errlen)
{
    a2_store_error serr = {0};
    if (a2_store_open(st, db, &serr) != 0) {
        snprintf(err, errlen, "could not connect to the store: %s",
                 serr.message);
        return -1;
    }
    return 0;
}

/* Warms the claims connection (a2_store_warm); a refusal is logged. */
static void warm(a2_worker_runner *r)
{
    if (a2_store_warm(r->store) == 0)
        return;
    RLOG(r, "could not warm the store connection: %s",
         a2_store_last_error(r->store)->message);
}

a2_worker_runner *a2_worker_runner_new(const a2_worker_runner_options *o,
                                       char *err, size_t errlen)
{
    char spare[8];
    a2__worker_err_init(&err, &errlen, spare, sizeof spare);
    if (!o || !o->handler || !o->consumers || o->nconsumers == 0) {
        snprintf(err, errlen, "a runner needs a handler and consumers");
        return NULL;
    }
    if (a2__worker_check_names(o->consumers, o->nconsumers, err, errlen) != 0)
        return NULL;
    if (o->ttl_ms < 0 || o->max_failures < 0 || (o->holder && !*o->holder)) {
        snprintf(err, errlen, "bad ttl, max_failures or holder");
        return NULL;
    }
    a2_worker_runner *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    a2__mono_cond_init(&r->cv);
    char holder[400];
    if (!o->holder) {
        char name[300];
        a2__worker_default_name(name, sizeof name);
        snprintf(holder, sizeof holder, "%s:%lx", name,
                 (unsigned long)((a2__mono_us() ^ (int64_t)(uintptr_t)r) &
                                 0xfffff));
    }
    r->db = strdup(o->db ? o->db : "");
    r->holder = strdup(o->holder ? o->holder : holder);
    if (!r->db || !r->holder ||
        consumers_copy(r, o->consumers, o->nconsumers) != 0) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    r->ttl_ms = o->ttl_ms ? o->ttl_ms : A2_WORKER_DEFAULT_TTL_MS;
    r->max_failures =
            o->max_failures ? o->max_failures : A2_WORKER_DEFAULT_MAX_FAILURES;
    r->retry_after_ms = o->retry_after_ms < 0 ? 0
                        : o->retry_after_ms > 0
                                ? o->retry_after_ms
                                : A2_WORKER_DEFAULT_RETRY_AFTER_MS;
    r->handler = o->handler;
    r->ctx = o->ctx;
    r->log = o->log;
    r->log_ctx = o->log_ctx;
    if (open_store(&r->store, r->db, err, errlen) != 0 ||
        open_store(&r->renew_store, r->db, err, errlen) != 0)
        goto error;
    warm(r);
    if (pthread_create(&r->thread, NULL, renew_main, r) != 0) {
        snprintf(err, errlen, "could not start the renewal thread");
        goto error;
    }
    r->thread_started = 1;
    return r;
error:
    a2_worker_runner_free(r);
    return NULL;
}

void a2_worker_runner_free(a2_worker_runner *r)
{
    if (!r)
        return;
    if (r->thread_started) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    a2_store_close(r->store);
    a2_store_close(r->renew_store);
    consumers_free(r);
    free(r->db);
    free(r->holder);
    free(r);
}

void a2_worker_runner_stop(a2_worker_runner *r)
{
    if (r)
        r->stopping = 1;
}

const char *a2_worker_runner_holder(const a2_worker_runner *r)
{
    return r ? r->holder : "";
}

const char *a2_worker_runner_last_error(const a2_worker_runner *r)
{
    return r ? r->last_error : "";
}

/* ── running a session ────────────────────────────────────────────────── */

/* Records a store failure; drops the connection when it broke. */
static int store_error(a2_worker_runner *r, const char *what,
                       const char *session)
{
    const a2_store_error *e = r->store ? a2_store_last_error(r->store) : NULL;
    snprintf(r->last_error, sizeof r->last_error, "%s in %s failed: %s", what,
             session, e && e->message[0] ? e->message : "no connection");
    if (!e || e->code == A2_ESTORE_UNAVAILABLE) {
        a2_store_close(r->store);
        r->store = NULL;
    }
    return A2_WORKER_ESTORE;
}

static int ensure_store(a2_worker_runner *r)
{
    if (r->store)
        return 0;
    a2_store_error err = {0};
    if (a2_store_open(&r->store, r->db, &err) != 0) {
        snprintf(r->last_error, sizeof r->last_error,
                 "could not connect to the store: %s", err.message);
        return A2_WORKER_ESTORE;
    }
    warm(r);
    return 0;
}

static void publish(a2_worker_runner *r, const char *session,
                    a2_attempt_ref *refs, unsigned char *done, size_t n)
{
    pthread_mutex_lock(&r->mu);
    r->session = session;
    r->refs = refs;
    r->done = done;
    r->nrefs = n;
    r->next_renew = a2__mono_ms() + (r->ttl_ms / 3 > 0 ? r->ttl_ms / 3 : 1);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void mark_done(a2_worker_runner *r, size_t i)
{
    pthread_mutex_lock(&r->mu);
    r->done[i] = 1;
    pthread_mutex_unlock(&r->mu);
}

/* Withdraws the claim from the renewal thread, waiting out a renewal in
 * flight (it reads the claim's strings). */
static void unpublish(a2_worker_runner *r, a2_worker_run_stats *st)
{
    pthread_mutex_lock(&r->mu);
    while (r->renew_busy)
        pthread_cond_wait(&r->cv, &r->mu);
    r->session = NULL;
    r->refs = NULL;
    r->done = NULL;
    r->nrefs = 0;
    st->renewals += r->renewals;
    r->renewals = 0;
    pthread_mutex_unlock(&r->mu);
}

/* Counts (and logs) the outcome of a settled head: a completion's with the
 * count of its returned events, a failure's with its failure count. */
static void note_outcome(a2_worker_runner *r, const char *session,
                         const a2_attempt_ref *ref, int outcome,
                         int failure_count, size_t nreturned,
                         a2_worker_run_stats *st)
{
    switch (outcome) {
    case A2_ATTEMPT_COMPLETED:
        st->completed++;
        RLOG(r, "completed %s %s #%lld attempt %d (%zu returned)", session,
             ref->consumer, (long long)ref->index, ref->attempt, nreturned);
        break;
    case A2_ATTEMPT_DEAD_LETTERED:
        st->dead_lettered++;
        RLOG(r, "dead-lettered %s %s #%lld after %d failures", session,
             ref->consumer, (long long)ref->index, failure_count);
        break;
    case A2_ATTEMPT_FAILED:
        st->failed++;
        RLOG(r, "failed %s %s #%lld attempt %d (failure %d of %d)", session,
             ref->consumer, (long long)ref->index, ref->attempt, failure_count,
             r->max_failures);
        break;
    default:
        st->superseded++;
        RLOG(r, "%s %s #%lld attempt %d was superseded", session, ref->consumer,
             (long long)ref->index, ref->attempt);
        break;
    }
}

/* The failure of a head whose handler failed (its reply's error). */
static a2_fail_request fail_request(const a2_worker_runner *r,
                                    const a2_worker_reply *rp)
{
    return (a2_fail_request){.error = rp->error ? rp->error : "",
                             .max_failures = r->max_failures,
                             .retry_after_ms = r->retry_after_ms};
}

/* Completes or fails one head after its handler ran. */
static int settle(a2_worker_runner *r, const char *session,
                  const a2_attempt_ref *ref, int handler_rc,
                  a2_worker_reply *rp, a2_worker_run_stats *st)
{
    if (handler_rc == 0) {
        a2_complete_result cres = {0};
        int rc = a2_store_complete(r->store, session, ref, rp->events,
                                   rp->nevents, r->consumers, r->nconsumers,
                                   &cres);
        if (rc == 0) {
            note_outcome(r, session, ref, cres.outcome, 0, cres.events.count,
                         st);
            a2_complete_result_free(&cres);
            return 0;
        }
        a2_complete_result_free(&cres);
        const a2_store_error *e = a2_store_last_error(r->store);
        if (e->code != A2_EPARTIAL_DUPLICATE_BATCH &&
            e->code != A2_EINVALID_ARGUMENT && e->code != A2_ENO_SUCH_EVENT)
            return store_error(r, "complete", session);
        /* The returned events were refused: that is the attempt failing. */
        char text[700];
        snprintf(text, sizeof text, "returned events refused: %s (%s)",
                 e->message, a2_store_code_name(e->code));
        a2_worker_reply_error(rp, text);
    }
    a2_fail_request fr = fail_request(r, rp);
    a2_fail_result fres = {0};
    if (a2_store_fail(r->store, session, ref, &fr, &fres) != 0)
        return store_error(r, "fail", session);
    note_outcome(r, session, ref, fres.outcome, fres.failure_count, 0, st);
    return 0;
}

/* Outcomes wait to be settled together while the handlers of a claim's
 * heads take less than this (ms) each and the first outcome waited no
 * longer: fast handlers' outcomes go in one round trip; after a slow
 * handler, what waits is settled before the next handler runs. */
#define SETTLE_HOLD_MS 5

/* Settles heads [from, to) of run_heads' arrays: one head as settle does;
 * several in one round trip (a2_store_settle), or, should the store refuse
 * that call (a refused returned event, a deadlock: nothing was settled),
 * each on its own. */
static int settle_range(a2_worker_runner *r, const char *session,
                        const a2_attempt_ref *refs, const int *hrc,
                        a2_worker_reply *rps, const a2_settlement *sts,
                        a2_settle_result *res, size_t from, size_t to,
                        a2_worker_run_stats *st)
{
    size_t n = to - from;
    int rc = 0;
    if (n > 1 && a2_store_settle(r->store, session, sts + from, n, r->consumers,
                                 r->nconsumers, res) == 0) {
        st->settled_together += n;
        for (size_t i = from; i < to; i++) {
            const a2_settle_result *o = &res[i - from];
            note_outcome(r, session, &refs[i], o->outcome, o->failure_count,
                         o->events.count, st);
            mark_done(r, i);
        }
        a2_settle_results_free(res, n);
        return 0;
    }
    if (n > 1) {
        const a2_store_error *e = a2_store_last_error(r->store);
        if (e->code == A2_ESTORE_UNAVAILABLE || e->code == A2_ESTORE_NOMEM)
            return store_error(r, "settle", session);
        RLOG(r,
             "settling %zu heads of %s together was refused (%s): one by "
             "one",
             n, session, e->message);
    }
    for (size_t i = from; i < to && rc == 0; i++) {
        rc = settle(r, session, &refs[i], hrc[i], &rps[i], st);
        mark_done(r, i);
    }
    return rc;
}

/* Runs the handler of each of a claim's heads in order; the outcomes of
 * handlers that follow each other within SETTLE_HOLD_MS are settled
 * together, in one round trip. */
static int run_heads(a2_worker_runner *r, const char *session,
                     const a2_heads *heads, const a2_attempt_ref *refs,
                     a2_worker_run_stats *st)
{
    size_t n = heads->count;
    a2_worker_reply *rps = calloc(n, sizeof *rps);
    int *hrc = calloc(n, sizeof *hrc);
    a2_settlement *sts = calloc(n, sizeof *sts);
    a2_fail_request *frs = calloc(n, sizeof *frs);
    a2_settle_result *res = calloc(n, sizeof *res);
    int rc = 0;
    if (!rps || !hrc || !sts || !frs || !res) {
        snprintf(r->last_error, sizeof r->last_error, "out of memory");
        rc = A2_WORKER_ENOMEM;
        goto done;
    }
    size_t from = 0;     /* the first head not yet settled */
    int64_t held_at = 0; /* when its handler ended (monotonic ms) */
    bool slow = false;   /* the last handler took SETTLE_HOLD_MS or more */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i > from &&
            (slow || a2__mono_ms() - held_at >= SETTLE_HOLD_MS)) {
            rc = settle_range(r, session, refs, hrc, rps, sts, res, from, i,
                              st);
            from = i;
            if (rc != 0)
                break;
        }
        rps[i].head = &heads->items[i];
        int64_t began = a2__mono_ms();
        hrc[i] = r->handler(r->ctx, &heads->items[i], &rps[i]);
        int64_t ended = a2__mono_ms();
        slow = ended - began >= SETTLE_HOLD_MS;
        if (i == from)
            held_at = ended;
        sts[i].attempt = refs[i];
        if (hrc[i] == 0) {
            sts[i].events = rps[i].events;
            sts[i].nevents = rps[i].nevents;
        } else {
            frs[i] = fail_request(r, &rps[i]);
            sts[i].fail = &frs[i];
        }
    }
    if (rc == 0 && from < n)
        rc = settle_range(r, session, refs, hrc, rps, sts, res, from, n, st);
done:
    for (size_t i = 0; rps && i < n; i++)
        reply_free(&rps[i]);
    free(rps);
    free(hrc);
    free(sts);
    free(frs);
    free(res);
    return rc;
}

/* Brings every served log consumer's cursor up to date (after_xid: the
 * commit to wait for first, 0: none). */
static int wake_logs(a2_worker_runner *r, const char *session,
                     uint64_t after_xid)
{
    for (size_t i = 0; i < r->nconsumers; i++) {
        if (!r->consumers[i].log)
            continue;
        a2_cursors cur = {0};
        int64_t head = 0;
        int wrc = a2_store_wake_log(r->store, session, &r->consumers[i],
                                    after_xid, &cur, &head);
        a2_cursors_free(&cur);
        if (wrc != 0)
            return store_error(r, "wake_log", session);
    }
    return 0;
}

/* The run of a2_worker_runner_run; with once, it ends after the first
 * claim's heads when that claim took every eligible head it saw. after_xid:
 * the wake-up's commit, which the first claim waits for (claimed again
 * while the store reports it still invisible). */
static int run_session(a2_worker_runner *r, const char *session, bool wake_log,
                       bool once, uint64_t after_xid,
                       a2_worker_run_stats *stats)
{
    a2_worker_run_stats local = {0};
    a2_worker_run_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    if (!r || !session || !*session)
        return A2_WORKER_EINVAL;
    if (r->stopping)
        return A2_WORKER_ESTOPPED;
    int rc = ensure_store(r);
    if (rc != 0)
        return rc;
    if (wake_log && (rc = wake_logs(r, session, after_xid)) != 0)
        return rc;
    while (!r->stopping) {
        a2_claim_request req = {.holder = r->holder,
                                .ttl_ms = r->ttl_ms,
                                .consumers = r->consumers,
                                .nconsumers = r->nconsumers,
                                .max_failures = r->max_failures,
                                .after_xid = after_xid};
        a2_claim_result cl = {0};
        if (a2_store_claim(r->store, session, &req, &cl) != 0) {
            a2_claim_result_free(&cl);
            rc = store_error(r, "claim", session);
            break;
        }
        if (cl.outcome == A2_CLAIM_BUSY && cl.waiting_for) {
            /* The store waited for the commit and it is still not visible
             * (a synchronous standby holds it, say): wait again. */
            st->visibility_waits++;
            a2_claim_result_free(&cl);
            if (wake_log && (rc = wake_logs(r, session, after_xid)) != 0)
                break;
            continue;
        }
        after_xid = 0; /* visible: later claims need not wait */
        /* Heads whose lapsed lease was their last attempt. */
        for (size_t i = 0; i < cl.dead_lettered.count; i++) {
            const a2_head *d = &cl.dead_lettered.items[i];
            st->dead_lettered++;
            RLOG(r, "dead-lettered %s %s #%lld: its lease lapsed at failure %d",
                 session, d->dispatch.consumer, (long long)d->event.index,
                 d->dispatch.failure_count);
        }
        if (cl.outcome == A2_CLAIM_SETTLED) {
            st->retry_at = 0;
            a2_claim_result_free(&cl);
            break;
        }
        if (cl.outcome == A2_CLAIM_BUSY) {
            st->retry_at = cl.retry_at;
            a2_claim_result_free(&cl);
            break;
        }
        size_t n = cl.heads.count;
        a2_attempt_ref *refs = calloc(n ? n : 1, sizeof *refs);
        unsigned char *done = calloc(n ? n : 1, 1);
        if (!refs || !done) {
            free(refs);
            free(done);
            a2_claim_result_free(&cl);
            snprintf(r->last_error, sizeof r->last_error, "out of memory");
            rc = A2_WORKER_ENOMEM;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            const a2_head *h = &cl.heads.items[i];
            refs[i].consumer = h->dispatch.consumer;
            refs[i].lane = h->dispatch.lane;
            refs[i].index = h->event.index;
            refs[i].attempt = h->dispatch.attempt_count;
        }
        st->claimed += n;
        publish(r, session, refs, done, n);
        if (n > 0)
            rc = run_heads(r, session, &cl.heads, refs, st);
        unpublish(r, st);
        free(refs);
        free(done);
        /* A claim that dead-lettered nothing took every eligible head of
         * its snapshot: what became claimable since is announced by a2-
         * consumer, so a woken run need not claim again to find out. */
        bool took_all = cl.dead_lettered.count == 0;
        a2_claim_result_free(&cl);
        if (rc != 0)
            break;
        if (once && took_all) {
            st->retry_at = 0;
            break;
        }
    }
    return rc;
}

int a2_worker_runner_run(a2_worker_runner *r, const char *session,
                         bool wake_log, a2_worker_run_stats *stats)
{
    return run_session(r, session, wake_log, false, 0, stats);
}

int a2_worker_runner_run_woken(a2_worker_runner *r, const char *session,
                               bool wake_log, uint64_t after_xid,
                               a2_worker_run_stats *stats)
{
    return run_session(r, session, wake_log, true, after_xid, stats);
}

int a2_worker_runner_pending(a2_worker_runner *r,
                             void (*fn)(void *ctx, const char *session),
                             void *ctx)
{
    if (!r || !fn)
        return A2_WORKER_EINVAL;
    int rc = ensure_store(r);
    if (rc != 0)
        return rc;
    const char **names = calloc(r->nconsumers, sizeof *names);
    if (!names)
        return A2_WORKER_ENOMEM;
    for (size_t i = 0; i < r->nconsumers; i++)
        names[i] = r->consumers[i].name;
    char *after = NULL;
    int total = 0;
    for (;;) {
        a2_sessions page = {0};
        if (a2_store_pending_sessions(r->store, names, r->nconsumers, after,
                                      1000, &page) != 0) {
            a2_sessions_free(&page);
            rc = store_error(r, "pending_sessions", "the store");
            break;
        }
        for (size_t i = 0; i < page.count; i++)
            fn(ctx, page.items[i]);
        total += (int)page.count;
        free(after);
        after = page.count == 1000 ? strdup(page.items[999]) : NULL;
        a2_sessions_free(&page);
        if (!after)
            break;
    }
    free(after);
    free(names);
    return rc != 0 ? rc : total;
}
