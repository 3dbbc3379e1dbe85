/*
 * Backlog gauges kept from the stream (see backlog.h).
 */
#include "backlog.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "route.h"

/* One consumer's counts. */
typedef struct entry {
    int64_t n[3];     /* pending, running, dead */
    uint32_t refs;    /* journal deltas naming it */
    uint32_t txn_pos; /* 1 + its place in the open transaction's deltas */
    size_t len;
    char name[];
} entry;

typedef struct {
    entry *e;
    int64_t d[3];
} delta;

/* A transaction of the journal: applied, and perhaps not yet in a read. */
typedef struct jtxn {
    struct jtxn *next;
    uint64_t xid, end, seq;
    int tainted;
    size_t n;
    delta d[];
} jtxn;

/* The snapshot of the last read applied. */
typedef struct {
    int valid;
    uint64_t xmin, xmax, lsn;
    uint64_t *xip; /* sorted */
    size_t nxip;
} snap;

struct a2__backlog {
    a2__map *byname; /* name -> entry */

    /* the open transaction */
    delta *txn;
    size_t ntxn, captxn;
    int tainted;

    /* the journal, oldest first */
    jtxn *jhead, *jtail;
    size_t jdeltas, jtxns;
    uint64_t next_seq;
    uint64_t evicted;  /* 1 + the highest sequence number evicted; 0: none */
    uint64_t read_seq; /* the first sequence number the read in flight may
                          miss */
    int read_sent;

    snap base;
    int loaded;
    int want;

    a2__backlog_stats st;
};

unsigned a2__backlog_classify(const a2_cursor_row *r, int64_t clear_index)
{
    if (!r || r->head.null || r->head.value <= clear_index)
        return 0;
    if (!r->failed_at.null)
        return A2C_BACKLOG_DEAD;
    return A2C_BACKLOG_PENDING |
           (r->claim_holder.ptr ? A2C_BACKLOG_RUNNING : 0);
}

a2__backlog *a2__backlog_new(void)
{
    a2__backlog *bl = calloc(1, sizeof *bl);
    if (!bl)
        return NULL;
    bl->byname = a2__map_new();
    if (!bl->byname) {
        free(bl);
        return NULL;
    }
    bl->next_seq = 1;
    return bl;
}

static void journal_drop_head(a2__backlog *bl)
{
    jtxn *t = bl->jhead;
    for (size_t i = 0; i < t->n; i++)
        t->d[i].e->refs--;
    bl->jhead = t->next;
    if (!bl->jhead)
        bl->jtail = NULL;
    bl->jdeltas -= t->n;
    bl->jtxns--;
    free(t);
}

void a2__backlog_free(a2__backlog *bl)
{
    if (!bl)
        return;
    while (bl->jhead)
        journal_drop_head(bl);
    a2__map_free(bl->byname, free);
    free(bl->txn);
    free(bl->base.xip);
    free(bl);
}

/* The consumer's entry, made when missing (NULL past the cap or when out of
 * memory: counted as dropped). */
static entry *entry_for(a2__backlog *bl, const char *name, size_t len)
{
    entry *e = a2__map_get(bl->byname, name, len);
    if (e)
        return e;
    if (a2__map_count(bl->byname) >= A2C_BACKLOG_MAX_CONSUMERS)
        goto drop;
    e = calloc(1, sizeof *e + len + 1);
    if (!e)
        goto drop;
    memcpy(e->name, name, len);
    e->len = len;
    if (a2__map_put(bl->byname, e->name, len, e, NULL) != 0) {
        free(e);
        goto drop;
    }
    return e;
drop:
    bl->st.dropped++;
    return NULL;
}

/* Adds d to the consumer's counts, never below zero. */
static void add_counts(a2__backlog *bl, entry *e, const int64_t d[3])
{
    for (int k = 0; k < 3; k++) {
        int64_t v = e->n[k] + d[k];
        if (v < 0) {
            v = 0;
            bl->st.clamps++;
            bl->want = 1;
        }
        e->n[k] = v;
    }
}

/* Adds bits' counts times sign to the open transaction's delta of name. */
static void txn_add(a2__backlog *bl, a2_change_text name, unsigned bits,
                    int sign)
{
    int64_t d[3] = {(bits & A2C_BACKLOG_PENDING) ? sign : 0,
                    (bits & A2C_BACKLOG_RUNNING) ? sign : 0,
                    (bits & A2C_BACKLOG_DEAD) ? sign : 0};
    if (!d[0] && !d[1] && !d[2])
        return;
    if (!name.ptr) {
        bl->tainted = 1; /* a consumer is never null: read again */
        return;
    }
    entry *e = entry_for(bl, name.ptr, name.len);
    if (!e)
        return;
    if (!e->txn_pos) {
        if (bl->ntxn == bl->captxn) {
            size_t cap = bl->captxn ? bl->captxn * 2 : 16;
            delta *v = realloc(bl->txn, cap * sizeof *v);
            if (!v) {
                bl->tainted = 1;
                return;
            }
            bl->txn = v;
            bl->captxn = cap;
        }
        bl->txn[bl->ntxn] = (delta){e, {0, 0, 0}};
        e->txn_pos = (uint32_t)++bl->ntxn;
    }
    delta *x = &bl->txn[e->txn_pos - 1];
    for (int k = 0; k < 3; k++)
        x->d[k] += d[k];
}

void a2__backlog_change(a2__backlog *bl, const a2_cursor_row *old_row,
                        int64_t old_clear, const a2_cursor_row *new_row,
                        int64_t new_clear)
{
    if (!bl)
        return;
    unsigned o = a2__backlog_classify(old_row, old_clear);
    unsigned n = a2__backlog_classify(new_row, new_clear);
    if (o == n && (!o || (old_row->consumer.len == new_row->consumer.len &&
                          old_row->consumer.ptr && new_row->consumer.ptr &&
                          memcmp(old_row->consumer.ptr, new_row->consumer.ptr,
                                 old_row->consumer.len) == 0)))
        return;
    if (o)
        txn_add(bl, old_row->consumer, o, -1);
    if (n)
        txn_add(bl, new_row->consumer, n, +1);
}

void a2__backlog_taint(a2__backlog *bl)
{
    if (bl)
        bl->tainted = 1;
}

void a2__backlog_abort(a2__backlog *bl)
{
    if (!bl)
        return;
    for (size_t i = 0; i < bl->ntxn; i++)
        bl->txn[i].e->txn_pos = 0;
    bl->ntxn = 0;
    bl->tainted = 0;
}

/* Whether the read of snapshot s already counts the transaction. */
static int sees(const snap *s, uint64_t xid, uint64_t end)
{
    if (!xid)
        return end != 0 && end <= s->lsn;
    uint64_t full = xid;
    if (xid <= UINT32_MAX) {
        /* the stream's 32-bit xid, widened next to the snapshot's xmax */
        int32_t diff = (int32_t)((uint32_t)xid - (uint32_t)s->xmax);
        int64_t f = (int64_t)s->xmax + diff;
        if (f < 0)
            return 1;
        full = (uint64_t)f;
    }
    if (full < s->xmin)
        return 1;
    if (full >= s->xmax)
        return 0;
    size_t lo = 0, hi = s->nxip;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->xip[mid] == full)
            return 0;
        if (s->xip[mid] < full)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 1;
}

/* Makes room for a transaction of n deltas: evicts the oldest. While no
 * read is in flight only the last A2C_BACKLOG_JOURNAL_IDLE are kept (a
 * commit the stream showed is visible to new snapshots a moment later). */
static void journal_room(a2__backlog *bl, size_t n)
{
    size_t max =
            bl->read_sent ? A2C_BACKLOG_JOURNAL_MAX : A2C_BACKLOG_JOURNAL_IDLE;
    while (bl->jhead && (bl->jdeltas + n > max || bl->jtxns >= max)) {
        if (bl->jhead->seq + 1 > bl->evicted)
            bl->evicted = bl->jhead->seq + 1;
        journal_drop_head(bl);
    }
}

void a2__backlog_commit(a2__backlog *bl, uint64_t xid, uint64_t end)
{
    if (!bl)
        return;
    if (bl->base.valid && sees(&bl->base, xid, end)) {
        a2__backlog_abort(bl); /* the counts read have it */
        return;
    }
    for (size_t i = 0; i < bl->ntxn; i++)
        add_counts(bl, bl->txn[i].e, bl->txn[i].d);
    uint64_t seq = bl->next_seq++;
    if (bl->ntxn > 0 || bl->tainted) {
        jtxn *t = NULL;
        if (bl->ntxn <= A2C_BACKLOG_JOURNAL_MAX) {
            journal_room(bl, bl->ntxn);
            t = malloc(sizeof *t + bl->ntxn * sizeof *t->d);
        }
        if (t) {
            t->next = NULL;
            t->xid = xid;
            t->end = end;
            t->seq = seq;
            t->tainted = bl->tainted;
            t->n = bl->ntxn;
            for (size_t i = 0; i < bl->ntxn; i++) {
                t->d[i] = bl->txn[i];
                t->d[i].e->refs++;
            }
            if (bl->jtail)
                bl->jtail->next = t;
            else
                bl->jhead = t;
            bl->jtail = t;
            bl->jdeltas += t->n;
            bl->jtxns++;
        } else if (seq + 1 > bl->evicted) {
            bl->evicted = seq + 1; /* not kept: as if evicted */
        }
    }
    if (bl->tainted)
        bl->want = 1;
    a2__backlog_abort(bl);
}

int a2__backlog_wants_read(const a2__backlog *bl)
{
    return bl && bl->want;
}

void a2__backlog_want(a2__backlog *bl)
{
    if (bl)
        bl->want = 1;
}

void a2__backlog_read_sent(a2__backlog *bl)
{
    if (!bl)
        return;
    bl->want = 0;
    bl->read_sent = 1;
    bl->read_seq = bl->next_seq;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int parse_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    *p = s;
    return 0;
}

/* pg_snapshot text: "xmin:xmax:xip1,xip2,..." (the list may be empty). */
static int parse_snapshot(const char *text, snap *s)
{
    memset(s, 0, sizeof *s);
    const char *p = text;
    if (!p || parse_u64(&p, &s->xmin) != 0 || *p++ != ':' ||
        parse_u64(&p, &s->xmax) != 0 || *p++ != ':' || s->xmin > s->xmax)
        return -1;
    size_t cap = 0;
    while (*p) {
        uint64_t x;
        if (parse_u64(&p, &x) != 0)
            goto bad;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            goto bad;
        if (s->nxip == cap) {
            cap = cap ? cap * 2 : 16;
            uint64_t *v = realloc(s->xip, cap * sizeof *v);
            if (!v)
                goto bad;
            s->xip = v;
        }
        s->xip[s->nxip++] = x;
    }
    if (s->nxip > 1)
        qsort(s->xip, s->nxip, sizeof *s->xip, cmp_u64);
    s->valid = 1;
    return 0;
bad:
    free(s->xip);
    memset(s, 0, sizeof *s);
    return -1;
}

/* Frees the entries that count nothing and that nothing names. */
static void forget_empty(a2__backlog *bl)
{
    size_t it = 0, n = 0, cap = 0;
    void *node = NULL, *val;
    const char *key;
    size_t klen;
    entry **gone = NULL;
    while (a2__map_next(bl->byname, &it, &node, &key, &klen, &val)) {
        entry *e = val;
        if (e->n[0] || e->n[1] || e->n[2] || e->refs || e->txn_pos)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            entry **v = realloc(gone, cap * sizeof *v);
            if (!v)
                break;
            gone = v;
        }
        gone[n++] = e;
    }
    for (size_t i = 0; i < n; i++) {
        a2__map_del(bl->byname, gone[i]->name, gone[i]->len);
        free(gone[i]);
    }
    free(gone);
}

int a2__backlog_load(a2__backlog *bl, const char *snapshot, uint64_t insert_lsn,
                     const a2__backlog_row *rows, size_t n)
{
    snap s;
    if (parse_snapshot(snapshot, &s) != 0)
        return -1;
    s.lsn = insert_lsn;
    int usable = bl->read_sent && bl->evicted <= bl->read_seq;
    for (jtxn *t = bl->jhead; usable && t; t = t->next)
        if (t->tainted && !sees(&s, t->xid, t->end))
            usable = 0;
    bl->read_sent = 0;
    if (!usable) {
        free(s.xip);
        bl->st.reads_unused++;
        bl->want = 1;
        return 1;
    }
    size_t it = 0;
    void *node = NULL, *val;
    const char *key;
    size_t klen;
    while (a2__map_next(bl->byname, &it, &node, &key, &klen, &val))
        memset(((entry *)val)->n, 0, sizeof((entry *)val)->n);
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].consumer)
            continue;
        entry *e = entry_for(bl, rows[i].consumer, strlen(rows[i].consumer));
        if (!e)
            continue;
        int64_t d[3] = {rows[i].pending, rows[i].running, rows[i].dead};
        add_counts(bl, e, d);
    }
    /* The journal: what the snapshot sees goes, the rest counts again. */
    jtxn **link = &bl->jhead;
    bl->jtail = NULL;
    while (*link) {
        jtxn *t = *link;
        if (sees(&s, t->xid, t->end)) {
            for (size_t i = 0; i < t->n; i++)
                t->d[i].e->refs--;
            *link = t->next;
            bl->jdeltas -= t->n;
            bl->jtxns--;
            free(t);
            continue;
        }
        for (size_t i = 0; i < t->n; i++)
            add_counts(bl, t->d[i].e, t->d[i].d);
        bl->jtail = t;
        link = &t->next;
    }
    free(bl->base.xip);
    bl->base = s;
    bl->loaded = 1;
    bl->st.reads++;
    forget_empty(bl);
    return 0;
}

int a2__backlog_loaded(const a2__backlog *bl)
{
    return bl && bl->loaded;
}

int a2__backlog_get(const a2__backlog *bl, const char *consumer,
                    a2__backlog_row *out)
{
    memset(out, 0, sizeof *out);
    out->consumer = consumer;
    entry *e = bl ? a2__map_get(bl->byname, consumer, strlen(consumer)) : NULL;
    if (!e)
        return 0;
    out->pending = e->n[0];
    out->running = e->n[1];
    out->dead = e->n[2];
    return 1;
}

void a2__backlog_get_stats(const a2__backlog *bl, a2__backlog_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!bl)
        return;
    *out = bl->st;
    out->consumers = a2__map_count(bl->byname);
    out->journal = bl->jdeltas;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    return strcmp(x->name, y->name);
}

void a2__backlog_render(const a2__backlog *bl, char **buf, size_t *len,
                        size_t *cap)
{
    static const struct {
        const char *name, *help;
    } families[3] = {
            {"a2_consumer_backlog_pending",
             "heads above their clear marker not dead-lettered, running ones "
             "included (read at start, then kept from the stream)"},
            {"a2_consumer_backlog_running",
             "pending heads a claim holds, live or lapsed"},
            {"a2_consumer_backlog_dead_letters",
             "dead-lettered heads above their clear marker"},
    };
    size_t n = 0;
    entry **v = NULL;
    if (bl && bl->loaded && a2__map_count(bl->byname) > 0) {
        v = malloc(a2__map_count(bl->byname) * sizeof *v);
        size_t it = 0;
        void *node = NULL, *val;
        const char *key;
        size_t klen;
        while (v && a2__map_next(bl->byname, &it, &node, &key, &klen, &val))
            v[n++] = val;
        if (n > 1)
            qsort(v, n, sizeof *v, cmp_entry);
    }
    for (int f = 0; f < 3; f++) {
        a2__metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s gauge\n",
                            families[f].name, families[f].help,
                            families[f].name);
        for (size_t i = 0; i < n; i++) {
            a2__metrics_appendf(buf, len, cap, "%s{consumer=\"",
                                families[f].name);
            a2__metrics_append_label(buf, len, cap, v[i]->name);
            a2__metrics_appendf(buf, len, cap, "\"} %" PRId64 "\n", v[i]->n[f]);
        }
    }
    free(v);
    a2__backlog_stats st;
    a2__backlog_get_stats(bl, &st);
    a2__metrics_appendf(
            buf, len, cap,
            "# HELP a2_consumer_backlog_reads_total backlog reads applied "
            "(at start, on reconnect and resync, after a clear)\n"
            "# TYPE a2_consumer_backlog_reads_total counter\n"
            "a2_consumer_backlog_reads_total %" PRIu64 "\n"
            "# HELP a2_consumer_backlog_reads_unused_total backlog reads whose "
            "snapshot missed what the stream had applied, read again\n"
            "# TYPE a2_consumer_backlog_reads_unused_total counter\n"
            "a2_consumer_backlog_reads_unused_total %" PRIu64 "\n"
            "# HELP a2_consumer_backlog_clamps_total backlog changes that "
            "would have taken a gauge below zero\n"
            "# TYPE a2_consumer_backlog_clamps_total counter\n"
            "a2_consumer_backlog_clamps_total %" PRIu64 "\n"
            "# HELP a2_consumer_backlog_dropped_total backlog changes and read "
            "rows of consumers past the cap of %d names, not counted\n"
            "# TYPE a2_consumer_backlog_dropped_total counter\n"
            "a2_consumer_backlog_dropped_total %" PRIu64 "\n"
            "# HELP a2_consumer_backlog_consumers consumer names the backlog "
            "gauges keep\n"
            "# TYPE a2_consumer_backlog_consumers gauge\n"
            "a2_consumer_backlog_consumers %" PRIu64 "\n",
            st.reads, st.reads_unused, st.clamps, A2C_BACKLOG_MAX_CONSUMERS,
            st.dropped, st.consumers);
}
