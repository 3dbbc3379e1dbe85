/*
 * What the C benchmarks under bench/ share (every bench/<name>/ program
 * links bench/common.c, see mk/bench.mk): their command line, one table of
 * every option of which each program takes its own part, their a2-consumer
 * subscribers and the names of their sessions.
 */
#ifndef A2_BENCH_COMMON_H
#define A2_BENCH_COMMON_H

#include "a2/store.h"
#include "a2/worker.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The benchmarks' options; each program sets its own defaults. */
typedef struct a2__bench_args {
    const char *db;        /* --db CONNINFO, else $A2_DB */
    const char *connect;   /* --connect: a2-consumer's address */
    const char *subscribe; /* --subscribe: the same, to count wake-ups */
    const char *prefix;    /* --prefix: of session names */
    const char *dump;      /* --dump FILE */
    char tag[64];          /* --tag: of session names */
    int mode;              /* --mode: its index in the program's modes (0,
                              the first, by default) */
    int writers, sessions, workers, interval_ms, batch;
    double seconds, rate, drain_s;
    long max_events, max_commits;
} a2__bench_args;

/* The defaults the benchmarks share (each sets the others in the same
 * initializer). */
#define A2__BENCH_DEFAULTS                                                     \
    .sessions = 64, .seconds = 3, .interval_ms = 100, .max_events = 200000

/*
 * Parses argv with getopt_long: --help and the options the usage text
 * names (each "--NAME" in it, in its order); --mode takes one of modes
 * (NULL-terminated). Returns -1 when the program goes on, else its exit
 * status: 0 after --help (usage on stdout), 2 after a wrong option (usage,
 * or prog's "unknown mode" line, on stderr). A missing --db is $A2_DB.
 */
int a2__bench_parse(a2__bench_args *a, int argc, char **argv, const char *prog,
                    const char *usage, const char *const *modes);

/* Prints the usage text a2__bench_parse was given to stderr: returns 2. */
int a2__bench_usage(void);

/* Opens n store connections on db, one after the other: 0, or -1 after
 * "<what>: <message>" on stderr. */
int a2__bench_open_stores(const char *db, a2_store **stores, int n,
                          const char *what);

/* LISTEN a2_events on conn: 0, or -1 after "<what>: <the server's
 * message>" on stderr. */
int a2__bench_listen(PGconn *conn, const char *what);

/* An a2_worker named name, connecting to connect, that serves consumer
 * "bench"; NULL with err. */
a2_worker *a2__bench_subscriber(const char *connect, const char *name,
                                char *err, size_t errlen);

/* Processes w until a2-consumer welcomed it, for 5 s at most: whether it
 * did. */
bool a2__bench_wait_connected(a2_worker *w);

/* s of a session named "<tag>.<s>" with 0 <= s < sessions, or -1 (another
 * run's session); with colon, ":..." may follow (a NOTIFY payload). */
int a2__bench_session_number(const char *tag, int sessions, const char *name,
                             bool colon);

#endif
