/*
 * Helpers shared by a2's test executables (linked into every one).
 */
#ifndef A2_TEST_H
#define A2_TEST_H

#include <libpq-fe.h>
#include <stdint.h>

/* Conninfo of the test database (A2_TEST_DB), or NULL when unset. */
const char *a2_test_db(void);

/*
 * A new connection to the test database; fails the running cmocka test when
 * it cannot connect. The caller frees it with PQfinish.
 */
PGconn *a2_test_connect(void);

/* Runs sql (no parameters), failing the test unless it succeeds. */
void a2_test_exec(PGconn *conn, const char *sql);

/*
 * Runs sql and returns the first column of the first row as a new string
 * (free it), or NULL for SQL null or no row; fails the test on error.
 */
char *a2_test_scalar(PGconn *conn, const char *sql);

/* a2_test_scalar as a 64-bit integer (0 for null). */
int64_t a2_test_int(PGconn *conn, const char *sql);

/* Monotonic milliseconds. */
int64_t a2_test_now_ms(void);

/* Path of a built program: $A2_BIN/name (static buffer, until next call). */
const char *a2_test_bin(const char *name);

#endif
