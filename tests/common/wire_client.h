/*
 * A minimal worker of the integration tests, speaking wire protocol v1
 * (msgpack maps) written directly with msgpack-c, so that the tests check
 * the bytes on the socket: hello and subscribe, presence subscriptions,
 * ping and pong, and each message the consumer sends flattened into
 * a2_test_msg. Also the plain socket helpers the tests share (connect,
 * send, a free port, an HTTP GET).
 */
#ifndef A2_TEST_WIRE_CLIENT_H
#define A2_TEST_WIRE_CLIENT_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* A connection to a2-consumer and what it has read but not parsed yet. */
typedef struct {
    int fd;
    msgpack_unpacker up;
} a2_test_worker;

/* A message the consumer sent, flattened. */
typedef struct {
    char t[32];
    char consumer[128];
    char session[128];
    char cursor[128];
    char type[128];
    char code[64];
    char message[256];
    char ns[64];
    char participant[64];
    char fields[512]; /* "k=v;..." with v a string, number, or "nil" */
    int64_t head, idx, clear_index;
    uint64_t lsn;
    uint64_t id; /* of a pong */
    int all_sessions;
    int n_sessions;
    char sessions[8][64];
} a2_test_msg;

/* A connected Unix socket at path; fails the test when it cannot connect. */
int a2_test_connect_unix(const char *path);

/* A connected TCP socket to 127.0.0.1:port; fails the test when it cannot
 * connect. */
int a2_test_connect_tcp(int port);

/* Sends all n bytes (stops quietly at the first failed send). */
void a2_test_send(int fd, const void *p, size_t n);

/* Packs s as a msgpack string. */
void a2_test_pack_str(msgpack_packer *pk, const char *s);

/* On a connected fd: says hello (with token unless NULL) and subscribes to
 * consumer unless NULL (log_type: NULL = not a log consumer; "*" = every
 * type; else one type). */
void a2_test_worker_open_fd(a2_test_worker *w, int fd, const char *name,
                            const char *token, const char *consumer,
                            const char *log_type);

/* Connects to the Unix socket, says hello and subscribes. */
void a2_test_worker_open(a2_test_worker *w, const char *sock, const char *name,
                         const char *consumer, const char *log_type);

/*
 * a2_test_worker_open, then waits (at most 5 s) for the welcome and, with
 * resync, for the resync the consumer answers the subscription with: from
 * then on the subscription is in place. Fails the test when one does not
 * come.
 */
void a2_test_worker_join(a2_test_worker *w, const char *sock, const char *name,
                         const char *consumer, const char *log_type,
                         int resync);

/* Subscribes a worker to the presence patches of namespace ns. */
void a2_test_worker_presence(a2_test_worker *w, const char *ns);

/* Closes the connection (fd -1) and frees what it had read. */
void a2_test_worker_close(a2_test_worker *w);

/*
 * The next message within timeout_ms: 1 with *m, 0 on timeout, -1 when the
 * consumer closed the connection.
 */
int a2_test_worker_next(a2_test_worker *w, int timeout_ms, a2_test_msg *m);

/* Waits for a message of type t (skipping others); 1, or 0 on timeout. */
int a2_test_worker_wait_for(a2_test_worker *w, const char *t, int timeout_ms,
                            a2_test_msg *m);

/* Sends a ping with id. The consumer handles a connection's frames in
 * order and answers a ping with a pong once it has handled every frame sent
 * before it: its pong is a barrier (a subscription sent before it is in
 * place). */
void a2_test_worker_ping(a2_test_worker *w, uint64_t id);

/* Waits for the pong of id, skipping (and dropping) the messages before
 * it; 1, or 0 on timeout or a closed connection. */
int a2_test_worker_wait_pong(a2_test_worker *w, uint64_t id, int timeout_ms);

/* Ping, then wait (at most timeout_ms) for its pong; fails the test when
 * none comes. */
void a2_test_worker_sync(a2_test_worker *w, uint64_t id, int timeout_ms);

/* A TCP port free right now on 127.0.0.1. */
int a2_test_free_port(void);

/* GET path from 127.0.0.1:port over HTTP/1.0: the whole response
 * (headers and body, malloc'd), or NULL when the connection is refused. */
char *a2_test_http_get(int port, const char *path);

/* GET /healthz from 127.0.0.1:port; fails the test unless it answers
 * "200 OK". */
void a2_test_expect_healthz(int port);

#endif
