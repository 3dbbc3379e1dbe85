/*
 * Decodes tests/fixtures/store.jsonl, real wal2json 2.5 output captured by
 * tests/fixtures/capture (make fixtures) from scenario.sql, and checks it:
 * transaction framing, xids, LSNs and times; every a2_cursors change's
 * transition against the a2-fixture message naming it; each update's and
 * delete's old row against the row the stream last showed; and the values
 * of every column type at their edges.
 */
#include "a2/decoder.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka needs these first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#define MAX_LINES 4096
#define MAX_ROWS  64

typedef struct fixture {
    char *lines[MAX_LINES];
    size_t lens[MAX_LINES];
    size_t n;
} fixture;

static fixture *read_fixture(const char *name)
{
    const char *top = getenv("A2_TOP");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", top ? top : ".", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    fixture *fx = calloc(1, sizeof *fx);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (fx && (n = getline(&line, &cap, f)) > 0 && fx->n < MAX_LINES) {
        fx->lines[fx->n] = malloc((size_t)n);
        memcpy(fx->lines[fx->n], line, (size_t)n);
        fx->lens[fx->n++] = (size_t)n; /* with its '\n', as a file line */
    }
    free(line);
    fclose(f);
    return fx;
}

static void free_fixture(fixture *fx)
{
    for (size_t i = 0; fx && i < fx->n; i++)
        free(fx->lines[i]);
    free(fx);
}

/* store.jsonl: scenario.sql's row changes; store_ops.jsonl: liba2store's. */
typedef struct fixtures {
    fixture *sql;
    fixture *ops;
} fixtures;

static int load(void **state)
{
    fixtures *fs = calloc(1, sizeof *fs);
    if (!fs)
        return -1;
    fs->sql = read_fixture("store.jsonl");
    fs->ops = read_fixture("store_ops.jsonl");
    *state = fs;
    return fs->sql && fs->sql->n > 0 && fs->ops && fs->ops->n > 0 ? 0 : -1;
}

static int unload(void **state)
{
    fixtures *fs = *state;
    if (fs) {
        free_fixture(fs->sql);
        free_fixture(fs->ops);
    }
    free(fs);
    return 0;
}

static bool text_is(a2_change_text t, const char *s)
{
    return t.ptr && t.len == strlen(s) && memcmp(t.ptr, s, t.len) == 0;
}

static void assert_text(a2_change_text t, const char *want)
{
    if (!want) {
        assert_null(t.ptr);
        return;
    }
    if (!text_is(t, want))
        fail_msg("text \"%.*s\", want \"%s\"", (int)t.len,
                 t.ptr ? t.ptr : "(null)", want);
}

static bool text_eq(a2_change_text a, a2_change_text b)
{
    if (!a.ptr || !b.ptr)
        return !a.ptr && !b.ptr;
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static bool int_eq(a2_change_int a, a2_change_int b)
{
    return a.null == b.null && a.value == b.value;
}

static void assert_cursor_eq(const a2_cursor_row *x, const a2_cursor_row *y)
{
    assert_int_equal(x->present, y->present);
    assert_true(text_eq(x->session_id, y->session_id));
    assert_true(text_eq(x->consumer, y->consumer));
    assert_true(text_eq(x->cursor_key, y->cursor_key));
    assert_int_equal(x->epoch, y->epoch);
    assert_true(text_eq(x->kind, y->kind));
    assert_true(text_eq(x->lane, y->lane));
    assert_int_equal(x->position, y->position);
    assert_true(int_eq(x->head, y->head));
    assert_true(text_eq(x->types, y->types));
    assert_int_equal(x->attempt_count, y->attempt_count);
    assert_true(int_eq(x->first_claimed_at, y->first_claimed_at));
    assert_true(int_eq(x->last_claimed_at, y->last_claimed_at));
    assert_true(text_eq(x->claim_holder, y->claim_holder));
    assert_true(int_eq(x->claim_expires_at, y->claim_expires_at));
    assert_int_equal(x->failure_count, y->failure_count);
    assert_true(int_eq(x->last_failed_at, y->last_failed_at));
    assert_true(int_eq(x->last_failed_attempt, y->last_failed_attempt));
    assert_true(text_eq(x->last_error, y->last_error));
    assert_true(int_eq(x->failed_at, y->failed_at));
    assert_true(int_eq(x->completed_idx, y->completed_idx));
    assert_true(int_eq(x->completed_attempt, y->completed_attempt));
    assert_true(text_eq(x->returned_event_ids, y->returned_event_ids));
}

/* The stream's last image of each cursor run, as owned copies. */
typedef struct rows {
    a2_change *c[MAX_ROWS];
    size_t n;
} rows;

static bool same_key(const a2_cursor_row *x, const a2_cursor_row *y)
{
    return text_eq(x->session_id, y->session_id) &&
           text_eq(x->consumer, y->consumer) &&
           text_eq(x->cursor_key, y->cursor_key) && x->epoch == y->epoch;
}

static size_t find_row(rows *r, const a2_cursor_row *key)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->c[i] && same_key(&r->c[i]->new_row->cursor, key))
            return i;
    return SIZE_MAX;
}

/* Each session's clear marker, as the stream's a2_clears rows set it. */
typedef struct clears {
    char session[32][16];
    int64_t index[32];
    size_t n;
} clears;

static void set_clear(clears *cl, a2_change_text session, int64_t index)
{
    size_t i = 0;
    assert_true(session.len < sizeof cl->session[0]);
    for (; i < cl->n; i++)
        if (strlen(cl->session[i]) == session.len &&
            memcmp(cl->session[i], session.ptr, session.len) == 0)
            break;
    if (i == cl->n) {
        assert_true(cl->n < 32);
        memcpy(cl->session[i], session.ptr, session.len);
        cl->session[i][session.len] = '\0';
        cl->n++;
    }
    cl->index[i] = index;
}

static bool get_clear(const clears *cl, a2_change_text session, int64_t *index)
{
    for (size_t i = 0; i < cl->n; i++)
        if (strlen(cl->session[i]) == session.len &&
            memcmp(cl->session[i], session.ptr, session.len) == 0) {
            *index = cl->index[i];
            return true;
        }
    return false;
}

static void check_stream(fixture *fx, size_t ncursor_want, size_t nlabels_want,
                         int ntrunc_want)
{
    a2_decoder *d = a2_decoder_new();
    clears cl = {0};
    rows last = {0};
    char label[64] = "";
    bool in_txn = false;
    a2_change_int txid = {0, true};
    a2_change_text begin_ts = {0};
    char begin_ts_buf[64] = "";
    int64_t begin_time = 0;
    uint64_t prev_commit_end = 0;
    size_t ncursor = 0, nlabels = 0, ntxn = 0, nchanges = 0;
    int per_action[128] = {0};

    assert_non_null(d);
    for (size_t i = 0; i < fx->n; i++) {
        const a2_change *c = NULL;
        int r = a2_decoder_decode(d, fx->lines[i], fx->lens[i], &c);
        if (r != 0)
            fail_msg("line %zu: %s at %zu: %s", i + 1, a2_decoder_strerror(r),
                     a2_decoder_last_error(d)->offset,
                     a2_decoder_last_error(d)->message);
        per_action[c->action]++;
        /* The consumer's options: every message carries its LSN. */
        assert_true(c->has_lsn);
        switch (c->action) {
        case A2_ACTION_BEGIN:
            assert_false(in_txn);
            in_txn = true;
            ntxn++;
            assert_false(c->xid.null);
            assert_true(c->has_time);
            assert_true(c->has_nextlsn);
            assert_true(c->nextlsn > c->lsn);
            txid = c->xid;
            snprintf(begin_ts_buf, sizeof begin_ts_buf, "%.*s",
                     (int)c->timestamp.len, c->timestamp.ptr);
            begin_ts = (a2_change_text){begin_ts_buf, strlen(begin_ts_buf)};
            begin_time = c->time_us;
            /* Commit time: the capture ran in 2024 or later, in UTC text. */
            assert_true(c->time_us > INT64_C(1704067200000000));
            assert_int_equal(begin_ts_buf[strlen(begin_ts_buf) - 3], '+');
            break;
        case A2_ACTION_COMMIT:
            assert_true(in_txn);
            in_txn = false;
            assert_true(int_eq(c->xid, txid));
            assert_true(text_eq(c->timestamp, begin_ts));
            assert_int_equal(c->time_us, begin_time);
            assert_true(c->has_nextlsn);
            /* Commits arrive in commit order. */
            assert_true(c->nextlsn > prev_commit_end);
            prev_commit_end = c->nextlsn;
            break;
        case A2_ACTION_MESSAGE:
            if (!c->transactional) {
                assert_false(in_txn);
                assert_true(c->xid.null);
                assert_false(c->has_time);
                assert_text(c->prefix, "a2-fixture");
                assert_true(c->content.len < sizeof label);
                memcpy(label, c->content.ptr, c->content.len + 1);
                nlabels++;
            } else {
                assert_true(in_txn);
                assert_true(int_eq(c->xid, txid));
                assert_string_equal(label, "message");
                assert_text(c->prefix, "a2");
                assert_text(c->content, "{\"hb\": 1}");
            }
            break;
        default:
            assert_true(in_txn);
            nchanges++;
            assert_true(int_eq(c->xid, txid));
            assert_true(text_eq(c->timestamp, begin_ts));
            assert_text(c->schema, "public");
            assert_true(c->table != A2_TABLE_OTHER &&
                        c->table != A2_TABLE_NONE);
            assert_true(text_is(c->table_name, a2_table_name(c->table)));
            if (c->action == A2_ACTION_TRUNCATE) {
                assert_string_equal(label, "truncate");
                assert_null(c->new_row);
                assert_null(c->old_row);
                break;
            }
            assert_true((c->new_row != NULL) ==
                        (c->action != A2_ACTION_DELETE));
            assert_true((c->old_row != NULL) ==
                        (c->action != A2_ACTION_INSERT));
            if (c->table == A2_TABLE_CLEARS && c->new_row)
                set_clear(&cl, c->new_row->clear.session_id,
                          c->new_row->clear.clear_index);
            if (c->table != A2_TABLE_CURSORS)
                break;
            ncursor++;
            /* REPLICA IDENTITY FULL: both images complete. */
            if (c->new_row)
                assert_int_equal(c->new_row->cursor.present,
                                 (1u << A2_CURSOR_NCOLS) - 1);
            if (c->old_row)
                assert_int_equal(c->old_row->cursor.present,
                                 (1u << A2_CURSOR_NCOLS) - 1);
            a2_transition t = a2_change_transition(c);
            int64_t ci;
            /* A delete is retired when the clear marker superseded the run. */
            if (c->action == A2_ACTION_DELETE &&
                get_clear(&cl, c->old_row->cursor.session_id, &ci))
                t = a2_transition_classify_cleared(&c->old_row->cursor, NULL,
                                                   ci);
            if (strcmp(a2_transition_name(t), label) != 0)
                fail_msg("line %zu: transition %s, the scenario says %s", i + 1,
                         a2_transition_name(t), label);
            /* The old row is exactly the row the stream last showed. */
            if (c->old_row) {
                size_t k = find_row(&last, &c->old_row->cursor);
                if (k == SIZE_MAX)
                    fail_msg("line %zu: update/delete of a run never inserted",
                             i + 1);
                assert_cursor_eq(&last.c[k]->new_row->cursor,
                                 &c->old_row->cursor);
                if (!c->new_row) {
                    a2_change_free(last.c[k]);
                    last.c[k] = NULL;
                    break;
                }
                a2_change_free(last.c[k]);
                last.c[k] = a2_change_dup(c);
                assert_non_null(last.c[k]);
            } else {
                assert_true(last.n < MAX_ROWS);
                last.c[last.n] = a2_change_dup(c);
                assert_non_null(last.c[last.n]);
                last.n++;
            }
            break;
        }
    }
    assert_false(in_txn);
    assert_string_equal(label, "end");
    assert_int_equal(ncursor, ncursor_want);
    assert_int_equal(nlabels, nlabels_want);
    assert_int_equal(per_action['T'], ntrunc_want);
    assert_int_equal(per_action['B'], per_action['C']);
    assert_int_equal(per_action['B'], (int)ntxn);
    assert_true(nchanges > 40);
    for (size_t k = 0; k < last.n; k++)
        a2_change_free(last.c[k]);
    a2_decoder_free(d);
}

/* scenario.sql: 27 cursor writes, 32 labels, one truncate of 2 tables. */
static void test_stream_sql(void **state)
{
    fixtures *fs = *state;
    check_stream(fs->sql, 27, 32, 2);
}

/* drive_store.c: the store's own writes, 26 to a2_cursors, 25 labels. */
static void test_stream_store(void **state)
{
    fixtures *fs = *state;
    check_stream(fs->ops, 26, 25, 0);
}

/* The decoded change after the a2-fixture message `label`, n-th (0-based)
 * I/U/D of table t. */
static const a2_change *find(a2_decoder *d, void *state, const char *label,
                             a2_table t, int nth)
{
    fixture *fx = ((fixtures *)state)->sql;
    bool in = false;
    for (size_t i = 0; i < fx->n; i++) {
        const a2_change *c = NULL;
        assert_int_equal(a2_decoder_decode(d, fx->lines[i], fx->lens[i], &c),
                         0);
        if (c->action == A2_ACTION_MESSAGE && !c->transactional) {
            in = text_is(c->content, label);
            continue;
        }
        if (in && c->table == t && c->action != A2_ACTION_TRUNCATE &&
            nth-- == 0)
            return c;
    }
    fail_msg("no change %d of %s after %s", nth, a2_table_name(t), label);
    return NULL;
}

static void test_first_event(void **state)
{
    a2_decoder *d = a2_decoder_new();
    const a2_change *c = find(d, *state, "started", A2_TABLE_EVENTS, 0);
    assert_int_equal(c->action, A2_ACTION_INSERT);
    const a2_event_row *e = &c->new_row->event;
    assert_int_equal(e->present, (1u << A2_EVENT_NCOLS) - 1);
    assert_text(e->session_id, "s1");
    assert_int_equal(e->idx, 1);
    assert_text(e->event_type, "user_msg");
    assert_text(e->event_id, "ev-1");
    assert_int_equal(e->created_at, INT64_C(1732860000001));
    assert_text(e->cause, NULL);
    /* jsonb arrives as PostgreSQL's text; decoded on request, exactly. */
    json_t *j = NULL;
    assert_int_equal(a2_decoder_parse_jsonb(e->payload, &j, NULL), 0);
    assert_string_equal(json_string_value(json_object_get(j, "text")),
                        "h\xc3\xa9llo \"w\xc3\xb6rld\"\n\xf0\x9f\x98\x80");
    assert_int_equal(json_integer_value(json_object_get(j, "big")),
                     INT64_C(9007199254740993));
    assert_true(json_is_real(json_object_get(j, "n")));
    assert_true(json_is_null(json_object_get(
            json_array_get(json_object_get(j, "arr"), 1), "x")));
    json_decref(j);

    /* Its cursor: a fresh event run. */
    c = find(d, *state, "started", A2_TABLE_CURSORS, 0);
    const a2_cursor_row *r = &c->new_row->cursor;
    assert_text(r->consumer, "agentA");
    assert_text(r->cursor_key, "#1");
    assert_int_equal(r->epoch, 1);
    assert_text(r->kind, "event");
    assert_text(r->lane, NULL);
    assert_int_equal(r->position, 0);
    assert_int_equal(r->head.value, 1);
    assert_text(r->types, NULL);
    assert_int_equal(r->attempt_count, 0);
    assert_int_equal(r->failure_count, 0);
    assert_true(r->claim_expires_at.null);
    assert_true(r->completed_idx.null);
    assert_text(r->returned_event_ids, NULL);
    a2_decoder_free(d);
}

static void test_cursor_fields(void **state)
{
    a2_decoder *d = a2_decoder_new();
    /* The failed attempt: every dispatch column as the fail wrote it. */
    const a2_change *c = find(d, *state, "failed", A2_TABLE_CURSORS, 0);
    const a2_cursor_row *o = &c->old_row->cursor, *n = &c->new_row->cursor;
    assert_int_equal(o->attempt_count, 2);
    assert_text(o->claim_holder, "w2");
    assert_int_equal(o->claim_expires_at.value, INT64_C(1732860100000));
    assert_int_equal(o->failure_count, 1);
    assert_int_equal(o->first_claimed_at.value, INT64_C(1732860001000));
    assert_int_equal(o->last_claimed_at.value, INT64_C(1732860070000));
    assert_int_equal(n->failure_count, 2);
    assert_text(n->last_error, "exit 1: tool \"ls\" failed");
    assert_int_equal(n->last_failed_at.value, INT64_C(1732860080000));
    assert_int_equal(n->last_failed_attempt.value, 2);
    assert_text(n->claim_holder, NULL);
    assert_int_equal(n->claim_expires_at.value, INT64_C(1732860090000));
    assert_true(n->failed_at.null);

    /* The event cursor's completion receipt. */
    c = find(d, *state, "went_idle", A2_TABLE_CURSORS, 0);
    n = &c->new_row->cursor;
    assert_true(n->head.null);
    assert_int_equal(n->position, 1);
    assert_int_equal(n->completed_idx.value, 1);
    assert_int_equal(n->completed_attempt.value, 4);
    assert_text(n->returned_event_ids, "[\"ev-2\"]");
    c = find(d, *state, "went_idle", A2_TABLE_EVENTS, 0);
    assert_text(c->new_row->event.cause,
                "{\"id\": \"ev-1\", \"idx\": 1, \"attempt\": 4, \"consumer\": "
                "\"agentA\"}");

    /* The log cursor's types, before and after the retype. */
    c = find(d, *state, "retyped", A2_TABLE_CURSORS, 0);
    assert_text(c->old_row->cursor.types, "[\"job\"]");
    assert_text(c->new_row->cursor.types, "[\"job\", \"tool_result\"]");
    assert_text(c->new_row->cursor.kind, "log");

    /* The lane cursor and its lane events. */
    c = find(d, *state, "completed", A2_TABLE_LANE_EVENTS, 0);
    assert_int_equal(c->action, A2_ACTION_UPDATE);
    const a2_lane_event_row *l = &c->new_row->lane_event;
    assert_text(l->consumer, "agentB");
    assert_text(l->lane, "q");
    assert_int_equal(l->idx, 3);
    assert_true(l->done);
    assert_int_equal(l->completed_attempt.value, 1);
    assert_text(l->returned_event_ids, "[]");
    assert_int_equal(
            c->old_row->lane_event.present,
            (1u << A2_LANE_EVENT_SESSION_ID) | (1u << A2_LANE_EVENT_CONSUMER) |
                    (1u << A2_LANE_EVENT_LANE) | (1u << A2_LANE_EVENT_IDX));
    c = find(d, *state, "completed", A2_TABLE_CURSORS, 0);
    assert_text(c->new_row->cursor.lane, "q");
    assert_int_equal(c->new_row->cursor.head.value, 4);
    assert_int_equal(c->new_row->cursor.position, 3);
    a2_decoder_free(d);
}

static void test_other_tables(void **state)
{
    a2_decoder *d = a2_decoder_new();
    const a2_change *c = find(d, *state, "released", A2_TABLE_CLEARS, 0);
    assert_int_equal(c->action, A2_ACTION_INSERT);
    assert_text(c->new_row->clear.session_id, "s1");
    assert_int_equal(c->new_row->clear.clear_index, 5);
    c = find(d, *state, "released", A2_TABLE_EVENTS, 0);
    assert_text(c->new_row->event.event_type, "a2.clear");
    assert_text(c->new_row->event.payload, "null");

    c = find(d, *state, "tables", A2_TABLE_PRESENCE, 0);
    const a2_presence_row *p = &c->new_row->presence;
    assert_text(p->ns, "room");
    assert_text(p->participant, "alice");
    assert_text(p->field, "typing");
    assert_text(p->value, "true");
    assert_true(p->seen.null);
    assert_int_equal(p->at, INT64_C(1732860800000));
    assert_int_equal(p->expires_at, INT64_C(1732860830000));
    c = find(d, *state, "tables", A2_TABLE_PRESENCE, 1);
    assert_text(c->new_row->presence.value, "{\"mood\": \"ok\"}");
    assert_int_equal(c->new_row->presence.seen.value, INT64_C(1732860799000));
    /* The upsert that tombstones alice's field. */
    c = find(d, *state, "tables", A2_TABLE_PRESENCE, 2);
    assert_int_equal(c->action, A2_ACTION_UPDATE);
    assert_text(c->new_row->presence.value, "null");
    assert_int_equal(c->new_row->presence.seen.value, INT64_C(1732860801000));
    assert_text(c->old_row->presence.participant, "alice");
    c = find(d, *state, "tables", A2_TABLE_PRESENCE, 3);
    assert_int_equal(c->action, A2_ACTION_DELETE);
    assert_text(c->old_row->presence.participant, "bob");
    assert_text(c->old_row->presence.field, "status");
    assert_text(c->old_row->presence.value,
                NULL); /* not in a DEFAULT identity */
    assert_int_equal(c->old_row->presence.present,
                     (1u << A2_PRESENCE_NS) | (1u << A2_PRESENCE_PARTICIPANT) |
                             (1u << A2_PRESENCE_FIELD));
    c = find(d, *state, "tables", A2_TABLE_CLEARS, 0);
    assert_int_equal(c->action, A2_ACTION_UPDATE);
    assert_int_equal(c->new_row->clear.clear_index, 7);
    assert_text(c->old_row->clear.session_id, "s1");
    c = find(d, *state, "tables", A2_TABLE_LANE_EVENTS, 0);
    assert_int_equal(c->action, A2_ACTION_DELETE);
    assert_int_equal(c->old_row->lane_event.idx, 3);
    a2_decoder_free(d);
}

static void test_values(void **state)
{
    a2_decoder *d = a2_decoder_new();
    const a2_change *c = find(d, *state, "values", A2_TABLE_EVENTS, 0);
    const a2_event_row *e = &c->new_row->event;
    assert_text(e->session_id, "s2");
    assert_int_equal(e->idx, INT64_C(9007199254740993));
    assert_text(
            e->event_type,
            "tab\there ctrl\x01 \xc3\xa9 \xf0\x9f\x98\x80 back\\slash \"q\"");
    assert_text(e->payload, "123");
    assert_int_equal(e->created_at, INT64_MIN);
    assert_text(e->cause, "\"str\"");
    c = find(d, *state, "values", A2_TABLE_EVENTS, 1);
    e = &c->new_row->event;
    assert_int_equal(e->idx, INT64_MAX);
    assert_text(e->event_type, "");
    assert_text(e->payload, "[]");
    assert_int_equal(e->created_at, INT64_MAX);
    assert_text(e->cause, "null"); /* jsonb null, not SQL NULL */

    /* Unchanged TOAST: the update lacks payload; the insert had it whole. */
    c = find(d, *state, "toast", A2_TABLE_EVENTS, 0);
    assert_int_equal(c->action, A2_ACTION_INSERT);
    assert_true(c->new_row->event.payload.len > 12800);
    c = find(d, *state, "toast", A2_TABLE_EVENTS, 1);
    assert_int_equal(c->action, A2_ACTION_UPDATE);
    assert_int_equal(c->new_row->event.present,
                     ((1u << A2_EVENT_NCOLS) - 1) & ~(1u << A2_EVENT_PAYLOAD));
    assert_text(c->new_row->event.payload, NULL);
    assert_text(c->new_row->event.event_type, "big-updated");
    c = find(d, *state, "toast", A2_TABLE_EVENTS, 2);
    assert_int_equal(c->action, A2_ACTION_DELETE);
    assert_text(c->old_row->event.session_id, "s3");
    a2_decoder_free(d);
}

/* Every line, cut short anywhere or with a byte flipped, fails cleanly or
 * decodes; never crashes (under ASan) and never reads past the cut. */
static void mutate(fixture *fx)
{
    a2_decoder *d = a2_decoder_new();
    for (size_t i = 0; i < fx->n; i++) {
        size_t len = fx->lens[i];
        if (len > 4096)
            continue;
        char *copy = malloc(len);
        for (size_t cut = 0; cut < len - 1; cut += 7) {
            const a2_change *c;
            memcpy(copy, fx->lines[i], cut);
            assert_true(a2_decoder_decode(d, copy, cut, &c) < 0);
            assert_true(a2_decoder_last_error(d)->offset <= cut);
        }
        for (size_t k = 0; k < len; k += 13) {
            const a2_change *c;
            memcpy(copy, fx->lines[i], len);
            copy[k] = (char)(copy[k] ^ 0x5a);
            int r = a2_decoder_decode(d, copy, len, &c);
            assert_true(r == 0 || a2_decoder_last_error(d)->offset <= len);
        }
        free(copy);
    }
    a2_decoder_free(d);
}

static void test_mutations(void **state)
{
    fixtures *fs = *state;
    mutate(fs->sql);
    mutate(fs->ops);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_stream_sql),
            cmocka_unit_test(test_stream_store),
            cmocka_unit_test(test_first_event),
            cmocka_unit_test(test_cursor_fields),
            cmocka_unit_test(test_other_tables),
            cmocka_unit_test(test_values),
            cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
