/*
 * a2-bench-store: liba2store throughput beside a raw single-row INSERT, and
 * the round trips each operation costs.
 *
 *   a2-bench-store --db CONNINFO [--seconds S] [--csv FILE]
 *                  [--native PATH/a2_batch.so]
 *
 * For 1, 4 and 16 connections (one thread each) over 1 and 16 sessions:
 *   raw      INSERT of one row into bench_raw (autocommit)
 *   append   a2_store_append of one event
 *   claim    a2_store_claim + a2_store_complete of every head it returns,
 *            over heads prepared beforehand (16 lanes per session), counted
 *            per completed head
 * append and claim run on the PL/pgSQL a2_batch of schema.sql and, with
 * --native, again on the native one (sql/a2_batch.c), in the same cell.
 * Then one connection runs each operation once and reports how many round
 * trips it took.
 */
#include "a2/store.h"
#include "a2/schema.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *db;
static double seconds = 3;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "a2-bench-store: %s: %s\n", what, msg);
    exit(1);
}

static void exec_sql(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK &&
        PQresultStatus(r) != PGRES_TUPLES_OK)
        die(sql, PQerrorMessage(c));
    PQclear(r);
}

typedef enum { OP_RAW, OP_APPEND, OP_CLAIM } op_kind;

typedef struct job {
    op_kind op;
    int no, nsessions;
    const char *run;
    double deadline;
    volatile const int *go;
    int64_t done;
    int errors;
    char error[600];
} job;

static void *worker(void *arg)
{
    job *j = arg;
    PGconn *raw = NULL;
    a2_store *s = NULL;
    a2_store_error err;
    if (j->op == OP_RAW) {
        raw = PQconnectdb(db);
        if (PQstatus(raw) != CONNECTION_OK)
            die("connect", PQerrorMessage(raw));
    } else if (a2_store_open(&s, db, &err) != 0) {
        die("open", err.message);
    }
    char holder[32];
    snprintf(holder, sizeof holder, "bench-%d", j->no);
    int64_t iter = 0;
    while (!*j->go)
        ;
    while (now_s() < j->deadline) {
        char session[64];
        snprintf(session, sizeof session, "%s-%d", j->run,
                 (int)((j->no + iter) % j->nsessions));
        iter++;
        if (j->op == OP_RAW) {
            const char *v[2] = {session, "{\"n\": 1}"};
            PGresult *r = PQexecParams(raw,
                                       "insert into bench_raw (session_id, "
                                       "payload) values ($1, $2::jsonb)",
                                       2, NULL, v, NULL, NULL, 0);
            if (PQresultStatus(r) == PGRES_COMMAND_OK)
                j->done++;
            else
                j->errors++;
            PQclear(r);
        } else if (j->op == OP_APPEND) {
            a2_append_event ev = {.type = "bench", .payload = "{\"n\": 1}"};
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
            a2_claim_request req = {.holder = holder, .ttl_ms = 60000};
            a2_claim_result cr;
            if (a2_store_claim(s, session, &req, &cr) != 0) {
                j->errors++;
                snprintf(j->error, sizeof j->error, "claim: %s",
                         a2_store_last_error(s)->message);
                continue;
            }
            for (size_t i = 0; i < cr.heads.count; i++) {
                a2_head *h = &cr.heads.items[i];
                a2_attempt_ref at = {h->dispatch.consumer, h->dispatch.lane,
                                     h->event.index, h->dispatch.attempt_count};
                a2_complete_result comp;
                int rc = a2_store_complete(s, session, &at, NULL, 0, NULL, 0,
                                           &comp);
                if (rc == 0 && comp.outcome == A2_ATTEMPT_COMPLETED) {
                    j->done++;
                } else {
                    j->errors++;
                    snprintf(j->error, sizeof j->error, "complete: %s",
                             rc ? a2_store_last_error(s)->message
                                : "superseded");
                }
                a2_complete_result_free(&comp);
            }
            a2_claim_result_free(&cr);
        }
    }
    if (raw)
        PQfinish(raw);
    a2_store_close(s);
    return NULL;
}

static double run_cell(op_kind op, int conns, int nsessions, const char *run)
{
    pthread_t th[16];
    job jobs[16];
    volatile int go = 0;
    for (int i = 0; i < conns; i++) {
        jobs[i] = (job){.op = op,
                        .no = i,
                        .nsessions = nsessions,
                        .run = run,
                        .deadline = 1e300,
                        .go = &go};
        if (pthread_create(&th[i], NULL, worker, &jobs[i]) != 0)
            die("thread", "could not start");
    }
    /* Connections are open before the clock starts. */
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double start = now_s();
    for (int i = 0; i < conns; i++)
        jobs[i].deadline = start + seconds;
    __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
    int64_t done = 0;
    int errors = 0;
    for (int i = 0; i < conns; i++) {
        pthread_join(th[i], NULL);
        done += jobs[i].done;
        errors += jobs[i].errors;
        if (jobs[i].errors)
            fprintf(stderr, "a2-bench-store: %s: %s\n", run, jobs[i].error);
    }
    double elapsed = now_s() - start;
    if (errors)
        fprintf(stderr, "a2-bench-store: %d errors in %s\n", errors, run);
    return (double)done / elapsed;
}

/* Heads for the claim cells: every session gets events on 16 lanes. */
static void prepare_heads(const char *run, int nsessions, int total)
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
    for (int i = 0; i < per; i++)
        ev[i] = (a2_append_event){.type = "job",
                                  .payload = "{\"n\": 1}",
                                  .targets = &tg[i % 16],
                                  .ntargets = 1};
    for (int k = 0; k < nsessions; k++) {
        char session[64];
        snprintf(session, sizeof session, "%s-%d", run, k);
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
static void round_trips(FILE *csv)
{
    a2_store *s = NULL;
    a2_store_error err;
    if (a2_store_open(&s, db, &err) != 0)
        die("open", err.message);
    const char *session = "rt-session";
    uint64_t before;
    int rc;
    printf("\nround trips per operation (after the connection's first call)\n");
#define MEASURE(name, call)                                                    \
    do {                                                                       \
        before = a2_store_round_trips(s);                                      \
        rc = (call);                                                           \
        printf("  %-18s %" PRIu64 "%s\n", name,                                \
               a2_store_round_trips(s) - before, rc ? "  (failed)" : "");      \
        if (csv)                                                               \
            fprintf(csv, "round_trips,%s,%" PRIu64 "\n", name,                 \
                    a2_store_round_trips(s) - before);                         \
    } while (0)
    a2_events ev;
    rc = a2_store_read(s, session, NULL, &ev); /* prepares the statement */
    a2_events_free(&ev);
    a2_target tg[2] = {{.consumer = "c"}, {.consumer = "d", .lane = "L"}};
    const char *types[] = {"job"};
    a2_log_spec log = {.lane = "log", .types = types, .ntypes = 1};
    a2_consumer cons[3] = {
            {.name = "c"}, {.name = "d"}, {.name = "g", .log = &log}};
    a2_append_options opts = {.consumers = cons, .nconsumers = 3};
    a2_append_event e[2] = {
            {.type = "job", .id = "rt-1", .targets = tg, .ntargets = 2},
            {.type = "job", .id = "rt-2", .targets = tg, .ntargets = 2}};
    MEASURE("append", a2_store_append(s, session, e, 2, &opts, &ev));
    a2_events_free(&ev);
    MEASURE("append (replay)", a2_store_append(s, session, e, 2, &opts, &ev));
    a2_events_free(&ev);
    MEASURE("read", a2_store_read(s, session, NULL, &ev));
    a2_events_free(&ev);
    a2_cursors cs;
    MEASURE("cursors", a2_store_cursors(s, session, &cs));
    a2_cursors_free(&cs);
    int64_t head;
    MEASURE("wake_log", a2_store_wake_log(s, session, &cons[2], &cs, &head));
    a2_cursors_free(&cs);
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
    MEASURE("complete (retry)",
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

/* Makes a2_batch the PL/pgSQL one (so == NULL) or the native one in so. */
static void use_batch(PGconn *c, const char *so)
{
    if (!so) {
        exec_sql(c, a2_schema_sql);
        return;
    }
    char *lit = PQescapeLiteral(c, so, strlen(so));
    if (!lit)
        die("escape", PQerrorMessage(c));
    char sql[8192];
    snprintf(sql, sizeof sql,
             "create or replace function a2_batch(statements text[], params "
             "jsonb) returns setof jsonb language c volatile as %s, "
             "'a2_batch'",
             lit);
    PQfreemem(lit);
    exec_sql(c, sql);
}

int main(int argc, char **argv)
{
    const char *csv_path = NULL;
    const char *native = NULL;
    int only_conns = 0, only_sessions = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc)
            db = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
                 sscanf(argv[i + 1], "%d,%d", &only_conns, &only_sessions) == 2)
            i++;
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv_path = argv[++i];
        else if (strcmp(argv[i], "--native") == 0 && i + 1 < argc)
            native = argv[++i];
        else {
            fprintf(stderr, "usage: a2-bench-store --db CONNINFO [--seconds S] "
                            "[--csv FILE] [--only CONNS,SESSIONS] "
                            "[--native SO]\n");
            return 2;
        }
    }
    if (!db) {
        fprintf(stderr, "a2-bench-store: --db is required\n");
        return 2;
    }
    PGconn *c = PQconnectdb(db);
    if (PQstatus(c) != CONNECTION_OK)
        die("connect", PQerrorMessage(c));
    exec_sql(c, "create table if not exists bench_raw (id bigserial primary "
                "key, session_id text not null, payload jsonb not null)");
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "metric,connections,sessions,raw_insert_per_s,"
                     "append_per_s,claim_complete_per_s,"
                     "append_native_per_s,claim_complete_native_per_s\n");
    printf("liba2store: operations/s, %.0f s per cell (raw = one-row INSERT; "
           "pl = a2_batch in PL/pgSQL, C = native a2_batch; same cluster, "
           "same run)\n",
           seconds);
    printf("%-5s %-8s %10s %10s %10s %6s %7s %12s %12s %6s\n", "conns",
           "sessions", "raw ins/s", "append pl", "append C", "C/pl", "C/raw",
           "claim+cpl pl", "claim+cpl C", "C/pl");
    int conns[] = {1, 4, 16};
    int sessions[] = {1, 16};
    int cell = 0;
    for (size_t ci = 0; ci < 3; ci++) {
        for (size_t si = 0; si < 2; si++) {
            char run[32];
            cell++;
            if (only_conns &&
                (conns[ci] != only_conns || sessions[si] != only_sessions))
                continue;
            snprintf(run, sizeof run, "raw%d", cell);
            double raw = run_cell(OP_RAW, conns[ci], sessions[si], run);
            double app[2] = {0, 0}, clm[2] = {0, 0};
            for (int v = 0; v < (native ? 2 : 1); v++) {
                use_batch(c, v ? native : NULL);
                snprintf(run, sizeof run, "app%d%s", cell, v ? "c" : "p");
                app[v] = run_cell(OP_APPEND, conns[ci], sessions[si], run);
                snprintf(run, sizeof run, "clm%d%s", cell, v ? "c" : "p");
                /* Enough heads for the cell: what one run could do, and
                 * more. */
                prepare_heads(run, sessions[si], 6000);
                clm[v] = run_cell(OP_CLAIM, conns[ci], sessions[si], run);
            }
            printf("%-5d %-8d %10.0f %10.0f %10.0f %6.2f %7.2f %12.0f %12.0f "
                   "%6.2f\n",
                   conns[ci], sessions[si], raw, app[0], app[1],
                   app[0] > 0 ? app[1] / app[0] : 0, raw > 0 ? app[1] / raw : 0,
                   clm[0], clm[1], clm[0] > 0 ? clm[1] / clm[0] : 0);
            fflush(stdout);
            if (csv)
                fprintf(csv, "throughput,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f\n",
                        conns[ci], sessions[si], raw, app[0], clm[0], app[1],
                        clm[1]);
            exec_sql(c, "truncate bench_raw, a2_events, a2_cursors, "
                        "a2_lane_events, a2_clears");
        }
    }
    use_batch(c, NULL);
    round_trips(csv);
    if (csv)
        fclose(csv);
    PQfinish(c);
    return 0;
}
