/*
 * libFuzzer target for a2-consumer's worker server (consumer/server.c): the
 * bytes a worker sends, through a real Unix socket, into the server's frame
 * reader and message handling (hello, subscribe, presence, ping, errors),
 * with wake-ups, logs, clears, resyncs and presence patches routed to
 * whatever the input subscribed. Input: one control byte (bit 0: send a
 * valid hello first; bit 1: then a valid subscribe of consumer "c"; bits
 * 2-7: the chunk size the rest is written in, 0 = whole), then the bytes.
 * The server must answer or drop the connection, never crash or leak, and
 * keep serving: every input ends with a fresh worker that must get its
 * welcome.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../../consumer/server.h"
#include "../fuzz_input.h"
#include "a2/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static a2__server *srv;
static char path[108];

/* libFuzzer ends with exit(): the socket file goes with the process. */
static void remove_socket(void)
{
    unlink(path);
}

static void setup(void)
{
    char err[256];
    snprintf(path, sizeof path, "/tmp/a2-fuzz-server.%d.sock", (int)getpid());
    unlink(path);
    atexit(remove_socket);
    a2__server_options o = {
            .unix_path = path, .hello_timeout_ms = 200, .queue_limit = 64};
    srv = a2__server_new(&o, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "fuzz_server: %s\n", err);
        abort();
    }
}

static int connect_worker(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (fd < 0)
        abort();
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        abort();
    return fd;
}

/* Runs the server and reads what it sends; returns 1 once the server
 * closed the connection, 0 otherwise. got counts the bytes read. */
static int pump(int fd, size_t *got)
{
    char buf[65536];
    if (a2__server_run(srv) != 0)
        abort();
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            *got += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        return 0;
    }
}

static void send_all(int fd, const void *p, size_t len, size_t *got)
{
    const char *c = p;
    for (int spins = 0; len > 0 && spins < 1000; spins++) {
        ssize_t n = write(fd, c, len);
        if (n > 0) {
            c += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return; /* the server closed it */
        if (pump(fd, got))
            return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!srv)
        setup();
    size_t chunk;
    int ctl = fuzz_take_control(&data, &size, 2, &chunk);
    if (ctl < 0)
        return 0;

    size_t got = 0;
    int fd = connect_worker();
    a2_wire_buf b = {0};
    if (ctl & 1) {
        if (a2_wire_encode_hello(&b, "fuzz", NULL) != 0)
            abort();
        if ((ctl & 2) &&
            a2_wire_encode_subscribe(&b, "c", A2_WIRE_LOG_ALL, NULL, 0) != 0)
            abort();
    }
    if (pump(fd, &got) == 0)
        send_all(fd, b.data, b.len, &got);
    a2_wire_buf_free(&b);
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        send_all(fd, data + off, n, &got);
        if (pump(fd, &got))
            break;
    }
    /* Route to whatever the input subscribed to. */
    a2__server_wake(srv, "c", "s", "#1", 1, 16, 0);
    a2__server_log(srv, "s", 2, "t", 32, 0);
    a2__server_cleared(srv, "s", 3, 48);
    a2__server_presence(srv, "ns", "p", "{\"f\":1}", 64);
    a2__server_resync_all(srv);
    for (int i = 0; i < 4; i++)
        if (pump(fd, &got))
            break;
    close(fd);
    a2__server_run(srv);

    /* The server still serves: a well-behaved worker gets its welcome. */
    fd = connect_worker();
    if (a2_wire_encode_hello(&b, "probe", NULL) != 0)
        abort();
    got = 0;
    send_all(fd, b.data, b.len, &got);
    a2_wire_buf_free(&b);
    for (int i = 0; i < 1000 && got == 0; i++)
        if (pump(fd, &got))
            break;
    if (got == 0)
        abort();
    close(fd);
    a2__server_run(srv);
    return 0;
}
