/*
 * liba2store attempts: claiming a session's heads (a2_claim), extending
 * the claims (a2_renew), and settling an attempt by completing it
 * (a2_complete) or failing it (a2_fail), one call each, or several in one
 * a2_batch: the claims of several sessions (a2_store_claim_sessions), the
 * settlements of one session or of several (a2_store_settle,
 * a2_store_settle_sessions).
 */
#include "store_int.h"

#include <string.h>

/* Arguments in each function's order, every one given (store_int.h):
 *   a2_claim(session, holder, ttl_ms, expires_at, consumers, exclude,
 *            max_failures, through, now_ms, text_payloads, after_xid, wait_ms,
 *            wake_logs, lanes, log_from)
 *   a2_renew(session, holder, claims, ttl_ms, expires_at, now_ms)
 *   a2_complete(session, consumer, lane, index, attempt, events, consumers,
 *               now_ms, text_payloads)
 *   a2_fail(session, consumer, lane, index, attempt, error, max_failures,
 *           retry_after_ms, now_ms) */
#define SQL_CLAIM                                                              \
    "select a2_claim($1, $2, null, $3, $4, $5, $6::integer, $7, $8, true, "   \
    "$9, $10, $11::boolean, null, $12)"
#define SQL_RENEW "select a2_renew($1, $2, $3, null, $4, $5)"
#define SQL_COMPLETE                                                           \
    "select a2_complete($1, $2, $3, $4, $5::integer, $6, $7, $8, true)"
#define SQL_BATCH "select a2_batch($1)"
#define SQL_FAIL                                                               \
    "select a2_fail($1, $2, $3, $4, $5::integer, $6, $7::integer, $8, $9)"

void a2_claim_result_free(a2_claim_result *r)
{
    if (!r)
        return;
    a2_heads_free(&r->heads);
    a2_heads_free(&r->dead_lettered);
    memset(r, 0, sizeof *r);
}

void a2_renew_result_free(a2_renew_result *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

void a2_complete_result_free(a2_complete_result *r)
{
    if (!r)
        return;
    a2_events_free(&r->events);
    memset(r, 0, sizeof *r);
}

/* ── claim ───────────────────────────────────────────────────────────── */

static int check_claim(a2_store *s, const a2_claim_request *req)
{
    if (!req)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "claim request must not be NULL");
    int rc = a2__store_check_name(s, "holder", req->holder);
    if (rc == 0)
        rc = a2__store_check_lease(s, "a claim", req->ttl_ms,
                                   req->expires_at_ms);
    if (rc == 0 && req->max_failures < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "max failures must be at least 1 (0: no limit)");
    if (rc == 0)
        rc = a2__store_check_not_negative(s, "through", req->through);
    if (rc == 0)
        rc = a2__store_check_not_negative(s, "log_from", req->log_from);
    if (rc == 0)
        rc = a2__store_check_consumers(s, req->consumers, req->nconsumers);
    if (rc == 0)
        rc = a2__store_check_counted(s, "exclude", req->exclude, req->nexclude);
    for (size_t i = 0; rc == 0 && i < req->nexclude; i++)
        rc = a2__store_check_consumer_lane(
                s, "an excluded consumer", "an excluded lane",
                req->exclude[i].consumer, req->exclude[i].lane);
    return rc;
}

/* out from a2_claim's result. */
static int decode_claim(a2_store *s, const char *session, const json_t *res,
                        a2_claim_result *out)
{
    int rc = a2__store_decode_heads(s, json_object_get(res, "heads"), session,
                                    &out->heads);
    if (rc == 0)
        rc = a2__store_decode_heads(s, json_object_get(res, "dead_lettered"),
                                    session, &out->dead_lettered);
    if (rc)
        return rc;
    if (a2__store_outcome_is(res, "claimed")) {
        out->outcome = A2_CLAIM_CLAIMED;
        out->session_head = a2__row_int(res, "session_head");
        out->retry_at = A2_STORE_NONE;
    } else {
        out->outcome = a2__store_outcome_is(res, "busy") ? A2_CLAIM_BUSY
                                                         : A2_CLAIM_SETTLED;
        out->retry_at = a2__row_int(res, "retry_at");
        out->session_head = A2_STORE_NONE;
        int64_t w = a2__row_int(res, "waiting_for");
        out->waiting_for = w == A2_STORE_NONE ? 0 : (uint64_t)w;
    }
    return 0;
}

/* The heads req excludes, as a2_claim takes them (NULL: out of memory). */
static json_t *excluded_json(const a2_claim_request *req)
{
    json_t *excluded = json_array();
    for (size_t i = 0; excluded && i < req->nexclude; i++)
        excluded = a2__store_push(excluded,
                                  a2__store_head_json(req->exclude[i].consumer,
                                                      req->exclude[i].lane,
                                                      req->exclude[i].index));
    return excluded;
}

/* The lease a claim made now gives. */
static int64_t claim_expiry(const a2_claim_request *req, int64_t now)
{
    return req->expires_at_ms ? req->expires_at_ms : now + req->ttl_ms;
}

/* Whether req brings log cursors up to date before it claims. */
static bool wakes_logs(const a2_claim_request *req)
{
    for (size_t i = 0; req->wake_logs && i < req->nconsumers; i++)
        if (req->consumers[i].log)
            return true;
    return false;
}

/* The a2_batch operation claiming cs for req, made at now (NULL: out of
 * memory). */
static json_t *claim_op(const a2_claim_session *cs, const a2_claim_request *req,
                        int64_t now)
{
    json_t *o = json_pack(
            "{s:s, s:s, s:s, s:I, s:o, s:o, s:I, s:b, s:I}", "op", "claim",
            "session", cs->session, "holder", req->holder, "expires_at",
            (json_int_t)claim_expiry(req, now), "consumers",
            a2__store_consumers_json(req->consumers, req->nconsumers),
            "exclude", excluded_json(req), "now_ms", (json_int_t)now,
            "text_payloads", 1, "wait_ms",
            (json_int_t)(req->wait_ms > 0 ? req->wait_ms : 1000));
    if (o && req->max_failures &&
        json_object_set_new(o, "max_failures",
                            json_integer(req->max_failures)) != 0)
        goto nomem;
    if (o && req->through &&
        json_object_set_new(o, "through", json_integer(req->through)) != 0)
        goto nomem;
    if (o && cs->after_xid &&
        json_object_set_new(o, "after_xid",
                            json_integer((json_int_t)cs->after_xid)) != 0)
        goto nomem;
    if (o && wakes_logs(req) &&
        json_object_set_new(o, "wake_logs", json_true()) != 0)
        goto nomem;
    if (o && wakes_logs(req) && cs->log_from > 0 &&
        json_object_set_new(o, "log_from", json_integer(cs->log_from)) != 0)
        goto nomem;
    return o;
nomem:
    json_decref(o);
    return NULL;
}

/* The claim of one checked session: one call of a2_claim. */
static int claim_one(a2_store *s, const a2_claim_session *cs,
                     const a2_claim_request *req, a2_claim_result *out)
{
    int64_t now = a2__store_now(s);
    a2__store_params p = {0};
    a2__store_param_text(&p, cs->session);
    a2__store_param_text(&p, req->holder);
    a2__store_param_int(&p, claim_expiry(req, now));
    a2__store_param_json(
            &p, a2__store_consumers_json(req->consumers, req->nconsumers));
    a2__store_param_json(&p, excluded_json(req));
    a2__store_param_int(&p,
                        req->max_failures ? req->max_failures : A2_STORE_NONE);
    a2__store_param_int(&p, req->through ? req->through : A2_STORE_NONE);
    a2__store_param_int(&p, now);
    a2__store_param_int(&p, cs->after_xid ? (int64_t)cs->after_xid
                                          : A2_STORE_NONE);
    a2__store_param_int(&p, req->wait_ms > 0 ? req->wait_ms : 1000);
    a2__store_param_text(&p, wakes_logs(req) ? "true" : "false");
    a2__store_param_int(&p, wakes_logs(req) && cs->log_from > 0
                                    ? cs->log_from
                                    : A2_STORE_NONE);
    json_t *res = NULL;
    int rc = a2__store_run(s, SQL_CLAIM, &p, false, &res);
    if (rc == 0)
        rc = decode_claim(s, cs->session, res, out);
    if (rc)
        a2_claim_result_free(out);
    json_decref(res);
    return rc;
}

/* The claims of n checked sessions for req: one a2_claim, or several in
 * one a2_batch (each bringing the log cursors up to date first when req
 * asks for it). */
static int claim_sessions(a2_store *s, const a2_claim_session *sessions,
                          size_t n, const a2_claim_request *req,
                          a2_claim_result *out)
{
    memset(out, 0, n * sizeof *out);
    if (n == 1)
        return claim_one(s, &sessions[0], req, out);
    int64_t now = a2__store_now(s);
    json_t *ops = json_array();
    for (size_t i = 0; ops && i < n; i++)
        ops = a2__store_push(ops, claim_op(&sessions[i], req, now));
    if (!ops)
        return a2__store_nomem(s);
    a2__store_params p = {0};
    a2__store_param_json(&p, ops);
    json_t *res = NULL;
    int rc = a2__store_run(s, SQL_BATCH, &p, false, &res);
    if (rc == 0 && json_array_size(res) != n)
        rc = a2__store_fail(s, A2_ESTORE_FAILED,
                            "a2_batch returned %zu results for %zu claims",
                            json_array_size(res), n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = decode_claim(s, sessions[i].session, json_array_get(res, i),
                          &out[i]);
    if (rc)
        for (size_t i = 0; i < n; i++)
            a2_claim_result_free(&out[i]);
    else
        a2__store_ok(s);
    json_decref(res);
    return rc;
}

int a2_store_claim(a2_store *s, const char *session,
                   const a2_claim_request *req, a2_claim_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = check_claim(s, req);
    if (rc)
        return rc;
    a2_claim_session cs = {session, req->after_xid, req->log_from};
    return claim_one(s, &cs, req, out);
}

/* The sessions of a2_store_claim_sessions: 1..A2_STORE_MAX_SETTLE names,
 * none twice, no log_from negative. */
static int check_claim_sessions(a2_store *s, const a2_claim_session *cs,
                                size_t n)
{
    if (!cs || n < 1 || n > A2_STORE_MAX_SETTLE)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "a claim of sessions takes 1 to %d sessions, "
                              "not %zu",
                              A2_STORE_MAX_SETTLE, n);
    const char **names = malloc(n * sizeof *names);
    if (!names)
        return a2__store_nomem(s);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = a2__store_check_name(s, "session", cs[i].session);
        if (rc == 0)
            rc = a2__store_check_not_negative(s, "log_from", cs[i].log_from);
        names[i] = cs[i].session;
    }
    const char *twice = rc == 0 ? a2__store_first_repeat(names, n) : NULL;
    if (twice)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "session \"%s\" is listed twice", twice);
    free(names);
    return rc;
}

int a2_store_claim_sessions(a2_store *s, const a2_claim_session *sessions,
                            size_t n, const a2_claim_request *req,
                            a2_claim_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    int rc = check_claim_sessions(s, sessions, n);
    if (rc == 0)
        rc = check_claim(s, req);
    return rc ? rc : claim_sessions(s, sessions, n, req, out);
}

/* ── renew ───────────────────────────────────────────────────────────── */

/* A result's list of heads [{"consumer", "lane", "index"}] into refs (room
 * for all of them), *n their count. */
static void decode_refs(a2_store_arena *a, const json_t *list,
                        a2_head_ref *refs, size_t *n)
{
    size_t k;
    const json_t *r;
    json_array_foreach(list, k, r)
    {
        refs[*n].consumer = a2__row_str(a, r, "consumer");
        refs[*n].lane = a2__row_str(a, r, "lane");
        refs[*n].index = a2__row_int(r, "index");
        (*n)++;
    }
}

/* out from a2_renew's result. */
static int decode_renew(a2_store *s, const json_t *res, a2_renew_result *out)
{
    const json_t *renewed = json_object_get(res, "renewed");
    const json_t *superseded = json_object_get(res, "superseded");
    size_t ns = json_array_size(superseded);
    out->renewed = a2__store_result_init(
            s, &out->arena_, json_array_size(renewed), sizeof(a2_head_ref));
    if (out->renewed)
        out->superseded = a2__arena_alloc(out->arena_,
                                          (ns ? ns : 1) * sizeof(a2_head_ref));
    if (!out->renewed || !out->superseded)
        return a2__store_nomem(s);
    decode_refs(out->arena_, renewed, out->renewed, &out->nrenewed);
    decode_refs(out->arena_, superseded, out->superseded, &out->nsuperseded);
    return a2__arena_failed(out->arena_) ? a2__store_nomem(s) : 0;
}

int a2_store_renew(a2_store *s, const char *session, const char *holder,
                   const a2_attempt_ref *claims, size_t nclaims, int64_t ttl_ms,
                   int64_t expires_at_ms, a2_renew_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_name(s, "holder", holder);
    if (rc == 0)
        rc = a2__store_check_lease(s, "a renewal", ttl_ms, expires_at_ms);
    if (rc == 0)
        rc = a2__store_check_counted(s, "claims", claims, nclaims);
    for (size_t i = 0; rc == 0 && i < nclaims; i++)
        rc = a2__store_check_attempt(s, &claims[i]);
    if (rc)
        return rc;
    int64_t now = a2__store_now(s);
    json_t *list = json_array();
    for (size_t i = 0; list && i < nclaims; i++) {
        a2_cause c = a2__store_attempt_cause(&claims[i]);
        list = a2__store_push(list, a2__store_cause_json(&c));
    }
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_text(&p, holder);
    a2__store_param_json(&p, list);
    a2__store_param_int(&p, expires_at_ms ? expires_at_ms : now + ttl_ms);
    a2__store_param_int(&p, now);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_RENEW, &p, false, &res);
    if (rc == 0)
        rc = decode_renew(s, res, out);
    if (rc)
        a2_renew_result_free(out);
    json_decref(res);
    return rc;
}

/* ── complete, fail ──────────────────────────────────────────────────── */

/* The session and the attempt a completion or a failure settles. */
static int check_settle(a2_store *s, const char *session,
                        const a2_attempt_ref *attempt)
{
    int rc = a2__store_check_name(s, "session", session);
    return rc ? rc : a2__store_check_attempt(s, attempt);
}

/* a2_complete's result res for a completion with events (ids as sent):
 * COMPLETED with the events as stored in *stored, or SUPERSEDED. */
static int decode_complete(a2_store *s, const char *session, const json_t *res,
                           const a2_append_event *events, size_t nevents,
                           const a2_cause *cause, int64_t now, int *outcome,
                           a2_events *stored)
{
    if (!a2__store_outcome_is(res, "completed")) {
        *outcome = A2_ATTEMPT_SUPERSEDED;
        return 0;
    }
    *outcome = A2_ATTEMPT_COMPLETED;
    return a2__store_stored_events(s, session, res, events, nevents, cause, now,
                                   stored);
}

/* a2_fail's result res: its outcome and failure count. */
static void decode_fail(const json_t *res, int *outcome, int *failure_count)
{
    *outcome = a2__store_outcome_is(res, "failed") ? A2_ATTEMPT_FAILED
               : a2__store_outcome_is(res, "dead_lettered")
                       ? A2_ATTEMPT_DEAD_LETTERED
                       : A2_ATTEMPT_SUPERSEDED;
    *failure_count = a2__store_as_int(a2__row_int(res, "failure_count"));
}

/* The attempt's four parameters: consumer, lane, index, attempt. */
static void param_attempt(a2__store_params *p, const a2_attempt_ref *a)
{
    a2__store_param_text(p, a->consumer);
    a2__store_param_text(p, a->lane);
    a2__store_param_int(p, a->index);
    a2__store_param_int(p, a->attempt);
}

int a2_store_complete(a2_store *s, const char *session,
                      const a2_attempt_ref *attempt,
                      const a2_append_event *events, size_t nevents,
                      const a2_consumer *consumers, size_t nconsumers,
                      a2_complete_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_settle(s, session, attempt);
    if (rc == 0)
        rc = a2__store_check_events(s, events, nevents, true);
    if (rc == 0)
        rc = a2__store_check_consumers(s, consumers, nconsumers);
    if (rc)
        return rc;
    char **ids = a2__store_batch_ids(s, events, nevents, &rc);
    if (!ids)
        return rc;
    a2_cause cause = a2__store_attempt_cause(attempt);
    int64_t now = a2__store_now(s);
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    param_attempt(&p, attempt);
    a2__store_param_json(&p,
                         a2__store_events_json(events, nevents, ids, false));
    a2__store_param_json(&p, a2__store_consumers_json(consumers, nconsumers));
    a2__store_param_int(&p, now);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_COMPLETE, &p, false, &res);
    if (rc == 0)
        rc = decode_complete(s, session, res, events, nevents, &cause, now,
                             &out->outcome, &out->events);
    if (rc)
        a2_complete_result_free(out);
    else
        a2__store_ok(s);
    a2__store_free_ids(ids, nevents);
    json_decref(res);
    return rc;
}

static int check_fail(a2_store *s, const a2_fail_request *req)
{
    if (!req)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "fail request must not be NULL");
    if (req->max_failures < 1)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "max failures must be at least 1");
    int rc =
            a2__store_check_not_negative(s, "retry-after", req->retry_after_ms);
    if (rc == 0 && req->error &&
        !a2__store_text_ok(req->error, A2_STORE_MAX_ERROR_TEXT))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "error text is too long or not valid UTF-8");
    return rc;
}

int a2_store_fail(a2_store *s, const char *session,
                  const a2_attempt_ref *attempt, const a2_fail_request *req,
                  a2_fail_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_settle(s, session, attempt);
    if (rc == 0)
        rc = check_fail(s, req);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    param_attempt(&p, attempt);
    a2__store_param_text(&p, req->error ? req->error : "");
    a2__store_param_int(&p, req->max_failures);
    a2__store_param_int(&p, req->retry_after_ms);
    a2__store_param_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_FAIL, &p, false, &res);
    if (rc == 0)
        decode_fail(res, &out->outcome, &out->failure_count);
    json_decref(res);
    return rc;
}

/* ── settle: several completions and failures in one a2_batch ─────────── */

void a2_settle_results_free(a2_settle_result *results, size_t n)
{
    for (size_t i = 0; results && i < n; i++) {
        a2_events_free(&results[i].events);
        a2_claim_result_free(&results[i].next);
        memset(&results[i], 0, sizeof results[i]);
    }
}

/* The claim of the next head of settlement st's lane (NULL: out of
 * memory). */
static json_t *claim_next_op(const char *session, const a2_settlement *st,
                             int64_t now)
{
    a2_claim_session cs = {session, st->claim_next->after_xid,
                           st->claim_next->log_from};
    json_t *o = claim_op(&cs, st->claim_next, now);
    json_t *lane = json_pack("[{s:s, s:s}]", "consumer", st->attempt.consumer,
                             "lane", st->attempt.lane);
    if (!o || !lane || json_object_set_new(o, "lanes", lane) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The a2_batch operation of settlement st (ids: its events' ids). */
static json_t *settle_op(const char *session, const a2_settlement *st,
                         char **ids, const a2_consumer *consumers,
                         size_t nconsumers, int64_t now)
{
    const a2_attempt_ref *a = &st->attempt;
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:I, s:i, s:I}", "op",
                          st->fail ? "fail" : "complete", "session", session,
                          "consumer", a->consumer, "lane",
                          a2__store_str_or_null(a->lane), "index",
                          (json_int_t)a->index, "attempt", a->attempt, "now_ms",
                          (json_int_t)now);
    if (!o)
        return NULL;
    int bad;
    if (st->fail)
        bad = json_object_set_new(
                      o, "error",
                      json_string(st->fail->error ? st->fail->error : "")) ||
              json_object_set_new(o, "max_failures",
                                  json_integer(st->fail->max_failures)) ||
              json_object_set_new(o, "retry_after_ms",
                                  json_integer(st->fail->retry_after_ms));
    else
        bad = json_object_set_new(o, "events",
                                  a2__store_events_json(st->events, st->nevents,
                                                        ids, false)) ||
              json_object_set_new(
                      o, "consumers",
                      a2__store_consumers_json(consumers, nconsumers)) ||
              json_object_set_new(o, "text_payloads", json_true());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The session of settlement i: sessions[i], or session for all. */
static const char *session_of(const char *session, const char *const *sessions,
                              size_t i)
{
    return sessions ? sessions[i] : session;
}

static int check_settlements(a2_store *s, const char *session,
                             const char *const *sessions,
                             const a2_settlement *sts, size_t n,
                             const a2_consumer *consumers, size_t nconsumers)
{
    if (!sts || n < 1 || n > A2_STORE_MAX_SETTLE)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "a settle takes 1 to %d settlements, not %zu",
                              A2_STORE_MAX_SETTLE, n);
    int rc = sessions ? 0 : a2__store_check_name(s, "session", session);
    size_t nops = n;
    if (rc == 0)
        rc = a2__store_check_consumers(s, consumers, nconsumers);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (sessions)
            rc = a2__store_check_name(s, "session", sessions[i]);
        if (rc == 0)
            rc = a2__store_check_attempt(s, &sts[i].attempt);
        if (rc == 0 && sts[i].fail)
            rc = check_fail(s, sts[i].fail);
        else if (rc == 0)
            rc = a2__store_check_events(s, sts[i].events, sts[i].nevents, true);
        if (rc == 0 && sts[i].claim_next &&
            (sts[i].fail || !sts[i].attempt.lane))
            rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                "claim_next goes with the completion of a "
                                "lane's head");
        if (rc == 0 && sts[i].claim_next) {
            rc = check_claim(s, sts[i].claim_next);
            nops++;
        }
    }
    if (rc == 0 && nops > A2_STORE_MAX_SETTLE)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "a settle takes at most %d settlements and "
                            "claims, not %zu",
                            A2_STORE_MAX_SETTLE, nops);
    return rc;
}

/* a2_store_settle and a2_store_settle_sessions: settlement i is of
 * session_of(session, sessions, i). */
static int settle_batch(a2_store *s, const char *session,
                        const char *const *sessions, const a2_settlement *sts,
                        size_t n, const a2_consumer *consumers,
                        size_t nconsumers, a2_settle_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    int rc = check_settlements(s, session, sessions, sts, n, consumers,
                               nconsumers);
    if (rc)
        return rc;
    memset(out, 0, n * sizeof *out);
    char ***ids = calloc(n, sizeof *ids);
    if (!ids)
        return a2__store_nomem(s);
    int64_t now = a2__store_now(s);
    json_t *ops = json_array();
    size_t nops = n;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *si = session_of(session, sessions, i);
        if (!sts[i].fail && !(ids[i] = a2__store_batch_ids(
                                      s, sts[i].events, sts[i].nevents, &rc)))
            break;
        ops = ops ? a2__store_push(ops, settle_op(si, &sts[i], ids[i],
                                                  consumers, nconsumers, now))
                  : NULL;
        if (sts[i].claim_next) {
            ops = ops ? a2__store_push(ops, claim_next_op(si, &sts[i], now))
                      : NULL;
            nops++;
        }
    }
    json_t *res = NULL;
    if (rc == 0 && !ops)
        rc = a2__store_nomem(s);
    if (rc == 0) {
        a2__store_params p = {0};
        a2__store_param_json(&p, ops);
        ops = NULL;
        rc = a2__store_run(s, SQL_BATCH, &p, false, &res);
    }
    if (rc == 0 && json_array_size(res) != nops)
        rc = a2__store_fail(s, A2_ESTORE_FAILED,
                            "a2_batch returned %zu results for %zu "
                            "operations",
                            json_array_size(res), nops);
    for (size_t i = 0, j = 0; rc == 0 && i < n; i++) {
        const char *si = session_of(session, sessions, i);
        const json_t *r = json_array_get(res, j++);
        if (sts[i].fail) {
            decode_fail(r, &out[i].outcome, &out[i].failure_count);
        } else {
            a2_cause cause = a2__store_attempt_cause(&sts[i].attempt);
            rc = decode_complete(s, si, r, sts[i].events, sts[i].nevents,
                                 &cause, now, &out[i].outcome, &out[i].events);
        }
        if (rc == 0 && sts[i].claim_next)
            rc = decode_claim(s, si, json_array_get(res, j++), &out[i].next);
    }
    if (rc)
        a2_settle_results_free(out, n);
    else
        a2__store_ok(s);
    for (size_t i = 0; i < n; i++)
        if (ids[i])
            a2__store_free_ids(ids[i], sts[i].nevents);
    free(ids);
    json_decref(ops);
    json_decref(res);
    return rc;
}

int a2_store_settle(a2_store *s, const char *session, const a2_settlement *sts,
                    size_t n, const a2_consumer *consumers, size_t nconsumers,
                    a2_settle_result *out)
{
    return settle_batch(s, session, NULL, sts, n, consumers, nconsumers, out);
}

int a2_store_settle_sessions(a2_store *s, const char *const *sessions,
                             const a2_settlement *sts, size_t n,
                             const a2_consumer *consumers, size_t nconsumers,
                             a2_settle_result *out)
{
    if (s && out && !sessions)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "sessions must not be NULL");
    return settle_batch(s, NULL, sessions, sts, n, consumers, nconsumers, out);
}
