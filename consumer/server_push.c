/*
 * Routing what the daemon sends: a wake-up goes to one live subscriber of
 * its consumer by rendezvous hashing on the session (remembered for moves)
 * or to all of them; when a LIVE worker leaves, the sessions it was routed
 * are moved to the rest with targeted resyncs; `cleared`, `resync` of all
 * and `presence` fan out to the workers they concern.
 */
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

#include "../common/hash.h"

#define ROUTED_MAX 4096 /* sessions remembered per worker for moves */

/* Remembers that session of consumer was routed to w. */
void a2__server_note_routed(a2__server_worker *w, const char *consumer,
                            const char *session)
{
    char key[2 * (A2_WIRE_MAX_STRING + 1)];
    size_t lc = strlen(consumer), ls = strlen(session);

    if (w->routed_unknown)
        return;
    if (lc > A2_WIRE_MAX_STRING || ls > A2_WIRE_MAX_STRING) {
        w->routed_unknown = 1;
        return;
    }
    memcpy(key, consumer, lc + 1);
    memcpy(key + lc + 1, session, ls);
    if (a2__map_get(w->routed, key, lc + 1 + ls))
        return;
    if (a2__map_count(w->routed) >= ROUTED_MAX ||
        a2__map_put(w->routed, key, lc + 1 + ls, w, NULL) != 0) {
        /* Forget the list: a departure then resyncs every session. */
        w->routed_unknown = 1;
        a2__map_free(w->routed, NULL);
        w->routed = NULL;
    }
}

static int grow_scratch(a2__server *srv, size_t n)
{
    if (n <= srv->ncap)
        return 0;
    size_t cap = srv->ncap ? srv->ncap * 2 : 16;
    while (cap < n)
        cap *= 2;
    a2__route_cand *c = realloc(srv->cands, cap * sizeof *c);
    if (!c)
        return -1;
    srv->cands = c;
    a2__server_worker **cw = realloc(srv->cw, cap * sizeof *cw);
    if (!cw)
        return -1;
    srv->cw = cw;
    srv->ncap = cap;
    return 0;
}

int a2__server_cand_add(a2__server *srv, size_t k, a2__server_worker *w)
{
    if (grow_scratch(srv, k + 1) != 0)
        return -1;
    srv->cands[k].id = w->id;
    srv->cands[k].serial = w->serial;
    srv->cw[k] = w;
    return 0;
}

/* Live subscribers of consumer (those following type when type != NULL)
 * into srv->cands / srv->cw; returns how many (0 when out of memory). */

static size_t candidates(a2__server *srv, const char *consumer,
                         const char *type)
{
    size_t n = 0;
    if (srv->cand_consumer && srv->cand_gen == srv->gen &&
        strcmp(srv->cand_consumer, consumer) == 0 &&
        (type ? srv->cand_type && strcmp(srv->cand_type, type) == 0
              : !srv->cand_type))
        return srv->cand_n;
    free(srv->cand_consumer);
    free(srv->cand_type);
    srv->cand_consumer = NULL;
    srv->cand_type = NULL;
    for (a2__server_worker *w = srv->workers; w; w = w->next) {
        const a2__server_sub *s;
        if (w->state != A2C_WORKER_LIVE ||
            !(s = a2__server_find_sub(w, consumer)))
            continue;
        if (type && !a2__server_log_match(s, type))
            continue;
        if (a2__server_cand_add(srv, n, w) != 0)
            return n;
        n++;
    }
    /* Remembered only when complete (no allocation failed). */
    srv->cand_consumer = a2__server_dupstr(consumer);
    srv->cand_type = type ? a2__server_dupstr(type) : NULL;
    if (!srv->cand_consumer || (type && !srv->cand_type)) {
        free(srv->cand_consumer);
        free(srv->cand_type);
        srv->cand_consumer = NULL;
        srv->cand_type = NULL;
    }
    srv->cand_gen = srv->gen;
    srv->cand_n = n;
    return n;
}

/*
 * w stops serving (it was LIVE): move the sessions it was routed to the
 * remaining subscribers of each of its consumers with a targeted resync.
 */
void a2__server_depart(a2__server *srv, a2__server_worker *w)
{
    srv->live--;
    srv->log_subs -= a2__server_log_subs(w);
    if (srv->route != A2C_ROUTE_AFFINITY || srv->closing)
        return;
    for (size_t i = 0; i < w->n_subs; i++) {
        const char *consumer = w->subs[i].consumer;
        size_t lc = strlen(consumer);
        size_t n = candidates(srv, consumer, NULL);
        const char ***lists;
        size_t *counts;
        size_t it = 0;
        void *e = NULL, *val;
        const char *key;
        size_t klen;

        if (n == 0)
            continue;
        if (w->routed_unknown) {
            for (size_t k = 0; k < n; k++)
                a2__server_push_resync_all(srv, srv->cw[k], consumer);
            continue;
        }
        lists = calloc(n, sizeof *lists);
        counts = calloc(n, sizeof *counts);
        if (!lists || !counts) {
            for (size_t k = 0; k < n; k++)
                a2__server_push_resync_all(srv, srv->cw[k], consumer);
            free(lists);
            free(counts);
            continue;
        }
        /* Route each of its sessions of this consumer among the rest: by
         * rendezvous (n scores a session) within the budget, then by the
         * session's hash alone. */
        size_t total = a2__map_count(w->routed);
        size_t budget = srv->move_budget;
        int nomem = 0;
        while (a2__map_next(w->routed, &it, &e, &key, &klen, &val)) {
            if (klen <= lc || memcmp(key, consumer, lc + 1) != 0)
                continue;
            const char *session = key + lc + 1;
            size_t ls = klen - lc - 1, k;
            if (budget >= n) {
                budget -= n;
                k = a2__route_pick(srv->cands, n, session);
            } else {
                k = (size_t)(a2__hash(session, ls, 0) % n);
            }
            if (!lists[k]) {
                lists[k] = malloc((total + 1) * sizeof **lists);
                if (!lists[k]) {
                    nomem = 1;
                    break;
                }
            }
            lists[k][counts[k]++] = session;
        }
        for (size_t k = 0; k < n; k++) {
            a2_wire_msg m = {.type = A2_WIRE_RESYNC, .consumer = consumer};
            if (nomem) {
                a2__server_push_resync_all(srv, srv->cw[k], consumer);
                continue;
            }
            if (counts[k] == 0)
                continue;
            m.sessions = lists[k];
            m.n_sessions = counts[k];
            if (a2__server_push(srv, srv->cw[k], &m) == A2C_QUEUE_EINVAL)
                a2__server_push_resync_all(srv, srv->cw[k],
                                           consumer); /* too big */
            for (size_t j = 0; j < counts[k]; j++)
                a2__server_note_routed(srv->cw[k], consumer, lists[k][j]);
        }
        for (size_t k = 0; k < n; k++)
            free(lists[k]);
        free(lists);
        free(counts);
    }
}

/* Queues the wake m of the commit whose times are trace_us for w. */
static void push_wake(a2__server *srv, a2__server_worker *w,
                      const a2_wire_msg *m, const int64_t *trace_us)
{
    (void)a2__server_queued(
            srv, w,
            a2__queue_push_wake_at(w->q, m->consumer, m->session, m->cursor,
                                   m->head, m->lsn, m->xid, trace_us));
}

/* A wake to one candidate by rendezvous (remembering the session), or to
 * all. */
static void route_wake(a2__server *srv, const a2_wire_msg *m,
                       const int64_t *trace_us)
{
    size_t n = candidates(srv, m->consumer, NULL);
    if (n == 0)
        return;
    if (srv->route == A2C_ROUTE_BROADCAST) {
        for (size_t k = 0; k < n; k++)
            push_wake(srv, srv->cw[k], m, trace_us);
        return;
    }
    size_t k = a2__route_pick(srv->cands, n, m->session);
    a2__server_note_routed(srv->cw[k], m->consumer, m->session);
    push_wake(srv, srv->cw[k], m, trace_us);
}

void a2__server_wake(a2__server *srv, const char *consumer, const char *session,
                     const char *cursor_key, int64_t head, uint64_t lsn,
                     uint64_t xid)
{
    a2__server_wake_at(srv, consumer, session, cursor_key, head, lsn, xid,
                       NULL);
}

void a2__server_wake_at(a2__server *srv, const char *consumer,
                        const char *session, const char *cursor_key,
                        int64_t head, uint64_t lsn, uint64_t xid,
                        const int64_t *trace_us)
{
    a2_wire_msg m = {.type = A2_WIRE_WAKE,
                     .consumer = consumer,
                     .session = session,
                     .cursor = cursor_key,
                     .head = head,
                     .lsn = lsn,
                     .xid = xid};
    if (!srv || !consumer || !session || !cursor_key)
        return;
    route_wake(srv, &m, trace_us);
}

void a2__server_cleared(a2__server *srv, const char *session,
                        int64_t clear_index, uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_CLEARED,
                     .session = session,
                     .clear_index = clear_index,
                     .lsn = lsn};
    if (!srv || !session)
        return;
    for (a2__server_worker *w = srv->workers; w; w = w->next)
        if (w->state == A2C_WORKER_LIVE && w->n_subs > 0)
            (void)a2__server_push(srv, w, &m);
}

void a2__server_resync_all(a2__server *srv)
{
    if (!srv)
        return;
    for (a2__server_worker *w = srv->workers; w; w = w->next)
        if (w->state == A2C_WORKER_LIVE)
            for (size_t i = 0; i < w->n_subs; i++)
                a2__server_push_resync_all(srv, w, w->subs[i].consumer);
}

/* The live workers subscribed to a namespace. */
typedef struct {
    a2__server_worker **w;
    size_t n, cap;
} ns_subs;

static void free_ns_subs(void *v)
{
    ns_subs *l = v;
    free(l->w);
    free(l);
}

void a2__server_ns_index_free(a2__server *srv)
{
    a2__map_free(srv->ns_index, free_ns_subs);
    srv->ns_index = NULL;
    srv->ns_built = 0;
}

/* Indexes the live workers' presence namespaces (as of the current
 * generation: a hello, a subscription, a departure changes it). */
static int ns_index_build(a2__server *srv)
{
    a2__server_ns_index_free(srv);
    if (!(srv->ns_index = a2__map_new()))
        return -1;
    for (a2__server_worker *w = srv->workers; w; w = w->next) {
        if (w->state != A2C_WORKER_LIVE)
            continue;
        for (size_t i = 0; i < w->n_ns; i++) {
            size_t klen = strlen(w->ns[i]);
            ns_subs *l = a2__map_get(srv->ns_index, w->ns[i], klen);
            if (!l) {
                if (!(l = calloc(1, sizeof *l)))
                    goto nomem;
                if (a2__map_put(srv->ns_index, w->ns[i], klen, l, NULL) != 0) {
                    free(l);
                    goto nomem;
                }
            }
            if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 4;
                a2__server_worker **v = realloc(l->w, cap * sizeof *v);
                if (!v)
                    goto nomem;
                l->w = v;
                l->cap = cap;
            }
            l->w[l->n++] = w;
        }
    }
    srv->ns_gen = srv->gen;
    srv->ns_built = 1;
    return 0;
nomem:
    a2__server_ns_index_free(srv);
    return -1;
}

void a2__server_presence(a2__server *srv, const char *ns,
                         const char *participant, const char *fields_json,
                         uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_PRESENCE,
                     .ns = ns,
                     .participant = participant,
                     .fields_json = fields_json,
                     .lsn = lsn};
    if (!srv || !ns || !participant || !fields_json)
        return;
    if ((!srv->ns_built || srv->ns_gen != srv->gen) &&
        ns_index_build(srv) != 0) {
        /* out of memory: the namespace's subscribers found the long way */
        for (a2__server_worker *w = srv->workers; w; w = w->next)
            for (size_t i = 0; w->state == A2C_WORKER_LIVE && i < w->n_ns; i++)
                if (strcmp(w->ns[i], ns) == 0) {
                    if (a2__server_push(srv, w, &m) == A2C_QUEUE_EINVAL)
                        return; /* fields_json is not an object: for no one */
                    break;
                }
        return;
    }
    const ns_subs *l = a2__map_get(srv->ns_index, ns, strlen(ns));
    /* a push that closes a worker leaves it DEAD (freed after the run) */
    for (size_t k = 0; l && k < l->n; k++)
        if (l->w[k]->state == A2C_WORKER_LIVE &&
            a2__server_push(srv, l->w[k], &m) == A2C_QUEUE_EINVAL)
            return; /* fields_json is not an object: for no one */
}
