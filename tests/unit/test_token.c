/*
 * The token file of a TCP connection (wire/token.c, a2_wire_read_token):
 * the one reading that a2-consumer (--token-file), a2-worker (--token-file)
 * and `a2 presence --follow` (--token-file) share. What it keeps and drops,
 * and that a token file read on both sides lets the worker in: the consumer's
 * server compares the tokens byte for byte.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../consumer/server.h"
#include "a2/wire.h"
#include "a2/worker.h"
#include "a2test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define WAIT_MS 3000

static char dir[64];
static char path[96];

static int setup(void **state)
{
    (void)state;
    return a2_test_tmpdir(dir, sizeof dir, "/tmp/a2-test-token.", path,
                          sizeof path, "token");
}

static int teardown(void **state)
{
    (void)state;
    return a2_test_tmpdir_remove(dir, path);
}

/* Writes text (n bytes) to path with mode 0600. */
static void write_token_file(const char *text, size_t n)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    assert_int_equal(close(fd), 0);
}

#define WRITE_LIT(lit) write_token_file(lit, sizeof(lit) - 1)

/* "s3cret \n": the final newline and the blank before it go. */
static void test_trailing_space(void **state)
{
    (void)state;
    char err[256] = "";
    WRITE_LIT("s3cret \n");
    char *t = a2_wire_read_token(path, err, sizeof err);
    if (!t)
        fail_msg("a2_wire_read_token: %s", err);
    assert_string_equal(t, "s3cret");
    free(t);
}

/* The rule: trailing '\n', '\r', ' ' and '\t' are dropped, in any mix;
 * spaces at the start and inside stay. */
static void test_trailing_rule(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        const char *token;
    } cases[] = {
            {"s3cret", "s3cret"},           {"s3cret\n", "s3cret"},
            {"s3cret\r\n", "s3cret"},       {"s3cret\t", "s3cret"},
            {"s3cret \t \r\n\n", "s3cret"}, {" s3cret \n", " s3cret"},
            {"s3 cret \n", "s3 cret"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        write_token_file(cases[i].file, strlen(cases[i].file));
        char *t = a2_wire_read_token(path, err, sizeof err);
        if (!t)
            fail_msg("case %zu: %s", i, err);
        assert_string_equal(t, cases[i].token);
        free(t);
    }
}

/* Nothing but blanks is empty; a second line, or a tab before the end, is
 * refused, not cut. */
static void test_blank_and_two_lines(void **state)
{
    (void)state;
    char err[256] = "";
    WRITE_LIT(" \t\r\n");
    assert_null(a2_wire_read_token(path, err, sizeof err));
    assert_non_null(strstr(err, "is empty"));
    WRITE_LIT("s3cret\nmore\n");
    assert_null(a2_wire_read_token(path, err, sizeof err));
    assert_non_null(strstr(err, "more than one line"));
    WRITE_LIT("\ts3cret\n");
    assert_null(a2_wire_read_token(path, err, sizeof err));
    assert_non_null(strstr(err, "control character"));
}

/* The outcome of one worker's handshake with a server. */
static int handshake(a2__server *srv, const char *connect, const char *token,
                     char *why, size_t whylen)
{
    char err[256];
    a2_worker_options o = {.connect = connect, .token = token, .name = "t"};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    if (!w)
        fail_msg("a2_worker_new: %s", err);
    int outcome = 0;
    int64_t end = a2__mono_ms() + WAIT_MS;
    while (!outcome && a2__mono_ms() < end) {
        assert_int_equal(a2__server_run(srv), 0);
        assert_int_equal(a2_worker_process(w), 0);
        a2_worker_event ev;
        while (!outcome && a2_worker_next(w, &ev) == 1) {
            if (ev.type == A2_WORKER_EV_CONNECTED)
                outcome = A2_WORKER_EV_CONNECTED;
            else if (ev.type == A2_WORKER_EV_DISCONNECTED) {
                snprintf(why, whylen, "%s", ev.message ? ev.message : "");
                outcome = A2_WORKER_EV_DISCONNECTED;
            }
        }
        struct pollfd p[2] = {{a2__server_fd(srv), POLLIN, 0},
                              {a2_worker_fd(w), a2_worker_poll_events(w), 0}};
        poll(p, a2_worker_fd(w) >= 0 ? 2 : 1, 5);
    }
    a2_worker_free(w);
    return outcome;
}

/*
 * One token file, read by the consumer's reading and by the worker's (the
 * same a2_wire_read_token): the worker is let in over TCP. The untrimmed
 * text "s3cret " is a different token to the server.
 */
static void test_consumer_and_worker_agree(void **state)
{
    (void)state;
    char err[256] = "";
    WRITE_LIT("s3cret \n");
    char *consumer_token = a2_wire_read_token(path, err, sizeof err);
    char *worker_token = a2_wire_read_token(path, err, sizeof err);
    assert_non_null(consumer_token);
    assert_non_null(worker_token);
    assert_string_equal(consumer_token, "s3cret");
    assert_string_equal(worker_token, consumer_token);

    a2__server_options so = {
            .tcp_host = "127.0.0.1", .tcp_port = "0", .token = consumer_token};
    a2__server *srv = a2__server_new(&so, err, sizeof err);
    if (!srv)
        fail_msg("a2__server_new: %s", err);
    char connect[64], why[600] = "";
    snprintf(connect, sizeof connect, "tcp:127.0.0.1:%d",
             a2__server_tcp_port(srv));

    assert_int_equal(handshake(srv, connect, worker_token, why, sizeof why),
                     A2_WORKER_EV_CONNECTED);
    assert_int_equal(handshake(srv, connect, "s3cret ", why, sizeof why),
                     A2_WORKER_EV_DISCONNECTED);
    assert_non_null(strstr(why, "wrong token"));

    a2__server_free(srv);
    free(consumer_token);
    free(worker_token);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_trailing_space, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_trailing_rule, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_blank_and_two_lines, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_consumer_and_worker_agree,
                                            setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
