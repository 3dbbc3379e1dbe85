/*
 * sql/schema.sql and a2_schema_check against a real PostgreSQL: applying
 * twice is harmless, and the check names exactly what is missing.
 */
#include "a2test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "a2/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_apply_twice(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(a2_schema_apply(a2_test_db(), err, sizeof err), 0);
    assert_int_equal(a2_schema_apply(a2_test_db(), err, sizeof err), 0);
    char report[1024];
    int rc = a2_schema_check(a2_test_db(), report, sizeof report);
    if (rc != 0)
        fail_msg("check failed: %s", report);
    assert_string_equal(report, "");
    PGconn *conn = a2_test_connect();
    assert_int_equal(a2_test_int(conn, "select count(*) from a2_meta"), 1);
    char *v = a2_test_scalar(conn, "select value from a2_meta "
                                   "where key = 'schema_version'");
    assert_string_equal(v, A2_SCHEMA_VERSION);
    free(v);
    char *ri = a2_test_scalar(conn, "select relreplident from pg_class "
                                    "where relname = 'a2_cursors'");
    assert_string_equal(ri, "f");
    free(ri);
    PQfinish(conn);
}

/* Rows survive a second apply. */
static void test_apply_keeps_data(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    a2_test_exec(conn,
                 "insert into a2_events (session_id, idx, event_type, "
                 "event_id, created_at) values ('keep', 1, 't', 'i1', 1)");
    char err[512];
    assert_int_equal(a2_schema_apply(a2_test_db(), err, sizeof err), 0);
    assert_int_equal(a2_test_int(conn, "select count(*) from a2_events "
                                       "where session_id = 'keep'"),
                     1);
    a2_test_exec(conn, "delete from a2_events where session_id = 'keep'");
    PQfinish(conn);
}

static void expect_problem(const char *fragment)
{
    char report[2048];
    int rc = a2_schema_check(a2_test_db(), report, sizeof report);
    assert_int_equal(rc, 1);
    if (!strstr(report, fragment))
        fail_msg("expected \"%s\" in report: %s", fragment, report);
}

static void test_check_names_missing_parts(void **state)
{
    (void)state;
    PGconn *conn = a2_test_connect();
    char err[512];

    a2_test_exec(conn, "alter table a2_cursors replica identity default");
    expect_problem("a2_cursors needs REPLICA IDENTITY FULL (it is DEFAULT)");

    a2_test_exec(conn, "drop function a2_complete");
    expect_problem("function a2_complete is missing");

    a2_test_exec(conn, "drop index a2_events_types");
    expect_problem("index a2_events_types is missing");

    a2_test_exec(conn, "drop table a2_lane_events");
    expect_problem("table a2_lane_events is missing");

    a2_test_exec(conn, "update a2_meta set value = '0' "
                       "where key = 'schema_version'");
    expect_problem(
            "schema version is 0, this build expects " A2_SCHEMA_VERSION);

    a2_test_exec(conn, "drop table a2_events cascade");
    expect_problem("table a2_events is missing");

    /* Applying again repairs every one of them. */
    assert_int_equal(a2_schema_apply(a2_test_db(), err, sizeof err), 0);
    char report[1024];
    assert_int_equal(a2_schema_check(a2_test_db(), report, sizeof report), 0);
    PQfinish(conn);
}

/* An unreachable database is -1 with the reason, not a crash. */
static void test_check_unreachable(void **state)
{
    (void)state;
    char report[512];
    int rc = a2_schema_check("host=127.0.0.1 port=1 dbname=none "
                             "connect_timeout=2",
                             report, sizeof report);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(report, "could not connect"));
    assert_null(strchr(report, '\n'));
    char err[512];
    rc = a2_schema_apply("host=127.0.0.1 port=1 dbname=none connect_timeout=2",
                         err, sizeof err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "could not connect"));
}

/* wal_level is checked on a second cluster started with wal_level=replica. */
static void test_check_wal_level(void **state)
{
    (void)state;
    const char *top = getenv("A2_TOP");
    if (!top)
        top = ".";
    char dir[] = "/tmp/a2-walXXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "PG_DEV_WAL_LEVEL=replica %s/deploy/pg-dev start %s", top, dir);
    assert_int_equal(system(cmd), 0);
    char url[256];
    snprintf(cmd, sizeof cmd, "%s/deploy/pg-dev url %s", top, dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(url, sizeof url, p));
    pclose(p);
    url[strcspn(url, "\n")] = '\0';

    char err[512];
    int rc = a2_schema_apply(url, err, sizeof err);
    char report[1024];
    int check = a2_schema_check(url, report, sizeof report);
    snprintf(cmd, sizeof cmd, "%s/deploy/pg-dev destroy %s", top, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(check, 1);
    assert_string_equal(report, "wal_level is replica, a2-consumer needs "
                                "wal_level = logical");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_apply_twice),
            cmocka_unit_test(test_apply_keeps_data),
            cmocka_unit_test(test_check_names_missing_parts),
            cmocka_unit_test(test_check_unreachable),
            cmocka_unit_test(test_check_wal_level),
    };
    return cmocka_run_group_tests_name("schema", tests, NULL, NULL);
}
