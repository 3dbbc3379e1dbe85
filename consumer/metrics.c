/*
 * Metrics HTTP responder.
 */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct a2c_metrics {
    int fd;
    int port;
    a2c_metrics_render render;
    void *ctx;
};

a2c_metrics *a2c_metrics_new(const char *host, const char *port,
                             a2c_metrics_render render, void *ctx, char *err,
                             size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "could not resolve metrics address %s:%s: %s",
                 host, port, gai_strerror(rc));
        return NULL;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0) {
        snprintf(err, errlen, "could not create metrics socket: %s",
                 strerror(errno));
        freeaddrinfo(ai);
        return NULL;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        snprintf(err, errlen, "could not bind metrics tcp:%s:%s: %s", host,
                 port, strerror(errno));
        close(fd);
        freeaddrinfo(ai);
        return NULL;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bound = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    a2c_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->fd = fd;
    m->port = bound;
    m->render = render;
    m->ctx = ctx;
    return m;
}

void a2c_metrics_free(a2c_metrics *m)
{
    if (!m)
        return;
    close(m->fd);
    free(m);
}

int a2c_metrics_fd(const a2c_metrics *m)
{
    return m->fd;
}

int a2c_metrics_port(const a2c_metrics *m)
{
    return m->port;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        if (poll(&pfd, 1, 200) <= 0)
            return;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void answer(a2c_metrics *m, int fd)
{
    char req[2048];
    size_t have = 0;
    while (have < sizeof req - 1) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 50) <= 0)
            break;
        ssize_t r = recv(fd, req + have, sizeof req - 1 - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
        req[have] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[have] = '\0';
    const char *status = "404 Not Found";
    char *body = NULL;
    int healthy = 1;
    const char *ctype = "text/plain; charset=utf-8";
    if (strncmp(req, "GET /metrics", 12) == 0) {
        body = m->render(m->ctx, 0, &healthy);
        status = "200 OK";
        ctype = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strncmp(req, "GET /healthz", 12) == 0) {
        body = m->render(m->ctx, 1, &healthy);
        status = healthy ? "200 OK" : "503 Service Unavailable";
    }
    const char *text = body ? body : "not found\n";
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: "
                      "%zu\r\nConnection: close\r\n\r\n",
                      status, ctype, strlen(text));
    write_all(fd, head, (size_t)hn);
    write_all(fd, text, strlen(text));
    free(body);
}

void a2c_metrics_handle(a2c_metrics *m)
{
    for (int i = 0; i < 16; i++) {
        int fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        answer(m, fd);
        close(fd);
    }
}
