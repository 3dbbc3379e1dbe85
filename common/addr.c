/*
 * "unix:PATH" and "tcp:HOST:PORT": parsing and connecting.
 */
#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int a2__addr_kind(const char *spec)
{
    if (!spec)
        return 0;
    if (strncmp(spec, "unix:", 5) == 0)
        return A2__ADDR_UNIX;
    if (strncmp(spec, "tcp:", 4) == 0)
        return A2__ADDR_TCP;
    return 0;
}

void a2__addr_clear(a2__addr *a)
{
    if (!a)
        return;
    free(a->path);
    free(a->host);
    free(a->port);
    memset(a, 0, sizeof *a);
}

int a2__addr_split(const char *hostport, a2__addr *out)
{
    memset(out, 0, sizeof *out);
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || !colon[1])
        return A2__ADDR_EHOSTPORT;
    const char *h = hostport;
    size_t hl = (size_t)(colon - hostport);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    out->host = strndup(h, hl);
    out->port = strdup(colon + 1);
    if (!out->host || !out->port) {
        a2__addr_clear(out);
        return A2__ADDR_ENOMEM;
    }
    out->kind = A2__ADDR_TCP;
    return A2__ADDR_OK;
}

int a2__addr_parse(const char *spec, a2__addr *out)
{
    memset(out, 0, sizeof *out);
    switch (a2__addr_kind(spec)) {
    case A2__ADDR_UNIX:
        if (!spec[5])
            return A2__ADDR_EPATH;
        out->path = strdup(spec + 5);
        if (!out->path)
            return A2__ADDR_ENOMEM;
        out->kind = A2__ADDR_UNIX;
        return A2__ADDR_OK;
    case A2__ADDR_TCP: {
        int rc = a2__addr_split(spec + 4, out);
        if (rc != A2__ADDR_OK)
            return rc;
        for (const char *p = out->port; *p; p++)
            if (*p < '0' || *p > '9') {
                a2__addr_clear(out);
                return A2__ADDR_EPORT;
            }
        return A2__ADDR_OK;
    }
    default:
        return A2__ADDR_ESCHEME;
    }
}

static int dial_unix(const char *path, const char *name, int type, char *err,
                     size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path too long: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, n + 1);
    int fd = socket(AF_UNIX, type, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    if (fd >= 0 && (type & SOCK_NONBLOCK) &&
        (errno == EINPROGRESS || errno == EAGAIN))
        return fd;
    int e = errno;
    if (fd >= 0)
        close(fd);
    snprintf(err, errlen, "could not connect to %s: %s", name, strerror(e));
    return -1;
}

static int dial_tcp(const char *host, const char *port, const char *name,
                    int type, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "could not resolve %s: %s", host,
                 gai_strerror(gai));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, type, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
            ((type & SOCK_NONBLOCK) && errno == EINPROGRESS))
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "could not connect to %s: %s", name,
                 strerror(saved));
    return fd;
}

int a2__addr_dial(const a2__addr *a, const char *name, int flags, char *err,
                  size_t errlen)
{
    int type = SOCK_STREAM | SOCK_CLOEXEC;
    if (flags & A2__ADDR_NONBLOCK)
        type |= SOCK_NONBLOCK;
    if (a->kind == A2__ADDR_UNIX)
        return dial_unix(a->path, name, type, err, errlen);
    if (a->kind == A2__ADDR_TCP)
        return dial_tcp(a->host, a->port, name, type, err, errlen);
    snprintf(err, errlen, "could not connect to %s: no address", name);
    return -1;
}

int a2__addr_bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}
