/*
 * libFuzzer target for liba2worker's connection (worker/worker.c): the
 * bytes a2-consumer sends, through a real Unix socket, into the worker's
 * frame reader and message handling (welcome, wake, log, cleared, resync,
 * presence, pong, error), and the events it hands to its caller. Input: one
 * control byte (bit 0: send a valid welcome first; bits 1-7: the chunk size
 * the rest is written in, 0 = whole), then the bytes. The worker must take
 * each frame or drop the connection with a reason, never crash or leak;
 * every string of an event it returns must be readable.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../fuzz_input.h"
#include "a2/wire.h"
#include "a2/worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int lfd = -1;
static char path[108];
static volatile size_t sink;

/* libFuzzer ends with exit(): the socket file goes with the process. */
static void remove_socket(void)
{
    unlink(path);
}

static void setup(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(path, sizeof path, "/tmp/a2-fuzz-worker.%d.sock", (int)getpid());
    unlink(path);
    atexit(remove_socket);
    memcpy(a.sun_path, path, strlen(path) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(lfd, 4) != 0)
        abort();
}

static void touch(const char *s)
{
    if (s)
        sink += strlen(s);
}

/* Processes and drains the worker's events; returns 1 on a disconnect. */
static int drain(a2_worker *w)
{
    a2_worker_event ev;
    int gone = 0;
    if (a2_worker_process(w) != 0)
        abort();
    while (a2_worker_next(w, &ev) == 1) {
        touch(ev.consumer);
        touch(ev.session);
        touch(ev.cursor);
        touch(ev.event_type);
        touch(ev.ns);
        touch(ev.participant);
        touch(ev.fields_json);
        touch(ev.message);
        for (size_t i = 0; i < ev.nsessions; i++)
            touch(ev.sessions[i]);
        if (ev.type == A2_WORKER_EV_DISCONNECTED)
            gone = 1;
    }
    return gone;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (lfd < 0)
        setup();
    size_t chunk;
    int ctl = fuzz_take_control(&data, &size, 1, &chunk);
    if (ctl < 0)
        return 0;

    char connect[128], err[256];
    snprintf(connect, sizeof connect, "unix:%s", path);
    a2_worker_options o = {.connect = connect,
                           .name = "fuzz",
                           .reconnect_min_ms = 60000,
                           .reconnect_max_ms = 60000};
    a2_worker *w = a2_worker_new(&o, err, sizeof err);
    if (!w)
        abort();
    const char *types[] = {"t"};
    if (a2_worker_subscribe(w, "c", A2_WIRE_LOG_TYPES, types, 1) != 0 ||
        a2_worker_watch_presence(w, "ns") != 0)
        abort();
    /* Connect, and read what the worker sends (hello, subscribe ...). */
    if (a2_worker_process(w) != 0)
        abort();
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 1000) != 1)
        abort();
    int cfd = accept(lfd, NULL, NULL);
    if (cfd < 0)
        abort();
    drain(w);

    a2_wire_buf b = {0};
    if ((ctl & 1) && a2_wire_encode_welcome(&b, 1) != 0)
        abort();
    int gone = 0;
    if (b.len && write(cfd, b.data, b.len) != (ssize_t)b.len)
        abort();
    a2_wire_buf_free(&b);
    for (size_t off = 0; off < size && !gone; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (write(cfd, data + off, n) != (ssize_t)n)
            break; /* the worker closed it */
        gone = drain(w);
    }
    char buf[4096];
    for (int i = 0; i < 4 && !gone; i++) {
        while (recv(cfd, buf, sizeof buf, MSG_DONTWAIT) > 0)
            ;
        gone = drain(w);
    }
    /* A connection that ends is reported, never silently kept. */
    close(cfd);
    for (int i = 0; i < 100 && !gone; i++)
        gone = drain(w);
    if (!gone)
        abort();
    a2_worker_free(w);
    return 0;
}
