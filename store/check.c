/*
 * liba2store input checks: the names, counts, limits, attempts, consumers
 * and events the operations take, each refused with A2_EINVALID_ARGUMENT
 * and a message before any I/O.
 */
#include "store_int.h"

#include "../common/utf8.h"

#include <stdlib.h>
#include <string.h>

bool a2__store_text_ok(const char *v, size_t max)
{
    return strlen(v) <= max && a2__utf8_valid(v, strlen(v));
}

static int invalid(a2_store *s, const char *what, const char *problem)
{
    return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s %s", what, problem);
}

int a2__store_check_name(a2_store *s, const char *what, const char *v)
{
    if (!v || !*v)
        return invalid(s, what, "must not be empty");
    if (strlen(v) > A2_STORE_MAX_NAME)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "%s is longer than %d bytes", what,
                              A2_STORE_MAX_NAME);
    if (!a2__utf8_valid(v, strlen(v)))
        return invalid(s, what, "is not valid UTF-8");
    return 0;
}

int a2__store_check_opt_name(a2_store *s, const char *what, const char *v)
{
    return v ? a2__store_check_name(s, what, v) : 0;
}

int a2__store_check_names(a2_store *s, const char *what,
                          const char *const *v, size_t n)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && v && i < n; i++)
        rc = a2__store_check_name(s, what, v[i]);
    return rc;
}

int a2__store_check_consumer_lane(a2_store *s, const char *cwhat,
                                  const char *lwhat, const char *consumer,
                                  const char *lane)
{
    int rc = a2__store_check_name(s, cwhat, consumer);
    return rc ? rc : a2__store_check_opt_name(s, lwhat, lane);
}

int a2__store_check_counted(a2_store *s, const char *what, const void *p,
                            size_t n)
{
    return !p && n > 0 ? invalid(s, what, "must not be NULL when counted")
                       : 0;
}

int a2__store_check_not_negative(a2_store *s, const char *what, int64_t v)
{
    return v < 0 ? invalid(s, what, "must not be negative") : 0;
}

int a2__store_check_limit(a2_store *s, size_t limit, int max)
{
    if (limit < 1 || limit > (size_t)max)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "limit must be between 1 and %d", max);
    return 0;
}

int a2__store_check_lease(a2_store *s, const char *what, int64_t ttl_ms,
                          int64_t expires_at_ms)
{
    if (ttl_ms < 0 || expires_at_ms < 0 || (expires_at_ms == 0 && ttl_ms <= 0))
        return invalid(s, what, "needs a positive ttl or an expiry");
    return 0;
}

int a2__store_check_event_ref(a2_store *s, const char *session,
                              const char *consumer, int64_t index)
{
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_name(s, "consumer", consumer);
    if (rc == 0 && index < 1)
        rc = invalid(s, "index", "must be at least 1");
    return rc;
}

int a2__store_check_cause(a2_store *s, const char *what, const a2_cause *c)
{
    int rc = a2__store_check_consumer_lane(s, "a cause's consumer",
                                           "a cause's lane", c->consumer,
                                           c->lane);
    if (rc == 0 && (c->index < 1 || c->attempt < 1))
        rc = invalid(s, what, "needs an index and an attempt of at least 1");
    return rc;
}

int a2__store_check_attempt(a2_store *s, const a2_attempt_ref *a)
{
    if (!a)
        return invalid(s, "attempt", "must not be NULL");
    int rc = a2__store_check_consumer_lane(s, "consumer", "lane", a->consumer,
                                           a->lane);
    if (rc == 0 && (a->index < 1 || a->attempt < 1))
        rc = invalid(s, "index and attempt", "must be at least 1");
    return rc;
}

int a2__store_check_consumers(a2_store *s, const a2_consumer *cons, size_t n)
{
    int rc = a2__store_check_counted(s, "consumers", cons, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = a2__store_check_name(s, "a consumer's name", cons[i].name);
        const a2_log_spec *log = cons[i].log;
        if (rc || !log)
            continue;
        rc = a2__store_check_name(s, "a log consumer's lane", log->lane);
        if (rc == 0)
            rc = a2__store_check_counted(s, "log types", log->types,
                                         log->ntypes);
        if (rc == 0)
            rc = a2__store_check_names(s, "a log type", log->types,
                                       log->ntypes);
    }
    return rc;
}

/* An event's payload: at most A2_STORE_MAX_PAYLOAD bytes of JSON (i: its
 * place in the batch, from 1). */
static int check_payload(a2_store *s, const char *payload, size_t i)
{
    if (strlen(payload) > A2_STORE_MAX_PAYLOAD)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "payload of event %zu is too large", i);
    json_error_t jerr;
    json_t *v = json_loads(payload, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL,
                           &jerr);
    if (!v)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "payload of event %zu is not valid JSON: %s", i,
                              jerr.text);
    json_decref(v);
    return 0;
}

static int check_targets(a2_store *s, const a2_append_event *e)
{
    int rc = a2__store_check_counted(s, "targets", e->targets, e->ntargets);
    if (rc)
        return rc;
    if (e->ntargets > A2_STORE_MAX_TARGETS)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d targets on one event",
                              A2_STORE_MAX_TARGETS);
    rc = a2__store_check_not_negative(s, "not_before", e->not_before);
    for (size_t t = 0; rc == 0 && t < e->ntargets; t++) {
        const a2_target *tg = &e->targets[t];
        rc = a2__store_check_not_negative(s, "a target's not_before",
                                          tg->not_before);
        if (rc == 0)
            rc = a2__store_check_consumer_lane(s, "a target's consumer",
                                               "a target's lane",
                                               tg->consumer, tg->lane);
    }
    return rc;
}

int a2__store_check_events(a2_store *s, const a2_append_event *ev, size_t n,
                           bool ids_required)
{
    int rc = a2__store_check_counted(s, "events", ev, n);
    if (rc)
        return rc;
    if (n > A2_STORE_MAX_EVENTS)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d events in one batch",
                              A2_STORE_MAX_EVENTS);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = a2__store_check_name(s, "an event's type", ev[i].type);
        if (rc == 0 && strcmp(ev[i].type, A2_STORE_CLEAR_TYPE) == 0)
            rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                "event type %s is reserved for clear markers",
                                A2_STORE_CLEAR_TYPE);
        if (rc == 0 && (ev[i].id || ids_required))
            rc = a2__store_check_name(s, "an event's id", ev[i].id);
        if (rc == 0 && ev[i].payload)
            rc = check_payload(s, ev[i].payload, i + 1);
        if (rc == 0 && ev[i].cause && !ids_required)
            rc = a2__store_check_cause(s, "a cause", ev[i].cause);
        if (rc == 0)
            rc = check_targets(s, &ev[i]);
    }
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *a2__store_first_repeat(const char **v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1], v[i]) == 0)
            return v[i];
    return NULL;
}

int a2__store_ids_repeat(const a2_append_event *ev, size_t n)
{
    const char **ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].id)
            ids[k++] = ev[i].id;
    int dup = a2__store_first_repeat(ids, k) != NULL;
    free(ids);
    return dup;
}
