/*
 * `a2 state` and `a2 presence` (without --follow) against a real
 * PostgreSQL: output in text and JSON, --at, --reap, and the exit status of
 * usage and runtime errors.
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

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs a2 with the arguments in ap (NULL-terminated, after --db); returns
 * the exit status, stdout in out (a new string), stderr in err. */
static int run_a2v(char **out, char **err, va_list ap)
{
    const char *argv[32];
    int n = 0;
    static char bin[512];
    snprintf(bin, sizeof bin, "%s", a2_test_bin("a2"));
    argv[n++] = bin;
    argv[n++] = "--db";
    argv[n++] = a2_test_db();
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 31)
        argv[n++] = a;
    argv[n] = NULL;
    char outp[] = "/tmp/a2-state-cli-out.XXXXXX";
    char errp[] = "/tmp/a2-state-cli-err.XXXXXX";
    int ofd = mkstemp(outp), efd = mkstemp(errp);
    assert_true(ofd >= 0 && efd >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    char *bufs[2] = {NULL, NULL};
    int fds[2] = {ofd, efd};
    for (int i = 0; i < 2; i++) {
        off_t len = lseek(fds[i], 0, SEEK_END);
        bufs[i] = calloc(1, (size_t)len + 1);
        assert_non_null(bufs[i]);
        assert_int_equal(pread(fds[i], bufs[i], (size_t)len, 0), len);
        close(fds[i]);
    }
    unlink(outp);
    unlink(errp);
    *out = bufs[0];
    *err = bufs[1];
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* run_a2v with args (NULL-terminated). */
static int run_a2(char **out, char **err, ...)
{
    va_list ap;
    va_start(ap, err);
    int rc = run_a2v(out, err, ap);
    va_end(ap);
    return rc;
}

/* Runs a2 with args (NULL-terminated): it exits want, and its stderr holds
 * in_err unless that is NULL. */
static void expect_exit(int want, const char *in_err, ...)
{
    char *out, *err;
    va_list ap;
    va_start(ap, in_err);
    assert_int_equal(run_a2v(&out, &err, ap), want);
    va_end(ap);
    if (in_err)
        assert_non_null(strstr(err, in_err));
    free(out);
    free(err);
}

static void test_state_command(void **state)
{
    (void)state;
    char *out, *err;
    assert_int_equal(run_a2(&out, &err, "state", "cli-s", "r", NULL), 0);
    assert_string_equal(out, "no snapshot\n");
    free(out);
    free(err);
    assert_int_equal(run_a2(&out, &err, "--json", "state", "cli-s", "r", NULL),
                     0);
    assert_string_equal(out, "null\n");
    free(out);
    free(err);
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_state_write w = {.up_to_index = 4, .state = "{\"total\": 12}"};
    a2_state_write_result wr;
    assert_int_equal(a2_store_write_state(s, "cli-s", "r", &w, 1, &wr), 0);
    a2_store_close(s);
    assert_int_equal(run_a2(&out, &err, "state", "cli-s", "r", NULL), 0);
    assert_non_null(strstr(out, "up_to_index 4"));
    assert_non_null(strstr(out, "{\"total\": 12}"));
    free(out);
    free(err);
    assert_int_equal(run_a2(&out, &err, "state", "cli-s", "r", "--json", NULL),
                     0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(o, "up_to_index")), 4);
    assert_int_equal(json_integer_value(json_object_get(
                             json_object_get(o, "state"), "total")),
                     12);
    json_decref(o);
    free(out);
    free(err);
    /* --at below the only version: none */
    assert_int_equal(
            run_a2(&out, &err, "state", "cli-s", "r", "--at", "3", NULL), 0);
    assert_string_equal(out, "no snapshot\n");
    free(out);
    free(err);
    /* usage errors: 2, one line naming the cause */
    expect_exit(2, "SESSION and a REDUCER", "state", "cli-s", NULL);
    expect_exit(2, NULL, "state", "cli-s", "r", "--at", "x", NULL);
    expect_exit(2, "session must not be empty", "state", "", "r", NULL);
}

static void test_presence_command(void **state)
{
    (void)state;
    char *out, *err;
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_presence_field f[2] = {{.field = "status", .value = "\"online\""},
                              {.field = "typing", .value = "true"}};
    a2_presence_write_req req =
            a2_test_presence_req("cli-room", "ann", 1, 600000, f, 2);
    a2_presence p;
    assert_int_equal(a2_store_presence_write(s, &req, &p), 0);
    a2_presence_free(&p);
    req.ttl_ms = 1; /* expires at once */
    req.participant = "bob";
    req.nfields = 1;
    assert_int_equal(a2_store_presence_write(s, &req, &p), 0);
    a2_presence_free(&p);
    usleep(5000);
    assert_int_equal(run_a2(&out, &err, "presence", "cli-room", NULL), 0);
    assert_non_null(strstr(out, "PARTICIPANT"));
    assert_non_null(strstr(out, "\"online\""));
    assert_null(strstr(out, "bob"));
    free(out);
    free(err);
    assert_int_equal(run_a2(&out, &err, "--json", "presence", "cli-room", NULL),
                     0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_array_size(json_object_get(o, "fields")), 2);
    assert_true(json_integer_value(json_object_get(o, "lsn")) > 0);
    json_decref(o);
    free(out);
    free(err);
    /* --reap: the expired one, written again, goes */
    assert_int_equal(a2_store_presence_write(s, &req, &p), 0);
    a2_presence_free(&p);
    usleep(5000);
    assert_int_equal(run_a2(&out, &err, "presence", "cli-room", "--reap", NULL),
                     0);
    assert_string_equal(out, "reaped 1 expired fields in cli-room\n");
    free(out);
    free(err);
    a2_store_close(s);
    /* usage and runtime errors */
    expect_exit(2, NULL, "presence", NULL);
    expect_exit(2, "unix:PATH", "presence", "r", "--follow", "--connect",
                "ftp:x", NULL);
    expect_exit(2, "--token-file", "presence", "r", "--follow", "--connect",
                "tcp:127.0.0.1:1", NULL);
    expect_exit(1, "could not connect", "presence", "r", "--follow",
                "--connect", "unix:/nonexistent/a2.sock", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_state_command),
            cmocka_unit_test(test_presence_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
