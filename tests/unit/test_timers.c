/*
 * Unit tests of consumer/timers.c: the lease and retry timer heap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../consumer/timers.h"

static void test_order_and_pop(void **state)
{
    (void)state;
    a2__timers *t = a2__timers_new();
    assert_non_null(t);
    assert_int_equal(a2__timers_next(t), INT64_MAX);
    assert_int_equal(a2__timers_set(t, "s1", "c", "#1", 1, 1, 300), 0);
    assert_int_equal(a2__timers_set(t, "s2", "c", "#2", 1, 2, 100), 0);
    assert_int_equal(a2__timers_set(t, "s3", "c", "#3", 1, 3, 200), 0);
    assert_int_equal(a2__timers_count(t), 3);
    assert_int_equal(a2__timers_next(t), 100);
    a2__timer out;
    assert_int_equal(a2__timers_pop(t, 99, &out), 0);
    assert_int_equal(a2__timers_pop(t, 250, &out), 1);
    assert_string_equal(out.session, "s2");
    assert_string_equal(out.consumer, "c");
    assert_string_equal(out.cursor_key, "#2");
    assert_int_equal(out.head, 2);
    assert_int_equal(a2__timers_pop(t, 250, &out), 1);
    assert_string_equal(out.session, "s3");
    assert_int_equal(a2__timers_pop(t, 250, &out), 0);
    assert_int_equal(a2__timers_count(t), 1);
    a2__timers_free(t);
}

static void test_replace_and_cancel(void **state)
{
    (void)state;
    a2__timers *t = a2__timers_new();
    assert_int_equal(a2__timers_set(t, "s", "c", "k", 1, 5, 100), 0);
    /* same key moves: one timer, new deadline and head */
    assert_int_equal(a2__timers_set(t, "s", "c", "k", 1, 6, 500), 0);
    assert_int_equal(a2__timers_count(t), 1);
    assert_int_equal(a2__timers_next(t), 500);
    /* keys differ by any component; no confusion from concatenation */
    assert_int_equal(a2__timers_set(t, "sc", "", "k", 1, 1, 50), 0);
    assert_int_equal(a2__timers_count(t), 2);
    /* cancel of another epoch leaves it; any epoch (-1) removes it */
    assert_int_equal(a2__timers_cancel(t, "s", "c", "k", 2), 0);
    assert_int_equal(a2__timers_count(t), 2);
    assert_int_equal(a2__timers_cancel(t, "s", "c", "k", 1), 1);
    assert_int_equal(a2__timers_cancel(t, "s", "c", "k", -1), 0);
    assert_int_equal(a2__timers_cancel(t, "sc", "", "k", -1), 1);
    assert_int_equal(a2__timers_count(t), 0);
    assert_int_equal(a2__timers_next(t), INT64_MAX);
    a2__timers_free(t);
}

/* Many timers set, moved and cancelled at random pop in deadline order. */
static void test_random_against_model(void **state)
{
    (void)state;
    enum { N = 3000 };
    static int64_t model[N]; /* deadline, or -1 when none */
    a2__timers *t = a2__timers_new();
    srand(42);
    for (int i = 0; i < N; i++)
        model[i] = -1;
    char key[32];
    for (int round = 0; round < 20000; round++) {
        int i = rand() % N;
        snprintf(key, sizeof key, "k%d", i);
        if (rand() % 4 == 0) {
            int had = a2__timers_cancel(t, "s", "c", key, -1);
            assert_int_equal(had, model[i] >= 0);
            model[i] = -1;
        } else {
            int64_t dl = rand() % 100000;
            assert_int_equal(a2__timers_set(t, "s", "c", key, 0, i, dl), 0);
            model[i] = dl;
        }
    }
    size_t live = 0;
    for (int i = 0; i < N; i++)
        live += model[i] >= 0;
    assert_int_equal(a2__timers_count(t), live);
    int64_t last = -1;
    a2__timer out;
    size_t popped = 0;
    while (a2__timers_pop(t, INT64_MAX, &out)) {
        assert_true(out.deadline_ms >= last);
        last = out.deadline_ms;
        assert_int_equal(model[out.head], out.deadline_ms);
        model[out.head] = -1;
        popped++;
    }
    assert_int_equal(popped, live);
    a2__timers_free(t);
}

static void test_clear_and_free_null(void **state)
{
    (void)state;
    a2__timers_free(NULL);
    a2__timers *t = a2__timers_new();
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", i);
        assert_int_equal(a2__timers_set(t, "s", "c", k, 0, i, i), 0);
    }
    a2__timers_clear(t);
    assert_int_equal(a2__timers_count(t), 0);
    assert_int_equal(a2__timers_set(t, "s", "c", "x", 0, 1, 1), 0);
    assert_int_equal(a2__timers_count(t), 1);
    a2__timers_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_order_and_pop),
            cmocka_unit_test(test_replace_and_cancel),
            cmocka_unit_test(test_random_against_model),
            cmocka_unit_test(test_clear_and_free_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
