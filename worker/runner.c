/*
 * a2_worker_runner: claim -> handle -> complete/fail for one session, or
 * for several sessions with one claim and one settlement round trip (the
 * outcomes of fast handlers settled together, a lane's completion claiming
 * its next head), with a renewal thread (renew.c) that extends the leases
 * of the unfinished heads at a third of the ttl, on its own store
 * connection.
 */
#include "a2/worker.h"

#include "../common/clock.h"
#include "runner_int.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
        a2__runner_consumer *c = &r->cons[i];
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
    if (pthread_create(&r->thread, NULL, a2__runner_renew_main, r) != 0) {
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

/* A claim whose heads are to run: its result, its session and where its
 * heads' outcomes count. */
typedef struct {
    a2_claim_result res;
    const char *session;
    a2_worker_run_stats *st;
} claimed;

/* Frees n claims and the array. */
static void claimed_free(claimed *c, size_t n)
{
    for (size_t i = 0; c && i < n; i++)
        a2_claim_result_free(&c[i].res);
    free(c);
}

/* The heads of one run, in the order their handlers run: one claim's, or
 * the claims of several sessions one after the other. */
typedef struct head_run {
    size_t n;
    const a2_head **heads;
    const char **sessions;     /* each head's session */
    a2_worker_run_stats **st;  /* where each head's outcome counts */
    a2_attempt_ref *refs;      /* each head's attempt */
    unsigned char *done;       /* n: handled and settled (renewal stops) */
    unsigned char *renewed;    /* n: renewed in the current round */
    /* With claim_next, the completion of a lane's (or a log's) head claims
     * the lane's next head in its round trip (next_req); the claims that
     * took a head wait in next for the following run. */
    bool claim_next;
    a2_claim_request next_req;
    claimed *next;
    size_t nnext;
    bool next_some; /* one of them dead-lettered a head: claim again after */
} head_run;

static void head_run_free(head_run *hr)
{
    claimed_free(hr->next, hr->nnext);
    free(hr->heads);
    free(hr->sessions);
    free(hr->st);
    free(hr->refs);
    free(hr->done);
    memset(hr, 0, sizeof *hr);
}

/* Room for n heads; 0, or A2_WORKER_ENOMEM with the runner's error set. */
static int head_run_init(a2_worker_runner *r, head_run *hr, size_t n)
{
    memset(hr, 0, sizeof *hr);
    size_t k = n ? n : 1;
    hr->heads = calloc(k, sizeof *hr->heads);
    hr->sessions = calloc(k, sizeof *hr->sessions);
    hr->st = calloc(k, sizeof *hr->st);
    hr->refs = calloc(k, sizeof *hr->refs);
    hr->done = calloc(2 * k, 1);
    if (!hr->heads || !hr->sessions || !hr->st || !hr->refs || !hr->done) {
        head_run_free(hr);
        snprintf(r->last_error, sizeof r->last_error, "out of memory");
        return A2_WORKER_ENOMEM;
    }
    hr->renewed = hr->done + k;
    hr->next = calloc(k, sizeof *hr->next);
    if (!hr->next) {
        head_run_free(hr);
        snprintf(r->last_error, sizeof r->last_error, "out of memory");
        return A2_WORKER_ENOMEM;
    }
    return 0;
}

/* Appends the heads of session's claim, counted in st. */
static void head_run_add(head_run *hr, const char *session,
                         const a2_heads *heads, a2_worker_run_stats *st)
{
    for (size_t i = 0; i < heads->count; i++, hr->n++) {
        const a2_head *h = &heads->items[i];
        hr->heads[hr->n] = h;
        hr->sessions[hr->n] = session;
        hr->st[hr->n] = st;
        hr->refs[hr->n] = (a2_attempt_ref){h->dispatch.consumer,
                                           h->dispatch.lane, h->event.index,
                                           h->dispatch.attempt_count};
    }
    st->claimed += heads->count;
}

/* Hands the run's heads to the renewal thread. */
static void publish(a2_worker_runner *r, head_run *hr)
{
    pthread_mutex_lock(&r->mu);
    r->sessions = hr->sessions;
    r->refs = hr->refs;
    r->done = hr->done;
    r->renewed = hr->renewed;
    r->nrefs = hr->n;
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

/* Withdraws the run from the renewal thread, waiting out a renewal in
 * flight (it reads the run's strings); its renewals count in st. */
static void unpublish(a2_worker_runner *r, a2_worker_run_stats *st)
{
    pthread_mutex_lock(&r->mu);
    while (r->renew_busy)
        pthread_cond_wait(&r->cv, &r->mu);
    r->sessions = NULL;
    r->refs = NULL;
    r->done = NULL;
    r->renewed = NULL;
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
    return (a2_fail_request){.error = rp->error ? rp->error : "handler failed",
                             .max_failures = r->max_failures,
                             .retry_after_ms = r->retry_after_ms};
}

/* Settles one head: completes it (handler_rc 0) or fails it. */
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

/* What a claim's result asks of its run. */
enum claim_verdict {
    CLAIMED_ALL,  /* heads claimed, every eligible head of the claim's
                   * snapshot: what became claimable since is announced by
                   * a2-consumer, so a woken run need not claim again */
    CLAIMED_SOME, /* heads claimed, and a head dead-lettered: it may not
                   * have taken every eligible one, so claim again after */
    CLAIMED_NONE, /* nothing to run (settled, or busy: st->retry_at set) */
    CLAIM_AGAIN,  /* the wake-up's commit is still not visible */
};

/* The verdict on a claim's result before its heads run; counts its dead
 * letters and visibility waits in st. */
static enum claim_verdict claim_verdict(a2_worker_runner *r,
                                        const char *session,
                                        const a2_claim_result *cl,
                                        a2_worker_run_stats *st)
{
    if (cl->outcome == A2_CLAIM_BUSY && cl->waiting_for) {
        /* The store waited for the commit and it is still not visible
         * (a synchronous standby holds it, say): wait again. */
        st->visibility_waits++;
        return CLAIM_AGAIN;
    }
    /* Heads whose lapsed lease was their last attempt. */
    for (size_t i = 0; i < cl->dead_lettered.count; i++) {
        const a2_head *d = &cl->dead_lettered.items[i];
        st->dead_lettered++;
        RLOG(r, "dead-lettered %s %s #%lld: its lease lapsed at failure %d",
             session, d->dispatch.consumer, (long long)d->event.index,
             d->dispatch.failure_count);
    }
    if (cl->outcome == A2_CLAIM_SETTLED || cl->outcome == A2_CLAIM_BUSY) {
        st->retry_at = cl->outcome == A2_CLAIM_BUSY ? cl->retry_at : 0;
        return CLAIMED_NONE;
    }
    return cl->dead_lettered.count == 0 ? CLAIMED_ALL : CLAIMED_SOME;
}

/* Outcomes wait to be settled together while the handlers of a run's
 * heads take less than this (ms) each and the first outcome waited no
 * longer: fast handlers' outcomes go in one round trip; after a slow
 * handler, what waits is settled before the next handler runs. */
#define SETTLE_HOLD_MS 5

/* At most this many heads settled in one call: with a claim of the lane's
 * next head each, within the store's bound of a settle's operations (a
 * longer range was refused and settled one head a call). */
#define SETTLE_MAX_HEADS (A2_STORE_MAX_SETTLE / 2)

/* Settles heads [from, to) of the run: one head as settle does; several in
 * one round trip (a2_store_settle_sessions), or, should the store refuse
 * that call (a refused returned event, a deadlock: nothing was settled),
 * each on its own. */
static int settle_range(a2_worker_runner *r, head_run *hr, const int *hrc,
                        a2_worker_reply *rps, const a2_settlement *sts,
                        a2_settle_result *res, size_t from, size_t to)
{
    size_t n = to - from;
    int rc = 0;
    bool together = n > 1 || sts[from].claim_next;
    if (together && a2_store_settle_sessions(r->store, hr->sessions + from,
                                             sts + from, n, r->consumers,
                                             r->nconsumers, res) == 0) {
        for (size_t i = from; i < to; i++) {
            a2_settle_result *o = &res[i - from];
            hr->st[i]->settled_together += n > 1;
            note_outcome(r, hr->sessions[i], &hr->refs[i], o->outcome,
                         o->failure_count, o->events.count, hr->st[i]);
            mark_done(r, i);
            if (!sts[i].claim_next)
                continue;
            /* the lane's next head, claimed with the completion: run next */
            enum claim_verdict v =
                    claim_verdict(r, hr->sessions[i], &o->next, hr->st[i]);
            if (v == CLAIMED_ALL || v == CLAIMED_SOME) {
                hr->st[i]->claimed_next += o->next.heads.count;
                hr->next_some |= v == CLAIMED_SOME;
                hr->next[hr->nnext++] =
                        (claimed){o->next, hr->sessions[i], hr->st[i]};
                memset(&o->next, 0, sizeof o->next);
            }
        }
        a2_settle_results_free(res, n);
        return 0;
    }
    if (together) {
        const a2_store_error *e = a2_store_last_error(r->store);
        if (e->code == A2_ESTORE_UNAVAILABLE || e->code == A2_ESTORE_NOMEM)
            return store_error(r, "settle", hr->sessions[from]);
        RLOG(r, "settling %zu heads in one call was refused (%s): one by one",
             n, e->message);
    }
    for (size_t i = from; i < to && rc == 0; i++) {
        rc = settle(r, hr->sessions[i], &hr->refs[i], hrc[i], &rps[i],
                    hr->st[i]);
        mark_done(r, i);
    }
    return rc;
}

/* Runs the handler of each of the run's heads in order; the outcomes of
 * handlers that follow each other within SETTLE_HOLD_MS are settled
 * together, in one round trip. */
static int run_heads(a2_worker_runner *r, head_run *hr)
{
    size_t n = hr->n;
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
        if (i > from && (slow || i - from >= SETTLE_MAX_HEADS ||
                         a2__mono_ms() - held_at >= SETTLE_HOLD_MS)) {
            rc = settle_range(r, hr, hrc, rps, sts, res, from, i);
            from = i;
            if (rc != 0)
                break;
        }
        rps[i].head = hr->heads[i];
        int64_t began = a2__mono_us();
        hrc[i] = r->handler(r->ctx, hr->heads[i], &rps[i]);
        int64_t ended_us = a2__mono_us();
        int64_t ended = ended_us / 1000;
        slow = ended_us - began >= SETTLE_HOLD_MS * 1000;
        hr->st[i]->handler_us += (uint64_t)(ended_us - began);
        if (i == from)
            held_at = ended;
        sts[i].attempt = hr->refs[i];
        if (hrc[i] == 0) {
            sts[i].events = rps[i].events;
            sts[i].nevents = rps[i].nevents;
            if (hr->claim_next && hr->refs[i].lane && !r->stopping)
                sts[i].claim_next = &hr->next_req;
        } else {
            frs[i] = fail_request(r, &rps[i]);
            sts[i].fail = &frs[i];
        }
    }
    if (rc == 0 && from < n)
        rc = settle_range(r, hr, hrc, rps, sts, res, from, n);
done:
    for (size_t i = 0; rps && i < n; i++)
        a2__worker_reply_free(&rps[i]);
    free(rps);
    free(hrc);
    free(sts);
    free(frs);
    free(res);
    return rc;
}

/* Publishes the run, runs its heads and withdraws it (renewals counted in
 * st). */
static int run_published(a2_worker_runner *r, head_run *hr,
                         a2_worker_run_stats *st)
{
    publish(r, hr);
    int rc = hr->n > 0 ? run_heads(r, hr) : 0;
    unpublish(r, st);
    return rc;
}

/* The claim request of the runner (after_xid: the wake-up's commit;
 * wake_logs: bring the served log consumers' cursors up to date first, in
 * the claim's transaction, a new one from log_from). */
static a2_claim_request claim_request(const a2_worker_runner *r,
                                      uint64_t after_xid, bool wake_logs,
                                      int64_t log_from)
{
    return (a2_claim_request){.holder = r->holder,
                              .ttl_ms = r->ttl_ms,
                              .consumers = r->consumers,
                              .nconsumers = r->nconsumers,
                              .max_failures = r->max_failures,
                              .after_xid = after_xid,
                              .wake_logs = wake_logs,
                              .log_from = log_from};
}

/* Runs in a row whose completions claim their lanes' next heads; the next
 * run's completions claim nothing, and the lanes' next heads come back by
 * their wake-ups, behind the other sessions' (a busy lane does not keep a
 * slot to itself). */
#define CLAIM_NEXT_RUNS 16

/*
 * Runs the heads of the n claims in c (their results freed here; the array
 * is the caller's), then the heads their completions claimed, until a run
 * claims none. *some: a claim along the way dead-lettered a head, so it may
 * not have taken every eligible one (claim again after). Claimed heads run
 * even when the runner is stopping; no completion claims then.
 */
static int run_claims(a2_worker_runner *r, claimed *c, size_t n, bool *some)
{
    int rc = 0;
    claimed *own = NULL; /* c, when it is the last run's next */
    *some = false;
    for (int runs = 0; n > 0 && rc == 0; runs++) {
        size_t total = 0;
        for (size_t k = 0; k < n; k++)
            total += c[k].res.heads.count;
        head_run hr;
        rc = head_run_init(r, &hr, total);
        bool ran = rc == 0;
        if (ran) {
            hr.claim_next = runs < CLAIM_NEXT_RUNS;
            hr.next_req = claim_request(r, 0, false, 0);
            for (size_t k = 0; k < n; k++)
                head_run_add(&hr, c[k].session, &c[k].res.heads, c[k].st);
            rc = run_published(r, &hr, c[0].st);
        }
        for (size_t k = 0; k < n; k++)
            a2_claim_result_free(&c[k].res);
        free(own);
        own = NULL;
        n = 0;
        if (ran && rc == 0) {
            *some |= hr.next_some;
            own = c = hr.next;
            n = hr.nnext;
            hr.next = NULL;
            hr.nnext = 0;
        }
        if (ran)
            head_run_free(&hr);
    }
    claimed_free(own, n);
    return rc;
}

/* The run of a2_worker_runner_run; with once, it ends after the first
 * claim's heads when that claim took every eligible head it saw. after_xid:
 * the wake-up's commit, which the first claim waits for (claimed again
 * while the store reports it still invisible); log_from: where that claim
 * starts a new log cursor (a2_claim_request.log_from). */
static int run_session(a2_worker_runner *r, const char *session, bool wake_log,
                       bool once, uint64_t after_xid, int64_t log_from,
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
    while (!r->stopping) {
        /* The first claim (and one made again while the wake-up's commit
         * is not visible) brings the log cursors up to date first. */
        a2_claim_request req = claim_request(r, after_xid, wake_log, log_from);
        claimed c = {{0}, session, st};
        if (a2_store_claim(r->store, session, &req, &c.res) != 0) {
            a2_claim_result_free(&c.res);
            rc = store_error(r, "claim", session);
            break;
        }
        enum claim_verdict v = claim_verdict(r, session, &c.res, st);
        if (v == CLAIM_AGAIN) {
            a2_claim_result_free(&c.res);
            continue;
        }
        after_xid = 0; /* visible: later claims need not wait */
        wake_log = false;
        if (v == CLAIMED_NONE) {
            a2_claim_result_free(&c.res);
            break;
        }
        bool some;
        rc = run_claims(r, &c, 1, &some);
        if (rc != 0)
            break;
        if (once && v == CLAIMED_ALL && !some) {
            st->retry_at = 0;
            break;
        }
    }
    return rc;
}

int a2_worker_runner_run(a2_worker_runner *r, const char *session,
                         bool wake_log, a2_worker_run_stats *stats)
{
    return run_session(r, session, wake_log, false, 0, 0, stats);
}

int a2_worker_runner_run_woken(a2_worker_runner *r, const char *session,
                               bool wake_log, uint64_t after_xid,
                               a2_worker_run_stats *stats)
{
    return run_session(r, session, wake_log, true, after_xid, 0, stats);
}

/* Adds the counts of b to a; a's retry_at becomes b's. */
static void stats_add(a2_worker_run_stats *a, const a2_worker_run_stats *b)
{
    a->claimed += b->claimed;
    a->completed += b->completed;
    a->failed += b->failed;
    a->dead_lettered += b->dead_lettered;
    a->superseded += b->superseded;
    a->renewals += b->renewals;
    a->visibility_waits += b->visibility_waits;
    a->settled_together += b->settled_together;
    a->handler_us += b->handler_us;
    a->retry_at = b->retry_at;
}

int a2_worker_runner_run_sessions(a2_worker_runner *r,
                                  const a2_claim_session *sessions, size_t n,
                                  a2_worker_run_stats *stats)
{
    if (!r || !sessions || !stats || n == 0 || n > A2_STORE_MAX_SETTLE)
        return A2_WORKER_EINVAL;
    memset(stats, 0, n * sizeof *stats);
    for (size_t i = 0; i < n; i++)
        if (!sessions[i].session || !*sessions[i].session)
            return A2_WORKER_EINVAL;
    if (n == 1)
        return run_session(r, sessions[0].session, true, true,
                           sessions[0].after_xid, sessions[0].log_from,
                           &stats[0]);
    if (r->stopping)
        return A2_WORKER_ESTOPPED;
    int rc = ensure_store(r);
    if (rc != 0)
        return rc;
    a2_claim_result *cl = calloc(n, sizeof *cl);
    claimed *c = calloc(n, sizeof *c);
    unsigned char *again = calloc(n, 1); /* run on its own afterwards */
    if (!cl || !c || !again) {
        free(c);
        free(cl);
        free(again);
        snprintf(r->last_error, sizeof r->last_error, "out of memory");
        return A2_WORKER_ENOMEM;
    }
    /* (wake_logs: the store brings the cursors of the log consumers among
     * the served ones up to date, when there are any) */
    a2_claim_request req = claim_request(r, 0, true, 0);
    if (a2_store_claim_sessions(r->store, sessions, n, &req, cl) != 0) {
        const a2_store_error *e = a2_store_last_error(r->store);
        if (e->code == A2_ESTORE_UNAVAILABLE || e->code == A2_ESTORE_NOMEM)
            rc = store_error(r, "claim", sessions[0].session);
        else /* refused (a deadlock, say): nothing claimed */
            memset(again, 1, n);
    } else {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            enum claim_verdict v =
                    claim_verdict(r, sessions[i].session, &cl[i], &stats[i]);
            again[i] = v == CLAIM_AGAIN || v == CLAIMED_SOME;
            if (v == CLAIMED_ALL || v == CLAIMED_SOME)
                c[m++] = (claimed){cl[i], sessions[i].session, &stats[i]};
            else
                a2_claim_result_free(&cl[i]);
        }
        bool some = false;
        if (m > 0)
            rc = run_claims(r, c, m, &some);
        /* a lane's claim along the way dead-lettered a head: each session
         * that ran claims again on its own */
        for (size_t i = 0; some && i < n; i++)
            again[i] |= cl[i].outcome == A2_CLAIM_CLAIMED;
    }
    for (size_t i = 0; rc == 0 && i < n && !r->stopping; i++) {
        if (!again[i])
            continue;
        a2_worker_run_stats more;
        rc = run_session(r, sessions[i].session, true, true,
                         sessions[i].after_xid, sessions[i].log_from, &more);
        stats_add(&stats[i], &more);
    }
    free(c);
    free(cl);
    free(again);
    return rc;
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
