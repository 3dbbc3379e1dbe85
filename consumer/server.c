/*
 * The worker server of a2-consumer (see server.h; the parts are listed in
 * server_int.h): options and listeners (Unix socket, TCP), accepting and
 * refusing connections, the event loop of a2__server_run, flush, standby,
 * stats and freeing.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../common/addr.h"
#include "../common/clock.h"
#include "server_int.h"

#define DEFAULT_QUEUE_LIMIT          10000
#define DEFAULT_HELLO_TIMEOUT_MS     5000
#define DEFAULT_SUBSCRIBE_TIMEOUT_MS 10000
#define DEFAULT_AUTH_DELAY_MS        1000
#define DEFAULT_AUTH_SPACING_MS      100
#define MAX_EVENTS                   64
#define MAX_ROUNDS                   16
#define ACCEPTS_PER_EVENT            64

enum { H_UNIX = 1, H_TCP, H_TIMER, H_WORKER };

__attribute__((format(printf, 3, 4))) static void
seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

char *a2__server_dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Sends one error frame on fd (best effort) and closes it. */
static void refuse(a2__server *srv, int fd, const char *message)
{
    a2_wire_buf b = {0};
    srv->refused++;
    if (a2_wire_encode_error(&b, A2_WIRE_CODE_PROTOCOL, message) == 0)
        (void)send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    a2_wire_buf_free(&b);
    close(fd);
}

static void on_accept(a2__server *srv, a2__server_handle *l)
{
    for (int i = 0; i < ACCEPTS_PER_EVENT; i++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(l->fd, (struct sockaddr *)&sa, &salen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        a2__server_worker *w;
        struct epoll_event ev = {0};

        if (fd < 0 && (errno == EMFILE || errno == ENFILE) &&
            srv->reserve_fd >= 0) {
            /* No descriptor: the reserve takes the connection off the
             * queue, so the listener stops being readable. */
            close(srv->reserve_fd);
            fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0)
                refuse(srv, fd, "the consumer has no file descriptor free");
            srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                return;
            continue;
        }
        if (fd < 0)
            return; /* EAGAIN: all taken */
        if (srv->connections >= srv->max_connections) {
            char why[96];
            snprintf(why, sizeof why, "too many connections (at most %zu)",
                     srv->max_connections);
            refuse(srv, fd, why);
            continue;
        }
        if (l->kind == H_TCP) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        w = calloc(1, sizeof *w);
        if (!w) {
            close(fd);
            continue;
        }
        w->h.kind = H_WORKER;
        w->h.fd = fd;
        w->tcp = l->kind == H_TCP;
        snprintf(w->peer, sizeof w->peer, "unix");
        if (w->tcp) {
            char host[INET6_ADDRSTRLEN], port[8];
            if (getnameinfo((struct sockaddr *)&sa, salen, host, sizeof host,
                            port, sizeof port,
                            NI_NUMERICHOST | NI_NUMERICSERV) == 0)
                snprintf(w->peer, sizeof w->peer,
                         sa.ss_family == AF_INET6 ? "tcp [%s]:%s" : "tcp %s:%s",
                         host, port);
            else
                snprintf(w->peer, sizeof w->peer, "tcp ?");
        }
        w->serial = ++srv->serial;
        a2__server_deadline_set(srv, w, a2__mono_ms() + srv->hello_timeout_ms);
        srv->connections++;
        w->rd = a2_wire_reader_new(A2_WIRE_FROM_WORKER);
        w->q = a2__queue_new(srv->queue_limit);
        a2__queue_set_latency(w->q, &srv->wake_latency);
        a2__queue_set_trace(w->q, srv->trace_wakes);
        w->routed = a2__map_new();
        ev.events = EPOLLIN;
        ev.data.ptr = &w->h;
        if (!w->rd || !w->q || !w->routed ||
            epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            a2__server_worker_free(w);
            continue;
        }
        w->next = srv->workers;
        if (srv->workers)
            srv->workers->prev = w;
        srv->workers = w;
    }
}

static void reap(a2__server *srv)
{
    while (srv->dead) {
        a2__server_worker *w = srv->dead;
        srv->dead = w->next;
        a2__server_worker_free(w);
    }
}

int a2__server_run(a2__server *srv)
{
    struct epoll_event ev[MAX_EVENTS];
    int rc = 0;

    if (!srv)
        return -1;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        int n = epoll_wait(srv->epfd, ev, MAX_EVENTS, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        for (int i = 0; i < n; i++) {
            a2__server_handle *h = ev[i].data.ptr;
            if (h->kind == H_UNIX || h->kind == H_TCP) {
                on_accept(srv, h);
            } else if (h->kind == H_TIMER) {
                uint64_t ticks;
                if (read(h->fd, &ticks, sizeof ticks) < 0) {
                    /* EAGAIN: already consumed */
                }
                srv->armed_ms = 0; /* one-shot: it fired */
                srv->deadline_due = 1;
            } else {
                a2__server_worker *w = (a2__server_worker *)h;
                if (w->state == A2C_WORKER_DEAD)
                    continue;
                if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    a2__server_read(srv, w);
                if (w->state != A2C_WORKER_DEAD && (ev[i].events & EPOLLOUT) &&
                    a2__server_write(srv, w) != 0)
                    a2__server_close_now(srv, w);
            }
        }
        reap(srv);
        if (n < MAX_EVENTS)
            break;
    }
    a2__server_deadlines(srv);
    a2__server_flush(srv);
    reap(srv);
    return rc;
}

void a2__server_flush(a2__server *srv)
{
    if (!srv)
        return;
    while (srv->dirty) {
        a2__server_worker *w = srv->dirty;
        a2__server_dirty_remove(srv, w);
        if (w->state != A2C_WORKER_DEAD && a2__server_write(srv, w) != 0)
            a2__server_close_now(srv, w);
    }
}

/* ---- listeners ---- */

static int listen_unix(a2__server *srv, const char *path, char *err,
                       size_t errlen)
{
    struct sockaddr_un sa = {0};
    struct stat st;
    int fd;

    if (strlen(path) >= sizeof sa.sun_path) {
        seterr(err, errlen, "could not listen on unix:%s: path too long", path);
        return -1;
    }
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (lstat(path, &st) == 0) {
        int probe;
        if (!S_ISSOCK(st.st_mode)) {
            seterr(err, errlen,
                   "could not listen on unix:%s: file exists and is not a "
                   "socket",
                   path);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (probe < 0) {
            seterr(err, errlen, "could not create socket: %s", strerror(errno));
            return -1;
        }
        if (connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0 ||
            errno == EAGAIN || errno == EINPROGRESS) {
            close(probe);
            seterr(err, errlen,
                   "could not listen on unix:%s: another server is listening "
                   "there",
                   path);
            return -1;
        }
        int e = errno;
        close(probe);
        if (e != ECONNREFUSED && e != ENOENT) {
            seterr(err, errlen, "could not check unix:%s: %s", path,
                   strerror(e));
            return -1;
        }
        if (unlink(path) != 0 && errno != ENOENT) {
            seterr(err, errlen, "could not remove stale socket %s: %s", path,
                   strerror(errno));
            return -1;
        }
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        seterr(err, errlen, "could not create socket: %s", strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        seterr(err, errlen, "could not bind unix:%s: %s", path,
               strerror(errno));
        close(fd);
        return -1;
    }
    srv->unix_path = a2__server_dupstr(path);
    srv->lunix.fd = fd; /* from here a2__server_free removes the file */
    if (!srv->unix_path) {
        unlink(path);
        seterr(err, errlen, "out of memory");
        return -1;
    }
    if (chmod(path, 0660) != 0) {
        seterr(err, errlen, "could not chmod unix:%s: %s", path,
               strerror(errno));
        return -1;
    }
    if (listen(fd, 128) != 0) {
        seterr(err, errlen, "could not listen on unix:%s: %s", path,
               strerror(errno));
        return -1;
    }
    return 0;
}

static int listen_tcp(a2__server *srv, const char *host, const char *port,
                      char *err, size_t errlen)
{
    struct addrinfo hints = {0}, *res = NULL, *ai;
    int rc, fd = -1, saved = 0;

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    rc = getaddrinfo(host, port ? port : "0", &hints, &res);
    if (rc != 0) {
        seterr(err, errlen, "could not resolve tcp:%s:%s: %s", host,
               port ? port : "0", gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int one = 1;
        fd = socket(ai->ai_family,
                    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        seterr(err, errlen, "could not bind tcp:%s:%s: %s", host,
               port ? port : "0", strerror(saved));
        return -1;
    }
    srv->ltcp.fd = fd;
    srv->tcp_port = a2__addr_bound_port(fd);
    return 0;
}

static int watch(a2__server *srv, a2__server_handle *h, char *err,
                 size_t errlen)
{
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.ptr = h;
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, h->fd, &ev) != 0) {
        seterr(err, errlen, "could not watch a socket: %s", strerror(errno));
        return -1;
    }
    return 0;
}

a2__server *a2__server_new(const a2__server_options *opts, char *err,
                           size_t errlen)
{
    a2__server *srv;

    seterr(err, errlen, "%s", "");
    if (!opts || (!opts->unix_path && !opts->tcp_host)) {
        seterr(err, errlen,
               "no listener: give a Unix socket path or a TCP host");
        return NULL;
    }
    if (opts->tcp_host && (!opts->token || !opts->token[0])) {
        seterr(err, errlen, "a token is required to listen on TCP");
        return NULL;
    }
    if (opts->route != A2C_ROUTE_AFFINITY &&
        opts->route != A2C_ROUTE_BROADCAST) {
        seterr(err, errlen, "unknown route mode %d", (int)opts->route);
        return NULL;
    }
    srv = calloc(1, sizeof *srv);
    if (!srv) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    srv->lunix = (a2__server_handle){H_UNIX, -1};
    srv->ltcp = (a2__server_handle){H_TCP, -1};
    srv->timer = (a2__server_handle){H_TIMER, -1};
    srv->reserve_fd = -1;
    srv->route = opts->route;
    srv->trace_wakes = opts->trace_wakes;
    srv->queue_limit =
            opts->queue_limit ? opts->queue_limit : DEFAULT_QUEUE_LIMIT;
    srv->hello_timeout_ms = opts->hello_timeout_ms > 0
                                    ? opts->hello_timeout_ms
                                    : DEFAULT_HELLO_TIMEOUT_MS;
    srv->subscribe_timeout_ms = opts->subscribe_timeout_ms > 0
                                        ? opts->subscribe_timeout_ms
                                        : DEFAULT_SUBSCRIBE_TIMEOUT_MS;
    srv->max_connections = opts->max_connections ? opts->max_connections
                                                 : A2C_DEFAULT_MAX_CONNECTIONS;
    srv->move_budget = opts->move_budget ? opts->move_budget
                                         : A2C_DEFAULT_MOVE_BUDGET;
    srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    srv->log = opts->log;
    srv->log_arg = opts->log_arg;
    srv->auth_delay_ms = opts->auth_delay_ms > 0 ? opts->auth_delay_ms
                                                 : DEFAULT_AUTH_DELAY_MS;
    srv->auth_spacing_ms = opts->auth_spacing_ms > 0 ? opts->auth_spacing_ms
                                                     : DEFAULT_AUTH_SPACING_MS;
    srv->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (srv->epfd < 0) {
        seterr(err, errlen, "could not create epoll: %s", strerror(errno));
        goto error;
    }
    srv->timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (srv->timer.fd < 0) {
        seterr(err, errlen, "could not create timer: %s", strerror(errno));
        goto error;
    }
    if (watch(srv, &srv->timer, err, errlen) != 0)
        goto error;
    if (opts->token && !(srv->token = a2__server_dupstr(opts->token))) {
        seterr(err, errlen, "out of memory");
        goto error;
    }
    if (opts->unix_path &&
        (listen_unix(srv, opts->unix_path, err, errlen) != 0 ||
         watch(srv, &srv->lunix, err, errlen) != 0))
        goto error;
    if (opts->tcp_host &&
        (listen_tcp(srv, opts->tcp_host, opts->tcp_port, err, errlen) != 0 ||
         watch(srv, &srv->ltcp, err, errlen) != 0))
        goto error;
    return srv;

error:
    a2__server_free(srv);
    return NULL;
}

int a2__server_set_standby(a2__server *srv, const char *message)
{
    char *copy = NULL;
    if (message && !(copy = a2__server_dupstr(message)))
        return -1;
    free(srv->standby);
    srv->standby = copy;
    return 0;
}

void a2__server_free(a2__server *srv)
{
    if (!srv)
        return;
    srv->closing = 1;
    while (srv->workers)
        a2__server_close_now(srv, srv->workers);
    reap(srv);
    if (srv->lunix.fd >= 0) {
        close(srv->lunix.fd);
        if (srv->unix_path)
            unlink(srv->unix_path);
    }
    if (srv->ltcp.fd >= 0)
        close(srv->ltcp.fd);
    if (srv->timer.fd >= 0)
        close(srv->timer.fd);
    if (srv->epfd >= 0)
        close(srv->epfd);
    if (srv->reserve_fd >= 0)
        close(srv->reserve_fd);
    free(srv->unix_path);
    free(srv->standby);
    free(srv->token);
    free(srv->scratch.c);
    free(srv->scratch.w);
    a2__server_log_index_free(srv);
    a2__server_indexes_free(srv);
    free(srv);
}

int a2__server_fd(const a2__server *srv)
{
    return srv ? srv->epfd : -1;
}

int a2__server_tcp_port(const a2__server *srv)
{
    return srv ? srv->tcp_port : 0;
}

void a2__server_set_lsn(a2__server *srv, uint64_t lsn)
{
    if (srv)
        srv->lsn = lsn;
}

void a2__server_get_stats(const a2__server *srv, a2__server_stats *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!srv)
        return;
    out->workers = srv->live;
    out->wakes_sent = srv->sent[A2_WIRE_WAKE];
    out->logs_sent = srv->sent[A2_WIRE_LOG];
    out->cleared_sent = srv->sent[A2_WIRE_CLEARED];
    out->resyncs_sent = srv->sent[A2_WIRE_RESYNC];
    out->presence_sent = srv->sent[A2_WIRE_PRESENCE];
    out->overflows = srv->overflows;
    out->protocol_errors = srv->protocol_errors;
    out->standby_refusals = srv->standby_refusals;
    out->log_checks = srv->log_checks;
    out->connections = srv->connections;
    out->refused = srv->refused;
    out->auth_failures = srv->auth_failures;
    out->wake_latency = srv->wake_latency;
    if (srv->log_built && srv->log_gen == srv->gen) {
        out->log_consumers = a2__map_count(srv->log_groups);
    } else {
        /* Not indexed since the subscriptions changed: count them. */
        a2__map *seen = a2__map_new();
        for (const a2__server_worker *w = srv->workers; seen && w; w = w->next)
            for (size_t i = 0; w->state == A2C_WORKER_LIVE && i < w->n_subs;
                 i++)
                if (w->subs[i].filter != A2_WIRE_LOG_NONE)
                    (void)a2__map_put(seen, w->subs[i].consumer,
                                      strlen(w->subs[i].consumer), (void *)w,
                                      NULL);
        out->log_consumers = seen ? a2__map_count(seen) : 0;
        a2__map_free(seen, NULL);
    }
}
