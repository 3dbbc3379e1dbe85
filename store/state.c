/*
 * liba2store: reducer snapshots (a2/state.h): write_state with pins on live
 * heads, read_state of the latest or a pinned version.
 */
#include "a2/state.h"
#include "store_int.h"
#include "store_sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */

#define REDUCER P_TEXT("reducer")

/*
 * The live heads the pins name, read for share in primary-key order before
 * the session lock, as append's fence does with its causes: a completion
 * holds its cursor row while it waits for the session lock, so taking the
 * rows after the lock could deadlock with it. Nothing that runs under the
 * session lock waits for a live head's row it did not lock first.
 */
#define SQL_STATE_PIN_LOCK                                                  \
    "with req as (select distinct p.consumer, p.cursor_key, p.idx from "    \
    "jsonb_to_recordset($1->'pins') as p(consumer text, cursor_key text, "  \
    "idx bigint)), live as materialized (select 1 from a2_cursors cur "     \
    "where cur.session_id = " SESSION " and cur.failed_at is null and "     \
    "exists (select 1 from req where req.consumer = cur.consumer and "      \
    "req.cursor_key = cur.cursor_key and req.idx = cur.head) order by "     \
    "cur.cursor_key, cur.consumer, cur.epoch for share of cur) select "     \
    "jsonb_build_object('live', count(*)) from live"

/* A write below the clear marker aborts the call (read under the session
 * lock: every clear that committed before it is seen). */
#define SQL_STATE_CLEARED                                                   \
    "select jsonb_build_object('abort', 'cleared', 'clear_index', "         \
    "boundary.clear_index) from (select " CLEAR_INDEX " as clear_index) "   \
    "boundary where exists (select 1 from jsonb_array_elements($1->"        \
    "'writes') w where (w->>'i')::bigint < boundary.clear_index)"

/*
 * Pins on live heads (cursor rows read for share, in primary-key order),
 * history for the versions they keep, and the latest snapshot unless a
 * newer one is stored.
 */
#define SQL_STATE_WRITE                                                     \
    "with boundary as materialized (select " CLEAR_INDEX " as "             \
    "clear_index), req as materialized (select distinct p.consumer, "       \
    "p.cursor_key, p.idx, p.up_to from jsonb_to_recordset(case when "       \
    "jsonb_typeof($1->'pins') = 'array' then $1->'pins' else '[]'::jsonb "  \
    "end) as p(consumer text, cursor_key text, idx bigint, up_to bigint)), "\
    "live as materialized (select cur.consumer, cur.cursor_key, cur.head "  \
    "from a2_cursors cur, boundary where cur.session_id = " SESSION " and " \
    "cur.head > boundary.clear_index and cur.failed_at is null and exists "\
    "(select 1 from req where req.consumer = cur.consumer and "             \
    "req.cursor_key = cur.cursor_key and req.idx = cur.head) order by "     \
    "cur.cursor_key, cur.consumer, cur.epoch for share of cur), accepted "  \
    "as materialized (select req.* from req where exists (select 1 from "   \
    "live where live.consumer = req.consumer and live.cursor_key = "        \
    "req.cursor_key and live.head = req.idx)), writes as materialized "     \
    "(select (w->>'i')::bigint as i, coalesce(w->'s', 'null'::jsonb) as s " \
    "from jsonb_array_elements($1->'writes') w), pinned as (insert into "   \
    "a2_snapshot_pins (session_id, event_index, consumer, cursor_key, "     \
    "reducer_name, up_to_index) select " SESSION ", accepted.idx, "         \
    "accepted.consumer, accepted.cursor_key, " REDUCER ", accepted.up_to "  \
    "from accepted on conflict do nothing returning 1), kept as (insert "   \
    "into a2_snapshot_history (session_id, reducer_name, up_to_index, "     \
    "state, written_at) select " SESSION ", " REDUCER ", writes.i, "        \
    "writes.s, " P_BIGINT("now") " from writes where exists (select 1 "     \
    "from accepted where accepted.up_to = writes.i) on conflict "           \
    "(session_id, reducer_name, up_to_index) do update set state = "        \
    "excluded.state, written_at = excluded.written_at returning 1), "       \
    "latest as (insert into a2_snapshots (session_id, reducer_name, "       \
    "up_to_index, state, written_at) select " SESSION ", " REDUCER ", "     \
    "newest.i, newest.s, " P_BIGINT("now") " from (select * from writes "   \
    "order by writes.i desc limit 1) newest on conflict (session_id, "      \
    "reducer_name) do update set up_to_index = excluded.up_to_index, "      \
    "state = excluded.state, written_at = excluded.written_at where "       \
    "a2_snapshots.up_to_index <= excluded.up_to_index returning "           \
    "up_to_index) select jsonb_build_object('requested', (select count(*) " \
    "from req), 'accepted', (select count(*) from accepted), 'replaced', "  \
    "exists (select 1 from latest), 'up_to_index', coalesce((select "       \
    "up_to_index from latest), (select s.up_to_index from a2_snapshots s "  \
    "where s.session_id = " SESSION " and s.reducer_name = " REDUCER ")), " \
    "'kept', (select count(*) from kept), 'pinned', (select count(*) from " \
    "pinned))"

/* The latest snapshot, or the newest version at or below "at". */
#define SQL_STATE_READ                                                      \
    "select jsonb_build_object('up_to_index', v.up_to_index, 'state', "     \
    "v.state::text, 'written_at', v.written_at) from (select "              \
    "s.up_to_index, s.state, s.written_at from a2_snapshots s where "       \
    "s.session_id = " SESSION " and s.reducer_name = " REDUCER " and (("    \
    "$1->>'at') is null or s.up_to_index <= " P_BIGINT("at") ") union all " \
    "select h.up_to_index, h.state, h.written_at from a2_snapshot_history " \
    "h where h.session_id = " SESSION " and h.reducer_name = " REDUCER      \
    " and ($1->>'at') is not null and h.up_to_index <= " P_BIGINT("at")     \
    ") v where v.up_to_index >= " CLEAR_INDEX " order by v.up_to_index "    \
    "desc limit 1"

/* clang-format on */

static int check_name(a2_store *s, const char *what, const char *v)
{
    if (!v || !*v)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s must not be empty",
                              what);
    if (strlen(v) > A2_STORE_MAX_NAME)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "%s is longer than %d bytes", what,
                              A2_STORE_MAX_NAME);
    json_t *probe = json_string(v); /* NULL when not UTF-8 */
    if (!probe)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s is not valid UTF-8",
                              what);
    json_decref(probe);
    return 0;
}

static bool set(json_t *o, const char *k, json_t *v)
{
    return v && json_object_set_new(o, k, v) == 0;
}

static int nomem(a2_store *s)
{
    return a2__store_fail(s, A2_ESTORE_NOMEM, "out of memory");
}

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
        if (w[i].up_to_index < 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "a write's up_to_index must not be negative");
        if (!w[i].state)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "a write's state must not be NULL");
        if (strlen(w[i].state) > A2_STORE_MAX_PAYLOAD)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "a state is longer than %d bytes",
                                  A2_STORE_MAX_PAYLOAD);
        if (!w[i].pins && w[i].npins > 0)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "pins must not be NULL when counted");
        pins += w[i].npins;
        if (pins > A2_STATE_MAX_PINS)
            return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                  "more than %d pins in one call",
                                  A2_STATE_MAX_PINS);
        for (size_t k = 0; k < w[i].npins; k++) {
            const a2_state_pin *p = &w[i].pins[k];
            int rc = check_name(s, "a pin's consumer", p->consumer);
            if (rc == 0 && p->lane)
                rc = check_name(s, "a pin's lane", p->lane);
            if (rc)
                return rc;
            if (p->index < 1)
                return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                      "a pin's index must be at least 1");
        }
    }
    int64_t *idx = malloc(n * sizeof *idx);
    if (!idx)
        return nomem(s);
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

static json_t *pin_key(const a2_state_pin *p)
{
    if (p->lane)
        return json_sprintf("lane:%s", p->lane);
    return json_sprintf("#%" PRId64, p->index);
}

/* The params of a write: "writes" [{i, s}] and "pins" [{consumer,
 * cursor_key, idx, up_to}]. rc set on failure. */
static json_t *write_params(a2_store *s, const char *session,
                            const char *reducer, const a2_state_write *w,
                            size_t n, int *rc)
{
    json_t *p = json_object(), *writes = json_array(), *pins = json_array();
    if (!p || !writes || !pins)
        goto nomem;
    if (!set(p, "session", json_string(session)) ||
        !set(p, "reducer", json_string(reducer)) ||
        !set(p, "now", json_integer(a2__store_now(s))))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        json_error_t jerr;
        json_t *state = json_loads(w[i].state, JSON_DECODE_ANY, &jerr);
        if (!state) {
            *rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                 "a write's state is not JSON: %s", jerr.text);
            goto fail;
        }
        json_t *o = json_object();
        if (!o || json_object_set_new(o, "s", state) != 0) {
            if (!o)
                json_decref(state);
            json_decref(o);
            goto nomem;
        }
        if (!set(o, "i", json_integer(w[i].up_to_index))) {
            json_decref(o);
            goto nomem;
        }
        if (json_array_append_new(writes, o) != 0)
            goto nomem; /* the append released o */
        for (size_t k = 0; k < w[i].npins; k++) {
            const a2_state_pin *pin = &w[i].pins[k];
            json_t *q = json_object();
            if (!q || !set(q, "consumer", json_string(pin->consumer)) ||
                !set(q, "cursor_key", pin_key(pin)) ||
                !set(q, "idx", json_integer(pin->index)) ||
                !set(q, "up_to", json_integer(w[i].up_to_index))) {
                json_decref(q);
                goto nomem;
            }
            if (json_array_append_new(pins, q) != 0)
                goto nomem; /* the append released q */
        }
    }
    if (json_object_set(p, "writes", writes) != 0 ||
        json_object_set(p, "pins", pins) != 0)
        goto nomem;
    json_decref(writes);
    json_decref(pins);
    return p;
nomem:
    *rc = nomem(s);
fail:
    json_decref(writes);
    json_decref(pins);
    json_decref(p);
    return NULL;
}

int a2_store_write_state(a2_store *s, const char *session, const char *reducer,
                         const a2_state_write *writes, size_t nwrites,
                         a2_state_write_result *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->up_to_index = A2_STORE_NONE;
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_name(s, "reducer", reducer);
    if (rc == 0)
        rc = check_writes(s, writes, nwrites);
    if (rc)
        return rc;
    json_t *p = write_params(s, session, reducer, writes, nwrites, &rc);
    if (!p)
        return rc;
    bool pinned = false;
    for (size_t i = 0; i < nwrites; i++)
        pinned = pinned || writes[i].npins > 0;
    /* Like every other write: the session lock, then the clear check. */
    const char *st[] = {pinned ? SQL_STATE_PIN_LOCK : NULL, SQL_LOCK_SESSION,
                        SQL_STATE_CLEARED, SQL_STATE_WRITE};
    json_t *rows = NULL, *abort_row = NULL;
    rc = a2__store_batch(s, st, sizeof st / sizeof *st, p, &rows, &abort_row);
    if (rc == A2__ABORTED) {
        rc = a2__store_fail(
                s, A2_ESESSION_CLEARED,
                "a write lies below the session's clear marker %" PRId64,
                (int64_t)json_integer_value(
                        json_object_get(abort_row, "clear_index")));
        json_decref(abort_row);
    }
    if (rc == 0) {
        json_t *r = json_array_get(rows, json_array_size(rows) - 1);
        if (!r || !json_object_get(r, "requested")) {
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "write_state returned no result row");
        } else {
            int64_t req = a2__row_int(r, "requested");
            int64_t acc = a2__row_int(r, "accepted");
            out->up_to_index = a2__row_int(r, "up_to_index");
            out->replaced_latest = a2__row_bool(r, "replaced");
            out->pins_accepted = acc > 0 ? (size_t)acc : 0;
            out->pins_refused = req > acc ? (size_t)(req - acc) : 0;
        }
    }
    json_decref(rows);
    json_decref(p);
    return rc;
}

void a2_state_free(a2_state *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

int a2_store_read_state(a2_store *s, const char *session, const char *reducer,
                        int64_t at_index, a2_state *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->up_to_index = A2_STORE_NONE;
    out->written_at = A2_STORE_NONE;
    int rc = check_name(s, "session", session);
    if (rc == 0)
        rc = check_name(s, "reducer", reducer);
    if (rc == 0 && at_index != A2_STORE_NONE && at_index < 0)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                            "at_index must not be negative");
    if (rc)
        return rc;
    json_t *p = json_object(), *rows = NULL, *abort_row = NULL;
    if (!p || !set(p, "session", json_string(session)) ||
        !set(p, "reducer", json_string(reducer)) ||
        (at_index != A2_STORE_NONE && !set(p, "at", json_integer(at_index)))) {
        json_decref(p);
        return nomem(s);
    }
    const char *st[] = {SQL_STATE_READ};
    rc = a2__store_batch(s, st, 1, p, &rows, &abort_row);
    if (rc == A2__ABORTED) {
        json_decref(abort_row);
        rc = A2_ESTORE_FAILED;
    }
    if (rc == 0 && json_array_size(rows) > 0) {
        json_t *r = json_array_get(rows, 0);
        out->arena_ = a2__arena_new();
        if (!out->arena_) {
            rc = nomem(s);
        } else {
            out->found = true;
            out->up_to_index = a2__row_int(r, "up_to_index");
            out->written_at = a2__row_int(r, "written_at");
            out->state = a2__row_str(out->arena_, r, "state");
            if (a2__arena_failed(out->arena_) || !out->state)
                rc = nomem(s);
        }
    }
    if (rc)
        a2_state_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}
