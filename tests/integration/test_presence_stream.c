/*
 * Presence pushed from the WAL: the real a2-consumer on a real slot, two
 * concurrent writers through liba2store, and `a2 presence NS --follow`
 * joining while they write. The subscriber's snapshot followed by its
 * patches must show every change of each writer exactly once and in order,
 * and end equal to the store's state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "a2/state.h"
#include "a2/store.h"
#include "a2/wire.h"
#include "consumer_harness.h"
#include "store_fixture.h"

#define WRITES 300

static PGconn *db;

static int setup(void **state)
{
    *state = db = a2_test_connect_reset("truncate a2_presence");
    return 0;
}

typedef struct {
    int k;
    const char *ns;
    atomic_int done;     /* writes committed */
    atomic_int stop;     /* set once the subscriber has read */
    atomic_int finished; /* the writer returned */
    int rc;
} writer_arg;

/* Writer k: participant "w<k>" field n = 1, 2, ... (at least WRITES, and
 * 20 more once told to stop, so some land after the subscriber's read), and
 * a contended field "last" of participant "both" with at = 2 i + k. */
static void *writer(void *p)
{
    writer_arg *w = p;
    a2_store *s;
    a2_store_error err;
    if (a2_store_open(&s, a2_test_db(), &err) != 0) {
        w->rc = -100;
        return NULL;
    }
    char me[16], v[64];
    snprintf(me, sizeof me, "w%d", w->k);
    int after_stop = 0;
    for (int i = 1; w->rc == 0 && i < 50 * WRITES; i++) {
        snprintf(v, sizeof v, "%d", i);
        a2_presence_field f = {.field = "n", .value = v};
        a2_presence_write_req req =
                a2_test_presence_req(w->ns, me, i, 600000, &f, 1);
        a2_presence out;
        w->rc = a2_store_presence_write(s, &req, &out);
        a2_presence_free(&out);
        if (w->rc == 0 && i % 3 == 0) {
            snprintf(v, sizeof v, "{\"k\": %d, \"i\": %d}", w->k, i);
            a2_presence_field g = {.field = "last", .value = v};
            req.participant = "both";
            req.at = 2 * i + w->k;
            req.fields = &g;
            w->rc = a2_store_presence_write(s, &req, &out);
            a2_presence_free(&out);
        }
        atomic_store(&w->done, i);
        if (atomic_load(&w->stop))
            after_stop++;
        if (i >= WRITES && after_stop >= 20)
            break;
        a2_test_sleep_ms(1);
    }
    a2_store_close(s);
    atomic_store(&w->finished, 1);
    return NULL;
}

/* The subscriber's view: fields by "participant\x1ffield", JSON text. */
typedef struct {
    json_t *state;
    uint64_t snap_lsn;
    int snapshot_seen;
    int last_n[2]; /* the last n seen of each writer (0: none) */
    int seen_in_snapshot[2];
    int patches;
    uint64_t last_lsn;
    int end_seen;
} view;

static void set_field(view *v, const char *participant, const char *field,
                      json_t *value)
{
    char key[256];
    snprintf(key, sizeof key, "%s\x1f%s", participant, field);
    if (!value || json_is_null(value))
        json_object_del(v->state, key);
    else
        json_object_set(v->state, key, value);
}

static void on_line(view *v, const char *line)
{
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    if (!o)
        fail_msg("subscriber printed a non-JSON line: %s", line);
    const char *kind = json_string_value(json_object_get(o, "kind"));
    assert_non_null(kind);
    if (strcmp(kind, "state") == 0) {
        assert_false(v->snapshot_seen);
        const char *p = json_string_value(json_object_get(o, "participant"));
        const char *f = json_string_value(json_object_get(o, "field"));
        json_t *val = json_object_get(o, "value");
        set_field(v, p, f, val);
        for (int k = 0; k < 2; k++) {
            char me[16];
            snprintf(me, sizeof me, "w%d", k);
            if (strcmp(p, me) == 0 && strcmp(f, "n") == 0) {
                v->last_n[k] = (int)json_integer_value(val);
                v->seen_in_snapshot[k] = v->last_n[k];
            }
        }
    } else if (strcmp(kind, "snapshot") == 0) {
        v->snapshot_seen = 1;
        v->snap_lsn = (uint64_t)json_integer_value(json_object_get(o, "lsn"));
        v->last_lsn = v->snap_lsn;
    } else if (strcmp(kind, "patch") == 0) {
        assert_true(v->snapshot_seen);
        uint64_t lsn = (uint64_t)json_integer_value(json_object_get(o, "lsn"));
        /* after the read, in commit order */
        assert_true(lsn > v->snap_lsn);
        assert_true(lsn >= v->last_lsn);
        v->last_lsn = lsn;
        v->patches++;
        const char *p = json_string_value(json_object_get(o, "participant"));
        const char *key;
        json_t *val;
        json_object_foreach(json_object_get(o, "fields"), key, val)
        {
            set_field(v, p, key, val);
            for (int k = 0; k < 2; k++) {
                char me[16];
                snprintf(me, sizeof me, "w%d", k);
                if (strcmp(p, me) == 0 && strcmp(key, "n") == 0) {
                    int n = (int)json_integer_value(val);
                    /* every change once, in order: the next value */
                    if (n != v->last_n[k] + 1)
                        fail_msg("writer %d: saw %d after %d", k, n,
                                 v->last_n[k]);
                    v->last_n[k] = n;
                }
            }
            if (strcmp(p, "end") == 0)
                v->end_seen = 1;
        }
    } else {
        fail_msg("unexpected line kind %s", kind);
    }
    json_decref(o);
}

/* Lines from a pipe, without stdio buffering hiding them from poll. */
typedef struct {
    int fd;
    char buf[1 << 20];
    size_t len, start;
    int eof; /* set when the pipe reached its end */
} line_reader;

/* The next line (NUL-terminated, without its newline), or NULL on end of
 * file (eof set) or when none comes within timeout_ms. */
static const char *next_line(line_reader *lr, int timeout_ms)
{
    for (;;) {
        char *nl = memchr(lr->buf + lr->start, '\n', lr->len - lr->start);
        if (nl) {
            *nl = '\0';
            const char *line = lr->buf + lr->start;
            lr->start = (size_t)(nl - lr->buf) + 1;
            return line;
        }
        memmove(lr->buf, lr->buf + lr->start, lr->len - lr->start);
        lr->len -= lr->start;
        lr->start = 0;
        if (lr->len == sizeof lr->buf)
            fail_msg("line longer than %zu bytes", sizeof lr->buf);
        struct pollfd p = {.fd = lr->fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return NULL;
        ssize_t n = read(lr->fd, lr->buf + lr->len, sizeof lr->buf - lr->len);
        if (n <= 0) {
            lr->eof = 1;
            return NULL;
        }
        lr->len += (size_t)n;
    }
}

/* `a2 presence NS --follow --json` on the consumer at sock (its pid), and
 * a reader of its output. */
typedef struct {
    pid_t pid;
    line_reader *lr;
} follower;

static follower start_follower(const char *ns, const char *sock)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    static char bin[512], conn[256];
    snprintf(bin, sizeof bin, "%s", a2_test_bin("a2"));
    snprintf(conn, sizeof conn, "unix:%s", sock);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl(bin, bin, "--db", a2_test_db(), "--json", "presence", ns,
              "--follow", "--connect", conn, (char *)NULL);
        _exit(127);
    }
    assert_true(pid > 0);
    a2_test_track(pid);
    close(pfd[1]);
    follower fl = {.pid = pid, .lr = calloc(1, sizeof *fl.lr)};
    assert_non_null(fl.lr);
    fl.lr->fd = pfd[0];
    return fl;
}

/* Sends the follower sig (unless 0) and waits for it: it exits with status
 * code. Then closes its pipe and frees its reader. */
static void end_follower(follower *fl, int sig, int code)
{
    int st;
    if (sig)
        kill(fl->pid, sig);
    waitpid(fl->pid, &st, 0);
    a2_test_untrack(fl->pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), code);
    close(fl->lr->fd);
    free(fl->lr);
}

/* Writes field of participant in ns on s (sent at 1, living ttl_ms). */
static void put_field(a2_store *s, const char *ns, const char *participant,
                      const char *field, const char *value, int64_t ttl_ms)
{
    a2_presence_field f = {.field = field, .value = value};
    a2_presence_write_req req =
            a2_test_presence_req(ns, participant, 1, ttl_ms, &f, 1);
    a2_presence out;
    assert_int_equal(a2_store_presence_write(s, &req, &out), 0);
    a2_presence_free(&out);
}

/* Joins the writers w[0] and w[1] (threads t): both ended without error. */
static void join_writers(writer_arg *w, pthread_t *t)
{
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    assert_int_equal(w[0].rc, 0);
    assert_int_equal(w[1].rc, 0);
}

/* Starts the writers w[0] and w[1] in t and waits until each has
 * committed a quarter of its writes. */
static void start_writers(writer_arg *w, pthread_t *t)
{
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&t[k], NULL, writer, &w[k]), 0);
    while (atomic_load(&w[0].done) < WRITES / 4 ||
           atomic_load(&w[1].done) < WRITES / 4)
        a2_test_sleep_ms(2);
}

static void test_two_writers_one_subscriber(void **state)
{
    (void)state;
    const char *ns = "stream-room";
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_stream");
    writer_arg w[2] = {{.k = 0, .ns = ns}, {.k = 1, .ns = ns}};
    pthread_t t[2];
    start_writers(w, t);
    /* join while they write */
    follower fl = start_follower(ns, d.sock);
    view v = {.state = json_object()};
    const char *line;
    /* its read, then the writers wind down while it follows */
    while (!v.snapshot_seen && (line = next_line(fl.lr, 10000)) != NULL)
        on_line(&v, line);
    assert_true(v.snapshot_seen);
    atomic_store(&w[0].stop, 1);
    atomic_store(&w[1].stop, 1);
    while (!atomic_load(&w[0].finished) || !atomic_load(&w[1].finished))
        if ((line = next_line(fl.lr, 50)) != NULL)
            on_line(&v, line);
    join_writers(w, t);
    /* a last write marks the end of the stream */
    a2_store *s = a2_test_store_open(a2_test_db());
    put_field(s, ns, "end", "done", "true", 600000);
    int64_t until = a2_test_now_ms() + 30000;
    while (!v.end_seen) {
        int64_t left = until - a2_test_now_ms();
        if (left <= 0)
            fail_msg("no patch for the end marker within 30 s");
        if ((line = next_line(fl.lr, (int)left)) == NULL) {
            if (fl.lr->eof)
                fail_msg("the subscriber's output ended before the end "
                         "marker's patch");
            fail_msg("no patch for the end marker within 30 s");
        }
        on_line(&v, line);
    }
    /* the subscriber joined mid-stream: some changes came in its read,
     * later ones as patches */
    assert_true(v.seen_in_snapshot[0] > 0 && v.seen_in_snapshot[1] > 0);
    assert_int_equal(v.last_n[0], atomic_load(&w[0].done));
    assert_int_equal(v.last_n[1], atomic_load(&w[1].done));
    assert_true(v.last_n[0] >= v.seen_in_snapshot[0] + 20);
    assert_true(v.last_n[1] >= v.seen_in_snapshot[1] + 20);
    if (getenv("A2_TEST_VERBOSE"))
        fprintf(stderr, "snapshot at w0=%d w1=%d, %d patches\n",
                v.seen_in_snapshot[0], v.seen_in_snapshot[1], v.patches);
    /* and ends where the store is */
    a2_presence out;
    assert_int_equal(a2_store_presence_read(s, ns, &out), 0);
    assert_int_equal(json_object_size(v.state), out.count);
    for (size_t i = 0; i < out.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s\x1f%s", out.items[i].participant,
                 out.items[i].field);
        json_t *mine = json_object_get(v.state, key);
        json_t *theirs = json_loads(out.items[i].value, JSON_DECODE_ANY, NULL);
        if (!mine || !json_equal(mine, theirs))
            fail_msg("%s: subscriber has a different value than the store %s",
                     key, out.items[i].value);
        json_decref(theirs);
    }
    a2_presence_free(&out);
    a2_store_close(s);
    /* SIGTERM ends the follow cleanly */
    end_follower(&fl, SIGTERM, 0);
    json_decref(v.state);
    a2_test_consumer_end(&d);
}

/* A subscriber written here on liba2wire, to widen the window between the
 * subscription and the read. */
typedef struct {
    int fd;
    a2_wire_reader *rd;
} wsub;

/* The next message (1), or 0 when none comes within timeout_ms. */
static int wsub_next(wsub *w, int timeout_ms, a2_wire_msg *m)
{
    for (;;) {
        int r = a2_wire_reader_next(w->rd, m);
        if (r < 0)
            fail_msg("bad frame: %s", a2_wire_reader_error(w->rd));
        if (r == 1)
            return 1;
        struct pollfd p = {.fd = w->fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return 0;
        char buf[65536];
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n <= 0)
            fail_msg("a2-consumer closed the connection");
        assert_int_equal(a2_wire_reader_feed(w->rd, buf, (size_t)n), 0);
    }
}

/* A subscriber connected to sock as name, its subscription to the patches
 * of ns and a ping (id ping) sent. */
static wsub wsub_open(const char *sock, const char *name, const char *ns,
                      uint64_t ping)
{
    wsub w = {.fd = a2_test_connect_unix(sock),
              .rd = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER)};
    a2_wire_buf out = {0};
    assert_int_equal(a2_wire_encode_hello(&out, name, NULL), 0);
    assert_int_equal(a2_wire_encode_presence_sub(&out, ns), 0);
    assert_int_equal(a2_wire_encode_ping(&out, ping), 0);
    a2_test_send(w.fd, out.data, out.len);
    a2_wire_buf_free(&out);
    return w;
}

/* Reads until the pong of ping id (each message within 5 s). */
static void wsub_await_pong(wsub *w, uint64_t id, a2_wire_msg *m)
{
    int ponged = 0;
    while (!ponged) {
        assert_true(wsub_next(w, 5000, m));
        ponged = m->type == A2_WIRE_PONG && m->id == id;
    }
}

/* Closes the subscriber's connection and frees its reader. */
static void wsub_close(wsub *w)
{
    a2_wire_reader_free(w->rd);
    close(w->fd);
}

/* A patch as the line `a2 presence --follow --json` prints. */
static char *patch_line(const a2_wire_msg *m)
{
    json_t *f = json_loads(m->fields_json, 0, NULL);
    assert_non_null(f);
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:I}", "kind", "patch", "ns",
                          m->ns, "participant", m->participant, "fields", f,
                          "lsn", (json_int_t)m->lsn);
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static void test_wide_window(void **state)
{
    (void)state;
    const char *ns = "window-room";
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_window");
    writer_arg w[2] = {{.k = 0, .ns = ns}, {.k = 1, .ns = ns}};
    pthread_t t[2];
    start_writers(w, t);
    /* 1. subscribe, ping, and hold every patch from the pong on */
    wsub sub = wsub_open(d.sock, "window", ns, 7);
    a2_wire_msg m;
    wsub_await_pong(&sub, 7, &m);
    char *held[4 * WRITES];
    uint64_t held_lsn[4 * WRITES];
    size_t nheld = 0;
    int64_t until = a2_test_now_ms() + 200; /* the writers go on */
    while (a2_test_now_ms() < until)
        if (wsub_next(&sub, 10, &m) && m.type == A2_WIRE_PRESENCE) {
            assert_true(nheld < 4 * WRITES);
            held_lsn[nheld] = m.lsn;
            held[nheld++] = patch_line(&m);
        }
    /* 2. the read */
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_presence rd;
    assert_int_equal(a2_store_presence_read(s, ns, &rd), 0);
    view v = {.state = json_object()};
    for (size_t i = 0; i < rd.count; i++) {
        json_t *o =
                json_pack("{s:s, s:s, s:s, s:s, s:o}", "kind", "state", "ns",
                          ns, "participant", rd.items[i].participant, "field",
                          rd.items[i].field, "value",
                          json_loads(rd.items[i].value, JSON_DECODE_ANY, NULL));
        char *line = json_dumps(o, JSON_COMPACT);
        on_line(&v, line);
        free(line);
        json_decref(o);
    }
    atomic_store(&w[0].stop, 1);
    atomic_store(&w[1].stop, 1);
    char snap[128];
    snprintf(snap, sizeof snap, "{\"kind\":\"snapshot\",\"lsn\":%" PRIu64 "}",
             rd.lsn);
    on_line(&v, snap);
    /* 3. held patches after the read's position, then the stream */
    size_t discarded = 0;
    for (size_t i = 0; i < nheld; i++) {
        if (held_lsn[i] > rd.lsn)
            on_line(&v, held[i]);
        else
            discarded++;
        free(held[i]);
    }
    join_writers(w, t);
    put_field(s, ns, "end", "done", "true", 600000);
    while (!v.end_seen) {
        assert_true(wsub_next(&sub, 10000, &m));
        if (m.type != A2_WIRE_PRESENCE)
            continue;
        if (m.lsn <= rd.lsn) { /* committed before the read, decoded late */
            discarded++;
            continue;
        }
        char *line = patch_line(&m);
        on_line(&v, line);
        free(line);
    }
    if (getenv("A2_TEST_VERBOSE"))
        fprintf(stderr, "held %zu, %zu in the read, snapshot w0=%d w1=%d\n",
                nheld, discarded, v.seen_in_snapshot[0], v.seen_in_snapshot[1]);
    /* the window held changes the read already had: dropped, not lost */
    assert_true(discarded > 0);
    assert_int_equal(v.last_n[0], atomic_load(&w[0].done));
    assert_int_equal(v.last_n[1], atomic_load(&w[1].done));
    assert_true(v.last_n[0] >= v.seen_in_snapshot[0] + 20);
    a2_presence_free(&rd);
    assert_int_equal(a2_store_presence_read(s, ns, &rd), 0);
    assert_int_equal(json_object_size(v.state), rd.count);
    a2_presence_free(&rd);
    a2_store_close(s);
    json_decref(v.state);
    wsub_close(&sub);
    a2_test_consumer_end(&d);
}

/* Expiry reaches a follower as a patch: it reaps its namespace. */
static void test_expiry_pushed(void **state)
{
    (void)state;
    const char *ns = "expiry-room";
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_expiry");
    /* the subscriber first: once it printed its snapshot (an empty
     * namespace) it follows, and whatever comes next is a patch */
    follower fl = start_follower(ns, d.sock);
    view v = {.state = json_object()};
    const char *line = next_line(fl.lr, 20000);
    if (!line)
        fail_msg("no snapshot line from the subscriber in 20 s%s",
                 fl.lr->eof ? " (its output ended)" : "");
    on_line(&v, line);
    assert_true(v.snapshot_seen);
    a2_store *s = a2_test_store_open(a2_test_db());
    int64_t t_before = a2_test_now_ms();
    put_field(s, ns, "ann", "typing", "true", 1500);
    put_field(s, ns, "ann", "name", "\"ann\"", 600000);
    /* the field's patch, then the one of its expiry */
    int typing = 0, expired = 0;
    int64_t until = a2_test_now_ms() + 20000;
    while (!expired) {
        int64_t left = until - a2_test_now_ms();
        if (left <= 0 || (line = next_line(fl.lr, (int)left)) == NULL)
            fail_msg("no expiry patch within 20 s%s",
                     fl.lr->eof ? " (the subscriber's output ended)" : "");
        on_line(&v, line);
        int has = json_object_get(v.state, "ann\x1ftyping") != NULL;
        typing |= has;
        expired = typing && !has;
    }
    /* not before its time (the ttl, less 50 ms for the rounding of the
     * two clocks), and without a change of anyone's */
    int64_t after = a2_test_now_ms() - t_before;
    if (after < 1500 - 50)
        fail_msg("expired %" PRId64 " ms after the write, ttl 1500 ms", after);
    assert_non_null(json_object_get(v.state, "ann\x1fname"));
    end_follower(&fl, SIGTERM, 0);
    json_decref(v.state);
    a2_store_close(s);
    a2_test_consumer_end(&d);
}

/* Any role may emit a logical message: one with the consumer's own prefix
 * and tick form, from a role with no grants, is not acted on. The live
 * field gets no expiry patch; a change committed after the forged tick
 * arrives with nothing before it. */
static void test_forged_tick_ignored(void **state)
{
    (void)state;
    const char *ns = "forged-room";
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_forged");
    a2_store *s = a2_test_store_open(a2_test_db());
    wsub sub = wsub_open(d.sock, "forged", ns, 9);
    a2_wire_msg m;
    wsub_await_pong(&sub, 9, &m);
    put_field(s, ns, "ann", "name", "\"ann\"", 3600000);
    /* ann's own patch: her write has come through the stream, so anything
     * about her after the forged tick would be its doing */
    int seen_ann = 0;
    while (!seen_ann) {
        assert_true(wsub_next(&sub, 10000, &m));
        seen_ann =
                m.type == A2_WIRE_PRESENCE && strcmp(m.participant, "ann") == 0;
    }
    /* The forger: a role of its own, with no grant at all. */
    a2_test_exec(db, "drop role if exists a2_test_forger");
    a2_test_exec(db, "create role a2_test_forger login");
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s user=a2_test_forger", a2_test_db());
    PGconn *forger = PQconnectdb(conninfo);
    assert_int_equal(PQstatus(forger), CONNECTION_OK);
    PGresult *r = PQexec(forger, "select pg_logical_emit_message(true, "
                                 "'a2-hb', 'expire 99999999999999')");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    PQfinish(forger);
    a2_test_exec(db, "drop role a2_test_forger");
    /* A change after it: the first patch the subscriber gets. */
    put_field(s, ns, "bob", "seat", "3", 3600000);
    int got = 0;
    while (!got) {
        assert_true(wsub_next(&sub, 10000, &m));
        if (m.type != A2_WIRE_PRESENCE)
            continue;
        assert_string_equal(m.participant, "bob");
        got = 1;
    }
    wsub_close(&sub);
    a2_store_close(s);
    a2_test_consumer_end(&d);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#define PUSHES 200

/* Write-to-patch latency through a2-consumer, beside LISTEN/NOTIFY (the
 * mechanism the WAL push replaces) measured in the same run. */
static void test_push_latency(void **state)
{
    (void)state;
    const char *ns = "latency-room";
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_latency");
    wsub sub = wsub_open(d.sock, "latency", ns, 1);
    a2_wire_msg m;
    wsub_await_pong(&sub, 1, &m);
    a2_store *s = a2_test_store_open(a2_test_db());
    static int64_t ours[PUSHES], notify[PUSHES];
    for (int i = 0; i < PUSHES; i++) {
        char v[32];
        snprintf(v, sizeof v, "%d", i);
        a2_presence_field f = {.field = "n", .value = v};
        a2_presence_write_req req =
                a2_test_presence_req(ns, "p", i, 600000, &f, 1);
        a2_presence wo;
        int64_t t0 = now_us();
        assert_int_equal(a2_store_presence_write(s, &req, &wo), 0);
        a2_presence_free(&wo);
        do
            assert_true(wsub_next(&sub, 5000, &m));
        while (m.type != A2_WIRE_PRESENCE);
        ours[i] = now_us() - t0;
        char want[48];
        snprintf(want, sizeof want, "{\"n\":%d}", i);
        assert_string_equal(m.fields_json, want);
    }
    /* the baseline: the same upsert with a NOTIFY in its transaction (the
     * spec's presence channel), seen on another connection */
    PGconn *listener = a2_test_connect(), *talker = a2_test_connect();
    a2_test_exec(listener, "listen a2_bench_presence");
    for (int i = 0; i < PUSHES; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "insert into a2_presence values ('baseline', 'p', 'n', "
                 "'%d', null, %d, 9e15::bigint) on conflict (ns, "
                 "participant, field) do update set value = excluded.value, "
                 "at = excluded.at where a2_presence.at <= excluded.at; "
                 "notify a2_bench_presence, 'x'",
                 i, i);
        int64_t t0 = now_us();
        a2_test_exec(talker, sql);
        PGnotify *n = NULL;
        while (!n) {
            struct pollfd p = {.fd = PQsocket(listener), .events = POLLIN};
            assert_true(poll(&p, 1, 5000) > 0);
            assert_int_equal(PQconsumeInput(listener), 1);
            n = PQnotifies(listener);
        }
        PQfreemem(n);
        notify[i] = now_us() - t0;
    }
    PQfinish(listener);
    PQfinish(talker);
    qsort(ours, PUSHES, sizeof ours[0], cmp_i64);
    qsort(notify, PUSHES, sizeof notify[0], cmp_i64);
    printf("presence push, write returned to patch received (us, %d "
           "writes):\n",
           PUSHES);
    printf("  %-28s %8s %8s %8s\n", "", "p50", "p90", "p99");
    printf("  %-28s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "a2-consumer (WAL)", ours[PUSHES / 2], ours[PUSHES * 9 / 10],
           ours[PUSHES * 99 / 100]);
    printf("  %-28s %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
           "upsert+NOTIFY (baseline)", notify[PUSHES / 2],
           notify[PUSHES * 9 / 10], notify[PUSHES * 99 / 100]);
    fflush(stdout);
    /* generous: a push that takes seconds is broken, not slow */
    assert_true(ours[PUSHES / 2] < 1000000);
    a2_store_close(s);
    wsub_close(&sub);
    a2_test_consumer_end(&d);
}

/* A subscriber whose consumer goes away says so and exits 1. */
static void test_consumer_gone(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "tp_gone");
    follower fl = start_follower("gone-room", d.sock);
    /* its snapshot line comes first */
    const char *line = next_line(fl.lr, 10000);
    assert_non_null(line);
    assert_non_null(strstr(line, "\"snapshot\""));
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    end_follower(&fl, 0, 1);
    a2_test_consumer_cleanup(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_two_writers_one_subscriber,
                                            setup, a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_wide_window, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_forged_tick_ignored, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_expiry_pushed, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_push_latency, setup,
                                            a2_test_consumer_teardown),
            cmocka_unit_test_setup_teardown(test_consumer_gone, setup,
                                            a2_test_consumer_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
