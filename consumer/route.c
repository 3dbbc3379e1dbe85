/*
 * Rendezvous hashing and the string map of the worker server.
 */
#include <stdlib.h>
#include <string.h>

#include "route.h"

#include "../common/hash.h"

uint64_t a2__route_worker_id(const char *name)
{
    return a2__hash(name, strlen(name), 0x5eedULL);
}

uint64_t a2__route_score(uint64_t worker_id, uint64_t session_hash)
{
    return a2__mix64(session_hash ^
                     a2__mix64(worker_id + 0x9e3779b97f4a7c15ULL));
}

size_t a2__route_pick(const a2__route_cand *c, size_t n, const char *session)
{
    uint64_t sh = a2__hash(session, strlen(session), 0);
    size_t best = n;
    uint64_t best_score = 0;

    for (size_t i = 0; i < n; i++) {
        uint64_t s = a2__route_score(c[i].id, sh);
        if (best == n || s > best_score ||
            (s == best_score && c[i].serial < c[best].serial)) {
            best = i;
            best_score = s;
        }
    }
    return best;
}

/* ---- map ---- */

typedef struct node {
    struct node *next;
    uint64_t hash;
    void *val;
    size_t klen;
    char key[];
} node;

struct a2__map {
    node **b;
    size_t nb; /* power of two */
    size_t count;
};

a2__map *a2__map_new(void)
{
    a2__map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nb = 16;
    m->b = calloc(m->nb, sizeof *m->b);
    if (!m->b) {
        free(m);
        return NULL;
    }
    return m;
}

void a2__map_free(a2__map *m, void (*free_val)(void *))
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nb; i++) {
        node *n = m->b[i];
        while (n) {
            node *next = n->next;
            if (free_val)
                free_val(n->val);
            free(n);
            n = next;
        }
    }
    free(m->b);
    free(m);
}

static node **find(const a2__map *m, const void *key, size_t klen, uint64_t h)
{
    node **pp = &m->b[h & (m->nb - 1)];
    while (*pp) {
        if ((*pp)->hash == h && (*pp)->klen == klen &&
            (klen == 0 || memcmp((*pp)->key, key, klen) == 0))
            return pp;
        pp = &(*pp)->next;
    }
    return pp;
}

void *a2__map_get(const a2__map *m, const void *key, size_t klen)
{
    uint64_t h = a2__table_hash(key, klen);
    node **pp = find(m, key, klen, h);
    return *pp ? (*pp)->val : NULL;
}

static void grow(a2__map *m)
{
    size_t nb = m->nb * 2;
    node **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* keep working with longer chains */
    for (size_t i = 0; i < m->nb; i++) {
        node *n = m->b[i];
        while (n) {
            node *next = n->next;
            n->next = b[n->hash & (nb - 1)];
            b[n->hash & (nb - 1)] = n;
            n = next;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
}

int a2__map_put(a2__map *m, const void *key, size_t klen, void *val, void **old)
{
    uint64_t h = a2__table_hash(key, klen);
    node **pp = find(m, key, klen, h);
    node *n;

    if (old)
        *old = NULL;
    if (*pp) {
        if (old)
            *old = (*pp)->val;
        (*pp)->val = val;
        return 0;
    }
    n = malloc(sizeof *n + klen + 1);
    if (!n)
        return -1;
    n->next = NULL;
    n->hash = h;
    n->val = val;
    n->klen = klen;
    if (klen)
        memcpy(n->key, key, klen);
    n->key[klen] = '\0';
    *pp = n;
    m->count++;
    if (m->count > m->nb)
        grow(m);
    return 0;
}

void *a2__map_get_new(a2__map *m, const void *key, size_t klen, size_t size)
{
    void *v = a2__map_get(m, key, klen);
    if (v)
        return v;
    if (!(v = calloc(1, size)))
        return NULL;
    if (a2__map_put(m, key, klen, v, NULL) != 0) {
        free(v);
        return NULL;
    }
    return v;
}

void *a2__map_del(a2__map *m, const void *key, size_t klen)
{
    uint64_t h = a2__table_hash(key, klen);
    node **pp = find(m, key, klen, h);
    node *n = *pp;
    void *v;

    if (!n)
        return NULL;
    *pp = n->next;
    v = n->val;
    free(n);
    m->count--;
    return v;
}

size_t a2__map_count(const a2__map *m)
{
    return m ? m->count : 0;
}

int a2__map_next(const a2__map *m, size_t *it, void **entry, const char **key,
                 size_t *klen, void **val)
{
    node *n = *entry;

    if (n)
        n = n->next;
    while (!n) {
        if (*it >= m->nb)
            return 0;
        n = m->b[(*it)++];
    }
    *entry = n;
    *key = n->key;
    *klen = n->klen;
    *val = n->val;
    return 1;
}
