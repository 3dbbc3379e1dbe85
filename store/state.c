/*
 * liba2store: reducer snapshots (a2/state.h), one call each of
 * a2_write_state and a2_read_state (sql/src/80-state.sql).
 */
#include "a2/state.h"
#include "store_int.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SQL_WRITE_STATE                                                        \
    "select a2_write_state(session => $1, reducer => $2, writes => $3::jsonb, " \
    "now_ms => $4::bigint)"
#define SQL_READ_STATE                                                         \
    "select * from a2_read_state(session => $1, reducer => $2, at_index => "  \
    "$3::bigint)"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int check_writes(a2_store *s, const a2_state_write *w, size_t n)
{
    if (n == 0 || !w)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "write_state needs at least one write");
    if (n > A2_STATE_MAX_WRITES)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d writes in one call",
                              A2_STATE_MAX_WRITES);
    size_t pins = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = a2__store_check_not_negative(s, "a write's up_to_index",
                                              w[i].up_to_index);
        if (rc)
            return rc;
        if (!w[i].state)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "a write's state must not be NULL");
        if (strlen(w[i].state) > A2_STORE_MAX_PAYLOAD)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "a state is longer than %d bytes",
                                  A2_STORE_MAX_PAYLOAD);
        rc = a2__store_check_counted(s, "pins", w[i].pins, w[i].npins);
        if (rc)
            return rc;
        pins += w[i].npins;
        if (pins > A2_STATE_MAX_PINS)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "more than %d pins in one call",
                                  A2_STATE_MAX_PINS);
        for (size_t k = 0; k < w[i].npins; k++) {
            const a2_state_pin *p = &w[i].pins[k];
            rc = a2__store_check_consumer_lane(s, "a pin's consumer",
                                               "a pin's lane", p->consumer,
                                               p->lane);
            if (rc)
                return rc;
            if (p->index < 1)
                return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                      "a pin's index must be at least 1");
        }
    }
    int64_t *idx = malloc(n * sizeof *idx);
    if (!idx)
        return a2__store_nomem(s);
    for (size_t i = 0; i < n; i++)
        idx[i] = w[i].up_to_index;
    qsort(idx, n, sizeof *idx, cmp_i64);
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (idx[i] == idx[i - 1])
            rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                "two writes with up_to_index %" PRId64, idx[i]);
    free(idx);
    return rc;
}

/* The writes as a2_write_state takes them: [{"up_to_index", "state_text",
 * "pins": [{"consumer", "lane", "index"}]}]. rc set on failure. */
static json_t *writes_json(a2_store *s, const a2_state_write *w, size_t n,
                           int *rc)
{
    json_t *writes = json_array();
    for (size_t i = 0; writes && i < n; i++) {
        json_error_t jerr;
        json_t *probe = json_loads(
                w[i].state, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &jerr);
        if (!probe) {
            *rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                 "a write's state is not JSON: %s", jerr.text);
            json_decref(writes);
            return NULL;
        }
        json_decref(probe);
        json_t *pins = json_array();
        for (size_t k = 0; pins && k < w[i].npins; k++) {
            const a2_state_pin *pin = &w[i].pins[k];
            pins = a2__store_push(pins, a2__store_head_json(pin->consumer,
                                                            pin->lane,
                                                            pin->index));
        }
        writes = a2__store_push(
                writes, json_pack("{s:I, s:s, s:o}", "up_to_index",
                                  (json_int_t)w[i].up_to_index, "state_text",
                                  w[i].state, "pins", pins));
    }
    if (!writes)
        *rc = a2__store_nomem(s);
    return writes;
}

int a2_store_write_state(a2_store *s, const char *session, const char *reducer,
                         const a2_state_write *writes, size_t nwrites,
                         a2_state_write_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->up_to_index = A2_STORE_NONE;
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_name(s, "reducer", reducer);
    if (rc == 0)
        rc = check_writes(s, writes, nwrites);
    if (rc)
        return rc;
    json_t *w = writes_json(s, writes, nwrites, &rc);
    if (!w)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_text(&p, reducer);
    a2__store_param_json(&p, w);
    a2__store_param_int(&p, a2__store_now(s));
    json_t *r = NULL;
    rc = a2__store_run(s, SQL_WRITE_STATE, &p, false, &r);
    if (rc == 0) {
        int64_t acc = a2__row_int(r, "pins_accepted");
        int64_t ref = a2__row_int(r, "pins_refused");
        out->up_to_index = a2__row_int(r, "up_to_index");
        out->replaced_latest = a2__row_bool(r, "replaced_latest");
        out->pins_accepted = acc > 0 ? (size_t)acc : 0;
        out->pins_refused = ref > 0 ? (size_t)ref : 0;
    }
    json_decref(r);
    return rc;
}

void a2_state_free(a2_state *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

int a2_store_read_state(a2_store *s, const char *session, const char *reducer,
                        int64_t at_index, a2_state *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->up_to_index = A2_STORE_NONE;
    out->written_at = A2_STORE_NONE;
    int rc = a2__store_check_name(s, "session", session);
    if (rc == 0)
        rc = a2__store_check_name(s, "reducer", reducer);
    if (rc == 0 && at_index != A2_STORE_NONE)
        rc = a2__store_check_not_negative(s, "at_index", at_index);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, session);
    a2__store_param_text(&p, reducer);
    a2__store_param_int(&p, at_index);
    json_t *rows = NULL;
    rc = a2__store_run(s, SQL_READ_STATE, &p, true, &rows);
    if (rc == 0 && json_array_size(rows) > 0) {
        json_t *r = json_array_get(rows, 0);
        out->arena_ = a2__arena_new();
        if (!out->arena_) {
            rc = a2__store_nomem(s);
        } else {
            out->found = true;
            out->up_to_index = a2__row_int(r, "up_to_index");
            out->written_at = a2__row_int(r, "written_at");
            out->state = a2__row_str(out->arena_, r, "state");
            if (a2__arena_failed(out->arena_) || !out->state)
                rc = a2__store_nomem(s);
        }
    }
    if (rc)
        a2_state_free(out);
    json_decref(rows);
    return rc;
}
