/*
 * liba2worker against a scripted a2-consumer (a Unix socket speaking wire v1
 * from the test) and a real database: handshake and subscriptions, every
 * event type, reconnect with backoff and resync, the degraded sweep running
 * only while disconnected, refused and broken connections, ping timeouts;
 * several addresses, a standby's refusal and the real a2-consumer taking
 * the worker at another address; the runner's claim -> handle ->
 * complete/fail with lease renewal.
 */
#include "a2/store.h"
#include "a2/wire.h"
#include "a2/worker.h"
#include "a2test.h"
#include "store_fixture.h"

// clang-format off
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
// clang-format on

#include "../../common/clock.h"
#include "consumer_harness.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char dir[64];
    char path[100];
    char spec[110];
    int lfd;
    int fd;
    a2_wire_reader *reader;
} fake;

static void fake_init(fake *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/a2-wl.XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/sock", f->dir);
    snprintf(f->spec, sizeof f->spec, "unix:%s", f->path);
    f->lfd = -1;
    f->fd = -1;
}

static void fake_listen(fake *f)
{
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
    unlink(f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(f->lfd >= 0);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
}

/* Listens on 127.0.0.1 (a free port) instead: f->spec is tcp:. */
static void fake_listen_tcp(fake *f)
{
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(f->lfd >= 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(f->spec, sizeof f->spec, "tcp:127.0.0.1:%d", ntohs(sa.sin_port));
}

static void fake_drop(fake *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    a2_wire_reader_free(f->reader);
    f->reader = NULL;
}

static void fake_free(fake *f)
{
    fake_drop(f);
    if (f->lfd >= 0)
        close(f->lfd);
    unlink(f->path);
    rmdir(f->dir);
}

/* Drives the worker (without taking its events) for ms. */
static void drive(a2_worker *w, int ms)
{
    int64_t end = a2_test_now_ms() + ms;
    while (a2_test_now_ms() < end) {
        assert_int_equal(a2_worker_process(w), 0);
        struct pollfd p = {a2_worker_fd(w), a2_worker_poll_events(w), 0};
        int t = a2_worker_timeout(w);
        if (t < 0 || t > 10)
            t = 10;
        poll(&p, a2_worker_fd(w) >= 0 ? 1 : 0, t);
    }
}

/* Accepts the worker's connection, driving the worker meanwhile. */
static void fake_accept(fake *f, a2_worker *w, int ms)
{
    int64_t end = a2_test_now_ms() + ms;
    while (a2_test_now_ms() < end) {
        f->fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (f->fd >= 0)
            break;
        drive(w, 10);
    }
    if (f->fd < 0)
        fail_msg("the worker did not connect within %d ms", ms);
    f->reader = a2_wire_reader_new(A2_WIRE_FROM_WORKER);
    assert_non_null(f->reader);
}

/* The next frame from the worker into *m (borrowed until the next call). */
static void fake_read(fake *f, a2_worker *w, a2_wire_msg *m, int ms)
{
    int64_t end = a2_test_now_ms() + ms;
    for (;;) {
        int rc = a2_wire_reader_next(f->reader, m);
        assert_true(rc >= 0);
        if (rc == 1)
            return;
        char buf[4096];
        ssize_t n = read(f->fd, buf, sizeof buf);
        if (n > 0) {
            assert_int_equal(a2_wire_reader_feed(f->reader, buf, (size_t)n), 0);
            continue;
        }
        if (n == 0)
            fail_msg("the worker closed the connection");
        if (a2_test_now_ms() > end)
            fail_msg("no frame from the worker within %d ms", ms);
        drive(w, 5);
    }
}

static void fake_send(fake *f, a2_wire_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = write(f->fd, b->data + off, b->len - off);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        assert_true(n > 0);
        off += (size_t)n;
    }
    a2_wire_buf_consume(b, b->len);
}

/* The next event within ms, which must be of type want. */
static void expect_event(a2_worker *w, a2_worker_event *ev, int want, int ms)
{
    int rc = a2_worker_wait(w, ev, ms);
    if (rc != 1)
        fail_msg("wanted event %d within %d ms, got rc %d (last error: %s)",
                 want, ms, rc, a2_worker_last_error(w));
    if (ev->type != want)
        fail_msg("wanted event %d, got %d (%s)", want, ev->type,
                 ev->message ? ev->message : "");
}

/* Handshake: hello and the subscriptions, then welcome. */
static void handshake(fake *f, a2_worker *w, size_t nsubs)
{
    a2_wire_msg m;
    fake_read(f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_HELLO);
    for (size_t i = 0; i < nsubs; i++) {
        fake_read(f, w, &m, 2000);
        assert_int_equal(m.type, A2_WIRE_SUBSCRIBE);
    }
    a2_wire_buf b = {0};
    assert_int_equal(a2_wire_encode_welcome(&b, 42), 0);
    fake_send(f, &b);
    a2_wire_buf_free(&b);
}

static void test_options(void **state)
{
    (void)state;
    char err[256];
    a2_worker_options o = {.connect = "http://x"};
    assert_null(a2_worker_new(&o, err, sizeof err));
    assert_non_null(strstr(err, "unix:PATH or tcp:HOST:PORT"));
    o.connect = "tcp:127.0.0.1:5000";
    assert_null(a2_worker_new(&o, err, sizeof err));
    assert_non_null(strstr(err, "token"));
    o.connect = "tcp:127.0.0.1:99999";
    o.token = "t";
    assert_null(a2_worker_new(&o, err, sizeof err));
    assert_non_null(strstr(err, "bad port"));
    o.connect = "unix:";
    assert_null(a2_worker_new(&o, err, sizeof err));
    assert_null(a2_worker_new(NULL, err, sizeof err));
    a2_worker_options neg = {.connect = "unix:/x", .degraded_sweep_ms = -1};
    assert_null(a2_worker_new(&neg, err, sizeof err));
    a2_worker_free(NULL);

    a2_worker_options ok = {.connect = "unix:/nonexistent/a2.sock"};
    a2_worker *w = a2_worker_new(&ok, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(a2_worker_subscribe(w, "", 0, NULL, 0), A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_subscribe(w, "c", A2_WIRE_LOG_TYPES, NULL, 0),
                     A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_subscribe(w, "c", 7, NULL, 0), A2_WORKER_EINVAL);
    const char *bad[] = {"a", ""};
    assert_int_equal(a2_worker_subscribe(w, "c", A2_WIRE_LOG_TYPES, bad, 2),
                     A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_watch_presence(w, ""), A2_WORKER_EINVAL);
    assert_false(a2_worker_connected(w));
    a2_worker_free(w);

    /* Several addresses: not with connect, each one checked. */
    const char *two[] = {"unix:/tmp/a.sock", "unix:/tmp/b.sock"};
    a2_worker_options both = {
            .connect = "unix:/tmp/a.sock", .connects = two, .nconnects = 2};
    err[0] = '\0';
    assert_null(a2_worker_new(&both, err, sizeof err));
    assert_non_null(strstr(err, "connect and connects exclude each other"));
    const char *badlist[] = {"unix:/tmp/a.sock", "http://x"};
    a2_worker_options bl = {.connects = badlist, .nconnects = 2};
    assert_null(a2_worker_new(&bl, err, sizeof err));
    assert_non_null(strstr(err, "bad address 'http://x'"));
    const char *badport[] = {"unix:/tmp/a.sock", "tcp:127.0.0.1:0"};
    a2_worker_options bp = {.connects = badport, .nconnects = 2, .token = "t"};
    assert_null(a2_worker_new(&bp, err, sizeof err));
    assert_non_null(strstr(err, "bad port in 'tcp:127.0.0.1:0'"));
    /* A tcp: address anywhere in the list needs the token. */
    const char *mixed[] = {"unix:/tmp/a.sock", "tcp:127.0.0.1:5000"};
    a2_worker_options mx = {.connects = mixed, .nconnects = 2};
    assert_null(a2_worker_new(&mx, err, sizeof err));
    assert_non_null(strstr(err, "token"));
    const char *holes[] = {"unix:/tmp/a.sock", NULL};
    a2_worker_options ho = {.connects = holes, .nconnects = 2};
    assert_null(a2_worker_new(&ho, err, sizeof err));
    assert_non_null(strstr(err, "connects[1] is NULL"));
    a2_worker_options nolist = {.nconnects = 1};
    assert_null(a2_worker_new(&nolist, err, sizeof err));
    assert_non_null(strstr(err, "connects is NULL"));
    mx.token = "t";
    w = a2_worker_new(&mx, err, sizeof err);
    assert_non_null(w);
    a2_worker_free(w);
    /* nconnects 0: connects is not looked at, connect is used. */
    a2_worker_options one = {.connect = "unix:/tmp/a.sock",
                             .connects = badlist};
    w = a2_worker_new(&one, err, sizeof err);
    assert_non_null(w);
    a2_worker_free(w);

    a2_worker_runner_options ro = {0};
    assert_null(a2_worker_runner_new(&ro, err, sizeof err));
    assert_non_null(strstr(err, "handler"));
}

static void test_events(void **state)
{
    (void)state;
    fake f;
    fake_init(&f);
    fake_listen(&f);
    char err[256];
    a2_worker_options o = {.connect = f.spec, .name = "t-events"};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(
            a2_worker_subscribe(w, "mailer", A2_WIRE_LOG_NONE, NULL, 0), 0);
    const char *types[] = {"order.placed", "invoice.sent"};
    assert_int_equal(
            a2_worker_subscribe(w, "auditor", A2_WIRE_LOG_TYPES, types, 2), 0);
    assert_int_equal(a2_worker_subscribe(w, "all", A2_WIRE_LOG_ALL, NULL, 0),
                     0);
    assert_int_equal(a2_worker_watch_presence(w, "room-1"), 0);
    assert_int_equal(a2_worker_timeout(w), 0); /* not started: process now */
    fake_accept(&f, w, 2000);

    a2_wire_msg m;
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_HELLO);
    assert_string_equal(m.name, "t-events");
    assert_null(m.token);
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_SUBSCRIBE);
    assert_string_equal(m.consumer, "mailer");
    assert_int_equal(m.log_filter, A2_WIRE_LOG_NONE);
    fake_read(&f, w, &m, 2000);
    assert_string_equal(m.consumer, "auditor");
    assert_int_equal(m.log_filter, A2_WIRE_LOG_TYPES);
    assert_int_equal(m.n_log_types, 2);
    assert_string_equal(m.log_types[1], "invoice.sent");
    fake_read(&f, w, &m, 2000);
    assert_string_equal(m.consumer, "all");
    assert_int_equal(m.log_filter, A2_WIRE_LOG_ALL);
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_PRESENCE_SUB);
    assert_string_equal(m.ns, "room-1");

    a2_wire_buf b = {0};
    assert_int_equal(a2_wire_encode_welcome(&b, 0x1234), 0);
    fake_send(&f, &b);
    a2_worker_event ev;
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    assert_int_equal(ev.lsn, 0x1234);
    assert_true(a2_worker_connected(w));
    const char *want[] = {"mailer", "auditor", "all"};
    for (int i = 0; i < 3; i++) {
        expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
        assert_string_equal(ev.consumer, want[i]);
        assert_true(ev.all_sessions);
    }
    assert_true(a2_worker_fd(w) >= 0);
    assert_true(a2_worker_poll_events(w) & POLLIN);

    /* A subscription added while connected goes out at once. */
    assert_int_equal(a2_worker_subscribe(w, "late", A2_WIRE_LOG_NONE, NULL, 0),
                     0);
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_SUBSCRIBE);
    assert_string_equal(m.consumer, "late");

    const char *sessions[] = {"s-a", "s-b"};
    assert_int_equal(a2_wire_encode_wake(&b, "mailer", "s1", "#3", 3, 100), 0);
    assert_int_equal(
            a2_wire_encode_log(&b, "auditor", "s2", 7, "order.placed", 101), 0);
    assert_int_equal(a2_wire_encode_cleared(&b, "s3", 9, 102), 0);
    assert_int_equal(a2_wire_encode_resync(&b, "mailer", sessions, 2), 0);
    assert_int_equal(
            a2_wire_encode_presence(&b, "room-1", "ann", "{\"typing\":true}"),
            0);
    assert_int_equal(a2_wire_encode_pong(&b, 999), 0); /* unknown id: ignored */
    fake_send(&f, &b);

    expect_event(w, &ev, A2_WORKER_EV_WAKE, 2000);
    assert_string_equal(ev.consumer, "mailer");
    assert_string_equal(ev.session, "s1");
    assert_string_equal(ev.cursor, "#3");
    assert_int_equal(ev.head, 3);
    assert_int_equal(ev.lsn, 100);
    expect_event(w, &ev, A2_WORKER_EV_LOG, 2000);
    assert_string_equal(ev.session, "s2");
    assert_int_equal(ev.idx, 7);
    assert_string_equal(ev.event_type, "order.placed");
    expect_event(w, &ev, A2_WORKER_EV_CLEARED, 2000);
    assert_string_equal(ev.session, "s3");
    assert_int_equal(ev.clear_index, 9);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    assert_false(ev.all_sessions);
    assert_int_equal(ev.nsessions, 2);
    assert_string_equal(ev.sessions[0], "s-a");
    assert_string_equal(ev.sessions[1], "s-b");
    expect_event(w, &ev, A2_WORKER_EV_PRESENCE, 2000);
    assert_string_equal(ev.ns, "room-1");
    assert_string_equal(ev.participant, "ann");
    assert_non_null(strstr(ev.fields_json, "typing"));
    assert_int_equal(a2_worker_wait(w, &ev, 100), 0);

    a2_worker_stats st;
    a2_worker_get_stats(w, &st);
    assert_int_equal(st.connects, 1);
    assert_true(st.frames >= 7);
    a2_wire_buf_free(&b);
    a2_worker_free(w);
    fake_free(&f);
}

static void append_for(const char *session, const char *consumer,
                       const char *lane)
{
    a2_store *s = a2_test_store_open(a2_test_db());
    a2_target t = {.consumer = consumer, .lane = lane};
    a2_append_event e = {.type = "job",
                         .payload = "{\"n\":1}",
                         .targets = &t,
                         .ntargets = 1};
    a2_events out = {0};
    assert_int_equal(a2_store_append(s, session, &e, 1, NULL, &out), 0);
    a2_events_free(&out);
    a2_store_close(s);
}

typedef struct {
    char lines[64][300];
    int64_t at[64]; /* when the worker logged each line */
    int n;
} logbuf;

static void capture(void *ctx, const char *line)
{
    logbuf *lb = ctx;
    if (lb->n < 64) {
        lb->at[lb->n] = a2_test_now_ms();
        snprintf(lb->lines[lb->n++], sizeof lb->lines[0], "%s", line);
    }
}

/* When the worker logged the nth (from 1) line holding needle; -1: never. */
static int64_t logged_at(const logbuf *lb, const char *needle, int nth)
{
    for (int i = 0; i < lb->n; i++)
        if (strstr(lb->lines[i], needle) && --nth == 0)
            return lb->at[i];
    return -1;
}

/* How many lines holding needle the worker has logged. */
static int logged_count(const logbuf *lb, const char *needle)
{
    int n = 0;
    for (int i = 0; i < lb->n; i++)
        if (strstr(lb->lines[i], needle))
            n++;
    return n;
}

static int logged(const logbuf *lb, const char *needle)
{
    for (int i = 0; i < lb->n; i++)
        if (strstr(lb->lines[i], needle))
            return 1;
    return 0;
}

static void test_reconnect_and_sweep(void **state)
{
    (void)state;
    append_for("sweep-1", "sweeper", NULL);
    append_for("sweep-2", "sweeper", "main");
    append_for("other", "somebody-else", NULL);
    fake f;
    fake_init(&f);
    logbuf lb = {0};
    char err[256];
    a2_worker_options o = {.connect = f.spec,
                           .db = a2_test_db(),
                           .degraded_sweep_ms = 600,
                           .reconnect_min_ms = 40,
                           .reconnect_max_ms = 120,
                           .log = capture,
                           .log_ctx = &lb};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(a2_worker_subscribe(w, "sweeper", 0, NULL, 0), 0);

    /* No consumer: one DISCONNECTED, then the sweep finds both sessions. */
    a2_worker_event ev;
    int64_t t0 = a2_test_now_ms(); /* the first sweep starts after this */
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "could not connect to unix:"));
    expect_event(w, &ev, A2_WORKER_EV_SWEEP, 2000);
    assert_string_equal(ev.consumer, "sweeper");
    assert_string_equal(ev.session, "sweep-1");
    expect_event(w, &ev, A2_WORKER_EV_SWEEP, 2000);
    assert_string_equal(ev.session, "sweep-2");
    /* The next sweep comes one interval (600 ms) after the first, not
     * sooner: it starts no earlier than t0 + 600, and logs when it is done
     * (the worker's own time; a test that reads its events late does not
     * shorten it). */
    expect_event(w, &ev, A2_WORKER_EV_SWEEP, 2000);
    assert_string_equal(ev.session, "sweep-1");
    assert_true(logged_at(&lb, "swept 2 pending sessions", 2) - t0 >= 600);
    expect_event(w, &ev, A2_WORKER_EV_SWEEP, 2000);
    assert_true(logged(&lb, "degraded: a2-consumer unreachable"));
    assert_true(logged(&lb, "swept 2 pending sessions"));
    assert_false(a2_worker_connected(w));

    /* The consumer comes up: reconnect within the backoff, resync. */
    fake_listen(&f);
    fake_accept(&f, w, 2000);
    handshake(&f, w, 1);
    for (;;) {
        assert_int_equal(a2_worker_wait(w, &ev, 2000), 1);
        if (ev.type == A2_WORKER_EV_CONNECTED)
            break;
        assert_int_equal(ev.type, A2_WORKER_EV_SWEEP); /* queued before */
    }
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    assert_string_equal(ev.consumer, "sweeper");
    /* Connected: no sweep at all. */
    a2_worker_stats before, after;
    a2_worker_get_stats(w, &before);
    assert_int_equal(a2_worker_wait(w, &ev, 700), 0);
    a2_worker_get_stats(w, &after);
    assert_int_equal(after.sweeps, before.sweeps);

    /* The consumer goes away: DISCONNECTED, reconnect, resync again. */
    fake_drop(&f);
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "closed the connection"));
    fake_accept(&f, w, 2000);
    handshake(&f, w, 1);
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    a2_worker_get_stats(w, &after);
    assert_int_equal(after.connects, 2);
    assert_int_equal(after.disconnects, 1);

    /* A refusal (error frame) disconnects with its reason; a bad frame too. */
    a2_wire_buf b = {0};
    assert_int_equal(a2_wire_encode_error(&b, A2_WIRE_CODE_AUTH, "wrong token"),
                     0);
    fake_send(&f, &b);
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "wrong token"));
    assert_non_null(strstr(a2_worker_last_error(w), "auth"));
    fake_drop(&f);
    fake_accept(&f, w, 2000);
    handshake(&f, w, 1);
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    /* The disconnect below comes after t (the junk is written after it). */
    int swept_before = logged_count(&lb, "swept 2 pending sessions");
    int64_t t = a2_test_now_ms();
    unsigned char junk[] = {0xc1, 0xc1, 0xc1};
    assert_int_equal(write(f.fd, junk, sizeof junk), (ssize_t)sizeof junk);
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "bad frame"));

    /* An outage after a connection: the first sweep waits one interval
     * (600 ms from the disconnect; the reconnect's resync covers a short
     * outage), then sweeps go on while the consumer stays away. When the
     * sweep ran is the worker's own log time, not when the test reads its
     * event. */
    fake_drop(&f);
    close(f.lfd);
    f.lfd = -1;
    unlink(f.path);
    expect_event(w, &ev, A2_WORKER_EV_SWEEP, 5000);
    assert_string_equal(ev.session, "sweep-1");
    int64_t swept_at =
            logged_at(&lb, "swept 2 pending sessions", swept_before + 1);
    assert_true(swept_at >= 0); /* logged (and the log buffer not full) */
    assert_true(swept_at - t >= 600);
    a2_wire_buf_free(&b);
    a2_worker_free(w);
    fake_free(&f);
}

static void test_ping_timeout(void **state)
{
    (void)state;
    fake f;
    fake_init(&f);
    fake_listen(&f);
    char err[256];
    a2_worker_options o = {.connect = f.spec, .ping_ms = 1000};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(a2_worker_subscribe(w, "c", 0, NULL, 0), 0);
    fake_accept(&f, w, 2000);
    handshake(&f, w, 1);
    a2_worker_event ev;
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    /* Answer the first ping: the connection stays. */
    a2_wire_msg m;
    fake_read(&f, w, &m, 3000);
    assert_int_equal(m.type, A2_WIRE_PING);
    a2_wire_buf b = {0};
    assert_int_equal(a2_wire_encode_pong(&b, m.id), 0);
    fake_send(&f, &b);
    assert_int_equal(a2_worker_wait(w, &ev, 100), 0);
    assert_true(a2_worker_connected(w));
    /* Ignore the next: the worker gives up on this connection. */
    fake_read(&f, w, &m, 3000);
    assert_int_equal(m.type, A2_WIRE_PING);
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 3000);
    assert_non_null(strstr(ev.message, "did not answer a ping"));
    a2_wire_buf_free(&b);
    a2_worker_free(w);
    fake_free(&f);
}

/* ── several addresses: standbys ──────────────────────────────────────── */

/*
 * A standby a2-consumer, scripted: on a thread of its own, it accepts every
 * connection, reads its hello, answers an error frame of code "standby" and
 * closes, as a standby a2-consumer does.
 */
typedef struct {
    fake f;
    int stop[2];
    pthread_t th;
    int running;
    atomic_int hellos;
    atomic_int tokens; /* hellos that carried a token */
} standby;

static void *standby_main(void *arg)
{
    standby *s = arg;
    for (;;) {
        struct pollfd p[2] = {{s->f.lfd, POLLIN, 0}, {s->stop[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        int fd = accept4(s->f.lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_WORKER);
        int64_t end = a2_test_now_ms() + 2000;
        int hello = 0;
        while (r && !hello && a2_test_now_ms() < end) {
            a2_wire_msg m;
            int rc = a2_wire_reader_next(r, &m);
            if (rc < 0)
                break;
            if (rc == 1) {
                if (m.type == A2_WIRE_HELLO) {
                    hello = 1;
                    if (m.token)
                        atomic_fetch_add(&s->tokens, 1);
                }
                continue;
            }
            struct pollfd q = {fd, POLLIN, 0};
            if (poll(&q, 1, 50) <= 0)
                continue;
            char buf[4096];
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0 || a2_wire_reader_feed(r, buf, (size_t)n) != 0)
                break;
        }
        if (hello) {
            atomic_fetch_add(&s->hellos, 1);
            a2_wire_buf b = {0};
            if (a2_wire_encode_error(&b, "standby",
                                     "standby: another a2-consumer is active "
                                     "for slot \"a2\"") == 0 &&
                send(fd, b.data, b.len, MSG_NOSIGNAL) != (ssize_t)b.len)
                fprintf(stderr, "the standby could not answer\n");
            a2_wire_buf_free(&b);
        }
        a2_wire_reader_free(r);
        close(fd);
    }
    return NULL;
}

static void standby_start(standby *s)
{
    memset(s, 0, sizeof *s);
    fake_init(&s->f);
    fake_listen(&s->f);
    assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
    assert_int_equal(pthread_create(&s->th, NULL, standby_main, s), 0);
    s->running = 1;
}

/* Stops answering: the thread ends, the socket file goes. */
static void standby_stop(standby *s)
{
    if (s->running) {
        char c = 1;
        assert_int_equal(write(s->stop[1], &c, 1), 1);
        pthread_join(s->th, NULL);
        close(s->stop[0]);
        close(s->stop[1]);
        s->running = 0;
    }
    if (s->f.lfd >= 0)
        close(s->f.lfd);
    s->f.lfd = -1;
    unlink(s->f.path);
}

static void standby_free(standby *s)
{
    standby_stop(s);
    fake_free(&s->f);
}

/*
 * Two addresses, a standby first: the standby's refusal is reported and the
 * worker goes on to the second address at once (the backoff is 1 s); the
 * token goes to the tcp: address only. When the active one closes the
 * connection, the worker tries the standby at once and, that round failed,
 * waits the backoff before the active one again. An outage reports the
 * standby once.
 */
static void test_connects_standby(void **state)
{
    (void)state;
    standby sb;
    standby_start(&sb);
    fake f;
    fake_init(&f);
    fake_listen_tcp(&f);
    logbuf lb = {0};
    const char *addrs[] = {sb.f.spec, f.spec};
    char err[256];
    a2_worker_options o = {.connects = addrs,
                           .nconnects = 2,
                           .token = "tok",
                           .name = "t-standby",
                           .reconnect_min_ms = 3000,
                           .reconnect_max_ms = 3000,
                           .log = capture,
                           .log_ctx = &lb};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(a2_worker_subscribe(w, "c", 0, NULL, 0), 0);

    int64_t t0 = a2_test_now_ms();
    a2_worker_event ev;
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "is a standby"));
    assert_non_null(strstr(ev.message, sb.f.spec));
    assert_non_null(strstr(ev.message, "another a2-consumer is active"));
    fake_accept(&f, w, 2000);
    int64_t accepted = a2_test_now_ms() - t0;
    if (accepted >= 2900) /* not held for the 3 s backoff */
        fail_msg("the second address was tried after %" PRId64 " ms, not at "
                 "once",
                 accepted);
    a2_wire_msg m;
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_HELLO);
    assert_non_null(m.token);
    assert_string_equal(m.token, "tok");
    fake_read(&f, w, &m, 2000);
    assert_int_equal(m.type, A2_WIRE_SUBSCRIBE);
    a2_wire_buf b = {0};
    assert_int_equal(a2_wire_encode_welcome(&b, 7), 0);
    fake_send(&f, &b);
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    assert_true(a2_worker_connected(w));
    char want[200];
    snprintf(want, sizeof want, "connected to a2-consumer at %s", f.spec);
    assert_true(logged(&lb, want));
    assert_true(logged(&lb, "trying tcp:127.0.0.1:"));
    assert_int_equal(atomic_load(&sb.hellos), 1);
    assert_int_equal(atomic_load(&sb.tokens), 0); /* unix: never a token */
    a2_worker_stats st;
    a2_worker_get_stats(w, &st);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.standby_refusals, 1);

    /* The active one closes: closed (reported), the standby at once (a new
     * outage: reported again), then the backoff before the active one. */
    fake_drop(&f);
    int64_t t1 = a2_test_now_ms();
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "closed the connection"));
    assert_non_null(strstr(ev.message, f.spec));
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "is a standby"));
    if (a2_test_now_ms() - t1 >= 2900)
        fail_msg("the standby was not tried at once");
    assert_true(logged(&lb, "all 2 addresses tried, trying tcp:127.0.0.1:"));
    fake_accept(&f, w, 10000);
    int64_t again = a2_test_now_ms() - t1;
    if (again < 2900)
        fail_msg("the round was tried again after %" PRId64 " ms, before "
                 "the 3000 ms backoff",
                 again);
    handshake(&f, w, 1);
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 2000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 2000);
    assert_int_equal(atomic_load(&sb.hellos), 2);
    assert_int_equal(logged_count(&lb, "is a standby"), 2);

    /* The active one goes away for good: the rounds go on, the standby
     * refusing each, reported once. */
    fake_drop(&f);
    close(f.lfd);
    f.lfd = -1;
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "closed the connection"));
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 2000);
    assert_non_null(strstr(ev.message, "is a standby"));
    int64_t end = a2_test_now_ms() + 30000;
    while (atomic_load(&sb.hellos) < 4 && a2_test_now_ms() < end) {
        int rc = a2_worker_wait(w, &ev, 100);
        assert_true(rc >= 0);
        if (rc == 1)
            fail_msg("unexpected event %d (%s)", ev.type,
                     ev.message ? ev.message : "");
    }
    assert_true(atomic_load(&sb.hellos) >= 4);
    assert_int_equal(logged_count(&lb, "is a standby"), 3);
    a2_worker_get_stats(w, &st);
    assert_true(st.standby_refusals >= 4);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 2);
    assert_false(a2_worker_connected(w));
    a2_wire_buf_free(&b);
    a2_worker_free(w);
    fake_free(&f);
    standby_free(&sb);
}

static int teardown_daemons(void **state)
{
    (void)state;
    a2_test_kill_leftovers();
    return 0;
}

/* The next event of type want within ms, skipping others. */
static void expect_event_skip(a2_worker *w, a2_worker_event *ev, int want,
                              int ms)
{
    int64_t end = a2_test_now_ms() + ms;
    for (;;) {
        int64_t left = end - a2_test_now_ms();
        int rc = left > 0 ? a2_worker_wait(w, ev, (int)left) : 0;
        if (rc != 1)
            fail_msg("wanted event %d within %d ms, got rc %d (last error: "
                     "%s)",
                     want, ms, rc, a2_worker_last_error(w));
        if (ev->type == want)
            return;
    }
}

/*
 * A scripted standby at the first address and the real a2-consumer at the
 * second: the worker reports the standby and ends up connected to the real
 * one, woken by it. Then that one goes (its socket with it) and a new real
 * a2-consumer comes up at the first address: the worker reconnects to it.
 */
static void test_connects_real_consumer(void **state)
{
    (void)state;
    a2_test_consumer d;
    a2_test_consumer_run(&d, "wl_standby");
    standby sb;
    standby_start(&sb);
    char real[160];
    snprintf(real, sizeof real, "unix:%s", d.sock);
    const char *addrs[] = {sb.f.spec, real};
    logbuf lb = {0};
    char err[256];
    a2_worker_options o = {.connects = addrs,
                           .nconnects = 2,
                           .name = "t-real",
                           .reconnect_min_ms = 50,
                           .reconnect_max_ms = 200,
                           .log = capture,
                           .log_ctx = &lb};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    assert_non_null(w);
    assert_int_equal(a2_worker_subscribe(w, "sb-consumer", 0, NULL, 0), 0);

    a2_worker_event ev;
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 5000);
    assert_non_null(strstr(ev.message, "is a standby"));
    assert_non_null(strstr(ev.message, sb.f.spec));
    expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 5000);
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 5000);
    assert_string_equal(ev.consumer, "sb-consumer");
    char want[200];
    snprintf(want, sizeof want, "connected to a2-consumer at %s", real);
    assert_true(logged(&lb, want));
    a2_worker_stats st;
    a2_worker_get_stats(w, &st);
    assert_int_equal(st.standby_refusals, 1);
    assert_int_equal(atomic_load(&sb.hellos), 1);
    /* Woken by the real one. */
    append_for("sb-1", "sb-consumer", NULL);
    expect_event_skip(w, &ev, A2_WORKER_EV_WAKE, 10000);
    assert_string_equal(ev.session, "sb-1");

    /* The standby goes, then the active one with its socket; a new one
     * comes up at the first address. */
    standby_stop(&sb);
    assert_int_equal(a2_test_consumer_stop(&d), 0);
    unlink(d.sock);
    expect_event(w, &ev, A2_WORKER_EV_DISCONNECTED, 5000);
    assert_non_null(strstr(ev.message, "closed the connection"));
    snprintf(d.sock, sizeof d.sock, "%s", sb.f.path);
    a2_test_consumer_start(&d);
    expect_event_skip(w, &ev, A2_WORKER_EV_CONNECTED, 20000);
    assert_true(a2_worker_connected(w));
    snprintf(want, sizeof want, "connected to a2-consumer at %s", sb.f.spec);
    assert_true(logged(&lb, want));
    expect_event(w, &ev, A2_WORKER_EV_RESYNC, 5000);
    append_for("sb-2", "sb-consumer", NULL);
    expect_event_skip(w, &ev, A2_WORKER_EV_WAKE, 10000);
    assert_string_equal(ev.session, "sb-2");
    a2_worker_get_stats(w, &st);
    assert_int_equal(st.connects, 2);
    assert_int_equal(st.disconnects, 1);
    assert_int_equal(st.standby_refusals, 1);
    a2_worker_free(w);
    a2_test_consumer_cleanup(&d);
    standby_free(&sb);
}

/*
 * A real a2-consumer started with --trace-wakes: a commit's wake-up carries
 * its times in order (commit, walsender send, read by a2-consumer, moved to
 * the socket), none before the append began nor after the wake-up was
 * taken; without the option a wake-up carries none.
 */
static void test_wake_trace(void **state)
{
    (void)state;
    for (int traced = 1; traced >= 0; traced--) {
        a2_test_consumer d;
        a2_test_consumer_init(&d, traced ? "wl_trace" : "wl_untraced");
        const char *with[] = {"--trace-wakes", NULL}, *without[] = {NULL};
        assert_int_equal(
                a2_test_consumer_start_args(&d, 0, traced ? with : without), 0);
        char addr[160];
        snprintf(addr, sizeof addr, "unix:%s", d.sock);
        const char *addrs[] = {addr};
        char err[256];
        a2_worker_options o = {.connects = addrs, .nconnects = 1, .name = "t-trace"};
        a2_worker *w = a2_worker_new(&o, err, sizeof err);
        assert_non_null(w);
        assert_int_equal(a2_worker_subscribe(w, "tr-consumer", 0, NULL, 0), 0);
        a2_worker_event ev;
        expect_event(w, &ev, A2_WORKER_EV_CONNECTED, 5000);
        expect_event(w, &ev, A2_WORKER_EV_RESYNC, 5000);
        int64_t before = a2__real_us();
        append_for(traced ? "tr-1" : "tr-2", "tr-consumer", NULL);
        expect_event_skip(w, &ev, A2_WORKER_EV_WAKE, 10000);
        int64_t after = a2__real_us();
        assert_string_equal(ev.session, traced ? "tr-1" : "tr-2");
        const int64_t *t = ev.trace_us;
        if (traced) {
            print_message("trace: commit %+" PRId64 " sent %+" PRId64
                          " read %+" PRId64 " push %+" PRId64 " us\n",
                          t[A2_WIRE_TRACE_COMMIT] - before,
                          t[A2_WIRE_TRACE_SENT] - t[A2_WIRE_TRACE_COMMIT],
                          t[A2_WIRE_TRACE_RECV] - t[A2_WIRE_TRACE_SENT],
                          t[A2_WIRE_TRACE_PUSH] - t[A2_WIRE_TRACE_RECV]);
            assert_true(before <= t[A2_WIRE_TRACE_COMMIT]);
            for (int i = A2_WIRE_TRACE_COMMIT; i < A2_WIRE_TRACE_PUSH; i++)
                assert_true(t[i] <= t[i + 1]);
            assert_true(t[A2_WIRE_TRACE_PUSH] <= after);
        } else {
            for (int i = 0; i < A2_WIRE_TRACE_N; i++)
                assert_int_equal(t[i], 0);
        }
        a2_worker_free(w);
        a2_test_consumer_end(&d);
    }
}

/* ── the runner ───────────────────────────────────────────────────────── */

typedef struct {
    int calls;
    int sleep_ms;
    int fail;
    int attempts[8];
} hctx;

static int handler(void *ctx, const a2_head *head, a2_worker_reply *reply)
{
    hctx *h = ctx;
    if (h->calls < 8)
        h->attempts[h->calls] = head->dispatch.attempt_count;
    h->calls++;
    if (h->sleep_ms) {
        struct timespec ts = {h->sleep_ms / 1000,
                              (long)(h->sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (h->fail) {
        a2_worker_reply_error(reply, "handler said no");
        return 1;
    }
    assert_int_equal(a2_worker_reply_add(reply, "", NULL, NULL),
                     A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_reply_add(reply, "t", "{bad", NULL),
                     A2_WORKER_EINVAL);
    assert_int_equal(a2_worker_reply_add(reply, "done", "{\"ok\":true}", NULL),
                     0);
    assert_int_equal(a2_worker_reply_add(reply, "done.too", NULL, "my-id"), 0);
    return 0;
}

static void test_runner(void **state)
{
    (void)state;
    append_for("run-1", "runner", NULL);
    hctx h = {.sleep_ms = 2500};
    a2_consumer c = {.name = "runner"};
    char err[512];
    logbuf lb = {0};
    a2_worker_runner_options o = {.db = a2_test_db(),
                                  .holder = "test-holder",
                                  .consumers = &c,
                                  .nconsumers = 1,
                                  .ttl_ms = 1000,
                                  .max_failures = 2,
                                  .retry_after_ms = -1,
                                  .handler = handler,
                                  .ctx = &h,
                                  .log = capture,
                                  .log_ctx = &lb};
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    assert_non_null(r);
    assert_string_equal(a2_worker_runner_holder(r), "test-holder");

    /* A 2.5 s handler on a 1 s lease (renewed every third of it): renewed,
     * completed, one attempt. */
    a2_worker_run_stats st;
    assert_int_equal(a2_worker_runner_run(r, "run-1", false, &st), 0);
    assert_int_equal(st.claimed, 1);
    assert_int_equal(st.completed, 1);
    assert_true(st.renewals >= 2);
    assert_int_equal(st.retry_at, 0);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.attempts[0], 1);
    PGconn *conn = a2_test_connect();
    char *got = a2_test_scalar(
            conn, "select string_agg(event_type || ':' || event_id || ':' || "
                  "(cause->>'consumer') || '/' || (cause->>'attempt'), ' ' "
                  "order by idx) from a2_events where session_id = 'run-1' "
                  "and cause is not null");
    assert_string_equal(got,
                        "done:ret-runner-1-1:runner/1 done.too:my-id:runner/1");
    free(got);
    /* Nothing left: settled. */
    assert_int_equal(a2_worker_runner_run(r, "run-1", false, &st), 0);
    assert_int_equal(st.claimed, 0);

    /* Failures without a retry hold: retried at once, then dead-lettered
     * at max_failures (2), all in one run. */
    append_for("run-2", "runner", "lane-a");
    h = (hctx){.fail = 1};
    assert_int_equal(a2_worker_runner_run(r, "run-2", false, &st), 0);
    assert_int_equal(st.claimed, 2);
    assert_int_equal(st.failed, 1);
    assert_int_equal(st.dead_lettered, 1);
    assert_int_equal(st.retry_at, 0);
    assert_int_equal(h.calls, 2);
    assert_int_equal(h.attempts[1], 2);
    got = a2_test_scalar(conn, "select failure_count || ' ' || last_error "
                               "from a2_cursors where session_id = 'run-2' "
                               "and failed_at is not null");
    assert_string_equal(got, "2 handler said no");
    free(got);
    assert_true(logged(&lb, "dead-lettered run-2 runner #1 after 2 failures"));

    /* With a retry hold, the run stops busy until the hold ends. */
    append_for("run-4", "runner", NULL);
    h = (hctx){.fail = 1};
    o.retry_after_ms = 60000;
    o.holder = NULL;
    a2_worker_runner *r2 = a2_worker_runner_new(&o, err, sizeof err);
    assert_non_null(r2);
    /* retry_at is the failure's time (CLOCK_REALTIME ms) + 60000, and the
     * failure falls within the run. */
    int64_t before = a2_test_wall_ms();
    assert_int_equal(a2_worker_runner_run(r2, "run-4", false, &st), 0);
    int64_t after_run = a2_test_wall_ms();
    assert_int_equal(st.failed, 1);
    assert_int_equal(h.calls, 1);
    if (st.retry_at < before + 60000 - 5 ||
        st.retry_at > after_run + 60000 + 100)
        fail_msg("retry_at %" PRId64 " is not within [%" PRId64 ", %" PRId64
                 "]",
                 st.retry_at, before + 60000 - 5, after_run + 60000 + 100);
    a2_worker_runner_free(r2);

    /* A stopped runner claims nothing. */
    append_for("run-3", "runner", NULL);
    a2_worker_runner_stop(r);
    assert_int_equal(a2_worker_runner_run(r, "run-3", false, &st),
                     A2_WORKER_ESTOPPED);
    assert_int_equal(a2_worker_runner_run(r, "", false, &st), A2_WORKER_EINVAL);
    a2_worker_runner_free(r);

    /* A runner whose database is gone fails to start with the reason. */
    o.db = "host=127.0.0.1 port=1 connect_timeout=2";
    assert_null(a2_worker_runner_new(&o, err, sizeof err));
    assert_non_null(strstr(err, "could not connect to the store"));
    PQfinish(conn);
}

/* A handler that appends one more head for its consumer to its session on
 * its first call, as a producer would while the run works. */
typedef struct {
    int calls;
} wctx;

static int appending_handler(void *ctx, const a2_head *h,
                             a2_worker_reply *reply)
{
    (void)reply;
    wctx *w = ctx;
    if (w->calls++ == 0)
        append_for(h->event.session_id, "woken", NULL);
    return 0;
}

/*
 * A woken run ends after one claim round when that claim took every
 * eligible head: the head appended meanwhile waits for its own wake-up (the
 * next run), where a polling run claims it in the same run. A claim that
 * dead-lettered a head goes on claiming.
 */
static void test_runner_woken(void **state)
{
    (void)state;
    wctx w = {0};
    a2_consumer c = {.name = "woken"};
    char err[512];
    a2_worker_runner_options o = {.db = a2_test_db(),
                                  .holder = "woken-holder",
                                  .consumers = &c,
                                  .nconsumers = 1,
                                  .max_failures = 2,
                                  .retry_after_ms = -1,
                                  .handler = appending_handler,
                                  .ctx = &w};
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    assert_non_null(r);
    a2_worker_run_stats st;

    append_for("woken-1", "woken", NULL);
    assert_int_equal(a2_worker_runner_run_woken(r, "woken-1", false, 0, &st), 0);
    assert_int_equal(st.claimed, 1);
    assert_int_equal(st.completed, 1);
    assert_int_equal(st.retry_at, 0);
    assert_int_equal(a2_worker_runner_run_woken(r, "woken-1", false, 0, &st), 0);
    assert_int_equal(st.claimed, 1);
    assert_int_equal(st.completed, 1);
    assert_int_equal(a2_worker_runner_run_woken(r, "woken-1", false, 0, &st), 0);
    assert_int_equal(st.claimed, 0);

    w.calls = 0;
    append_for("woken-2", "woken", NULL);
    assert_int_equal(a2_worker_runner_run(r, "woken-2", false, &st), 0);
    assert_int_equal(st.claimed, 2);
    assert_int_equal(st.completed, 2);

    /* A lapsed claim at its last failure is dead-lettered by the claim that
     * takes the other head over: the woken run claims again and takes the
     * head its handler appended. */
    w.calls = 0;
    append_for("woken-3", "woken", NULL);
    append_for("woken-3", "woken", NULL);
    PGconn *conn = a2_test_connect();
    a2_test_exec(conn, "update a2_cursors set attempt_count = 1, "
                       "claim_holder = 'gone', claim_expires_at = 1, "
                       "failure_count = 1 where session_id = 'woken-3' and "
                       "head = 1");
    assert_int_equal(a2_worker_runner_run_woken(r, "woken-3", false, 0, &st), 0);
    assert_int_equal(st.dead_lettered, 1);
    assert_int_equal(st.claimed, 2);
    assert_int_equal(st.completed, 2);
    PQfinish(conn);
    a2_worker_runner_free(r);
}

/* Pending sessions for a resync, paged through the runner's connection. */
static void seen(void *ctx, const char *session)
{
    int *n = ctx;
    if (strncmp(session, "pend-", 5) == 0)
        (*n)++;
}

static void test_runner_pending(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        char s[32];
        snprintf(s, sizeof s, "pend-%d", i);
        append_for(s, "pender", NULL);
    }
    hctx h = {0};
    a2_consumer c = {.name = "pender"};
    char err[256];
    a2_worker_runner_options o = {.db = a2_test_db(),
                                  .consumers = &c,
                                  .nconsumers = 1,
                                  .handler = handler,
                                  .ctx = &h};
    a2_worker_runner *r = a2_worker_runner_new(&o, err, sizeof err);
    assert_non_null(r);
    int n = 0;
    assert_int_equal(a2_worker_runner_pending(r, seen, &n), 3);
    assert_int_equal(n, 3);
    a2_worker_runner_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_options),
            cmocka_unit_test(test_events),
            cmocka_unit_test(test_reconnect_and_sweep),
            cmocka_unit_test(test_ping_timeout),
            cmocka_unit_test(test_connects_standby),
            cmocka_unit_test_teardown(test_connects_real_consumer,
                                      teardown_daemons),
            cmocka_unit_test_teardown(test_wake_trace, teardown_daemons),
            cmocka_unit_test(test_runner),
            cmocka_unit_test(test_runner_woken),
            cmocka_unit_test(test_runner_pending),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
