/*
 * The a2-consumer harness of consumer_harness.h: the processes a test
 * started and has not reaped, a server process it stopped, and the start,
 * readiness wait, stop and cleanup of a real a2-consumer.
 */
#include "consumer_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TRACKED 32

/* What the tests of this executable set up for the consumers it starts. */
static struct {
    rlim_t child_file_limit; /* RLIMIT_FSIZE, 0: unchanged */
    rlim_t child_nofile;     /* RLIMIT_NOFILE, 0: unchanged */
    pid_t pids[MAX_TRACKED]; /* started and not reaped yet */
    pid_t stopped_pid;       /* a server process under SIGSTOP, 0: none */
} harness;

void a2_test_consumer_set_file_limit(rlim_t bytes)
{
    harness.child_file_limit = bytes;
}

void a2_test_consumer_set_nofile(rlim_t n)
{
    harness.child_nofile = n;
}

void a2_test_track(pid_t pid)
{
    for (int i = 0; i < MAX_TRACKED; i++)
        if (harness.pids[i] == 0) {
            harness.pids[i] = pid;
            return;
        }
}

void a2_test_untrack(pid_t pid)
{
    for (int i = 0; i < MAX_TRACKED; i++)
        if (harness.pids[i] == pid)
            harness.pids[i] = 0;
}

pid_t a2_test_stop_process(PGconn *db, const char *pid_sql)
{
    harness.stopped_pid = (pid_t)a2_test_int(db, pid_sql);
    assert_true(harness.stopped_pid > 0);
    assert_int_equal(kill(harness.stopped_pid, SIGSTOP), 0);
    return harness.stopped_pid;
}

void a2_test_continue_process(void)
{
    if (harness.stopped_pid > 0)
        assert_int_equal(kill(harness.stopped_pid, SIGCONT), 0);
    harness.stopped_pid = 0;
}

void a2_test_kill_leftovers(void)
{
    if (harness.stopped_pid > 0)
        kill(harness.stopped_pid, SIGCONT);
    harness.stopped_pid = 0;
    for (int i = 0; i < MAX_TRACKED; i++)
        if (harness.pids[i] > 0) {
            kill(harness.pids[i], SIGKILL);
            waitpid(harness.pids[i], NULL, 0);
            harness.pids[i] = 0;
        }
}

int a2_test_consumer_teardown(void **state)
{
    a2_test_kill_leftovers();
    PQfinish(*state);
    *state = NULL;
    return 0;
}

/* Drops the slot unless a consumer still streams from it. */
static void drop_slot(const char *slot)
{
    PGconn *c = a2_test_connect();
    char sql[256];
    snprintf(sql, sizeof sql,
             "select pg_drop_replication_slot(slot_name) from "
             "pg_replication_slots where slot_name = '%s' and not active",
             slot);
    PQclear(PQexec(c, sql));
    PQfinish(c);
}

void a2_test_consumer_init(a2_test_consumer *d, const char *slot)
{
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "/tmp/a2-tc.XXXXXX");
    if (!mkdtemp(d->dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(d->sock, sizeof d->sock, "%s/w.sock", d->dir);
    snprintf(d->audit, sizeof d->audit, "%s/audit.jsonl", d->dir);
    snprintf(d->log, sizeof d->log, "%s/consumer.log", d->dir);
    snprintf(d->slot, sizeof d->slot, "%s", slot);
    drop_slot(d->slot);
}

/* In the child: the limits the test set, stderr to the log, stdin and
 * stdout to /dev/null, then the program. */
static void exec_consumer(const a2_test_consumer *d, const char **argv)
{
    /* never outlive a test that failed half-way */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (harness.child_file_limit) {
        struct rlimit rl = {harness.child_file_limit, harness.child_file_limit};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
    }
    if (harness.child_nofile) {
        struct rlimit rl = {harness.child_nofile, harness.child_nofile};
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    close(fd);
    fd = open("/dev/null", O_RDWR);
    dup2(fd, 0);
    dup2(fd, 1);
    close(fd);
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

/* Waits (at most 20 s) for the exit of a consumer that should not start;
 * its exit status. */
static int wait_exit(a2_test_consumer *d, pid_t pid)
{
    int st;
    int64_t t0 = a2_test_now_ms();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (a2_test_now_ms() - t0 > 20000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("a2-consumer did not exit");
        }
        a2_test_sleep_ms(20);
    }
    d->pid = 0;
    a2_test_untrack(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Waits (at most 20 s) until the log holds "ready:" past its first before
 * bytes; fails the test when the consumer exits first. */
static void wait_ready(a2_test_consumer *d, pid_t pid, size_t before)
{
    int64_t t0 = a2_test_now_ms();
    for (;;) {
        char *t = a2_test_read_file(d->log);
        int ready = t && strlen(t) > before && strstr(t + before, "ready:");
        free(t);
        if (ready)
            return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *log = a2_test_read_file(d->log);
            d->pid = 0;
            a2_test_untrack(pid);
            fail_msg("a2-consumer exited early (%s %d): %s",
                     WIFEXITED(st) ? "status" : "signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
                     log ? log + before : "");
        }
        if (a2_test_now_ms() - t0 > 20000)
            fail_msg("a2-consumer not ready in 20 s");
        a2_test_sleep_ms(20);
    }
}

int a2_test_consumer_start_args(a2_test_consumer *d, int expect_exit,
                                const char *const *extra)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = a2_test_bin("a2-consumer");
    static char bin[512];
    snprintf(bin, sizeof bin, "%s", argv[0]);
    argv[0] = bin;
    argv[n++] = "--db";
    argv[n++] = a2_test_db();
    argv[n++] = "--slot";
    argv[n++] = d->slot;
    argv[n++] = "--listen";
    static char listen[160];
    snprintf(listen, sizeof listen, "unix:%s", d->sock);
    argv[n++] = listen;
    argv[n++] = "--audit";
    argv[n++] = d->audit;
    argv[n++] = "--status-interval";
    argv[n++] = "100";
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    size_t before = 0;
    char *old = a2_test_read_file(d->log);
    if (old) {
        before = strlen(old);
        free(old);
    }
    pid_t pid = fork();
    if (pid == 0)
        exec_consumer(d, argv);
    d->pid = pid;
    a2_test_track(pid);
    if (expect_exit)
        return wait_exit(d, pid);
    wait_ready(d, pid, before);
    return 0;
}

void a2_test_consumer_start(a2_test_consumer *d)
{
    a2_test_consumer_start_args(d, 0, NULL);
}

void a2_test_consumer_run(a2_test_consumer *d, const char *slot)
{
    a2_test_consumer_init(d, slot);
    a2_test_consumer_start(d);
}

void a2_test_consumer_run_with_worker(a2_test_consumer *d, const char *slot,
                                      a2_test_worker *w, int resync)
{
    a2_test_consumer_run(d, slot);
    a2_test_worker_join(w, d->sock, "w1", "c", NULL, resync);
}

int a2_test_consumer_stop(a2_test_consumer *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int st;
    int64_t t0 = a2_test_now_ms();
    while (waitpid(d->pid, &st, WNOHANG) == 0) {
        /* wide: closing 10,000 connections on a busy host takes a while */
        if (a2_test_now_ms() - t0 > 60000) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            a2_test_untrack(d->pid);
            d->pid = 0;
            fail_msg("a2-consumer did not stop on SIGTERM");
        }
        a2_test_sleep_ms(10);
    }
    a2_test_untrack(d->pid);
    d->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void a2_test_consumer_kill9(a2_test_consumer *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    a2_test_untrack(d->pid);
    d->pid = 0;
}

void a2_test_consumer_cleanup(a2_test_consumer *d)
{
    if (d->pid > 0)
        a2_test_consumer_stop(d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
    drop_slot(d->slot);
}

void a2_test_consumer_end(a2_test_consumer *d)
{
    assert_int_equal(a2_test_consumer_stop(d), 0);
    a2_test_consumer_cleanup(d);
}

void a2_test_worker_close_stop(a2_test_worker *w, a2_test_consumer *d)
{
    a2_test_worker_close(w);
    assert_int_equal(a2_test_consumer_stop(d), 0);
}

void a2_test_worker_close_end(a2_test_worker *w, a2_test_consumer *d)
{
    a2_test_worker_close(w);
    a2_test_consumer_end(d);
}

int a2_test_transitions(const char *audit, const char *name)
{
    char needle[96];
    snprintf(needle, sizeof needle, "\"transition\":\"%s\"", name);
    return a2_test_count_in_file(audit, needle);
}
