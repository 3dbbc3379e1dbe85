/*
 * common/: the worker-server addresses (parse, split, dial) and the clocks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../common/addr.h"
#include "../../common/buf.h"
#include "../../common/clock.h"
#include "../../common/lsn.h"
#include "../../common/num.h"
#include "../../common/random.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

static void test_kind(void **state)
{
    (void)state;
    assert_int_equal(a2__addr_kind("unix:/tmp/s"), A2__ADDR_UNIX);
    assert_int_equal(a2__addr_kind("unix:"), A2__ADDR_UNIX);
    assert_int_equal(a2__addr_kind("tcp:h:1"), A2__ADDR_TCP);
    assert_int_equal(a2__addr_kind("udp:x"), 0);
    assert_int_equal(a2__addr_kind("/tmp/s"), 0);
    assert_int_equal(a2__addr_kind(""), 0);
    assert_int_equal(a2__addr_kind(NULL), 0);
}

/* One address and what parsing (or splitting) it gives. */
typedef struct {
    const char *spec;
    int rc;
    int kind;
    const char *path, *host, *port;
} addr_case;

static void check_cases(int (*fn)(const char *, a2__addr *),
                        const addr_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        a2__addr a;
        const addr_case *c = &cases[i];
        if (fn(c->spec, &a) != c->rc)
            fail_msg("'%s': not %d", c->spec, c->rc);
        assert_int_equal(a.kind, c->kind);
        if (c->path)
            assert_string_equal(a.path, c->path);
        else
            assert_null(a.path);
        if (c->host) {
            assert_string_equal(a.host, c->host);
            assert_string_equal(a.port, c->port);
        } else {
            assert_null(a.host);
            assert_null(a.port);
        }
        a2__addr_clear(&a);
    }
}

/* The three shapes of a case. */
#define UNIX_OK(spec, path)                                                    \
    {                                                                          \
        spec, A2__ADDR_OK, A2__ADDR_UNIX, path, NULL, NULL                     \
    }
#define TCP_OK(spec, host, port)                                               \
    {                                                                          \
        spec, A2__ADDR_OK, A2__ADDR_TCP, NULL, host, port                      \
    }
#define FAILS(spec, rc)                                                        \
    {                                                                          \
        spec, rc, 0, NULL, NULL, NULL                                          \
    }

#define CHECK_CASES(fn, cases)                                                 \
    check_cases(fn, cases, sizeof(cases) / sizeof(cases)[0])

static void test_parse(void **state)
{
    (void)state;
    static const addr_case cases[] = {
            UNIX_OK("unix:/tmp/a2.sock", "/tmp/a2.sock"),
            TCP_OK("tcp:127.0.0.1:7000", "127.0.0.1", "7000"),
            /* IPv6 in brackets; the last ':' splits */
            TCP_OK("tcp:[::1]:0", "::1", "0"),
            TCP_OK("tcp:::1:80", "::1", "80"),
            FAILS("udp:x", A2__ADDR_ESCHEME),
            FAILS("", A2__ADDR_ESCHEME),
            FAILS("unix:", A2__ADDR_EPATH),
            FAILS("tcp:", A2__ADDR_EHOSTPORT),
            FAILS("tcp:host", A2__ADDR_EHOSTPORT),
            FAILS("tcp::80", A2__ADDR_EHOSTPORT),
            FAILS("tcp:host:", A2__ADDR_EHOSTPORT),
            FAILS("tcp:host:http", A2__ADDR_EPORT),
            FAILS("tcp:host:+80", A2__ADDR_EPORT),
    };
    CHECK_CASES(a2__addr_parse, cases);
    a2__addr_clear(NULL);
}

static void test_split(void **state)
{
    (void)state;
    static const addr_case cases[] = {
            TCP_OK("localhost:9187", "localhost", "9187"),
            /* no check of the port */
            TCP_OK("[::1]:http", "::1", "http"),
            FAILS("nocolon", A2__ADDR_EHOSTPORT),
            FAILS(":1", A2__ADDR_EHOSTPORT),
            FAILS("h:", A2__ADDR_EHOSTPORT),
    };
    CHECK_CASES(a2__addr_split, cases);
}

static void test_dial_errors(void **state)
{
    (void)state;
    char err[512];
    a2__addr a;

    char dir[] = "/tmp/a2-test-common.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char spec[128];
    snprintf(spec, sizeof spec, "unix:%s/none.sock", dir);
    assert_int_equal(a2__addr_parse(spec, &a), A2__ADDR_OK);
    assert_int_equal(a2__addr_dial(&a, spec, 0, err, sizeof err), -1);
    char want[300];
    snprintf(want, sizeof want, "could not connect to %s: %s", spec,
             strerror(ENOENT));
    assert_string_equal(err, want);
    a2__addr_clear(&a);

    /* a listening socket: connected, blocking and non-blocking */
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s.sock", dir);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(l, 4), 0);
    snprintf(spec, sizeof spec, "unix:%s", sa.sun_path);
    assert_int_equal(a2__addr_parse(spec, &a), A2__ADDR_OK);
    int fd = a2__addr_dial(&a, spec, 0, err, sizeof err);
    assert_true(fd >= 0);
    close(fd);
    fd = a2__addr_dial(&a, spec, A2__ADDR_NONBLOCK, err, sizeof err);
    assert_true(fd >= 0);
    close(fd);
    a2__addr_clear(&a);
    close(l);
    unlink(sa.sun_path);
    rmdir(dir);

    char longpath[300];
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    a2__addr u = {.kind = A2__ADDR_UNIX, .path = longpath};
    assert_int_equal(a2__addr_dial(&u, "u", 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "socket path too long: xxx"));

    a2__addr t = {
            .kind = A2__ADDR_TCP, .host = "no-such-host.invalid", .port = "1"};
    assert_int_equal(
            a2__addr_dial(&t, "tcp:no-such-host.invalid:1", 0, err, sizeof err),
            -1);
    assert_non_null(strstr(err, "could not resolve no-such-host.invalid: "));

    a2__addr none = {0};
    assert_int_equal(a2__addr_dial(&none, "x", 0, err, sizeof err), -1);
}

static void test_clocks(void **state)
{
    (void)state;
    int64_t m1 = a2__mono_ms(), u1 = a2__mono_us();
    usleep(20000);
    int64_t m2 = a2__mono_ms(), u2 = a2__mono_us();
    assert_true(m2 - m1 >= 19);
    assert_true(u2 - u1 >= 20000);
    assert_true(u1 / 1000 >= m1);
    /* real time: after 2020-01-01, the two units of one clock */
    int64_t r = a2__real_ms(), ru = a2__real_us();
    assert_true(r > INT64_C(1577836800000));
    assert_true(ru / 1000 >= r - 1000);
    struct timespec ts = a2__mono_timespec(INT64_C(12345678));
    assert_int_equal(ts.tv_sec, 12345);
    assert_int_equal(ts.tv_nsec, 678000000L);
}

static void test_buf_grow(void **state)
{
    (void)state;
    size_t cap = 0;
    char *p = a2__buf_grow(NULL, &cap, 16, 1);
    assert_non_null(p);
    assert_int_equal(cap, 16);
    memset(p, 'x', cap);
    p = a2__buf_grow(p, &cap, 16, 17);
    assert_non_null(p);
    assert_int_equal(cap, 32);
    assert_int_equal(p[15], 'x');
    p = a2__buf_grow(p, &cap, 16, 200);
    assert_non_null(p);
    assert_int_equal(cap, 256);
    p = a2__buf_grow(p, &cap, 16, 256);
    assert_non_null(p);
    assert_int_equal(cap, 256);
    free(p);
}

static void test_num_parse(void **state)
{
    (void)state;
    int64_t v = 7;
    assert_int_equal(a2__num_parse_i64("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(a2__num_parse_i64("-5", -10, 10, &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(a2__num_parse_i64("9223372036854775807", 0, INT64_MAX, &v),
                     0);
    assert_true(v == INT64_MAX);
    v = 7;
    static const char *const bad[] = {
            "",  "x", "4x",  "1 ", " ",
            "+", "-", "101", "-1", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(a2__num_parse_i64(bad[i], 0, 100, &v), -1);
    assert_int_equal(a2__num_parse_i64(NULL, 0, 100, &v), -1);
    assert_int_equal(v, 7);
}

static void test_random_hex(void **state)
{
    (void)state;
    char a[2 * 100 + 2], b[2 * 100 + 2];
    memset(a, '*', sizeof a);
    assert_int_equal(a2__random_hex(a, 100), 0);
    assert_int_equal(strlen(a), 200);
    assert_int_equal(strspn(a, "0123456789abcdef"), 200);
    assert_int_equal(a[201], '*');
    assert_int_equal(a2__random_hex(b, 100), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(a2__random_hex(b, 0), 0);
    assert_string_equal(b, "");
}

static void test_lsn_args(void **state)
{
    (void)state;
    char buf[32];
    uint64_t lsn = UINT64_C(0x10000002A);
    snprintf(buf, sizeof buf, "%X/%X", A2__LSN_ARGS(lsn));
    assert_string_equal(buf, "1/2A");
    snprintf(buf, sizeof buf, "%X/%X", A2__LSN_ARGS(UINT64_MAX));
    assert_string_equal(buf, "FFFFFFFF/FFFFFFFF");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_kind),
            cmocka_unit_test(test_parse),
            cmocka_unit_test(test_split),
            cmocka_unit_test(test_dial_errors),
            cmocka_unit_test(test_clocks),
            cmocka_unit_test(test_lsn_args),
            cmocka_unit_test(test_buf_grow),
            cmocka_unit_test(test_random_hex),
            cmocka_unit_test(test_num_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
