/*
 * The schema built into liba2store is the assembly of the files of sql/src
 * (deploy/assemble-schema), sql/schema.sql includes each of them for psql,
 * and the schema holds every object a2_schema_check looks for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "a2/schema.h"
#include "a2test.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sql/schema.sql's \ir lines name every file of sql/src, in name order. */
static void test_file_includes_every_source(void **state)
{
    (void)state;
    const char *top = getenv("A2_TOP");
    char path[4096];
    snprintf(path, sizeof path, "%s/sql/schema.sql", top ? top : ".");
    char *file = a2_test_read_file(path);
    assert_non_null(file);
    snprintf(path, sizeof path, "%s/sql/src/*.sql", top ? top : ".");
    glob_t g;
    assert_int_equal(glob(path, 0, NULL, &g), 0);
    assert_true(g.gl_pathc > 0);
    size_t n = 0;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "\\ir ", 4) != 0)
            continue;
        if (n >= g.gl_pathc)
            fail_msg("sql/schema.sql includes %s, which is not in sql/src", line + 4);
        const char *base = strrchr(g.gl_pathv[n], '/') + 1;
        char want[512];
        snprintf(want, sizeof want, "src/%s", base);
        if (strcmp(line + 4, want) != 0)
            fail_msg("sql/schema.sql includes %s where %s comes next", line + 4, want);
        n++;
    }
    if (n < g.gl_pathc)
        fail_msg("sql/schema.sql does not include src/%s", strrchr(g.gl_pathv[n], '/') + 1);
    globfree(&g);
    free(file);
}

/* The schema built in is what deploy/assemble-schema makes of sql/src now. */
static void test_embedded_is_assembled(void **state)
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
        fail_msg("the schema built into liba2store is not the assembly of sql/src/*.sql: "
                 "run make");
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
            cmocka_unit_test(test_file_includes_every_source),
            cmocka_unit_test(test_embedded_is_assembled),
            cmocka_unit_test(test_embedded_objects),
    };
    return cmocka_run_group_tests_name("schema_sql", tests, NULL, NULL);
}
