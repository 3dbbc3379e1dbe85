/*
 * Helpers of the a2-consumer integration tests (included by each
 * test_consumer_*.c): start and stop the real a2-consumer binary, and a
 * minimal worker speaking wire protocol v1 (msgpack maps) written directly
 * with msgpack-c, so that the tests check the bytes on the socket.
 */
#ifndef A2_TEST_CONSUMER_UTIL_H
#define A2_TEST_CONSUMER_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "a2test.h"

/* ---- the daemon ---- */

/* When set, the next consumers started may write files of at most this
 * many bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with
 * EFBIG, as on a full disk). */
static rlim_t tc_child_file_limit;
/* When set, the next consumers started have this RLIMIT_NOFILE (soft and
 * hard). */
static rlim_t tc_child_nofile;

/* Processes a test started and has not reaped yet (consumers, bursts), so
 * that a test that failed half-way leaves nothing running into the next. */
static pid_t tc_pids[32];

static inline void tc_track(pid_t pid)
{
    for (int i = 0; i < 32; i++)
        if (tc_pids[i] == 0) {
            tc_pids[i] = pid;
            return;
        }
}

static inline void tc_untrack(pid_t pid)
{
    for (int i = 0; i < 32; i++)
        if (tc_pids[i] == pid)
            tc_pids[i] = 0;
}

/* Kills and reaps whatever a failed test left running (call in teardown). */
/* A server process a test stopped (tc_stop_process); 0 when none. */
static pid_t tc_stopped_pid;

/* Stops (SIGSTOP) the server process whose pid the query on db returns, and
 * remembers it so that tc_kill_leftovers lets it run again. */
static inline pid_t tc_stop_process(PGconn *db, const char *pid_sql)
{
    tc_stopped_pid = (pid_t)a2_test_int(db, pid_sql);
    assert_true(tc_stopped_pid > 0);
    assert_int_equal(kill(tc_stopped_pid, SIGSTOP), 0);
    return tc_stopped_pid;
}

/* Lets the stopped process run again. */
static inline void tc_continue_process(void)
{
    if (tc_stopped_pid > 0)
        assert_int_equal(kill(tc_stopped_pid, SIGCONT), 0);
    tc_stopped_pid = 0;
}

static inline void tc_kill_leftovers(void)
{
    if (tc_stopped_pid > 0)
        kill(tc_stopped_pid, SIGCONT);
    tc_stopped_pid = 0;
    for (int i = 0; i < 32; i++)
        if (tc_pids[i] > 0) {
            kill(tc_pids[i], SIGKILL);
            waitpid(tc_pids[i], NULL, 0);
            tc_pids[i] = 0;
        }
}

typedef struct {
    pid_t pid;
    char dir[64];
    char sock[128];
    char audit[128];
    char log[128];
    char slot[64];
} tc_daemon;

static inline void tc_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline char *tc_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    return buf;
}

/* Lines of a file that contain needle. */
static inline int tc_count_in_file(const char *path, const char *needle)
{
    char *t = tc_read_file(path);
    int n = 0;
    if (t) {
        for (char *p = t; (p = strstr(p, needle)) != NULL; p += strlen(needle))
            n++;
        free(t);
    }
    return n;
}

/* Waits (every 20 ms, at most timeout_ms) until path holds at least n
 * occurrences of needle: what a2-consumer writes in groups, or logs, comes
 * a moment after what caused it. Returns the last count. */
static inline int tc_wait_in_file(const char *path, const char *needle, int n,
                                  int timeout_ms)
{
    int64_t end = a2_test_now_ms() + timeout_ms;
    for (;;) {
        int got = tc_count_in_file(path, needle);
        if (got >= n || a2_test_now_ms() >= end)
            return got;
        tc_sleep_ms(20);
    }
}

static inline void tc_init(tc_daemon *d, const char *slot)
{
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "/tmp/a2-tc.XXXXXX");
    if (!mkdtemp(d->dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(d->sock, sizeof d->sock, "%s/w.sock", d->dir);
    snprintf(d->audit, sizeof d->audit, "%s/audit.jsonl", d->dir);
    snprintf(d->log, sizeof d->log, "%s/consumer.log", d->dir);
    snprintf(d->slot, sizeof d->slot, "%s", slot);
    /* a slot left by an earlier run would replay its old changes */
    PGconn *c = a2_test_connect();
    char sql[256];
    snprintf(sql, sizeof sql,
             "select pg_drop_replication_slot(slot_name) from "
             "pg_replication_slots where slot_name = '%s' and not active",
             d->slot);
    PQclear(PQexec(c, sql));
    PQfinish(c);
}

/*
 * Starts a2-consumer with the standard options plus extra (NULL-terminated),
 * stderr appended to d->log. Waits until it logs "ready:" unless expect_exit,
 * in which case it waits for the exit and returns the exit status.
 */
static inline int tc_start_args(tc_daemon *d, int expect_exit,
                                const char *const *extra)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = a2_test_bin("a2-consumer");
    static char bin[512];
    snprintf(bin, sizeof bin, "%s", argv[0]);
    argv[0] = bin;
    argv[n++] = "--db";
    argv[n++] = a2_test_db();
    argv[n++] = "--slot";
    argv[n++] = d->slot;
    argv[n++] = "--listen";
    static char listen[160];
    snprintf(listen, sizeof listen, "unix:%s", d->sock);
    argv[n++] = listen;
    argv[n++] = "--audit";
    argv[n++] = d->audit;
    argv[n++] = "--status-interval";
    argv[n++] = "100";
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    size_t before = 0;
    char *old = tc_read_file(d->log);
    if (old) {
        before = strlen(old);
        free(old);
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* never outlive a test that failed half-way */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (tc_child_file_limit) {
            struct rlimit rl = {tc_child_file_limit, tc_child_file_limit};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        if (tc_child_nofile) {
            struct rlimit rl = {tc_child_nofile, tc_child_nofile};
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 2);
        close(fd);
        fd = open("/dev/null", O_RDWR);
        dup2(fd, 0);
        dup2(fd, 1);
        close(fd);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    tc_track(pid);
    if (expect_exit) {
        int st;
        int64_t t0 = a2_test_now_ms();
        while (waitpid(pid, &st, WNOHANG) == 0) {
            if (a2_test_now_ms() - t0 > 20000) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                fail_msg("a2-consumer did not exit");
            }
            tc_sleep_ms(20);
        }
        d->pid = 0;
        tc_untrack(pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    int64_t t0 = a2_test_now_ms();
    for (;;) {
        char *t = tc_read_file(d->log);
        int ready = t && strlen(t) > before && strstr(t + before, "ready:");
        free(t);
        if (ready)
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char *log = tc_read_file(d->log);
            d->pid = 0;
            tc_untrack(pid);
            fail_msg("a2-consumer exited early (%s %d): %s",
                     WIFEXITED(st) ? "status" : "signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
                     log ? log + before : "");
        }
        if (a2_test_now_ms() - t0 > 20000)
            fail_msg("a2-consumer not ready in 20 s");
        tc_sleep_ms(20);
    }
}

static inline void tc_start(tc_daemon *d)
{
    tc_start_args(d, 0, NULL);
}

/* SIGTERM and wait; returns the exit status. */
static inline int tc_stop(tc_daemon *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int st;
    int64_t t0 = a2_test_now_ms();
    while (waitpid(d->pid, &st, WNOHANG) == 0) {
        if (a2_test_now_ms() - t0 > 15000) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            tc_untrack(d->pid);
            d->pid = 0;
            fail_msg("a2-consumer did not stop on SIGTERM");
        }
        tc_sleep_ms(10);
    }
    tc_untrack(d->pid);
    d->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline void tc_kill9(tc_daemon *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    tc_untrack(d->pid);
    d->pid = 0;
}

static inline void tc_cleanup(tc_daemon *d)
{
    if (d->pid > 0)
        tc_stop(d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", d->dir);
    PGconn *c = a2_test_connect();
    char sql[256];
    snprintf(sql, sizeof sql,
             "select pg_drop_replication_slot(slot_name) from "
             "pg_replication_slots where slot_name = '%s' and not active",
             d->slot);
    PQclear(PQexec(c, sql));
    PQfinish(c);
}

/* ---- a worker ---- */

typedef struct {
    int fd;
    msgpack_unpacker up;
} tc_worker;

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
} tc_msg;

static inline int tc_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n >= sizeof sa.sun_path)
        fail_msg("socket path too long: %s", path);
    memcpy(sa.sun_path, path, n + 1);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("connect %s: %s", path, strerror(errno));
    return fd;
}

static inline void tc_send_raw(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static inline void pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static inline int tc_connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("connect 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}

/* On a connected fd: says hello (with token unless NULL) and subscribes to
 * consumer unless NULL (log_type: NULL = not a log consumer; "*" = every
 * type; else one type). */
static inline void tc_worker_open_fd(tc_worker *w, int fd, const char *name,
                                     const char *token, const char *consumer,
                                     const char *log_type)
{
    w->fd = fd;
    msgpack_unpacker_init(&w->up, 1 << 16);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, token ? 4 : 3);
    pk_str(&pk, "t");
    pk_str(&pk, "hello");
    pk_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    pk_str(&pk, "name");
    pk_str(&pk, name);
    if (token) {
        pk_str(&pk, "token");
        pk_str(&pk, token);
    }
    if (consumer) {
        msgpack_pack_map(&pk, log_type ? 3 : 2);
        pk_str(&pk, "t");
        pk_str(&pk, "subscribe");
        pk_str(&pk, "consumer");
        pk_str(&pk, consumer);
        if (log_type) {
            pk_str(&pk, "log_types");
            if (strcmp(log_type, "*") == 0) {
                msgpack_pack_nil(&pk);
            } else {
                msgpack_pack_array(&pk, 1);
                pk_str(&pk, log_type);
            }
        }
    }
    tc_send_raw(w->fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* Connects to the Unix socket, says hello and subscribes. */
static inline void tc_worker_open(tc_worker *w, const char *sock,
                                  const char *name, const char *consumer,
                                  const char *log_type)
{
    tc_worker_open_fd(w, tc_connect(sock), name, NULL, consumer, log_type);
}

/* Subscribes a worker to the presence patches of namespace ns. */
static inline void tc_presence_sub(tc_worker *w, const char *ns)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "t");
    pk_str(&pk, "presence");
    pk_str(&pk, "ns");
    pk_str(&pk, ns);
    tc_send_raw(w->fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static inline void tc_worker_close(tc_worker *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    msgpack_unpacker_destroy(&w->up);
}

static inline void copy_str(char *dst, size_t len, msgpack_object o)
{
    if (o.type == MSGPACK_OBJECT_STR) {
        size_t n = o.via.str.size < len - 1 ? o.via.str.size : len - 1;
        memcpy(dst, o.via.str.ptr, n);
        dst[n] = '\0';
    }
}

static inline int64_t obj_int(msgpack_object o)
{
    if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)o.via.u64;
    if (o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o.via.i64;
    return -1;
}

static inline void flatten(msgpack_object o, tc_msg *m)
{
    memset(m, 0, sizeof *m);
    if (o.type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t i = 0; i < o.via.map.size; i++) {
        msgpack_object k = o.via.map.ptr[i].key, v = o.via.map.ptr[i].val;
        char key[32] = "";
        copy_str(key, sizeof key, k);
        if (!strcmp(key, "t"))
            copy_str(m->t, sizeof m->t, v);
        else if (!strcmp(key, "consumer"))
            copy_str(m->consumer, sizeof m->consumer, v);
        else if (!strcmp(key, "session"))
            copy_str(m->session, sizeof m->session, v);
        else if (!strcmp(key, "cursor"))
            copy_str(m->cursor, sizeof m->cursor, v);
        else if (!strcmp(key, "type"))
            copy_str(m->type, sizeof m->type, v);
        else if (!strcmp(key, "code"))
            copy_str(m->code, sizeof m->code, v);
        else if (!strcmp(key, "message"))
            copy_str(m->message, sizeof m->message, v);
        else if (!strcmp(key, "ns"))
            copy_str(m->ns, sizeof m->ns, v);
        else if (!strcmp(key, "participant"))
            copy_str(m->participant, sizeof m->participant, v);
        else if (!strcmp(key, "lsn"))
            m->lsn = (uint64_t)obj_int(v);
        else if (!strcmp(key, "id"))
            m->id = (uint64_t)obj_int(v);
        else if (!strcmp(key, "fields") && v.type == MSGPACK_OBJECT_MAP) {
            size_t off = 0;
            for (uint32_t j = 0; j < v.via.map.size; j++) {
                char fk[64] = "", fv[128] = "nil";
                copy_str(fk, sizeof fk, v.via.map.ptr[j].key);
                msgpack_object val = v.via.map.ptr[j].val;
                if (val.type == MSGPACK_OBJECT_STR)
                    copy_str(fv, sizeof fv, val);
                else if (val.type != MSGPACK_OBJECT_NIL)
                    snprintf(fv, sizeof fv, "%" PRId64, obj_int(val));
                int w = snprintf(m->fields + off, sizeof m->fields - off,
                                 "%s=%s;", fk, fv);
                if (w > 0 && (size_t)w < sizeof m->fields - off)
                    off += (size_t)w;
            }
        } else if (!strcmp(key, "head"))
            m->head = obj_int(v);
        else if (!strcmp(key, "idx"))
            m->idx = obj_int(v);
        else if (!strcmp(key, "clear_index"))
            m->clear_index = obj_int(v);
        else if (!strcmp(key, "sessions")) {
            if (v.type == MSGPACK_OBJECT_NIL)
                m->all_sessions = 1;
            else if (v.type == MSGPACK_OBJECT_ARRAY) {
                for (uint32_t j = 0; j < v.via.array.size && j < 8; j++)
                    copy_str(m->sessions[j], sizeof m->sessions[j],
                             v.via.array.ptr[j]);
                m->n_sessions = (int)v.via.array.size;
            }
        }
    }
}

/*
 * The next message within timeout_ms: 1 with *m, 0 on timeout, -1 when the
 * consumer closed the connection.
 */
static inline int tc_next(tc_worker *w, int timeout_ms, tc_msg *m)
{
    int64_t deadline = a2_test_now_ms() + timeout_ms;
    for (;;) {
        msgpack_unpacked res;
        msgpack_unpacked_init(&res);
        int rc = msgpack_unpacker_next(&w->up, &res);
        if (rc == MSGPACK_UNPACK_SUCCESS) {
            flatten(res.data, m);
            msgpack_unpacked_destroy(&res);
            return 1;
        }
        msgpack_unpacked_destroy(&res);
        if (rc == MSGPACK_UNPACK_PARSE_ERROR)
            fail_msg("the consumer sent bytes that are not msgpack");
        int64_t left = deadline - a2_test_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {w->fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            return 0;
        msgpack_unpacker_reserve_buffer(&w->up, 65536);
        ssize_t r = recv(w->fd, msgpack_unpacker_buffer(&w->up),
                         msgpack_unpacker_buffer_capacity(&w->up), 0);
        if (r <= 0)
            return -1;
        msgpack_unpacker_buffer_consumed(&w->up, (size_t)r);
    }
}

/* Waits for a message of type t (skipping others); 1, or 0 on timeout. */
static inline int tc_wait_for(tc_worker *w, const char *t, int timeout_ms,
                              tc_msg *m)
{
    int64_t deadline = a2_test_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - a2_test_now_ms();
        if (left <= 0)
            return 0;
        int rc = tc_next(w, (int)left, m);
        if (rc <= 0)
            return 0;
        if (strcmp(m->t, t) == 0)
            return 1;
    }
}

/* Sends a ping with id. The consumer handles a connection's frames in
 * order and answers a ping with a pong once it has handled every frame sent
 * before it: its pong is a barrier (a subscription sent before it is in
 * place). */
static inline void tc_ping(tc_worker *w, uint64_t id)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "t");
    pk_str(&pk, "ping");
    pk_str(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    tc_send_raw(w->fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* Waits for the pong of id, skipping (and dropping) the messages before
 * it; 1, or 0 on timeout or a closed connection. */
static inline int tc_wait_pong(tc_worker *w, uint64_t id, int timeout_ms)
{
    int64_t deadline = a2_test_now_ms() + timeout_ms;
    tc_msg m;
    for (;;) {
        int64_t left = deadline - a2_test_now_ms();
        if (left <= 0)
            return 0;
        if (!tc_wait_for(w, "pong", (int)left, &m))
            return 0;
        if (m.id == id)
            return 1;
    }
}

/* Ping, then wait (at most timeout_ms) for its pong; fails the test when
 * none comes. */
static inline void tc_sync(tc_worker *w, uint64_t id, int timeout_ms)
{
    tc_ping(w, id);
    if (!tc_wait_pong(w, id, timeout_ms))
        fail_msg("no pong %" PRIu64 " within %d ms", id, timeout_ms);
}

/* A TCP port free right now on 127.0.0.1. */
static inline int tc_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        fail_msg("no free port: %s", strerror(errno));
    close(fd);
    return ntohs(sa.sin_port);
}

/* GET path from 127.0.0.1:port over HTTP/1.0: the whole response
 * (headers and body, malloc'd), or NULL when the connection is refused. */
static inline char *tc_http_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return NULL;
    }
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    tc_send_raw(fd, req, strlen(req));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while (buf && len < cap - 1 &&
           (r = recv(fd, buf + len, cap - len - 1, 0)) > 0)
        len += (size_t)r;
    if (buf)
        buf[len] = '\0';
    close(fd);
    return buf;
}

/* Epoch milliseconds. */
static inline int64_t tc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
