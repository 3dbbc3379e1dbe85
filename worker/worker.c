/*
 * a2_worker: the connection to a2-consumer (wire protocol v1) at one of its
 * addresses, tried in turn, reconnects with backoff, the degraded sweep, and
 * the event queue.
 */
#include "a2/worker.h"

#include "../common/addr.h"
#include "../common/clock.h"
#include "../common/lsn.h"
#include "a2/wire.h"
#include "worker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

_Static_assert(sizeof((a2_worker_event *)0)->trace_us ==
                       sizeof((a2_wire_msg *)0)->trace_us,
               "a wake-up event holds every time of its trace");

#define HANDSHAKE_TIMEOUT_MS 5000
#define READ_CHUNK           65536
#define SWEEP_PAGE           1000

/* The error code of a standby a2-consumer. */
#ifndef A2_WIRE_CODE_STANDBY
#define A2_WIRE_CODE_STANDBY "standby"
#endif

typedef enum {
    ST_IDLE = 0,   /* not connected; next_connect_at says when to try */
    ST_CONNECTING, /* non-blocking connect in progress */
    ST_HANDSHAKE,  /* hello sent, waiting for welcome */
    ST_READY,
} conn_state;

typedef struct {
    char *consumer;
    int log_filter;
    char **types;
    size_t ntypes;
} subscription;

typedef struct qevent {
    a2_worker_event ev;
    char *strs[8];
    char **sessions;
    size_t nsessions;
    struct qevent *next;
} qevent;

struct a2_worker {
    /* options */
    char **connects; /* the addresses, in the order they are tried */
    a2__addr *addrs; /* connects, parsed */
    size_t naddrs;   /* 0: the worker never connects */
    char *token;
    char *name;
    char *db;
    int sweep_ms;
    int reconnect_min_ms;
    int reconnect_max_ms;
    int ping_ms;
    a2_worker_log_fn log;
    void *log_ctx;

    subscription subs[A2_WORKER_MAX_SUBSCRIPTIONS];
    size_t nsubs;
    char *presence[A2_WORKER_MAX_SUBSCRIPTIONS];
    size_t npresence;

    /* connection */
    conn_state state;
    int fd;
    a2_wire_reader *reader;
    a2_wire_buf out;
    int64_t next_connect_at;
    int backoff_ms;
    int64_t handshake_deadline;
    int64_t next_ping_at;
    int64_t pong_deadline; /* 0: no ping outstanding */
    uint64_t ping_id;
    int failing;           /* connect failures since the last welcome */
    int started;           /* the first connect was attempted */
    size_t cur;            /* the address connected to, or tried next */
    size_t round_failures; /* failures since the last welcome or backoff */
    int standby_reported;  /* a standby's refusal was reported this outage */

    /* degraded sweep */
    a2_store *store;
    int64_t next_sweep_at; /* 0: not armed */

    /* events */
    qevent *head;
    qevent *tail;
    qevent *current; /* handed out by a2_worker_next, freed on the next call */

    a2_worker_stats stats;
    char last_error[512];
};

/* ── helpers ──────────────────────────────────────────────────────────── */

void a2__worker_logf(void (*log)(void *, const char *), void *ctx,
                     const char *fmt, ...)
{
    if (!log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log(ctx, line);
}

void a2__worker_default_name(char *buf, size_t len)
{
    char host[256] = "worker";
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "worker");
    host[sizeof host - 1] = '\0';
    snprintf(buf, len, "%s:%ld", host, (long)getpid());
}

void a2__worker_err_init(char **err, size_t *errlen, char *spare,
                         size_t sparelen)
{
    if (!*err || *errlen == 0) {
        *err = spare;
        *errlen = sparelen;
    }
    (*err)[0] = '\0';
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

#define WLOG(w, ...) a2__worker_logf((w)->log, (w)->log_ctx, __VA_ARGS__)

/* A wire encoder's result as a2_worker's: 0, A2_WORKER_ENOMEM or
 * A2_WORKER_EINVAL. */
static int worker_rc(int wire_rc)
{
    if (wire_rc == 0)
        return 0;
    return wire_rc == A2_WIRE_ENOMEM ? A2_WORKER_ENOMEM : A2_WORKER_EINVAL;
}

static void subscription_free(subscription *s)
{
    for (size_t j = 0; j < s->ntypes; j++)
        free(s->types[j]);
    free(s->types);
    free(s->consumer);
}

static void set_error(a2_worker *w, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void set_error(a2_worker *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->last_error, sizeof w->last_error, fmt, ap);
    va_end(ap);
}

/* ── the event queue ──────────────────────────────────────────────────── */

static void qevent_free(qevent *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < sizeof q->strs / sizeof q->strs[0]; i++)
        free(q->strs[i]);
    for (size_t i = 0; i < q->nsessions; i++)
        free(q->sessions[i]);
    free(q->sessions);
    free(q);
}

/* Copies the strings of ev into a new queued event. 0 or ENOMEM. */
static int enqueue(a2_worker *w, const a2_worker_event *ev)
{
    qevent *q = calloc(1, sizeof *q);
    if (!q)
        return A2_WORKER_ENOMEM;
    q->ev = *ev;
    const char **fields[] = {&q->ev.consumer,    &q->ev.session,
                             &q->ev.cursor,      &q->ev.event_type,
                             &q->ev.ns,          &q->ev.participant,
                             &q->ev.fields_json, &q->ev.message};
    for (size_t i = 0; i < 8; i++) {
        if (!*fields[i])
            continue;
        q->strs[i] = strdup(*fields[i]);
        if (!q->strs[i])
            goto nomem;
        *fields[i] = q->strs[i];
    }
    if (ev->nsessions > 0) {
        q->sessions = calloc(ev->nsessions, sizeof *q->sessions);
        if (!q->sessions)
            goto nomem;
        for (size_t i = 0; i < ev->nsessions; i++) {
            q->sessions[i] = strdup(ev->sessions[i]);
            if (!q->sessions[i])
                goto nomem;
            q->nsessions = i + 1;
        }
        q->ev.sessions = (const char *const *)q->sessions;
    } else {
        q->ev.sessions = NULL;
    }
    if (w->tail)
        w->tail->next = q;
    else
        w->head = q;
    w->tail = q;
    return 0;
nomem:
    qevent_free(q);
    return A2_WORKER_ENOMEM;
}

int a2_worker_next(a2_worker *w, a2_worker_event *ev)
{
    qevent_free(w->current);
    w->current = NULL;
    if (!w->head)
        return 0;
    qevent *q = w->head;
    w->head = q->next;
    if (!w->head)
        w->tail = NULL;
    q->next = NULL;
    w->current = q;
    *ev = q->ev;
    return 1;
}

/* ── construction ─────────────────────────────────────────────────────── */

static int parse_connect(a2__addr *addr, const char *spec, char *err,
                         size_t errlen)
{
    int rc = a2__addr_parse(spec, addr);
    if (rc == A2__ADDR_OK && addr->kind == A2__ADDR_UNIX &&
        strlen(addr->path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        rc = A2__ADDR_EPATH;
    if (rc == A2__ADDR_OK && addr->kind == A2__ADDR_TCP) {
        long port = strtol(addr->port, NULL, 10);
        if (port <= 0 || port > 65535)
            rc = A2__ADDR_EPORT;
    }
    switch (rc) {
    case A2__ADDR_OK:
        return 0;
    case A2__ADDR_EPATH:
        snprintf(err, errlen, "bad socket path in '%s'", spec);
        return -1;
    case A2__ADDR_EHOSTPORT:
        snprintf(err, errlen, "bad address '%s' (tcp:HOST:PORT)", spec);
        return -1;
    case A2__ADDR_EPORT:
        snprintf(err, errlen, "bad port in '%s'", spec);
        return -1;
    case A2__ADDR_ESCHEME:
        snprintf(err, errlen, "bad address '%s' (unix:PATH or tcp:HOST:PORT)",
                 spec);
        return -1;
    default:
        return -1;
    }
}

/* The address connected to, or tried next. */
static const char *cur_spec(const a2_worker *w)
{
    return w->naddrs ? w->connects[w->cur] : "";
}

static const a2__addr *cur_addr(const a2_worker *w)
{
    return &w->addrs[w->cur];
}

/* Copies and parses the addresses of opts into w. 0, or -1 with err set
 * (an empty err: no memory). */
static int take_addresses(a2_worker *w, const a2_worker_options *opts,
                          char *err, size_t errlen)
{
    const char *const *specs =
            opts->nconnects > 0 ? opts->connects : &opts->connect;
    size_t n = opts->nconnects > 0 ? opts->nconnects : (opts->connect ? 1 : 0);
    if (n == 0)
        return 0;
    w->connects = calloc(n, sizeof *w->connects);
    w->addrs = calloc(n, sizeof *w->addrs);
    if (!w->connects || !w->addrs)
        return -1;
    w->naddrs = n;
    int tcp = 0;
    for (size_t i = 0; i < n; i++) {
        if (!specs[i] || !*specs[i]) {
            snprintf(err, errlen, "connects[%zu] is %s", i,
                     specs[i] ? "empty" : "NULL");
            return -1;
        }
        if (!(w->connects[i] = strdup(specs[i])))
            return -1;
        if (parse_connect(&w->addrs[i], specs[i], err, errlen) != 0)
            return -1;
        tcp |= w->addrs[i].kind == A2__ADDR_TCP;
    }
    if (tcp && !opts->token) {
        snprintf(err, errlen, "a tcp: connection needs a token");
        return -1;
    }
    return 0;
}

a2_worker *a2_worker_new(const a2_worker_options *opts, char *err,
                         size_t errlen)
{
    char spare[8];
    a2__worker_err_init(&err, &errlen, spare, sizeof spare);
    if (!opts) {
        snprintf(err, errlen, "no options");
        return NULL;
    }
    if (opts->degraded_sweep_ms < 0 || opts->reconnect_min_ms < 0 ||
        opts->reconnect_max_ms < 0 || opts->ping_ms < 0) {
        snprintf(err, errlen, "negative interval in options");
        return NULL;
    }
    if (opts->nconnects > 0 && opts->connect) {
        snprintf(err, errlen,
                 "connect and connects exclude each other (set connect to "
                 "NULL to give several addresses)");
        return NULL;
    }
    if (opts->nconnects > 0 && !opts->connects) {
        snprintf(err, errlen, "connects is NULL with nconnects %zu",
                 opts->nconnects);
        return NULL;
    }
    a2_worker *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->fd = -1;
    a2_wire_buf_init(&w->out);
    char name[300];
    if (!opts->name)
        a2__worker_default_name(name, sizeof name);
    w->token = dup_or_null(opts->token);
    w->name = strdup(opts->name ? opts->name : name);
    w->db = dup_or_null(opts->db);
    if ((opts->token && !w->token) || !w->name || (opts->db && !w->db)) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    if (take_addresses(w, opts, err, errlen) != 0) {
        if (!err[0])
            snprintf(err, errlen, "out of memory");
        goto error;
    }
    w->sweep_ms = opts->degraded_sweep_ms ? opts->degraded_sweep_ms
                                          : A2_WORKER_DEFAULT_SWEEP_MS;
    w->reconnect_min_ms = opts->reconnect_min_ms
                                  ? opts->reconnect_min_ms
                                  : A2_WORKER_DEFAULT_RECONNECT_MIN_MS;
    w->reconnect_max_ms = opts->reconnect_max_ms
                                  ? opts->reconnect_max_ms
                                  : A2_WORKER_DEFAULT_RECONNECT_MAX_MS;
    if (w->reconnect_max_ms < w->reconnect_min_ms)
        w->reconnect_max_ms = w->reconnect_min_ms;
    w->ping_ms = opts->ping_ms ? opts->ping_ms : A2_WORKER_DEFAULT_PING_MS;
    w->backoff_ms = w->reconnect_min_ms;
    w->log = opts->log;
    w->log_ctx = opts->log_ctx;
    return w;
error:
    a2_worker_free(w);
    return NULL;
}

static void close_conn(a2_worker *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    a2_wire_reader_free(w->reader);
    w->reader = NULL;
    a2_wire_buf_free(&w->out);
    w->pong_deadline = 0;
}

void a2_worker_free(a2_worker *w)
{
    if (!w)
        return;
    close_conn(w);
    a2_store_close(w->store);
    for (size_t i = 0; i < w->nsubs; i++)
        subscription_free(&w->subs[i]);
    for (size_t i = 0; i < w->npresence; i++)
        free(w->presence[i]);
    qevent_free(w->current);
    while (w->head) {
        qevent *q = w->head;
        w->head = q->next;
        qevent_free(q);
    }
    for (size_t i = 0; i < w->naddrs; i++) {
        if (w->connects)
            free(w->connects[i]);
        if (w->addrs)
            a2__addr_clear(&w->addrs[i]);
    }
    free(w->connects);
    free(w->addrs);
    free(w->token);
    free(w->name);
    free(w->db);
    free(w);
}

/* ── subscriptions ────────────────────────────────────────────────────── */

static int send_subscription(a2_worker *w, const subscription *s)
{
    return worker_rc(a2_wire_encode_subscribe(
            &w->out, s->consumer, (a2_wire_log_filter)s->log_filter,
            (const char *const *)s->types, s->ntypes));
}

int a2_worker_subscribe(a2_worker *w, const char *consumer, int log_filter,
                        const char *const *types, size_t ntypes)
{
    if (!w || !consumer || !*consumer ||
        (log_filter != A2_WIRE_LOG_NONE && log_filter != A2_WIRE_LOG_ALL &&
         log_filter != A2_WIRE_LOG_TYPES) ||
        (log_filter == A2_WIRE_LOG_TYPES && (!types || ntypes == 0)) ||
        ntypes > A2_WIRE_MAX_ARRAY)
        return A2_WORKER_EINVAL;
    if (w->nsubs == A2_WORKER_MAX_SUBSCRIPTIONS)
        return A2_WORKER_EINVAL;
    subscription s = {0};
    s.log_filter = log_filter;
    s.consumer = strdup(consumer);
    if (!s.consumer)
        return A2_WORKER_ENOMEM;
    if (log_filter == A2_WIRE_LOG_TYPES) {
        s.types = calloc(ntypes, sizeof *s.types);
        if (!s.types)
            goto nomem;
        for (size_t i = 0; i < ntypes; i++) {
            if (!types[i] || !*types[i]) {
                subscription_free(&s);
                return A2_WORKER_EINVAL;
            }
            s.types[i] = strdup(types[i]);
            if (!s.types[i])
                goto nomem;
            s.ntypes = i + 1;
        }
    }
    w->subs[w->nsubs++] = s;
    if (w->state == ST_HANDSHAKE || w->state == ST_READY)
        return send_subscription(w, &s);
    return 0;
nomem:
    subscription_free(&s);
    return A2_WORKER_ENOMEM;
}

int a2_worker_watch_presence(a2_worker *w, const char *ns)
{
    if (!w || !ns || !*ns || w->npresence == A2_WORKER_MAX_SUBSCRIPTIONS)
        return A2_WORKER_EINVAL;
    char *copy = strdup(ns);
    if (!copy)
        return A2_WORKER_ENOMEM;
    w->presence[w->npresence++] = copy;
    if (w->state == ST_HANDSHAKE || w->state == ST_READY)
        return worker_rc(a2_wire_encode_presence_sub(&w->out, copy));
    return 0;
}

/* ── connection life ──────────────────────────────────────────────────── */

/*
 * The connection is down (standby: a standby a2-consumer refused it): report
 * it (once per outage; a standby's refusal once per outage too), move to the
 * next address, at once until every address failed in this round, then
 * after the backoff; arm the degraded sweep. A connection lost after its
 * welcome is the first failure of a new round.
 */
static int went_down_as(a2_worker *w, const char *why, int standby)
{
    int was_up = w->state == ST_READY || w->state == ST_HANDSHAKE;
    int was_ready = w->state == ST_READY;
    close_conn(w);
    w->state = ST_IDLE;
    set_error(w, "%s", why);
    int64_t now = a2__mono_ms();
    w->cur = w->naddrs ? (w->cur + 1) % w->naddrs : 0;
    w->round_failures++;
    char next[600];
    if (w->round_failures < w->naddrs) {
        /* The next address at once. */
        w->next_connect_at = now;
        snprintf(next, sizeof next, "trying %s next", cur_spec(w));
    } else {
        /* Jitter: up to a quarter of the backoff. */
        int jitter =
                w->backoff_ms / 4 > 0 ? rand() % (w->backoff_ms / 4 + 1) : 0;
        int delay = w->backoff_ms + jitter;
        w->next_connect_at = now + delay;
        w->backoff_ms = w->backoff_ms * 2 > w->reconnect_max_ms
                                ? w->reconnect_max_ms
                                : w->backoff_ms * 2;
        w->round_failures = 0;
        if (w->naddrs > 1)
            snprintf(next, sizeof next,
                     "all %zu addresses tried, trying %s again in %d ms",
                     w->naddrs, cur_spec(w), delay);
        else
            snprintf(next, sizeof next, "reconnecting in %d ms", delay);
    }
    int first = w->failing == 0;
    w->failing++;
    if (was_ready)
        w->stats.disconnects++;
    int report = first || (was_up && !standby);
    if (standby) {
        w->stats.standby_refusals++;
        report = report || !w->standby_reported;
        w->standby_reported = 1;
    }
    if (report) {
        WLOG(w, "%s; %s", why, next);
        a2_worker_event ev = {.type = A2_WORKER_EV_DISCONNECTED,
                              .message = why};
        if (enqueue(w, &ev) != 0)
            return A2_WORKER_ENOMEM;
    }
    if (w->db && !w->next_sweep_at) {
        /* Never connected yet: sweep now; after an outage, the reconnect's
         * resync covers the gap, so the first sweep waits one interval. */
        w->next_sweep_at = w->stats.connects == 0 ? now : now + w->sweep_ms;
    }
    return 0;
}

static int went_down(a2_worker *w, const char *why)
{
    return went_down_as(w, why, 0);
}

static int send_hello(a2_worker *w)
{
    /* The token goes to tcp: addresses only. */
    int rc = a2_wire_encode_hello(
            &w->out, w->name,
            cur_addr(w)->kind == A2__ADDR_UNIX ? NULL : w->token);
    for (size_t i = 0; rc == 0 && i < w->nsubs; i++)
        rc = send_subscription(w, &w->subs[i]);
    for (size_t i = 0; rc == 0 && i < w->npresence; i++)
        rc = worker_rc(a2_wire_encode_presence_sub(&w->out, w->presence[i]));
    return rc;
}

static int start_connect(a2_worker *w)
{
    char why[600];
    w->started = 1;
    w->reader = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    if (!w->reader)
        return A2_WORKER_ENOMEM;
    w->fd = a2__addr_dial(cur_addr(w), cur_spec(w), A2__ADDR_NONBLOCK, why,
                          sizeof why);
    if (w->fd < 0)
        return went_down(w, why);
    w->state = ST_CONNECTING;
    w->handshake_deadline = a2__mono_ms() + HANDSHAKE_TIMEOUT_MS;
    int rc = send_hello(w);
    if (rc != 0)
        return rc;
    return 0;
}

/* Queues ev as an event of type with what a wake and a log frame both
 * carry: the consumer, the session and the commit (lsn, xid). */
static int enqueue_commit(a2_worker *w, a2_worker_event *ev, int type,
                          const a2_wire_msg *m)
{
    ev->type = type;
    ev->consumer = m->consumer;
    ev->session = m->session;
    ev->lsn = m->lsn;
    ev->xid = m->xid;
    return enqueue(w, ev);
}

/* Handles one frame from the consumer. */
static int on_frame(a2_worker *w, const a2_wire_msg *m)
{
    a2_worker_event ev = {0};
    w->stats.frames++;
    switch (m->type) {
    case A2_WIRE_WELCOME: {
        if (w->state == ST_READY)
            return 0;
        w->state = ST_READY;
        w->stats.connects++;
        w->failing = 0;
        w->round_failures = 0;
        w->standby_reported = 0;
        w->backoff_ms = w->reconnect_min_ms;
        w->next_sweep_at = 0;
        w->next_ping_at = a2__mono_ms() + w->ping_ms;
        w->last_error[0] = '\0';
        WLOG(w, "connected to a2-consumer at %s (lsn %X/%X)", cur_spec(w),
             A2__LSN_ARGS(m->lsn));
        ev.type = A2_WORKER_EV_CONNECTED;
        ev.lsn = m->lsn;
        int rc = enqueue(w, &ev);
        /* Wake-ups may have been missed while away: resync every consumer. */
        for (size_t i = 0; rc == 0 && i < w->nsubs; i++) {
            a2_worker_event rs = {.type = A2_WORKER_EV_RESYNC,
                                  .consumer = w->subs[i].consumer,
                                  .all_sessions = true};
            rc = enqueue(w, &rs);
        }
        return rc;
    }
    case A2_WIRE_WAKE:
        ev.cursor = m->cursor;
        ev.head = m->head;
        memcpy(ev.trace_us, m->trace_us, sizeof ev.trace_us);
        return enqueue_commit(w, &ev, A2_WORKER_EV_WAKE, m);
    case A2_WIRE_LOG:
        ev.idx = m->idx;
        ev.event_type = m->event_type;
        return enqueue_commit(w, &ev, A2_WORKER_EV_LOG, m);
    case A2_WIRE_CLEARED:
        ev.type = A2_WORKER_EV_CLEARED;
        ev.session = m->session;
        ev.clear_index = m->clear_index;
        ev.lsn = m->lsn;
        return enqueue(w, &ev);
    case A2_WIRE_RESYNC:
        ev.type = A2_WORKER_EV_RESYNC;
        ev.consumer = m->consumer;
        ev.all_sessions = m->all_sessions != 0;
        ev.sessions = m->all_sessions ? NULL : m->sessions;
        ev.nsessions = m->all_sessions ? 0 : m->n_sessions;
        return enqueue(w, &ev);
    case A2_WIRE_PRESENCE:
        ev.type = A2_WORKER_EV_PRESENCE;
        ev.ns = m->ns;
        ev.participant = m->participant;
        ev.fields_json = m->fields_json;
        ev.lsn = m->lsn;
        return enqueue(w, &ev);
    case A2_WIRE_PONG:
        if (m->id == w->ping_id)
            w->pong_deadline = 0;
        return 0;
    case A2_WIRE_ERROR: {
        char why[600];
        if (m->code && strcmp(m->code, A2_WIRE_CODE_STANDBY) == 0) {
            snprintf(why, sizeof why,
                     "a2-consumer at %s is a standby, another one is active "
                     "(%s)",
                     cur_spec(w), m->message ? m->message : "no message");
            return went_down_as(w, why, 1);
        }
        snprintf(why, sizeof why, "a2-consumer refused the worker: %s (%s)",
                 m->message ? m->message : "no message",
                 m->code ? m->code : "?");
        return went_down(w, why);
    }
    default:
        return 0;
    }
}

static int do_read(a2_worker *w)
{
    char buf[READ_CHUNK];
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = recv(w->fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0) {
            char why[300];
            if (n == 0)
                snprintf(why, sizeof why,
                         "a2-consumer at %s closed the connection",
                         cur_spec(w));
            else
                snprintf(why, sizeof why,
                         "could not read from a2-consumer at %s: %s",
                         cur_spec(w), strerror(errno));
            return went_down(w, why);
        }
        int rc = a2_wire_reader_feed(w->reader, buf, (size_t)n);
        if (rc == A2_WIRE_ENOMEM)
            return A2_WORKER_ENOMEM;
        a2_wire_msg m;
        while (rc >= 0 && (rc = a2_wire_reader_next(w->reader, &m)) == 1) {
            int r2 = on_frame(w, &m);
            if (r2 != 0)
                return r2;
            if (w->state == ST_IDLE)
                return 0; /* an error frame closed the connection */
        }
        if (rc < 0) {
            char why[600];
            snprintf(why, sizeof why, "bad frame from a2-consumer: %s",
                     a2_wire_reader_error(w->reader));
            return went_down(w, why);
        }
    }
    return 0;
}

static int do_write(a2_worker *w)
{
    while (w->out.len > 0) {
        ssize_t n = send(w->fd, w->out.data, w->out.len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0) {
            char why[300];
            snprintf(why, sizeof why,
                     "could not write to a2-consumer at %s: %s", cur_spec(w),
                     strerror(errno));
            return went_down(w, why);
        }
        a2_wire_buf_consume(&w->out, (size_t)n);
    }
    return 0;
}

/* The degraded sweep: pending sessions of every subscribed consumer. */
static int sweep(a2_worker *w)
{
    w->stats.sweeps++;
    if (!w->store) {
        a2_store_error err = {0};
        if (a2_store_open(&w->store, w->db, &err) != 0) {
            WLOG(w, "degraded: a2-consumer unreachable and the store too: %s",
                 err.message);
            return 0;
        }
    }
    size_t found = 0;
    for (size_t i = 0; i < w->nsubs; i++) {
        const char *consumer = w->subs[i].consumer;
        char *after = NULL;
        for (;;) {
            a2_sessions page = {0};
            if (a2_store_pending_sessions(w->store, &consumer, 1, after,
                                          SWEEP_PAGE, &page) != 0) {
                const a2_store_error *e = a2_store_last_error(w->store);
                WLOG(w, "degraded: sweep of pending sessions failed: %s",
                     e ? e->message : "unknown error");
                if (e && e->code == A2_ESTORE_UNAVAILABLE) {
                    a2_store_close(w->store);
                    w->store = NULL;
                }
                a2_sessions_free(&page);
                free(after);
                return 0;
            }
            for (size_t j = 0; j < page.count; j++) {
                a2_worker_event ev = {.type = A2_WORKER_EV_SWEEP,
                                      .consumer = consumer,
                                      .session = page.items[j]};
                if (enqueue(w, &ev) != 0) {
                    a2_sessions_free(&page);
                    free(after);
                    return A2_WORKER_ENOMEM;
                }
            }
            found += page.count;
            int last = page.count < SWEEP_PAGE;
            free(after);
            after = page.count ? strdup(page.items[page.count - 1]) : NULL;
            a2_sessions_free(&page);
            if (last || !after)
                break;
        }
        free(after);
    }
    WLOG(w,
         "degraded: a2-consumer unreachable (%s); swept %zu pending "
         "session%s, next sweep in %d ms",
         w->last_error[0] ? w->last_error : "not connected", found,
         found == 1 ? "" : "s", w->sweep_ms);
    return 0;
}

int a2_worker_process(a2_worker *w)
{
    if (!w)
        return A2_WORKER_EINVAL;
    int rc = 0;
    int64_t now = a2__mono_ms();
    if (w->state == ST_IDLE && w->naddrs &&
        (!w->started || now >= w->next_connect_at)) {
        if ((rc = start_connect(w)) != 0)
            return rc;
    } else if (!w->naddrs && !w->started) {
        w->started = 1;
        if (w->db)
            w->next_sweep_at = now;
    }
    if (w->fd >= 0) {
        struct pollfd pfd = {w->fd, POLLIN, 0};
        if (w->out.len > 0 || w->state == ST_CONNECTING)
            pfd.events |= POLLOUT;
        int pr = poll(&pfd, 1, 0);
        if (pr < 0 && errno != EINTR)
            return A2_WORKER_EIO;
        if (pr > 0) {
            if (w->state == ST_CONNECTING &&
                (pfd.revents & (POLLOUT | POLLERR | POLLHUP))) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
                    soerr = errno;
                if (soerr != 0) {
                    char why[600];
                    snprintf(why, sizeof why, "could not connect to %s: %s",
                             cur_spec(w), strerror(soerr));
                    return went_down(w, why);
                }
                w->state = ST_HANDSHAKE;
            }
            if (w->fd >= 0 && w->state != ST_CONNECTING &&
                (pfd.revents & POLLOUT) && (rc = do_write(w)) != 0)
                return rc;
            if (w->fd >= 0 && w->state != ST_CONNECTING &&
                (pfd.revents & (POLLIN | POLLHUP | POLLERR)) &&
                (rc = do_read(w)) != 0)
                return rc;
        }
    }
    now = a2__mono_ms();
    if ((w->state == ST_CONNECTING || w->state == ST_HANDSHAKE) &&
        now >= w->handshake_deadline) {
        char why[600];
        snprintf(why, sizeof why, "a2-consumer at %s sent no welcome in %d ms",
                 cur_spec(w), HANDSHAKE_TIMEOUT_MS);
        return went_down(w, why);
    }
    if (w->state == ST_READY) {
        if (w->pong_deadline && now >= w->pong_deadline) {
            char why[600];
            snprintf(why, sizeof why,
                     "a2-consumer at %s did not answer a ping in %d ms",
                     cur_spec(w), w->ping_ms);
            return went_down(w, why);
        }
        if (!w->pong_deadline && now >= w->next_ping_at) {
            w->ping_id++;
            if (a2_wire_encode_ping(&w->out, w->ping_id) != 0)
                return A2_WORKER_ENOMEM;
            w->pong_deadline = now + w->ping_ms;
            w->next_ping_at = now + w->ping_ms;
            if ((rc = do_write(w)) != 0)
                return rc;
        }
    }
    if (w->state != ST_READY && w->db && w->next_sweep_at &&
        now >= w->next_sweep_at) {
        w->next_sweep_at = now + w->sweep_ms;
        if ((rc = sweep(w)) != 0)
            return rc;
    }
    return 0;
}

int a2_worker_fd(const a2_worker *w)
{
    return w ? w->fd : -1;
}

short a2_worker_poll_events(const a2_worker *w)
{
    if (!w || w->fd < 0)
        return 0;
    short ev = POLLIN;
    if (w->out.len > 0 || w->state == ST_CONNECTING)
        ev |= POLLOUT;
    return ev;
}

static int64_t min_deadline(int64_t a, int64_t b)
{
    if (a <= 0)
        return b;
    if (b <= 0)
        return a;
    return a < b ? a : b;
}

int a2_worker_timeout(const a2_worker *w)
{
    if (!w)
        return -1;
    if (w->head)
        return 0;
    if (!w->started)
        return 0;
    int64_t d = 0;
    if (w->state == ST_IDLE && w->naddrs)
        d = min_deadline(d, w->next_connect_at);
    if (w->state == ST_CONNECTING || w->state == ST_HANDSHAKE)
        d = min_deadline(d, w->handshake_deadline);
    if (w->state == ST_READY)
        d = min_deadline(d,
                         w->pong_deadline ? w->pong_deadline : w->next_ping_at);
    if (w->state != ST_READY && w->db && w->next_sweep_at)
        d = min_deadline(d, w->next_sweep_at);
    if (d <= 0)
        return -1;
    int64_t left = d - a2__mono_ms();
    if (left < 0)
        return 0;
    return left > 24 * 3600 * 1000 ? 24 * 3600 * 1000 : (int)left;
}

int a2_worker_wait(a2_worker *w, a2_worker_event *ev, int timeout_ms)
{
    if (!w || !ev)
        return A2_WORKER_EINVAL;
    int64_t until = timeout_ms >= 0 ? a2__mono_ms() + timeout_ms : 0;
    for (;;) {
        if (a2_worker_next(w, ev) == 1)
            return 1;
        int rc = a2_worker_process(w);
        if (rc != 0)
            return rc;
        if (a2_worker_next(w, ev) == 1)
            return 1;
        int t = a2_worker_timeout(w);
        if (timeout_ms >= 0) {
            int64_t left = until - a2__mono_ms();
            if (left <= 0)
                return 0;
            if (t < 0 || t > left)
                t = (int)left;
        }
        struct pollfd pfd = {w->fd, a2_worker_poll_events(w), 0};
        int pr = poll(&pfd, w->fd >= 0 ? 1 : 0, t);
        if (pr < 0 && errno == EINTR)
            return A2_WORKER_EINTR;
        if (pr < 0)
            return A2_WORKER_EIO;
    }
}

bool a2_worker_connected(const a2_worker *w)
{
    return w && w->state == ST_READY;
}

const char *a2_worker_last_error(const a2_worker *w)
{
    return w ? w->last_error : "";
}

void a2_worker_get_stats(const a2_worker *w, a2_worker_stats *out)
{
    if (w && out)
        *out = w->stats;
}
