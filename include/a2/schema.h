/*
 * a2 schema: apply sql/schema.sql and check a database is ready for a2.
 * Part of liba2store.
 */
#ifndef A2_SCHEMA_H
#define A2_SCHEMA_H

#include <stddef.h>

/* The schema version sql/schema.sql installs (a2_meta.schema_version). */
#define A2_SCHEMA_VERSION "9"

/* The text of sql/schema.sql, built into the library. */
extern const char a2_schema_sql[];

/*
 * Applies the schema to the database conninfo names (a libpq conninfo; NULL
 * or "" uses the PG* environment). Returns 0, or -1 with a one-line reason in
 * err (always NUL-terminated when errlen > 0).
 */
__attribute__((warn_unused_result)) int
a2_schema_apply(const char *conninfo, char *err, size_t errlen);

/*
 * Checks that the database is ready for a2: every table, every store
 * function (a2_append ... a2_batch), the a2_events_types index, REPLICA
 * IDENTITY FULL on a2_cursors, the schema version and wal_level = logical. Returns 0 when ready; 1 when
 * something is missing, with one line per problem in report ("table a2_events
 * is missing", ...); -1 when the database cannot be reached, with the reason
 * in report.
 */
__attribute__((warn_unused_result)) int
a2_schema_check(const char *conninfo, char *report, size_t reportlen);

#endif
