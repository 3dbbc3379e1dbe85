/*
 * The a2-consumer harness of the integration tests: start the real
 * a2-consumer binary on a throwaway folder and slot, wait until it is ready,
 * stop or kill it, and reap whatever a failed test left running. The worker
 * side (a wire v1 client) is in wire_client.h, included here.
 */
#ifndef A2_TEST_CONSUMER_HARNESS_H
#define A2_TEST_CONSUMER_HARNESS_H

#include <libpq-fe.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "a2test.h"
#include "wire_client.h"

/* One a2-consumer of a test: its process and the files in its folder. */
typedef struct {
    pid_t pid;
    char dir[64];
    char sock[128];
    char audit[128];
    char log[128];
    char slot[64];
} a2_test_consumer;

/*
 * When set (not 0), the next consumers started may write files of at most
 * this many bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with
 * EFBIG, as on a full disk).
 */
void a2_test_consumer_set_file_limit(rlim_t bytes);

/* When set (not 0), the next consumers started have this RLIMIT_NOFILE
 * (soft and hard). */
void a2_test_consumer_set_nofile(rlim_t n);

/*
 * Remembers a process the test started (consumers, bursts) until
 * a2_test_untrack, so that a test that failed half-way leaves nothing
 * running into the next (a2_test_kill_leftovers).
 */
void a2_test_track(pid_t pid);
void a2_test_untrack(pid_t pid);

/* Stops (SIGSTOP) the server process whose pid the query on db returns, and
 * remembers it so that a2_test_kill_leftovers lets it run again. */
pid_t a2_test_stop_process(PGconn *db, const char *pid_sql);

/* Lets the stopped process run again. */
void a2_test_continue_process(void);

/* Kills and reaps whatever a failed test left running, and lets a stopped
 * server process run again (call in teardown). */
void a2_test_kill_leftovers(void);

/* A cmocka teardown: a2_test_kill_leftovers, then closes the connection in
 * *state (the test's setup put it there, e.g. from a2_test_connect_reset). */
int a2_test_consumer_teardown(void **state);

/*
 * A new folder under /tmp for a consumer on slot (socket w.sock,
 * audit.jsonl, consumer.log), and the slot dropped when an earlier run left
 * it (it would replay its old changes).
 */
void a2_test_consumer_init(a2_test_consumer *d, const char *slot);

/*
 * Starts a2-consumer with the standard options plus extra (NULL-terminated),
 * stderr appended to d->log. Waits until it logs "ready:" unless expect_exit,
 * in which case it waits for the exit and returns the exit status.
 */
int a2_test_consumer_start_args(a2_test_consumer *d, int expect_exit,
                                const char *const *extra);

/* Starts a2-consumer with the standard options and waits until it is ready. */
void a2_test_consumer_start(a2_test_consumer *d);

/* a2_test_consumer_init on slot, then a2_test_consumer_start. */
void a2_test_consumer_run(a2_test_consumer *d, const char *slot);

/* a2_test_consumer_run, then worker w, named "w1" and subscribed to
 * consumer "c", joins it (a2_test_worker_join, with resync or not). */
void a2_test_consumer_run_with_worker(a2_test_consumer *d, const char *slot,
                                      a2_test_worker *w, int resync);

/* SIGTERM and wait; returns the exit status (-1 when none runs). */
int a2_test_consumer_stop(a2_test_consumer *d);

/* SIGKILL and reap. */
void a2_test_consumer_kill9(a2_test_consumer *d);

/* Stops the consumer if it runs, removes its folder and drops its slot. */
void a2_test_consumer_cleanup(a2_test_consumer *d);

/* The end of a test whose consumer runs: it stops with status 0 (else the
 * test fails), then a2_test_consumer_cleanup. */
void a2_test_consumer_end(a2_test_consumer *d);

/* Closes worker w, then the consumer stops with status 0 (else the test
 * fails); its files stay for the test to read (a2_test_consumer_cleanup
 * after). */
void a2_test_worker_close_stop(a2_test_worker *w, a2_test_consumer *d);

/* Closes worker w, then a2_test_consumer_end. */
void a2_test_worker_close_end(a2_test_worker *w, a2_test_consumer *d);

/* How many audit records of transition `name` the audit file holds (the
 * count of "transition":"name" in it). */
int a2_test_transitions(const char *audit, const char *name);

#endif
