/*
 * a2-consumer's worker side on a real database: affinity routing and the
 * move of a leaving worker's sessions, and workers that misbehave (garbage,
 * an oversize frame, a wrong token, silence) are disconnected with an
 * `error` while the others keep receiving.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "consumer_harness.h"

static PGconn *db;

static int setup(void **state)
{
    *state = db =
            a2_test_connect_reset("truncate a2_events, a2_cursors, a2_clears");
    return 0;
}

static void new_head(int session, int head)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
             "kind, head) values ('s%d', 'c', '#%d', %d, 'event', %d)",
             session, head, head, head);
    a2_test_exec(db, sql);
}

#define NS 12

/*
 * Reads wakes from both workers until n arrived; owner[s] gets the index of
 * the worker that got session s (checks it never changes when set).
 */
static void collect(a2_test_worker *w, int nw, int n, int *owner)
{
    int got = 0;
    int64_t t0 = a2_test_now_ms();
    while (got < n) {
        if (a2_test_now_ms() - t0 > 10000)
            fail_msg("only %d of %d wakes arrived", got, n);
        for (int i = 0; i < nw; i++) {
            a2_test_msg m;
            if (w[i].fd < 0 || a2_test_worker_next(&w[i], 20, &m) != 1)
                continue;
            if (strcmp(m.t, "wake") != 0)
                continue;
            int s = atoi(m.session + 1);
            assert_true(s >= 0 && s < NS);
            if (owner[s] >= 0 && owner[s] != i)
                fail_msg("session s%d went to worker %d, then %d", s, owner[s],
                         i);
            owner[s] = i;
            got++;
        }
    }
}

/* A new head (index head) in every session, then its NS wakes collected. */
static void heads_and_collect(a2_test_worker *w, int head, int *owner)
{
    for (int s = 0; s < NS; s++)
        new_head(s, head);
    collect(w, 2, NS, owner);
}

static void test_affinity_and_move(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w[2];
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_affinity");
    a2_test_worker_open(&w[0], d.sock, "wa", "c", NULL);
    a2_test_worker_open(&w[1], d.sock, "wb", "c", NULL);
    assert_true(a2_test_worker_wait_for(&w[0], "welcome", 5000, &m));
    assert_true(a2_test_worker_wait_for(&w[1], "welcome", 5000, &m));
    /* both subscriptions in: the consumer answers each with a resync */
    assert_true(a2_test_worker_wait_for(&w[0], "resync", 5000, &m));
    assert_true(a2_test_worker_wait_for(&w[1], "resync", 5000, &m));
    int owner[NS];
    for (int s = 0; s < NS; s++)
        owner[s] = -1;
    heads_and_collect(w, 1, owner);
    heads_and_collect(w, 2, owner); /* same worker per session */
    int on0 = 0;
    for (int s = 0; s < NS; s++)
        on0 += owner[s] == 0;
    if (on0 == 0 || on0 == NS)
        fail_msg("rendezvous hashing put all %d sessions on one worker", NS);

    /* worker 0 leaves: worker 1 gets a resync for its sessions */
    a2_test_worker_close(&w[0]);
    assert_true(a2_test_worker_wait_for(&w[1], "resync", 5000, &m));
    assert_string_equal(m.consumer, "c");
    if (!m.all_sessions) {
        int named = 0;
        for (int i = 0; i < m.n_sessions && i < 8; i++) {
            int s = atoi(m.sessions[i] + 1);
            assert_int_equal(owner[s], 0);
            named++;
        }
        assert_true(named > 0);
    }
    /* and from now on every session's wake-ups */
    for (int s = 0; s < NS; s++)
        owner[s] = -1;
    heads_and_collect(w, 3, owner);
    for (int s = 0; s < NS; s++)
        assert_int_equal(owner[s], 1);
    a2_test_worker_close(&w[1]);
    a2_test_consumer_end(&d);
}

/* Reads until an `error` then the close; returns the error code. */
static void expect_error_and_close(a2_test_worker *w, const char *code,
                                   int timeout_ms)
{
    a2_test_msg m;
    int64_t t0 = a2_test_now_ms();
    int seen = 0;
    for (;;) {
        int left = timeout_ms - (int)(a2_test_now_ms() - t0);
        if (left <= 0)
            fail_msg("no %s", seen ? "close after the error" : "error");
        int rc = a2_test_worker_next(w, left, &m);
        if (rc < 0) {
            if (!seen)
                fail_msg("closed without an error frame");
            return;
        }
        if (rc == 1 && strcmp(m.t, "error") == 0) {
            assert_string_equal(m.code, code);
            assert_true(strlen(m.message) > 0);
            seen = 1;
        }
    }
}

static void test_bad_workers_are_dropped(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker good, bad;
    a2_test_msg m;
    char tokfile[160];
    int port = a2_test_free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "tcp:127.0.0.1:%d", port);
    a2_test_consumer_init(&d, "tc_badworkers");
    snprintf(tokfile, sizeof tokfile, "%s/token", d.dir);
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret\n", f);
    fclose(f);
    chmod(tokfile, 0600);
    const char *extra[] = {"--listen", listen, "--token-file", tokfile, NULL};
    a2_test_consumer_start_args(&d, 0, extra);
    a2_test_worker_join(&good, d.sock, "good", "c", NULL, 0);

    /* garbage: a byte msgpack never uses */
    a2_test_worker_open_fd(&bad, a2_test_connect_unix(d.sock), "garbage", NULL,
                           NULL, NULL);
    a2_test_send(bad.fd, "\xc1\xc1\xc1", 3);
    expect_error_and_close(&bad, "protocol", 5000);
    a2_test_worker_close(&bad);

    /* an oversize frame: a 100 000-byte string in a map */
    a2_test_worker_open_fd(&bad, a2_test_connect_unix(d.sock), "big", NULL,
                           NULL, NULL);
    size_t n = 100000;
    char *big = malloc(n + 16);
    big[0] = (char)0x81; /* map of 1 */
    big[1] = (char)0xa1;
    big[2] = 'x';
    big[3] = (char)0xdb; /* str32 */
    big[4] = 0;
    big[5] = (char)((n >> 16) & 0xff);
    big[6] = (char)((n >> 8) & 0xff);
    big[7] = (char)(n & 0xff);
    memset(big + 8, 'a', n);
    a2_test_send(bad.fd, big, n + 8);
    free(big);
    expect_error_and_close(&bad, "too_big", 5000);
    a2_test_worker_close(&bad);

    /* TCP with a wrong token, then the right one */
    a2_test_worker_open_fd(&bad, a2_test_connect_tcp(port), "intruder", "wrong",
                           "c", NULL);
    expect_error_and_close(&bad, "auth", 5000);
    a2_test_worker_close(&bad);
    a2_test_worker tcpw;
    a2_test_worker_open_fd(&tcpw, a2_test_connect_tcp(port), "tcpw", "s3cret",
                           "c2", NULL);
    assert_true(a2_test_worker_wait_for(&tcpw, "welcome", 5000, &m));

    /* silence: no hello within the hello timeout */
    bad.fd = a2_test_connect_unix(d.sock);
    msgpack_unpacker_init(&bad.up, 1 << 16);
    expect_error_and_close(&bad, "timeout", 15000);
    a2_test_worker_close(&bad);

    /* the good workers kept their connections and still receive */
    new_head(1, 1);
    assert_true(a2_test_worker_wait_for(&good, "wake", 5000, &m));
    assert_string_equal(m.session, "s1");
    char sql[256];
    snprintf(sql, sizeof sql,
             "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
             "kind, head) values ('s9', 'c2', '#7', 7, 'event', 7)");
    a2_test_exec(db, sql);
    assert_true(a2_test_worker_wait_for(&tcpw, "wake", 5000, &m));
    assert_string_equal(m.consumer, "c2");
    a2_test_worker_close(&good);
    a2_test_worker_close_end(&tcpw, &d);
}

/* A transaction past the applier's bound: its wake-ups are replaced by one
 * resync, and the audit still has every line. */
static void test_huge_transaction_resyncs(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_huge", &w, 1);
    a2_test_exec(db, "insert into a2_cursors(session_id, consumer, "
                     "cursor_key, epoch, kind, head) select 'h' || i, 'c', "
                     "'#1', 1, 'event', 1 from generate_series(1, 100001) i");
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "resync", 60000, &m));
    assert_string_equal(m.consumer, "c");
    assert_true(m.all_sessions);
    /* no wake-up of that transaction was sent */
    assert_int_equal(a2_test_worker_wait_for(&w, "wake", 300, &m), 0);
    a2_test_worker_close_stop(&w, &d);
    assert_int_equal(a2_test_count_in_file(d.audit, "\n"), 100001);
    a2_test_consumer_cleanup(&d);
}

/*
 * A resync whose table reads fail (the consumer's role may not read
 * a2_cursors for a while) reads them again until they succeed: a lease that
 * only the read can tell of (its transaction was too big to follow) still
 * lapses into a wake-up.
 */
static void test_resync_read_retried(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_exec(db, "do $$ begin if exists (select 1 from pg_roles where "
                     "rolname = 'a2_tc_rebuild') then execute 'drop owned by "
                     "a2_tc_rebuild'; execute 'drop role a2_tc_rebuild'; end "
                     "if; end $$");
    a2_test_exec(db, "create role a2_tc_rebuild login replication");
    a2_test_exec(db, "grant select on all tables in schema public to "
                     "a2_tc_rebuild");
    char conn[1024];
    snprintf(conn, sizeof conn, "%s user=a2_tc_rebuild", a2_test_db());
    const char *extra[] = {"--db", conn, NULL};
    a2_test_consumer_init(&d, "tc_rebuild");
    a2_test_consumer_start_args(&d, 0, extra);
    a2_test_worker_join(&w, d.sock, "w1", "c", NULL, 1);

    a2_test_exec(db, "revoke select on a2_cursors from a2_tc_rebuild");
    int64_t due = a2_test_wall_ms() + 3000;
    char sql[512];
    snprintf(sql, sizeof sql,
             "insert into a2_cursors(session_id, consumer, cursor_key, epoch, "
             "kind, head, claim_holder, attempt_count, claim_expires_at) "
             "select 'h' || i, 'c', '#1', 1, 'event', 1, case when i = 1 "
             "then 'gone' end, case when i = 1 then 1 else 0 end, case when "
             "i = 1 then %" PRId64 " end from generate_series(1, 100001) i",
             due);
    a2_test_exec(db, sql);
    assert_true(a2_test_worker_wait_for(&w, "resync", 60000, &m));
    assert_true(a2_test_wait_in_file(d.log, "could not read the live claims", 1,
                                     20000) >= 1);
    assert_int_equal(a2_test_worker_wait_for(&w, "wake", 300, &m), 0);
    a2_test_exec(db, "grant select on a2_cursors to a2_tc_rebuild");
    /* the next read finds the lease; it lapses into a wake-up */
    assert_true(a2_test_worker_wait_for(&w, "wake", 15000, &m));
    assert_string_equal(m.session, "h1");
    assert_string_equal(m.cursor, "#1");
    assert_true(a2_test_wall_ms() >= due);
    assert_true(a2_test_count_in_file(d.log, "reading again in") >= 1);
    a2_test_worker_close_end(&w, &d);
    a2_test_exec(db, "drop owned by a2_tc_rebuild");
    a2_test_exec(db, "drop role a2_tc_rebuild");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_affinity_and_move, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_bad_workers_are_dropped, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_resync_read_retried, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_huge_transaction_resyncs,
                                            setup, a2_test_consumer_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
