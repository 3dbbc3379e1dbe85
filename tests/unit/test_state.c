/*
 * liba2store snapshots and presence without a database: NULL-safe frees and
 * calls refused without a store.
 */
#include "a2/state.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

static void test_null_safe_frees(void **state)
{
    (void)state;
    a2_state_free(NULL);
    a2_presence_free(NULL);
    a2_state st;
    memset(&st, 0, sizeof st);
    a2_state_free(&st);
    a2_state_free(&st);
    a2_presence p;
    memset(&p, 0, sizeof p);
    a2_presence_free(&p);
    a2_presence_free(&p);
    assert_int_equal(p.count, 0);
    assert_null(p.items);
}

static void test_refused_without_store(void **state)
{
    (void)state;
    a2_state_write w = {.up_to_index = 1, .state = "{}"};
    a2_state_write_result wr;
    assert_int_equal(a2_store_write_state(NULL, "s", "r", &w, 1, &wr),
                     A2_EINVALID_ARGUMENT);
    a2_state st;
    assert_int_equal(a2_store_read_state(NULL, "s", "r", A2_STORE_NONE, &st),
                     A2_EINVALID_ARGUMENT);
    a2_presence_field f = {.field = "f", .value = "1"};
    a2_presence_write_req req = a2_test_presence_req("n", "p", 1, 1, &f, 1);
    a2_presence p;
    assert_int_equal(a2_store_presence_write(NULL, &req, &p),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_presence_read(NULL, "n", &p),
                     A2_EINVALID_ARGUMENT);
    int64_t reaped = 5;
    assert_int_equal(a2_store_presence_reap(NULL, NULL, 10, &reaped),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(reaped, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_null_safe_frees),
            cmocka_unit_test(test_refused_without_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
