/*
 * Unit tests of consumer/apply.c: wal2json lines (decoded by liba2decoder)
 * → audit lines, wake-ups, timers, cleared, log, presence, and the
 * exactly-once skipping on resume.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "../../consumer/apply.h"

/* ---- recording sink ---- */

static char events[64][256];
static int nevents;

static void rec(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (nevents < 64)
        vsnprintf(events[nevents++], sizeof events[0], fmt, ap);
    va_end(ap);
}

/* The xid of the last wake-up and log message pushed. */
static uint64_t last_wake_xid, last_log_xid;

/* Every wake-up and cleared message pushed (the recorder keeps 64); the
 * wake-ups of an even head. */
static long nwake_all, nwake_even, ncleared_all, npresence_all;
static char last_presence[256];

static void s_wake(void *ctx, const char *consumer, const char *session,
                   const char *cursor_key, int64_t head, uint64_t lsn,
                   uint64_t xid, const int64_t *trace_us)
{
    (void)ctx;
    (void)trace_us;
    last_wake_xid = xid;
    nwake_all++;
    nwake_even += head % 2 == 0;
    rec("wake %s %s %s %" PRId64 " %" PRIX64, consumer, session, cursor_key,
        head, lsn);
}

/* Every inserted event reaches the log sink; the tests that look at them
 * set record_logs. */
static int record_logs;

static void s_log(void *ctx, const char *session, int64_t idx, const char *type,
                  uint64_t lsn, uint64_t xid)
{
    (void)ctx;
    (void)lsn;
    last_log_xid = xid;
    if (record_logs)
        rec("log %s %" PRId64 " %s", session, idx, type);
}

static void s_cleared(void *ctx, const char *session, int64_t idx, uint64_t lsn)
{
    (void)ctx;
    (void)lsn;
    ncleared_all++;
    rec("cleared %s %" PRId64, session, idx);
}

static void s_presence(void *ctx, const char *ns, const char *participant,
                       const char *fields, uint64_t lsn)
{
    (void)ctx;
    (void)lsn;
    npresence_all++;
    snprintf(last_presence, sizeof last_presence, "%s %s %s", ns, participant,
             fields);
    rec("presence %s %s %s", ns, participant, fields);
}

static void s_resync(void *ctx)
{
    (void)ctx;
    rec("resync");
}

/* The secret of the daemon's expiry ticks in these tests. */
#define SECRET "0123456789abcdef0123456789abcdef"

static const a2__sink sink = {NULL,      s_wake,     s_log,
                              s_cleared, s_presence, s_resync};

/* ---- fixture ---- */

typedef struct {
    char dir[64];
    char path[128];
    a2_decoder *dec;
    a2__timers *timers;
    a2__audit *audit;
    a2__apply *ap;
} fx;

static void fx_open(fx *f, int keep_dir)
{
    char err[256];
    a2__audit_resume r;
    if (!keep_dir) {
        snprintf(f->dir, sizeof f->dir, "/tmp/a2-test-apply.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof f->path, "%s/audit", f->dir);
    }
    f->dec = a2_decoder_new();
    f->timers = a2__timers_new();
    f->audit = a2__audit_open(f->path, &r, err, sizeof err);
    assert_non_null(f->audit);
    f->ap = a2__apply_new(f->audit, f->timers, &sink, &r);
    assert_non_null(f->ap);
    a2__apply_set_tick_secret(f->ap, SECRET);
    nevents = 0;
    nwake_all = nwake_even = ncleared_all = npresence_all = 0;
}

static void fx_close(fx *f)
{
    a2__apply_free(f->ap);
    a2__audit_close(f->audit);
    a2__timers_free(f->timers);
    a2_decoder_free(f->dec);
}

static void fx_destroy(fx *f)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
}

static void feed(fx *f, const char *line, uint64_t data_start)
{
    const a2_change *c;
    char err[256];
    int rc = a2_decoder_decode(f->dec, line, strlen(line), &c);
    if (rc != 0)
        fail_msg("decode: %s in %s", a2_decoder_last_error(f->dec)->message,
                 line);
    assert_int_equal(a2__apply_change(f->ap, c, data_start, err, sizeof err),
                     0);
}

static void begin(fx *f, int xid, const char *lsn)
{
    char b[256];
    snprintf(b, sizeof b,
             "{\"action\":\"B\",\"xid\":%d,\"timestamp\":\"2026-11-29 "
             "06:40:48.313747+00\",\"lsn\":\"0/1\",\"nextlsn\":\"%s\"}",
             xid, lsn);
    feed(f, b, 0);
}

static void commit(fx *f, int xid, const char *lsn, uint64_t end)
{
    char b[256];
    snprintf(b, sizeof b,
             "{\"action\":\"C\",\"xid\":%d,\"timestamp\":\"2026-11-29 "
             "06:40:48.313747+00\",\"lsn\":\"0/1\",\"nextlsn\":\"%s\"}",
             xid, lsn);
    feed(f, b, end);
}

static const char *num(char *buf, int64_t v)
{
    if (v < 0)
        return "null";
    sprintf(buf, "%" PRId64, v);
    return buf;
}

/* Columns of an a2_cursors row as wal2json prints them. */
static void cols(char *out, size_t len, const char *session,
                 const char *consumer, const char *key, const char *kind,
                 int64_t head, int attempt, const char *holder, int64_t expires,
                 int64_t failed_at)
{
    char h[32], e[32], fa[32], hold[64];
    snprintf(hold, sizeof hold, holder ? "\"%s\"" : "null",
             holder ? holder : "");
    snprintf(out, len,
             "[{\"name\":\"session_id\",\"value\":\"%s\"},"
             "{\"name\":\"consumer\",\"value\":\"%s\"},"
             "{\"name\":\"cursor_key\",\"value\":\"%s\"},"
             "{\"name\":\"epoch\",\"value\":1},"
             "{\"name\":\"kind\",\"value\":\"%s\"},"
             "{\"name\":\"lane\",\"value\":null},"
             "{\"name\":\"position\",\"value\":0},"
             "{\"name\":\"head\",\"value\":%s},"
             "{\"name\":\"types\",\"value\":null},"
             "{\"name\":\"attempt_count\",\"value\":%d},"
             "{\"name\":\"first_claimed_at\",\"value\":null},"
             "{\"name\":\"last_claimed_at\",\"value\":null},"
             "{\"name\":\"claim_holder\",\"value\":%s},"
             "{\"name\":\"claim_expires_at\",\"value\":%s},"
             "{\"name\":\"failure_count\",\"value\":0},"
             "{\"name\":\"last_failed_at\",\"value\":null},"
             "{\"name\":\"last_failed_attempt\",\"value\":null},"
             "{\"name\":\"last_error\",\"value\":null},"
             "{\"name\":\"failed_at\",\"value\":%s},"
             "{\"name\":\"completed_idx\",\"value\":null},"
             "{\"name\":\"completed_attempt\",\"value\":null},"
             "{\"name\":\"returned_event_ids\",\"value\":null}]",
             session, consumer, key, kind, num(h, head), attempt, hold,
             num(e, expires), num(fa, failed_at));
}

static void cursor_insert(fx *f, const char *key, int64_t head)
{
    char c[4096], line[5000];
    cols(c, sizeof c, "s1", "c", key, "event", head, 0, NULL, -1, -1);
    snprintf(line, sizeof line,
             "{\"action\":\"I\",\"xid\":7,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_cursors\",\"columns\":%s}",
             c);
    feed(f, line, 0);
}

/* An a2_cursors update from the columns o to the columns n. */
static void feed_update(fx *f, const char *o, const char *n)
{
    char line[9000];
    snprintf(line, sizeof line,
             "{\"action\":\"U\",\"xid\":7,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_cursors\",\"columns\":%s,"
             "\"identity\":%s}",
             n, o);
    feed(f, line, 0);
}

static void cursor_update(fx *f, const char *key, int64_t oh, int oa,
                          const char *oholder, int64_t oexp, int64_t ofail,
                          int64_t nh, int na, const char *nholder, int64_t nexp,
                          int64_t nfail)
{
    char o[4096], n[4096];
    cols(o, sizeof o, "s1", "c", key, "event", oh, oa, oholder, oexp, ofail);
    cols(n, sizeof n, "s1", "c", key, "event", nh, na, nholder, nexp, nfail);
    feed_update(f, o, n);
}

/* Replaces the first occurrence of from in s (room for it) with to. */
static void replace_in(char *s, size_t len, const char *from, const char *to)
{
    char *at = strstr(s, from);
    assert_non_null(at);
    size_t tail = strlen(at + strlen(from));
    assert_true((size_t)(at - s) + strlen(to) + tail < len);
    memmove(at + strlen(to), at + strlen(from), tail + 1);
    memcpy(at, to, strlen(to));
}

/* The claim of key's unclaimed head by w1 until expires (claimed at 1000):
 * a "claimed" transition. */
static void claim_update(fx *f, const char *key, int64_t head, int64_t expires)
{
    char o[4096], n[4096];
    cols(o, sizeof o, "s1", "c", key, "event", head, 0, NULL, -1, -1);
    cols(n, sizeof n, "s1", "c", key, "event", head, 1, "w1", expires, -1);
    replace_in(n, sizeof n, "\"first_claimed_at\",\"value\":null",
               "\"first_claimed_at\",\"value\":1000");
    replace_in(n, sizeof n, "\"last_claimed_at\",\"value\":null",
               "\"last_claimed_at\",\"value\":1000");
    feed_update(f, o, n);
}

static void event_insert(fx *f, const char *session, int64_t idx,
                         const char *type)
{
    char line[1024];
    snprintf(
            line, sizeof line,
            "{\"action\":\"I\",\"xid\":7,\"lsn\":\"0/1\",\"schema\":\"public\","
            "\"table\":\"a2_events\",\"columns\":["
            "{\"name\":\"session_id\",\"value\":\"%s\"},"
            "{\"name\":\"idx\",\"value\":%" PRId64 "},"
            "{\"name\":\"event_type\",\"value\":\"%s\"},"
            "{\"name\":\"payload\",\"value\":\"{}\"},"
            "{\"name\":\"event_id\",\"value\":\"e%" PRId64 "\"},"
            "{\"name\":\"created_at\",\"value\":1},"
            "{\"name\":\"cause\",\"value\":null}]}",
            session, idx, type, idx);
    feed(f, line, 0);
}

static void cursor_delete(fx *f, const char *session, const char *key,
                          int64_t head)
{
    char o[4096], line[5000];
    cols(o, sizeof o, session, "c", key, "lane", head, 0, NULL, -1, -1);
    snprintf(line, sizeof line,
             "{\"action\":\"D\",\"xid\":7,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_cursors\",\"identity\":%s}",
             o);
    feed(f, line, 0);
}

/* The transition of the n-th (0-based) audit line of the file. */
static char *transition_at(const char *path, int n)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[8192];
    char *out = NULL;
    for (int i = 0; i <= n && fgets(line, sizeof line, fp); i++) {
        if (i < n)
            continue;
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        out = strdup(json_string_value(json_object_get(j, "transition")));
        json_decref(j);
    }
    fclose(fp);
    assert_non_null(out);
    return out;
}

static int count_lines(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    int n = 0, ch;
    while ((ch = fgetc(fp)) != EOF)
        n += ch == '\n';
    fclose(fp);
    return n;
}

/* ---- tests ---- */

static void test_started_wakes_and_audits(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    begin(&f, 7, "0/200");
    event_insert(&f, "s1", 1, "job");
    cursor_insert(&f, "#1", 1);
    assert_int_equal(nevents, 0); /* nothing before the commit */
    commit(&f, 7, "0/200", 0x200);
    assert_int_equal(nevents, 1);
    assert_string_equal(events[0], "wake c s1 #1 1 200");
    /* the commit's xid, for the claim to wait for its visibility */
    assert_int_equal(last_wake_xid, 7);
    assert_true(a2__apply_applied(f.ap) == 0x200);
    char err[256];
    assert_int_equal(a2__audit_sync(f.audit, 0, err, sizeof err), 0);
    FILE *fp = fopen(f.path, "r");
    char line[4096];
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    json_t *j = json_loads(line, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "lsn")), "0/200");
    assert_int_equal(json_integer_value(json_object_get(j, "xid")), 7);
    assert_string_equal(json_string_value(json_object_get(j, "at")),
                        "2026-11-29T06:40:48.313Z");
    assert_string_equal(json_string_value(json_object_get(j, "op")), "insert");
    assert_string_equal(json_string_value(json_object_get(j, "transition")),
                        "started");
    assert_string_equal(json_string_value(json_object_get(j, "session")), "s1");
    assert_string_equal(json_string_value(json_object_get(j, "cursor")), "#1");
    assert_true(json_is_null(json_object_get(j, "before")));
    json_t *after = json_object_get(j, "after");
    assert_int_equal(json_integer_value(json_object_get(after, "head")), 1);
    assert_true(json_is_null(json_object_get(after, "holder")));
    json_decref(j);
    fx_close(&f);
    fx_destroy(&f);
}

static void test_claim_timer_fail_retry_complete(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    /* claimed: lease timer, no wake */
    begin(&f, 8, "0/300");
    cursor_update(&f, "#1", 1, 0, NULL, -1, -1, 1, 1, "w1", 5000, -1);
    commit(&f, 8, "0/300", 0x300);
    assert_int_equal(nevents, 0);
    assert_int_equal(a2__timers_count(f.timers), 1);
    assert_int_equal(a2__timers_next(f.timers), 5000);
    /* lapses: the timer wakes for the same head */
    assert_int_equal(a2__apply_fire_timers(f.ap, 4999), 0);
    last_wake_xid = 99;
    assert_int_equal(a2__apply_fire_timers(f.ap, 5000), 1);
    assert_int_equal(last_wake_xid, 0); /* a timer's: no commit to wait for */
    assert_string_equal(events[0], "wake c s1 #1 1 300");
    /* failed with retry-after: a hold with no holder → timer */
    begin(&f, 9, "0/400");
    cursor_update(&f, "#1", 1, 1, "w1", 5000, -1, 1, 1, NULL, 9000, -1);
    commit(&f, 9, "0/400", 0x400);
    assert_int_equal(a2__timers_next(f.timers), 9000);
    /* dead-lettered: no timer, no wake */
    begin(&f, 10, "0/500");
    cursor_update(&f, "#1", 1, 1, NULL, 9000, -1, 1, 1, NULL, 9000, 123);
    commit(&f, 10, "0/500", 0x500);
    assert_int_equal(a2__timers_count(f.timers), 0);
    assert_int_equal(nevents, 1);
    /* retried (failed_at cleared) → wake */
    begin(&f, 11, "0/600");
    cursor_update(&f, "#1", 1, 1, NULL, -1, 123, 1, 1, NULL, -1, -1);
    commit(&f, 11, "0/600", 0x600);
    assert_int_equal(nevents, 2);
    assert_string_equal(events[1], "wake c s1 #1 1 600");
    /* completed to the next head → wake for the new head, timer gone */
    begin(&f, 12, "0/700");
    cursor_update(&f, "#1", 1, 2, "w2", 7000, -1, 1, 2, "w2", 7000, -1);
    cursor_update(&f, "#1", 1, 2, "w2", 7000, -1, 3, 0, NULL, -1, -1);
    commit(&f, 12, "0/700", 0x700);
    assert_int_equal(nevents, 3);
    assert_string_equal(events[2], "wake c s1 #1 3 700");
    assert_int_equal(a2__timers_count(f.timers), 0);
    a2__apply_stats st;
    a2__apply_get_stats(f.ap, &st);
    assert_int_equal(st.transactions, 5);
    assert_int_equal(st.audit_lines, 6);
    assert_int_equal(st.timer_wakes, 1);
    fx_close(&f);
    fx_destroy(&f);
}

/* A head started and claimed in one transaction (a log cursor brought up
 * to date in its claim's transaction): no wake-up, since the claim holds
 * it at the commit; its lease's timer is armed. A wake-up of another head,
 * or of another cursor, in the same transaction stays. */
static void test_started_and_claimed_no_wake(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    begin(&f, 7, "0/200");
    event_insert(&f, "s1", 1, "job");
    cursor_insert(&f, "#1", 1);
    claim_update(&f, "#1", 1, 5000);
    cursor_insert(&f, "#2", 2);
    commit(&f, 7, "0/200", 0x200);
    char err[256];
    assert_int_equal(a2__audit_sync(f.audit, 0, err, sizeof err), 0);
    char *tr = transition_at(f.path, 1);
    assert_string_equal(tr, "claimed");
    free(tr);
    assert_int_equal(nevents, 1);
    assert_string_equal(events[0], "wake c s1 #2 2 200");
    assert_int_equal(a2__timers_count(f.timers), 1);
    assert_int_equal(a2__timers_next(f.timers), 5000);
    /* a claim of a head the transaction did not wake drops nothing else */
    begin(&f, 8, "0/300");
    cursor_insert(&f, "#3", 3);
    claim_update(&f, "#2", 2, 6000);
    commit(&f, 8, "0/300", 0x300);
    assert_int_equal(nevents, 2);
    assert_string_equal(events[1], "wake c s1 #3 3 300");
    a2__apply_stats st;
    a2__apply_get_stats(f.ap, &st);
    assert_int_equal(st.audit_lines, 5);
    fx_close(&f);
    fx_destroy(&f);
}

static void test_cleared_log_presence(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    record_logs = 1;
    begin(&f, 20, "0/800");
    event_insert(&f, "s1", 5, "user_msg");
    event_insert(&f, "s1", 6, "a2.cleared");
    feed(&f,
         "{\"action\":\"I\",\"xid\":20,\"lsn\":\"0/1\",\"schema\":\"public\","
         "\"table\":\"a2_clears\",\"columns\":[{\"name\":\"session_id\","
         "\"value\":\"s1\"},{\"name\":\"clear_index\",\"value\":6}]}",
         0);
    feed(&f,
         "{\"action\":\"I\",\"xid\":20,\"lsn\":\"0/1\",\"schema\":\"public\","
         "\"table\":\"a2_presence\",\"columns\":[{\"name\":\"ns\",\"value\":"
         "\"room\"},{\"name\":\"participant\",\"value\":\"p1\"},{\"name\":"
         "\"field\",\"value\":\"status\"},{\"name\":\"value\",\"value\":"
         "\"\\\"online\\\"\"},{\"name\":\"seen\",\"value\":null},{\"name\":"
         "\"at\",\"value\":1},{\"name\":\"expires_at\",\"value\":2}]}",
         0);
    feed(&f,
         "{\"action\":\"D\",\"xid\":20,\"lsn\":\"0/1\",\"schema\":\"public\","
         "\"table\":\"a2_presence\",\"identity\":[{\"name\":\"ns\",\"value\":"
         "\"room\"},{\"name\":\"participant\",\"value\":\"p1\"},{\"name\":"
         "\"field\",\"value\":\"typing\"}]}",
         0);
    commit(&f, 20, "0/800", 0x800);
    assert_int_equal(nevents, 3);
    assert_string_equal(events[0], "log s1 5 user_msg");
    assert_int_equal(last_log_xid, 20);
    assert_string_equal(events[1], "cleared s1 6"); /* once, not twice */
    assert_string_equal(
            events[2],
            "presence room p1 {\"status\":\"online\",\"typing\":null}");
    fx_close(&f);
    record_logs = 0;
    fx_destroy(&f);
}

/* A presence row of room/p1 as wal2json prints an insert or update of it;
 * value NULL leaves the column out (a TOASTed value the update kept). */
static void presence_row(fx *f, int xid, const char *action, const char *field,
                         const char *value, int64_t expires_at)
{
    char b[1024], v[256] = "";
    if (value)
        snprintf(v, sizeof v, "{\"name\":\"value\",\"value\":\"%s\"},", value);
    snprintf(b, sizeof b,
             "{\"action\":\"%s\",\"xid\":%d,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_presence\",\"columns\":[{\"name\":"
             "\"ns\",\"value\":\"room\"},{\"name\":\"participant\",\"value\":"
             "\"p1\"},{\"name\":\"field\",\"value\":\"%s\"},%s{\"name\":"
             "\"seen\",\"value\":null},{\"name\":\"at\",\"value\":1},{\"name\":"
             "\"expires_at\",\"value\":%" PRId64 "}]%s}",
             action, xid, field, v, expires_at,
             strcmp(action, "U") == 0
                     ? ",\"identity\":[{\"name\":\"ns\",\"value\":\"room\"},"
                       "{\"name\":\"participant\",\"value\":\"p1\"},{\"name\":"
                       "\"field\",\"value\":\"x\"}]"
                     : "");
    feed(f, b, 0);
}

static void tick(fx *f, int xid, const char *lsn, uint64_t end,
                 const char *prefix, int transactional, const char *content)
{
    char b[256];
    begin(f, xid, lsn);
    snprintf(b, sizeof b,
             "{\"action\":\"M\",\"xid\":%d,\"lsn\":\"0/1\",\"transactional\":"
             "%s,\"prefix\":\"%s\",\"content\":\"%s\"}",
             xid, transactional ? "true" : "false", prefix, content);
    feed(f, b, 0);
    commit(f, xid, lsn, end);
}

/* Expiry is pushed by the tick that comes back through the stream: only
 * fields expired by the tick's time, live ones (not tombstones), with the
 * latest expiry the stream showed, and each once. */
static void test_presence_expiry_tick(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    assert_true(a2__apply_expiry_due(f.ap) == INT64_MAX);
    begin(&f, 30, "0/900");
    presence_row(&f, 30, "I", "status", "\\\"online\\\"", 1000);
    presence_row(&f, 30, "I", "typing", "true", 5000);
    presence_row(&f, 30, "I", "gone", "null", 10); /* a tombstone */
    commit(&f, 30, "0/900", 0x900);
    assert_int_equal(nevents, 1);
    assert_true(a2__apply_expiry_due(f.ap) == 1000);

    /* not a tick: another prefix, not transactional, not a time */
    tick(&f, 31, "0/910", 0x910, "a2", 1, "expire 2000");
    tick(&f, 32, "0/920", 0x920, "a2-hb", 0, "expire 2000");
    tick(&f, 33, "0/930", 0x930, "a2-hb", 1, "expire " SECRET " soon");
    tick(&f, 34, "0/940", 0x940, "a2-hb", 1, "expire " SECRET " -5");
    assert_int_equal(nevents, 1);
    assert_true(a2__apply_expiry_due(f.ap) == 1000);
    /* forged: any role may emit a message; without the secret it is not
     * acted on */
    tick(&f, 43, "0/944", 0x944, "a2-hb", 1, "expire 99999999999999");
    tick(&f, 44, "0/948", 0x948, "a2-hb", 1,
         "expire ffffffffffffffffffffffffffffffff 99999999999999");
    assert_int_equal(nevents, 1);
    assert_true(a2__apply_expiry_due(f.ap) == 1000);
    a2__apply_stats forged;
    a2__apply_get_stats(f.ap, &forged);
    assert_int_equal(forged.forged_ticks, 2);

    /* a tick before anything expired pushes nothing */
    tick(&f, 35, "0/950", 0x950, "a2-hb", 1, "expire " SECRET " 999");
    assert_int_equal(nevents, 1);
    assert_true(a2__apply_expiry_due(f.ap) == 1000);

    tick(&f, 36, "0/960", 0x960, "a2-hb", 1, "expire " SECRET " 2000");
    assert_int_equal(nevents, 2);
    assert_string_equal(events[1], "presence room p1 {\"status\":null}");
    assert_true(a2__apply_expiry_due(f.ap) == 5000);
    tick(&f, 37, "0/970", 0x970, "a2-hb", 1, "expire " SECRET " 2000");
    assert_int_equal(nevents, 2); /* once */

    /* renewed without a new value (TOAST kept it): no patch, later expiry */
    begin(&f, 38, "0/980");
    presence_row(&f, 38, "U", "typing", NULL, 9000);
    commit(&f, 38, "0/980", 0x980);
    assert_int_equal(nevents, 2);
    tick(&f, 39, "0/990", 0x990, "a2-hb", 1, "expire " SECRET " 6000");
    assert_int_equal(nevents, 2);
    assert_true(a2__apply_expiry_due(f.ap) == 9000);

    /* a tombstone ends it: nothing to push at its old expiry */
    begin(&f, 40, "0/9A0");
    presence_row(&f, 40, "U", "typing", "null", 20000);
    commit(&f, 40, "0/9A0", 0x9A0);
    assert_int_equal(nevents, 3);
    assert_string_equal(events[2], "presence room p1 {\"typing\":null}");
    tick(&f, 41, "0/9B0", 0x9B0, "a2-hb", 1, "expire " SECRET " 30000");
    assert_int_equal(nevents, 3);
    assert_true(a2__apply_expiry_due(f.ap) == INT64_MAX);

    /* rows read from the table (start), forgotten on demand */
    assert_int_equal(
            a2__apply_track_presence(f.ap, "hall", "ann", "seat", 7000), 0);
    assert_true(a2__apply_expiry_due(f.ap) == 7000);
    a2__apply_forget_presence(f.ap);
    assert_true(a2__apply_expiry_due(f.ap) == INT64_MAX);
    assert_int_equal(
            a2__apply_track_presence(f.ap, "hall", "ann", "seat", 7000), 0);
    assert_int_equal(
            a2__apply_track_presence(f.ap, "hall", "bob", "seat", 7500), 0);
    tick(&f, 42, "0/9C0", 0x9C0, "a2-hb", 1, "expire " SECRET " 8000");
    assert_int_equal(nevents, 5);
    assert_string_equal(events[3], "presence hall ann {\"seat\":null}");
    assert_string_equal(events[4], "presence hall bob {\"seat\":null}");
    a2__apply_stats st;
    a2__apply_get_stats(f.ap, &st);
    assert_int_equal(st.presence_expired, 3);
    assert_int_equal(st.expire_ticks, 6); /* 35, 36, 37, 39, 41 and 42 */
    fx_close(&f);
    fx_destroy(&f);
}

/* Many live fields, ticks that each expire a few: every tick pushes exactly
 * the fields due by its time (one patch a participant, its fields by name),
 * and the rest stay for later ticks. The expiries are kept by time, so a
 * tick costs what it expires, not a walk of every live field (100,000 here,
 * 1,000 ticks). */
static void test_presence_expiry_many(void **state)
{
    (void)state;
    enum { N = 100000, TICKS = 1000, T0 = 1000000 };
    fx f;
    char pa[32], fd[8], lsn[32], content[96], want[160];
    fx_open(&f, 0);
    for (int i = 0; i < N; i++) {
        snprintf(pa, sizeof pa, "p%d", i / 2);
        snprintf(fd, sizeof fd, "f%d", i % 2);
        assert_int_equal(a2__apply_track_presence(f.ap, "hall", pa, fd,
                                                  T0 + N - 1 - i),
                         0);
    }
    /* one participant's fields at one time, written out of order */
    assert_int_equal(a2__apply_track_presence(f.ap, "hall", "zed", "c", 3 * T0), 0);
    assert_int_equal(a2__apply_track_presence(f.ap, "hall", "zed", "a", 3 * T0), 0);
    assert_int_equal(a2__apply_track_presence(f.ap, "hall", "zed", "b", 3 * T0), 0);
    assert_true(a2__apply_expiry_due(f.ap) == T0);
    for (int k = 1; k <= TICKS; k++) {
        /* fields N-2k and N-2k+1 (participant N/2-k) are due by T0+2k-1 */
        uint64_t end = 0x1000 + (uint64_t)k * 16;
        snprintf(lsn, sizeof lsn, "0/%" PRIX64, end);
        snprintf(content, sizeof content, "expire " SECRET " %d",
                 T0 + 2 * k - 1);
        tick(&f, 100 + k, lsn, end, "a2-hb", 1, content);
        assert_int_equal(npresence_all, k);
        snprintf(want, sizeof want, "hall p%d {\"f0\":null,\"f1\":null}",
                 N / 2 - k);
        assert_string_equal(last_presence, want);
        assert_true(a2__apply_expiry_due(f.ap) == T0 + 2 * k);
    }
    /* the rest at once: one patch a participant, zed's fields by name */
    uint64_t end = 0x1000 + (uint64_t)(TICKS + 1) * 16;
    snprintf(lsn, sizeof lsn, "0/%" PRIX64, end);
    tick(&f, 100 + TICKS + 1, lsn, end, "a2-hb", 1,
         "expire " SECRET " 9000000");
    assert_int_equal(npresence_all, N / 2 + 1);
    assert_string_equal(last_presence,
                        "hall zed {\"a\":null,\"b\":null,\"c\":null}");
    assert_true(a2__apply_expiry_due(f.ap) == INT64_MAX);
    a2__apply_stats st;
    a2__apply_get_stats(f.ap, &st);
    assert_int_equal(st.presence_expired, N + 3);
    fx_close(&f);
    fx_destroy(&f);
}

/* A crash after the first of two lines of a transaction: on restart the
 * transaction comes again and only its second line is written. */
static void test_resume_skips_written_lines(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    begin(&f, 30, "0/900");
    cursor_insert(&f, "#1", 1);
    commit(&f, 30, "0/900", 0x900);
    fx_close(&f);
    /* simulate the torn transaction: one of its two lines made it */
    FILE *fp = fopen(f.path, "a");
    fputs("{\"lsn\":\"0/A00\",\"op\":\"insert\"}\n", fp);
    fclose(fp);
    char spath[160];
    snprintf(spath, sizeof spath, "%s.lsn", f.path);
    unlink(spath);
    fx_open(&f, 1);
    /* the server resends from 0/900: the first transaction is skipped */
    begin(&f, 30, "0/900");
    cursor_insert(&f, "#1", 1);
    commit(&f, 30, "0/900", 0x900);
    begin(&f, 31, "0/A00");
    cursor_insert(&f, "#2", 2);
    cursor_insert(&f, "#3", 3);
    commit(&f, 31, "0/A00", 0xA00);
    begin(&f, 32, "0/B00");
    cursor_insert(&f, "#4", 4);
    commit(&f, 32, "0/B00", 0xB00);
    fx_close(&f);
    assert_int_equal(count_lines(f.path), 4); /* 1 + 2 + 1 */
    fp = fopen(f.path, "r");
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, fp)) {
        n++;
        if (n == 3)
            assert_non_null(strstr(line, "\"cursor\":\"#3\""));
        if (n == 4)
            assert_non_null(strstr(line, "\"cursor\":\"#4\""));
    }
    fclose(fp);
    fx_destroy(&f);
}

/* A transaction whose audit text passes the buffer bound is written early;
 * cut off mid-way and sent again, it ends up in the file exactly once. */
static void test_big_transaction_cut_and_resent(void **state)
{
    (void)state;
    enum { N = 16000 }; /* ~5 MB of audit text: one early write */
    fx f;
    fx_open(&f, 0);
    char key[32];
    begin(&f, 40, "0/C00");
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "#%d", i);
        cursor_insert(&f, key, i + 1);
    }
    /* the connection is lost before the commit */
    a2__apply_abort_txn(f.ap);
    int early = count_lines(f.path);
    assert_true(early > 0 && early < N);
    assert_int_equal(nevents, 0);
    /* the server sends it again, whole */
    begin(&f, 40, "0/C00");
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "#%d", i);
        cursor_insert(&f, key, i + 1);
    }
    commit(&f, 40, "0/C00", 0xC00);
    fx_close(&f);
    assert_int_equal(count_lines(f.path), N);
    /* every cursor once, in order */
    FILE *fp = fopen(f.path, "r");
    char line[4096], want[64];
    for (int i = 0; i < N; i++) {
        assert_non_null(fgets(line, sizeof line, fp));
        snprintf(want, sizeof want, "\"cursor\":\"#%d\"", i);
        if (!strstr(line, want))
            fail_msg("line %d is not cursor #%d: %s", i, i, line);
    }
    fclose(fp);
    fx_destroy(&f);
}

/* A presence field of participant p<i> in room, its value i. */
static void presence_of(fx *f, int i, const char *field)
{
    char b[1024];
    snprintf(b, sizeof b,
             "{\"action\":\"I\",\"xid\":41,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_presence\",\"columns\":[{\"name\":"
             "\"ns\",\"value\":\"room\"},{\"name\":\"participant\",\"value\":"
             "\"p%d\"},{\"name\":\"field\",\"value\":\"%s\"},{\"name\":"
             "\"value\",\"value\":\"%d\"},{\"name\":\"seen\",\"value\":null},"
             "{\"name\":\"at\",\"value\":1},{\"name\":\"expires_at\","
             "\"value\":90000}]}",
             i, field, i);
    feed(f, b, 0);
}

/* One transaction of many wake-ups, claims, clears and presence writes (an
 * application's batch): a claim voids only its own head's earlier wake-up,
 * each session's clear goes out once, a wake-up after a claim of the same
 * head stands, each participant gets one patch of its fields, in the order
 * of their first writes. */
static void test_big_transaction_claims_and_clears(void **state)
{
    (void)state;
    enum { N = 12000 };
    fx f;
    fx_open(&f, 0);
    char key[32], session[32], line[512];
    begin(&f, 41, "0/D00");
    for (int i = 1; i <= N; i++) {
        snprintf(key, sizeof key, "#%d", i);
        cursor_insert(&f, key, i);
    }
    for (int i = 2; i <= N; i += 2) {
        snprintf(key, sizeof key, "#%d", i);
        claim_update(&f, key, i, 5000 + i);
    }
    /* woken again after its claim (released, say): this wake-up stands */
    cursor_insert(&f, "#2", 2);
    for (int i = 1; i <= N; i++) {
        snprintf(session, sizeof session, "c%d", i);
        event_insert(&f, session, 3, "a2.cleared");
        snprintf(line, sizeof line,
                 "{\"action\":\"I\",\"xid\":41,\"lsn\":\"0/1\",\"schema\":"
                 "\"public\",\"table\":\"a2_clears\",\"columns\":[{\"name\":"
                 "\"session_id\",\"value\":\"%s\"},{\"name\":\"clear_index\","
                 "\"value\":3}]}",
                 session);
        feed(&f, line, 0);
        if (i % 1000 == 1) /* a third time: still once */
            feed(&f, line, 0);
    }
    event_insert(&f, "c1", 4, "a2.cleared"); /* further: once more */
    enum { P = N / 4 };
    for (int i = 1; i <= P; i++)
        presence_of(&f, i, "a");
    for (int i = P; i >= 1; i--)
        presence_of(&f, i, "b");
    commit(&f, 41, "0/D00", 0xD00);
    assert_int_equal(npresence_all, P);
    char want[64];
    snprintf(want, sizeof want, "room p%d {\"a\":%d,\"b\":%d}", P, P, P);
    assert_string_equal(last_presence, want);
    assert_int_equal(nwake_all, N / 2 + 1);
    assert_int_equal(nwake_even, 1);
    assert_int_equal(ncleared_all, N + 1);
    /* the leases' timers, but #2's: its insert cancelled it */
    assert_int_equal(a2__timers_count(f.timers), N / 2 - 1);
    a2__apply_stats st;
    a2__apply_get_stats(f.ap, &st);
    assert_int_equal(st.overflows, 0);
    assert_int_equal(st.wakes, N / 2 + 1);
    assert_int_equal(st.cleared, N + 1);
    fx_close(&f);
    fx_destroy(&f);
}

/* Text with quotes, backslashes, control characters and UTF-8 survives
 * the audit line exactly. */
static void test_audit_line_escapes(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    char c[4096], line[5000];
    cols(c, sizeof c, "s\\\"q", "c", "#1", "event", 1, 1, "w\\n1", 5, -1);
    char *e = strstr(c, "{\"name\":\"last_error\",\"value\":null}");
    assert_non_null(e);
    char fixed[4096];
    snprintf(fixed, sizeof fixed,
             "%.*s{\"name\":\"last_error\",\"value\":"
             "\"a\\\"b\\\\c\\nd\\u0001\\t\xc3\xa9\"}%s",
             (int)(e - c), c,
             e + strlen("{\"name\":\"last_error\",\"value\":null}"));
    snprintf(line, sizeof line,
             "{\"action\":\"I\",\"xid\":7,\"lsn\":\"0/1\",\"schema\":"
             "\"public\",\"table\":\"a2_cursors\",\"columns\":%s}",
             fixed);
    begin(&f, 50, "0/D00");
    feed(&f, line, 0);
    commit(&f, 50, "0/D00", 0xD00);
    fx_close(&f);
    FILE *fp = fopen(f.path, "r");
    char text[8192];
    assert_non_null(fgets(text, sizeof text, fp));
    fclose(fp);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("audit line is not JSON (%s): %s", je.text, text);
    assert_string_equal(json_string_value(json_object_get(j, "session")),
                        "s\"q");
    json_t *after = json_object_get(j, "after");
    assert_string_equal(json_string_value(json_object_get(after, "error")),
                        "a\"b\\c\nd\x01\t\xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(after, "holder")),
                        "w\n1");
    assert_int_equal(json_integer_value(json_object_get(after, "expires_at")),
                     5);
    assert_int_equal(json_integer_value(json_object_get(j, "xid")), 50);
    json_decref(j);
    fx_destroy(&f);
}

static void test_gap_record(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    char err[256];
    assert_int_equal(
            a2__apply_gap(f.ap, 0x100, 0x5000, "invalidated", err, sizeof err),
            0);
    assert_true(a2__apply_applied(f.ap) == 0x5000);
    /* on file at once, before any sync or close */
    FILE *fp = fopen(f.path, "r");
    char line[1024];
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    fx_close(&f);
    json_t *j = json_loads(line, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "transition")),
                        "gap");
    assert_string_equal(json_string_value(json_object_get(j, "from")), "0/100");
    assert_string_equal(json_string_value(json_object_get(j, "to")), "0/5000");
    assert_string_equal(json_string_value(json_object_get(j, "lsn")), "0/5000");
    json_decref(j);
    fx_destroy(&f);
}

/*
 * A deleted run with a head is retired when the session's clear marker
 * passed it (reclaim), and deleted otherwise (a hand-made delete). The
 * marker comes from the stream's a2_clears rows: a clear's insert, or the
 * same marker written again by the store ahead of its deletes; a session
 * whose marker the stream never showed is never asked for.
 */
static void test_delete_retired_or_deleted(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    begin(&f, 30, "0/900");
    /* s1: marker 5 seen in the stream */
    feed(&f,
         "{\"action\":\"I\",\"xid\":30,\"lsn\":\"0/1\",\"schema\":\"public\","
         "\"table\":\"a2_clears\",\"columns\":[{\"name\":\"session_id\","
         "\"value\":\"s1\"},{\"name\":\"clear_index\",\"value\":5}]}",
         0);
    cursor_delete(&f, "s1", "lane:a", 4);  /* below the marker: retired */
    cursor_delete(&f, "s1", "lane:b", 7);  /* above it: deleted */
    cursor_delete(&f, "s1", "lane:c", -1); /* idle: retired */
    /* s2: marker 9 written again ahead of the deletes (an update) */
    feed(&f,
         "{\"action\":\"U\",\"xid\":30,\"lsn\":\"0/1\",\"schema\":\"public\","
         "\"table\":\"a2_clears\",\"columns\":[{\"name\":\"session_id\","
         "\"value\":\"s2\"},{\"name\":\"clear_index\",\"value\":9}],"
         "\"identity\":[{\"name\":\"session_id\",\"value\":\"s2\"}]}",
         0);
    cursor_delete(&f, "s2", "lane:a", 3);
    cursor_delete(&f, "s2", "lane:b", 8);
    cursor_delete(&f, "s2", "lane:c", 12);
    /* s3: no marker in the stream: a delete with a head is a deletion */
    cursor_delete(&f, "s3", "lane:a", 1);
    commit(&f, 30, "0/900", 0x900);
    char err[256];
    assert_int_equal(a2__audit_sync(f.audit, 0, err, sizeof err), 0);
    const char *want[] = {"retired", "deleted", "retired", "retired",
                          "retired", "deleted", "deleted"};
    for (int i = 0; i < 7; i++) {
        char *t = transition_at(f.path, i);
        if (strcmp(t, want[i]) != 0)
            fail_msg("line %d: %s, expected %s", i, t, want[i]);
        free(t);
    }
    fx_close(&f);
    fx_destroy(&f);
}

static void test_commit_without_begin(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, 0);
    const a2_change *c;
    char err[256];
    const char *line =
            "{\"action\":\"C\",\"xid\":1,\"lsn\":\"0/1\",\"nextlsn\":\"0/2\"}";
    assert_int_equal(a2_decoder_decode(f.dec, line, strlen(line), &c), 0);
    assert_int_equal(a2__apply_change(f.ap, c, 2, err, sizeof err), 1);
    assert_non_null(strstr(err, "commit without begin"));
    fx_close(&f);
    fx_destroy(&f);
}

/* Commit times as the audit writes them: UTC, milliseconds, the date part
 * reused within a second and redone across one (and before the epoch). */
static void test_time_format(void **state)
{
    (void)state;
    char buf[40];
    assert_string_equal(
            a2__format_time_ms(INT64_C(1700000000123456), buf, sizeof buf),
            "2023-11-14T22:13:20.123Z");
    assert_string_equal(
            a2__format_time_ms(INT64_C(1700000000999999), buf, sizeof buf),
            "2023-11-14T22:13:20.999Z");
    assert_string_equal(
            a2__format_time_ms(INT64_C(1700000001000000), buf, sizeof buf),
            "2023-11-14T22:13:21.000Z");
    assert_string_equal(
            a2__format_time_ms(INT64_C(1700000000007000), buf, sizeof buf),
            "2023-11-14T22:13:20.007Z");
    assert_string_equal(a2__format_time_ms(-1000, buf, sizeof buf),
                        "1969-12-31T23:59:59.999Z");
    assert_string_equal(a2__format_time_ms(0, buf, sizeof buf),
                        "1970-01-01T00:00:00.000Z");
    char small[11];
    assert_string_equal(a2__format_time_ms(0, small, sizeof small),
                        "1970-01-01");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_time_format),
            cmocka_unit_test(test_started_wakes_and_audits),
            cmocka_unit_test(test_claim_timer_fail_retry_complete),
            cmocka_unit_test(test_started_and_claimed_no_wake),
            cmocka_unit_test(test_cleared_log_presence),
            cmocka_unit_test(test_presence_expiry_tick),
            cmocka_unit_test(test_presence_expiry_many),
            cmocka_unit_test(test_resume_skips_written_lines),
            cmocka_unit_test(test_big_transaction_cut_and_resent),
            cmocka_unit_test(test_big_transaction_claims_and_clears),
            cmocka_unit_test(test_audit_line_escapes),
            cmocka_unit_test(test_gap_record),
            cmocka_unit_test(test_commit_without_begin),
            cmocka_unit_test(test_delete_retired_or_deleted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
