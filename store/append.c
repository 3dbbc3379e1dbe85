/*
 * liba2store session logs: appending events (a2_append), reading them
 * (a2_read), a session's cursors (a2_cursors) and the wake-up of a log
 * cursor (a2_wake_log), one call each.
 */
#include "store_int.h"

#include <string.h>

/* Payloads travel as their JSON text (payload_text) and come back as text
 * (text_payloads), so numbers keep the caller's precision both ways.
 * Arguments in the function's order (session, events, consumers, origin,
 * now_ms, text_payloads), every one given: a call planned with names, or
 * with a default to fill in, costs more (store_int.h). */
#define SQL_APPEND "select a2_append($1, $2, $3, $4, $5, true)"
#define SQL_READ                                                               \
    "select * from a2_read(session => $1, after => $2::bigint, max_events "  \
    "=> $3::bigint, types => $4::jsonb)"
#define SQL_CURSORS "select * from a2_cursors(session => $1)"
#define SQL_WAKE_LOG                                                           \
    "select a2_wake_log(session => $1, consumer => $2, lane => $3, types => " \
    "$4::jsonb, backfill => $5::boolean, after_xid => $6::bigint)"

int a2_store_append(a2_store *s, const char *session,
                    const a2_append_event *events, size_t nevents,
                    const a2_append_options *opts, a2_events *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    a2_append_options none = {0};
    if (!opts)
        opts = &none;
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_events(s, events, nevents, false);
    if (rc == 0)
        rc = a2__store_check_consumers(s, opts->consumers, opts->nconsumers);
    if (rc == 0)
        rc = a2__store_check_not_negative(s, "origin index",
                                          opts->origin_index);
    if (rc)
        return rc;
    int dup = a2__store_ids_repeat(events, nevents);
    if (dup < 0)
        return a2__store_nomem(s);
    if (dup)
        return a2__store_fail(s, A2_EPARTIAL_DUPLICATE_BATCH,
                              "batch contains the same event id more than "
                              "once");
    char **ids = a2__store_batch_ids(s, events, nevents, &rc);
    if (!ids)
        return rc;
    int64_t now = a2__store_now(s);
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_json(&p, a2__store_events_json(events, nevents, ids, true));
    a2__store_param_json(&p, a2__store_consumers_json(opts->consumers,
                                                      opts->nconsumers));
    a2__store_param_int(&p, opts->origin_index > 0 ? opts->origin_index
                                                   : A2_STORE_NONE);
    a2__store_param_int(&p, now);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_APPEND, &p, false, &res);
    if (rc == 0)
        rc = a2__store_stored_events(s, session, res, events, nevents, NULL,
                                     now, out);
    if (rc == 0) {
        out->has_pending = a2__row_bool(res, "has_pending");
        a2__store_ok(s);
    } else {
        a2_events_free(out);
    }
    a2__store_free_ids(ids, nevents);
    json_decref(res);
    return rc;
}

int a2_store_read(a2_store *s, const char *session, const a2_read_options *opts,
                  a2_events *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    a2_read_options none = {0};
    if (!opts)
        opts = &none;
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_not_negative(s, "after", opts->after);
    if (rc == 0)
        rc = a2__store_check_counted(s, "types", opts->types, opts->ntypes);
    if (rc == 0)
        rc = a2__store_check_names(s, "a type", opts->types, opts->ntypes);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_int(&p, opts->after);
    a2__store_param_int(&p, opts->limit ? (int64_t)opts->limit
                                        : A2_STORE_NONE);
    a2__store_param_json(&p, opts->types ? a2__store_strings_json(opts->types,
                                                                  opts->ntypes)
                                         : json_null());
    out->items = a2__store_run_rows(s, SQL_READ, &p, sizeof(a2_event),
                                    a2__store_event_row, session, &out->arena_,
                                    &out->count, &rc);
    return rc;
}

int a2_store_cursors(a2_store *s, const char *session, a2_cursors *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc;
    out->items = a2__store_session_rows(s, SQL_CURSORS, session,
                                        sizeof(a2_cursor), a2__store_cursor_row,
                                        &out->arena_, &out->count, &rc);
    return rc;
}

int a2_store_wake_log(a2_store *s, const char *session,
                      const a2_consumer *consumer, uint64_t after_xid,
                      a2_cursors *cursor_out, int64_t *head_out)
{
    if (!s || !cursor_out)
        return A2_EINVALID_ARGUMENT;
    memset(cursor_out, 0, sizeof *cursor_out);
    if (head_out)
        *head_out = 0;
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0 && (!consumer || !consumer->log))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "wake_log needs a log consumer");
    if (rc == 0)
        rc = a2__store_check_consumers(s, consumer, 1);
    if (rc)
        return rc;
    const a2_log_spec *log = consumer->log;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_text(&p, consumer->name);
    a2__store_param_text(&p, log->lane);
    a2__store_param_json(&p, a2__store_types_json(log));
    a2__store_param_text(&p, log->backfill ? "true" : "false");
    a2__store_param_int(&p, after_xid ? (int64_t)after_xid : A2_STORE_NONE);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_WAKE_LOG, &p, false, &res);
    if (rc == 0) {
        cursor_out->items = a2__store_result_init(s, &cursor_out->arena_, 1,
                                                  sizeof(a2_cursor));
        rc = cursor_out->items ? 0 : A2_ESTORE_NOMEM;
    }
    if (rc == 0) {
        a2__store_decode_cursor(cursor_out->arena_,
                                json_object_get(res, "cursor"),
                                &cursor_out->items[0]);
        cursor_out->count = 1;
        int64_t head = a2__row_int(res, "head");
        if (head_out)
            *head_out = head == A2_STORE_NONE ? 0 : head;
        if (a2__arena_failed(cursor_out->arena_))
            rc = a2__store_nomem(s);
    }
    if (rc)
        a2_cursors_free(cursor_out);
    json_decref(res);
    return rc;
}
