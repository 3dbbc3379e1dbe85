/*
 * Internals shared by the worker server's files (see server.h):
 *   server.c         the public lifecycle: options, listeners, accepting,
 *                    the event loop, flush, stats
 *   server_client.c  one connection: its states, reading and framing,
 *                    writing its queue, subscriptions, errors, timeouts
 *   server_auth.c    the hello: token check, standby refusal, paced and
 *                    rate-limited denials
 *   server_push.c    routing wake-ups (rendezvous or broadcast), moving a
 *                    departed worker's sessions, cleared/resync/presence
 *   server_log.c     the index of log subscriptions and `log` routing
 *
 * A connection goes NEW (until its hello) -> LIVE -> CLOSING (an error frame
 * was queued: flush it, shut down writing, discard input until EOF or a short
 * linger so the peer reads the error instead of a reset) -> DEAD (freed at
 * the end of a2__server_run, so an event already fetched for it is skipped).
 */
#ifndef A2_CONSUMER_SERVER_INT_H
#define A2_CONSUMER_SERVER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "a2/wire.h"
#include "metrics.h"
#include "queue.h"
#include "route.h"
#include "server.h"

#define A2C_SERVER_READ_CHUNK (64 * 1024)

/* DENIED: a hello failed authentication; answered at deadline_ms. */
enum {
    A2C_WORKER_NEW = 0,
    A2C_WORKER_LIVE,
    A2C_WORKER_CLOSING,
    A2C_WORKER_DEAD,
    A2C_WORKER_DENIED
};

typedef struct {
    int kind;
    int fd;
} a2__server_handle;

typedef struct {
    char *consumer;
    a2_wire_log_filter filter;
    char **types;
    size_t n_types;
} a2__server_sub;

typedef struct a2__server_worker a2__server_worker;

/* Live workers (a consumer's subscribers, a namespace's) with their routing
 * identities, in the order of the worker list. */
typedef struct {
    a2__route_cand *c;
    a2__server_worker **w;
    size_t n, cap;
} a2__server_wlist;

/* A log consumer's live subscriptions, in the log index. */
typedef struct {
    const char *consumer; /* borrowed from one of its subs */
    a2__server_worker **w;
    const a2__server_sub **s;
    size_t n, cap;
    uint64_t stamp; /* the last a2__server_log that routed it */
} a2__server_log_group;

/* Log groups, with repeats (skipped by stamp when routing). */
typedef struct {
    a2__server_log_group **g;
    size_t n, cap;
} a2__server_log_list;

struct a2__server_worker {
    a2__server_handle h; /* first: epoll data points here */
    a2__server_worker *next;
    a2__server_worker *prev;
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
    a2__server_worker *dnext; /* on the server's dirty list: frames to send */
    a2__server_worker *dprev;
    int dirty;
    a2__server_sub *subs;
    size_t n_subs;
    char **ns;
    size_t n_ns;
    a2__map *routed; /* consumer\0session -> marker */
    int routed_unknown;
};

struct a2__server {
    int epfd;
    char *standby; /* set: a standby, answering every hello with this */
    uint64_t standby_refusals;
    a2__server_handle lunix;
    a2__server_handle ltcp;
    a2__server_handle timer;
    char *unix_path;
    int tcp_port;
    char *token;
    a2__route route;
    int trace_wakes; /* a2__server_options.trace_wakes */
    size_t queue_limit;
    int hello_timeout_ms;
    int subscribe_timeout_ms;
    size_t max_connections;
    size_t move_budget; /* a2__server_options.move_budget */
    size_t connections; /* open worker connections */
    uint64_t refused;
    int reserve_fd; /* kept free for refusing a connection when none is */
    void (*log)(void *arg, const char *line);
    void *log_arg;
    int auth_delay_ms;
    int auth_spacing_ms;
    int64_t auth_next_ms; /* the earliest the next denial is answered */
    uint64_t auth_failures;
    int64_t auth_window_ms; /* the second the log lines below count in */
    int auth_logged;
    uint64_t auth_unlogged;
    uint64_t lsn;
    uint64_t serial;
    a2__server_worker *workers;
    a2__server_worker *dead;
    a2__server_worker *dirty; /* pushed to since the last flush */
    int64_t armed_ms; /* the deadline the timer is armed for (0: none) */
    int deadline_due; /* the timer fired: look through the deadlines */
    uint64_t live;
    size_t log_subs; /* the log subscriptions of the LIVE workers */
    uint64_t overflows;
    uint64_t protocol_errors;
    uint64_t sent[32]; /* frames written to sockets' buffers, by a2_wire_type */
    a2__hist wake_latency; /* commit -> wake frame moved to a socket */
    /* scratch for routing: a `log`'s subscribers that follow its type, or a
     * consumer's subscribers when its index could not be built */
    a2__server_wlist scratch;
    /* gen moves whenever a worker becomes live, leaves or changes its
     * subscriptions; the indexes below are rebuilt when it has moved, so a
     * run of wake-ups scans the workers once, not once per wake-up. */
    uint64_t gen;
    /* The subscriber index, as of generation sub_gen: consumer -> its live
     * subscribers (server_push.c). */
    a2__map *sub_index;
    uint64_t sub_gen;
    /* The log index, as of generation log_gen: consumer -> log group, type
     * -> log list of the groups with a subscription naming the type, and
     * the groups with one following every type. */
    a2__map *log_groups;
    a2__map *log_types;
    a2__server_log_list log_all;
    uint64_t log_gen;
    int log_built;
    uint64_t log_stamp;
    uint64_t log_checks;
    /* The presence index, as of generation ns_gen: namespace -> the live
     * workers subscribed to it (server_push.c). */
    a2__map *ns_index;
    uint64_t ns_gen;
    int closing; /* a2__server_free: no moves */
    char rbuf[A2C_SERVER_READ_CHUNK];
};

/* server.c */
/* A malloc'd copy of s, or NULL. */
char *a2__server_dupstr(const char *s);

/* server_client.c */
void a2__server_worker_free(a2__server_worker *w);
/* w's subscription to consumer, or NULL. */
const a2__server_sub *a2__server_find_sub(const a2__server_worker *w,
                                          const char *consumer);
void a2__server_dirty_remove(a2__server *srv, a2__server_worker *w);
/* After rc = a push to w's queue: counts an overflow, and puts w on the
 * dirty list when the push took; returns rc. */
int a2__server_queued(a2__server *srv, a2__server_worker *w, int rc);
int a2__server_push(a2__server *srv, a2__server_worker *w,
                    const a2_wire_msg *m);
void a2__server_push_resync_all(a2__server *srv, a2__server_worker *w,
                                const char *consumer);
/* Closes w's socket now; the memory goes at the end of the run. */
void a2__server_close_now(a2__server *srv, a2__server_worker *w);
/* Writes what is pending; 0, or -1 when the connection is broken. */
int a2__server_write(a2__server *srv, a2__server_worker *w);
/* Sends an `error` frame and closes the connection (after a linger). */
void a2__server_proto_error(a2__server *srv, a2__server_worker *w,
                            const char *code, const char *message);
/* Reads w's socket and handles the frames in it. */
void a2__server_read(a2__server *srv, a2__server_worker *w);
/* Hello, subscribe and linger timeouts, when one may be due (the timer
 * fired): each connection looked at, the timer armed for the next. */
void a2__server_deadlines(a2__server *srv);
/* Sets w's deadline (a state that has one: NEW, LIVE before its first
 * subscription, DENIED, CLOSING) and arms the timer for it when it is the
 * earliest, without looking through the others. */
void a2__server_deadline_set(a2__server *srv, a2__server_worker *w,
                             int64_t at);

/* server_auth.c */
/* Starts a new second of authentication log lines when the last is over. */
void a2__server_auth_log_roll(a2__server *srv, int64_t now);
/* The first frame of a NEW connection. */
void a2__server_hello(a2__server *srv, a2__server_worker *w,
                      const a2_wire_msg *m);

/* server_push.c */
/* Appends w to l (once: w again right after itself is not added); -1 when
 * out of memory. */
int a2__server_wlist_add(a2__server_wlist *l, a2__server_worker *w);
/* Remembers that session of consumer was routed to w. */
void a2__server_note_routed(a2__server_worker *w, const char *consumer,
                            const char *session);
/* w stops serving (it was LIVE): its sessions move to the others. */
void a2__server_depart(a2__server *srv, a2__server_worker *w);
/* Frees the subscriber and presence indexes. */
void a2__server_indexes_free(a2__server *srv);
/* w's log subscriptions (those with a log filter). */
size_t a2__server_log_subs(const a2__server_worker *w);

/* server_log.c */
/* strcmp of two event type names (pointers to them), the order of a
 * subscription's types. */
int a2__server_type_order(const void *a, const void *b);
/* Whether subscription s follows events of type. */
int a2__server_log_match(const a2__server_sub *s, const char *type);
void a2__server_log_index_free(a2__server *srv);

#endif
