/*
 * `log` routing: which subscriptions follow an event type, and the index of
 * the live log subscriptions (consumer -> its group of subscribers, type ->
 * the groups with a subscription naming it, plus the groups following every
 * type), rebuilt when the subscriptions change; a `log` goes to one
 * subscriber of each group that follows its type, by rendezvous hashing on
 * the session, or to all of them.
 */
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

int a2__server_type_order(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether subscription s follows events of type (its types are sorted). */
int a2__server_log_match(const a2__server_sub *s, const char *type)
{
    if (s->filter == A2_WIRE_LOG_ALL)
        return 1;
    if (s->filter != A2_WIRE_LOG_TYPES || !s->n_types)
        return 0;
    return bsearch(&type, s->types, s->n_types, sizeof *s->types,
                   a2__server_type_order) != NULL;
}

static void free_log_list(void *v)
{
    a2__server_log_list *l = v;
    free(l->g);
    free(l);
}

static void free_log_group(void *v)
{
    a2__server_log_group *g = v;
    free(g->w);
    free(g->s);
    free(g);
}

void a2__server_log_index_free(a2__server *srv)
{
    a2__map_free(srv->log_groups, free_log_group);
    a2__map_free(srv->log_types, free_log_list);
    free(srv->log_all.g);
    srv->log_groups = srv->log_types = NULL;
    memset(&srv->log_all, 0, sizeof srv->log_all);
    srv->log_built = 0;
}

static int log_list_add(a2__server_log_list *l, a2__server_log_group *g)
{
    if (l->n && l->g[l->n - 1] == g)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        a2__server_log_group **v = realloc(l->g, cap * sizeof *v);
        if (!v)
            return -1;
        l->g = v;
        l->cap = cap;
    }
    l->g[l->n++] = g;
    return 0;
}

static int log_group_add(a2__server_log_group *g, a2__server_worker *w,
                         const a2__server_sub *s)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 2;
        a2__server_worker **vw = realloc(g->w, cap * sizeof *vw);
        if (vw)
            g->w = vw;
        const a2__server_sub **vs = vw ? realloc(g->s, cap * sizeof *vs) : NULL;
        if (vs)
            g->s = vs;
        if (!vw || !vs)
            return -1;
        g->cap = cap;
    }
    g->w[g->n] = w;
    g->s[g->n++] = s;
    return 0;
}

/* Indexes the live log subscriptions (as of the current generation). */
static int log_index_build(a2__server *srv)
{
    a2__server_log_index_free(srv);
    srv->log_groups = a2__map_new();
    srv->log_types = a2__map_new();
    if (!srv->log_groups || !srv->log_types)
        goto nomem;
    for (a2__server_worker *w = srv->workers; w; w = w->next) {
        if (w->state != A2C_WORKER_LIVE)
            continue;
        for (size_t i = 0; i < w->n_subs; i++) {
            const a2__server_sub *s = &w->subs[i];
            if (s->filter == A2_WIRE_LOG_NONE)
                continue;
            a2__server_log_group *g =
                    a2__map_get_new(srv->log_groups, s->consumer,
                                    strlen(s->consumer), sizeof *g);
            if (!g)
                goto nomem;
            g->consumer = s->consumer;
            if (log_group_add(g, w, s) != 0)
                goto nomem;
            if (s->filter == A2_WIRE_LOG_ALL) {
                if (log_list_add(&srv->log_all, g) != 0)
                    goto nomem;
                continue;
            }
            for (size_t t = 0; t < s->n_types; t++) {
                a2__server_log_list *l =
                        a2__map_get_new(srv->log_types, s->types[t],
                                        strlen(s->types[t]), sizeof *l);
                if (!l || log_list_add(l, g) != 0)
                    goto nomem;
            }
        }
    }
    srv->log_gen = srv->gen;
    srv->log_built = 1;
    return 0;
nomem:
    a2__server_log_index_free(srv);
    return -1;
}

/* Routes m (a `log` of type) to the group's subscribers that follow type. */
static void route_log_group(a2__server *srv, a2__server_log_group *g,
                            const char *session, const char *type,
                            a2_wire_msg *m)
{
    a2__server_wlist *l = &srv->scratch;
    l->n = 0;
    for (size_t i = 0; i < g->n; i++) {
        srv->log_checks++;
        if (a2__server_log_match(g->s[i], type))
            (void)a2__server_wlist_add(l, g->w[i]);
    }
    if (l->n == 0)
        return;
    m->consumer = g->consumer;
    if (srv->route == A2C_ROUTE_BROADCAST) {
        for (size_t k = 0; k < l->n; k++)
            (void)a2__server_push(srv, l->w[k], m);
        return;
    }
    size_t k = a2__route_pick(l->c, l->n, session);
    a2__server_note_routed(l->w[k], g->consumer, session);
    (void)a2__server_push(srv, l->w[k], m);
}

void a2__server_log(a2__server *srv, const char *session, int64_t idx,
                    const char *type, uint64_t lsn, uint64_t xid)
{
    a2_wire_msg m = {.type = A2_WIRE_LOG,
                     .session = session,
                     .idx = idx,
                     .event_type = type,
                     .lsn = lsn,
                     .xid = xid};
    if (!srv || !session || !type)
        return;
    if ((!srv->log_built || srv->log_gen != srv->gen) &&
        log_index_build(srv) != 0)
        return;
    uint64_t stamp = ++srv->log_stamp;
    a2__server_log_list *typed =
            a2__map_get(srv->log_types, type, strlen(type));
    a2__server_log_list *lists[2] = {typed, &srv->log_all};
    for (int li = 0; li < 2; li++)
        for (size_t i = 0; lists[li] && i < lists[li]->n; i++) {
            a2__server_log_group *g = lists[li]->g[i];
            if (g->stamp == stamp)
                continue;
            g->stamp = stamp;
            route_log_group(srv, g, session, type, &m);
        }
}
