/*
 * liba2store session administration: clearing a session (a2_clear),
 * reclaiming what a clear left (a2_reclaim), the sessions with pending work
 * (a2_pending_sessions), cancelling a pending event (a2_cancel) and the
 * backlog per consumer (a2_backlog), one call each.
 */
#include "store_int.h"

#include <string.h>

#define MAX_PENDING_LIMIT 10000
#define MAX_REASON_TEXT   65536

#define SQL_CLEAR                                                              \
    "select a2_clear(session => $1, if_last => $2::bigint, cause => "        \
    "$3::jsonb, marker_id => $4, now_ms => $5::bigint)"
#define SQL_RECLAIM "select a2_reclaim(session => $1)"
#define SQL_PENDING_SESSIONS                                                   \
    "select session from a2_pending_sessions(consumers => $1::jsonb, after " \
    "=> $2, max_sessions => $3::integer, now_ms => $4::bigint)"
#define SQL_CANCEL                                                             \
    "select a2_cancel(session => $1, consumer => $2, index => $3::bigint, "  \
    "reason => $4, consumers => $5::jsonb)"
#define SQL_BACKLOG "select * from a2_backlog(consumers => $1::jsonb)"

int a2_store_clear(a2_store *s, const char *session, int64_t if_last_index,
                   const a2_cause *cause, a2_clear_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0 && if_last_index != A2_STORE_NONE)
        rc = a2__store_check_not_negative(s, "if-last index", if_last_index);
    if (rc == 0 && cause)
        rc = a2__store_check_cause(s, "a clear's cause", cause);
    if (rc)
        return rc;
    char marker_id[A2__STORE_ID_BUF];
    rc = a2__store_new_id(s, marker_id, sizeof marker_id);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_int(&p, if_last_index);
    a2__store_param_json(&p, cause ? a2__store_cause_json(cause) : json_null());
    a2__store_param_text(&p, marker_id);
    a2__store_param_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_CLEAR, &p, false, &res);
    if (rc == 0) {
        out->cleared = a2__row_bool(res, "cleared");
        out->index = a2__row_int(res, "index");
        out->clear_index = a2__row_int(res, "clear_index");
    }
    json_decref(res);
    return rc;
}

int a2_store_reclaim(a2_store *s, const char *session, a2_reclaim_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    a2__store_params p = {0};
    json_t *res = NULL;
    int rc = a2__store_param_session(s, &p, session);
    if (rc == 0)
        rc = a2__store_run(s, SQL_RECLAIM, &p, false, &res);
    if (rc == 0) {
        out->deleted = a2__row_int(res, "deleted");
        out->done = a2__row_bool(res, "done");
    }
    json_decref(res);
    return rc;
}

static void session_row(a2_store_arena *a, const json_t *row, const void *ctx,
                        void *item)
{
    (void)ctx;
    *(char **)item = (char *)a2__row_str(a, row, "session");
}

int a2_store_pending_sessions(a2_store *s, const char *const *consumers,
                              size_t nconsumers, const char *after,
                              size_t limit, a2_sessions *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (!consumers || nconsumers == 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "pending sessions needs at least one consumer");
    if (rc == 0)
        rc = a2__store_check_names(s, "a consumer", consumers, nconsumers);
    if (rc == 0)
        rc = a2__store_check_opt_name(s, "after", after);
    if (rc == 0)
        rc = a2__store_check_limit(s, limit, MAX_PENDING_LIMIT);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_json(&p, a2__store_strings_json(consumers, nconsumers));
    a2__store_param_text(&p, after);
    a2__store_param_int(&p, (int64_t)limit);
    a2__store_param_int(&p, a2__store_now(s));
    out->items = a2__store_run_rows(s, SQL_PENDING_SESSIONS, &p, sizeof(char *),
                                    session_row, NULL, &out->arena_,
                                    &out->count, &rc);
    return rc;
}

/* ── cancel ──────────────────────────────────────────────────────────── */

void a2_cancel_result_free(a2_cancel_result *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

static int decode_cancel(a2_store *s, const json_t *res, a2_cancel_result *out)
{
    out->outcome = !a2__row_text(res, "outcome") ? 0
                   : a2__store_outcome_is(res, "cancelled")
                           ? A2_CANCEL_CANCELLED
                   : a2__store_outcome_is(res, "running")
                           ? A2_CANCEL_RUNNING
                           : A2_CANCEL_NOT_PENDING;
    out->has_pending = a2__row_bool(res, "has_pending");
    out->expires_at = a2__row_int(res, "expires_at");
    out->arena_ = a2__arena_new();
    if (!out->arena_)
        return a2__store_nomem(s);
    out->holder = a2__row_str(out->arena_, res, "holder");
    if (a2__arena_failed(out->arena_))
        return a2__store_nomem(s);
    if (!out->outcome)
        return a2__store_fail(s, A2_ESTORE_FAILED,
                              "cancel returned no outcome");
    return 0;
}

int a2_store_cancel(a2_store *s, const char *session, const char *consumer,
                    int64_t index, const char *reason,
                    const a2_consumer *consumers, size_t nconsumers,
                    a2_cancel_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_event_ref(s, session, consumer, index);
    if (rc == 0 && reason && !a2__store_text_ok(reason, MAX_REASON_TEXT))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "reason must be UTF-8 of at most 64 KiB");
    if (rc)
        return rc;
    json_t *res = NULL;
    rc = a2__store_run_on_event(s, SQL_CANCEL, session, consumer, index, reason,
                                consumers, nconsumers, &res);
    if (rc == 0)
        rc = decode_cancel(s, res, out);
    if (rc)
        a2_cancel_result_free(out);
    json_decref(res);
    return rc;
}

/* ── backlog ─────────────────────────────────────────────────────────── */

void a2_backlog_free(a2_backlog *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

static void backlog_row(a2_store_arena *a, const json_t *row, const void *ctx,
                        void *item)
{
    (void)ctx;
    a2_backlog_row *b = item;
    b->consumer = a2__row_str(a, row, "consumer");
    b->pending = a2__row_int(row, "pending");
    b->running = a2__row_int(row, "running");
    b->dead_letters = a2__row_int(row, "dead_letters");
    b->oldest_pending_at = a2__row_int(row, "oldest_pending_at");
}

int a2_store_backlog(a2_store *s, const char *const *consumers,
                     size_t nconsumers, a2_backlog *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_names(s, "consumer", consumers, nconsumers);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_json(&p, consumers ? a2__store_strings_json(consumers,
                                                                nconsumers)
                                       : json_null());
    out->items = a2__store_run_rows(s, SQL_BACKLOG, &p, sizeof(a2_backlog_row),
                                    backlog_row, NULL, &out->arena_,
                                    &out->count, &rc);
    return rc;
}
