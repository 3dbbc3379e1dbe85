/*
 * The store helpers of store_fixture.h: opening stores, the fixture with its
 * injected clock and name, the SQL checks and locks the store tests share,
 * and store calls run in threads.
 */
#include "store_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "a2test.h"

a2_store *a2_test_store_open(const char *conninfo)
{
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, conninfo, &err) != 0)
        fail_msg("open: %s", err.message);
    return s;
}

a2_store *a2_test_store_try(void)
{
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, a2_test_db(), &err) != 0)
        return NULL;
    return s;
}

void a2_test_expect_unreachable(int rc, const a2_store *s,
                                const a2_store_error *err)
{
    assert_int_equal(rc, A2_ESTORE_UNAVAILABLE);
    assert_null(s);
    assert_int_equal(err->code, A2_ESTORE_UNAVAILABLE);
    assert_non_null(strstr(err->message, "could not connect"));
}

int64_t a2_test_fx_clock(void *ctx)
{
    return ((a2_test_fx *)ctx)->now;
}

a2_test_fx *a2_test_fx_new(const char *conninfo, int64_t now,
                           const char *prefix)
{
    static int n;
    a2_test_fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->s = a2_test_store_open(conninfo ? conninfo : a2_test_db());
    f->now = now;
    a2_store_set_clock(f->s, a2_test_fx_clock, f);
    f->db = a2_test_connect();
    snprintf(f->session, sizeof f->session, "%s-%d-%d", prefix, (int)getpid(),
             ++n);
    return f;
}

void a2_test_fx_free(a2_test_fx *f)
{
    a2_store_close(f->s);
    PQfinish(f->db);
    free(f);
}

int a2_test_fx_teardown(void **state)
{
    a2_test_fx_free(*state);
    *state = NULL;
    return 0;
}

int64_t a2_test_fx_rows(a2_test_fx *f, const char *table, const char *and_where)
{
    return a2_test_intf(
            f->db, "select count(*) from %s where session_id = '%s'%s%s", table,
            f->session, and_where ? " and " : "", and_where ? and_where : "");
}

static void *call_thread(void *p)
{
    a2_test_call *c = p;
    a2_store *s = a2_test_store_try();
    if (!s) {
        c->rc = -100;
        return NULL;
    }
    if (c->clock)
        a2_store_set_clock(s, a2_test_fx_clock, c->clock);
    c->rc = c->fn(s, c->arg);
    a2_store_close(s);
    return NULL;
}

void a2_test_call_start(a2_test_call *c, a2_test_call_fn fn, void *arg,
                        a2_test_fx *clock)
{
    *c = (a2_test_call){.fn = fn, .arg = arg, .clock = clock};
    assert_int_equal(pthread_create(&c->thread, NULL, call_thread, c), 0);
}

int a2_test_call_start_blocked(a2_test_call *c, a2_test_call_fn fn, void *arg,
                               a2_test_fx *clock, const char *where,
                               int timeout_ms)
{
    a2_test_call_start(c, fn, arg, clock);
    return a2_test_lock_waiters_probe(where, 1, timeout_ms) > 0;
}

void a2_test_call_join(a2_test_call *c)
{
    pthread_join(c->thread, NULL);
}

void a2_test_hold_session_lock(PGconn *conn, const char *session)
{
    a2_test_exec(conn, "begin");
    a2_test_execf(conn, "select pg_advisory_xact_lock(hashtext('%s'))",
                  session);
}

a2_presence_write_req a2_test_presence_req(const char *ns,
                                           const char *participant, int64_t at,
                                           int64_t ttl_ms,
                                           const a2_presence_field *fields,
                                           size_t nfields)
{
    return (a2_presence_write_req){.ns = ns,
                                   .participant = participant,
                                   .at = at,
                                   .seen = A2_STORE_NONE,
                                   .ttl_ms = ttl_ms,
                                   .fields = fields,
                                   .nfields = nfields};
}
