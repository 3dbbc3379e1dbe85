/*
 * The runner's renewal thread: extends the leases of the unfinished heads
 * of the published run at a third of the ttl, one session's heads a call,
 * on a store connection of its own (runner_int.h).
 */
#include "runner_int.h"

#include "../common/clock.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void *a2__runner_renew_main(void *arg)
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
        /* The live heads of the first session that has any (several
         * sessions' heads: one renewal a session, the next one at once). */
        const char *session = NULL;
        size_t n = 0;
        for (size_t i = 0; i < r->nrefs; i++)
            if (!r->done[i] && !r->renewed[i] &&
                (!session || strcmp(r->sessions[i], session) == 0)) {
                session = r->sessions[i];
                r->renewed[i] = 1;
                batch[n++] = r->refs[i];
            }
        if (!session) { /* every live head renewed: the next round */
            memset(r->renewed, 0, r->nrefs);
            r->next_renew = now + (r->ttl_ms / 3 > 0 ? r->ttl_ms / 3 : 1);
            continue;
        }
        r->renew_busy = 1;
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
