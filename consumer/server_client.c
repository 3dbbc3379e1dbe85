/*
 * One worker connection of the server: its states (NEW, LIVE, CLOSING,
 * DENIED, DEAD; see server_int.h), reading and framing its input, handling
 * its messages and subscriptions within their limits, writing its queue to
 * the socket, protocol errors, and the hello, subscribe and linger timeouts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"
#include "server_int.h"

#define LINGER_MS        500 /* CLOSING: how long to wait for the peer's EOF */
#define MAX_SUBS         1024 /* subscriptions (consumers + namespaces) per worker */
#define OUT_CHUNK        (64 * 1024) /* bytes encoded ahead of the socket */
#define READS_PER_EVENT  4
#define WRITES_PER_EVENT 16

static void set_out(a2__server *srv, a2__server_worker *w, int on)
{
    struct epoll_event ev = {0};
    if (w->epout == on || w->state == A2C_WORKER_DEAD)
        return;
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
    ev.data.ptr = &w->h;
    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, w->h.fd, &ev) == 0)
        w->epout = on;
}

/* Frees the n strings of v and v. */
static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void a2__server_worker_free(a2__server_worker *w)
{
    if (!w)
        return;
    a2_wire_reader_free(w->rd);
    a2__queue_free(w->q);
    a2_wire_buf_free(&w->out);
    for (size_t i = 0; i < w->n_subs; i++) {
        free(w->subs[i].consumer);
        free_strs(w->subs[i].types, w->subs[i].n_types);
    }
    free(w->subs);
    free_strs(w->ns, w->n_ns);
    a2__map_free(w->routed, NULL);
    free(w->name);
    free(w);
}

const a2__server_sub *a2__server_find_sub(const a2__server_worker *w,
                                          const char *consumer)
{
    for (size_t i = 0; i < w->n_subs; i++)
        if (strcmp(w->subs[i].consumer, consumer) == 0)
            return &w->subs[i];
    return NULL;
}

/* A worker's log subscriptions. */
size_t a2__server_log_subs(const a2__server_worker *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n_subs; i++)
        n += w->subs[i].filter != A2_WIRE_LOG_NONE;
    return n;
}

static void dirty_add(a2__server *srv, a2__server_worker *w)
{
    if (w->dirty || w->state == A2C_WORKER_DEAD)
        return;
    w->dirty = 1;
    w->dprev = NULL;
    w->dnext = srv->dirty;
    if (srv->dirty)
        srv->dirty->dprev = w;
    srv->dirty = w;
}

void a2__server_dirty_remove(a2__server *srv, a2__server_worker *w)
{
    if (!w->dirty)
        return;
    if (w->dprev)
        w->dprev->dnext = w->dnext;
    else
        srv->dirty = w->dnext;
    if (w->dnext)
        w->dnext->dprev = w->dprev;
    w->dnext = w->dprev = NULL;
    w->dirty = 0;
}

int a2__server_queued(a2__server *srv, a2__server_worker *w, int rc)
{
    if (rc == A2C_QUEUE_OVERFLOW)
        srv->overflows++;
    if (rc >= 0 && !w->epout)
        dirty_add(srv, w);
    return rc;
}

/* Queues m for w; the frames go out at the next a2__server_flush (or run),
 * so a turn's wake-ups to one worker leave in one send. */
int a2__server_push(a2__server *srv, a2__server_worker *w, const a2_wire_msg *m)
{
    return a2__server_queued(srv, w, a2__queue_push(w->q, m));
}

void a2__server_push_resync_all(a2__server *srv, a2__server_worker *w,
                                const char *consumer)
{
    a2_wire_msg m = {
            .type = A2_WIRE_RESYNC, .consumer = consumer, .all_sessions = 1};
    (void)a2__server_push(srv, w, &m);
}

/* Closes the socket now; the memory goes at the end of the run. */
void a2__server_close_now(a2__server *srv, a2__server_worker *w)
{
    if (w->state == A2C_WORKER_DEAD)
        return;
    srv->gen++;
    if (w->state == A2C_WORKER_LIVE) {
        w->state = A2C_WORKER_DEAD;
        a2__server_depart(srv, w);
    }
    w->state = A2C_WORKER_DEAD;
    a2__server_dirty_remove(srv, w);
    epoll_ctl(srv->epfd, EPOLL_CTL_DEL, w->h.fd, NULL);
    close(w->h.fd);
    w->h.fd = -1;
    srv->connections--;
    if (w->prev)
        w->prev->next = w->next;
    else
        srv->workers = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = NULL;
    w->next = srv->dead;
    srv->dead = w;
}

/* Writes what is pending; 0, or -1 when the connection is broken. */
int a2__server_write(a2__server *srv, a2__server_worker *w)
{
    for (int i = 0; i < WRITES_PER_EVENT; i++) {
        ssize_t n;
        if (w->out.len == 0) {
            if (w->state == A2C_WORKER_CLOSING) {
                if (!w->shut_wr) {
                    shutdown(w->h.fd, SHUT_WR);
                    w->shut_wr = 1;
                }
                set_out(srv, w, 0);
                return 0;
            }
            if (a2__queue_overflowed(w->q)) {
                /* Drained after an overflow: claim whatever is pending. */
                a2__queue_clear_overflow(w->q);
                for (size_t k = 0; k < w->n_subs; k++)
                    a2__server_push_resync_all(srv, w, w->subs[k].consumer);
            }
            if (a2__queue_drain(w->q, &w->out, OUT_CHUNK, srv->sent) < 0)
                return -1;
            if (w->out.len == 0) {
                set_out(srv, w, 0);
                return 0;
            }
        }
        n = send(w->h.fd, w->out.data, w->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_out(srv, w, 1);
                return 0;
            }
            return -1;
        }
        a2_wire_buf_consume(&w->out, (size_t)n);
    }
    set_out(srv, w, 1);
    return 0;
}

/* Sends an `error` frame and closes the connection (after a short linger). */
void a2__server_proto_error(a2__server *srv, a2__server_worker *w,
                            const char *code, const char *message)
{
    if (w->state == A2C_WORKER_CLOSING || w->state == A2C_WORKER_DEAD)
        return;
    srv->gen++;
    if (strcmp(code, A2_WIRE_CODE_STANDBY) != 0)
        srv->protocol_errors++; /* a standby's refusal is no one's mistake */
    if (w->state == A2C_WORKER_LIVE) {
        w->state = A2C_WORKER_CLOSING;
        a2__server_depart(srv, w);
    }
    w->state = A2C_WORKER_CLOSING;
    a2__server_deadline_set(srv, w, a2__mono_ms() + LINGER_MS);
    a2__queue_clear(w->q);
    a2__queue_clear_overflow(w->q);
    if (a2_wire_encode_error(&w->out, code, message) == 0)
        srv->sent[A2_WIRE_ERROR]++;
    if (a2__server_write(srv, w) != 0)
        a2__server_close_now(srv, w);
}

static int add_sub(a2__server_worker *w, const a2_wire_msg *m)
{
    a2__server_sub *s = NULL;
    char **types = NULL;

    for (size_t i = 0; i < w->n_subs; i++)
        if (strcmp(w->subs[i].consumer, m->consumer) == 0)
            s = &w->subs[i];
    if (m->log_filter == A2_WIRE_LOG_TYPES && m->n_log_types) {
        types = calloc(m->n_log_types, sizeof *types);
        if (!types)
            return -1;
        for (size_t i = 0; i < m->n_log_types; i++)
            if (!(types[i] = a2__server_dupstr(m->log_types[i]))) {
                free_strs(types, i);
                return -1;
            }
    }
    if (!s) {
        a2__server_sub *v = realloc(w->subs, (w->n_subs + 1) * sizeof *v);
        char *c = a2__server_dupstr(m->consumer);
        if (v)
            w->subs = v;
        if (!v || !c) {
            free(c);
            free_strs(types, types ? m->n_log_types : 0);
            return -1;
        }
        s = &w->subs[w->n_subs++];
        memset(s, 0, sizeof *s);
        s->consumer = c;
    } else {
        free_strs(s->types, s->n_types);
    }
    s->filter = m->log_filter;
    s->types = types;
    s->n_types = types ? m->n_log_types : 0;
    /* sorted: a log event's type is looked up in them */
    if (s->n_types > 1)
        qsort(s->types, s->n_types, sizeof *s->types, a2__server_type_order);
    return 0;
}

static int add_ns(a2__server_worker *w, const char *ns)
{
    for (size_t i = 0; i < w->n_ns; i++)
        if (strcmp(w->ns[i], ns) == 0)
            return 0;
    char **v = realloc(w->ns, (w->n_ns + 1) * sizeof *v);
    if (!v)
        return -1;
    w->ns = v;
    if (!(w->ns[w->n_ns] = a2__server_dupstr(ns)))
        return -1;
    w->n_ns++;
    return 0;
}

static void on_message(a2__server *srv, a2__server_worker *w,
                       const a2_wire_msg *m)
{
    char why[160];

    if (w->state == A2C_WORKER_NEW) {
        a2__server_hello(srv, w, m);
        return;
    }
    switch (m->type) {
    case A2_WIRE_HELLO:
        a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                               "hello sent twice");
        return;
    case A2_WIRE_SUBSCRIBE: {
        const a2__server_sub *was = a2__server_find_sub(w, m->consumer);
        if (!was && w->n_subs + w->n_ns >= MAX_SUBS) {
            a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                                   "too many subscriptions");
            return;
        }
        if (m->log_filter == A2_WIRE_LOG_TYPES &&
            m->n_log_types > A2C_MAX_LOG_TYPES) {
            snprintf(why, sizeof why,
                     "a log subscription names at most %d types",
                     A2C_MAX_LOG_TYPES);
            a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
            return;
        }
        if (m->log_filter != A2_WIRE_LOG_NONE &&
            (!was || was->filter == A2_WIRE_LOG_NONE)) {
            if (a2__server_log_subs(w) >= A2C_MAX_LOG_SUBS) {
                snprintf(why, sizeof why,
                         "too many log subscriptions (at most %d per "
                         "connection)",
                         A2C_MAX_LOG_SUBS);
                a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
                return;
            }
            if (srv->log_subs >= A2C_MAX_LOG_SUBS_ALL) {
                snprintf(why, sizeof why,
                         "too many log subscriptions on this consumer (at "
                         "most %d)",
                         A2C_MAX_LOG_SUBS_ALL);
                a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
                return;
            }
        }
        int was_log = was && was->filter != A2_WIRE_LOG_NONE;
        srv->gen++;
        if (add_sub(w, m) != 0) {
            a2__server_close_now(srv, w);
            return;
        }
        srv->log_subs += (m->log_filter != A2_WIRE_LOG_NONE) - was_log;
        a2__server_push_resync_all(srv, w, m->consumer);
        return;
    }
    case A2_WIRE_PRESENCE_SUB:
        if (w->n_subs + w->n_ns >= MAX_SUBS) {
            a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                                   "too many subscriptions");
            return;
        }
        srv->gen++; /* the presence index */
        if (add_ns(w, m->ns) != 0)
            a2__server_close_now(srv, w);
        return;
    case A2_WIRE_PING: {
        a2_wire_msg pong = {.type = A2_WIRE_PONG, .id = m->id};
        (void)a2__server_push(srv, w, &pong);
        return;
    }
    default:
        a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                               "unexpected message");
        return;
    }
}

void a2__server_read(a2__server *srv, a2__server_worker *w)
{
    char *buf = srv->rbuf;

    for (int i = 0; i < READS_PER_EVENT && w->state != A2C_WORKER_DEAD; i++) {
        ssize_t n = recv(w->h.fd, buf, A2C_SERVER_READ_CHUNK, MSG_DONTWAIT);
        if (n == 0) {
            a2__server_close_now(srv, w);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            a2__server_close_now(srv, w);
            return;
        }
        if (w->state == A2C_WORKER_CLOSING || w->state == A2C_WORKER_DENIED)
            continue; /* discard until EOF, or the answer */
        int rc = a2_wire_reader_feed(w->rd, buf, (size_t)n);
        while (rc == 0 &&
               (w->state == A2C_WORKER_NEW || w->state == A2C_WORKER_LIVE)) {
            a2_wire_msg m;
            rc = a2_wire_reader_next(w->rd, &m);
            if (rc == 1) {
                on_message(srv, w, &m);
                rc = 0;
                continue;
            }
            if (rc == 0)
                break;
        }
        if (rc < 0 &&
            (w->state == A2C_WORKER_NEW || w->state == A2C_WORKER_LIVE)) {
            const char *code = rc == A2_WIRE_ETOOBIG    ? A2_WIRE_CODE_TOO_BIG
                               : rc == A2_WIRE_EVERSION ? A2_WIRE_CODE_VERSION
                                                        : A2_WIRE_CODE_PROTOCOL;
            if (rc == A2_WIRE_ENOMEM) {
                a2__server_close_now(srv, w);
                return;
            }
            a2__server_proto_error(srv, w, code, a2_wire_reader_error(w->rd));
        }
        if ((size_t)n < A2C_SERVER_READ_CHUNK)
            return;
    }
}

/* Arms the timer for next (0: disarms it). */
static void arm(a2__server *srv, int64_t next, int64_t now)
{
    struct itimerspec its = {0};
    srv->armed_ms = next;
    if (next) {
        int64_t d = next - now;
        if (d < 1)
            d = 1;
        its.it_value.tv_sec = d / 1000;
        its.it_value.tv_nsec = (d % 1000) * 1000000;
    }
    timerfd_settime(srv->timer.fd, 0, &its, NULL);
}

void a2__server_deadline_set(a2__server *srv, a2__server_worker *w,
                             int64_t at)
{
    w->deadline_ms = at;
    if (srv->armed_ms == 0 || at < srv->armed_ms)
        arm(srv, at, a2__mono_ms());
}

/* A deadline that is not yet armed is always later than the armed one
 * (a2__server_deadline_set arms an earlier one at once), so the
 * connections are looked through only when the timer has fired: an event
 * on a socket costs no walk of them all. */
void a2__server_deadlines(a2__server *srv)
{
    int64_t now = a2__mono_ms(), next = 0;
    if (!srv->deadline_due && !(srv->armed_ms && now >= srv->armed_ms))
        return;
    srv->deadline_due = 0;
    a2__server_worker *w = srv->workers;

    while (w) {
        a2__server_worker *n = w->next;
        if (w->state == A2C_WORKER_NEW && now >= w->deadline_ms) {
            char why[96];
            snprintf(why, sizeof why, "no hello within %d ms",
                     srv->hello_timeout_ms);
            a2__server_proto_error(srv, w, A2_WIRE_CODE_TIMEOUT, why);
        } else if (w->state == A2C_WORKER_LIVE && w->n_subs + w->n_ns == 0 &&
                   now >= w->deadline_ms) {
            char why[96];
            snprintf(why, sizeof why, "no subscription within %d ms",
                     srv->subscribe_timeout_ms);
            a2__server_proto_error(srv, w, A2_WIRE_CODE_TIMEOUT, why);
        } else if (w->state == A2C_WORKER_DENIED && now >= w->deadline_ms) {
            a2__server_auth_log_roll(srv, now);
            a2__server_proto_error(srv, w, A2_WIRE_CODE_AUTH, w->denied);
        } else if (w->state == A2C_WORKER_CLOSING && now >= w->deadline_ms) {
            a2__server_close_now(srv, w);
        }
        w = n;
    }
    for (w = srv->workers; w; w = w->next)
        if ((w->state == A2C_WORKER_NEW || w->state == A2C_WORKER_CLOSING ||
             w->state == A2C_WORKER_DENIED ||
             (w->state == A2C_WORKER_LIVE && w->n_subs + w->n_ns == 0)) &&
            (next == 0 || w->deadline_ms < next))
            next = w->deadline_ms;
    arm(srv, next, now);
}
