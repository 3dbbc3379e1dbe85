/*
 * Helpers shared by a2's test executables (linked into every one): SQL on
 * the test database, lock waits and plans, clocks and sleeps, files and
 * temporary folders, and TCP socket settings.
 */
#ifndef A2_TEST_H
#define A2_TEST_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/* Conninfo of the test database (A2_TEST_DB), or NULL when unset. */
const char *a2_test_db(void);

/*
 * A new connection to the test database; fails the running cmocka test when
 * it cannot connect. The caller frees it with PQfinish.
 */
PGconn *a2_test_connect(void);

/* A new connection (a2_test_connect) on which sql has run: the setup of a
 * test that starts from empty tables ("truncate ..."). */
PGconn *a2_test_connect_reset(const char *sql);

/* Runs sql (no parameters), failing the test unless it succeeds. */
void a2_test_exec(PGconn *conn, const char *sql);

/*
 * Runs sql and returns the first column of the first row as a new string
 * (free it), or NULL for SQL null or no row; fails the test on error.
 */
char *a2_test_scalar(PGconn *conn, const char *sql);

/* a2_test_scalar as a 64-bit integer (0 for null). */
int64_t a2_test_int(PGconn *conn, const char *sql);

/* a2_test_exec and a2_test_int of the SQL that fmt and its arguments make
 * (at most 4 KiB). */
void a2_test_execf(PGconn *conn, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
int64_t a2_test_intf(PGconn *conn, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* A pg_stat_activity condition that matches the calls liba2store makes
 * (select a2_append(...), select * from a2_read(...), ...). */
#define A2_TEST_STORE_QUERY "query like 'select %a2\\_%'"

/*
 * Polls pg_stat_activity every 10 ms, for at most timeout_ms, until at least
 * n backends wait on a lock and match `where` (a further condition on
 * pg_stat_activity, or NULL). Returns the last count seen. Poll from a
 * connection outside any open transaction: a transaction keeps its first
 * view of pg_stat_activity.
 */
int64_t a2_test_lock_waiters(PGconn *conn, const char *where, int64_t n,
                             int timeout_ms);

/* a2_test_lock_waiters on a connection of its own, opened for the call. */
int64_t a2_test_lock_waiters_probe(const char *where, int64_t n,
                                   int timeout_ms);

/*
 * The plans of the statements sql runs, nested ones too (the statements of
 * the a2_* functions), as auto_explain prints them: one new string (free
 * it), the plans one after the other. Fails the test when sql fails. The
 * connection keeps auto_explain loaded.
 */
char *a2_test_plans(PGconn *conn, const char *sql);

/* Monotonic milliseconds. */
int64_t a2_test_now_ms(void);

/* Epoch milliseconds (CLOCK_REALTIME). */
int64_t a2_test_wall_ms(void);

/* Sleeps ms milliseconds. */
void a2_test_sleep_ms(int ms);

/* The whole file at path as a new string (free it), or NULL when it cannot
 * be opened. */
char *a2_test_read_file(const char *path);

/* How many times needle occurs in the file at path (0 when it is missing). */
int a2_test_count_in_file(const char *path, const char *needle);

/*
 * Waits (every 20 ms, at most timeout_ms) until path holds at least n
 * occurrences of needle: what a2-consumer writes in groups, or logs, comes
 * a moment after what caused it. Returns the last count.
 */
int a2_test_wait_in_file(const char *path, const char *needle, int n,
                         int timeout_ms);

/*
 * A new folder prefix + "XXXXXX" (mkdtemp) in dir, and dir/name in path:
 * 0, or -1 when it cannot be made (a setup's result).
 */
int a2_test_tmpdir(char *dir, size_t dlen, const char *prefix, char *path,
                   size_t plen, const char *name);

/* Removes path and then the folder dir: 0, or -1 when the folder stays (a
 * teardown's result). */
int a2_test_tmpdir_remove(const char *dir, const char *path);

/* Path of a built program: $A2_BIN/name (static buffer, until next call). */
const char *a2_test_bin(const char *name);

/* A TCP socket's keepalive settings and TCP_USER_TIMEOUT. */
typedef struct {
    int keepalive;       /* SO_KEEPALIVE */
    int idle;            /* TCP_KEEPIDLE, s */
    int interval;        /* TCP_KEEPINTVL, s */
    int count;           /* TCP_KEEPCNT */
    int user_timeout_ms; /* TCP_USER_TIMEOUT */
} a2_test_tcp;

/*
 * The settings of each TCP socket of process pid (0: this one) that is
 * connected to port, read through pidfd_getfd; fd numbers of this process
 * listed in skip are left out. Returns how many were found (at most max),
 * or -1 when they cannot be read.
 */
int a2_test_tcp_sockets(int pid, int port, const int *skip, int nskip,
                        a2_test_tcp *out, int max);

#endif
