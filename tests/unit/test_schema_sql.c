/*
 * The schema built into liba2store is sql/schema.sql, whole, which is the
 * assembly of the files of sql/src, and holds every object a2_schema_check
 * looks for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "a2/schema.h"
#include "a2test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_embedded_matches_file(void **state)
{
    (void)state;
    const char *top = getenv("A2_TOP");
    char path[4096];
    snprintf(path, sizeof path, "%s/sql/schema.sql", top ? top : ".");
    char *file = a2_test_read_file(path);
    assert_non_null(file);
    assert_string_equal(a2_schema_sql, file);
    free(file);
}

/* sql/schema.sql is what deploy/assemble-schema makes of sql/src now. */
static void test_file_is_assembled(void **state)
{
    (void)state;
    const char *top = getenv("A2_TOP");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s/deploy/assemble-schema", top ? top : ".");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 20, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t n; (n = fread(out + len, 1, cap - len - 1, p)) > 0;) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
    }
    out[len] = '\0';
    assert_int_equal(pclose(p), 0);
    if (strcmp(out, a2_schema_sql) != 0)
        fail_msg("sql/schema.sql is not the assembly of sql/src/*.sql: run "
                 "make (or deploy/assemble-schema > sql/schema.sql)");
    free(out);
}

static void test_embedded_objects(void **state)
{
    (void)state;
    const char *needles[] = {
            "create table if not exists a2_events",
            "create table if not exists a2_cursors",
            "create table if not exists a2_lane_events",
            "create table if not exists a2_clears",
            "create table if not exists a2_snapshots",
            "create table if not exists a2_snapshot_history",
            "create table if not exists a2_snapshot_pins",
            "create table if not exists a2_presence",
            "create index if not exists a2_events_types",
            "alter table a2_cursors replica identity full",
            "create or replace function a2_append(",
            "create or replace function a2_read(",
            "create or replace function a2_cursors(",
            "create or replace function a2_dead_letters(",
            "create or replace function a2_wake_log(",
            "create or replace function a2_claim(",
            "create or replace function a2_renew(",
            "create or replace function a2_complete(",
            "create or replace function a2_fail(",
            "create or replace function a2_redrive(",
            "create or replace function a2_clear(",
            "create or replace function a2_reclaim(",
            "create or replace function a2_pending_sessions(",
            "create or replace function a2_read_state(",
            "create or replace function a2_write_state(",
            "create or replace function a2_presence_write(",
            "create or replace function a2_presence_read(",
            "create or replace function a2_presence_reap(",
            "create or replace function a2_batch(ops jsonb)",
            "when 'INVALID_ARGUMENT' then 'A2001'",
            "('schema_version', '" A2_SCHEMA_VERSION "')",
    };
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        if (!strstr(a2_schema_sql, needles[i]))
            fail_msg("schema lacks: %s", needles[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_embedded_matches_file),
            cmocka_unit_test(test_file_is_assembled),
            cmocka_unit_test(test_embedded_objects),
    };
    return cmocka_run_group_tests_name("schema_sql", tests, NULL, NULL);
}
