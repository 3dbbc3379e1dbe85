/*
 * `a2 console`: a2-consumer's Prometheus endpoint (--metrics of
 * a2-consumer), read with one HTTP/1.0 GET on a plain socket, within a
 * deadline for connecting, sending and reading, at most MAX_ANSWER bytes.
 * Only the a2_consumer_* samples are kept.
 */
#include "cli.h"
#include "console.h"

#include "../common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ANSWER (1024 * 1024)

typedef struct {
    char host[256];
    char port[8];
    char path[512];
} metrics_url;

static int parse_url(const char *url, metrics_url *u, char *err, size_t errlen)
{
    if (strncmp(url, "https://", 8) == 0) {
        snprintf(err, errlen,
                 "--consumer-metrics %s: only http:// is supported "
                 "(a2-consumer serves /metrics over plain HTTP)",
                 url);
        return -1;
    }
    const char *slash;
    size_t hp;
    const char *s = a2__cli_http_hostport(url, &hp, &slash);
    snprintf(u->path, sizeof u->path, "%s", slash ? slash : "/metrics");
    const char *colon;
    const char *h = s;
    size_t hl;
    if (hp > 0 && s[0] == '[') {
        const char *rb = memchr(s, ']', hp);
        if (!rb || rb + 1 >= s + hp || rb[1] != ':')
            goto bad;
        h = s + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = NULL;
        for (const char *p = s; p < s + hp; p++)
            if (*p == ':')
                colon = p;
        if (!colon)
            goto bad;
        hl = (size_t)(colon - s);
    }
    size_t pl = (size_t)(s + hp - colon - 1);
    if (hl == 0 || hl >= sizeof u->host || pl == 0 || pl >= sizeof u->port)
        goto bad;
    for (size_t i = 0; i < pl; i++)
        if (colon[1 + i] < '0' || colon[1 + i] > '9')
            goto bad;
    for (const char *p = u->path; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            goto bad;
    memcpy(u->host, h, hl);
    u->host[hl] = '\0';
    memcpy(u->port, colon + 1, pl);
    u->port[pl] = '\0';
    return 0;
bad:
    snprintf(err, errlen,
             "bad --consumer-metrics '%s' (expected http://HOST:PORT[/PATH], "
             "e.g. http://127.0.0.1:9187)",
             url);
    return -1;
}

int a2__con_metrics_check(const char *url, char *err, size_t errlen)
{
    metrics_url u;
    return parse_url(url, &u, err, errlen);
}

/* A connected socket within the deadline, or -1 with err. */
static int dial(const metrics_url *u, int64_t deadline, char *err,
                size_t errlen)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(u->host, u->port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "could not resolve %s: %s", u->host,
                 gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(err, errlen, "could not connect to %s:%s", u->host, u->port);
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        int s = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       0);
        if (s < 0)
            continue;
        if (connect(s, p->ai_addr, p->ai_addrlen) != 0 &&
            errno != EINPROGRESS) {
            snprintf(err, errlen, "could not connect to %s:%s: %s", u->host,
                     u->port, strerror(errno));
            close(s);
            continue;
        }
        struct pollfd pfd = {s, POLLOUT, 0};
        int64_t left = deadline - a2__mono_ms();
        int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (pr <= 0) {
            snprintf(err, errlen, "could not connect to %s:%s: timed out",
                     u->host, u->port);
            close(s);
            continue;
        }
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
            snprintf(err, errlen, "could not connect to %s:%s: %s", u->host,
                     u->port, strerror(soerr ? soerr : errno));
            close(s);
            continue;
        }
        fd = s;
    }
    freeaddrinfo(ai);
    return fd;
}

/* The answer's body (malloc'd), or NULL with err. */
static char *fetch(const metrics_url *u, int timeout_ms, char *err,
                   size_t errlen)
{
    int64_t deadline = a2__mono_ms() + timeout_ms;
    int fd = dial(u, deadline, err, errlen);
    if (fd < 0)
        return NULL;
    bool v6 = strchr(u->host, ':') != NULL;
    char req[1024];
    int rn = snprintf(req, sizeof req,
                      "GET %s HTTP/1.0\r\nHost: %s%s%s:%s\r\n"
                      "Accept: text/plain\r\nConnection: close\r\n\r\n",
                      u->path, v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
    char *buf = NULL, *body = NULL;
    size_t sent = 0;
    while (sent < (size_t)rn) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int64_t left = deadline - a2__mono_ms();
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
            snprintf(err, errlen, "%s:%s did not take the request in %d ms",
                     u->host, u->port, timeout_ms);
            goto done;
        }
        ssize_t n = send(fd, req + sent, (size_t)rn - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            snprintf(err, errlen, "could not send to %s:%s: %s", u->host,
                     u->port, strerror(errno));
            goto done;
        }
        sent += (size_t)n;
    }
    int errnum = 0;
    switch (a2__cli_http_read(fd, deadline, MAX_ANSWER, &buf, &errnum)) {
    case A2__CLI_HTTP_ETIMEOUT:
        snprintf(err, errlen, "%s:%s did not answer in %d ms", u->host, u->port,
                 timeout_ms);
        goto done;
    case A2__CLI_HTTP_ETOOBIG:
        snprintf(err, errlen, "%s:%s: answer over %d bytes", u->host, u->port,
                 MAX_ANSWER);
        goto done;
    case A2__CLI_HTTP_ENOMEM:
        snprintf(err, errlen, "out of memory");
        goto done;
    case A2__CLI_HTTP_EREAD:
        snprintf(err, errlen, "could not read from %s:%s: %s", u->host, u->port,
                 strerror(errnum));
        goto done;
    default:
        break;
    }
    if (!buf) {
        snprintf(err, errlen, "%s:%s closed the connection without an answer",
                 u->host, u->port);
        goto done;
    }
    int major, minor, status;
    if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &status) != 3 ||
        status != 200) {
        size_t eol = strcspn(buf, "\r\n");
        snprintf(err, errlen, "%s:%s answered '%.*s'", u->host, u->port,
                 (int)(eol > 80 ? 80 : eol), buf);
        goto done;
    }
    body = a2__cli_http_body(buf, err, errlen);
done:
    free(buf);
    close(fd);
    return body;
}

/* The a2_consumer_* samples of a Prometheus text ("name{labels} value
 * [timestamp]"): name with its labels -> value. */
static json_t *parse_samples(const char *body)
{
    json_t *o = json_object();
    for (const char *p = body; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 12 && n < 4096 && strncmp(p, "a2_consumer_", 12) == 0) {
            char line[4096];
            memcpy(line, p, n);
            line[n] = '\0';
            /* The name ends at a blank, or after its labels' closing brace
             * (a quoted label value may hold anything). */
            size_t k = 0;
            bool quoted = false, labels = false;
            for (; k < n; k++) {
                char c = line[k];
                if (labels) {
                    if (quoted && c == '\\' && k + 1 < n)
                        k++;
                    else if (c == '"')
                        quoted = !quoted;
                    else if (c == '}' && !quoted) {
                        k++;
                        break;
                    }
                } else if (c == '{')
                    labels = true;
                else if (c == ' ' || c == '\t')
                    break;
            }
            if (k < n && (line[k] == ' ' || line[k] == '\t')) {
                line[k] = '\0';
                char *end = NULL;
                double v = strtod(line + k + 1, &end);
                if (end != line + k + 1 && isfinite(v))
                    json_object_set_new(o, line, json_real(v));
            }
        }
        p += n + (nl ? 1 : 0);
    }
    return o;
}

static json_t *sample(const json_t *samples, const char *name, bool integer)
{
    const json_t *v = json_object_get(samples, name);
    if (!json_is_number(v))
        return json_null();
    double d = json_number_value(v);
    return integer ? json_integer((json_int_t)d) : json_real(d);
}

json_t *a2__con_metrics_scrape(const char *url, int timeout_ms)
{
    json_t *o = json_object();
    json_object_set_new(o, "url", a2__con_jstr(url));
    metrics_url u;
    char err[512];
    if (parse_url(url, &u, err, sizeof err) != 0) {
        json_object_set_new(o, "error", a2__con_jstr(err));
        return o;
    }
    char *body = fetch(&u, timeout_ms, err, sizeof err);
    if (!body) {
        json_object_set_new(o, "error", a2__con_jstr(err));
        return o;
    }
    json_t *samples = parse_samples(body);
    free(body);
    const json_t *up = json_object_get(samples, "a2_consumer_up");
    json_object_set_new(o, "up",
                        json_is_number(up)
                                ? json_boolean(json_number_value(up) > 0)
                                : json_null());
    json_object_set_new(o, "workers",
                        sample(samples, "a2_consumer_workers", true));
    json_object_set_new(o, "connections",
                        sample(samples, "a2_consumer_connections", true));
    json_object_set_new(o, "lag_bytes",
                        sample(samples, "a2_consumer_lag_bytes", true));
    json_object_set_new(o, "lag_seconds",
                        sample(samples, "a2_consumer_lag_seconds", false));
    json_object_set_new(o, "metrics", samples);
    return o;
}
