/*
 * Unit tests of consumer/audit.c: appending, torn-tail repair, the resume
 * point (tail + state file), reopen after rotation, errors.
 */
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../consumer/audit.h"
#include "a2test.h"

static char dir[256];
static char path[300];
static char spath[310];

static int setup(void **state)
{
    (void)state;
    if (a2_test_tmpdir(dir, sizeof dir, "/tmp/a2-test-audit.", path,
                       sizeof path, "audit.jsonl") != 0)
        return -1;
    snprintf(spath, sizeof spath, "%s.lsn", path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *p)
{
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void append_raw(const char *text)
{
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define LINE(lsn, n) "{\"lsn\":\"" lsn "\",\"op\":\"update\",\"n\":" #n "}\n"

/* The audit file at path, opened (its resume point in r). */
static a2__audit *open_ok(a2__audit_resume *r)
{
    char err[256];
    a2__audit *a = a2__audit_open(path, r, err, sizeof err);
    assert_non_null(a);
    return a;
}

/* Writes text, n lines, to a: accepted. */
static void write_ok(a2__audit *a, const char *text, size_t n)
{
    char err[256];
    assert_int_equal(a2__audit_write(a, text, strlen(text), n, err, sizeof err),
                     0);
}

static void test_lsn_text(void **state)
{
    (void)state;
    uint64_t l;
    char buf[32];
    assert_int_equal(a2__lsn_parse("0/1D78D60", &l), 0);
    assert_true(l == 0x1D78D60);
    assert_int_equal(a2__lsn_parse("AB/0", &l), 0);
    assert_true(l == (UINT64_C(0xAB) << 32));
    assert_string_equal(a2__lsn_format(UINT64_C(0x10000002A), buf, sizeof buf),
                        "1/2A");
    assert_string_equal(a2__lsn_format(0, buf, sizeof buf), "0/0");
    assert_string_equal(a2__lsn_format(UINT64_MAX, buf, sizeof buf),
                        "FFFFFFFF/FFFFFFFF");
    char small[4];
    assert_string_equal(
            a2__lsn_format(UINT64_C(0xAB00000001), small, sizeof small), "AB/");
    assert_int_equal(a2__lsn_parse("1/2X", &l), -1);
    assert_int_equal(a2__lsn_parse("12", &l), -1);
    assert_int_equal(a2__lsn_parse(NULL, &l), -1);
}

static void test_new_file_write_and_resume(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    assert_true(r.done == 0 && r.partial_lsn == 0);
    const char *t1 = LINE("0/100", 1) LINE("0/100", 2);
    write_ok(a, t1, 2);
    a2__audit_mark(a, 0x100);
    assert_true(a2__audit_dirty(a));
    assert_true(a2__audit_durable(a) == 0); /* not yet fsynced */
    assert_int_equal(a2__audit_sync(a, 0, err, sizeof err), 0);
    assert_true(a2__audit_durable(a) == 0x100);
    const char *t2 = LINE("0/200", 3);
    write_ok(a, t2, 1);
    a2__audit_mark(a, 0x200);
    assert_int_equal(a2__audit_lines(a), 3);
    a2__audit_close(a);
    /* the state file holds the durable position written at close */
    assert_string_equal(slurp(spath), "0/200\n");
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), 0);
    assert_true(r.done == 0x200);
    assert_true(r.partial_lsn == 0);
    /* without the state file the tail decides: 0/200 may be incomplete */
    unlink(spath);
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), 0);
    assert_true(r.done == 0x100);
    assert_true(r.partial_lsn == 0x200);
    assert_int_equal(r.partial_lines, 1);
}

static void test_torn_tail_is_cut(void **state)
{
    (void)state;
    append_raw(LINE("0/100", 1) LINE("0/300", 2) LINE("0/300", 3));
    append_raw("{\"lsn\":\"0/300\",\"op\":\"upd"); /* torn */
    a2__audit_resume r;
    a2__audit *a = open_ok(&r);
    assert_int_equal(r.truncated_bytes,
                     strlen("{\"lsn\":\"0/300\",\"op\":\"upd"));
    assert_true(r.done == 0x100);
    assert_true(r.partial_lsn == 0x300);
    assert_int_equal(r.partial_lines, 2);
    a2__audit_close(a);
    assert_string_equal(slurp(path),
                        LINE("0/100", 1) LINE("0/300", 2) LINE("0/300", 3));
}

static void test_torn_only_line(void **state)
{
    (void)state;
    append_raw("{\"lsn\":\"0/3");
    a2__audit_resume r;
    a2__audit *a = open_ok(&r);
    assert_true(r.done == 0 && r.partial_lsn == 0);
    assert_int_equal(r.truncated_bytes, 11);
    a2__audit_close(a);
    assert_string_equal(slurp(path), "");
}

static void test_foreign_file_is_not_cut(void **state)
{
    (void)state;
    append_raw("# not an audit file\nkey = value");
    a2__audit_resume r;
    char err[256];
    assert_null(a2__audit_open(path, &r, err, sizeof err));
    assert_non_null(strstr(err, "not an audit record"));
    assert_string_equal(slurp(path), "# not an audit file\nkey = value");
}

static void test_state_file_ahead_of_tail(void **state)
{
    (void)state;
    append_raw(LINE("0/100", 1));
    FILE *f = fopen(spath, "w");
    fputs("0/500\n", f);
    fclose(f);
    a2__audit_resume r;
    char err[256];
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), 0);
    assert_true(r.done == 0x500);
    assert_true(r.partial_lsn == 0);
}

static void test_bad_line_and_bad_state(void **state)
{
    (void)state;
    append_raw("not json\n");
    a2__audit_resume r;
    char err[256];
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "without a valid \"lsn\""));
    unlink(path);
    FILE *f = fopen(spath, "w");
    fputs("garbage\n", f);
    fclose(f);
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid audit state file"));
}

static void test_unwritable_path(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256], p[400];
    snprintf(p, sizeof p, "%s/no/such/dir/audit", dir);
    assert_null(a2__audit_open(p, &r, err, sizeof err));
    assert_non_null(strstr(err, "could not open audit file"));
    assert_non_null(strstr(err, "No such file or directory"));
}

/* The background group fsync moves the durable LSN only once it is done,
 * and only over what was written before it started. */
static void test_background_sync(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    assert_int_equal(a2__audit_event_fd(a), -1);
    const char *t1 = LINE("0/100", 1);
    write_ok(a, t1, 1);
    a2__audit_mark(a, 0x100);
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_true(a2__audit_busy(a));
    assert_false(a2__audit_dirty(a));
    /* written while the fsync runs: not covered by it */
    const char *t2 = LINE("0/200", 2);
    write_ok(a, t2, 1);
    a2__audit_mark(a, 0x200);
    assert_true(a2__audit_durable(a) == 0);
    int efd = a2__audit_event_fd(a);
    assert_true(efd >= 0);
    struct pollfd p = {efd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
    assert_false(a2__audit_busy(a));
    assert_true(a2__audit_durable(a) == 0x100);
    assert_string_equal(slurp(spath), "0/100\n");
    /* the second group */
    assert_true(a2__audit_dirty(a));
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
    assert_true(a2__audit_durable(a) == 0x200);
    /* a position with nothing written after the last fsync is durable */
    a2__audit_mark(a, 0x300);
    assert_true(a2__audit_durable(a) == 0x300);
    /* a blocking sync while one runs waits for it */
    const char *t3 = LINE("0/400", 3);
    write_ok(a, t3, 1);
    a2__audit_mark(a, 0x400);
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_int_equal(a2__audit_sync(a, 0, err, sizeof err), 0);
    assert_false(a2__audit_busy(a));
    assert_true(a2__audit_durable(a) == 0x400);
    a2__audit_close(a);
    assert_string_equal(slurp(spath), "0/400\n");
}

/* Waits for the outstanding background fsync and finishes it. */
static void finish_ok(a2__audit *a)
{
    char err[256];
    struct pollfd p = {a2__audit_event_fd(a), POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
    assert_false(a2__audit_busy(a));
}

/* What may be confirmed is no more than a restart finds in the file: a
 * position that moved without a line of its own (a keepalive, another
 * table's transaction) waits for the state file, which a sync writes even
 * with no line to fsync. Confirmed at once, a kill -9 before the state file
 * caught up made the next start report a false "audit behind slot" gap. */
static void test_confirmable(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    write_ok(a, LINE("0/100", 1), 1);
    a2__audit_mark(a, 0x100);
    assert_true(a2__audit_confirmable(a) == 0); /* not fsynced */
    assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
    finish_ok(a);
    assert_true(a2__audit_confirmable(a) == 0x100);
    assert_string_equal(slurp(spath), "0/0\n");
    /* a keepalive: durable at once, confirmable once the state holds it */
    a2__audit_mark(a, 0x180);
    assert_true(a2__audit_durable(a) == 0x180);
    assert_true(a2__audit_confirmable(a) == 0x100);
    /* nothing written and the state file not due: no sync */
    assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
    assert_false(a2__audit_busy(a));
    /* due: the helper writes the state file alone */
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_true(a2__audit_busy(a));
    finish_ok(a);
    assert_string_equal(slurp(spath), "0/180\n");
    assert_true(a2__audit_confirmable(a) == 0x180);
    /* the state file is current: nothing to do */
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_false(a2__audit_busy(a));
    /* lines written while a fsync runs are not confirmed by it */
    write_ok(a, LINE("0/200", 2), 1);
    a2__audit_mark(a, 0x200);
    assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
    write_ok(a, LINE("0/300", 3), 1);
    a2__audit_mark(a, 0x300);
    finish_ok(a);
    assert_true(a2__audit_confirmable(a) == 0x200);
    assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
    finish_ok(a);
    assert_true(a2__audit_confirmable(a) == 0x300);
    a2__audit_mark(a, 0x380);
    assert_true(a2__audit_confirmable(a) == 0x300);
    /* as a restart would find it: the file's last line, 0/300 */
    a2__audit_resume r2;
    assert_int_equal(a2__audit_scan(path, &r2, 0, err, sizeof err), 0);
    assert_true(r2.partial_lsn == 0x300 || r2.done >= 0x300);
    /* the clean stop's sync writes the state at everything marked */
    assert_int_equal(a2__audit_sync(a, 0, err, sizeof err), 0);
    assert_true(a2__audit_confirmable(a) == 0x380);
    assert_string_equal(slurp(spath), "0/380\n");
    a2__audit_close(a);
}

/* Once a background fsync is reported done, its eventfd is quiet again:
 * a signal left behind would make the daemon's poll return at once on every
 * turn until the next fsync. The finish is called in a tight loop, as the
 * daemon's turns do under load, so that it often looks while the helper is
 * between its report and its signal. */
static void test_sync_done_leaves_event_fd_quiet(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    int loud = 0;
    for (int i = 0; i < 300; i++) {
        char line[64];
        snprintf(line, sizeof line, "{\"lsn\":\"0/%X\",\"n\":%d}\n", 0x100 + i,
                 i);
        assert_int_equal(
                a2__audit_write(a, line, strlen(line), 1, err, sizeof err), 0);
        a2__audit_mark(a, 0x100 + (uint64_t)i);
        assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
        int turns = 0;
        while (a2__audit_busy(a)) {
            assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
            assert_true(++turns < 100000000);
        }
        assert_true(a2__audit_durable(a) == 0x100 + (uint64_t)i);
        struct pollfd p = {a2__audit_event_fd(a), POLLIN, 0};
        if (poll(&p, 1, 0) != 0)
            loud++;
    }
    assert_int_equal(loud, 0);
    a2__audit_close(a);
}

/* The helper writes the state file after its fsync when one is due; when it
 * cannot, the finish reports why (and the daemon stops: the resume point
 * would be unknown). */
static void test_background_state_write(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[512];
    a2__audit *a = open_ok(&r);
    const char *t1 = LINE("0/100", 1);
    write_ok(a, t1, 1);
    a2__audit_mark(a, 0x100);
    /* not due yet: the fsync alone */
    assert_int_equal(a2__audit_sync_start(a, 60000, err, sizeof err), 0);
    struct pollfd p = {a2__audit_event_fd(a), POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
    assert_true(a2__audit_durable(a) == 0x100);
    assert_string_equal(slurp(spath), "0/0\n");
    /* due: written by the helper at the position its fsync covered */
    const char *t2 = LINE("0/200", 2);
    write_ok(a, t2, 1);
    a2__audit_mark(a, 0x200);
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), 0);
    assert_string_equal(slurp(spath), "0/200\n");
    /* the state file cannot be replaced: the finish says so */
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", spath);
    assert_int_equal(mkdir(tmp, 0700), 0);
    const char *t3 = LINE("0/300", 3);
    write_ok(a, t3, 1);
    a2__audit_mark(a, 0x300);
    assert_int_equal(a2__audit_sync_start(a, 0, err, sizeof err), 0);
    assert_int_equal(poll(&p, 1, 5000), 1);
    err[0] = '\0';
    assert_int_equal(a2__audit_sync_finish(a, err, sizeof err), -1);
    assert_non_null(strstr(err, "could not write audit state file"));
    assert_non_null(strstr(err, "Is a directory"));
    assert_string_equal(slurp(spath), "0/200\n");
    rmdir(tmp);
    a2__audit_close(a);
    assert_string_equal(slurp(spath), "0/300\n");
}

static void test_reopen_after_rotation(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256], rotated[400];
    a2__audit *a = open_ok(&r);
    const char *t1 = LINE("0/100", 1);
    write_ok(a, t1, 1);
    a2__audit_mark(a, 0x100);
    snprintf(rotated, sizeof rotated, "%s.1", path);
    assert_int_equal(rename(path, rotated), 0);
    assert_int_equal(a2__audit_reopen(a, err, sizeof err), 0);
    const char *t2 = LINE("0/200", 2);
    write_ok(a, t2, 1);
    a2__audit_mark(a, 0x200);
    a2__audit_close(a);
    assert_string_equal(slurp(rotated), LINE("0/100", 1));
    assert_string_equal(slurp(path), LINE("0/200", 2));
    /* a fresh file after rotation: the state file keeps the position */
    unlink(path);
    assert_int_equal(a2__audit_scan(path, &r, 0, err, sizeof err), 0);
    assert_true(r.done == 0x200);
}

/* Lines are gathered in memory and reach the file at a flush (or a sync);
 * past 256 KiB they are written without waiting for one. */
static void test_lines_gathered_until_flush(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    const char *t1 = LINE("0/100", 1);
    const char *t2 = LINE("0/200", 2);
    write_ok(a, t1, 1);
    write_ok(a, t2, 1);
    assert_true(a2__audit_dirty(a));
    assert_string_equal(slurp(path), "");
    assert_int_equal(a2__audit_flush(a, err, sizeof err), 0);
    assert_string_equal(slurp(path), LINE("0/100", 1) LINE("0/200", 2));
    assert_int_equal(a2__audit_flush(a, err, sizeof err), 0); /* nothing */
    /* a sync writes what is gathered before it fsyncs */
    const char *t3 = LINE("0/300", 3);
    write_ok(a, t3, 1);
    a2__audit_mark(a, 0x300);
    assert_int_equal(a2__audit_sync(a, 0, err, sizeof err), 0);
    assert_true(a2__audit_durable(a) == 0x300);
    assert_string_equal(slurp(path),
                        LINE("0/100", 1) LINE("0/200", 2) LINE("0/300", 3));
    /* more than the buffer holds goes out at once */
    static char big[300 * 1024];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\n';
    assert_int_equal(a2__audit_write(a, big, sizeof big, 1, err, sizeof err),
                     0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true((size_t)st.st_size == 3 * strlen(t1) + sizeof big);
    a2__audit_close(a);
}

/* A write the file refuses (here: past RLIMIT_FSIZE) fails the flush with
 * the file named, and neither a sync nor the close reports durable what was
 * not written. */
static void test_flush_failure(void **state)
{
    (void)state;
    a2__audit_resume r;
    char err[256];
    a2__audit *a = open_ok(&r);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 16;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    const char *t1 = LINE("0/100", 1);
    write_ok(a, t1, 1);
    a2__audit_mark(a, 0x100);
    int rc = a2__audit_flush(a, err, sizeof err);
    const char *t2 = LINE("0/200", 2);
    int wrc = a2__audit_write(a, t2, strlen(t2), 1, err, sizeof err);
    int src = wrc == 0 ? a2__audit_sync(a, 0, err, sizeof err) : -2;
    char serr[256];
    snprintf(serr, sizeof serr, "%s", err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(serr, "could not write audit file"));
    assert_non_null(strstr(serr, path));
    assert_int_equal(wrc, 0);
    assert_int_equal(src, -1);
    assert_true(a2__audit_durable(a) == 0);
    a2__audit_close(a);
    /* Closing after the failure leaves the position file where it was (at
     * 0/0 since the open), not at the line that did not reach the file; the
     * next open cuts the torn one and resumes from the start. */
    const char *pos = slurp(spath);
    assert_non_null(pos);
    assert_int_equal(strncmp(pos, "0/0", 3), 0);
    assert_null(strstr(pos, "0/100"));
    a = open_ok(&r);
    assert_true(r.done == 0);
    assert_true(r.truncated_bytes == 16);
    a2__audit_close(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_lsn_text),
            cmocka_unit_test_setup_teardown(test_new_file_write_and_resume,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_torn_tail_is_cut, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_torn_only_line, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_foreign_file_is_not_cut, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_state_file_ahead_of_tail,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_bad_line_and_bad_state, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_unwritable_path, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_background_sync, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(
                    test_sync_done_leaves_event_fd_quiet, setup, teardown),
            cmocka_unit_test_setup_teardown(test_confirmable, setup, teardown),
            cmocka_unit_test_setup_teardown(test_background_state_write, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_reopen_after_rotation, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_lines_gathered_until_flush,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_flush_failure, setup,
                                            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
