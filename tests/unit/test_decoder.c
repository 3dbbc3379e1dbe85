/*
 * Decoder unit tests: every message shape, every value type, and every
 * error path of bad input (with its code and byte offset).
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

static int setup(void **state)
{
    a2_decoder *d = a2_decoder_new();
    if (!d)
        return -1;
    *state = d;
    return 0;
}

static int teardown(void **state)
{
    a2_decoder_free(*state);
    return 0;
}

static const a2_change *ok(a2_decoder *d, const char *line)
{
    const a2_change *c = NULL;
    int r = a2_decoder_decode(d, line, strlen(line), &c);
    if (r != 0)
        fail_msg("decode failed (%s at %zu): %s\nline: %s",
                 a2_decoder_strerror(r), a2_decoder_last_error(d)->offset,
                 a2_decoder_last_error(d)->message, line);
    assert_non_null(c);
    assert_int_equal(a2_decoder_last_error(d)->code, 0);
    return c;
}

/* Decodes a line that must fail with code at offset (SIZE_MAX: any). */
static void bad_len(a2_decoder *d, const char *line, size_t len, int code,
                    size_t offset, const char *msg_part)
{
    const a2_change *c = (const a2_change *)1;
    int r = a2_decoder_decode(d, line, len, &c);
    const a2_decoder_error *e = a2_decoder_last_error(d);
    if (r != code)
        fail_msg("expected %s, got %s (%s) for: %.200s",
                 a2_decoder_strerror(code), a2_decoder_strerror(r), e->message,
                 line);
    assert_null(c);
    assert_int_equal(e->code, code);
    if (offset != SIZE_MAX && e->offset != offset)
        fail_msg("offset %zu, expected %zu (%s) for: %.200s", e->offset, offset,
                 e->message, line);
    assert_true(e->offset <= len || code == A2_EDEC_TOOLONG);
    assert_true(strlen(e->message) > 0);
    if (msg_part && !strstr(e->message, msg_part))
        fail_msg("message \"%s\" lacks \"%s\"", e->message, msg_part);
}

static void bad(a2_decoder *d, const char *line, int code, size_t offset,
                const char *msg_part)
{
    bad_len(d, line, strlen(line), code, offset, msg_part);
}

static void assert_text(a2_change_text t, const char *want)
{
    if (!want) {
        assert_null(t.ptr);
        assert_int_equal(t.len, 0);
        return;
    }
    assert_non_null(t.ptr);
    assert_int_equal(t.len, strlen(want));
    assert_memory_equal(t.ptr, want, t.len);
    assert_int_equal(t.ptr[t.len], '\0');
}

#define EV_COLS(idx, payload, cause)                                           \
    "[{\"name\":\"session_id\",\"type\":\"text\",\"value\":\"s1\"},"           \
    "{\"name\":\"idx\",\"type\":\"bigint\",\"value\":" idx "},"                \
    "{\"name\":\"event_type\",\"type\":\"text\",\"value\":\"user_msg\"},"      \
    "{\"name\":\"payload\",\"type\":\"jsonb\",\"value\":" payload "},"         \
    "{\"name\":\"event_id\",\"type\":\"text\",\"value\":\"ev-1\"},"            \
    "{\"name\":\"created_at\",\"type\":\"bigint\",\"value\":1732860000123},"   \
    "{\"name\":\"cause\",\"type\":\"jsonb\",\"value\":" cause "}]"

#define EV_INSERT(idx, payload, cause)                                         \
    "{\"action\":\"I\",\"xid\":740,\"timestamp\":\"2026-11-29 "                \
    "06:40:48.31959+00\",\"lsn\":\"0/193BA00\",\"schema\":\"public\","         \
    "\"table\":\"a2_events\",\"columns\":" EV_COLS(idx, payload, cause) "}"

static void test_begin_commit(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c =
            ok(d, "{\"action\":\"B\",\"xid\":732,\"timestamp\":"
                  "\"2026-11-29 06:40:48.313747+00\",\"lsn\":\"0/193AF40\","
                  "\"nextlsn\":\"0/193AF70\"}");
    assert_int_equal(c->action, A2_ACTION_BEGIN);
    assert_false(c->xid.null);
    assert_int_equal(c->xid.value, 732);
    assert_text(c->timestamp, "2026-11-29 06:40:48.313747+00");
    assert_true(c->has_time);
    assert_int_equal(c->time_us, INT64_C(1795934448313747));
    assert_true(c->has_lsn);
    assert_int_equal(c->lsn, UINT64_C(0x193AF40));
    assert_true(c->has_nextlsn);
    assert_int_equal(c->nextlsn, UINT64_C(0x193AF70));
    assert_int_equal(c->table, A2_TABLE_NONE);
    assert_null(c->new_row);
    assert_null(c->old_row);

    c = ok(d, "{\"action\":\"C\",\"xid\":4294967295,\"timestamp\":"
              "\"1999-12-31 23:59:59-05:30\",\"lsn\":\"FFFFFFFF/FFFFFFFF\","
              "\"nextlsn\":\"1/0\"}\n");
    assert_int_equal(c->action, A2_ACTION_COMMIT);
    assert_int_equal(c->xid.value, INT64_C(4294967295));
    /* 2000-01-01 05:29:59 UTC */
    assert_int_equal(c->time_us, INT64_C(946704599) * 1000000);
    assert_int_equal(c->lsn, UINT64_MAX);
    assert_int_equal(c->nextlsn, UINT64_C(0x100000000));

    /* Without the optional keys (wal2json's defaults). */
    c = ok(d, "{\"action\":\"B\"}");
    assert_true(c->xid.null);
    assert_false(c->has_time);
    assert_false(c->has_lsn);
    assert_false(c->has_nextlsn);
    assert_null(c->timestamp.ptr);
}

static void test_event_insert(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c =
            ok(d, EV_INSERT("9007199254740993",
                            "\"{\\\"b\\\": true, \\\"text\\\": \\\"hi "
                            "\\\\\\\"there\\\\\\\"\\\\nnew line\\\"}\"",
                            "null"));
    assert_int_equal(c->action, A2_ACTION_INSERT);
    assert_int_equal(c->table, A2_TABLE_EVENTS);
    assert_text(c->schema, "public");
    assert_text(c->table_name, "a2_events");
    assert_int_equal(c->xid.value, 740);
    assert_int_equal(c->lsn, UINT64_C(0x193BA00));
    assert_non_null(c->new_row);
    assert_null(c->old_row);
    const a2_event_row *e = &c->new_row->event;
    assert_int_equal(e->present, (1u << A2_EVENT_NCOLS) - 1);
    assert_text(e->session_id, "s1");
    assert_int_equal(e->idx, INT64_C(9007199254740993));
    assert_text(e->event_type, "user_msg");
    assert_text(e->payload,
                "{\"b\": true, \"text\": \"hi \\\"there\\\"\\nnew line\"}");
    assert_text(e->event_id, "ev-1");
    assert_int_equal(e->created_at, INT64_C(1732860000123));
    assert_text(e->cause, NULL);

    /* The payload decodes on request, exactly. */
    json_t *j = NULL;
    a2_decoder_error err;
    assert_int_equal(a2_decoder_parse_jsonb(e->payload, &j, &err), 0);
    assert_true(json_is_object(j));
    assert_true(json_is_true(json_object_get(j, "b")));
    assert_string_equal(json_string_value(json_object_get(j, "text")),
                        "hi \"there\"\nnew line");
    json_decref(j);
    assert_int_equal(a2_decoder_parse_jsonb(e->cause, &j, &err), 0);
    assert_null(j);

    /* bigint extremes stay exact. */
    c = ok(d, EV_INSERT("-9223372036854775808", "\"123\"", "\"\\\"str\\\"\""));
    assert_int_equal(c->new_row->event.idx, INT64_MIN);
    assert_text(c->new_row->event.payload, "123");
    assert_text(c->new_row->event.cause, "\"str\"");
    c = ok(d, EV_INSERT("9223372036854775807", "\"null\"", "null"));
    assert_int_equal(c->new_row->event.idx, INT64_MAX);
    assert_text(c->new_row->event.payload, "null");
    assert_int_equal(
            a2_decoder_parse_jsonb(c->new_row->event.payload, &j, NULL), 0);
    assert_true(json_is_null(j));
    json_decref(j);
}

static void test_strings(void **state)
{
    a2_decoder *d = *state;
    /* Escapes, control characters, raw and escaped non-ASCII, surrogates. */
    const a2_change *c = ok(
            d,
            "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/1\","
            "\"transactional\":false,\"prefix\":\"a2-hb\",\"content\":"
            "\"tab\\there ctrl\\u0001 \xc3\xa9 \xf0\x9f\x98\x80 back\\\\slash "
            "\\\"q\\\" "
            "\\/ \\b\\f\\r\\n \\u00e9\\u20AC\\ud83d\\ude00\"}");
    assert_int_equal(c->action, A2_ACTION_MESSAGE);
    assert_true(c->xid.null);
    assert_false(c->has_time);
    assert_false(c->transactional);
    assert_text(c->prefix, "a2-hb");
    assert_text(c->content,
                "tab\there ctrl\x01 \xc3\xa9 \xf0\x9f\x98\x80 back\\slash "
                "\"q\" / \b\f\r\n \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    c = ok(d, "{\"action\":\"M\",\"xid\":741,\"transactional\":true,\"prefix\":"
              "\"a2\","
              "\"content\":\"\"}");
    assert_true(c->transactional);
    assert_text(c->content, "");
}

#define CUR_COLS_OLD                                                           \
    "{\"name\":\"session_id\",\"type\":\"text\",\"value\":\"s1\"},"            \
    "{\"name\":\"consumer\",\"type\":\"text\",\"value\":\"agentA\"},"          \
    "{\"name\":\"cursor_key\",\"type\":\"text\",\"value\":\"#1\"},"            \
    "{\"name\":\"epoch\",\"type\":\"bigint\",\"value\":1},"                    \
    "{\"name\":\"kind\",\"type\":\"text\",\"value\":\"event\"},"               \
    "{\"name\":\"lane\",\"type\":\"text\",\"value\":null},"                    \
    "{\"name\":\"position\",\"type\":\"bigint\",\"value\":0},"                 \
    "{\"name\":\"head\",\"type\":\"bigint\",\"value\":1},"                     \
    "{\"name\":\"types\",\"type\":\"jsonb\",\"value\":null},"                  \
    "{\"name\":\"attempt_count\",\"type\":\"integer\",\"value\":0},"           \
    "{\"name\":\"first_claimed_at\",\"type\":\"bigint\",\"value\":null},"      \
    "{\"name\":\"last_claimed_at\",\"type\":\"bigint\",\"value\":null},"       \
    "{\"name\":\"claim_holder\",\"type\":\"text\",\"value\":null},"            \
    "{\"name\":\"claim_expires_at\",\"type\":\"bigint\",\"value\":null},"      \
    "{\"name\":\"failure_count\",\"type\":\"integer\",\"value\":0},"           \
    "{\"name\":\"last_failed_at\",\"type\":\"bigint\",\"value\":null},"        \
    "{\"name\":\"last_failed_attempt\",\"type\":\"integer\",\"value\":null},"  \
    "{\"name\":\"last_error\",\"type\":\"text\",\"value\":null},"              \
    "{\"name\":\"failed_at\",\"type\":\"bigint\",\"value\":null},"             \
    "{\"name\":\"completed_idx\",\"type\":\"bigint\",\"value\":null},"         \
    "{\"name\":\"completed_attempt\",\"type\":\"integer\",\"value\":null},"    \
    "{\"name\":\"returned_event_ids\",\"type\":\"jsonb\",\"value\":null}"

#define CUR_COLS_NEW                                                           \
    "{\"name\":\"session_id\",\"type\":\"text\",\"value\":\"s1\"},"            \
    "{\"name\":\"consumer\",\"type\":\"text\",\"value\":\"agentA\"},"          \
    "{\"name\":\"cursor_key\",\"type\":\"text\",\"value\":\"#1\"},"            \
    "{\"name\":\"epoch\",\"type\":\"bigint\",\"value\":1},"                    \
    "{\"name\":\"kind\",\"type\":\"text\",\"value\":\"event\"},"               \
    "{\"name\":\"lane\",\"type\":\"text\",\"value\":\"L\"},"                   \
    "{\"name\":\"position\",\"type\":\"bigint\",\"value\":0},"                 \
    "{\"name\":\"head\",\"type\":\"bigint\",\"value\":1},"                     \
    "{\"name\":\"types\",\"type\":\"jsonb\",\"value\":\"[\\\"a\\\"]\"},"       \
    "{\"name\":\"attempt_count\",\"type\":\"integer\",\"value\":1},"           \
    "{\"name\":\"first_claimed_at\",\"type\":\"bigint\",\"value\":10},"        \
    "{\"name\":\"last_claimed_at\",\"type\":\"bigint\",\"value\":11},"         \
    "{\"name\":\"claim_holder\",\"type\":\"text\",\"value\":\"w1\"},"          \
    "{\"name\":\"claim_expires_at\",\"type\":\"bigint\",\"value\":12},"        \
    "{\"name\":\"failure_count\",\"type\":\"integer\",\"value\":2},"           \
    "{\"name\":\"last_failed_at\",\"type\":\"bigint\",\"value\":13},"          \
    "{\"name\":\"last_failed_attempt\",\"type\":\"integer\",\"value\":-"       \
    "2147483648},"                                                             \
    "{\"name\":\"last_error\",\"type\":\"text\",\"value\":\"boom\"},"          \
    "{\"name\":\"failed_at\",\"type\":\"bigint\",\"value\":14},"               \
    "{\"name\":\"completed_idx\",\"type\":\"bigint\",\"value\":15},"           \
    "{\"name\":\"completed_attempt\",\"type\":\"integer\",\"value\":"          \
    "2147483647},"                                                             \
    "{\"name\":\"returned_event_ids\",\"type\":\"jsonb\",\"value\":\"[]\"}"

static void test_cursor_update_full(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c =
            ok(d, "{\"action\":\"U\",\"xid\":9,\"lsn\":\"0/"
                  "10\",\"schema\":\"public\","
                  "\"table\":\"a2_cursors\",\"columns\":[" CUR_COLS_NEW "],"
                  "\"identity\":[" CUR_COLS_OLD "]}");
    assert_int_equal(c->action, A2_ACTION_UPDATE);
    assert_int_equal(c->table, A2_TABLE_CURSORS);
    const a2_cursor_row *n = &c->new_row->cursor, *o = &c->old_row->cursor;
    assert_int_equal(n->present, (1u << A2_CURSOR_NCOLS) - 1);
    assert_int_equal(o->present, (1u << A2_CURSOR_NCOLS) - 1);
    assert_text(n->session_id, "s1");
    assert_text(n->consumer, "agentA");
    assert_text(n->cursor_key, "#1");
    assert_int_equal(n->epoch, 1);
    assert_text(n->kind, "event");
    assert_text(n->lane, "L");
    assert_int_equal(n->position, 0);
    assert_false(n->head.null);
    assert_int_equal(n->head.value, 1);
    assert_text(n->types, "[\"a\"]");
    assert_int_equal(n->attempt_count, 1);
    assert_int_equal(n->first_claimed_at.value, 10);
    assert_int_equal(n->last_claimed_at.value, 11);
    assert_text(n->claim_holder, "w1");
    assert_int_equal(n->claim_expires_at.value, 12);
    assert_int_equal(n->failure_count, 2);
    assert_int_equal(n->last_failed_at.value, 13);
    assert_int_equal(n->last_failed_attempt.value, INT32_MIN);
    assert_text(n->last_error, "boom");
    assert_int_equal(n->failed_at.value, 14);
    assert_int_equal(n->completed_idx.value, 15);
    assert_int_equal(n->completed_attempt.value, INT32_MAX);
    assert_text(n->returned_event_ids, "[]");

    assert_text(o->lane, NULL);
    assert_text(o->types, NULL);
    assert_true(o->first_claimed_at.null);
    assert_true(o->last_claimed_at.null);
    assert_text(o->claim_holder, NULL);
    assert_true(o->claim_expires_at.null);
    assert_true(o->last_failed_at.null);
    assert_true(o->last_failed_attempt.null);
    assert_text(o->last_error, NULL);
    assert_true(o->failed_at.null);
    assert_true(o->completed_idx.null);
    assert_true(o->completed_attempt.null);
    assert_text(o->returned_event_ids, NULL);
    assert_int_equal(o->attempt_count, 0);
    assert_false(o->head.null);

    /* A delete carries the whole old row. */
    c = ok(d, "{\"action\":\"D\",\"table\":\"a2_cursors\",\"identity\":"
              "[" CUR_COLS_OLD "]}");
    assert_int_equal(c->action, A2_ACTION_DELETE);
    assert_null(c->new_row);
    assert_non_null(c->old_row);
    assert_text(c->old_row->cursor.kind, "event");
    assert_int_equal(a2_change_transition(c), A2_TRANSITION_DELETED);
}

static void test_update_toast(void **state)
{
    a2_decoder *d = *state;
    /* payload (unchanged TOAST) is absent from columns and from the DEFAULT
     * identity: known to be unchanged, value unknown. */
    const a2_change *c = ok(
            d,
            "{\"action\":\"U\",\"schema\":\"public\",\"table\":\"a2_events\","
            "\"columns\":["
            "{\"name\":\"session_id\",\"type\":\"text\",\"value\":\"toast\"},"
            "{\"name\":\"idx\",\"type\":\"bigint\",\"value\":1},"
            "{\"name\":\"event_type\",\"type\":\"text\",\"value\":\"big-"
            "updated\"},"
            "{\"name\":\"event_id\",\"type\":\"text\",\"value\":\"ev-t1\"},"
            "{\"name\":\"created_at\",\"type\":\"bigint\",\"value\":1},"
            "{\"name\":\"cause\",\"type\":\"jsonb\",\"value\":null}],"
            "\"identity\":[{\"name\":\"session_id\",\"type\":\"text\","
            "\"value\":\"toast\"},"
            "{\"name\":\"idx\",\"type\":\"bigint\",\"value\":1}]}");
    const a2_event_row *n = &c->new_row->event, *o = &c->old_row->event;
    assert_int_equal(n->present,
                     ((1u << A2_EVENT_NCOLS) - 1) & ~(1u << A2_EVENT_PAYLOAD));
    assert_text(n->payload, NULL);
    assert_text(n->event_type, "big-updated");
    assert_int_equal(o->present,
                     (1u << A2_EVENT_SESSION_ID) | (1u << A2_EVENT_IDX));
    assert_text(o->session_id, "toast");
    assert_int_equal(o->idx, 1);

    /* With the value in identity (REPLICA IDENTITY FULL), it is filled in. */
    c = ok(d, "{\"action\":\"U\",\"table\":\"a2_events\",\"columns\":["
              "{\"name\":\"session_id\",\"value\":\"t\"},{\"name\":\"idx\","
              "\"value\":1},"
              "{\"name\":\"event_type\",\"value\":\"x\"},{\"name\":\"event_"
              "id\",\"value\":\"e\"},"
              "{\"name\":\"created_at\",\"value\":1},{\"name\":\"cause\","
              "\"value\":null}],"
              "\"identity\":[{\"name\":\"session_id\",\"value\":\"t\"},{"
              "\"name\":\"idx\",\"value\":1},"
              "{\"name\":\"payload\",\"value\":\"{\\\"blob\\\": 1}\"}]}");
    assert_int_equal(c->new_row->event.present, (1u << A2_EVENT_NCOLS) - 1);
    assert_text(c->new_row->event.payload, "{\"blob\": 1}");

    /* A non-TOASTable column cannot be absent. */
    bad(d,
        "{\"action\":\"U\",\"table\":\"a2_events\",\"columns\":["
        "{\"name\":\"session_id\",\"value\":\"t\"},{\"name\":\"idx\",\"value\":"
        "1},"
        "{\"name\":\"event_type\",\"value\":\"x\"},{\"name\":\"event_id\","
        "\"value\":\"e\"},"
        "{\"name\":\"cause\",\"value\":null}],"
        "\"identity\":[{\"name\":\"session_id\",\"value\":\"t\"},{\"name\":"
        "\"idx\",\"value\":1}]}",
        A2_EDEC_MISSING, 44, "created_at");
}

static void test_other_tables(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c =
            ok(d, "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":["
                  "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":"
                  "\"clear_index\",\"value\":5}]}");
    assert_int_equal(c->table, A2_TABLE_CLEARS);
    assert_text(c->new_row->clear.session_id, "s1");
    assert_int_equal(c->new_row->clear.clear_index, 5);
    assert_string_equal(a2_table_name(c->table), "a2_clears");

    c = ok(d,
           "{\"action\":\"I\",\"table\":\"a2_lane_events\",\"columns\":["
           "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":\"consumer\","
           "\"value\":\"b\"},"
           "{\"name\":\"lane\",\"value\":\"q\"},{\"name\":\"idx\",\"value\":3},"
           "{\"name\":\"done\",\"type\":\"boolean\",\"value\":true},"
           "{\"name\":\"completed_attempt\",\"value\":null},"
           "{\"name\":\"returned_event_ids\",\"value\":\"[\\\"x\\\"]\"}]}");
    assert_int_equal(c->table, A2_TABLE_LANE_EVENTS);
    const a2_lane_event_row *l = &c->new_row->lane_event;
    assert_text(l->consumer, "b");
    assert_text(l->lane, "q");
    assert_int_equal(l->idx, 3);
    assert_true(l->done);
    assert_true(l->completed_attempt.null);
    assert_text(l->returned_event_ids, "[\"x\"]");

    c = ok(d,
           "{\"action\":\"I\",\"table\":\"a2_presence\",\"columns\":["
           "{\"name\":\"ns\",\"value\":\"room\"},{\"name\":\"participant\","
           "\"value\":\"al\"},"
           "{\"name\":\"field\",\"value\":\"typing\"},{\"name\":\"value\","
           "\"value\":\"null\"},"
           "{\"name\":\"seen\",\"value\":null},{\"name\":\"at\",\"value\":7},"
           "{\"name\":\"expires_at\",\"value\":8},{\"name\":\"later_column\","
           "\"value\":[1,{}]}]}");
    assert_int_equal(c->table, A2_TABLE_PRESENCE);
    const a2_presence_row *p = &c->new_row->presence;
    assert_text(p->ns, "room");
    assert_text(p->participant, "al");
    assert_text(p->field, "typing");
    assert_text(p->value, "null");
    assert_true(p->seen.null);
    assert_int_equal(p->at, 7);
    assert_int_equal(p->expires_at, 8);

    /* A table a2 does not know, or one in another schema: names only. */
    c = ok(d, "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"nopk\","
              "\"columns\":["
              "{\"name\":\"a\",\"type\":\"integer\",\"value\":1.5e+300}]}");
    assert_int_equal(c->table, A2_TABLE_OTHER);
    assert_text(c->table_name, "nopk");
    assert_null(c->new_row);
    c = ok(d, "{\"action\":\"D\",\"schema\":\"other\",\"table\":\"a2_events\","
              "\"identity\":[]}");
    assert_int_equal(c->table, A2_TABLE_OTHER);
    assert_null(c->old_row);

    c = ok(d, "{\"action\":\"T\",\"xid\":751,\"lsn\":\"0/"
              "193FA18\",\"schema\":\"public\","
              "\"table\":\"a2_cursors\"}");
    assert_int_equal(c->action, A2_ACTION_TRUNCATE);
    assert_int_equal(c->table, A2_TABLE_CURSORS);
    assert_null(c->new_row);
    assert_null(c->old_row);
    assert_int_equal(a2_change_transition(c), A2_TRANSITION_OTHER);
}

static void test_optional_keys_skipped(void **state)
{
    a2_decoder *d = *state;
    /* origin, pk, typeoid, position, optional, default, unknown keys, and
     * whitespace anywhere JSON allows it. */
    const a2_change *c =
            ok(d, " \t{ \"action\" : \"I\" , "
                  "\"origin\":null,\"future\":{\"a\":[1,2,{\"b\":\"c\"}]},"
                  "\"table\":\"a2_clears\",\"columns\":[ "
                  "{\"name\":\"session_id\",\"typeoid\":25,"
                  "\"value\":\"s\",\"optional\":false,\"position\":1,"
                  "\"default\":null},"
                  "{\"default\":\"0\",\"name\":\"clear_index\",\"value\":-0}],"
                  "\"pk\":[{\"name\":\"session_id\",\"type\":\"text\"}] }\r\n");
    assert_int_equal(c->new_row->clear.clear_index, 0);
}

static void test_bad_syntax(void **state)
{
    a2_decoder *d = *state;
    const char *full = EV_INSERT("1", "\"{}\"", "null");
    size_t n = strlen(full);
    /* Every truncation of a valid line fails cleanly. */
    for (size_t i = 0; i < n; i++) {
        const a2_change *c = (const a2_change *)1;
        int r = a2_decoder_decode(d, full, i, &c);
        assert_true(r < 0);
        assert_null(c);
        assert_true(r == A2_EDEC_SYNTAX || r == A2_EDEC_TYPE);
        assert_true(a2_decoder_last_error(d)->offset <= i);
    }
    bad(d, "", A2_EDEC_SYNTAX, 0, "empty line");
    bad(d, "{\"action\":\"B\"", A2_EDEC_SYNTAX, 13, "end of line");
    bad(d, "{\"action\":\"B\"}x", A2_EDEC_SYNTAX, 14, "trailing");
    bad(d, "{\"action\":\"B\"}{}", A2_EDEC_SYNTAX, 14, "trailing");
    bad(d, "{\"action\" \"B\"}", A2_EDEC_SYNTAX, 10, "':'");
    bad(d, "{\"action\":\"B\",}", A2_EDEC_SYNTAX, 14, "key");
    bad(d, "{\"action\":\"B\" \"x\":1}", A2_EDEC_SYNTAX, 14, "','");
    bad(d, "{action:\"B\"}", A2_EDEC_SYNTAX, 1, "key");
    bad(d, "{\"action\":\"B\",\"x\":tru}", A2_EDEC_SYNTAX, 18, NULL);
    bad(d, "{\"action\":\"B\",\"x\":01}", A2_EDEC_SYNTAX, 19, NULL);
    bad(d, "{\"action\":\"B\",\"x\":-}", A2_EDEC_SYNTAX, 18, "number");
    bad(d, "{\"action\":\"B\",\"x\":1.}", A2_EDEC_SYNTAX, 18, "number");
    bad(d, "{\"action\":\"B\",\"x\":1e}", A2_EDEC_SYNTAX, 18, "number");
    bad(d, "{\"action\":\"B\",\"x\":\"a\\qb\"}", A2_EDEC_SYNTAX, 20, "escape");
    bad(d, "{\"action\":\"B\",\"x\":\"\\u12G4\"}", A2_EDEC_SYNTAX, 21, "\\u");
    bad(d, "{\"action\":\"B\",\"x\":\"a\tb\"}", A2_EDEC_SYNTAX, 20, "control");
    bad(d, "{\"action\":\"B\",\"x\":'a'}", A2_EDEC_SYNTAX, 18, NULL);
    bad(d, "{\"action\":\"B\",\"x\":[1,]}", A2_EDEC_SYNTAX, 21, NULL);
    /* A NUL byte inside the line. */
    bad_len(d, "{\"action\":\"B\"}\0", 16, A2_EDEC_SYNTAX, 14, "trailing");
    bad_len(d, "{\"action\":\"\0\"}", 14, A2_EDEC_SYNTAX, 11, "control");
}

static void test_bad_utf8(void **state)
{
    a2_decoder *d = *state;
    static const char *const seqs[] = {
            "\x80",             /* stray continuation */
            "\xc0\xaf",         /* overlong '/' */
            "\xc3",             /* truncated 2-byte */
            "\xe0\x80\xaf",     /* overlong 3-byte */
            "\xed\xa0\x80",     /* UTF-16 surrogate */
            "\xf4\x90\x80\x80", /* past U+10FFFF */
            "\xf8\x88\x80\x80\x80",
            "\xff",
            "\xe2\x82", /* truncated 3-byte */
    };
    for (size_t i = 0; i < sizeof seqs / sizeof seqs[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "{\"action\":\"M\",\"prefix\":\"a%s\"}",
                 seqs[i]);
        bad(d, line, A2_EDEC_UTF8, 25, "UTF-8");
    }
    bad(d, "{\"action\":\"B\",\"x\":\"\\ud800\"}", A2_EDEC_UTF8, 19,
        "surrogate");
    bad(d, "{\"action\":\"B\",\"x\":\"\\ud800\\u0041\"}", A2_EDEC_UTF8, 19,
        "surrogate");
    bad(d, "{\"action\":\"B\",\"x\":\"\\udc00\"}", A2_EDEC_UTF8, 19,
        "surrogate");
    bad(d, "{\"action\":\"B\",\"x\":\"a\\u0000\"}", A2_EDEC_UTF8, 20,
        "\\u0000");
    /* Non-ASCII outside a string is a syntax error. */
    bad(d, "{\"action\":\"B\",\"x\":\xc3\xa9}", A2_EDEC_SYNTAX, 18, NULL);
}

static void test_bad_types(void **state)
{
    a2_decoder *d = *state;
    bad(d, "[]", A2_EDEC_TYPE, 0, "object");
    bad(d, "\"B\"", A2_EDEC_TYPE, 0, "object");
    bad(d, "{\"action\":1}", A2_EDEC_TYPE, 10, "action");
    bad(d, "{\"action\":\"B\",\"xid\":\"732\"}", A2_EDEC_TYPE, 20, "xid");
    bad(d, "{\"action\":\"B\",\"xid\":7.5}", A2_EDEC_TYPE, 20, "xid");
    bad(d, "{\"action\":\"B\",\"timestamp\":5}", A2_EDEC_TYPE, 26, "timestamp");
    bad(d, "{\"action\":\"B\",\"lsn\":null}", A2_EDEC_TYPE, 20, "lsn");
    bad(d,
        "{\"action\":\"M\",\"transactional\":1,\"prefix\":\"a\",\"content\":"
        "\"\"}",
        A2_EDEC_TYPE, 30, "transactional");
    bad(d, "{\"action\":\"I\",\"table\":[],\"columns\":[]}", A2_EDEC_TYPE, 22,
        "table");
    bad(d, "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":{}}",
        A2_EDEC_TYPE, 44, "array");
    bad(d, "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[1]}",
        A2_EDEC_SYNTAX, 45, "column");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[{\"name\":1,"
        "\"value\":1}]}",
        A2_EDEC_TYPE, 53, "name");
    /* Column values of the wrong JSON type. */
    bad(d, EV_INSERT("\"1\"", "\"{}\"", "null"), A2_EDEC_TYPE, 221, "idx");
    bad(d, EV_INSERT("1.5", "\"{}\"", "null"), A2_EDEC_TYPE, 221, "integer");
    bad(d, EV_INSERT("1e3", "\"{}\"", "null"), A2_EDEC_TYPE, 221, "integer");
    bad(d, EV_INSERT("null", "\"{}\"", "null"), A2_EDEC_TYPE, 221, "not-null");
    bad(d, EV_INSERT("1", "{}", "null"), A2_EDEC_TYPE, SIZE_MAX, "payload");
    bad(d, EV_INSERT("1", "true", "null"), A2_EDEC_TYPE, SIZE_MAX, "payload");
    bad(d, EV_INSERT("1", "null", "null"), A2_EDEC_TYPE, SIZE_MAX, "not-null");
    bad(d, EV_INSERT("1", "\"{}\"", "5"), A2_EDEC_TYPE, SIZE_MAX, "cause");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_lane_events\",\"columns\":["
        "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":\"consumer\","
        "\"value\":\"b\"},"
        "{\"name\":\"lane\",\"value\":\"q\"},{\"name\":\"idx\",\"value\":3},"
        "{\"name\":\"done\",\"value\":\"true\"},{\"name\":\"completed_"
        "attempt\",\"value\":null},"
        "{\"name\":\"returned_event_ids\",\"value\":null}]}",
        A2_EDEC_TYPE, SIZE_MAX, "boolean");
}

static void test_bad_range(void **state)
{
    a2_decoder *d = *state;
    bad(d, EV_INSERT("9223372036854775808", "\"{}\"", "null"), A2_EDEC_RANGE,
        221, "bigint");
    bad(d, EV_INSERT("-9223372036854775809", "\"{}\"", "null"), A2_EDEC_RANGE,
        221, "bigint");
    bad(d, EV_INSERT("123456789012345678901234567890", "\"{}\"", "null"),
        A2_EDEC_RANGE, 221, "out of range");
    bad(d, "{\"action\":\"B\",\"xid\":4294967296}", A2_EDEC_RANGE, 20, "xid");
    bad(d, "{\"action\":\"B\",\"xid\":-1}", A2_EDEC_RANGE, 20, "xid");
    /* integer columns hold int32 */
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_lane_events\",\"columns\":["
        "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":\"consumer\","
        "\"value\":\"b\"},"
        "{\"name\":\"lane\",\"value\":\"q\"},{\"name\":\"idx\",\"value\":3},"
        "{\"name\":\"done\",\"value\":false},{\"name\":\"completed_attempt\","
        "\"value\":2147483648},"
        "{\"name\":\"returned_event_ids\",\"value\":null}]}",
        A2_EDEC_RANGE, SIZE_MAX, "integer");
}

static void test_bad_values(void **state)
{
    a2_decoder *d = *state;
    bad(d, "{\"action\":\"X\"}", A2_EDEC_VALUE, 10, "unknown action");
    bad(d, "{\"action\":\"BB\"}", A2_EDEC_VALUE, 10, "unknown action");
    bad(d, "{\"action\":\"B\",\"action\":\"C\"}", A2_EDEC_VALUE, 14,
        "duplicate");
    bad(d, "{\"action\":\"B\",\"lsn\":\"0193AF40\"}", A2_EDEC_VALUE, 20, "LSN");
    bad(d, "{\"action\":\"B\",\"lsn\":\"/1\"}", A2_EDEC_VALUE, 20, "LSN");
    bad(d, "{\"action\":\"B\",\"lsn\":\"1/\"}", A2_EDEC_VALUE, 20, "LSN");
    bad(d, "{\"action\":\"B\",\"lsn\":\"123456789/1\"}", A2_EDEC_VALUE, 20,
        "LSN");
    bad(d, "{\"action\":\"B\",\"nextlsn\":\"0/x\"}", A2_EDEC_VALUE, 24, "LSN");
    bad(d, "{\"action\":\"B\",\"timestamp\":\"2026-11-29T06:40:48+00\"}",
        A2_EDEC_VALUE, 26, "timestamp");
    bad(d, "{\"action\":\"B\",\"timestamp\":\"2026-02-30 06:40:48+00\"}",
        A2_EDEC_VALUE, 26, "timestamp");
    bad(d,
        "{\"action\":\"B\",\"timestamp\":\"2026-11-29 06:40:48.1234567+00\"}",
        A2_EDEC_VALUE, 26, "timestamp");
    bad(d, "{\"action\":\"B\",\"timestamp\":\"2026-11-29 06:40:48\"}",
        A2_EDEC_VALUE, 26, "timestamp");
    bad(d, "{\"action\":\"B\",\"timestamp\":\"2026-11-29 06:40:48+00 BC\"}",
        A2_EDEC_VALUE, 26, "timestamp");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":["
        "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":\"clear_index\","
        "\"value\":5},"
        "{\"name\":\"session_id\",\"value\":\"s2\"}]}",
        A2_EDEC_VALUE, 142, "duplicate column");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[{\"name\":"
        "\"a\",\"name\":\"b\","
        "\"value\":1}]}",
        A2_EDEC_VALUE, 57, "duplicate");
    /* More columns than the limit. */
    size_t cap = 64 + (A2_DECODER_MAX_COLUMNS + 1) * 32;
    char *line = malloc(cap);
    assert_non_null(line);
    size_t n = (size_t)snprintf(
            line, cap, "{\"action\":\"I\",\"table\":\"x\",\"columns\":[");
    for (int i = 0; i <= A2_DECODER_MAX_COLUMNS; i++)
        n += (size_t)snprintf(line + n, cap - n,
                              "%s{\"name\":\"c%d\",\"value\":1}", i ? "," : "",
                              i);
    n += (size_t)snprintf(line + n, cap - n, "]}");
    bad_len(d, line, n, A2_EDEC_VALUE, SIZE_MAX, "more than");
    free(line);
}

static void test_bad_missing(void **state)
{
    a2_decoder *d = *state;
    bad(d, "{}", A2_EDEC_MISSING, 2, "action");
    bad(d, "{\"xid\":1}", A2_EDEC_MISSING, 9, "action");
    bad(d, "{\"action\":\"I\",\"columns\":[]}", A2_EDEC_MISSING, 27, "table");
    bad(d, "{\"action\":\"I\",\"table\":\"a2_clears\"}", A2_EDEC_MISSING, 34,
        "columns");
    bad(d, "{\"action\":\"U\",\"table\":\"a2_clears\",\"columns\":[]}",
        A2_EDEC_MISSING, 47, "identity");
    bad(d, "{\"action\":\"D\",\"table\":\"a2_clears\"}", A2_EDEC_MISSING, 34,
        "identity");
    bad(d, "{\"action\":\"M\",\"prefix\":\"a\",\"content\":\"\"}",
        A2_EDEC_MISSING, 40, "transactional");
    bad(d, "{\"action\":\"M\",\"transactional\":true,\"content\":\"\"}",
        A2_EDEC_MISSING, 48, "prefix");
    bad(d, "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"\"}",
        A2_EDEC_MISSING, 47, "content");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[{\"name\":"
        "\"session_id\","
        "\"value\":\"s1\"}]}",
        A2_EDEC_MISSING, 44, "clear_index");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[{\"value\":"
        "\"s1\"}]}",
        A2_EDEC_MISSING, 45, "name");
    bad(d,
        "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[{\"name\":"
        "\"clear_index\"}]}",
        A2_EDEC_MISSING, 45, "value");
    /* An a2_cursors identity that is not FULL lacks required columns. */
    bad(d,
        "{\"action\":\"D\",\"table\":\"a2_cursors\",\"identity\":["
        "{\"name\":\"session_id\",\"value\":\"s1\"},{\"name\":\"consumer\","
        "\"value\":\"a\"},"
        "{\"name\":\"cursor_key\",\"value\":\"k\"},{\"name\":\"epoch\","
        "\"value\":1}]}",
        A2_EDEC_MISSING, 46, "kind");
}

/* Columns that start in wal2json's exact shape, with or without "type",
 * and then deviate (an extra key after the value) are scanned again
 * generically; the arena must still hold every kept string once, whatever
 * the line's size. */
static void test_shape_fallback(void **state)
{
    a2_decoder *d = *state;
    size_t cap = 400000;
    char *line = malloc(cap);
    assert_non_null(line);
    size_t n = (size_t)snprintf(
            line, cap,
            "{\"action\":\"I\",\"table\":\"a2_clears\",\"columns\":[");
    for (int i = 0; i < 200; i++) {
        n += (size_t)snprintf(line + n, cap - n,
                              i % 2 ? "{\"name\":\"x%d\",\"value\":\""
                                    : "{\"name\":\"x%d\",\"type\":\"text\","
                                      "\"value\":\"",
                              i);
        memset(line + n, 'v', 1000);
        n += 1000;
        n += (size_t)snprintf(line + n, cap - n, "\",\"optional\":true},");
    }
    n += (size_t)snprintf(
            line + n, cap - n,
            "{\"name\":\"session_id\",\"value\":\"s\",\"position\":1},"
            "{\"name\":\"clear_index\",\"value\":3,\"type\":\"bigint\"}]}");
    const a2_change *c = NULL;
    int r = a2_decoder_decode(d, line, n, &c);
    if (r != 0)
        fail_msg("%s", a2_decoder_last_error(d)->message);
    assert_text(c->new_row->clear.session_id, "s");
    assert_int_equal(c->new_row->clear.clear_index, 3);
    free(line);
}

static void test_depth(void **state)
{
    a2_decoder *d = *state;
    char line[256];
    /* Nesting up to the limit is fine in a skipped key; one more is not. */
    int depth = A2_DECODER_MAX_DEPTH - 1; /* the top object is level 1 */
    size_t n = (size_t)snprintf(line, sizeof line, "{\"action\":\"B\",\"x\":");
    for (int i = 0; i < depth; i++)
        line[n++] = '[';
    for (int i = 0; i < depth; i++)
        line[n++] = ']';
    line[n++] = '}';
    line[n] = '\0';
    (void)ok(d, line);

    n = (size_t)snprintf(line, sizeof line, "{\"action\":\"B\",\"x\":");
    for (int i = 0; i < depth + 1; i++)
        line[n++] = '[';
    for (int i = 0; i < depth + 1; i++)
        line[n++] = ']';
    line[n++] = '}';
    line[n] = '\0';
    bad(d, line, A2_EDEC_DEPTH, 18 + (size_t)depth, "nesting");

    /* Very deep input is refused at the limit, without recursion past it. */
    size_t big = 1000000;
    char *deep = malloc(big + 32);
    assert_non_null(deep);
    n = (size_t)snprintf(deep, 32, "{\"action\":\"B\",\"x\":");
    memset(deep + n, '[', big);
    bad_len(d, deep, n + big, A2_EDEC_DEPTH, 18 + (size_t)depth, "nesting");
    memset(deep + n, '{', big);
    bad_len(d, deep, n + big, A2_EDEC_SYNTAX, 19, "key");
    free(deep);

    /* jsonb nesting is bounded when parsed on request. */
    char j[512];
    n = 0;
    for (int i = 0; i < A2_DECODER_MAX_JSONB_DEPTH + 1; i++)
        j[n++] = '[';
    for (int i = 0; i < A2_DECODER_MAX_JSONB_DEPTH + 1; i++)
        j[n++] = ']';
    json_t *out = (json_t *)1;
    a2_decoder_error err;
    assert_int_equal(a2_decoder_parse_jsonb((a2_change_text){j, n}, &out, &err),
                     A2_EDEC_DEPTH);
    assert_null(out);
    assert_int_equal(err.code, A2_EDEC_DEPTH);
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){j + 1, n - 2}, &out, &err),
            0);
    assert_true(json_is_array(out));
    json_decref(out);
}

static void test_long_lines(void **state)
{
    a2_decoder *d = *state;
    /* A 100 MB string is refused before any allocation for it. */
    size_t big = (size_t)100 * 1024 * 1024;
    char *line = malloc(big + 64);
    assert_non_null(line);
    size_t n = (size_t)snprintf(line, 64, "{\"action\":\"M\",\"content\":\"");
    memset(line + n, 'a', big);
    n += big;
    memcpy(line + n, "\"}", 2);
    n += 2;
    bad_len(d, line, n, A2_EDEC_TOOLONG, A2_DECODER_MAX_LINE, "longer than");

    /* Under a lower limit, so is a smaller one; at the limit it passes. */
    a2_decoder_set_max_line(d, 1000);
    n = (size_t)snprintf(
            line, 64,
            "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"p\","
            "\"content\":\"");
    size_t body = 1000 - n - 2;
    memset(line + n, 'b', body);
    memcpy(line + n + body, "\"}", 2);
    const a2_change *c = NULL;
    assert_int_equal(a2_decoder_decode(d, line, 1000, &c), 0);
    assert_int_equal(c->content.len, body);
    bad_len(d, line, 1001, A2_EDEC_TOOLONG, 1000, NULL);
    a2_decoder_set_max_line(d, 0); /* clamped to 1 */
    bad_len(d, "{}", 2, A2_EDEC_TOOLONG, 1, NULL);
    a2_decoder_set_max_line(d, SIZE_MAX); /* clamped to the maximum */

    /* A 32 MB string within the limit decodes, and reset gives the arena back.
     */
    size_t mid = (size_t)32 * 1024 * 1024;
    n = (size_t)snprintf(
            line, 64,
            "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"p\","
            "\"content\":\"");
    memset(line + n, 'c', mid);
    memcpy(line + n + mid, "\"}", 2);
    assert_int_equal(a2_decoder_decode(d, line, n + mid + 2, &c), 0);
    assert_int_equal(c->content.len, mid);
    a2_decoder_reset(d);
    free(line);
    (void)ok(d, "{\"action\":\"B\"}");
}

static void test_args_and_recovery(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c = (const a2_change *)1;
    assert_int_equal(a2_decoder_decode(NULL, "{}", 2, &c), A2_EDEC_ARG);
    assert_null(c);
    assert_int_equal(a2_decoder_decode(d, NULL, 5, &c), A2_EDEC_ARG);
    assert_int_equal(a2_decoder_decode(d, "{}", 2, NULL), A2_EDEC_ARG);
    assert_null(a2_decoder_last_error(NULL));
    a2_decoder_free(NULL);
    a2_decoder_reset(NULL);
    a2_decoder_set_max_line(NULL, 5);
    a2_change_free(NULL);
    assert_null(a2_change_dup(NULL));
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){"1", 1}, NULL, NULL),
            A2_EDEC_ARG);

    /* After an error the decoder decodes the next line normally. */
    bad(d, "{\"action\":\"B\"", A2_EDEC_SYNTAX, 13, NULL);
    c = ok(d, "{\"action\":\"C\",\"xid\":5}");
    assert_int_equal(c->xid.value, 5);

    assert_string_equal(a2_decoder_strerror(A2_EDEC_UTF8), "utf8");
    assert_string_equal(a2_decoder_strerror(0), "ok");
    assert_string_equal(a2_decoder_strerror(-99), "unknown error");
    assert_string_equal(a2_table_name(A2_TABLE_CURSORS), "a2_cursors");
    assert_string_equal(a2_table_name(A2_TABLE_OTHER), "");
    assert_string_equal(a2_table_name((a2_table)99), "");
}

static void test_jsonb_errors(void **state)
{
    (void)state;
    json_t *j = (json_t *)1;
    a2_decoder_error err;
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){"{\"a\": ", 6}, &j, &err),
            A2_EDEC_SYNTAX);
    assert_null(j);
    assert_int_equal(err.code, A2_EDEC_SYNTAX);
    assert_non_null(strstr(err.message, "jsonb"));
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){"99999999999999999999", 20},
                                   &j, &err),
            A2_EDEC_RANGE);
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){"9223372036854775807", 19},
                                   &j, &err),
            0);
    assert_int_equal(json_integer_value(j), INT64_MAX);
    json_decref(j);
    assert_int_equal(
            a2_decoder_parse_jsonb((a2_change_text){"\"\xff\"", 3}, &j, &err),
            A2_EDEC_UTF8);
    /* errors without an err buffer */
    assert_int_equal(a2_decoder_parse_jsonb((a2_change_text){"[", 1}, &j, NULL),
                     A2_EDEC_SYNTAX);
}

static void test_dup(void **state)
{
    a2_decoder *d = *state;
    const a2_change *c = ok(
            d,
            "{\"action\":\"U\",\"xid\":9,\"timestamp\":\"2026-11-29 "
            "06:40:48+00\","
            "\"lsn\":\"0/10\",\"schema\":\"public\",\"table\":\"a2_cursors\","
            "\"columns\":[" CUR_COLS_NEW "],\"identity\":[" CUR_COLS_OLD "]}");
    a2_change *copy = a2_change_dup(c);
    assert_non_null(copy);
    /* The copy survives the decoder's next line and its reset. */
    (void)ok(d, EV_INSERT("77", "\"[1, 2]\"", "null"));
    a2_decoder_reset(d);
    assert_int_equal(copy->action, A2_ACTION_UPDATE);
    assert_int_equal(copy->table, A2_TABLE_CURSORS);
    assert_int_equal(copy->xid.value, 9);
    assert_text(copy->timestamp, "2026-11-29 06:40:48+00");
    assert_text(copy->schema, "public");
    assert_text(copy->table_name, "a2_cursors");
    assert_text(copy->new_row->cursor.last_error, "boom");
    assert_text(copy->new_row->cursor.types, "[\"a\"]");
    assert_text(copy->new_row->cursor.returned_event_ids, "[]");
    assert_text(copy->new_row->cursor.lane, "L");
    assert_text(copy->old_row->cursor.lane, NULL);
    assert_text(copy->old_row->cursor.kind, "event");
    assert_int_equal(copy->new_row->cursor.completed_attempt.value, INT32_MAX);
    assert_int_equal(copy->old_row->cursor.present,
                     (1u << A2_CURSOR_NCOLS) - 1);
    a2_change_free(copy);

    c = ok(d, "{\"action\":\"M\",\"transactional\":false,\"prefix\":\"p\","
              "\"content\":\"c\"}");
    copy = a2_change_dup(c);
    assert_non_null(copy);
    assert_null(copy->new_row);
    assert_null(copy->old_row);
    assert_text(copy->prefix, "p");
    assert_text(copy->content, "c");
    assert_text(copy->table_name, NULL);
    a2_change_free(copy);
}

/* A test on a fresh fixture (setup, teardown). */
#define T(test) cmocka_unit_test_setup_teardown(test, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
            T(test_begin_commit),
            T(test_event_insert),
            T(test_strings),
            T(test_cursor_update_full),
            T(test_update_toast),
            T(test_other_tables),
            T(test_optional_keys_skipped),
            T(test_bad_syntax),
            T(test_bad_utf8),
            T(test_bad_types),
            T(test_bad_range),
            T(test_bad_values),
            T(test_bad_missing),
            T(test_shape_fallback),
            T(test_depth),
            T(test_long_lines),
            T(test_args_and_recovery),
            T(test_jsonb_errors),
            T(test_dup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
