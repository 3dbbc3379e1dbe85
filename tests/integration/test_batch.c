/*
 * a2_batch itself, against a real PostgreSQL: statement order, a snapshot
 * per statement, abort and stop rows, and values that only travel as params.
 * The contract runs twice: on the PL/pgSQL a2_batch of schema.sql, then on
 * the native one (sql/a2_batch.c) when the test cluster has it
 * (A2_TEST_PGDEV/lib/a2_batch.so); each has tests of its own besides.
 */
#include "../../store/store_int.h"
#include "a2/schema.h"
#include "a2test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char BATCH[] =
        "select r from a2_batch($1::text[], $2::jsonb) as r";

/* A text[] literal of the statements, each quoted for an array literal. */
static char *array_literal(const char *const *stmts, size_t n)
{
    size_t cap = 16;
    for (size_t i = 0; i < n; i++)
        cap += 2 * strlen(stmts[i]) + 4;
    char *out = malloc(cap);
    assert_non_null(out);
    char *p = out;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '"';
        for (const char *s = stmts[i]; *s; s++) {
            if (*s == '"' || *s == '\\')
                *p++ = '\\';
            *p++ = *s;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return out;
}

/* Runs a batch; returns the result (caller clears it). */
static PGresult *run_batch(PGconn *conn, const char *const *stmts, size_t n,
                           const char *params)
{
    char *arr = array_literal(stmts, n);
    const char *values[2] = {arr, params};
    PGresult *res = PQexecParams(conn, BATCH, 2, NULL, values, NULL, NULL, 0);
    free(arr);
    return res;
}

static json_t *row_json(PGresult *res, int i)
{
    json_error_t jerr;
    json_t *v = json_loads(PQgetvalue(res, i, 0), 0, &jerr);
    assert_non_null(v);
    return v;
}

static void setup_table(PGconn *conn)
{
    a2_test_exec(conn, "drop table if exists batch_t; "
                       "create table batch_t (n int primary key, v text)");
}

/* Statements run in order, each seeing the previous one's writes. */
static void test_order(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    const char *stmts[] = {
            "with i as (insert into batch_t values (1, 'a') returning n) "
            "select jsonb_build_object('step', 1, 'n', (select count(*) from "
            "i))",
            "with i as (insert into batch_t values (2, 'b') returning n) "
            "select jsonb_build_object('step', 2, 'seen', "
            "(select count(*) from batch_t))",
            "select jsonb_build_object('step', 3, 'seen', "
            "(select count(*) from batch_t), 'last', "
            "(select v from batch_t order by n desc limit 1))",
    };
    PGresult *res = run_batch(conn, stmts, 3, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 3);
    for (int i = 0; i < 3; i++) {
        json_t *r = row_json(res, i);
        assert_int_equal(json_integer_value(json_object_get(r, "step")), i + 1);
        if (i == 1)
            /* a data-modifying CTE's rows are invisible to its own select */
            assert_int_equal(json_integer_value(json_object_get(r, "seen")), 1);
        if (i == 2) {
            assert_int_equal(json_integer_value(json_object_get(r, "seen")), 2);
            assert_string_equal(json_string_value(json_object_get(r, "last")),
                                "b");
        }
        json_decref(r);
    }
    PQclear(res);
    PQfinish(conn);
}

/* An abort row raises A2001 with the row as detail and undoes everything. */
static void test_abort_rolls_back(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    const char *stmts[] = {
            "with i as (insert into batch_t values (10, 'x') returning n) "
            "select jsonb_build_object('inserted', (select count(*) from i))",
            "select jsonb_build_object('abort', 'mixed', 'owned', 2)",
            "with i as (insert into batch_t values (11, 'y') returning n) "
            "select jsonb_build_object('inserted', (select count(*) from i))",
    };
    PGresult *res = run_batch(conn, stmts, 3, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "A2001");
    const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
    assert_non_null(detail);
    json_error_t jerr;
    json_t *row = json_loads(detail, 0, &jerr);
    assert_non_null(row);
    assert_string_equal(json_string_value(json_object_get(row, "abort")),
                        "mixed");
    assert_int_equal(json_integer_value(json_object_get(row, "owned")), 2);
    json_decref(row);
    PQclear(res);
    assert_int_equal(a2_test_int(conn, "select count(*) from batch_t"), 0);

    /* Inside a caller's transaction the abort rolls back that too. */
    a2_test_exec(conn, "begin");
    a2_test_exec(conn, "insert into batch_t values (20, 'before')");
    res = run_batch(conn, stmts, 3, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    PQclear(res);
    a2_test_exec(conn, "rollback");
    assert_int_equal(a2_test_int(conn, "select count(*) from batch_t"), 0);
    PQfinish(conn);
}

/* A stop row ends the batch after its own statement's rows. */
static void test_stop(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    const char *stmts[] = {
            "select jsonb_build_object('first', true)",
            "select r from (values (1, jsonb_build_object('stop', 'replay')),"
            " (2, jsonb_build_object('tail', true))) v(o, r) order by o",
            "with i as (insert into batch_t values (30, 'never') returning n) "
            "select jsonb_build_object('inserted', (select count(*) from i))",
            "select jsonb_build_object('abort', 'never reached')",
    };
    PGresult *res = run_batch(conn, stmts, 4, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 3);
    json_t *r = row_json(res, 1);
    assert_string_equal(json_string_value(json_object_get(r, "stop")),
                        "replay");
    json_decref(r);
    r = row_json(res, 2);
    assert_true(json_is_true(json_object_get(r, "tail")));
    json_decref(r);
    PQclear(res);
    assert_int_equal(a2_test_int(conn, "select count(*) from batch_t"), 0);
    PQfinish(conn);
}

/* Values that look like SQL travel through $1 unchanged and never run. */
static void test_params_are_data(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    const char *evil[] = {
            "it's \"quoted\"",
            "$1",
            "-- a comment",
            "'; drop table batch_t; --",
            "$$ dollar $$ \\ backslash",
    };
    size_t n = sizeof evil / sizeof evil[0];
    json_t *params = json_object();
    json_t *values = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(values, json_string(evil[i]));
    json_object_set_new(params, "values", values);
    char *ptext = json_dumps(params, JSON_COMPACT);
    json_decref(params);

    const char *stmts[] = {
            "with i as (insert into batch_t (n, v) "
            " select ord::int, v from jsonb_array_elements_text($1->'values')"
            " with ordinality as x(v, ord) returning n) "
            "select jsonb_build_object('inserted', (select count(*) from i))",
            "select jsonb_build_object('n', n, 'v', v) from batch_t order by n",
    };
    PGresult *res = run_batch(conn, stmts, 2, ptext);
    free(ptext);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), (int)n + 1);
    for (size_t i = 0; i < n; i++) {
        json_t *r = row_json(res, (int)i + 1);
        assert_string_equal(json_string_value(json_object_get(r, "v")),
                            evil[i]);
        json_decref(r);
    }
    PQclear(res);
    assert_int_equal(a2_test_int(conn, "select count(*) from pg_class "
                                       "where relname = 'batch_t'"),
                     1);
    assert_int_equal(a2_test_int(conn, "select count(*) from batch_t"),
                     (int64_t)n);
    PQfinish(conn);
}

/*
 * A statement after the advisory lock sees what the lock's previous holder
 * committed while this batch waited: each statement takes its own snapshot.
 */
struct holder {
    int ready_fd;
    int release_fd;
};

static void *hold_lock(void *arg)
{
    struct holder *h = arg;
    PGconn *conn = a2_test_connect();
    a2_test_exec(conn, "begin");
    a2_test_exec(conn, "select pg_advisory_xact_lock(hashtext('s1'))");
    a2_test_exec(conn, "insert into batch_t values (41, 'committed "
                       "while waiting')");
    char c = 'r';
    assert_int_equal(write(h->ready_fd, &c, 1), 1);
    assert_int_equal(read(h->release_fd, &c, 1), 1);
    a2_test_exec(conn, "commit");
    PQfinish(conn);
    return NULL;
}

static void test_snapshot_after_lock(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    int ready[2], release[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    struct holder h = {ready[1], release[0]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);

    const char *stmts[] = {
            "select jsonb_build_object('locked', true) "
            "from pg_advisory_xact_lock(hashtext($1->>'session'))",
            "select jsonb_build_object('seen', (select count(*) from batch_t))",
    };
    char *arr = array_literal(stmts, 2);
    const char *values[2] = {arr, "{\"session\":\"s1\"}"};
    assert_int_equal(
            PQsendQueryParams(conn, BATCH, 2, NULL, values, NULL, NULL, 0), 1);
    free(arr);
    /* Let the batch reach the lock and wait on it before the commit. */
    PGconn *watch = a2_test_connect();
    int64_t deadline = a2_test_now_ms() + 10000;
    while (a2_test_int(watch,
                       "select count(*) from pg_locks "
                       "where locktype = 'advisory' and not granted") < 1) {
        assert_true(a2_test_now_ms() < deadline);
        usleep(5000);
    }
    PQfinish(watch);
    assert_int_equal(write(release[1], "g", 1), 1);
    pthread_join(th, NULL);

    PGresult *res = PQgetResult(conn);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 2);
    json_t *r = row_json(res, 1);
    assert_int_equal(json_integer_value(json_object_get(r, "seen")), 1);
    json_decref(r);
    PQclear(res);
    while ((res = PQgetResult(conn)) != NULL)
        PQclear(res);
    close(ready[0]);
    close(ready[1]);
    close(release[0]);
    close(release[1]);
    PQfinish(conn);
}

/* A null statements array is an empty batch; a failing statement is an error.
 */
static void test_edges(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    PGresult *res = PQexec(conn, "select count(*) from a2_batch(null, '{}')");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "0");
    PQclear(res);
    const char *bad[] = {"select jsonb_build_object('x', 1/0)"};
    res = run_batch(conn, bad, 1, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22012");
    PQclear(res);
    PQfinish(conn);
}

/*
 * Statements are prepared once per connection (their plans cached); past the
 * limit a new statement still runs, unprepared.
 */
static void test_prepared_and_limit(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    const char *one[] = {"select jsonb_build_object('p', 1, 'x', $1->'x')"};
    for (int i = 0; i < 3; i++) {
        PGresult *res = run_batch(conn, one, 1, "{\"x\": 7}");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        json_t *r = row_json(res, 0);
        assert_int_equal(json_integer_value(json_object_get(r, "x")), 7);
        json_decref(r);
        PQclear(res);
    }
    assert_int_equal(a2_test_int(conn, "select count(*) from "
                                       "pg_prepared_statements where name "
                                       "like 'a2b\\_%'"),
                     1);
    /* A limit of 1: the next two statements run without being prepared. */
    a2_test_exec(conn, "begin");
    a2_test_exec(conn, "create or replace function a2_batch_prepared_limit() "
                       "returns integer language sql immutable as "
                       "'select 1'");
    const char *more[] = {"select jsonb_build_object('p', 2, 'x', $1->'x')",
                          "select jsonb_build_object('p', 3, 'x', $1->'x')"};
    PGresult *res = run_batch(conn, more, 2, "{\"x\": \"it's\"}");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(res), 2);
    for (int i = 0; i < 2; i++) {
        json_t *r = row_json(res, i);
        assert_int_equal(json_integer_value(json_object_get(r, "p")), i + 2);
        assert_string_equal(json_string_value(json_object_get(r, "x")), "it's");
        json_decref(r);
    }
    PQclear(res);
    a2_test_exec(conn, "rollback");
    assert_int_equal(a2_test_int(conn, "select count(*) from "
                                       "pg_prepared_statements where name "
                                       "like 'a2b\\_%'"),
                     1);
    /* Prepared in a transaction that rolls back: the statement stays
     * prepared, the setting that remembers it does not; the next call finds
     * it again. DISCARD ALL forgets both; the next call prepares anew. */
    const char *again[] = {"select jsonb_build_object('p', 4, 'x', $1->'x')"};
    for (int round = 0; round < 3; round++) {
        if (round == 0)
            a2_test_exec(conn, "begin");
        res = run_batch(conn, again, 1, "{\"x\": 4}");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        json_t *r = row_json(res, 0);
        assert_int_equal(json_integer_value(json_object_get(r, "x")), 4);
        json_decref(r);
        PQclear(res);
        if (round == 0)
            a2_test_exec(conn, "rollback");
        if (round == 1)
            a2_test_exec(conn, "discard all");
    }
    assert_int_equal(a2_test_int(conn, "select count(*) from "
                                       "pg_prepared_statements where name "
                                       "like 'a2b\\_%'"),
                     1);
    /* A statement that cannot be prepared fails the call with its error. */
    const char *bad[] = {"select jsonb_build_object('x', missing_column)"};
    res = run_batch(conn, bad, 1, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42703");
    PQclear(res);
    PQfinish(conn);
}

/* ── the native a2_batch ─────────────────────────────────────────────── */

static char native_so[4096];

/* Statements that return something other than jsonb rows, and null
 * statements, are errors; so is a statement that cannot be prepared, each
 * time it is sent. */
static void test_native_errors(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    const char *ints[] = {"select 1"};
    PGresult *res = run_batch(conn, ints, 1, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42804");
    assert_non_null(strstr(PQerrorMessage(conn), "does not return jsonb"));
    PQclear(res);
    res = PQexec(conn, "select a2_batch(array[null]::text[], '{}')");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "22004");
    PQclear(res);
    const char *bad[] = {"select jsonb_build_object('x', missing_column)"};
    for (int i = 0; i < 2; i++) {
        res = run_batch(conn, bad, 1, "{}");
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42703");
        PQclear(res);
    }
    /* In the select list too, with a null params document. */
    res = PQexec(conn, "select a2_batch(array['select jsonb_build_object("
                       "''null'', $1 is null)'], null)");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(res, 0, 0), "{\"null\": true}");
    PQclear(res);
    PQfinish(conn);
}

/* A kept plan follows the table it reads: a column added after the first
 * call shows in the next one. Past the plans it keeps (512), statements
 * still run, unprepared. */
static void test_native_plans(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    setup_table(conn);
    a2_test_exec(conn, "insert into batch_t values (1, 'a')");
    const char *row[] = {"select to_jsonb(t) from batch_t t"};
    PGresult *res = run_batch(conn, row, 1, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    json_t *r = row_json(res, 0);
    assert_null(json_object_get(r, "w"));
    json_decref(r);
    PQclear(res);
    a2_test_exec(conn, "alter table batch_t add column w int default 5");
    res = run_batch(conn, row, 1, "{}");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    r = row_json(res, 0);
    assert_int_equal(json_integer_value(json_object_get(r, "w")), 5);
    json_decref(r);
    PQclear(res);
    enum { MANY = 600 };
    static char texts[MANY][80];
    const char *many[MANY];
    for (int i = 0; i < MANY; i++) {
        snprintf(texts[i], sizeof texts[i],
                 "select jsonb_build_object('i', %d, 'x', $1->'x')", i);
        many[i] = texts[i];
    }
    for (int round = 0; round < 2; round++) {
        res = run_batch(conn, many, MANY, "{\"x\": 9}");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_int_equal(PQntuples(res), MANY);
        for (int i = 0; i < MANY; i += 97) {
            r = row_json(res, i);
            assert_int_equal(json_integer_value(json_object_get(r, "i")), i);
            assert_int_equal(json_integer_value(json_object_get(r, "x")), 9);
            json_decref(r);
        }
        PQclear(res);
    }
    PQfinish(conn);
}

/* liba2store's own call: each statement travels as one element of a binary
 * text[], byte for byte (quotes, backslashes, newlines and tabs included);
 * several statements keep their order, and a call whose statements are all
 * NULL sends an empty array. */
static void test_store_statement_text(void **state)
{
    (void)state;
    a2_store *st = NULL;
    a2_store_error err;
    assert_int_equal(a2_store_open(&st, a2_test_db(), &err), 0);
    const char *stmts[] = {
            "  \n\tselect jsonb_build_object('q', '\"', 'b', E'\\\\',\r\n"
            "\t\t'x',   $1->'x', 'quoted', \"q\".v)   from (select 1 as v) "
            "\"q\"  \n",
            NULL,
            "select jsonb_build_object('second', true)",
    };
    json_t *params = json_pack("{s:i}", "x", 7);
    json_t *rows = NULL, *abort_row = NULL;
    int rc = a2__store_batch(st, stmts, 3, params, &rows, &abort_row);
    if (rc != 0)
        fail_msg("%s", a2_store_last_error(st)->message);
    assert_null(abort_row);
    assert_int_equal(json_array_size(rows), 2);
    json_t *r = json_array_get(rows, 0);
    assert_string_equal(json_string_value(json_object_get(r, "q")), "\"");
    assert_string_equal(json_string_value(json_object_get(r, "b")), "\\");
    assert_int_equal(json_integer_value(json_object_get(r, "x")), 7);
    assert_int_equal(json_integer_value(json_object_get(r, "quoted")), 1);
    assert_true(
            json_is_true(json_object_get(json_array_get(rows, 1), "second")));
    json_decref(rows);
    const char *none[] = {NULL, NULL};
    rc = a2__store_batch(st, none, 2, params, &rows, &abort_row);
    if (rc != 0)
        fail_msg("%s", a2_store_last_error(st)->message);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    json_decref(params);
    a2_store_close(st);
}

/* Which a2_batch the test database runs: 'plpgsql' or 'c'. */
static char *batch_language(void)
{
    PGconn *conn = a2_test_connect();
    char *lang = a2_test_scalar(conn, "select l.lanname from pg_proc p join "
                                      "pg_language l on l.oid = p.prolang "
                                      "where p.proname = 'a2_batch'");
    PQfinish(conn);
    return lang;
}

static int use_plpgsql(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    a2_test_exec(conn, a2_schema_sql);
    PQfinish(conn);
    char *lang = batch_language();
    int rc = strcmp(lang, "plpgsql") == 0 ? 0 : -1;
    free(lang);
    return rc;
}

static int use_native(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    char *so = PQescapeLiteral(conn, native_so, strlen(native_so));
    char sql[8192];
    snprintf(sql, sizeof sql,
             "create or replace function a2_batch(statements text[], params "
             "jsonb) returns setof jsonb language c volatile as %s, "
             "'a2_batch'",
             so);
    PQfreemem(so);
    a2_test_exec(conn, sql);
    PQfinish(conn);
    char *lang = batch_language();
    int rc = strcmp(lang, "c") == 0 ? 0 : -1;
    free(lang);
    return rc;
}

#define CONTRACT                                                               \
    cmocka_unit_test(test_order), cmocka_unit_test(test_abort_rolls_back),     \
            cmocka_unit_test(test_stop),                                       \
            cmocka_unit_test(test_params_are_data),                            \
            cmocka_unit_test(test_snapshot_after_lock),                        \
            cmocka_unit_test(test_edges),                                      \
            cmocka_unit_test(test_store_statement_text)

int main(void)
{
    const struct CMUnitTest plpgsql[] = {
            CONTRACT,
            cmocka_unit_test(test_prepared_and_limit),
    };
    const struct CMUnitTest native[] = {
            CONTRACT,
            cmocka_unit_test(test_native_errors),
            cmocka_unit_test(test_native_plans),
    };
    int failed = cmocka_run_group_tests_name("a2_batch in PL/pgSQL", plpgsql,
                                             use_plpgsql, NULL);
    const char *dir = getenv("A2_TEST_PGDEV");
    snprintf(native_so, sizeof native_so, "%s/lib/a2_batch.so", dir ? dir : "");
    FILE *f = dir ? fopen(native_so, "rb") : NULL;
    if (!f) {
        printf("a2_batch: no native library at %s: its tests skipped\n",
               native_so);
        return failed;
    }
    fclose(f);
    failed += cmocka_run_group_tests_name("a2_batch in C", native, use_native,
                                          use_plpgsql);
    return failed;
}
