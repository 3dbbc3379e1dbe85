/*
 * a2-consumer's audit is exactly once: kill -9 of the consumer in the middle
 * of a burst, and PostgreSQL restarted (fast and immediate) under it. A
 * test-only trigger records every row version of a2_cursors; the audit must
 * hold each of them once, in the same order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "a2/store.h"
#include "consumer_harness.h"
#include "store_fixture.h"

static PGconn *db;

static const char *const trigger_sql =
        "set client_min_messages = warning;"
        "drop table if exists tc_versions;"
        "create table tc_versions(seq bigserial primary key, op text, "
        "  session_id text, consumer text, cursor_key text, epoch bigint, "
        "  head bigint, attempt integer, holder text);"
        "create or replace function tc_record() returns trigger language "
        "plpgsql "
        "as $$ begin "
        "  if tg_op = 'DELETE' then "
        "    insert into tc_versions(op, session_id, consumer, cursor_key, "
        "epoch, "
        "      head, attempt, holder) values ('delete', old.session_id, "
        "      old.consumer, old.cursor_key, old.epoch, old.head, "
        "      old.attempt_count, old.claim_holder); return old; "
        "  end if; "
        "  insert into tc_versions(op, session_id, consumer, cursor_key, "
        "epoch, "
        "    head, attempt, holder) values (lower(tg_op), new.session_id, "
        "    new.consumer, new.cursor_key, new.epoch, new.head, "
        "    new.attempt_count, new.claim_holder); return new; "
        "end $$;"
        "drop trigger if exists tc_versions on a2_cursors;"
        "create trigger tc_versions after insert or update or delete on "
        "a2_cursors for each row execute function tc_record();";

static int setup(void **state)
{
    (void)state;
    db = a2_test_connect();
    a2_test_exec(db, "truncate a2_events, a2_cursors, a2_clears");
    a2_test_exec(db, trigger_sql);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    a2_test_kill_leftovers();
    a2_test_exec(db, "set client_min_messages = warning");
    a2_test_exec(db, "drop trigger if exists tc_versions on a2_cursors");
    PQfinish(db);
    return 0;
}

/* One row version as a comparable line. */
static void sig(char *out, size_t len, const char *op, const char *session,
                const char *cursor, long long epoch, const char *head,
                const char *attempt, const char *holder)
{
    snprintf(out, len, "%s|%s|%s|%lld|%s|%s|%s", op, session, cursor, epoch,
             head, attempt, holder);
}

/* The trigger's versions, in order; returns how many. */
static int trigger_sigs(char ***out)
{
    PGresult *r = PQexec(db, "select op, session_id, cursor_key, epoch, "
                             "coalesce(head::text, 'null'), attempt::text, "
                             "coalesce(holder, 'null') from tc_versions "
                             "order by seq");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    int n = PQntuples(r);
    char **v = calloc((size_t)n + 1, sizeof *v);
    for (int i = 0; i < n; i++) {
        char b[512];
        sig(b, sizeof b, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
            PQgetvalue(r, i, 2), atoll(PQgetvalue(r, i, 3)),
            PQgetvalue(r, i, 4), PQgetvalue(r, i, 5), PQgetvalue(r, i, 6));
        v[i] = strdup(b);
    }
    PQclear(r);
    *out = v;
    return n;
}

static const char *jtext(json_t *o, const char *key, char *buf, size_t len)
{
    json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    return "null";
}

/* The audit's row versions, in file order; returns how many. */
static int audit_sigs(const char *path, char ***out)
{
    char *text = a2_test_read_file(path);
    int cap = 1024, n = 0;
    char **v = calloc((size_t)cap, sizeof *v);
    for (char *line = text ? strtok(text, "\n") : NULL; line;
         line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j)
            fail_msg("audit line is not JSON: %s", line);
        const char *op = json_string_value(json_object_get(j, "op"));
        json_t *row = json_object_get(j, strcmp(op, "delete") == 0 ? "before"
                                                                   : "after");
        char h[32], a[32], hb[128], b[512];
        sig(b, sizeof b, op, json_string_value(json_object_get(j, "session")),
            json_string_value(json_object_get(j, "cursor")),
            (long long)json_integer_value(json_object_get(j, "epoch")),
            jtext(row, "head", h, sizeof h), jtext(row, "attempt", a, sizeof a),
            jtext(row, "holder", hb, sizeof hb));
        if (n + 1 >= cap) {
            cap *= 2;
            v = realloc(v, (size_t)cap * sizeof *v);
        }
        v[n++] = strdup(b);
        json_decref(j);
    }
    v[n] = NULL;
    free(text);
    *out = v;
    return n;
}

static void free_sigs(char **v)
{
    for (int i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* Waits until the audit has as many lines as the trigger recorded. */
static void wait_caught_up(const char *path, int timeout_ms)
{
    int64_t t0 = a2_test_now_ms();
    for (;;) {
        int want = (int)a2_test_int(db, "select count(*) from tc_versions");
        int have = a2_test_count_in_file(path, "\n");
        if (have >= want)
            return;
        if (a2_test_now_ms() - t0 > timeout_ms)
            fail_msg("audit has %d lines, the trigger %d", have, want);
        a2_test_sleep_ms(50);
    }
}

static void assert_exactly_once(const char *path)
{
    char **want, **have;
    int nw = trigger_sigs(&want);
    int nh = audit_sigs(path, &have);
    for (int i = 0; i < nw && i < nh; i++)
        if (strcmp(want[i], have[i]) != 0)
            fail_msg("version %d: audit has %s, trigger %s", i, have[i],
                     want[i]);
    if (nw != nh)
        fail_msg("audit has %d versions, the trigger %d", nh, nw);
    assert_true(nw > 0);
    free_sigs(want);
    free_sigs(have);
}

/* A burst of n statements on a2_cursors from its own connection: inserts,
 * claims, completions and deletes, some grouped in one transaction. */
static void burst(int from, int n)
{
    PGconn *c = a2_test_connect();
    char sql[1024];
    for (int i = from; i < from + n; i++) {
        int s = i % 17;
        switch (i % 4) {
        case 0:
            snprintf(sql, sizeof sql,
                     "begin; insert into a2_events(session_id, idx, "
                     "event_type, event_id, created_at) values ('s%d', %d, "
                     "'job', 'e%d', 1); insert into a2_cursors(session_id, "
                     "consumer, cursor_key, epoch, kind, head) values ('s%d', "
                     "'c', '#%d', %d, 'event', %d); commit",
                     s, i, i, s, i, i, i);
            break;
        case 1:
            snprintf(sql, sizeof sql,
                     "update a2_cursors set attempt_count = attempt_count + 1, "
                     "claim_holder = 'w%d', claim_expires_at = 9999999999999 "
                     "where cursor_key = '#%d'",
                     i, i - 1);
            break;
        case 2:
            snprintf(sql, sizeof sql,
                     "begin; update a2_cursors set head = null, claim_holder "
                     "= null, claim_expires_at = null where cursor_key = "
                     "'#%d'; insert into a2_events(session_id, idx, "
                     "event_type, event_id, created_at) values ('s%d', %d, "
                     "'job', 'e%d', 1); insert into a2_cursors(session_id, "
                     "consumer, cursor_key, epoch, kind, head) values ('s%d', "
                     "'c', '#%d', %d, 'event', %d); commit",
                     i - 2, s, i, i, s, i, i, i);
            break;
        default:
            snprintf(sql, sizeof sql,
                     "delete from a2_cursors where cursor_key = '#%d'", i - 3);
            break;
        }
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            fprintf(stderr, "burst: %s", PQerrorMessage(c));
        PQclear(r);
    }
    PQfinish(c);
}

static void test_kill9_mid_burst(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_kill9");
    pid_t child = fork();
    if (child == 0) {
        burst(0, 6000);
        _exit(0);
    }
    a2_test_track(child);
    /* kill -9 three times while the burst runs, restarting each time; each
     * kill after the audit grew (the first after its first line reached the
     * file: the audit is written in groups), so that every restart resumes
     * from an audit that has lines */
    int delays[] = {150, 300, 250};
    int mid_burst = 0, st = 0, reaped = 0, lines_before = 0;
    for (int k = 0; k < 3; k++) {
        a2_test_sleep_ms(delays[k]);
        int have = a2_test_wait_in_file(d.audit, "\n", lines_before + 1,
                                        k == 0 ? 10000 : 5000);
        if (k == 0 && have < 1)
            fail_msg("no audit line 10 s into the burst");
        lines_before = have;
        if (!reaped) {
            pid_t r = waitpid(child, &st, WNOHANG);
            reaped = r == child;
            if (reaped)
                a2_test_untrack(child);
            mid_burst += r == 0;
        }
        a2_test_consumer_kill9(&d);
        a2_test_sleep_ms(30);
        a2_test_consumer_start(&d);
    }
    if (!reaped)
        waitpid(child, &st, 0);
    a2_test_untrack(child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the kills hit the burst, and each restart resumed from the audit */
    assert_true(mid_burst >= 1);
    assert_int_equal(a2_test_count_in_file(d.log, "ready:"), 4);
    assert_int_equal(a2_test_count_in_file(d.log, "resume after 0/0"), 1);
    wait_caught_up(d.audit, 30000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_exactly_once(d.audit);

    /* a restart with nothing new writes nothing */
    int lines = a2_test_count_in_file(d.audit, "\n");
    a2_test_consumer_start(&d);
    a2_test_worker_join(&w, d.sock, "w1", "c", NULL, 0);
    /* after the welcome (a resync) the worker claims every pending head */
    int64_t pending = a2_test_int(
            db, "select count(*) from a2_cursors where head is not null and "
                "failed_at is null and claim_holder is null");
    assert_true(pending > 0);
    a2_store *store = a2_test_store_open(a2_test_db());
    const char *consumers[] = {"c"};
    a2_sessions ss;
    assert_int_equal(
            a2_store_pending_sessions(store, consumers, 1, NULL, 1000, &ss), 0);
    int64_t claimed = 0;
    for (size_t i = 0; i < ss.count; i++) {
        a2_claim_request req = {.holder = "after", .ttl_ms = 600000};
        a2_claim_result cr;
        assert_int_equal(a2_store_claim(store, ss.items[i], &req, &cr), 0);
        if (cr.outcome == A2_CLAIM_CLAIMED)
            claimed += (int64_t)cr.heads.count;
        a2_claim_result_free(&cr);
    }
    a2_sessions_free(&ss);
    a2_store_close(store);
    assert_true(claimed == pending);
    assert_int_equal(a2_test_int(db, "select count(*) from a2_cursors where "
                                     "head is not null and failed_at is null "
                                     "and claim_holder is null"),
                     0);
    /* and a new head wakes the worker */
    burst(6000, 1);
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.cursor, "#6000");
    a2_test_worker_close(&w);
    wait_caught_up(d.audit, 10000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_int_equal(a2_test_count_in_file(d.audit, "\n"),
                     lines + (int)claimed + 1);
    assert_exactly_once(d.audit);
    a2_test_consumer_cleanup(&d);
}

/* The "lsn" of the audit file's last line, as text. */
static void last_line_lsn(const char *path, char *out, size_t len)
{
    char *text = a2_test_read_file(path);
    assert_non_null(text);
    char *nl = strrchr(text, '\n');
    assert_non_null(nl);
    *nl = '\0';
    char *line = strrchr(text, '\n');
    json_t *j = json_loads(line ? line + 1 : text, 0, NULL);
    assert_non_null(j);
    snprintf(out, len, "%s", json_string_value(json_object_get(j, "lsn")));
    json_decref(j);
    free(text);
}

/* kill -9 once the slot confirmed a position past the audit file's last
 * line that no line of its own marks (other tables' transactions): the
 * restart finds the file holding it (the state file does) and records no
 * "audit behind slot" gap. */
static void test_kill9_after_position_moved(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tc_moved");
    burst(0, 1);
    a2_test_wait_in_file(d.audit, "\n", 1, 10000);
    wait_caught_up(d.audit, 10000);
    char lsn[32];
    last_line_lsn(d.audit, lsn, sizeof lsn);
    a2_test_exec(db, "create table if not exists tc_other(x int)");
    char q[256];
    snprintf(q, sizeof q,
             "select count(*) from pg_replication_slots where slot_name = "
             "'tc_moved' and confirmed_flush_lsn > '%s'::pg_lsn",
             lsn);
    int64_t t0 = a2_test_now_ms();
    while (a2_test_int(db, q) == 0) {
        if (a2_test_now_ms() - t0 > 30000)
            fail_msg("slot tc_moved did not confirm past %s in 30 s", lsn);
        a2_test_exec(db, "insert into tc_other values (1)");
        a2_test_sleep_ms(100);
    }
    a2_test_consumer_kill9(&d);
    a2_test_consumer_start(&d);
    assert_int_equal(a2_test_wait_in_file(d.log, "ready:", 2, 30000), 2);
    burst(1, 1); /* the stream runs on */
    a2_test_wait_in_file(d.audit, "\n", 2, 10000);
    wait_caught_up(d.audit, 10000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_int_equal(a2_test_count_in_file(d.log, "are not in the file"), 0);
    assert_int_equal(a2_test_transitions(d.audit, "gap"), 0);
    assert_exactly_once(d.audit);
    a2_test_exec(db, "drop table tc_other");
    a2_test_consumer_cleanup(&d);
}

static void pg_restart(const char *mode)
{
    const char *pgdev = getenv("A2_TEST_PGDEV");
    const char *top = getenv("A2_TOP");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/deploy/pg-dev restart %s %s >/dev/null",
             top ? top : ".", pgdev, mode);
    assert_int_equal(system(cmd), 0);
}

static void restart_under_consumer(const char *mode, const char *slot)
{
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run_with_worker(&d, slot, &w, 0);
    burst(0, 200);
    wait_caught_up(d.audit, 20000);
    a2_test_sleep_ms(300); /* let a status update confirm it */
    PQfinish(db);
    pg_restart(mode);
    db = a2_test_connect();
    burst(200, 200);
    wait_caught_up(d.audit, 30000);
    /* the worker keeps its connection and gets wake-ups after the restart */
    burst(400, 1);
    int64_t t0 = a2_test_now_ms();
    int found = 0;
    while (!found && a2_test_now_ms() - t0 < 10000) {
        if (!a2_test_worker_wait_for(&w, "wake", 10000, &m))
            break;
        found = strcmp(m.cursor, "#400") == 0;
    }
    assert_true(found);
    a2_test_worker_close(&w);
    wait_caught_up(d.audit, 10000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_exactly_once(d.audit);
    assert_true(a2_test_count_in_file(d.log, "streaming from slot") >= 2);
    assert_true(a2_test_count_in_file(d.log, "reconnecting in") >= 1);
    /* the checks after the restart ran on a new connection, not on the one
     * the restart ended */
    assert_int_equal(a2_test_count_in_file(d.log, "could not read wal_level"),
                     0);
    a2_test_consumer_cleanup(&d);
}

static void test_postgres_fast_restart(void **state)
{
    (void)state;
    restart_under_consumer("fast", "tc_pgfast");
}

static void test_postgres_crash_restart(void **state)
{
    (void)state;
    restart_under_consumer("immediate", "tc_pgcrash");
}

/* The walsender killed under the consumer (a lost connection). */
static void test_walsender_terminated(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tc_terminated");
    burst(0, 100);
    a2_test_exec(db, "select pg_terminate_backend(active_pid) from "
                     "pg_replication_slots where slot_name = 'tc_terminated'");
    burst(100, 100);
    wait_caught_up(d.audit, 30000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_exactly_once(d.audit);
    assert_true(a2_test_count_in_file(d.log, "reconnecting in") >= 1);
    assert_true(a2_test_count_in_file(d.log, "streaming from slot") >= 2);
    a2_test_consumer_cleanup(&d);
}

/* Waits until the file holds needle; fails after timeout_ms. */
static void wait_for_text(const char *path, const char *needle, int timeout_ms)
{
    if (a2_test_wait_in_file(path, needle, 1, timeout_ms) == 0) {
        char *t = a2_test_read_file(path);
        fail_msg("no \"%s\" in %d ms: %s", needle, timeout_ms, t ? t : "");
    }
}

/*
 * A walsender that stops answering while its connection stays open
 * (SIGSTOP): the consumer gives it up after --stream-timeout, says why the
 * slot is still busy while the stopped process holds it, and streams again
 * once it is gone, with nothing lost. An idle stream that answers is never
 * given up.
 */
static void test_walsender_stopped(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_init(&d, "tc_stopped");
    /* 3 s: a walsender of a busy host answers a reply request (sent at half
     * the timeout) well within the other half */
    const char *extra[] = {"--stream-timeout", "3000", NULL};
    a2_test_consumer_start_args(&d, 0, extra);
    /* idle for more than twice the timeout: kept */
    a2_test_sleep_ms(7000);
    assert_int_equal(a2_test_count_in_file(d.log, "sent nothing"), 0);
    burst(0, 50);
    wait_caught_up(d.audit, 20000);
    a2_test_stop_process(db,
                         "select active_pid from pg_replication_slots where "
                         "slot_name = 'tc_stopped'");
    burst(50, 50);
    wait_for_text(d.log, "the server sent nothing for", 20000);
    /* the silence it names is at least the timeout */
    char *log = a2_test_read_file(d.log);
    double quiet = 0;
    assert_int_equal(sscanf(strstr(log, "the server sent nothing for"),
                            "the server sent nothing for %lf s", &quiet),
                     1);
    free(log);
    assert_true(quiet >= 3.0);
    wait_for_text(d.log,
                  "is still held by the walsender of this consumer's "
                  "last stream",
                  20000);
    a2_test_continue_process();
    wait_caught_up(d.audit, 30000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_exactly_once(d.audit);
    assert_int_equal(a2_test_count_in_file(d.log, "streaming from slot"), 2);
    a2_test_consumer_cleanup(&d);
}

/* The backend that answered the consumer's last heartbeat. */
#define HEARTBEAT_BACKEND_SQL                                                  \
    "select pid from pg_stat_activity where application_name = "               \
    "'a2-consumer' and backend_type = 'client backend' and query like "        \
    "'%a2-hb%' order by backend_start desc limit 1"

/* Sets up consumer `name` and starts it with a stream timeout and a
 * heartbeat interval (ms), applies a first burst, waits for an idle
 * heartbeat, then stops the backend that answered it (SIGSTOP). */
static void start_and_stop_heartbeats(a2_test_consumer *d, const char *name,
                                      const char *timeout, const char *interval)
{
    a2_test_consumer_init(d, name);
    const char *extra[] = {"--stream-timeout", timeout, "--heartbeat-interval",
                           interval, NULL};
    a2_test_consumer_start_args(d, 0, extra);
    burst(0, 20);
    wait_caught_up(d->audit, 20000);
    int i = 0;
    while (a2_test_int(db, HEARTBEAT_BACKEND_SQL) <= 0) {
        if (++i > 200)
            fail_msg("no heartbeat was sent in 10 s");
        a2_test_sleep_ms(50);
    }
    a2_test_stop_process(db, HEARTBEAT_BACKEND_SQL);
}

/* Stops the consumer and checks that the audit has each version once, that
 * the log never says `absent`, and that it streamed from its slot once. */
static void stop_after_one_stream(a2_test_consumer *d, const char *absent)
{
    assert_int_equal(a2_test_consumer_stop(d), 0);
    assert_exactly_once(d->audit);
    assert_int_equal(a2_test_count_in_file(d->log, absent), 0);
    assert_int_equal(a2_test_count_in_file(d->log, "streaming from slot"), 1);
    a2_test_consumer_cleanup(d);
}

/*
 * The backend of the consumer's heartbeats stops answering: the heartbeat
 * in flight is given up after --stream-timeout with its connection, the next
 * ones go out on a new connection, and the stream, which answered all
 * along, is kept.
 */
static void test_query_unanswered(void **state)
{
    (void)state;
    a2_test_consumer d;
    start_and_stop_heartbeats(&d, "tc_unanswered", "3000", "300");
    wait_for_text(d.log, "a heartbeat got no answer from the server in 3.0 s",
                  20000);
    a2_test_continue_process();
    burst(20, 20);
    wait_caught_up(d.audit, 20000);
    /* the heartbeats after it go out on a new connection and are answered:
     * none is given up for longer than the timeout */
    a2_test_sleep_ms(4500);
    assert_int_equal(a2_test_count_in_file(d.log, "got no answer"), 1);
    assert_int_equal(a2_test_count_in_file(d.log, "could not send a heartbeat"),
                     0);
    stop_after_one_stream(&d, "the server sent nothing");
}

/*
 * A heartbeat is not waited for: while its backend does not answer (and the
 * stream timeout is far), the consumer keeps applying the stream, so the
 * audit (and the wake-ups sent with it) keep up.
 */
static void test_heartbeat_not_waited_for(void **state)
{
    (void)state;
    a2_test_consumer d;
    start_and_stop_heartbeats(&d, "tc_hbwait", "60000", "200");
    /* idle past the interval: the next heartbeat goes to the stopped
     * backend and gets no answer */
    a2_test_sleep_ms(800);
    burst(20, 20);
    /* well under the 60 s a wait for the heartbeat would take */
    wait_caught_up(d.audit, 20000);
    a2_test_continue_process();
    stop_after_one_stream(&d, "got no answer");
}

/*
 * The audit file cannot grow (a write fails with EFBIG, as on a full disk):
 * the consumer exits with the reason, and its position file does not
 * claim what did not reach the file (a torn line, lines never written).
 * Started again with room, it writes every version once.
 */
static void test_audit_write_fails(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_init(&d, "tc_auditfull");
    a2_test_consumer_set_file_limit(16384);
    a2_test_consumer_start(&d);
    a2_test_consumer_set_file_limit(0);
    burst(0, 300);
    int64_t t0 = a2_test_now_ms();
    int st = 0;
    while (waitpid(d.pid, &st, WNOHANG) == 0) {
        if (a2_test_now_ms() - t0 > 20000)
            fail_msg("a2-consumer did not stop on a failed audit write");
        a2_test_sleep_ms(20);
    }
    a2_test_untrack(d.pid);
    d.pid = 0;
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_int_equal(a2_test_count_in_file(d.log, "File too large"), 1);
    struct stat sb;
    assert_int_equal(stat(d.audit, &sb), 0);
    assert_true(sb.st_size <= 16384);
    a2_test_consumer_start(&d);
    wait_caught_up(d.audit, 30000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    assert_exactly_once(d.audit);
    a2_test_consumer_cleanup(&d);
}

/* Switches WAL segments and checkpoints until the slot is lost. */
static void invalidate_slot(const char *slot)
{
    char sql[256], *status = NULL;
    snprintf(sql, sizeof sql,
             "select wal_status from pg_replication_slots where slot_name = "
             "'%s'",
             slot);
    a2_test_exec(db, "alter system set max_slot_wal_keep_size = '1MB'");
    a2_test_exec(db, "select pg_reload_conf()");
    for (int i = 0; i < 20; i++) {
        a2_test_exec(db, "create table if not exists tc_filler(x int)");
        a2_test_exec(db, "insert into tc_filler values (1)");
        a2_test_exec(db, "select pg_switch_wal()");
        a2_test_exec(db, "checkpoint");
        free(status);
        status = a2_test_scalar(db, sql);
        if (status && strcmp(status, "lost") == 0)
            break;
    }
    a2_test_exec(db, "alter system reset max_slot_wal_keep_size");
    a2_test_exec(db, "select pg_reload_conf()");
    a2_test_exec(db, "drop table if exists tc_filler");
    assert_non_null(status);
    assert_string_equal(status, "lost");
    free(status);
}

/*
 * A slot invalidated by max_slot_wal_keep_size while the consumer is down:
 * it is recreated, the gap is one explicit audit record, streaming goes on.
 */
static void test_invalidated_slot_gap(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_msg m;
    a2_test_consumer_run(&d, "tc_lost");
    burst(0, 1);
    wait_caught_up(d.audit, 10000);
    assert_int_equal(a2_test_consumer_stop(&d), 0);

    invalidate_slot("tc_lost");

    a2_test_consumer_start(&d);
    assert_int_equal(
            a2_test_wait_in_file(d.log, "was invalidated; recreated", 1, 10000),
            1);
    /* the gap record reaches the file with the next group write */
    assert_int_equal(
            a2_test_wait_in_file(d.audit, "\"transition\":\"gap\"", 1, 10000),
            1);
    a2_test_worker_join(&w, d.sock, "w1", "c", NULL, 0);
    burst(4, 1);
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));
    assert_string_equal(m.cursor, "#4");
    a2_test_worker_close_stop(&w, &d);
    /* the line after the gap is the new change */
    char *text = a2_test_read_file(d.audit);
    char *gap = strstr(text, "\"transition\":\"gap\"");
    assert_non_null(gap);
    assert_non_null(strstr(gap, "\"cursor\":\"#4\""));
    free(text);
    a2_test_consumer_cleanup(&d);
}

/*
 * The slot lost while the consumer runs (held still with SIGSTOP while its
 * walsender is ended and the WAL moves on): it recreates the slot, writes
 * the gap and resyncs the connected workers.
 */
static void test_slot_lost_while_running(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_worker w;
    a2_test_consumer_run_with_worker(&d, "tc_lostrun", &w, 1);
    burst(0, 1);
    a2_test_msg m;
    assert_true(a2_test_worker_wait_for(&w, "wake", 5000, &m));

    kill(d.pid, SIGSTOP);
    a2_test_exec(db, "select pg_terminate_backend(active_pid) from "
                     "pg_replication_slots where slot_name = 'tc_lostrun'");
    for (int i = 0; i < 100; i++) {
        if (a2_test_int(db, "select count(*) from pg_replication_slots where "
                            "slot_name = 'tc_lostrun' and active") == 0)
            break;
        a2_test_sleep_ms(20);
    }
    invalidate_slot("tc_lostrun");
    kill(d.pid, SIGCONT);

    /* every worker gets a resync, then streaming goes on */
    assert_true(a2_test_worker_wait_for(&w, "resync", 10000, &m));
    assert_true(m.all_sessions);
    burst(4, 1);
    assert_true(a2_test_worker_wait_for(&w, "wake", 10000, &m));
    assert_string_equal(m.cursor, "#4");
    a2_test_worker_close_stop(&w, &d);
    assert_int_equal(a2_test_transitions(d.audit, "gap"), 1);
    assert_int_equal(a2_test_count_in_file(d.log, "was invalidated; recreated"),
                     1);
    a2_test_consumer_cleanup(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_kill9_mid_burst, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_kill9_after_position_moved,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_postgres_fast_restart, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_postgres_crash_restart, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_walsender_stopped, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_query_unanswered, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_heartbeat_not_waited_for,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_audit_write_fails, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_walsender_terminated, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_slot_lost_while_running, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_invalidated_slot_gap, setup,
                                            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
