/*
 * liba2store call arguments: the text parameters of one store function call
 * and the JSON the operations pass (consumers, events, causes, heads), and
 * the ids of a batch.
 */
#include "store_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ── parameters ──────────────────────────────────────────────────────── */

/* The oids of the parameters' types, built in (the same in every
 * PostgreSQL release). */
#define TEXT_OID 25
#define INT8_OID 20
#define JSONB_OID 3802

/* Whether p has room for one more parameter (a call written with too
 * many fails as out of memory would, and runs nothing). */
static bool param_room(a2__store_params *p)
{
    if (p->n < A2__STORE_MAX_PARAMS)
        return true;
    p->failed = true;
    return false;
}

void a2__store_param_text(a2__store_params *p, const char *v)
{
    if (!param_room(p))
        return;
    p->t[p->n] = TEXT_OID;
    p->v[p->n++] = v;
}

static void param_owned(a2__store_params *p, Oid type, char *t)
{
    if (!param_room(p)) {
        free(t);
        return;
    }
    p->t[p->n] = type;
    p->owned[p->n] = t;
    p->v[p->n++] = t;
}

void a2__store_param_int(a2__store_params *p, int64_t v)
{
    char *t = NULL;
    if (v != A2_STORE_NONE && asprintf(&t, "%" PRId64, v) < 0) {
        t = NULL;
        p->failed = true;
    }
    param_owned(p, INT8_OID, t);
}

void a2__store_param_json(a2__store_params *p, json_t *j)
{
    char *t = NULL;
    if (!j)
        p->failed = true;
    else if (!json_is_null(j) &&
             !(t = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY)))
        p->failed = true;
    json_decref(j);
    param_owned(p, JSONB_OID, t);
}

void a2__store_param_event_ref(a2__store_params *p, const char *session,
                               const char *consumer, int64_t index)
{
    a2__store_param_text(p, session);
    a2__store_param_text(p, consumer);
    a2__store_param_int(p, index);
}

int a2__store_run(a2_store *s, const char *sql, a2__store_params *p,
                  bool rows, json_t **out)
{
    *out = NULL;
    int rc = p->failed ? a2__store_nomem(s)
                       : a2__store_call(s, sql, p->n, p->t, p->v, rows, out);
    for (int i = 0; i < p->n; i++)
        free(p->owned[i]);
    return rc;
}

int a2__store_run_on_event(a2_store *s, const char *sql, const char *session,
                           const char *consumer, int64_t index,
                           const char *text, const a2_consumer *consumers,
                           size_t nconsumers, json_t **out)
{
    *out = NULL;
    int rc = a2__store_check_consumers(s, consumers, nconsumers);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_event_ref(&p, session, consumer, index);
    a2__store_param_text(&p, text);
    a2__store_param_json(&p, a2__store_consumers_json(consumers, nconsumers));
    return a2__store_run(s, sql, &p, false, out);
}

int a2__store_param_session(a2_store *s, a2__store_params *p,
                            const char *session)
{
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        a2__store_param_text(p, session);
    return rc;
}

/* ── JSON ────────────────────────────────────────────────────────────── */

json_t *a2__store_str_or_null(const char *v)
{
    return v ? json_string(v) : json_null();
}

json_t *a2__store_push(json_t *a, json_t *v)
{
    if (json_array_append_new(a, v) != 0) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* o with member key set to v (stolen); NULL (o released) when that fails. */
static json_t *with(json_t *o, const char *key, json_t *v)
{
    if (json_object_set_new(o, key, v) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *a2__store_head_json(const char *consumer, const char *lane,
                            int64_t index)
{
    return json_pack("{s:s, s:o, s:I}", "consumer", consumer, "lane",
                     a2__store_str_or_null(lane), "index", (json_int_t)index);
}

json_t *a2__store_cause_json(const a2_cause *c)
{
    return json_pack("{s:s, s:o, s:I, s:i}", "consumer", c->consumer, "lane",
                     a2__store_str_or_null(c->lane), "index",
                     (json_int_t)c->index, "attempt", c->attempt);
}

a2_cause a2__store_attempt_cause(const a2_attempt_ref *a)
{
    return (a2_cause){a->consumer, a->lane, a->index, a->attempt};
}

json_t *a2__store_strings_json(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        a = a2__store_push(a, json_string(v[i]));
    return a;
}

json_t *a2__store_types_json(const a2_log_spec *log)
{
    return log->types ? a2__store_strings_json(log->types, log->ntypes)
                      : json_null();
}

json_t *a2__store_consumers_json(const a2_consumer *cons, size_t n)
{
    if (!cons)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const a2_log_spec *log = cons[i].log;
        json_t *c = log ? json_pack("{s:s, s:{s:s, s:o, s:b}}", "name",
                                    cons[i].name, "log", "lane", log->lane,
                                    "types", a2__store_types_json(log),
                                    "backfill", log->backfill)
                        : json_pack("{s:s}", "name", cons[i].name);
        a = a2__store_push(a, c);
    }
    return a;
}

static json_t *targets_json(const a2_append_event *e)
{
    json_t *targets = json_array();
    for (size_t t = 0; targets && t < e->ntargets; t++) {
        const a2_target *tg = &e->targets[t];
        json_t *o = json_pack("{s:s, s:o}", "consumer", tg->consumer, "lane",
                              a2__store_str_or_null(tg->lane));
        if (o && tg->not_before)
            o = with(o, "not_before", json_integer(tg->not_before));
        targets = a2__store_push(targets, o);
    }
    return targets;
}

json_t *a2__store_events_json(const a2_append_event *ev, size_t n,
                              char **ids, bool causes)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *e = json_pack("{s:s, s:s, s:o}", "type", ev[i].type, "id",
                              ids[i], "targets", targets_json(&ev[i]));
        if (e && ev[i].payload)
            e = with(e, "payload_text", json_string(ev[i].payload));
        if (e && ev[i].not_before)
            e = with(e, "not_before", json_integer(ev[i].not_before));
        if (e && causes && ev[i].cause)
            e = with(e, "cause", a2__store_cause_json(ev[i].cause));
        a = a2__store_push(a, e);
    }
    return a;
}

/* ── ids ─────────────────────────────────────────────────────────────── */

char **a2__store_batch_ids(a2_store *s, const a2_append_event *ev, size_t n,
                           int *rc)
{
    char **ids = calloc(n ? n : 1, sizeof *ids);
    if (!ids) {
        *rc = a2__store_nomem(s);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (ev[i].id) {
            ids[i] = strdup(ev[i].id);
        } else {
            char buf[A2__STORE_ID_BUF];
            *rc = a2__store_new_id(s, buf, sizeof buf);
            if (*rc == 0 &&
                (a2__store_check_name(s, "a generated id", buf) != 0))
                *rc = A2_ESTORE_FAILED;
            if (*rc != 0)
                goto fail;
            ids[i] = strdup(buf);
        }
        if (!ids[i]) {
            *rc = a2__store_nomem(s);
            goto fail;
        }
    }
    *rc = 0;
    return ids;
fail:
    a2__store_free_ids(ids, n);
    return NULL;
}

void a2__store_free_ids(char **ids, size_t n)
{
    if (!ids)
        return;
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}
