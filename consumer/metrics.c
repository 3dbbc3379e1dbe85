/*
 * The metrics endpoint: libmicrohttpd on a thread of its own, answering
 * from the snapshot the consumer's loop publishes.
 *
 * A request asks the loop for a fresh snapshot (the eventfd the loop polls)
 * and waits for it at most SNAPSHOT_WAIT_MS; a loop busy elsewhere gets the
 * last snapshot served. The loop renders only when asked, and never reads
 * or writes a socket of the endpoint: a slow or hostile client costs the
 * HTTP thread a connection slot, bounded by the limits below, and nothing
 * else.
 */
#include "metrics.h"

#include "../common/addr.h"
#include "../common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SNAPSHOT_WAIT_MS   1000
#define CONNECTION_LIMIT   32
#define PER_IP_LIMIT       8
#define CONNECTION_TIMEOUT 5 /* s: a request not done by then is dropped */
#define CONNECTION_MEMORY  (16 * 1024)

struct a2__metrics {
    struct MHD_Daemon *mhd;
    int port;
    int efd; /* readable: a request wants a snapshot */
    a2__metrics_render render;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;   /* /metrics */
    char *health; /* /healthz */
    int healthy;
    uint64_t published; /* snapshots published */
    uint64_t wanted;    /* the snapshot the newest request waits for */
};

/* A copy of the snapshot after asking the loop for a new one. */
static char *snapshot(a2__metrics *m, int health, int *healthy)
{
    pthread_mutex_lock(&m->mu);
    uint64_t want = m->published + 1;
    if (m->wanted < want) {
        m->wanted = want;
        uint64_t one = 1;
        if (write(m->efd, &one, sizeof one) < 0) {
            /* the counter is already set: the loop is asked */
        }
    }
    struct timespec end = a2__mono_timespec(a2__mono_ms() + SNAPSHOT_WAIT_MS);
    while (m->published < want &&
           pthread_cond_timedwait(&m->cv, &m->mu, &end) == 0)
        ;
    const char *src = health ? m->health : m->text;
    char *copy = strdup(src ? src : "");
    *healthy = m->healthy;
    pthread_mutex_unlock(&m->mu);
    return copy;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int status,
                             const char *body, size_t len, int copy)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
            len, (void *)body,
            copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_MUST_FREE);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_len, void **req)
{
    (void)version;
    (void)upload;
    static int started;
    a2__metrics *m = cls;
    if (!*req) {
        *req = &started; /* headers read: answer on the next call */
        return MHD_YES;
    }
    if (*upload_len) {
        *upload_len = 0; /* a body is read and ignored */
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char no[] = "only GET and HEAD\n";
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, no, sizeof no - 1, 1);
    }
    int health = strcmp(url, "/healthz") == 0;
    if (!health && strcmp(url, "/metrics") != 0) {
        static const char nf[] = "not found: try /metrics or /healthz\n";
        return reply(c, MHD_HTTP_NOT_FOUND, nf, sizeof nf - 1, 1);
    }
    int healthy = 0;
    char *body = snapshot(m, health, &healthy);
    if (!body)
        return MHD_NO;
    unsigned int status = MHD_HTTP_OK;
    if (health && !healthy)
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
    return reply(c, status, body, strlen(body), 0);
}

/* A listening socket on host:port; -1 with err. */
static int listen_on(const char *host, const char *port, int *bound,
                     char *err, size_t errlen)
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
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "could not create metrics socket: %s",
                 strerror(errno));
        freeaddrinfo(ai);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        snprintf(err, errlen, "could not bind metrics tcp:%s:%s: %s", host,
                 port, strerror(errno));
        close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    *bound = a2__addr_bound_port(fd);
    return fd;
}

a2__metrics *a2__metrics_new(const char *host, const char *port,
                             a2__metrics_render render, void *ctx, char *err,
                             size_t errlen)
{
    a2__metrics *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->render = render;
    m->ctx = ctx;
    m->efd = -1;
    pthread_mutex_init(&m->mu, NULL);
    a2__mono_cond_init(&m->cv);
    int fd = listen_on(host, port, &m->port, err, errlen);
    if (fd < 0)
        goto fail;
    m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (m->efd < 0) {
        snprintf(err, errlen, "could not create an eventfd: %s",
                 strerror(errno));
        close(fd);
        goto fail;
    }
    a2__metrics_handle(m); /* a first snapshot, before any request */
    m->mhd = MHD_start_daemon(
            MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
            answer, m, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTION_LIMIT,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)PER_IP_LIMIT,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)CONNECTION_TIMEOUT,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
            MHD_OPTION_END);
    if (!m->mhd) {
        snprintf(err, errlen, "could not start the metrics endpoint on "
                              "tcp:%s:%s",
                 host, port);
        close(fd);
        goto fail;
    }
    return m;
fail:
    a2__metrics_free(m);
    return NULL;
}

void a2__metrics_free(a2__metrics *m)
{
    if (!m)
        return;
    if (m->mhd)
        MHD_stop_daemon(m->mhd); /* closes the listening socket too */
    if (m->efd >= 0)
        close(m->efd);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->text);
    free(m->health);
    free(m);
}

int a2__metrics_fd(const a2__metrics *m)
{
    return m ? m->efd : -1;
}

int a2__metrics_port(const a2__metrics *m)
{
    return m ? m->port : 0;
}

void a2__metrics_handle(a2__metrics *m)
{
    uint64_t n;
    if (!m || (read(m->efd, &n, sizeof n) < 0 && m->published > 0))
        return; /* nobody asked */
    int healthy = 0;
    char *text = NULL, *health = NULL;
    m->render(m->ctx, &text, &health, &healthy);
    pthread_mutex_lock(&m->mu);
    if (text) {
        free(m->text);
        m->text = text;
        text = NULL;
    }
    if (health) {
        free(m->health);
        m->health = health;
        health = NULL;
    }
    m->healthy = healthy;
    m->published++;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    free(text);
    free(health);
}
