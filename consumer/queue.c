/*
 * Bounded, coalescing outbound queue of one worker.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/buf.h"
#include "../common/clock.h"
#include "metrics.h"
#include "queue.h"
#include "route.h"

typedef struct entry {
    struct entry *next;
    struct entry *prev;
    a2_wire_type type;
    /* wake: key is consumer\0session\0cursor */
    int64_t head;
    uint64_t lsn;
    uint64_t xid;
    /* the earliest commit it stands for (A2_WIRE_TRACE_*); commit 0: none */
    int64_t trace_us[A2_WIRE_TRACE_N];
    size_t klen;
    /* other types: the encoded frame */
    size_t len;
    char data[]; /* wake key, or frame bytes */
} entry;

struct a2__queue {
    entry *first;
    entry *last;
    size_t count;
    size_t limit;
    int overflowed;
    a2__map *wakes; /* key -> queued wake entry */
    a2__hist *latency;
    int trace;
};

a2__queue *a2__queue_new(size_t limit)
{
    a2__queue *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->limit = limit ? limit : 1;
    q->wakes = a2__map_new();
    if (!q->wakes) {
        free(q);
        return NULL;
    }
    return q;
}

void a2__queue_clear(a2__queue *q)
{
    entry *e;
    if (!q)
        return;
    e = q->first;
    while (e) {
        entry *n = e->next;
        if (e->type == A2_WIRE_WAKE)
            a2__map_del(q->wakes, e->data, e->klen);
        free(e);
        e = n;
    }
    q->first = q->last = NULL;
    q->count = 0;
}

void a2__queue_free(a2__queue *q)
{
    if (!q)
        return;
    a2__queue_clear(q);
    a2__map_free(q->wakes, NULL);
    free(q);
}

size_t a2__queue_len(const a2__queue *q)
{
    return q ? q->count : 0;
}

int a2__queue_overflowed(const a2__queue *q)
{
    return q && q->overflowed;
}

void a2__queue_clear_overflow(a2__queue *q)
{
    if (q)
        q->overflowed = 0;
}

static void append(a2__queue *q, entry *e)
{
    e->next = NULL;
    e->prev = q->last;
    if (q->last)
        q->last->next = e;
    else
        q->first = e;
    q->last = e;
    q->count++;
}

/* Room for one more frame, or the overflow result. */
static int admit(a2__queue *q)
{
    if (q->overflowed)
        return A2C_QUEUE_DROPPED;
    if (q->count >= q->limit) {
        a2__queue_clear(q);
        q->overflowed = 1;
        return A2C_QUEUE_OVERFLOW;
    }
    return A2C_QUEUE_QUEUED;
}

void a2__queue_set_latency(a2__queue *q, struct a2__hist *h)
{
    if (q)
        q->latency = h;
}

void a2__queue_set_trace(a2__queue *q, int on)
{
    if (q)
        q->trace = on;
}

/* Keeps trace_us in e when it is of an earlier commit than e's (or e has
 * none). */
static void keep_earliest(entry *e, const int64_t *trace_us)
{
    if (!trace_us || trace_us[A2_WIRE_TRACE_COMMIT] <= 0)
        return;
    if (e->trace_us[A2_WIRE_TRACE_COMMIT] &&
        e->trace_us[A2_WIRE_TRACE_COMMIT] <= trace_us[A2_WIRE_TRACE_COMMIT])
        return;
    memcpy(e->trace_us, trace_us, sizeof e->trace_us);
    e->trace_us[A2_WIRE_TRACE_PUSH] = 0;
}

int a2__queue_push_wake(a2__queue *q, const char *consumer, const char *session,
                        const char *cursor, int64_t head, uint64_t lsn,
                        uint64_t xid)
{
    return a2__queue_push_wake_at(q, consumer, session, cursor, head, lsn, xid,
                                  NULL);
}

int a2__queue_push_wake_at(a2__queue *q, const char *consumer,
                           const char *session, const char *cursor,
                           int64_t head, uint64_t lsn, uint64_t xid,
                           const int64_t *trace_us)
{
    size_t lc, ls, lk, klen;
    entry *e;
    int rc;

    if (!q || !consumer || !session || !cursor)
        return A2C_QUEUE_EINVAL;
    lc = strlen(consumer);
    ls = strlen(session);
    lk = strlen(cursor);
    klen = lc + ls + lk + 2;
    if (q->overflowed)
        return A2C_QUEUE_DROPPED;
    {
        char key[3 * (A2_WIRE_MAX_STRING + 1)];
        if (lc > A2_WIRE_MAX_STRING || ls > A2_WIRE_MAX_STRING ||
            lk > A2_WIRE_MAX_STRING)
            return A2C_QUEUE_EINVAL;
        memcpy(key, consumer, lc + 1);
        memcpy(key + lc + 1, session, ls + 1);
        memcpy(key + lc + ls + 2, cursor, lk + 1);
        e = a2__map_get(q->wakes, key, klen);
        if (e) {
            e->head = head;
            e->lsn = lsn;
            /* the latest commit's: a session's writers commit one after
             * another under its lock. A timer's wake-up has none. */
            if (xid)
                e->xid = xid;
            keep_earliest(e, trace_us);
            return A2C_QUEUE_COALESCED;
        }
        if ((rc = admit(q)) != A2C_QUEUE_QUEUED)
            return rc;
        e = malloc(sizeof *e + klen + 1);
        if (!e)
            return A2C_QUEUE_ENOMEM;
        memset(e, 0, sizeof *e);
        e->type = A2_WIRE_WAKE;
        e->head = head;
        e->lsn = lsn;
        e->xid = xid;
        keep_earliest(e, trace_us);
        e->klen = klen;
        memcpy(e->data, key, klen + 1);
        if (a2__map_put(q->wakes, e->data, klen, e, NULL) != 0) {
            free(e);
            return A2C_QUEUE_ENOMEM;
        }
    }
    append(q, e);
    return A2C_QUEUE_QUEUED;
}

int a2__queue_push(a2__queue *q, const a2_wire_msg *m)
{
    a2_wire_buf b = {0};
    entry *e;
    int rc;

    if (!q || !m)
        return A2C_QUEUE_EINVAL;
    if (m->type == A2_WIRE_WAKE)
        return a2__queue_push_wake(q, m->consumer, m->session, m->cursor,
                                   m->head, m->lsn, m->xid);
    if (q->overflowed)
        return A2C_QUEUE_DROPPED;
    rc = a2_wire_encode(&b, m);
    if (rc != 0) {
        a2_wire_buf_free(&b);
        return rc == A2_WIRE_ENOMEM ? A2C_QUEUE_ENOMEM : A2C_QUEUE_EINVAL;
    }
    if ((rc = admit(q)) != A2C_QUEUE_QUEUED) {
        a2_wire_buf_free(&b);
        return rc;
    }
    e = malloc(sizeof *e + b.len);
    if (!e) {
        a2_wire_buf_free(&b);
        return A2C_QUEUE_ENOMEM;
    }
    memset(e, 0, sizeof *e);
    e->type = m->type;
    e->len = b.len;
    memcpy(e->data, b.data, b.len);
    a2_wire_buf_free(&b);
    append(q, e);
    return A2C_QUEUE_QUEUED;
}

int a2__queue_drain(a2__queue *q, a2_wire_buf *out, size_t max_bytes,
                    uint64_t *sent)
{
    int moved = 0;
    int64_t now_us = 0;

    if (!q || !out)
        return A2C_QUEUE_EINVAL;
    while (q->first && out->len < max_bytes) {
        entry *e = q->first;
        if (e->type == A2_WIRE_WAKE) {
            const char *c = e->data;
            const char *s = c + strlen(c) + 1;
            const char *k = s + strlen(s) + 1;
            a2_wire_msg w = {.type = A2_WIRE_WAKE,
                             .consumer = c,
                             .session = s,
                             .cursor = k,
                             .head = e->head,
                             .lsn = e->lsn,
                             .xid = e->xid};
            int64_t commit_us = e->trace_us[A2_WIRE_TRACE_COMMIT];
            if (commit_us > 0 && !now_us)
                now_us = a2__real_us();
            if (q->trace && commit_us > 0) {
                memcpy(w.trace_us, e->trace_us, sizeof w.trace_us);
                w.trace_us[A2_WIRE_TRACE_PUSH] = now_us;
            }
            int rc = a2_wire_encode(out, &w);
            if (rc == A2_WIRE_ENOMEM)
                return moved ? moved : A2C_QUEUE_ENOMEM;
            a2__map_del(q->wakes, e->data, e->klen);
            /* other encode errors cannot happen (lengths were checked) */
            if (q->latency && commit_us > 0)
                a2__hist_observe(q->latency, now_us - commit_us);
        } else {
            size_t before = out->len;
            a2_wire_buf one = {e->data, e->len, e->len};
            if (out->len + e->len > out->cap) {
                char *p = a2__buf_grow(out->data, &out->cap, 256,
                                       out->len + e->len);
                if (!p)
                    return moved ? moved : A2C_QUEUE_ENOMEM;
                out->data = p;
            }
            memcpy(out->data + before, one.data, one.len);
            out->len += one.len;
        }
        if (sent && (unsigned)e->type < 32)
            sent[e->type]++;
        q->first = e->next;
        if (q->first)
            q->first->prev = NULL;
        else
            q->last = NULL;
        q->count--;
        free(e);
        moved++;
    }
    return moved;
}
