/*
 * Worker server internals: rendezvous routing (distribution, stability),
 * the string map, and the coalescing bounded outbound queue.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../consumer/queue.h"
#include "../../common/hash.h"
#include "../../consumer/route.h"
#include "a2/wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define NSESS 20000

static void session_name(char *buf, size_t n, int i)
{
    snprintf(buf, n, "session-%d", i);
}

static void test_distribution(void **state)
{
    (void)state;
    a2__route_cand c[5];
    size_t counts[5] = {0};
    char s[32];

    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d", i);
        c[i].id = a2__route_worker_id(name);
        c[i].serial = (uint64_t)i + 1;
    }
    for (int i = 0; i < NSESS; i++) {
        session_name(s, sizeof s, i);
        size_t k = a2__route_pick(c, 5, s);
        assert_true(k < 5);
        counts[k]++;
    }
    /* 4000 each expected; allow 10% either way */
    for (int i = 0; i < 5; i++) {
        assert_true(counts[i] > 3600);
        assert_true(counts[i] < 4400);
    }
    assert_int_equal(a2__route_pick(c, 0, "x"), 0);
}

/* Removing one of N workers moves only its sessions; adding one takes
 * sessions only to itself. */
static void test_stability(void **state)
{
    (void)state;
    a2__route_cand all[4], rest[3];
    uint64_t owner[NSESS];
    char s[32];
    size_t moved = 0;

    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        all[i].id = a2__route_worker_id(name);
        all[i].serial = (uint64_t)i + 10;
    }
    rest[0] = all[0];
    rest[1] = all[1];
    rest[2] = all[3]; /* w2 leaves */
    for (int i = 0; i < NSESS; i++) {
        session_name(s, sizeof s, i);
        owner[i] = all[a2__route_pick(all, 4, s)].id;
        /* stable across calls */
        assert_true(owner[i] == all[a2__route_pick(all, 4, s)].id);
    }
    for (int i = 0; i < NSESS; i++) {
        session_name(s, sizeof s, i);
        uint64_t now = rest[a2__route_pick(rest, 3, s)].id;
        if (owner[i] != all[2].id)
            assert_true(now == owner[i]);
        else
            moved++;
    }
    assert_true(moved > NSESS / 4 - NSESS / 40);
    assert_true(moved < NSESS / 4 + NSESS / 40);
    /* w2 comes back: sessions only move to it */
    for (int i = 0; i < NSESS; i++) {
        session_name(s, sizeof s, i);
        uint64_t before = rest[a2__route_pick(rest, 3, s)].id;
        uint64_t after = all[a2__route_pick(all, 4, s)].id;
        assert_true(after == before || after == all[2].id);
    }
}

/* Two workers with the same name: the lower serial takes every session. */
static void test_same_name_ties(void **state)
{
    (void)state;
    a2__route_cand c[2] = {{a2__route_worker_id("same"), 9},
                           {a2__route_worker_id("same"), 3}};
    char s[32];
    for (int i = 0; i < 1000; i++) {
        session_name(s, sizeof s, i);
        assert_int_equal(a2__route_pick(c, 2, s), 1);
    }
}

/* The seed of a2__table_hash in a child that has not hashed yet. */
static uint64_t child_seed(void)
{
    int fd[2];
    uint64_t seed = 0;
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint64_t s = a2__hash_seed();
        _exit(write(fd[1], &s, sizeof s) == (ssize_t)sizeof s ? 0 : 1);
    }
    close(fd[1]);
    assert_int_equal(read(fd[0], &seed, sizeof seed), (ssize_t)sizeof seed);
    close(fd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return seed;
}

/* Runs first: no hash is taken in this process before child_seed's. */
static void test_hash(void **state)
{
    (void)state;
    /* each process draws its own seed for the tables */
    uint64_t a = child_seed(), b = child_seed();
    assert_true(a != b);
    assert_true(a2__hash_seed() == a2__hash_seed());
    assert_true(a2__table_hash("ab", 2) == a2__hash("ab", 2, a2__hash_seed()));
    assert_true(a2__table_hash("ab", 2) == a2__table_hash("ab", 2));
    /* the routing hash is the same in every process */
    assert_true(a2__hash("a", 1, 0) != a2__hash("b", 1, 0));
    assert_true(a2__hash("a", 1, 0) != a2__hash("a", 1, 1));
    assert_true(a2__hash("ab", 2, 0) == 0x7f2cb7ebf303d266ULL);
    assert_true(a2__hash("", 0, 0) != a2__hash("\0", 1, 0));
}

static void test_map(void **state)
{
    (void)state;
    a2__map *m = a2__map_new();
    char k[32];
    void *old;
    size_t it = 0, seen = 0, klen;
    void *e = NULL, *val;
    const char *key;

    assert_non_null(m);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(k, sizeof k, "k%d", i);
        assert_int_equal(
                a2__map_put(m, k, (size_t)n, (void *)(intptr_t)(i + 1), &old),
                0);
        assert_null(old);
    }
    assert_int_equal(a2__map_count(m), 5000);
    assert_int_equal(a2__map_put(m, "k7", 2, (void *)(intptr_t)99, &old), 0);
    assert_int_equal((intptr_t)old, 8);
    assert_int_equal((intptr_t)a2__map_get(m, "k7", 2), 99);
    assert_null(a2__map_get(m, "k7x", 3));
    assert_int_equal((intptr_t)a2__map_del(m, "k7", 2), 99);
    assert_null(a2__map_del(m, "k7", 2));
    assert_int_equal(a2__map_count(m), 4999);
    /* binary keys: a NUL inside is part of the key */
    assert_int_equal(a2__map_put(m, "a\0b", 3, m, NULL), 0);
    assert_null(a2__map_get(m, "a", 1));
    assert_ptr_equal(a2__map_get(m, "a\0b", 3), m);
    while (a2__map_next(m, &it, &e, &key, &klen, &val))
        seen++;
    assert_int_equal(seen, 5000);
    a2__map_free(m, NULL);
    a2__map_free(NULL, NULL);

    /* get_new: a zeroed value made once, then the same one found */
    m = a2__map_new();
    assert_non_null(m);
    int *v = a2__map_get_new(m, "n", 1, 4 * sizeof *v);
    assert_non_null(v);
    assert_int_equal(v[0] | v[1] | v[2] | v[3], 0);
    v[2] = 7;
    assert_ptr_equal(a2__map_get_new(m, "n", 1, 4 * sizeof *v), v);
    assert_int_equal(v[2], 7);
    assert_ptr_equal(a2__map_get(m, "n", 1), v);
    assert_int_equal(a2__map_count(m), 1);
    a2__map_free(m, free);
}

/* Drains q into a fresh buffer and decodes the frames into types/heads. */
static size_t drain_all(a2__queue *q, a2_wire_msg *msgs, char (*sess)[32],
                        size_t max, uint64_t *sent)
{
    a2_wire_buf out = {0};
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    size_t n = 0;
    int rc;

    assert_true(a2__queue_drain(q, &out, SIZE_MAX, sent) >= 0);
    assert_int_equal(a2__queue_len(q), 0);
    assert_int_equal(a2_wire_reader_feed(r, out.data, out.len), 0);
    while ((rc = a2_wire_reader_next(r, &msgs[n])) == 1) {
        if (msgs[n].session)
            snprintf(sess[n], 32, "%s", msgs[n].session);
        else
            sess[n][0] = '\0';
        msgs[n].session = NULL;
        msgs[n].consumer = msgs[n].cursor = NULL;
        msgs[n].sessions = NULL;
        n++;
        assert_true(n <= max);
    }
    assert_int_equal(rc, 0);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&out);
    return n;
}

static void test_queue_coalesce(void **state)
{
    (void)state;
    a2__queue *q = a2__queue_new(100);
    a2_wire_msg got[16];
    char sess[16][32];
    uint64_t sent[32] = {0};
    a2_wire_msg pong = {.type = A2_WIRE_PONG, .id = 5};

    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k", 1, 10, 700),
                     A2C_QUEUE_QUEUED);
    assert_int_equal(a2__queue_push_wake(q, "c", "s2", "k", 1, 11, 701),
                     A2C_QUEUE_QUEUED);
    assert_int_equal(a2__queue_push(q, &pong), A2C_QUEUE_QUEUED);
    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k", 5, 12, 702),
                     A2C_QUEUE_COALESCED);
    /* a timer's wake-up (no xid) keeps the commit's xid to wait for */
    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k", 5, 12, 0),
                     A2C_QUEUE_COALESCED);
    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k2", 2, 13, 0),
                     A2C_QUEUE_QUEUED);
    assert_int_equal(a2__queue_push_wake(q, "d", "s1", "k", 3, 14, 0),
                     A2C_QUEUE_QUEUED);
    assert_int_equal(a2__queue_len(q), 5);

    size_t n = drain_all(q, got, sess, 16, sent);
    assert_int_equal(n, 5);
    /* order of first arrival, latest head and lsn */
    assert_int_equal(got[0].type, A2_WIRE_WAKE);
    assert_string_equal(sess[0], "s1");
    assert_int_equal(got[0].head, 5);
    assert_int_equal(got[0].lsn, 12);
    assert_int_equal(got[0].xid, 702); /* the latest commit's */
    assert_string_equal(sess[1], "s2");
    assert_int_equal(got[1].xid, 701);
    assert_int_equal(got[3].xid, 0);
    assert_int_equal(got[2].type, A2_WIRE_PONG);
    assert_int_equal(got[2].id, 5);
    assert_int_equal(got[3].head, 2);
    assert_int_equal(got[4].head, 3);
    assert_int_equal(sent[A2_WIRE_WAKE], 4);
    assert_int_equal(sent[A2_WIRE_PONG], 1);

    /* after draining, the same key queues anew */
    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k", 6, 15, 0),
                     A2C_QUEUE_QUEUED);
    a2__queue_clear(q);
    assert_int_equal(a2__queue_len(q), 0);
    assert_int_equal(a2__queue_push_wake(q, "c", "s1", "k", 7, 16, 0),
                     A2C_QUEUE_QUEUED);
    a2__queue_free(q);
    a2__queue_free(NULL);
}

static void test_queue_overflow(void **state)
{
    (void)state;
    a2__queue *q = a2__queue_new(10);
    a2_wire_msg got[16];
    char sess[16][32];
    char s[32];
    a2_wire_msg bad = {.type = A2_WIRE_PRESENCE,
                       .ns = "n",
                       .participant = "p",
                       .fields_json = "[1]"};

    for (int i = 0; i < 10; i++) {
        session_name(s, sizeof s, i);
        assert_int_equal(a2__queue_push_wake(q, "c", s, "k", i, 1, 0),
                         A2C_QUEUE_QUEUED);
    }
    /* coalescing still works at the bound */
    assert_int_equal(a2__queue_push_wake(q, "c", "session-3", "k", 33, 2, 0),
                     A2C_QUEUE_COALESCED);
    assert_false(a2__queue_overflowed(q));
    /* the 11th distinct frame drops the queue */
    assert_int_equal(a2__queue_push_wake(q, "c", "other", "k", 1, 1, 0),
                     A2C_QUEUE_OVERFLOW);
    assert_true(a2__queue_overflowed(q));
    assert_int_equal(a2__queue_len(q), 0);
    /* while overflowed everything is dropped */
    assert_int_equal(a2__queue_push_wake(q, "c", "x", "k", 1, 1, 0),
                     A2C_QUEUE_DROPPED);
    assert_int_equal(a2__queue_len(q), 0);
    a2__queue_clear_overflow(q);
    assert_int_equal(a2__queue_push_wake(q, "c", "session-3", "k", 1, 1, 0),
                     A2C_QUEUE_QUEUED);
    assert_int_equal(drain_all(q, got, sess, 16, NULL), 1);
    assert_int_equal(got[0].head, 1);
    /* an unencodable frame is refused without queueing */
    assert_int_equal(a2__queue_push(q, &bad), A2C_QUEUE_EINVAL);
    assert_int_equal(a2__queue_len(q), 0);
    a2__queue_free(q);
}

/* Drain stops once out holds max_bytes. */
static void test_queue_drain_chunks(void **state)
{
    (void)state;
    a2__queue *q = a2__queue_new(1000);
    a2_wire_buf out = {0};
    char s[32];
    int moved;

    for (int i = 0; i < 1000; i++) {
        session_name(s, sizeof s, i);
        assert_int_equal(a2__queue_push_wake(q, "c", s, "k", i, 1, 0),
                         A2C_QUEUE_QUEUED);
    }
    moved = a2__queue_drain(q, &out, 1000, NULL);
    assert_true(moved > 0 && moved < 1000);
    assert_true(out.len >= 1000 && out.len < 1100);
    assert_int_equal(a2__queue_len(q), 1000 - (size_t)moved);
    a2_wire_buf_free(&out);
    a2__queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hash), /* first: see there */
            cmocka_unit_test(test_distribution),
            cmocka_unit_test(test_stability),
            cmocka_unit_test(test_same_name_ties),
            cmocka_unit_test(test_map),
            cmocka_unit_test(test_queue_coalesce),
            cmocka_unit_test(test_queue_overflow),
            cmocka_unit_test(test_queue_drain_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
