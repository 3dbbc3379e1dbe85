/*
 * Min-heap of deadlines plus an open-addressing hash table from key to heap
 * slot, so that a key can be moved or cancelled without a scan.
 */
#include "timers.h"

#include "../common/hash.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;     /* session \0 consumer \0 cursor_key \0 */
    size_t keylen; /* bytes including the three NULs */
    uint64_t hash;
    int64_t epoch;
    int64_t head;
    int64_t deadline_ms;
    size_t slot; /* index in the heap */
} entry;

struct a2__timers {
    entry **heap;
    size_t n, cap;
    entry **table; /* hash table of entries; NULL = empty, TOMB = deleted */
    size_t tcap;   /* power of two */
    size_t tused;  /* live + tombstones */
    entry *last;   /* the entry last popped, kept until the next call */
};

static entry tomb_entry;
#define TOMB (&tomb_entry)

static char *make_key(const char *session, const char *consumer,
                      const char *cursor_key, size_t *len)
{
    size_t a = strlen(session), b = strlen(consumer), c = strlen(cursor_key);
    char *k = malloc(a + b + c + 3);
    if (!k)
        return NULL;
    memcpy(k, session, a + 1);
    memcpy(k + a + 1, consumer, b + 1);
    memcpy(k + a + b + 2, cursor_key, c + 1);
    *len = a + b + c + 3;
    return k;
}

static void drop_last(a2__timers *t)
{
    if (t->last) {
        free(t->last->key);
        free(t->last);
        t->last = NULL;
    }
}

a2__timers *a2__timers_new(void)
{
    a2__timers *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->tcap = 64;
    t->table = calloc(t->tcap, sizeof *t->table);
    if (!t->table) {
        free(t);
        return NULL;
    }
    return t;
}

void a2__timers_clear(a2__timers *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->heap[i]->key);
        free(t->heap[i]);
    }
    t->n = 0;
    memset(t->table, 0, t->tcap * sizeof *t->table);
    t->tused = 0;
    drop_last(t);
}

void a2__timers_free(a2__timers *t)
{
    if (!t)
        return;
    a2__timers_clear(t);
    free(t->heap);
    free(t->table);
    free(t);
}

/* The table slot of key, or of the first free slot for it (*found = 0). */
static size_t lookup(const a2__timers *t, const char *key, size_t keylen,
                     uint64_t hash, int *found)
{
    size_t mask = t->tcap - 1, i = hash & mask, free_slot = (size_t)-1;
    for (;;) {
        entry *e = t->table[i];
        if (!e) {
            *found = 0;
            return free_slot != (size_t)-1 ? free_slot : i;
        }
        if (e == TOMB) {
            if (free_slot == (size_t)-1)
                free_slot = i;
        } else if (e->hash == hash && e->keylen == keylen &&
                   memcmp(e->key, key, keylen) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static int rehash(a2__timers *t, size_t ncap)
{
    entry **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    for (size_t i = 0; i < t->n; i++) {
        entry *e = t->heap[i];
        size_t j = e->hash & (ncap - 1);
        while (nt[j])
            j = (j + 1) & (ncap - 1);
        nt[j] = e;
    }
    free(t->table);
    t->table = nt;
    t->tcap = ncap;
    t->tused = t->n;
    return 0;
}

static void heap_swap(a2__timers *t, size_t a, size_t b)
{
    entry *x = t->heap[a];
    t->heap[a] = t->heap[b];
    t->heap[b] = x;
    t->heap[a]->slot = a;
    t->heap[b]->slot = b;
}

static void sift_up(a2__timers *t, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (t->heap[p]->deadline_ms <= t->heap[i]->deadline_ms)
            break;
        heap_swap(t, p, i);
        i = p;
    }
}

static void sift_down(a2__timers *t, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->n && t->heap[l]->deadline_ms < t->heap[m]->deadline_ms)
            m = l;
        if (r < t->n && t->heap[r]->deadline_ms < t->heap[m]->deadline_ms)
            m = r;
        if (m == i)
            break;
        heap_swap(t, i, m);
        i = m;
    }
}

/* Removes e from the heap and the table (does not free it). */
static void unlink_entry(a2__timers *t, entry *e)
{
    int found;
    size_t ts = lookup(t, e->key, e->keylen, e->hash, &found);
    if (found)
        t->table[ts] = TOMB;
    size_t i = e->slot;
    t->n--;
    if (i != t->n) {
        t->heap[i] = t->heap[t->n];
        t->heap[i]->slot = i;
        sift_down(t, i);
        sift_up(t, i);
    }
}

int a2__timers_set(a2__timers *t, const char *session, const char *consumer,
                   const char *cursor_key, int64_t epoch, int64_t head,
                   int64_t deadline_ms)
{
    size_t keylen;
    drop_last(t);
    char *key = make_key(session, consumer, cursor_key, &keylen);
    if (!key)
        return -1;
    uint64_t hash = a2__table_hash(key, keylen);
    int found;
    size_t ts = lookup(t, key, keylen, hash, &found);
    if (found) {
        entry *e = t->table[ts];
        free(key);
        e->epoch = epoch;
        e->head = head;
        int64_t old = e->deadline_ms;
        e->deadline_ms = deadline_ms;
        if (deadline_ms < old)
            sift_up(t, e->slot);
        else
            sift_down(t, e->slot);
        return 0;
    }
    if ((t->tused + 1) * 2 > t->tcap) {
        size_t ncap = t->tcap;
        while ((t->n + 1) * 4 > ncap)
            ncap *= 2;
        if (rehash(t, ncap) != 0) {
            free(key);
            return -1;
        }
        ts = lookup(t, key, keylen, hash, &found);
    }
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        entry **nh = realloc(t->heap, ncap * sizeof *nh);
        if (!nh) {
            free(key);
            return -1;
        }
        t->heap = nh;
        t->cap = ncap;
    }
    entry *e = malloc(sizeof *e);
    if (!e) {
        free(key);
        return -1;
    }
    e->key = key;
    e->keylen = keylen;
    e->hash = hash;
    e->epoch = epoch;
    e->head = head;
    e->deadline_ms = deadline_ms;
    e->slot = t->n;
    if (!t->table[ts])
        t->tused++;
    t->table[ts] = e;
    t->heap[t->n++] = e;
    sift_up(t, e->slot);
    return 0;
}

int a2__timers_cancel(a2__timers *t, const char *session, const char *consumer,
                      const char *cursor_key, int64_t epoch)
{
    size_t keylen;
    drop_last(t);
    char *key = make_key(session, consumer, cursor_key, &keylen);
    if (!key)
        return 0;
    uint64_t hash = a2__table_hash(key, keylen);
    int found;
    size_t ts = lookup(t, key, keylen, hash, &found);
    free(key);
    if (!found)
        return 0;
    entry *e = t->table[ts];
    if (epoch >= 0 && e->epoch != epoch)
        return 0;
    unlink_entry(t, e);
    free(e->key);
    free(e);
    return 1;
}

size_t a2__timers_count(const a2__timers *t)
{
    return t ? t->n : 0;
}

int64_t a2__timers_next(const a2__timers *t)
{
    return t && t->n ? t->heap[0]->deadline_ms : INT64_MAX;
}

static void timer_out(const entry *e, a2__timer *out)
{
    out->session = e->key;
    out->consumer = e->key + strlen(e->key) + 1;
    out->cursor_key = out->consumer + strlen(out->consumer) + 1;
    out->epoch = e->epoch;
    out->head = e->head;
    out->deadline_ms = e->deadline_ms;
}

int a2__timers_pop(a2__timers *t, int64_t now_ms, a2__timer *out)
{
    drop_last(t);
    if (!t->n || t->heap[0]->deadline_ms > now_ms)
        return 0;
    entry *e = t->heap[0];
    unlink_entry(t, e);
    t->last = e;
    timer_out(e, out);
    return 1;
}

int a2__timers_peek(const a2__timers *t, int64_t now_ms, a2__timer *out)
{
    if (!t->n || t->heap[0]->deadline_ms > now_ms)
        return 0;
    timer_out(t->heap[0], out);
    return 1;
}
