/*
 * The schema built into liba2store is sql/schema.sql, whole, and holds every
 * object a2_schema_check looks for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "a2/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_embedded_matches_file(void **state)
{
    (void)state;
    const char *top = getenv("A2_TOP");
    char path[4096];
    snprintf(path, sizeof path, "%s/sql/schema.sql", top ? top : ".");
    char *file = slurp(path);
    assert_non_null(file);
    assert_string_equal(a2_schema_sql, file);
    free(file);
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
            "create or replace function a2_batch(statements text[], params "
            "jsonb)",
            "errcode = 'A2001'",
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
            cmocka_unit_test(test_embedded_objects),
    };
    return cmocka_run_group_tests_name("schema_sql", tests, NULL, NULL);
}
