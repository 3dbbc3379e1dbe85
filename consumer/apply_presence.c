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

/* A patch of the transaction: a field written, not only its expiry. */
static int patches(const a2__apply_act *a)
{
    return a->kind == A2C_ACT_PRESENCE && a->presence.ns && !a->presence.kept;
}

void a2__apply_push_presence(a2__apply *ap)
{
    for (size_t i = 0; i < ap->nacts; i++) {
        a2__apply_act *a = &ap->acts[i];
        if (!patches(a))
            continue;
        json_t *fields = json_object();
        for (size_t j = i; j < ap->nacts; j++) {
            a2__apply_act *b = &ap->acts[j];
            if (!patches(b) || strcmp(a->presence.ns, b->presence.ns) != 0 ||
                strcmp(a->presence.participant, b->presence.participant) != 0)
                continue;
            json_t *v = NULL;
            if (b->presence.value)
                v = json_loads(b->presence.value, JSON_DECODE_ANY, NULL);
            json_object_set_new(fields, b->presence.field, v ? v : json_null());
            if (j != i) { /* in this patch: not one of its own */
                free(b->presence.ns);
                b->presence.ns = NULL;
            }
        }
        char *text = json_dumps(fields, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(fields);
        if (text && ap->sink.presence)
            ap->sink.presence(ap->sink.ctx, a->presence.ns,
                              a->presence.participant, text, ap->end);
        free(text);
        ap->stats.presence++;
    }
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
