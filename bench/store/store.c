/*
 * a2-bench-store: one cell of liba2store throughput, or the round trips
 * each operation costs. Built from this file against this tree's
 * liba2store, and by bench/store/run against a baseline's as well (it uses
 * the public API only), so both are measured by the same code.
 *
 *   a2-bench-store --db CONNINFO --op OP [--conns N] [--sessions S]
 *                  [--seconds T]
 *   a2-bench-store --db CONNINFO --round-trips
 *
 * OP, each connection (one thread) looping until the time is up, over S
 * sessions:
 *   raw      INSERT of one row into bench_raw (autocommit; the caller
 *            creates the table)
 *   floor    select bench_floor(session, payload): the least an append on
 *            the a2 tables does (the caller's function)
 *   append   a2_store_append of one event with one concurrent target
 *   claim    a2_store_claim + a2_store_complete of every head it returns,
 *            over heads prepared beforehand (16 lanes per session, --heads
 *            in all, 20000 by default), counted per completed head
 * Prints "OP CONNS SESSIONS OPS_PER_S ERRORS".
 */
#include "a2/store.h"

#include "../../common/clock.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CONNS 64

static const char *db;
static double seconds = 3;

static double now_s(void)
{
    return (double)a2__mono_us() / 1e6;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "a2-bench-store: %s: %s\n", what, msg);
    exit(1);
}

typedef enum { OP_RAW, OP_FLOOR, OP_APPEND, OP_CLAIM } op_kind;

typedef struct job {
    op_kind op;
    int no, nsessions;
    double deadline;
    volatile const int *go;
    int64_t done;
    int errors;
    char error[600];
} job;

static void plain_call(PGconn *c, job *j, const char *sql, const char *session)
{
    const char *v[2] = {session, "{\"n\": 1}"};
    PGresult *r = PQexecParams(c, sql, 2, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_COMMAND_OK ||
        PQresultStatus(r) == PGRES_TUPLES_OK) {
        j->done++;
    } else {
        j->errors++;
        snprintf(j->error, sizeof j->error, "%s", PQerrorMessage(c));
    }
    PQclear(r);
}

static void claim_and_complete(a2_store *s, job *j, const char *session,
                               const char *holder)
{
    a2_claim_request req = {.holder = holder, .ttl_ms = 60000};
    a2_claim_result cr;
    if (a2_store_claim(s, session, &req, &cr) != 0) {
        j->errors++;
        snprintf(j->error, sizeof j->error, "claim: %s",
                 a2_store_last_error(s)->message);
        return;
    }
    for (size_t i = 0; i < cr.heads.count; i++) {
        a2_head *h = &cr.heads.items[i];
        a2_attempt_ref at = {h->dispatch.consumer, h->dispatch.lane,
                             h->event.index, h->dispatch.attempt_count};
        a2_complete_result comp;
        int rc = a2_store_complete(s, session, &at, NULL, 0, NULL, 0, &comp);
        if (rc == 0 && comp.outcome == A2_ATTEMPT_COMPLETED) {
            j->done++;
        } else {
            j->errors++;
            snprintf(j->error, sizeof j->error, "complete: %s",
                     rc ? a2_store_last_error(s)->message : "superseded");
        }
        a2_complete_result_free(&comp);
    }
    a2_claim_result_free(&cr);
}

static void *worker(void *arg)
{
    job *j = arg;
    PGconn *plain = NULL;
    a2_store *s = NULL;
    a2_store_error err;
    if (j->op == OP_RAW || j->op == OP_FLOOR) {
        plain = PQconnectdb(db);
        if (PQstatus(plain) != CONNECTION_OK)
            die("connect", PQerrorMessage(plain));
    } else if (a2_store_open(&s, db, &err) != 0) {
        die("open", err.message);
    }
    char holder[32];
    snprintf(holder, sizeof holder, "bench-%d", j->no);
    a2_target target = {.consumer = "bench"};
    int64_t iter = 0;
    while (!__atomic_load_n(j->go, __ATOMIC_ACQUIRE))
        ;
    while (now_s() < j->deadline) {
        char session[64];
        snprintf(session, sizeof session, "s-%d",
                 (int)((j->no + iter) % j->nsessions));
        iter++;
        if (j->op == OP_RAW) {
            plain_call(plain, j,
                       "insert into bench_raw (session_id, payload) values "
                       "($1, $2::jsonb)",
                       session);
        } else if (j->op == OP_FLOOR) {
            plain_call(plain, j, "select bench_floor($1, $2::jsonb)", session);
        } else if (j->op == OP_APPEND) {
            a2_append_event ev = {.type = "bench",
                                  .payload = "{\"n\": 1}",
                                  .targets = &target,
                                  .ntargets = 1};
            a2_events out;
            if (a2_store_append(s, session, &ev, 1, NULL, &out) == 0) {
                j->done++;
            } else {
                j->errors++;
                snprintf(j->error, sizeof j->error, "append: %s",
                         a2_store_last_error(s)->message);
            }
            a2_events_free(&out);
        } else {
            claim_and_complete(s, j, session, holder);
        }
    }
    if (plain)
        PQfinish(plain);
    a2_store_close(s);
    return NULL;
}

static double run_cell(op_kind op, int conns, int nsessions, int *errors)
{
    pthread_t th[MAX_CONNS];
    job jobs[MAX_CONNS];
    int go = 0;
    for (int i = 0; i < conns; i++) {
        jobs[i] = (job){.op = op,
                        .no = i,
                        .nsessions = nsessions,
                        .deadline = 1e300,
                        .go = &go};
        if (pthread_create(&th[i], NULL, worker, &jobs[i]) != 0)
            die("thread", "could not start");
    }
    /* Connections are open before the clock starts. */
    a2__sleep_ms(300);
    double start = now_s();
    for (int i = 0; i < conns; i++)
        jobs[i].deadline = start + seconds;
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    int64_t done = 0;
    *errors = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        done += jobs[i].done;
        *errors += jobs[i].errors;
        if (jobs[i].errors)
            fprintf(stderr, "a2-bench-store: %s\n", jobs[i].error);
    }
    return (double)done / (now_s() - start);
}

/* Heads for a claim cell: every session gets events on 16 lanes. */
static void prepare_heads(int nsessions, int total)
{
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, db, &err) != 0)
        die("open", err.message);
    int per = total / nsessions;
    static const char *lanes[16] = {"l0",  "l1",  "l2",  "l3", "l4",  "l5",
                                    "l6",  "l7",  "l8",  "l9", "l10", "l11",
                                    "l12", "l13", "l14", "l15"};
    a2_target tg[16];
    for (int i = 0; i < 16; i++)
        tg[i] = (a2_target){.consumer = "bench", .lane = lanes[i]};
    a2_append_event *ev = calloc((size_t)per, sizeof *ev);
    if (!ev)
        die("prepare", "out of memory");
    for (int i = 0; i < per; i++)
        ev[i] = (a2_append_event){.type = "job",
                                  .payload = "{\"n\": 1}",
                                  .targets = &tg[i % 16],
                                  .ntargets = 1};
    for (int k = 0; k < nsessions; k++) {
        char session[64];
        snprintf(session, sizeof session, "s-%d", k);
        for (int b = 0; b < per; b += 1000) {
            a2_events out;
            size_t n = (size_t)(per - b < 1000 ? per - b : 1000);
            if (a2_store_append(s, session, ev + b, n, NULL, &out) != 0)
                die("prepare", a2_store_last_error(s)->message);
            a2_events_free(&out);
        }
    }
    free(ev);
    a2_store_close(s);
}

/* Round trips of each operation, from the store's counter. */
static void round_trips(void)
{
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, db, &err) != 0)
        die("open", err.message);
    const char *session = "rt-session";
    uint64_t before;
    int rc;
#define MEASURE(name, call)                                                    \
    do {                                                                       \
        before = a2_store_round_trips(s);                                      \
        rc = (call);                                                           \
        printf("round_trips %s %" PRIu64 "%s\n", name,                         \
               a2_store_round_trips(s) - before, rc ? " failed" : "");         \
    } while (0)
    a2_events ev;
    a2_target tg[2] = {{.consumer = "c"}, {.consumer = "d", .lane = "L"}};
    const char *types[] = {"job"};
    a2_log_spec log = {.lane = "log", .types = types, .ntypes = 1};
    a2_consumer cons[3] = {
            {.name = "c"}, {.name = "d"}, {.name = "g", .log = &log}};
    a2_append_options opts = {.consumers = cons, .nconsumers = 3};
    a2_append_event e[2] = {
            {.type = "job", .id = "rt-1", .targets = tg, .ntargets = 2},
            {.type = "job", .id = "rt-2", .targets = tg, .ntargets = 2}};
    MEASURE("first_call", a2_store_read(s, session, NULL, &ev));
    a2_events_free(&ev);
    MEASURE("append", a2_store_append(s, session, e, 2, &opts, &ev));
    a2_events_free(&ev);
    MEASURE("append_replay", a2_store_append(s, session, e, 2, &opts, &ev));
    a2_events_free(&ev);
    MEASURE("read", a2_store_read(s, session, NULL, &ev));
    a2_events_free(&ev);
    a2_cursors cs;
    MEASURE("cursors", a2_store_cursors(s, session, &cs));
    a2_cursors_free(&cs);
#ifndef A2_BENCH_STORE_BASE /* the baseline's wake_log takes no after_xid */
    int64_t head;
    MEASURE("wake_log", a2_store_wake_log(s, session, &cons[2], 0, &cs, &head));
    a2_cursors_free(&cs);
#endif
    a2_claim_request req = {.holder = "rt", .ttl_ms = 60000};
    a2_claim_result cr;
    MEASURE("claim", a2_store_claim(s, session, &req, &cr));
    a2_claim_result_free(&cr);
    a2_attempt_ref at = {"c", NULL, 1, 1};
    a2_renew_result rr;
    MEASURE("renew", a2_store_renew(s, session, "rt", &at, 1, 60000, 0, &rr));
    a2_renew_result_free(&rr);
    a2_append_event kid = {.type = "kid", .id = "rt-kid"};
    a2_complete_result comp;
    MEASURE("complete",
            a2_store_complete(s, session, &at, &kid, 1, NULL, 0, &comp));
    a2_complete_result_free(&comp);
    MEASURE("complete_retry",
            a2_store_complete(s, session, &at, &kid, 1, NULL, 0, &comp));
    a2_complete_result_free(&comp);
    a2_attempt_ref lane = {"d", "L", 1, 1};
    a2_fail_request fr = {.error = "x", .max_failures = 1};
    a2_fail_result fo;
    MEASURE("fail", a2_store_fail(s, session, &lane, &fr, &fo));
    a2_heads dl;
    MEASURE("dead_letters", a2_store_dead_letters(s, session, &dl));
    a2_heads_free(&dl);
    a2_redrive_result rd;
    MEASURE("redrive", a2_store_redrive(s, session, "d", 1, A2_REDRIVE_SKIP,
                                        NULL, 0, &rd));
    a2_clear_result clr;
    MEASURE("clear", a2_store_clear(s, session, A2_STORE_NONE, NULL, &clr));
    a2_reclaim_result rcl;
    MEASURE("reclaim", a2_store_reclaim(s, session, &rcl));
    const char *names[] = {"c", "d"};
    a2_sessions ss;
    MEASURE("pending_sessions",
            a2_store_pending_sessions(s, names, 2, NULL, 100, &ss));
    a2_sessions_free(&ss);
#undef MEASURE
    a2_store_close(s);
}

static int usage(void)
{
    fprintf(stderr, "usage: a2-bench-store --db CONNINFO (--op "
                    "raw|floor|append|claim [--conns N] [--sessions S] "
                    "[--seconds T] [--heads H] | --round-trips)\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *op = NULL;
    bool trips = false;
    int conns = 1, nsessions = 1, heads = 20000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            db = argv[++i];
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc)
            op = argv[++i];
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--sessions") == 0 && i + 1 < argc)
            nsessions = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
            heads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--round-trips") == 0)
            trips = true;
        else
            return usage();
    }
    if (!db || (!op && !trips) || conns < 1 || conns > MAX_CONNS ||
        nsessions < 1 || seconds <= 0 || seconds > 600 || heads < nsessions)
        return usage();
    if (trips) {
        round_trips();
        return 0;
    }
    op_kind kind;
    if (strcmp(op, "raw") == 0)
        kind = OP_RAW;
    else if (strcmp(op, "floor") == 0)
        kind = OP_FLOOR;
    else if (strcmp(op, "append") == 0)
        kind = OP_APPEND;
    else if (strcmp(op, "claim") == 0)
        kind = OP_CLAIM;
    else
        return usage();
    if (kind == OP_CLAIM)
        prepare_heads(nsessions, heads);
    int errors = 0;
    double rate = run_cell(kind, conns, nsessions, &errors);
    printf("%s %d %d %.0f %d\n", op, conns, nsessions, rate, errors);
    return 0;
}
