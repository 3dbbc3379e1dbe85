/*
 * A plain HTTP/1.0 GET, as `a2 status --metrics` and the console read
 * a2-consumer's /metrics: the host and path of the address they are
 * given, what the peer sends until it closes the connection (within a
 * deadline and a bound on its size), and the body after its headers.
 */
#include "cli.h"

#include "../common/buf.h"
#include "../common/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

const char *a2__cli_http_hostport(const char *spec, size_t *len,
                                  const char **path)
{
    const char *s = spec;
    if (strncmp(s, "http://", 7) == 0)
        s += 7;
    else if (strncmp(s, "tcp:", 4) == 0)
        s += 4;
    *path = strchr(s, '/');
    *len = *path ? (size_t)(*path - s) : strlen(s);
    return s;
}

int a2__cli_http_read(int fd, int64_t deadline, size_t max, char **answer,
                      int *errnum)
{
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int rc = A2__CLI_HTTP_OK;
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int64_t left = deadline - a2__mono_ms();
        if (left <= 0) {
            rc = A2__CLI_HTTP_ETIMEOUT;
            break;
        }
        int pr = poll(&pfd, 1, (int)left);
        if (pr <= 0)
            continue; /* interrupted, or the deadline is checked again */
        if (used + 4097 > cap) {
            if (cap >= max) {
                rc = A2__CLI_HTTP_ETOOBIG;
                break;
            }
            char *nb = a2__buf_grow(buf, &cap, 16384, used + 4097);
            if (!nb) {
                rc = A2__CLI_HTTP_ENOMEM;
                break;
            }
            buf = nb;
        }
        ssize_t n = recv(fd, buf + used, cap - used - 1, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            *errnum = errno;
            rc = A2__CLI_HTTP_EREAD;
            break;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    if (rc != A2__CLI_HTTP_OK || !buf) {
        free(buf);
        *answer = NULL;
        return rc;
    }
    buf[used] = '\0';
    *answer = buf;
    return rc;
}

char *a2__cli_http_body(const char *answer, char *err, size_t errlen)
{
    const char *sep = strstr(answer, "\r\n\r\n");
    char *body = strdup(sep ? sep + 4 : "");
    if (!body)
        snprintf(err, errlen, "out of memory");
    return body;
}
