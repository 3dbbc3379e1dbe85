/*
 * Snapshot and presence operations per second on one connection, beside
 * the raw single SQL statement doing the same write or read (the baseline,
 * measured in the same run), and the round trips each costs. Under
 * tests/run each cell runs briefly and the test checks one round trip per
 * operation; `make state-bench` runs longer cells (A2_STATE_BENCH_SECONDS)
 * and prints the table.
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

static double cell_seconds(void)
{
    const char *e = getenv("A2_STATE_BENCH_SECONDS");
    double s = e ? atof(e) : 0.3;
    return s > 0 ? s : 0.3;
}

typedef struct {
    a2_store *s;
    PGconn *raw;
    char session[64];
    char state[1400]; /* about 1 KB of JSON */
    int64_t i;
} bench;

typedef int (*op_fn)(bench *b);

/* Runs op for the cell's length; ops per second, round trips per op. */
static double run_cell(bench *b, op_fn op, double *trips_per_op)
{
    int64_t t0 = a2_test_now_ms(), n = 0;
    uint64_t r0 = a2_store_round_trips(b->s);
    int64_t until = t0 + (int64_t)(cell_seconds() * 1000);
    do {
        for (int k = 0; k < 20; k++, n++)
            if (op(b) != 0)
                fail_msg("operation failed: %s",
                         a2_store_last_error(b->s)->message);
    } while (a2_test_now_ms() < until);
    double secs = (double)(a2_test_now_ms() - t0) / 1000.0;
    if (trips_per_op)
        *trips_per_op = (double)(a2_store_round_trips(b->s) - r0) / (double)n;
    return (double)n / (secs > 0 ? secs : 0.001);
}

static int raw_exec(bench *b, const char *sql, int nparams,
                    const char *const *params)
{
    PGresult *r =
            PQexecParams(b->raw, sql, nparams, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK ||
             PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "raw: %s", PQerrorMessage(b->raw));
    PQclear(r);
    return ok ? 0 : -1;
}

/* ── presence ─────────────────────────────────────────────────────────── */

static int op_presence_write(bench *b)
{
    char v[32];
    snprintf(v, sizeof v, "%" PRId64, ++b->i);
    a2_presence_field f = {.field = "cursor", .value = v};
    a2_presence_write_req req =
            a2_test_presence_req("bench", "p", b->i, 60000, &f, 1);
    a2_presence out;
    int rc = a2_store_presence_write(b->s, &req, &out);
    a2_presence_free(&out);
    return rc;
}

static int raw_presence_write(bench *b)
{
    char v[32], at[32];
    snprintf(v, sizeof v, "%" PRId64, ++b->i);
    snprintf(at, sizeof at, "%" PRId64, b->i);
    const char *p[] = {v, at};
    return raw_exec(b,
                    "insert into a2_presence values ('rawbench', 'p', "
                    "'cursor', $1::jsonb, null, $2::bigint, 9e15::bigint) on "
                    "conflict (ns, participant, field) do update set value = "
                    "excluded.value, at = excluded.at where a2_presence.at <= "
                    "excluded.at",
                    2, p);
}

static int op_presence_read(bench *b)
{
    a2_presence out;
    int rc = a2_store_presence_read(b->s, "bench-read", &out);
    if (rc == 0 && out.count != 20)
        rc = -1;
    a2_presence_free(&out);
    return rc;
}

static int raw_presence_read(bench *b)
{
    return raw_exec(b,
                    "select participant, field, value, seen, at, expires_at "
                    "from a2_presence where ns = 'bench-read' and expires_at "
                    "> 0 and value <> 'null'::jsonb order by participant, "
                    "field",
                    0, NULL);
}

/* ── snapshots ────────────────────────────────────────────────────────── */

static int op_write_state(bench *b)
{
    a2_state_write w = {.up_to_index = ++b->i, .state = b->state};
    a2_state_write_result wr;
    return a2_store_write_state(b->s, b->session, "r", &w, 1, &wr);
}

static int op_write_state_pinned(bench *b)
{
    a2_state_pin pin = {.consumer = "c", .index = 1};
    a2_state_write w = {
            .up_to_index = ++b->i, .state = b->state, .pins = &pin, .npins = 1};
    a2_state_write_result wr;
    int rc = a2_store_write_state(b->s, b->session, "p", &w, 1, &wr);
    if (rc == 0 && wr.pins_accepted != 1)
        rc = -1;
    return rc;
}

static int raw_write_state(bench *b)
{
    char idx[32];
    snprintf(idx, sizeof idx, "%" PRId64, ++b->i);
    const char *p[] = {b->session, idx, b->state};
    return raw_exec(b,
                    "insert into a2_snapshots values ($1, 'raw', $2::bigint, "
                    "$3::jsonb, 0) on conflict (session_id, reducer_name) do "
                    "update set up_to_index = excluded.up_to_index, state = "
                    "excluded.state where a2_snapshots.up_to_index <= "
                    "excluded.up_to_index",
                    3, p);
}

static int op_read_state(bench *b)
{
    a2_state st;
    int rc = a2_store_read_state(b->s, b->session, "r", A2_STORE_NONE, &st);
    if (rc == 0 && !st.found)
        rc = -1;
    a2_state_free(&st);
    return rc;
}

static int raw_read_state(bench *b)
{
    const char *p[] = {b->session};
    return raw_exec(b,
                    "select up_to_index, state::text, written_at from "
                    "a2_snapshots where session_id = $1 and reducer_name = "
                    "'raw'",
                    1, p);
}

static void test_bench(void **state)
{
    (void)state;
    bench b = {0};
    b.s = a2_test_store_open(a2_test_db());
    b.raw = a2_test_connect();
    snprintf(b.session, sizeof b.session, "bench-%d", (int)getpid());
    int off = snprintf(b.state, sizeof b.state, "{\"items\": [");
    for (int k = 0; k < 45; k++)
        off += snprintf(b.state + off, sizeof b.state - (size_t)off,
                        "%s{\"k\": %d, \"v\": \"x\"}", k ? ", " : "", k);
    snprintf(b.state + off, sizeof b.state - (size_t)off, "]}");
    /* a namespace of 20 live fields to read */
    for (int k = 0; k < 20; k++) {
        char part[16];
        snprintf(part, sizeof part, "p%02d", k);
        a2_presence_field f = {.field = "status", .value = "\"online\""};
        a2_presence_write_req req =
                a2_test_presence_req("bench-read", part, 1, 3600000, &f, 1);
        a2_presence out;
        assert_int_equal(a2_store_presence_write(b.s, &req, &out), 0);
        a2_presence_free(&out);
    }
    /* a live head to pin */
    a2_target tg = {.consumer = "c"};
    a2_append_event ev = {.type = "e", .targets = &tg, .ntargets = 1};
    a2_events evs;
    assert_int_equal(a2_store_append(b.s, b.session, &ev, 1, NULL, &evs), 0);
    a2_events_free(&evs);
    a2_claim_request creq = {.holder = "h", .ttl_ms = 600000};
    a2_claim_result cr;
    assert_int_equal(a2_store_claim(b.s, b.session, &creq, &cr), 0);
    a2_claim_result_free(&cr);
    assert_int_equal(op_write_state(&b), 0); /* prepare outside the cells */

    struct {
        const char *name;
        op_fn ours, raw;
    } cells[] = {
            {"presence_write", op_presence_write, raw_presence_write},
            {"presence_read_20", op_presence_read, raw_presence_read},
            {"write_state_1k", op_write_state, raw_write_state},
            {"write_state_1k_pin", op_write_state_pinned, raw_write_state},
            {"read_state", op_read_state, raw_read_state},
    };
    printf("%-20s %12s %12s %14s\n", "operation", "a2 ops/s", "raw SQL/s",
           "round trips");
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        double trips = 0;
        double ours = run_cell(&b, cells[i].ours, &trips);
        double raw = run_cell(&b, cells[i].raw, NULL);
        printf("%-20s %12.0f %12.0f %14.2f\n", cells[i].name, ours, raw, trips);
        /* every operation is one function call, one round trip */
        assert_true(trips > 0.99 && trips < 1.01);
    }
    fflush(stdout);
    PQfinish(b.raw);
    a2_store_close(b.s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_bench),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
