/*
 * liba2store dead letters: a session's (a2_dead_letters), those across
 * sessions that match a filter (a2_find_dead_letters,
 * a2_count_dead_letters), and their redrive, one (a2_redrive) or all that
 * match (a2_redrive_matching), one call each.
 */
#include "store_int.h"

#include "../common/utf8.h"

#include <string.h>

#define MAX_FIND_LIMIT    1000
#define MAX_REDRIVE_LIMIT 10000
#define MAX_FILTER_TEXT   1024

#define SQL_DEAD_LETTERS "select * from a2_dead_letters(session => $1)"
#define SQL_FIND_DEAD_LETTERS                                                  \
    "select * from a2_find_dead_letters(consumer_name => $1, event_type => " \
    "$2, error_text => $3, failed_after => $4::bigint, failed_before => "    \
    "$5::bigint, after => $6::jsonb, max_rows => $7::integer)"
#define SQL_COUNT_DEAD_LETTERS                                                 \
    "select a2_count_dead_letters(consumer_name => $1, event_type => $2, "   \
    "error_text => $3, failed_after => $4::bigint, failed_before => "        \
    "$5::bigint)"
#define SQL_REDRIVE                                                            \
    "select a2_redrive(session => $1, consumer => $2, index => $3::bigint, " \
    "action => $4, consumers => $5::jsonb)"
#define SQL_REDRIVE_MATCHING                                                   \
    "select a2_redrive_matching(action => $1, consumer_name => $2, "         \
    "event_type => $3, error_text => $4, failed_after => $5::bigint, "       \
    "failed_before => $6::bigint, max_rows => $7::integer)"

int a2_store_dead_letters(a2_store *s, const char *session, a2_heads *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc;
    out->items = a2__store_session_rows(s, SQL_DEAD_LETTERS, session,
                                        sizeof(a2_head), a2__store_head_row,
                                        &out->arena_, &out->count, &rc);
    return rc;
}

/* ── across sessions ─────────────────────────────────────────────────── */

static int check_filter(a2_store *s, const a2_dead_letter_filter *f)
{
    if (!f)
        return 0;
    int rc = a2__store_check_opt_name(s, "consumer", f->consumer);
    if (rc == 0 && f->type &&
        (!f->type[0] || strlen(f->type) > MAX_FILTER_TEXT))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "type must be a name of 1 to 1024 bytes");
    if (rc == 0 && f->error && !a2__store_text_ok(f->error, MAX_FILTER_TEXT))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "error filter must be UTF-8 of at most 1024 bytes");
    if (rc == 0 && f->type && !a2__utf8_valid(f->type, strlen(f->type)))
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT, "type must be UTF-8");
    return rc;
}

/* The filter's five parameters, in the order of the calls above. */
static void param_filter(a2__store_params *p, const a2_dead_letter_filter *f)
{
    a2__store_param_text(p, f ? f->consumer : NULL);
    a2__store_param_text(p, f ? f->type : NULL);
    a2__store_param_text(p, f ? f->error : NULL);
    a2__store_param_int(p, f ? f->failed_after : A2_STORE_NONE);
    a2__store_param_int(p, f ? f->failed_before : A2_STORE_NONE);
}

static int check_key(a2_store *s, const a2_dead_letter_key *k)
{
    int rc = a2__store_check_name(s, "after's session", k->session_id);
    if (rc == 0)
        rc = a2__store_check_name(s, "after's consumer", k->consumer);
    if (rc == 0)
        rc = a2__store_check_name(s, "after's cursor key", k->cursor_key);
    return rc;
}

static json_t *key_json(const a2_dead_letter_key *k)
{
    return json_pack("{s:I, s:s, s:s, s:s, s:I}", "failed_at",
                     (json_int_t)k->failed_at, "session", k->session_id,
                     "consumer", k->consumer, "cursor_key", k->cursor_key,
                     "epoch", (json_int_t)k->epoch);
}

int a2_store_find_dead_letters(a2_store *s, const a2_dead_letter_filter *filter,
                               const a2_dead_letter_key *after, size_t limit,
                               a2_heads *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_filter(s, filter);
    if (rc == 0)
        rc = a2__store_check_limit(s, limit, MAX_FIND_LIMIT);
    if (rc == 0 && after)
        rc = check_key(s, after);
    if (rc)
        return rc;
    a2__store_params p = {0};
    param_filter(&p, filter);
    a2__store_param_json(&p, after ? key_json(after) : json_null());
    a2__store_param_int(&p, (int64_t)limit);
    out->items = a2__store_run_rows(s, SQL_FIND_DEAD_LETTERS, &p,
                                    sizeof(a2_head), a2__store_head_row, NULL,
                                    &out->arena_, &out->count, &rc);
    return rc;
}

int a2_store_count_dead_letters(a2_store *s,
                                const a2_dead_letter_filter *filter,
                                int64_t *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    *out = 0;
    int rc = check_filter(s, filter);
    if (rc)
        return rc;
    a2__store_params p = {0};
    param_filter(&p, filter);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_COUNT_DEAD_LETTERS, &p, false, &res);
    if (rc == 0) {
        if (json_is_integer(res))
            *out = (int64_t)json_integer_value(res);
        else
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "count of dead letters is not a number");
    }
    json_decref(res);
    return rc;
}

/* ── redrive ─────────────────────────────────────────────────────────── */

static int check_action(a2_store *s, int action)
{
    if (action != A2_REDRIVE_RETRY && action != A2_REDRIVE_SKIP)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "action must be retry or skip");
    return 0;
}

static const char *action_text(int action)
{
    return action == A2_REDRIVE_SKIP ? "skip" : "retry";
}

int a2_store_redrive(a2_store *s, const char *session, const char *consumer,
                     int64_t index, int action, const a2_consumer *consumers,
                     size_t nconsumers, a2_redrive_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_event_ref(s, session, consumer, index);
    if (rc == 0)
        rc = check_action(s, action);
    if (rc)
        return rc;
    json_t *res = NULL;
    rc = a2__store_run_on_event(s, SQL_REDRIVE, session, consumer, index,
                                action_text(action), consumers, nconsumers,
                                &res);
    if (rc == 0) {
        out->redriven = a2__row_bool(res, "redriven");
        out->has_pending = a2__row_bool(res, "has_pending");
    }
    json_decref(res);
    return rc;
}

int a2_store_redrive_matching(a2_store *s, const a2_dead_letter_filter *filter,
                              int action, size_t limit, a2_bulk_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_filter(s, filter);
    if (rc == 0)
        rc = check_action(s, action);
    if (rc == 0)
        rc = a2__store_check_limit(s, limit, MAX_REDRIVE_LIMIT);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, action_text(action));
    param_filter(&p, filter);
    a2__store_param_int(&p, (int64_t)limit);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_REDRIVE_MATCHING, &p, false, &res);
    if (rc == 0) {
        out->count = a2__row_int(res, "count");
        out->more = a2__row_bool(res, "more");
    }
    json_decref(res);
    return rc;
}
