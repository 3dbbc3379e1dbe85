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
    json_t *byp = json_object_get(ap->expiries, ns);
    json_t *f = byp ? json_object_get(byp, participant) : NULL;
    if (expires_at <= 0) {
        if (!f || !json_object_get(f, field))
            return 0;
        json_object_del(f, field);
        ap->nexpiries--;
        if (json_object_size(f) == 0)
            json_object_del(byp, participant);
        if (json_object_size(byp) == 0)
            json_object_del(ap->expiries, ns);
        return 0;
    }
    int fresh = !f || !json_object_get(f, field);
    if (fresh && ap->nexpiries >= A2C_APPLY_MAX_PRESENCE)
        return -1;
    if (!byp) {
        byp = json_object();
        if (json_object_set_new(ap->expiries, ns, byp) != 0)
            return -1;
    }
    if (!f) {
        f = json_object();
        if (json_object_set_new(byp, participant, f) != 0)
            return -1;
    }
    if (json_object_set_new(f, field, json_integer(expires_at)) != 0)
        return -1;
    if (fresh)
        ap->nexpiries++;
    if (expires_at < ap->expiry_due)
        ap->expiry_due = expires_at;
    return 0;
}

void a2__apply_forget_presence(a2__apply *ap)
{
    json_object_clear(ap->expiries);
    ap->nexpiries = 0;
    ap->expiry_due = INT64_MAX;
}

int64_t a2__apply_expiry_due(const a2__apply *ap)
{
    return ap->expiry_due;
}

void a2__apply_push_expired(a2__apply *ap, int64_t now_ms)
{
    int64_t due = INT64_MAX;
    const char *ns, *pa, *field;
    json_t *byp, *f, *e;
    void *t1, *t2, *t3;
    json_object_foreach_safe(ap->expiries, t1, ns, byp)
    {
        json_object_foreach_safe(byp, t2, pa, f)
        {
            json_t *gone = NULL;
            json_object_foreach_safe(f, t3, field, e)
            {
                int64_t at = json_integer_value(e);
                if (at <= now_ms && !gone)
                    gone = json_object();
                if (at > now_ms || !gone ||
                    json_object_set_new(gone, field, json_null()) != 0) {
                    if (at < due) /* kept: its time is still to come, or
                                     there was no memory to say it */
                        due = at;
                    continue;
                }
                json_object_del(f, field);
                ap->nexpiries--;
            }
            char *text = gone ? json_dumps(gone, JSON_COMPACT) : NULL;
            if (text && ap->sink.presence)
                ap->sink.presence(ap->sink.ctx, ns, pa, text, ap->end);
            if (text) {
                ap->stats.presence++;
                ap->stats.presence_expired += json_object_size(gone);
            }
            free(text);
            json_decref(gone);
            if (json_object_size(f) == 0)
                json_object_del(byp, pa);
        }
        if (json_object_size(byp) == 0)
            json_object_del(ap->expiries, ns);
    }
    ap->expiry_due = due;
}
