/*
 * The worker server of a2-consumer (see server.h): epoll, non-blocking
 * sockets, wire protocol v1, rendezvous routing, bounded queues.
 *
 * A connection goes NEW (until its hello) -> LIVE -> CLOSING (an error frame
 * was queued: flush it, shut down writing, discard input until EOF or a short
 * linger so the peer reads the error instead of a reset) -> DEAD (freed at
 * the end of a2__server_run, so an event already fetched for it is skipped).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

#include "../common/clock.h"
#include "a2/wire.h"
#include "metrics.h"
#include "queue.h"
#include "route.h"
#include "server.h"

#define DEFAULT_QUEUE_LIMIT      10000
#define DEFAULT_HELLO_TIMEOUT_MS 5000
#define DEFAULT_SUBSCRIBE_TIMEOUT_MS 10000
#define DEFAULT_AUTH_DELAY_MS    1000
#define DEFAULT_AUTH_SPACING_MS  100
#define AUTH_LOGS_PER_SECOND     5 /* then counted, and said once a second */
#define LINGER_MS                500 /* CLOSING: how long to wait for the peer's EOF */
#define ROUTED_MAX               4096 /* sessions remembered per worker for moves */
#define MAX_SUBS                 1024 /* subscriptions (consumers + namespaces) per worker */
#define OUT_CHUNK                (64 * 1024) /* bytes encoded ahead of the socket */
#define READ_CHUNK               (64 * 1024)
#define READS_PER_EVENT          4
#define WRITES_PER_EVENT         16
#define MAX_EVENTS               64
#define MAX_ROUNDS               16
#define ACCEPTS_PER_EVENT        64

enum { H_UNIX = 1, H_TCP, H_TIMER, H_WORKER };
/* DENIED: a hello failed authentication; answered at deadline_ms. */
enum { W_NEW = 0, W_LIVE, W_CLOSING, W_DEAD, W_DENIED };

typedef struct {
    int kind;
    int fd;
} handle;

typedef struct {
    char *consumer;
    a2_wire_log_filter filter;
    char **types;
    size_t n_types;
} sub;

/* A log consumer's live subscriptions, in the log index. */
typedef struct log_group {
    const char *consumer; /* borrowed from one of its subs */
    struct worker **w;
    const sub **s;
    size_t n, cap;
    uint64_t stamp; /* the last a2__server_log that routed it */
} log_group;

/* Log groups, with repeats (skipped by stamp when routing). */
typedef struct {
    log_group **g;
    size_t n, cap;
} log_list;

typedef struct worker {
    handle h; /* first: epoll data points here */
    struct worker *next;
    struct worker *prev;
    int state;
    int tcp;
    uint64_t serial;
    uint64_t id;
    char *name;
    int64_t deadline_ms; /* NEW: hello deadline; LIVE without a subscription:
                            subscribe deadline; DENIED: when to answer;
                            CLOSING: linger end */
    const char *denied;  /* DENIED: why (a static string) */
    char peer[64];       /* "tcp 127.0.0.1:5432", "unix" */
    a2_wire_reader *rd;
    a2__queue *q;
    a2_wire_buf out;
    int epout;
    int shut_wr;
    struct worker *dnext; /* on the server's dirty list: frames to send */
    struct worker *dprev;
    int dirty;
    sub *subs;
    size_t n_subs;
    char **ns;
    size_t n_ns;
    a2__map *routed; /* consumer\0session -> marker */
    int routed_unknown;
} worker;

struct a2__server {
    int epfd;
    char *standby; /* set: a standby, answering every hello with this */
    uint64_t standby_refusals;
    handle lunix;
    handle ltcp;
    handle timer;
    char *unix_path;
    int tcp_port;
    char *token;
    a2__route route;
    size_t queue_limit;
    int hello_timeout_ms;
    int subscribe_timeout_ms;
    size_t max_connections;
    size_t connections; /* open worker connections */
    uint64_t refused;
    int reserve_fd; /* kept free for refusing a connection when none is */
    void (*log)(void *arg, const char *line);
    void *log_arg;
    int auth_delay_ms;
    int auth_spacing_ms;
    int64_t auth_next_ms;   /* the earliest the next denial is answered */
    uint64_t auth_failures;
    int64_t auth_window_ms; /* the second the log lines below count in */
    int auth_logged;
    uint64_t auth_unlogged;
    uint64_t lsn;
    uint64_t serial;
    worker *workers;
    worker *dead;
    worker *dirty;    /* pushed to since the last flush */
    int64_t armed_ms; /* the deadline the timer is armed for (0: none) */
    uint64_t live;
    uint64_t overflows;
    uint64_t protocol_errors;
    uint64_t sent[32]; /* frames written to sockets' buffers, by a2_wire_type */
    a2__hist wake_latency; /* commit -> wake frame moved to a socket */
    /* scratch for routing */
    a2__route_cand *cands;
    worker **cw;
    size_t ncap;
    /* The scratch holds the candidates of (cand_consumer, cand_type) as of
     * generation cand_gen; gen moves whenever a worker becomes live, leaves
     * or changes its subscriptions, so a run of wake-ups for one consumer
     * scans the workers once, not once per wake-up. */
    uint64_t gen;
    uint64_t cand_gen;
    char *cand_consumer;
    char *cand_type;
    size_t cand_n;
    /* The log index, as of generation log_gen: consumer -> log_group, type
     * -> log_list of the groups with a subscription naming the type, and
     * the groups with one following every type. */
    a2__map *log_groups;
    a2__map *log_types;
    log_list log_all;
    uint64_t log_gen;
    int log_built;
    uint64_t log_stamp;
    uint64_t log_checks;
    int closing; /* a2__server_free: no moves */
    char rbuf[READ_CHUNK];
};

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

static void log_index_free(a2__server *srv);
static void deadlines(a2__server *srv);

__attribute__((format(printf, 2, 3))) static void slog(a2__server *srv,
                                                       const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (!srv->log)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    srv->log(srv->log_arg, line);
}

/* A peer-chosen string for a log line: printable ASCII kept, the rest '?',
 * at most len - 1 bytes. */
static const char *printable(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; s && *s && n + 1 < len; s++)
        buf[n++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
    buf[n] = '\0';
    return buf;
}

/* ---- worker lifecycle ---- */

static void set_out(a2__server *srv, worker *w, int on)
{
    struct epoll_event ev = {0};
    if (w->epout == on || w->state == W_DEAD)
        return;
    ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
    ev.data.ptr = &w->h;
    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, w->h.fd, &ev) == 0)
        w->epout = on;
}

static void free_worker(worker *w)
{
    if (!w)
        return;
    a2_wire_reader_free(w->rd);
    a2__queue_free(w->q);
    a2_wire_buf_free(&w->out);
    for (size_t i = 0; i < w->n_subs; i++) {
        free(w->subs[i].consumer);
        for (size_t j = 0; j < w->subs[i].n_types; j++)
            free(w->subs[i].types[j]);
        free(w->subs[i].types);
    }
    free(w->subs);
    for (size_t i = 0; i < w->n_ns; i++)
        free(w->ns[i]);
    free(w->ns);
    a2__map_free(w->routed, NULL);
    free(w->name);
    free(w);
}

static const sub *find_sub(const worker *w, const char *consumer)
{
    for (size_t i = 0; i < w->n_subs; i++)
        if (strcmp(w->subs[i].consumer, consumer) == 0)
            return &w->subs[i];
    return NULL;
}

/* A worker's log subscriptions. */
static size_t log_subs_of(const worker *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n_subs; i++)
        n += w->subs[i].filter != A2_WIRE_LOG_NONE;
    return n;
}

static void dirty_add(a2__server *srv, worker *w)
{
    if (w->dirty || w->state == W_DEAD)
        return;
    w->dirty = 1;
    w->dprev = NULL;
    w->dnext = srv->dirty;
    if (srv->dirty)
        srv->dirty->dprev = w;
    srv->dirty = w;
}

static void dirty_remove(a2__server *srv, worker *w)
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

/* Queues m for w; the frames go out at the next a2__server_flush (or run),
 * so a turn's wake-ups to one worker leave in one send. */
static int push(a2__server *srv, worker *w, const a2_wire_msg *m)
{
    int rc = a2__queue_push(w->q, m);
    if (rc == A2C_QUEUE_OVERFLOW)
        srv->overflows++;
    if (rc >= 0 && !w->epout)
        dirty_add(srv, w);
    return rc;
}

static void push_resync_all(a2__server *srv, worker *w, const char *consumer)
{
    a2_wire_msg m = {
            .type = A2_WIRE_RESYNC, .consumer = consumer, .all_sessions = 1};
    (void)push(srv, w, &m);
}

/* Remembers that session of consumer was routed to w. */
static void note_routed(worker *w, const char *consumer, const char *session)
{
    char key[2 * (A2_WIRE_MAX_STRING + 1)];
    size_t lc = strlen(consumer), ls = strlen(session);

    if (w->routed_unknown)
        return;
    if (lc > A2_WIRE_MAX_STRING || ls > A2_WIRE_MAX_STRING) {
        w->routed_unknown = 1;
        return;
    }
    memcpy(key, consumer, lc + 1);
    memcpy(key + lc + 1, session, ls);
    if (a2__map_get(w->routed, key, lc + 1 + ls))
        return;
    if (a2__map_count(w->routed) >= ROUTED_MAX ||
        a2__map_put(w->routed, key, lc + 1 + ls, w, NULL) != 0) {
        /* Forget the list: a departure then resyncs every session. */
        w->routed_unknown = 1;
        a2__map_free(w->routed, NULL);
        w->routed = NULL;
    }
}

static int grow_scratch(a2__server *srv, size_t n)
{
    if (n <= srv->ncap)
        return 0;
    size_t cap = srv->ncap ? srv->ncap * 2 : 16;
    while (cap < n)
        cap *= 2;
    a2__route_cand *c = realloc(srv->cands, cap * sizeof *c);
    if (!c)
        return -1;
    srv->cands = c;
    worker **cw = realloc(srv->cw, cap * sizeof *cw);
    if (!cw)
        return -1;
    srv->cw = cw;
    srv->ncap = cap;
    return 0;
}

static int log_match(const sub *s, const char *type)
{
    if (s->filter == A2_WIRE_LOG_ALL)
        return 1;
    if (s->filter != A2_WIRE_LOG_TYPES)
        return 0;
    for (size_t i = 0; i < s->n_types; i++)
        if (strcmp(s->types[i], type) == 0)
            return 1;
    return 0;
}

/* Live subscribers of consumer (those following type when type != NULL)
 * into srv->cands / srv->cw; returns how many (0 when out of memory). */
static char *dupstr(const char *s);

static size_t candidates(a2__server *srv, const char *consumer,
                         const char *type)
{
    size_t n = 0;
    if (srv->cand_consumer && srv->cand_gen == srv->gen &&
        strcmp(srv->cand_consumer, consumer) == 0 &&
        (type ? srv->cand_type && strcmp(srv->cand_type, type) == 0
              : !srv->cand_type))
        return srv->cand_n;
    free(srv->cand_consumer);
    free(srv->cand_type);
    srv->cand_consumer = NULL;
    srv->cand_type = NULL;
    for (worker *w = srv->workers; w; w = w->next) {
        const sub *s;
        if (w->state != W_LIVE || !(s = find_sub(w, consumer)))
            continue;
        if (type && !log_match(s, type))
            continue;
        if (grow_scratch(srv, n + 1) != 0)
            return n;
        srv->cands[n].id = w->id;
        srv->cands[n].serial = w->serial;
        srv->cw[n] = w;
        n++;
    }
    /* Remembered only when complete (no allocation failed). */
    srv->cand_consumer = dupstr(consumer);
    srv->cand_type = type ? dupstr(type) : NULL;
    if (!srv->cand_consumer || (type && !srv->cand_type)) {
        free(srv->cand_consumer);
        free(srv->cand_type);
        srv->cand_consumer = NULL;
        srv->cand_type = NULL;
    }
    srv->cand_gen = srv->gen;
    srv->cand_n = n;
    return n;
}

/*
 * w stops serving (it was LIVE): move the sessions it was routed to the
 * remaining subscribers of each of its consumers with a targeted resync.
 */
static void depart(a2__server *srv, worker *w)
{
    srv->live--;
    if (srv->route != A2C_ROUTE_AFFINITY || srv->closing)
        return;
    for (size_t i = 0; i < w->n_subs; i++) {
        const char *consumer = w->subs[i].consumer;
        size_t lc = strlen(consumer);
        size_t n = candidates(srv, consumer, NULL);
        const char ***lists;
        size_t *counts;
        size_t it = 0;
        void *e = NULL, *val;
        const char *key;
        size_t klen;

        if (n == 0)
            continue;
        if (w->routed_unknown) {
            for (size_t k = 0; k < n; k++)
                push_resync_all(srv, srv->cw[k], consumer);
            continue;
        }
        lists = calloc(n, sizeof *lists);
        counts = calloc(n, sizeof *counts);
        if (!lists || !counts) {
            for (size_t k = 0; k < n; k++)
                push_resync_all(srv, srv->cw[k], consumer);
            free(lists);
            free(counts);
            continue;
        }
        /* Route each of its sessions of this consumer among the rest. */
        size_t total = a2__map_count(w->routed);
        int nomem = 0;
        while (a2__map_next(w->routed, &it, &e, &key, &klen, &val)) {
            if (klen <= lc || memcmp(key, consumer, lc + 1) != 0)
                continue;
            const char *session = key + lc + 1;
            size_t k = a2__route_pick(srv->cands, n, session);
            if (!lists[k]) {
                lists[k] = malloc((total + 1) * sizeof **lists);
                if (!lists[k]) {
                    nomem = 1;
                    break;
                }
            }
            lists[k][counts[k]++] = session;
        }
        for (size_t k = 0; k < n; k++) {
            a2_wire_msg m = {.type = A2_WIRE_RESYNC, .consumer = consumer};
            if (nomem) {
                push_resync_all(srv, srv->cw[k], consumer);
                continue;
            }
            if (counts[k] == 0)
                continue;
            m.sessions = lists[k];
            m.n_sessions = counts[k];
            if (push(srv, srv->cw[k], &m) == A2C_QUEUE_EINVAL)
                push_resync_all(srv, srv->cw[k], consumer); /* too big */
            for (size_t j = 0; j < counts[k]; j++)
                note_routed(srv->cw[k], consumer, lists[k][j]);
        }
        for (size_t k = 0; k < n; k++)
            free(lists[k]);
        free(lists);
        free(counts);
    }
}

/* Closes the socket now; the memory goes at the end of the run. */
static void close_now(a2__server *srv, worker *w)
{
    if (w->state == W_DEAD)
        return;
    srv->gen++;
    if (w->state == W_LIVE) {
        w->state = W_DEAD;
        depart(srv, w);
    }
    w->state = W_DEAD;
    dirty_remove(srv, w);
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
static int flush(a2__server *srv, worker *w)
{
    for (int i = 0; i < WRITES_PER_EVENT; i++) {
        ssize_t n;
        if (w->out.len == 0) {
            if (w->state == W_CLOSING) {
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
                    push_resync_all(srv, w, w->subs[k].consumer);
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
static void proto_error(a2__server *srv, worker *w, const char *code,
                        const char *message)
{
    if (w->state == W_CLOSING || w->state == W_DEAD)
        return;
    srv->gen++;
    if (strcmp(code, A2_WIRE_CODE_STANDBY) != 0)
        srv->protocol_errors++; /* a standby's refusal is no one's mistake */
    if (w->state == W_LIVE) {
        w->state = W_CLOSING;
        depart(srv, w);
    }
    w->state = W_CLOSING;
    w->deadline_ms = a2__mono_ms() + LINGER_MS;
    a2__queue_clear(w->q);
    a2__queue_clear_overflow(w->q);
    if (a2_wire_encode_error(&w->out, code, message) == 0)
        srv->sent[A2_WIRE_ERROR]++;
    if (flush(srv, w) != 0)
        close_now(srv, w);
}

static int token_eq(const char *given, const char *want)
{
    size_t lg = strlen(given), lw = strlen(want);
    unsigned char d = lg != lw;
    for (size_t i = 0; i < lw; i++)
        d |= (unsigned char)((i < lg ? given[i] : 0) ^ want[i]);
    return d == 0;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static int add_sub(worker *w, const a2_wire_msg *m)
{
    sub *s = NULL;
    char **types = NULL;

    for (size_t i = 0; i < w->n_subs; i++)
        if (strcmp(w->subs[i].consumer, m->consumer) == 0)
            s = &w->subs[i];
    if (m->log_filter == A2_WIRE_LOG_TYPES && m->n_log_types) {
        types = calloc(m->n_log_types, sizeof *types);
        if (!types)
            return -1;
        for (size_t i = 0; i < m->n_log_types; i++)
            if (!(types[i] = dupstr(m->log_types[i]))) {
                for (size_t j = 0; j < i; j++)
                    free(types[j]);
                free(types);
                return -1;
            }
    }
    if (!s) {
        sub *v = realloc(w->subs, (w->n_subs + 1) * sizeof *v);
        char *c = dupstr(m->consumer);
        if (v)
            w->subs = v;
        if (!v || !c) {
            free(c);
            for (size_t j = 0; types && j < m->n_log_types; j++)
                free(types[j]);
            free(types);
            return -1;
        }
        s = &w->subs[w->n_subs++];
        memset(s, 0, sizeof *s);
        s->consumer = c;
    } else {
        for (size_t j = 0; j < s->n_types; j++)
            free(s->types[j]);
        free(s->types);
    }
    s->filter = m->log_filter;
    s->types = types;
    s->n_types = types ? m->n_log_types : 0;
    return 0;
}

static int add_ns(worker *w, const char *ns)
{
    for (size_t i = 0; i < w->n_ns; i++)
        if (strcmp(w->ns[i], ns) == 0)
            return 0;
    char **v = realloc(w->ns, (w->n_ns + 1) * sizeof *v);
    if (!v)
        return -1;
    w->ns = v;
    if (!(w->ns[w->n_ns] = dupstr(ns)))
        return -1;
    w->n_ns++;
    return 0;
}

/* Starts a new second of authentication log lines when the last is over,
 * saying how many went unlogged in it. */
static void auth_log_roll(a2__server *srv, int64_t now)
{
    if (now - srv->auth_window_ms < 1000)
        return;
    if (srv->auth_unlogged)
        slog(srv, "%" PRIu64 " more failed authentications not logged",
             srv->auth_unlogged);
    srv->auth_window_ms = now;
    srv->auth_logged = 0;
    srv->auth_unlogged = 0;
}

/*
 * A hello that failed authentication: logged with the peer (at most
 * AUTH_LOGS_PER_SECOND lines a second, the rest counted), and answered only
 * after auth_delay_ms, one denial per auth_spacing_ms at most, so guesses
 * come back slowly however many connections ask at once.
 */
static void deny(a2__server *srv, worker *w, const char *name,
                 const char *why)
{
    int64_t now = a2__mono_ms();
    char nb[64];
    srv->auth_failures++;
    auth_log_roll(srv, now);
    if (srv->auth_logged < AUTH_LOGS_PER_SECOND) {
        srv->auth_logged++;
        slog(srv, "worker \"%s\" from %s failed authentication: %s",
             printable(name, nb, sizeof nb), w->peer, why);
    } else {
        srv->auth_unlogged++;
    }
    int64_t at = now + srv->auth_delay_ms;
    if (at < srv->auth_next_ms)
        at = srv->auth_next_ms;
    srv->auth_next_ms = at + srv->auth_spacing_ms;
    w->state = W_DENIED;
    w->denied = why;
    w->deadline_ms = at;
    deadlines(srv);
}

static void on_message(a2__server *srv, worker *w, const a2_wire_msg *m)
{
    char why[160];

    if (w->state == W_NEW) {
        if (m->type != A2_WIRE_HELLO) {
            snprintf(why, sizeof why, "first frame must be hello, got %s",
                     a2_wire_type_name(m->type));
            proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
            return;
        }
        if (w->tcp && (!m->token || !token_eq(m->token, srv->token))) {
            deny(srv, w, m->name,
                 m->token ? "wrong token" : "token required over TCP");
            return;
        }
        if (srv->standby) {
            srv->standby_refusals++;
            proto_error(srv, w, A2_WIRE_CODE_STANDBY, srv->standby);
            return;
        }
        if (!(w->name = dupstr(m->name))) {
            close_now(srv, w);
            return;
        }
        w->id = a2__route_worker_id(w->name);
        w->state = W_LIVE;
        w->deadline_ms = a2__mono_ms() + srv->subscribe_timeout_ms;
        deadlines(srv);
        srv->gen++;
        srv->live++;
        a2_wire_msg wel = {.type = A2_WIRE_WELCOME, .lsn = srv->lsn};
        (void)push(srv, w, &wel);
        return;
    }
    switch (m->type) {
    case A2_WIRE_HELLO:
        proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, "hello sent twice");
        return;
    case A2_WIRE_SUBSCRIBE: {
        const sub *was = find_sub(w, m->consumer);
        if (!was && w->n_subs + w->n_ns >= MAX_SUBS) {
            proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                        "too many subscriptions");
            return;
        }
        if (m->log_filter == A2_WIRE_LOG_TYPES &&
            m->n_log_types > A2C_MAX_LOG_TYPES) {
            snprintf(why, sizeof why,
                     "a log subscription names at most %d types",
                     A2C_MAX_LOG_TYPES);
            proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
            return;
        }
        if (m->log_filter != A2_WIRE_LOG_NONE &&
            (!was || was->filter == A2_WIRE_LOG_NONE)) {
            if (log_subs_of(w) >= A2C_MAX_LOG_SUBS) {
                snprintf(why, sizeof why,
                         "too many log subscriptions (at most %d per "
                         "connection)",
                         A2C_MAX_LOG_SUBS);
                proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
                return;
            }
            size_t all = 0;
            for (const worker *o = srv->workers; o; o = o->next)
                if (o->state == W_LIVE)
                    all += log_subs_of(o);
            if (all >= A2C_MAX_LOG_SUBS_ALL) {
                snprintf(why, sizeof why,
                         "too many log subscriptions on this consumer (at "
                         "most %d)",
                         A2C_MAX_LOG_SUBS_ALL);
                proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
                return;
            }
        }
        srv->gen++;
        if (add_sub(w, m) != 0) {
            close_now(srv, w);
            return;
        }
        push_resync_all(srv, w, m->consumer);
        return;
    }
    case A2_WIRE_PRESENCE_SUB:
        if (w->n_subs + w->n_ns >= MAX_SUBS) {
            proto_error(srv, w, A2_WIRE_CODE_PROTOCOL,
                        "too many subscriptions");
            return;
        }
        if (add_ns(w, m->ns) != 0)
            close_now(srv, w);
        return;
    case A2_WIRE_PING: {
        a2_wire_msg pong = {.type = A2_WIRE_PONG, .id = m->id};
        (void)push(srv, w, &pong);
        return;
    }
    default:
        proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, "unexpected message");
        return;
    }
}

static void on_readable(a2__server *srv, worker *w)
{
    char *buf = srv->rbuf;

    for (int i = 0; i < READS_PER_EVENT && w->state != W_DEAD; i++) {
        ssize_t n = recv(w->h.fd, buf, READ_CHUNK, MSG_DONTWAIT);
        if (n == 0) {
            close_now(srv, w);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            close_now(srv, w);
            return;
        }
        if (w->state == W_CLOSING || w->state == W_DENIED)
            continue; /* discard until EOF, or the answer */
        int rc = a2_wire_reader_feed(w->rd, buf, (size_t)n);
        while (rc == 0 && (w->state == W_NEW || w->state == W_LIVE)) {
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
        if (rc < 0 && (w->state == W_NEW || w->state == W_LIVE)) {
            const char *code = rc == A2_WIRE_ETOOBIG    ? A2_WIRE_CODE_TOO_BIG
                               : rc == A2_WIRE_EVERSION ? A2_WIRE_CODE_VERSION
                                                        : A2_WIRE_CODE_PROTOCOL;
            if (rc == A2_WIRE_ENOMEM) {
                close_now(srv, w);
                return;
            }
            proto_error(srv, w, code, a2_wire_reader_error(w->rd));
        }
        if ((size_t)n < READ_CHUNK)
            return;
    }
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

static void on_accept(a2__server *srv, handle *l)
{
    for (int i = 0; i < ACCEPTS_PER_EVENT; i++) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(l->fd, (struct sockaddr *)&sa, &salen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        worker *w;
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
        w->deadline_ms = a2__mono_ms() + srv->hello_timeout_ms;
        srv->connections++;
        w->rd = a2_wire_reader_new(A2_WIRE_FROM_WORKER);
        w->q = a2__queue_new(srv->queue_limit);
        a2__queue_set_latency(w->q, &srv->wake_latency);
        w->routed = a2__map_new();
        ev.events = EPOLLIN;
        ev.data.ptr = &w->h;
        if (!w->rd || !w->q || !w->routed ||
            epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free_worker(w);
            continue;
        }
        w->next = srv->workers;
        if (srv->workers)
            srv->workers->prev = w;
        srv->workers = w;
    }
}

/* Hello timeouts and ended lingers; then arms the timer for the next one. */
static void deadlines(a2__server *srv)
{
    int64_t now = a2__mono_ms(), next = 0;
    worker *w = srv->workers;
    struct itimerspec its = {0};

    while (w) {
        worker *n = w->next;
        if (w->state == W_NEW && now >= w->deadline_ms) {
            char why[96];
            snprintf(why, sizeof why, "no hello within %d ms",
                     srv->hello_timeout_ms);
            proto_error(srv, w, A2_WIRE_CODE_TIMEOUT, why);
        } else if (w->state == W_LIVE && w->n_subs + w->n_ns == 0 &&
                   now >= w->deadline_ms) {
            char why[96];
            snprintf(why, sizeof why, "no subscription within %d ms",
                     srv->subscribe_timeout_ms);
            proto_error(srv, w, A2_WIRE_CODE_TIMEOUT, why);
        } else if (w->state == W_DENIED && now >= w->deadline_ms) {
            auth_log_roll(srv, now);
            proto_error(srv, w, A2_WIRE_CODE_AUTH, w->denied);
        } else if (w->state == W_CLOSING && now >= w->deadline_ms) {
            close_now(srv, w);
        }
        w = n;
    }
    for (w = srv->workers; w; w = w->next)
        if ((w->state == W_NEW || w->state == W_CLOSING ||
             w->state == W_DENIED ||
             (w->state == W_LIVE && w->n_subs + w->n_ns == 0)) &&
            (next == 0 || w->deadline_ms < next))
            next = w->deadline_ms;
    if (next == srv->armed_ms)
        return; /* armed already (or nothing to arm, again) */
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

static void reap(a2__server *srv)
{
    while (srv->dead) {
        worker *w = srv->dead;
        srv->dead = w->next;
        free_worker(w);
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
            handle *h = ev[i].data.ptr;
            if (h->kind == H_UNIX || h->kind == H_TCP) {
                on_accept(srv, h);
            } else if (h->kind == H_TIMER) {
                uint64_t ticks;
                if (read(h->fd, &ticks, sizeof ticks) < 0) {
                    /* EAGAIN: already consumed */
                }
                srv->armed_ms = 0; /* one-shot: it fired */
            } else {
                worker *w = (worker *)h;
                if (w->state == W_DEAD)
                    continue;
                if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(srv, w);
                if (w->state != W_DEAD && (ev[i].events & EPOLLOUT) &&
                    flush(srv, w) != 0)
                    close_now(srv, w);
            }
        }
        reap(srv);
        if (n < MAX_EVENTS)
            break;
    }
    deadlines(srv);
    a2__server_flush(srv);
    reap(srv);
    return rc;
}

void a2__server_flush(a2__server *srv)
{
    if (!srv)
        return;
    while (srv->dirty) {
        worker *w = srv->dirty;
        dirty_remove(srv, w);
        if (w->state != W_DEAD && flush(srv, w) != 0)
            close_now(srv, w);
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
    srv->unix_path = dupstr(path);
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
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET)
                srv->tcp_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            else if (ss.ss_family == AF_INET6)
                srv->tcp_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    return 0;
}

static int watch(a2__server *srv, handle *h, char *err, size_t errlen)
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
    srv->lunix = (handle){H_UNIX, -1};
    srv->ltcp = (handle){H_TCP, -1};
    srv->timer = (handle){H_TIMER, -1};
    srv->reserve_fd = -1;
    srv->route = opts->route;
    srv->queue_limit =
            opts->queue_limit ? opts->queue_limit : DEFAULT_QUEUE_LIMIT;
    srv->hello_timeout_ms = opts->hello_timeout_ms > 0
                                    ? opts->hello_timeout_ms
                                    : DEFAULT_HELLO_TIMEOUT_MS;
    srv->subscribe_timeout_ms = opts->subscribe_timeout_ms > 0
                                        ? opts->subscribe_timeout_ms
                                        : DEFAULT_SUBSCRIBE_TIMEOUT_MS;
    srv->max_connections = opts->max_connections
                                   ? opts->max_connections
                                   : A2C_DEFAULT_MAX_CONNECTIONS;
    srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    srv->log = opts->log;
    srv->log_arg = opts->log_arg;
    srv->auth_delay_ms = opts->auth_delay_ms > 0 ? opts->auth_delay_ms
                                                 : DEFAULT_AUTH_DELAY_MS;
    srv->auth_spacing_ms = opts->auth_spacing_ms > 0
                                   ? opts->auth_spacing_ms
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
    if (opts->token && !(srv->token = dupstr(opts->token))) {
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
    if (message && !(copy = dupstr(message)))
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
        close_now(srv, srv->workers);
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
    free(srv->cands);
    free(srv->cw);
    free(srv->cand_consumer);
    free(srv->cand_type);
    log_index_free(srv);
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

/* ---- what the daemon sends ---- */

/* Queues the wake m of the commit made at commit_us for w. */
static void push_wake(a2__server *srv, worker *w, const a2_wire_msg *m,
                      int64_t commit_us)
{
    int rc = a2__queue_push_wake_at(w->q, m->consumer, m->session, m->cursor,
                                    m->head, m->lsn, m->xid, commit_us);
    if (rc == A2C_QUEUE_OVERFLOW)
        srv->overflows++;
    if (rc >= 0 && !w->epout)
        dirty_add(srv, w);
}

/* A wake to one candidate by rendezvous (remembering the session), or to
 * all. */
static void route_wake(a2__server *srv, const a2_wire_msg *m, int64_t commit_us)
{
    size_t n = candidates(srv, m->consumer, NULL);
    if (n == 0)
        return;
    if (srv->route == A2C_ROUTE_BROADCAST) {
        for (size_t k = 0; k < n; k++)
            push_wake(srv, srv->cw[k], m, commit_us);
        return;
    }
    size_t k = a2__route_pick(srv->cands, n, m->session);
    note_routed(srv->cw[k], m->consumer, m->session);
    push_wake(srv, srv->cw[k], m, commit_us);
}

void a2__server_wake(a2__server *srv, const char *consumer, const char *session,
                     const char *cursor_key, int64_t head, uint64_t lsn,
                     uint64_t xid)
{
    a2__server_wake_at(srv, consumer, session, cursor_key, head, lsn, xid, 0);
}

void a2__server_wake_at(a2__server *srv, const char *consumer,
                        const char *session, const char *cursor_key,
                        int64_t head, uint64_t lsn, uint64_t xid,
                        int64_t commit_us)
{
    a2_wire_msg m = {.type = A2_WIRE_WAKE,
                     .consumer = consumer,
                     .session = session,
                     .cursor = cursor_key,
                     .head = head,
                     .lsn = lsn,
                     .xid = xid};
    if (!srv || !consumer || !session || !cursor_key)
        return;
    route_wake(srv, &m, commit_us);
}

/* ---- the log index ---- */

static void free_log_list(void *v)
{
    log_list *l = v;
    free(l->g);
    free(l);
}

static void free_log_group(void *v)
{
    log_group *g = v;
    free(g->w);
    free(g->s);
    free(g);
}

static void log_index_free(a2__server *srv)
{
    a2__map_free(srv->log_groups, free_log_group);
    a2__map_free(srv->log_types, free_log_list);
    free(srv->log_all.g);
    srv->log_groups = srv->log_types = NULL;
    memset(&srv->log_all, 0, sizeof srv->log_all);
    srv->log_built = 0;
}

static int log_list_add(log_list *l, log_group *g)
{
    if (l->n && l->g[l->n - 1] == g)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        log_group **v = realloc(l->g, cap * sizeof *v);
        if (!v)
            return -1;
        l->g = v;
        l->cap = cap;
    }
    l->g[l->n++] = g;
    return 0;
}

static int log_group_add(log_group *g, worker *w, const sub *s)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 2;
        worker **vw = realloc(g->w, cap * sizeof *vw);
        if (vw)
            g->w = vw;
        const sub **vs = vw ? realloc(g->s, cap * sizeof *vs) : NULL;
        if (vs)
            g->s = vs;
        if (!vw || !vs)
            return -1;
        g->cap = cap;
    }
    g->w[g->n] = w;
    g->s[g->n++] = s;
    return 0;
}

/* Indexes the live log subscriptions (as of the current generation). */
static int log_index_build(a2__server *srv)
{
    log_index_free(srv);
    srv->log_groups = a2__map_new();
    srv->log_types = a2__map_new();
    if (!srv->log_groups || !srv->log_types)
        goto nomem;
    for (worker *w = srv->workers; w; w = w->next) {
        if (w->state != W_LIVE)
            continue;
        for (size_t i = 0; i < w->n_subs; i++) {
            const sub *s = &w->subs[i];
            if (s->filter == A2_WIRE_LOG_NONE)
                continue;
            size_t klen = strlen(s->consumer);
            log_group *g = a2__map_get(srv->log_groups, s->consumer, klen);
            if (!g) {
                if (!(g = calloc(1, sizeof *g)))
                    goto nomem;
                g->consumer = s->consumer;
                if (a2__map_put(srv->log_groups, s->consumer, klen, g, NULL) !=
                    0) {
                    free(g);
                    goto nomem;
                }
            }
            if (log_group_add(g, w, s) != 0)
                goto nomem;
            if (s->filter == A2_WIRE_LOG_ALL) {
                if (log_list_add(&srv->log_all, g) != 0)
                    goto nomem;
                continue;
            }
            for (size_t t = 0; t < s->n_types; t++) {
                size_t tlen = strlen(s->types[t]);
                log_list *l = a2__map_get(srv->log_types, s->types[t], tlen);
                if (!l) {
                    if (!(l = calloc(1, sizeof *l)))
                        goto nomem;
                    if (a2__map_put(srv->log_types, s->types[t], tlen, l,
                                    NULL) != 0) {
                        free(l);
                        goto nomem;
                    }
                }
                if (log_list_add(l, g) != 0)
                    goto nomem;
            }
        }
    }
    srv->log_gen = srv->gen;
    srv->log_built = 1;
    return 0;
nomem:
    log_index_free(srv);
    return -1;
}

/* Routes m (a `log` of type) to the group's subscribers that follow type. */
static void route_log_group(a2__server *srv, log_group *g, const char *session,
                            const char *type, a2_wire_msg *m)
{
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++) {
        srv->log_checks++;
        if (!log_match(g->s[i], type) || grow_scratch(srv, n + 1) != 0)
            continue;
        srv->cands[n].id = g->w[i]->id;
        srv->cands[n].serial = g->w[i]->serial;
        srv->cw[n] = g->w[i];
        n++;
    }
    if (n == 0)
        return;
    m->consumer = g->consumer;
    if (srv->route == A2C_ROUTE_BROADCAST) {
        for (size_t k = 0; k < n; k++)
            (void)push(srv, srv->cw[k], m);
        return;
    }
    size_t k = a2__route_pick(srv->cands, n, session);
    note_routed(srv->cw[k], g->consumer, session);
    (void)push(srv, srv->cw[k], m);
}

void a2__server_log(a2__server *srv, const char *session, int64_t idx,
                    const char *type, uint64_t lsn, uint64_t xid)
{
    a2_wire_msg m = {.type = A2_WIRE_LOG,
                     .session = session,
                     .idx = idx,
                     .event_type = type,
                     .lsn = lsn,
                     .xid = xid};
    if (!srv || !session || !type)
        return;
    if ((!srv->log_built || srv->log_gen != srv->gen) &&
        log_index_build(srv) != 0)
        return;
    /* The routing scratch is reused here: the wake-ups' cache of it goes. */
    free(srv->cand_consumer);
    srv->cand_consumer = NULL;
    uint64_t stamp = ++srv->log_stamp;
    log_list *typed = a2__map_get(srv->log_types, type, strlen(type));
    log_list *lists[2] = {typed, &srv->log_all};
    for (int li = 0; li < 2; li++)
        for (size_t i = 0; lists[li] && i < lists[li]->n; i++) {
            log_group *g = lists[li]->g[i];
            if (g->stamp == stamp)
                continue;
            g->stamp = stamp;
            route_log_group(srv, g, session, type, &m);
        }
}

void a2__server_cleared(a2__server *srv, const char *session,
                        int64_t clear_index, uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_CLEARED,
                     .session = session,
                     .clear_index = clear_index,
                     .lsn = lsn};
    if (!srv || !session)
        return;
    for (worker *w = srv->workers; w; w = w->next)
        if (w->state == W_LIVE && w->n_subs > 0)
            (void)push(srv, w, &m);
}

void a2__server_resync_all(a2__server *srv)
{
    if (!srv)
        return;
    for (worker *w = srv->workers; w; w = w->next)
        if (w->state == W_LIVE)
            for (size_t i = 0; i < w->n_subs; i++)
                push_resync_all(srv, w, w->subs[i].consumer);
}

void a2__server_presence(a2__server *srv, const char *ns,
                         const char *participant, const char *fields_json,
                         uint64_t lsn)
{
    a2_wire_msg m = {.type = A2_WIRE_PRESENCE,
                     .ns = ns,
                     .participant = participant,
                     .fields_json = fields_json,
                     .lsn = lsn};
    if (!srv || !ns || !participant || !fields_json)
        return;
    for (worker *w = srv->workers; w; w = w->next) {
        if (w->state != W_LIVE)
            continue;
        for (size_t i = 0; i < w->n_ns; i++)
            if (strcmp(w->ns[i], ns) == 0) {
                if (push(srv, w, &m) == A2C_QUEUE_EINVAL)
                    return; /* fields_json is not an object: for no one */
                break;
            }
    }
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
        for (const worker *w = srv->workers; seen && w; w = w->next)
            for (size_t i = 0; w->state == W_LIVE && i < w->n_subs; i++)
                if (w->subs[i].filter != A2_WIRE_LOG_NONE)
                    (void)a2__map_put(seen, w->subs[i].consumer,
                                      strlen(w->subs[i].consumer), (void *)w,
                                      NULL);
        out->log_consumers = seen ? a2__map_count(seen) : 0;
        a2__map_free(seen, NULL);
    }
}
