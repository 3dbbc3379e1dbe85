/*
 * The liba2store helpers of the tests: opening stores, the fixture of the
 * store tests (test_store, test_state, test_presence: a store on the test
 * database on a clock the test moves, a connection of its own for checks in
 * SQL, a session or namespace name no other test uses), presence write
 * requests, store calls in threads for tests of what waits on what, and the
 * OK check of a store call.
 */
#ifndef A2_TEST_STORE_FIXTURE_H
#define A2_TEST_STORE_FIXTURE_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdint.h>

#include "a2/state.h"
#include "a2/store.h"

typedef struct a2_test_fx {
    a2_store *s; /* on the fixture's clock */
    int64_t now; /* that clock, ms */
    PGconn *db;  /* for checks in SQL */
    union {      /* "<prefix>-<pid>-<n>", n counting the fixtures made */
        char session[64];
        char ns[64];
    };
    int ids; /* a counter of the test's own */
} a2_test_fx;

/*
 * A store on conninfo; fails the running test ("open: ...") when it cannot
 * open.
 */
a2_store *a2_test_store_open(const char *conninfo);

/* A store on the test database, or NULL when it cannot open (for threads,
 * which may not fail the test). */
a2_store *a2_test_store_try(void);

/* Checks the outcome of an a2_store_open (rc, *s after it, err) that could
 * not reach a server: A2_ESTORE_UNAVAILABLE, no store, "could not connect". */
void a2_test_expect_unreachable(int rc, const a2_store *s,
                                const a2_store_error *err);

/*
 * A new fixture: a store on conninfo (the test database when NULL) on a
 * clock set at now, and its name from prefix.
 */
a2_test_fx *a2_test_fx_new(const char *conninfo, int64_t now,
                           const char *prefix);

/* Closes the store and the connection and frees the fixture. */
void a2_test_fx_free(a2_test_fx *f);

/* A cmocka teardown: a2_test_fx_free of the fixture in *state. */
int a2_test_fx_teardown(void **state);

/* The fixture's clock (ctx is the fixture), for a2_store_set_clock. */
int64_t a2_test_fx_clock(void *ctx);

/* The rows of table in the fixture's session, with a further condition
 * unless and_where is NULL. */
int64_t a2_test_fx_rows(a2_test_fx *f, const char *table,
                        const char *and_where);

/* Holds the advisory lock of session (what the store takes for a session's
 * writes) in a transaction begun on conn. */
void a2_test_hold_session_lock(PGconn *conn, const char *session);

/* A presence write of nfields fields of participant in ns, sent at `at`
 * with no last-seen mark, living ttl_ms. */
a2_presence_write_req a2_test_presence_req(const char *ns,
                                           const char *participant, int64_t at,
                                           int64_t ttl_ms,
                                           const a2_presence_field *fields,
                                           size_t nfields);

/*
 * A store call made in a thread on a store of its own (on the test
 * database, on the clock of the fixture `clock` unless NULL), for tests of
 * what waits on what: rc is what fn returned, -100 when the store could not
 * open.
 */
typedef int (*a2_test_call_fn)(a2_store *s, void *arg);
typedef struct a2_test_call {
    a2_test_call_fn fn;
    void *arg;
    a2_test_fx *clock;
    int rc;
    pthread_t thread;
} a2_test_call;

/* Starts fn(store, arg) in a new thread; fails the test when it cannot. */
void a2_test_call_start(a2_test_call *c, a2_test_call_fn fn, void *arg,
                        a2_test_fx *clock);

/* a2_test_call_start, then whether a backend comes to wait on a lock
 * (matching where, as a2_test_lock_waiters) within timeout_ms: a call
 * that should block. */
int a2_test_call_start_blocked(a2_test_call *c, a2_test_call_fn fn, void *arg,
                               a2_test_fx *clock, const char *where,
                               int timeout_ms);

/* Waits for the call's thread to end (then c->rc is set). */
void a2_test_call_join(a2_test_call *c);

/* Runs a store call on s, failing the test with its error unless it
 * returns 0. */
#define A2_TEST_OK(s, expr)                                                    \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        if (rc_ != 0)                                                          \
            fail_msg("%s: %s (%s)", #expr, a2_store_code_name(rc_),            \
                     a2_store_last_error(s)->message);                         \
    } while (0)

#endif
