/*
 * a2_worker_pool without a database: the options refused before any
 * connection, a store that cannot be reached, NULL-safe calls, and how many
 * queued sessions a slot takes at once by its handlers' time. (The
 * table it runs is tested in test_worker_sched.c; pools that run handlers,
 * through a2-worker, in the integration tests.)
 */
#include "a2/worker.h"

#include "../../worker/worker_int.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

static int handler(void *ctx, int slot, const a2_head *head,
                   a2_worker_reply *reply)
{
    (void)ctx;
    (void)slot;
    (void)head;
    (void)reply;
    return 0;
}

static a2_consumer billing = {.name = "billing"};

/* A pool with these options is refused, with err containing want. */
static void refused(const a2_worker_pool_options *o, const char *want)
{
    char err[256] = "x";
    assert_null(a2_worker_pool_new(o, err, sizeof err));
    if (!strstr(err, want))
        fail_msg("err '%s' does not contain '%s'", err, want);
}

static void test_bad_options(void **state)
{
    (void)state;
    refused(NULL, "a handler and consumers");
    a2_worker_pool_options o = {.consumers = &billing, .nconsumers = 1};
    refused(&o, "a handler and consumers");
    o.handler = handler;
    o.nconsumers = 0;
    refused(&o, "a handler and consumers");
    a2_consumer unnamed = {.name = ""};
    o.consumers = &unnamed;
    o.nconsumers = 1;
    refused(&o, "consumer 0 has no name");
    o.consumers = &billing;
    o.slots = A2_WORKER_MAX_SLOTS + 1;
    refused(&o, "slots must be 1..256, not 257");
    o.slots = -1;
    refused(&o, "slots must be 1..256, not -1");
    o.slots = 2;
    o.name = "";
    refused(&o, "name must not be empty");
    /* Without an err buffer: NULL all the same. */
    assert_null(a2_worker_pool_new(NULL, NULL, 0));
}

/* The runners connect when the pool is made: a store that cannot be reached
 * refuses the pool with the runner's reason. */
static void test_unreachable_store(void **state)
{
    (void)state;
    a2_worker_pool_options o = {
            .db = "host=/nonexistent-a2-dir port=1 connect_timeout=2",
            .consumers = &billing,
            .nconsumers = 1,
            .slots = 2,
            .handler = handler,
    };
    refused(&o, "could not connect to the store");
}

static void test_null_pool(void **state)
{
    (void)state;
    a2_worker_pool_free(NULL);
    a2_worker_pool_stop(NULL);
    a2_worker_pool_stats st;
    memset(&st, 0xff, sizeof st);
    a2_worker_pool_get_stats(NULL, &st);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.runs, 0);
    assert_int_equal(st.completed, 0);
    a2_worker_pool_get_stats(NULL, NULL);
    assert_int_equal(a2_worker_pool_wake(NULL, "s", false, 0),
                     A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_pool_queue(NULL, "s", true), A2_WORKER_EINVAL);
    size_t n = 7;
    assert_int_equal(a2_worker_pool_resync(NULL, NULL, &n), A2_WORKER_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(a2_worker_pool_resync(NULL, "billing", NULL),
                     A2_WORKER_EINVAL);
    a2_worker_event ev = {.type = A2_WORKER_EV_WAKE, .session = "s"};
    assert_int_equal(a2_worker_pool_event(NULL, &ev), A2_WORKER_EINVAL);
}

/* As many sessions as the last run's handlers run in about 5 ms: 32 for
 * quick ones (or none measured), 1 from 5 ms a session. */
static void test_take_count(void **state)
{
    (void)state;
    assert_int_equal(a2__pool_take_count(0), 32);
    assert_int_equal(a2__pool_take_count(20), 32);
    assert_int_equal(a2__pool_take_count(156), 32);
    assert_int_equal(a2__pool_take_count(200), 25);
    assert_int_equal(a2__pool_take_count(1000), 5);
    assert_int_equal(a2__pool_take_count(2500), 2);
    assert_int_equal(a2__pool_take_count(4999), 1);
    assert_int_equal(a2__pool_take_count(5000), 1);
    assert_int_equal(a2__pool_take_count(3600000000LL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_bad_options),
            cmocka_unit_test(test_unreachable_store),
            cmocka_unit_test(test_null_pool),
            cmocka_unit_test(test_take_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
