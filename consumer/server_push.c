/*
 * Routing what the daemon sends: a wake-up goes to one live subscriber of
 * its consumer by rendezvous hashing on the session (remembered for moves)
 * or to all of them; when a LIVE worker leaves, the sessions it was routed
 * are moved to the rest with targeted resyncs; `cleared`, `resync` of all
 * and `presence` fan out to the workers they concern. A consumer's
 * subscribers and a namespace's are found in indexes rebuilt when the
 * workers or their subscriptions change.
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

int a2__server_wlist_add(a2__server_wlist *l, a2__server_worker *w)
{
    if (l->n && l->w[l->n - 1] == w)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        a2__route_cand *c = realloc(l->c, cap * sizeof *c);
        if (c)
            l->c = c;
        a2__server_worker **v = c ? realloc(l->w, cap * sizeof *v) : NULL;
        if (v)
            l->w = v;
        if (!c || !v)
            return -1;
        l->cap = cap;
    }
    l->c[l->n].id = w->id;
    l->c[l->n].serial = w->serial;
    l->w[l->n++] = w;
    return 0;
}

static void free_wlist(void *v)
{
    a2__server_wlist *l = v;
    free(l->c);
    free(l->w);
    free(l);
}

/* The keys a live worker is indexed under: its subscriptions' consumers,
 * or its presence namespaces. */
static size_t sub_count(const a2__server_worker *w)
{
    return w->n_subs;
}

static const char *sub_key(const a2__server_worker *w, size_t i)
{
    return w->subs[i].consumer;
}

static size_t ns_count(const a2__server_worker *w)
{
    return w->n_ns;
}

static const char *ns_key(const a2__server_worker *w, size_t i)
{
    return w->ns[i];
}

/* key -> the live workers indexed under it (a2__server_wlist), or NULL when
 * out of memory. */
static a2__map *index_build(a2__server *srv,
                            size_t (*count)(const a2__server_worker *),
                            const char *(*key)(const a2__server_worker *,
                                               size_t))
{
    a2__map *m = a2__map_new();
    if (!m)
        return NULL;
    for (a2__server_worker *w = srv->workers; w; w = w->next) {
        if (w->state != A2C_WORKER_LIVE)
            continue;
        for (size_t i = 0; i < count(w); i++) {
            const char *k = key(w, i);
            a2__server_wlist *l = a2__map_get_new(m, k, strlen(k), sizeof *l);
            if (!l || a2__server_wlist_add(l, w) != 0)
                goto nomem;
        }
    }
    return m;
nomem:
    a2__map_free(m, free_wlist);
    return NULL;
}

void a2__server_indexes_free(a2__server *srv)
{
    a2__map_free(srv->sub_index, free_wlist);
    a2__map_free(srv->ns_index, free_wlist);
    srv->sub_index = srv->ns_index = NULL;
}

/* The live subscribers of consumer (NULL: none). From the subscriber index,
 * rebuilt when the generation moved; out of memory, found the long way into
 * the scratch. Valid until the next call or a2__server_log. */
static const a2__server_wlist *candidates(a2__server *srv,
                                          const char *consumer)
{
    if (!srv->sub_index || srv->sub_gen != srv->gen) {
        a2__map_free(srv->sub_index, free_wlist);
        srv->sub_index = index_build(srv, sub_count, sub_key);
        srv->sub_gen = srv->gen;
    }
    if (srv->sub_index)
        return a2__map_get(srv->sub_index, consumer, strlen(consumer));
    a2__server_wlist *l = &srv->scratch;
    l->n = 0;
    for (a2__server_worker *w = srv->workers; w; w = w->next)
        if (w->state == A2C_WORKER_LIVE && a2__server_find_sub(w, consumer) &&
            a2__server_wlist_add(l, w) != 0)
            break;
    return l;
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
        const a2__server_wlist *cl = candidates(srv, consumer);
        size_t n = cl ? cl->n : 0;
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
                a2__server_push_resync_all(srv, cl->w[k], consumer);
            continue;
        }
        lists = calloc(n, sizeof *lists);
        counts = calloc(n, sizeof *counts);
        if (!lists || !counts) {
            for (size_t k = 0; k < n; k++)
                a2__server_push_resync_all(srv, cl->w[k], consumer);
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
                k = a2__route_pick(cl->c, n, session);
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
                a2__server_push_resync_all(srv, cl->w[k], consumer);
                continue;
            }
            if (counts[k] == 0)
                continue;
            m.sessions = lists[k];
            m.n_sessions = counts[k];
            if (a2__server_push(srv, cl->w[k], &m) == A2C_QUEUE_EINVAL)
                a2__server_push_resync_all(srv, cl->w[k],
                                           consumer); /* too big */
            for (size_t j = 0; j < counts[k]; j++)
                a2__server_note_routed(cl->w[k], consumer, lists[k][j]);
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
    const a2__server_wlist *l = candidates(srv, m->consumer);
    if (!l || l->n == 0)
        return;
    if (srv->route == A2C_ROUTE_BROADCAST) {
        for (size_t k = 0; k < l->n; k++)
            push_wake(srv, l->w[k], m, trace_us);
        return;
    }
    size_t k = a2__route_pick(l->c, l->n, m->session);
    a2__server_note_routed(l->w[k], m->consumer, m->session);
    push_wake(srv, l->w[k], m, trace_us);
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
    if (!srv->ns_index || srv->ns_gen != srv->gen) {
        a2__map_free(srv->ns_index, free_wlist);
        srv->ns_index = index_build(srv, ns_count, ns_key);
        srv->ns_gen = srv->gen;
    }
    if (!srv->ns_index) {
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
    const a2__server_wlist *l = a2__map_get(srv->ns_index, ns, strlen(ns));
    /* a push that closes a worker leaves it DEAD (freed after the run) */
    for (size_t k = 0; l && k < l->n; k++)
        if (l->w[k]->state == A2C_WORKER_LIVE &&
            a2__server_push(srv, l->w[k], &m) == A2C_QUEUE_EINVAL)
            return; /* fields_json is not an object: for no one */
}
