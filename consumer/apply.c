/*
 * Transaction applier: a transaction's changes are buffered from B to C as
 * audit lines and typed actions; at C the lines are written and the actions
 * consumed in order (wake-ups, timers, log, cleared, presence). Also the
 * timers' wake-ups and the gap records.
 */
#include "apply_int.h"

#include "../common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *a2__apply_tdup(a2_change_text t)
{
    if (!t.ptr)
        return NULL;
    char *s = malloc(t.len + 1);
    if (s) {
        memcpy(s, t.ptr, t.len);
        s[t.len] = '\0';
    }
    return s;
}

int a2__apply_teq(a2_change_text t, const char *s)
{
    return t.ptr && s && strlen(s) == t.len && memcmp(t.ptr, s, t.len) == 0;
}

a2__apply *a2__apply_new(a2__audit *audit, a2__timers *timers,
                         const a2__sink *sink, const a2__audit_resume *resume)
{
    a2__apply *ap = calloc(1, sizeof *ap);
    if (!ap)
        return NULL;
    ap->audit = audit;
    ap->timers = timers;
    if (sink)
        ap->sink = *sink;
    if (resume) {
        ap->done = resume->done;
        ap->partial_lsn = resume->partial_lsn;
        ap->partial_lines = resume->partial_lines;
    }
    ap->applied = ap->done;
    ap->expiries = a2__timers_new();
    if (!ap->expiries) {
        free(ap);
        return NULL;
    }
    return ap;
}

static void key_free(a2__apply_key *k)
{
    free(k->session);
    free(k->consumer);
    free(k->cursor_key);
}

static void act_free(a2__apply_act *a)
{
    switch (a->kind) {
    case A2C_ACT_WAKE:
    case A2C_ACT_VOID:
        key_free(&a->wake.key);
        break;
    case A2C_ACT_ARM:
        key_free(&a->arm.key);
        break;
    case A2C_ACT_CANCEL:
        key_free(&a->cancel.key);
        break;
    case A2C_ACT_LOG:
        free(a->log.session);
        free(a->log.type);
        break;
    case A2C_ACT_CLEARED:
        free(a->cleared.session);
        break;
    case A2C_ACT_PRESENCE:
        free(a->presence.ns);
        free(a->presence.participant);
        free(a->presence.field);
        free(a->presence.value);
        break;
    case A2C_ACT_TRUNCATE:
    case A2C_ACT_DROPPED:
        break;
    }
    a->kind = A2C_ACT_DROPPED;
}

static void free_actions(a2__apply *ap)
{
    for (size_t i = 0; i < ap->nacts; i++)
        act_free(&ap->acts[i]);
    ap->nacts = 0;
    ap->nwakes = 0;
}

void a2__apply_free(a2__apply *ap)
{
    if (!ap)
        return;
    free_actions(ap);
    free(ap->acts);
    a2__audit_text_free(&ap->text);
    a2__apply_forget_clears(ap);
    a2__timers_free(ap->expiries);
    free(ap);
}

void a2__apply_set_backlog(a2__apply *ap, a2__backlog *bl)
{
    ap->backlog = bl;
}

void a2__apply_add(a2__apply *ap, a2__apply_act act)
{
    if (ap->overflow)
        goto drop;
    if (ap->nacts >= A2C_APPLY_MAX_ACTIONS)
        goto overflow;
    if (ap->nacts == ap->capacts) {
        size_t ncap = ap->capacts ? ap->capacts * 2 : 16;
        a2__apply_act *n = realloc(ap->acts, ncap * sizeof *n);
        if (!n)
            goto overflow;
        ap->acts = n;
        ap->capacts = ncap;
    }
    ap->acts[ap->nacts++] = act;
    ap->nwakes += act.kind == A2C_ACT_WAKE;
    return;
overflow:
    free_actions(ap);
    ap->overflow = 1;
drop:
    act_free(&act);
}

/* ---- audit lines ---- */

static int flush_buffer(a2__apply *ap, char *err, size_t errlen)
{
    a2__audit_text *t = &ap->text;
    if (t->len == 0)
        return 0;
    if (ap->audit &&
        a2__audit_write(ap->audit, t->buf, t->len, t->lines, err, errlen) != 0)
        return -1;
    ap->stats.audit_lines += t->lines;
    ap->written_early += t->lines;
    a2__audit_text_clear(t);
    return 0;
}

/* The audit line of an a2_cursors change, unless the file has it. */
static int audit_cursor(a2__apply *ap, const a2_change *c, a2_transition tr,
                        char *err, size_t errlen)
{
    if (ap->skip_all)
        return 0;
    if (ap->skip_lines > 0) {
        ap->skip_lines--;
        return 0;
    }
    if (a2__audit_text_cursor(&ap->text, c, a2_transition_name(tr)) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ap->text.len >= A2C_APPLY_MAX_AUDIT_BUFFER)
        return flush_buffer(ap, err, errlen);
    return 0;
}

/* ---- the transaction ---- */

static void begin(a2__apply *ap, const a2_change *c)
{
    ap->in_txn = 1;
    ap->end = c->has_nextlsn ? c->nextlsn : 0;
    ap->xid_n = !c->xid.null && c->xid.value > 0 ? (uint64_t)c->xid.value : 0;
    ap->commit_us = c->has_time ? c->time_us : 0;
    a2__backlog_abort(ap->backlog);
    a2__audit_text_begin(&ap->text, ap->end, c->xid, c->has_time, c->time_us);
    uint64_t done = ap->done > ap->applied ? ap->done : ap->applied;
    ap->skip_all = ap->end != 0 && ap->end <= done;
    ap->skip_lines = ap->end == ap->partial_lsn ? ap->partial_lines : 0;
    ap->written_early = 0;
    free_actions(ap);
    ap->overflow = 0;
}

void a2__apply_abort_txn(a2__apply *ap)
{
    if (!ap->in_txn)
        return;
    if (ap->written_early > 0) {
        size_t before = ap->end == ap->partial_lsn ? ap->partial_lines : 0;
        ap->partial_lsn = ap->end;
        ap->partial_lines = before + ap->written_early;
    }
    ap->in_txn = 0;
    a2__audit_text_clear(&ap->text);
    free_actions(ap);
    ap->overflow = 0;
    ap->expire_tick = 0;
    a2__backlog_abort(ap->backlog);
}

/* ---- settling the actions at the commit ---- */

/* Orders the actions of one kind by what they are about, then by their
 * place in the transaction. */
static int by_subject(const void *pa, const void *pb)
{
    const a2__apply_act *a = *(a2__apply_act *const *)pa;
    const a2__apply_act *b = *(a2__apply_act *const *)pb;
    int c = 0;
    switch (a->kind) {
    case A2C_ACT_CLEARED:
        if ((c = strcmp(a->cleared.session, b->cleared.session)) == 0)
            c = (a->cleared.clear_index > b->cleared.clear_index) -
                (a->cleared.clear_index < b->cleared.clear_index);
        break;
    case A2C_ACT_PRESENCE:
        if ((c = strcmp(a->presence.ns, b->presence.ns)) == 0)
            c = strcmp(a->presence.participant, b->presence.participant);
        break;
    default:
        c = a2__apply_same_head(pa, pb);
        break;
    }
    return c ? c : (a > b) - (a < b);
}

int a2__apply_same_head(const void *pa, const void *pb)
{
    const a2__apply_act *a = *(a2__apply_act *const *)pa;
    const a2__apply_act *b = *(a2__apply_act *const *)pb;
    int c;
    if ((c = strcmp(a->wake.key.session, b->wake.key.session)) != 0 ||
        (c = strcmp(a->wake.key.consumer, b->wake.key.consumer)) != 0 ||
        (c = strcmp(a->wake.key.cursor_key, b->wake.key.cursor_key)) != 0)
        return c;
    return (a->wake.head > b->wake.head) - (a->wake.head < b->wake.head);
}

/* The action is about something: its strings are there (not lost to out of
 * memory) and, for presence, it writes a field. */
static int has_subject(const a2__apply_act *a)
{
    switch (a->kind) {
    case A2C_ACT_CLEARED:
        return a->cleared.session != NULL;
    case A2C_ACT_PRESENCE:
        return a->presence.ns && a->presence.participant &&
               a->presence.field && !a->presence.kept;
    default:
        return a->wake.key.session && a->wake.key.consumer &&
               a->wake.key.cursor_key;
    }
}

a2__apply_act **a2__apply_sorted(a2__apply *ap, a2__apply_act_kind kind,
                                 size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < ap->nacts; i++)
        *n += ap->acts[i].kind == kind && has_subject(&ap->acts[i]);
    if (*n == 0)
        return NULL;
    a2__apply_act **v = malloc(*n * sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < ap->nacts; i++)
        if (ap->acts[i].kind == kind && has_subject(&ap->acts[i]))
            v[k++] = &ap->acts[i];
    qsort(v, k, sizeof *v, by_subject);
    return v;
}

/*
 * Drops what the transaction's later actions make moot, in O(n log n) for
 * the largest transaction: a wake-up that a claim of the same head follows
 * (the last void of each head decides), and a session's cleared to an
 * index but the first. Returns -1 when out of memory.
 */
static int settle_actions(a2__apply *ap)
{
    size_t n;
    a2__apply_act **v = a2__apply_sorted(ap, A2C_ACT_VOID, &n);
    if (n > 0 && !v)
        return -1;
    if (v) {
        size_t last = 0; /* of each head, the last void only */
        for (size_t i = 0; i < n; i++) {
            if (last > 0 && a2__apply_same_head(&v[last - 1], &v[i]) == 0)
                v[last - 1] = v[i];
            else
                v[last++] = v[i];
        }
        for (size_t i = 0; i < ap->nacts; i++) {
            a2__apply_act *a = &ap->acts[i];
            if (a->kind != A2C_ACT_WAKE || !has_subject(a))
                continue;
            a2__apply_act **hit =
                    bsearch(&a, v, last, sizeof *v, a2__apply_same_head);
            if (hit && *hit > a)
                act_free(a);
        }
        free(v);
    }
    v = a2__apply_sorted(ap, A2C_ACT_CLEARED, &n);
    if (n > 0 && !v)
        return -1;
    for (size_t i = 1, kept = 0; i < n; i++) {
        if (strcmp(v[i]->cleared.session, v[kept]->cleared.session) == 0 &&
            v[i]->cleared.clear_index == v[kept]->cleared.clear_index)
            act_free(v[i]);
        else
            kept = i;
    }
    free(v);
    return 0;
}

/* Consumes the transaction's actions in order. */
static int push_actions(a2__apply *ap, uint64_t end, char *err, size_t errlen)
{
    const int64_t trace[A2_WIRE_TRACE_N] = {
            [A2_WIRE_TRACE_COMMIT] = ap->commit_us,
            [A2_WIRE_TRACE_SENT] = ap->msg_sent_us,
            [A2_WIRE_TRACE_RECV] = ap->msg_recv_us};
    for (size_t i = 0; i < ap->nacts; i++) {
        a2__apply_act *a = &ap->acts[i];
        switch (a->kind) {
        case A2C_ACT_WAKE:
            if (ap->sink.wake)
                ap->sink.wake(ap->sink.ctx, a->wake.key.consumer,
                              a->wake.key.session, a->wake.key.cursor_key,
                              a->wake.head, end, ap->xid_n, trace);
            ap->stats.wakes++;
            break;
        case A2C_ACT_ARM:
            if (a2__timers_set(ap->timers, a->arm.key.session,
                               a->arm.key.consumer, a->arm.key.cursor_key,
                               a->arm.epoch, a->arm.head,
                               a->arm.deadline_ms) != 0) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            break;
        case A2C_ACT_CANCEL:
            a2__timers_cancel(ap->timers, a->cancel.key.session,
                              a->cancel.key.consumer, a->cancel.key.cursor_key,
                              a->cancel.epoch);
            break;
        case A2C_ACT_LOG:
            if (ap->sink.log)
                ap->sink.log(ap->sink.ctx, a->log.session, a->log.idx,
                             a->log.type, end, ap->xid_n);
            ap->stats.logs++;
            break;
        case A2C_ACT_CLEARED:
            if (ap->sink.cleared)
                ap->sink.cleared(ap->sink.ctx, a->cleared.session,
                                 a->cleared.clear_index, end);
            ap->stats.cleared++;
            break;
        case A2C_ACT_TRUNCATE:
            a2__timers_clear(ap->timers);
            if (ap->sink.resync)
                ap->sink.resync(ap->sink.ctx);
            break;
        case A2C_ACT_VOID:
        case A2C_ACT_DROPPED:
            break;
        case A2C_ACT_PRESENCE:
            /* a tombstone or a delete ends the field's life */
            if (a->presence.ns && a->presence.participant && a->presence.field)
                (void)a2__apply_track_presence(
                        ap, a->presence.ns, a->presence.participant,
                        a->presence.field,
                        a->presence.value || a->presence.kept
                                ? a->presence.expires_at
                                : 0);
            break;
        }
    }
    return 0;
}

static int commit(a2__apply *ap, const a2_change *c, uint64_t data_start,
                  char *err, size_t errlen)
{
    uint64_t end = ap->end ? ap->end : data_start;
    if (c->has_nextlsn && c->nextlsn)
        end = c->nextlsn;
    ap->end = end;
    ap->in_txn = 0;
    if (ap->skip_all) {
        ap->stats.skipped++;
        if (ap->expire_tick > 0)
            ap->stats.expire_ticks++;
        ap->expire_tick = 0;
        free_actions(ap);
        a2__backlog_abort(ap->backlog);
        if (end > ap->applied)
            ap->applied = end;
        return 0;
    }
    if (flush_buffer(ap, err, errlen) != 0)
        return -1;
    if (ap->audit)
        a2__audit_mark(ap->audit, end);
    if (end >= ap->partial_lsn) {
        ap->partial_lsn = 0;
        ap->partial_lines = 0;
    }
    if (ap->overflow) {
        ap->stats.overflows++;
        if (ap->sink.resync)
            ap->sink.resync(ap->sink.ctx);
    }
    if (settle_actions(ap) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (push_actions(ap, end, err, errlen) != 0)
        return -1;
    if (a2__apply_push_presence(ap) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ap->expire_tick > 0) {
        a2__apply_push_expired(ap, ap->expire_tick);
        ap->expire_tick = 0;
        ap->stats.expire_ticks++;
    }
    free_actions(ap);
    a2__backlog_commit(ap->backlog, ap->xid_n, end);
    ap->applied = end;
    ap->stats.transactions++;
    return 0;
}

void a2__apply_set_tick_secret(a2__apply *ap, const char *secret)
{
    if (ap && secret && strlen(secret) == A2C_TICK_SECRET_LEN)
        memcpy(ap->tick_secret, secret, A2C_TICK_SECRET_LEN + 1);
}

/* The time of one of this daemon's expiry ticks (A2C_EXPIRE_TICK
 * "<secret> <ms>"), or 0; a tick message without the secret is counted as
 * forged. */
static int64_t tick_time(a2__apply *ap, const a2_change *c)
{
    const size_t k = sizeof A2C_EXPIRE_TICK - 1;
    if (!a2__apply_teq(c->prefix, A2C_TICK_PREFIX) || !c->content.ptr ||
        c->content.len <= k || memcmp(c->content.ptr, A2C_EXPIRE_TICK, k) != 0)
        return 0;
    const char *p = c->content.ptr + k;
    size_t n = c->content.len - k;
    if (!ap->tick_secret[0] || n <= A2C_TICK_SECRET_LEN + 1 ||
        memcmp(p, ap->tick_secret, A2C_TICK_SECRET_LEN) != 0 ||
        p[A2C_TICK_SECRET_LEN] != ' ') {
        ap->stats.forged_ticks++;
        return 0;
    }
    p += A2C_TICK_SECRET_LEN + 1;
    n -= A2C_TICK_SECRET_LEN + 1;
    if (n >= 24)
        return 0;
    char ms[24], *end;
    memcpy(ms, p, n);
    ms[n] = '\0';
    long long v = strtoll(ms, &end, 10);
    return *end == '\0' && v > 0 ? v : 0;
}

/* A TRUNCATE of a2 tables. */
static int truncate_change(a2__apply *ap, const a2_change *c, char *err,
                           size_t errlen)
{
    if (c->table == A2_TABLE_CURSORS || c->table == A2_TABLE_CLEARS)
        a2__backlog_taint(ap->backlog);
    if (c->table == A2_TABLE_CURSORS) {
        if (!ap->skip_all && a2__audit_text_truncate(&ap->text) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        a2__apply_add(ap, (a2__apply_act){.kind = A2C_ACT_TRUNCATE});
    }
    if (c->table == A2_TABLE_PRESENCE)
        a2__apply_forget_presence(ap);
    return 0;
}

int a2__apply_change(a2__apply *ap, const a2_change *c, uint64_t data_start,
                     char *err, size_t errlen)
{
    switch (c->action) {
    case A2_ACTION_BEGIN:
        if (ap->in_txn)
            a2__apply_abort_txn(ap);
        begin(ap, c);
        return 0;
    case A2_ACTION_COMMIT:
        if (!ap->in_txn) {
            snprintf(err, errlen, "commit without begin at %X/%X",
                     (unsigned)(data_start >> 32), (unsigned)data_start);
            return 1;
        }
        return commit(ap, c, data_start, err, errlen);
    case A2_ACTION_MESSAGE:
        if (!c->transactional && !ap->in_txn)
            a2__apply_note_position(ap, data_start);
        if (c->transactional && ap->in_txn) {
            int64_t t = tick_time(ap, c);
            if (t > 0)
                ap->expire_tick = t;
        }
        return 0;
    default:
        break;
    }
    if (!ap->in_txn) {
        snprintf(err, errlen, "change outside a transaction at %X/%X",
                 (unsigned)(data_start >> 32), (unsigned)data_start);
        return 1;
    }
    ap->stats.changes++;
    if (c->action == A2_ACTION_TRUNCATE)
        return truncate_change(ap, c, err, errlen);
    switch (c->table) {
    case A2_TABLE_CURSORS: {
        a2_transition tr = a2__apply_cursor_transition(ap, c);
        if (audit_cursor(ap, c, tr, err, errlen) != 0)
            return -1;
        a2__apply_cursor_change(ap, c, tr);
        break;
    }
    case A2_TABLE_EVENTS:
        a2__apply_event_change(ap, c);
        break;
    case A2_TABLE_CLEARS:
        a2__apply_clear_change(ap, c);
        break;
    case A2_TABLE_PRESENCE:
        a2__apply_presence_change(ap, c);
        break;
    default:
        break;
    }
    return 0;
}

int a2__apply_in_txn(const a2__apply *ap)
{
    return ap->in_txn;
}

uint64_t a2__apply_applied(const a2__apply *ap)
{
    return ap->applied;
}

void a2__apply_note_position(a2__apply *ap, uint64_t lsn)
{
    if (ap->in_txn)
        return;
    if (lsn > ap->applied)
        ap->applied = lsn;
    if (ap->audit)
        a2__audit_mark(ap->audit, ap->applied);
}

void a2__apply_note_times(a2__apply *ap, int64_t sent_us, int64_t recv_us)
{
    ap->msg_sent_us = sent_us;
    ap->msg_recv_us = recv_us;
}

size_t a2__apply_fire_timers(a2__apply *ap, int64_t now_ms)
{
    size_t n = 0;
    a2__timer t;
    while (a2__timers_pop(ap->timers, now_ms, &t)) {
        if (ap->sink.wake)
            ap->sink.wake(ap->sink.ctx, t.consumer, t.session, t.cursor_key,
                          t.head, ap->applied, 0, 0);
        ap->stats.timer_wakes++;
        n++;
    }
    return n;
}

int a2__apply_gap(a2__apply *ap, uint64_t from, uint64_t to, const char *reason,
                  char *err, size_t errlen)
{
    size_t n = 0;
    char *text = a2__audit_gap_line(from, to, reason, a2__real_us(), &n);
    int rc = -1;
    if (!text) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    /* A gap is on file before the daemon says it is ready: an operator
     * reading the trail then sees why it jumps. */
    if (ap->audit &&
        (a2__audit_write(ap->audit, text, n, 1, err, errlen) != 0 ||
         a2__audit_flush(ap->audit, err, errlen) != 0))
        goto done;
    ap->stats.audit_lines++;
    if (to > ap->applied)
        ap->applied = to;
    if (ap->audit)
        a2__audit_mark(ap->audit, ap->applied);
    rc = 0;
done:
    free(text);
    return rc;
}

void a2__apply_get_stats(const a2__apply *ap, a2__apply_stats *out)
{
    *out = ap->stats;
}
