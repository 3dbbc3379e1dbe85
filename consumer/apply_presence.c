/*
 * Presence in the applier: the patches a transaction's a2_presence writes
 * push (one per namespace and participant, at its commit), and the expiry
 * of live fields, kept here by expires_at and pushed as nil patches when
 * the daemon's expiry tick comes back through the stream (apply.h).
 */
#include "apply_int.h"

#include <stdlib.h>
#include <string.h>

/* A field written (value: jsonb text; NULL for a tombstone or a delete,
 * whose expires_at is 0), or only its expiry moved (kept). Takes value. */
static a2__apply_act presence_act(const a2_presence_row *p, char *value,
                                  int64_t expires_at, bool kept)
{
    a2__apply_act a = {.kind = A2C_ACT_PRESENCE};
    a.presence.ns = a2__apply_tdup(p->ns);
    a.presence.participant = a2__apply_tdup(p->participant);
    a.presence.field = a2__apply_tdup(p->field);
    a.presence.value = value;
    a.presence.expires_at = expires_at;
    a.presence.kept = kept;
    return a;
}

void a2__apply_presence_change(a2__apply *ap, const a2_change *c)
{
    const a2_presence_row *p =
            c->new_row ? &c->new_row->presence
                       : (c->old_row ? &c->old_row->presence : NULL);
    if (!p || ap->overflow)
        return;
    int64_t expires =
            p->present & (1u << A2_PRESENCE_EXPIRES_AT) ? p->expires_at : 0;
    /* an update that left a TOASTed value unchanged does not carry it:
     * no patch, only its new expiry */
    if (c->action == A2_ACTION_UPDATE &&
        !(p->present & (1u << A2_PRESENCE_VALUE))) {
        if (expires > 0)
            a2__apply_add(ap, presence_act(p, NULL, expires, true));
        return;
    }
    char *value = NULL;
    if (c->action != A2_ACTION_DELETE && p->value.ptr &&
        !a2__apply_teq(p->value, "null"))
        value = a2__apply_tdup(p->value);
    a2__apply_add(ap, presence_act(p, value,
                                   c->action == A2_ACTION_DELETE ? 0 : expires,
                                   false));
}

/* One namespace and participant's patches, v[start..start+len). */
typedef struct {
    size_t start, len;
    const a2__apply_act *first;
} patch_group;

static int by_first(const void *pa, const void *pb)
{
    const patch_group *a = pa, *b = pb;
    return (a->first > b->first) - (a->first < b->first);
}

int a2__apply_push_presence(a2__apply *ap)
{
    size_t n;
    a2__apply_act **v = a2__apply_sorted(ap, A2C_ACT_PRESENCE, &n);
    if (!v)
        return n > 0 ? -1 : 0;
    patch_group *g = malloc(n * sizeof *g);
    if (!g) {
        free(v);
        return -1;
    }
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(v[i]->presence.ns, v[i - 1]->presence.ns) == 0 &&
            strcmp(v[i]->presence.participant,
                   v[i - 1]->presence.participant) == 0) {
            g[ng - 1].len++;
            continue;
        }
        g[ng++] = (patch_group){i, 1, v[i]};
    }
    /* one patch a participant, in the order of their first writes; its
     * fields in the order written, the last write of a field winning */
    qsort(g, ng, sizeof *g, by_first);
    int rc = 0;
    for (size_t k = 0; k < ng && rc == 0; k++) {
        json_t *fields = json_object();
        if (!fields) {
            rc = -1;
            break;
        }
        for (size_t j = g[k].start; j < g[k].start + g[k].len; j++) {
            const a2__apply_act *b = v[j];
            json_t *val = NULL;
            if (b->presence.value)
                val = json_loads(b->presence.value, JSON_DECODE_ANY, NULL);
            json_object_set_new(fields, b->presence.field,
                                val ? val : json_null());
        }
        char *text = json_dumps(fields, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(fields);
        if (!text)
            rc = -1;
        else if (ap->sink.presence)
            ap->sink.presence(ap->sink.ctx, g[k].first->presence.ns,
                              g[k].first->presence.participant, text, ap->end);
        free(text);
        ap->stats.presence += rc == 0;
    }
    free(g);
    free(v);
    return rc;
}

int a2__apply_track_presence(a2__apply *ap, const char *ns,
                             const char *participant, const char *field,
                             int64_t expires_at)
{
    if (expires_at <= 0) {
        (void)a2__timers_cancel(ap->expiries, ns, participant, field, -1);
        return 0;
    }
    if (a2__timers_set(ap->expiries, ns, participant, field, 0, 0,
                       expires_at) != 0)
        return -1;
    if (a2__timers_count(ap->expiries) > A2C_APPLY_MAX_PRESENCE) {
        /* a field new to the set, past the bound */
        (void)a2__timers_cancel(ap->expiries, ns, participant, field, -1);
        return -1;
    }
    return 0;
}

void a2__apply_forget_presence(a2__apply *ap)
{
    a2__timers_clear(ap->expiries);
}

int64_t a2__apply_expiry_due(const a2__apply *ap)
{
    return a2__timers_next(ap->expiries);
}

/* An expired field: its key as the set keeps it ("ns\0participant\0field\0"). */
typedef struct {
    char *key;
    const char *participant, *field;
    int64_t at;
} expired;

static int by_key(const void *pa, const void *pb)
{
    const expired *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    if (c == 0)
        c = strcmp(a->participant, b->participant);
    return c != 0 ? c : strcmp(a->field, b->field);
}

/* Takes the fields expired by now_ms off the set, in an array sorted by
 * namespace, participant and field; stops short (leaving the rest for the
 * next tick) when out of memory. */
static expired *take_expired(a2__apply *ap, int64_t now_ms, size_t *n)
{
    expired *v = NULL;
    size_t cap = 0;
    a2__timer t;
    *n = 0;
    while (a2__timers_peek(ap->expiries, now_ms, &t)) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            expired *nv = realloc(v, ncap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = ncap;
        }
        size_t a = strlen(t.session) + 1, b = strlen(t.consumer) + 1,
               c = strlen(t.cursor_key) + 1;
        char *key = malloc(a + b + c);
        if (!key)
            break;
        memcpy(key, t.session, a);
        memcpy(key + a, t.consumer, b);
        memcpy(key + a + b, t.cursor_key, c);
        v[(*n)++] = (expired){key, key + a, key + a + b, t.deadline_ms};
        (void)a2__timers_pop(ap->expiries, now_ms, &t);
    }
    if (*n > 1)
        qsort(v, *n, sizeof *v, by_key);
    return v;
}

void a2__apply_push_expired(a2__apply *ap, int64_t now_ms)
{
    size_t n;
    expired *v = take_expired(ap, now_ms, &n);
    /* one patch a participant: its expired fields, nil */
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && strcmp(v[j].key, v[i].key) == 0 &&
               strcmp(v[j].participant, v[i].participant) == 0)
            j++;
        json_t *gone = json_object();
        for (size_t k = i; gone && k < j; k++)
            if (json_object_set_new(gone, v[k].field, json_null()) != 0) {
                json_decref(gone);
                gone = NULL;
            }
        char *text = gone ? json_dumps(gone, JSON_COMPACT | JSON_PRESERVE_ORDER)
                          : NULL;
        if (text && ap->sink.presence)
            ap->sink.presence(ap->sink.ctx, v[i].key, v[i].participant, text,
                              ap->end);
        if (text) {
            ap->stats.presence++;
            ap->stats.presence_expired += j - i;
        } else {
            /* no memory to say it: kept for the next tick */
            for (size_t k = i; k < j; k++)
                if (a2__timers_set(ap->expiries, v[k].key, v[k].participant,
                                   v[k].field, 0, 0, v[k].at) != 0)
                    break;
        }
        free(text);
        json_decref(gone);
        i = j;
    }
    for (size_t i = 0; i < n; i++)
        free(v[i].key);
    free(v);
}
