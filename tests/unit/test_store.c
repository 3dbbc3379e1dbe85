/*
 * liba2store without a database: error names, NULL-safe frees and the
 * arguments refused before any connection is made.
 */
#include "a2/store.h"
#include "store_fixture.h"

/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

static void test_code_names(void **state)
{
    (void)state;
    assert_string_equal(a2_store_code_name(A2_STORE_OK), "OK");
    assert_string_equal(a2_store_code_name(A2_EINVALID_ARGUMENT),
                        "INVALID_ARGUMENT");
    assert_string_equal(a2_store_code_name(A2_ESTORE_UNAVAILABLE),
                        "STORE_UNAVAILABLE");
    assert_string_equal(a2_store_code_name(A2_ESCHEMA_MISSING),
                        "SCHEMA_MISSING");
    assert_string_equal(a2_store_code_name(A2_EPARTIAL_DUPLICATE_BATCH),
                        "PARTIAL_DUPLICATE_BATCH");
    assert_string_equal(a2_store_code_name(A2_ESUPERSEDED_ATTEMPT),
                        "SUPERSEDED_ATTEMPT");
    assert_string_equal(a2_store_code_name(A2_ESESSION_CLEARED),
                        "SESSION_CLEARED");
    assert_string_equal(a2_store_code_name(A2_ENO_SUCH_EVENT), "NO_SUCH_EVENT");
    assert_string_equal(a2_store_code_name(A2_ESTORE_FAILED), "STORE_FAILED");
    assert_string_equal(a2_store_code_name(A2_ESTORE_NOMEM), "OUT_OF_MEMORY");
    assert_string_equal(a2_store_code_name(-12345), "UNKNOWN");
}

static void test_null_safe(void **state)
{
    (void)state;
    a2_store_close(NULL);
    assert_null(a2_store_last_error(NULL));
    assert_int_equal(a2_store_round_trips(NULL), 0);
    a2_store_set_clock(NULL, NULL, NULL);
    a2_store_set_ids(NULL, NULL, NULL);
    a2_events_free(NULL);
    a2_heads_free(NULL);
    a2_cursors_free(NULL);
    a2_claim_result_free(NULL);
    a2_renew_result_free(NULL);
    a2_complete_result_free(NULL);
    a2_sessions_free(NULL);
    a2_events ev;
    memset(&ev, 0, sizeof ev);
    a2_events_free(&ev);
    a2_events_free(&ev);
    assert_null(ev.items);
    a2_claim_result cr;
    memset(&cr, 0, sizeof cr);
    a2_claim_result_free(&cr);
    assert_int_equal(cr.heads.count, 0);
}

static void test_refused_without_store(void **state)
{
    (void)state;
    a2_store_error err;
    assert_int_equal(a2_store_open(NULL, "", &err), A2_EINVALID_ARGUMENT);
    assert_int_equal(err.code, A2_EINVALID_ARGUMENT);
    a2_events out;
    a2_append_event e = {.type = "t"};
    assert_int_equal(a2_store_append(NULL, "s", &e, 1, NULL, &out),
                     A2_EINVALID_ARGUMENT);
    assert_int_equal(a2_store_read(NULL, "s", NULL, &out),
                     A2_EINVALID_ARGUMENT);
    a2_claim_result cr;
    a2_claim_request req = {.holder = "h", .ttl_ms = 1};
    assert_int_equal(a2_store_claim(NULL, "s", &req, &cr),
                     A2_EINVALID_ARGUMENT);
    a2_clear_result clr;
    assert_int_equal(a2_store_clear(NULL, "s", A2_STORE_NONE, NULL, &clr),
                     A2_EINVALID_ARGUMENT);
}

static void test_unreachable_server(void **state)
{
    (void)state;
    a2_store *s = (a2_store *)&s; /* overwritten with NULL */
    a2_store_error err;
    int rc = a2_store_open(&s, "host=/nonexistent-a2-socket-dir port=1", &err);
    a2_test_expect_unreachable(rc, s, &err);
    assert_null(strchr(err.message, '\n'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_code_names),
            cmocka_unit_test(test_null_safe),
            cmocka_unit_test(test_refused_without_store),
            cmocka_unit_test(test_unreachable_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
