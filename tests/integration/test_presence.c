/*
 * liba2store presence against a real PostgreSQL, with an injected clock:
 * field-wise last-writer-wins, ties, tombstones, expiry anchored on the
 * store's clock, reads that hide and reap, the namespace lock and the read's
 * WAL position.
 */
#include "a2/state.h"
#include "a2/store.h"
#include "a2test.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef a2_test_fx fx;

static int setup(void **state)
{
    *state = a2_test_fx_new(NULL, 5000000, "room");
    return 0;
}

#define OK(expr) A2_TEST_OK(f->s, expr)

/* Writes one field (value NULL: delete); returns whether it won. */
static bool put(fx *f, const char *participant, const char *field,
                const char *value, int64_t at, int64_t ttl)
{
    a2_presence_field fl = {.field = field, .value = value};
    a2_presence_write_req req =
            a2_test_presence_req(f->ns, participant, at, ttl, &fl, 1);
    a2_presence out;
    OK(a2_store_presence_write(f->s, &req, &out));
    bool won = out.count == 1;
    if (won) {
        assert_string_equal(out.items[0].field, field);
        assert_string_equal(out.items[0].value, value ? value : "null");
        assert_int_equal(out.items[0].at, at);
        assert_int_equal(out.items[0].expires_at, f->now + ttl);
    } else {
        assert_int_equal(out.count, 0);
    }
    a2_presence_free(&out);
    return won;
}

/* The value read for (participant, field), as a new string, or NULL. */
static char *get(fx *f, const char *participant, const char *field)
{
    a2_presence out;
    OK(a2_store_presence_read(f->s, f->ns, &out));
    char *v = NULL;
    for (size_t i = 0; i < out.count; i++)
        if (strcmp(out.items[i].participant, participant) == 0 &&
            strcmp(out.items[i].field, field) == 0)
            v = strdup(out.items[i].value);
    a2_presence_free(&out);
    return v;
}

static void expect(fx *f, const char *participant, const char *field,
                   const char *value)
{
    char *v = get(f, participant, field);
    if (value) {
        assert_non_null(v);
        assert_string_equal(v, value);
    } else {
        assert_null(v);
    }
    free(v);
}

/* A write of p's field (put) that wins (won) or loses, then a read of the
 * field that finds want (NULL: none). */
static void put_expect(fx *f, const char *field, const char *value, int64_t at,
                       int64_t ttl, bool won, const char *want)
{
    if (put(f, "p", field, value, at, ttl) != won)
        fail_msg("the write of %s = %s at %" PRId64 " %s", field,
                 value ? value : "NULL", at, won ? "lost" : "won");
    expect(f, "p", field, want);
}

static int64_t rows_of(fx *f)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "select count(*) from a2_presence where ns = '%s'", f->ns);
    return a2_test_int(f->db, sql);
}

static void test_invalid_arguments(void **state)
{
    fx *f = *state;
    uint64_t trips = a2_store_round_trips(f->s);
    a2_presence out;
    a2_presence_field fl[2] = {{.field = "a", .value = "1"},
                               {.field = "a", .value = "2"}};
    a2_presence_write_req req =
            a2_test_presence_req(f->ns, "p", 1, 1000, fl, 2);
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "twice"));
    req.nfields = 1;
    req.ttl_ms = 0;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.ttl_ms = INT64_MAX;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.ttl_ms = 1000;
    req.at = -1;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.at = 1;
    req.ns = "";
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.ns = f->ns;
    req.participant = NULL;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.participant = "p";
    fl[0].value = "{bad";
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    assert_non_null(strstr(a2_store_last_error(f->s)->message, "not JSON"));
    fl[0].value = "1";
    fl[0].field = "";
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    fl[0].field = "a";
    req.nfields = 0;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    req.nfields = A2_PRESENCE_MAX_FIELDS + 1;
    assert_int_equal(a2_store_presence_write(f->s, &req, &out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_presence_write(f->s, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_presence_read(f->s, "", &out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_presence_read(f->s, "x\xc3", &out),
                     A2_EINVALID_ARGUMENT);
    int64_t reaped = 7;
    assert_int_equal(a2_store_presence_reap(f->s, NULL, 0, &reaped),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_presence_reap(f->s, "", 10, &reaped),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(reaped, 0);
    assert_int_equal(a2_store_round_trips(f->s), trips);
    assert_int_equal(rows_of(f), 0);
    a2_presence_free(NULL);
}

static void test_write_read(void **state)
{
    fx *f = *state;
    a2_presence_field fl[3] = {{.field = "status", .value = "\"online\""},
                               {.field = "cursor", .value = "{\"x\": 1}"},
                               {.field = "gone", .value = NULL}};
    a2_presence_write_req req =
            a2_test_presence_req(f->ns, "ann", 100, 30000, fl, 3);
    req.seen = 42;
    a2_presence out;
    uint64_t trips = a2_store_round_trips(f->s);
    OK(a2_store_presence_write(f->s, &req, &out));
    assert_true(a2_store_round_trips(f->s) - trips <= 2);
    assert_int_equal(out.count, 3); /* in the order given */
    assert_string_equal(out.items[0].field, "status");
    assert_string_equal(out.items[1].field, "cursor");
    assert_string_equal(out.items[2].field, "gone");
    assert_string_equal(out.items[2].value, "null");
    assert_int_equal(out.items[0].seen, 42);
    a2_presence_free(&out);
    put(f, "bob", "status", "\"away\"", 100, 30000);
    trips = a2_store_round_trips(f->s);
    OK(a2_store_presence_read(f->s, f->ns, &out));
    assert_int_equal(a2_store_round_trips(f->s) - trips, 1);
    /* by participant, then field; the tombstone hidden */
    assert_int_equal(out.count, 3);
    assert_string_equal(out.items[0].participant, "ann");
    assert_string_equal(out.items[0].field, "cursor");
    assert_string_equal(out.items[0].value, "{\"x\": 1}");
    assert_string_equal(out.items[1].field, "status");
    assert_int_equal(out.items[1].seen, 42);
    assert_int_equal(out.items[1].at, 100);
    assert_int_equal(out.items[1].expires_at, f->now + 30000);
    assert_string_equal(out.items[2].participant, "bob");
    assert_int_equal(out.items[2].seen, A2_STORE_NONE);
    assert_true(out.lsn > 0);
    uint64_t lsn = out.lsn;
    a2_presence_free(&out);
    /* Another namespace is apart. */
    a2_presence other;
    OK(a2_store_presence_read(f->s, "elsewhere-ns", &other));
    assert_int_equal(other.count, 0);
    assert_true(other.lsn >= lsn);
    a2_presence_free(&other);
}

static void test_lww_and_ties(void **state)
{
    fx *f = *state;
    assert_true(put(f, "p", "s", "1", 200, 10000));
    /* strictly older loses against an unexpired newer row */
    put_expect(f, "s", "0", 199, 10000, false, "1");
    /* a tie goes to the incoming write */
    put_expect(f, "s", "2", 200, 10000, true, "2");
    /* newer wins */
    put_expect(f, "s", "3", 201, 10000, true, "3");
    /* fields are separate registers */
    put_expect(f, "t", "9", 1, 10000, true, "9");
    expect(f, "p", "s", "3");
    /* a write of several fields: each decided alone */
    a2_presence_field fl[2] = {{.field = "s", .value = "4"},
                               {.field = "t", .value = "8"}};
    a2_presence_write_req req =
            a2_test_presence_req(f->ns, "p", 100, 10000, fl, 2);
    a2_presence out;
    OK(a2_store_presence_write(f->s, &req, &out));
    assert_int_equal(out.count, 1);
    assert_string_equal(out.items[0].field, "t");
    a2_presence_free(&out);
    expect(f, "p", "s", "3");
    expect(f, "p", "t", "8");
}

static void test_ttl_on_store_clock(void **state)
{
    fx *f = *state;
    /* The sender's at is far in the past or future: the lifetime still
     * runs from the store's clock. */
    assert_true(put(f, "p", "old", "1", 1, 5000));
    assert_true(put(f, "p", "future", "1", f->now * 10, 5000));
    f->now += 4999;
    expect(f, "p", "old", "1");
    expect(f, "p", "future", "1");
    f->now += 1; /* expires_at reached: hidden */
    expect(f, "p", "old", NULL);
    expect(f, "p", "future", NULL);
    /* An expired newer row loses to an older write. */
    put_expect(f, "future", "2", 5, 5000, true, "2");
}

static void test_tombstones(void **state)
{
    fx *f = *state;
    assert_true(put(f, "p", "s", "\"on\"", 100, 10000));
    /* an older delete loses */
    put_expect(f, "s", NULL, 99, 10000, false, "\"on\"");
    /* a newer delete wins and keeps a tombstone */
    put_expect(f, "s", NULL, 150, 10000, true, NULL);
    assert_int_equal(rows_of(f), 1);
    /* a late older write cannot bring the field back */
    put_expect(f, "s", "\"late\"", 120, 10000, false, NULL);
    /* "null" deletes as NULL does; a tie goes to the incoming write */
    put_expect(f, "s", "\"tie\"", 150, 10000, true, "\"tie\"");
    put_expect(f, "s", "null", 150, 10000, true, NULL);
    /* once the tombstone expires, an older write lands */
    f->now += 10000;
    put_expect(f, "s", "\"back\"", 1, 10000, true, "\"back\"");
}

static void test_reap(void **state)
{
    fx *f = *state;
    assert_true(put(f, "p", "a", "1", 1, 1000));
    assert_true(put(f, "p", "b", NULL, 1, 1000));
    assert_true(put(f, "p", "c", "1", 1, 5000));
    assert_int_equal(rows_of(f), 3);
    f->now += 1000;
    /* a read reaps its namespace's expired rows */
    expect(f, "p", "c", "1");
    assert_int_equal(rows_of(f), 1);
    /* reap works across namespaces, at most limit rows a call */
    char other[80];
    snprintf(other, sizeof other, "%s-2", f->ns);
    a2_presence_field fl[3] = {{.field = "x", .value = "1"},
                               {.field = "y", .value = "1"},
                               {.field = "z", .value = "1"}};
    a2_presence_write_req req = a2_test_presence_req(other, "q", 1, 100, fl, 3);
    a2_presence out;
    OK(a2_store_presence_write(f->s, &req, &out));
    a2_presence_free(&out);
    f->now += 5000;
    /* one namespace's reap leaves the others */
    int64_t total = 0, n = 0;
    OK(a2_store_presence_reap(f->s, other, 100, &n));
    assert_int_equal(n, 3);
    assert_int_equal(rows_of(f), 1);
    total += n;
    OK(a2_store_presence_reap(f->s, other, 100, &n));
    assert_int_equal(n, 0);
    assert_true(put(f, "q", "x", "1", 1, 100)); /* expired again below */
    f->now += 100;
    for (int i = 0; i < 100; i++) {
        OK(a2_store_presence_reap(f->s, NULL, 2, &n));
        assert_true(n <= 2);
        total += n;
        if (n == 0)
            break;
    }
    assert_true(total >= 5); /* x y z there, c and x here (and leftovers) */
    assert_int_equal(rows_of(f), 0);
    assert_int_equal(a2_test_int(f->db, "select count(*) from a2_presence "
                                        "where expires_at <= 5006100"),
                     0);
}

/* A call on f's namespace in a thread of its own (an a2_test_call), and
 * what it got. */
typedef struct {
    fx *f;
    int64_t reaped;
    a2_presence out;
} ns_call;

/* Reaps the namespace (at most 10 rows). */
static int reap(a2_store *s, void *p)
{
    ns_call *r = p;
    return a2_store_presence_reap(s, r->f->ns, 10, &r->reaped);
}

/* Reads the namespace. */
static int read_ns(a2_store *s, void *p)
{
    ns_call *r = p;
    return a2_store_presence_read(s, r->f->ns, &r->out);
}

/* Begins a transaction on f->db that holds the namespace's advisory lock,
 * shared (as a writer does) or not (as a read does). */
static void hold_ns_lock(fx *f, bool shared)
{
    char sql[256];
    a2_test_exec(f->db, "begin");
    snprintf(sql, sizeof sql,
             "select pg_advisory_xact_lock%s(%d, hashtext('%s'))",
             shared ? "_shared" : "", A2_PRESENCE_LOCK_CLASS, f->ns);
    free(a2_test_scalar(f->db, sql));
}

/* A reap waits while a read holds the namespace. */

static void test_reap_waits_for_read(void **state)
{
    fx *f = *state;
    assert_true(put(f, "p", "a", "1", 1, 1000));
    f->now += 1000;
    hold_ns_lock(f, false);
    ns_call r = {.f = f};
    a2_test_call t;
    int waited = a2_test_call_start_blocked(&t, reap, &r, f,
                                            "wait_event = 'advisory'", 3000);
    assert_true(waited);
    assert_int_equal(rows_of(f), 1); /* not reaped while the read holds it */
    a2_test_exec(f->db, "commit");
    a2_test_call_join(&t);
    assert_int_equal(t.rc, 0);
    assert_int_equal(r.reaped, 1);
    assert_int_equal(rows_of(f), 0);
}

/* A read waits for a write in flight in its namespace, and includes it. */
static void test_read_waits_for_writers(void **state)
{
    fx *f = *state;
    char sql[512];
    /* a writer in flight: the shared lock and its row, not committed */
    hold_ns_lock(f, true);
    snprintf(sql, sizeof sql,
             "insert into a2_presence values ('%s', 'w', 'f', '1', null, 1, "
             "%" PRId64 ")",
             f->ns, f->now + 60000);
    a2_test_exec(f->db, sql);
    ns_call r = {.f = f};
    a2_test_call t;
    a2_test_call_start(&t, read_ns, &r, f);
    PGconn *probe = a2_test_connect();
    int waited =
            a2_test_lock_waiters(probe, "wait_event = 'advisory'", 1, 3000) > 0;
    assert_true(waited);
    a2_test_exec(f->db, "commit");
    char *commit_lsn = a2_test_scalar(
            probe, "select (pg_current_wal_insert_lsn() - '0/0')::text");
    a2_test_call_join(&t);
    PQfinish(probe);
    assert_int_equal(t.rc, 0);
    assert_int_equal(r.out.count, 1); /* the write it waited for */
    assert_string_equal(r.out.items[0].participant, "w");
    /* the write's commit ends at or below the read's position */
    assert_true(r.out.lsn >= strtoull(commit_lsn, NULL, 10));
    free(commit_lsn);
    a2_presence_free(&r.out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_invalid_arguments, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_write_read, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_lww_and_ties, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_ttl_on_store_clock, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_tombstones, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_reap, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_reap_waits_for_read, setup,
                                            a2_test_fx_teardown),
            cmocka_unit_test_setup_teardown(test_read_waits_for_writers, setup,
                                            a2_test_fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
