/*
 * The wire v1 worker of wire_client.h: hello, subscribe, presence and ping
 * frames packed with msgpack-c; the consumer's messages unpacked and
 * flattened; the socket helpers.
 */
#include "wire_client.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "a2test.h"

int a2_test_connect_unix(const char *path)
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

void a2_test_send(int fd, const void *p, size_t n)
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

void a2_test_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* 127.0.0.1:port. */
static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

int a2_test_connect_tcp(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = loopback(port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        fail_msg("connect 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}

void a2_test_worker_open_fd(a2_test_worker *w, int fd, const char *name,
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
    a2_test_pack_str(&pk, "t");
    a2_test_pack_str(&pk, "hello");
    a2_test_pack_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    a2_test_pack_str(&pk, "name");
    a2_test_pack_str(&pk, name);
    if (token) {
        a2_test_pack_str(&pk, "token");
        a2_test_pack_str(&pk, token);
    }
    if (consumer) {
        msgpack_pack_map(&pk, log_type ? 3 : 2);
        a2_test_pack_str(&pk, "t");
        a2_test_pack_str(&pk, "subscribe");
        a2_test_pack_str(&pk, "consumer");
        a2_test_pack_str(&pk, consumer);
        if (log_type) {
            a2_test_pack_str(&pk, "log_types");
            if (strcmp(log_type, "*") == 0) {
                msgpack_pack_nil(&pk);
            } else {
                msgpack_pack_array(&pk, 1);
                a2_test_pack_str(&pk, log_type);
            }
        }
    }
    a2_test_send(w->fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

void a2_test_worker_open(a2_test_worker *w, const char *sock, const char *name,
                         const char *consumer, const char *log_type)
{
    a2_test_worker_open_fd(w, a2_test_connect_unix(sock), name, NULL, consumer,
                           log_type);
}

void a2_test_worker_join(a2_test_worker *w, const char *sock, const char *name,
                         const char *consumer, const char *log_type, int resync)
{
    a2_test_msg m;
    a2_test_worker_open(w, sock, name, consumer, log_type);
    if (!a2_test_worker_wait_for(w, "welcome", 5000, &m))
        fail_msg("no welcome");
    if (resync && !a2_test_worker_wait_for(w, "resync", 5000, &m))
        fail_msg("no resync after the subscription of %s", name);
}

/* Sends {t: t, key: str} or, when str is NULL, {t: t, key: num}. */
static void send_pair(int fd, const char *t, const char *key, const char *str,
                      uint64_t num)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    a2_test_pack_str(&pk, "t");
    a2_test_pack_str(&pk, t);
    a2_test_pack_str(&pk, key);
    if (str)
        a2_test_pack_str(&pk, str);
    else
        msgpack_pack_uint64(&pk, num);
    a2_test_send(fd, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

void a2_test_worker_presence(a2_test_worker *w, const char *ns)
{
    send_pair(w->fd, "presence", "ns", ns, 0);
}

void a2_test_worker_close(a2_test_worker *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    msgpack_unpacker_destroy(&w->up);
}

/* Copies a msgpack string into dst (cut to len - 1 bytes); leaves dst as
 * it is for anything else. */
static void copy_str(char *dst, size_t len, msgpack_object o)
{
    if (o.type == MSGPACK_OBJECT_STR) {
        size_t n = o.via.str.size < len - 1 ? o.via.str.size : len - 1;
        memcpy(dst, o.via.str.ptr, n);
        dst[n] = '\0';
    }
}

/* A msgpack integer, or -1 for anything else. */
static int64_t obj_int(msgpack_object o)
{
    if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)o.via.u64;
    if (o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o.via.i64;
    return -1;
}

/* The string fields of a2_test_msg, by the key of the message map. */
#define STR_FIELD(name)                                                        \
    {                                                                          \
#name, offsetof(a2_test_msg, name), sizeof(((a2_test_msg *)0)->name)   \
    }
static const struct {
    const char *key;
    size_t off, len;
} str_fields[] = {
        STR_FIELD(t),       STR_FIELD(consumer), STR_FIELD(session),
        STR_FIELD(cursor),  STR_FIELD(type),     STR_FIELD(code),
        STR_FIELD(message), STR_FIELD(ns),       STR_FIELD(participant)};

/* A presence patch's fields as "k=v;...", v a string, a number or "nil". */
static void flatten_fields(msgpack_object v, a2_test_msg *m)
{
    size_t off = 0;
    for (uint32_t j = 0; j < v.via.map.size; j++) {
        char fk[64] = "", fv[128] = "nil";
        copy_str(fk, sizeof fk, v.via.map.ptr[j].key);
        msgpack_object val = v.via.map.ptr[j].val;
        if (val.type == MSGPACK_OBJECT_STR)
            copy_str(fv, sizeof fv, val);
        else if (val.type != MSGPACK_OBJECT_NIL)
            snprintf(fv, sizeof fv, "%" PRId64, obj_int(val));
        int w = snprintf(m->fields + off, sizeof m->fields - off, "%s=%s;", fk,
                         fv);
        if (w > 0 && (size_t)w < sizeof m->fields - off)
            off += (size_t)w;
    }
}

/* A move's sessions: nil for all of them, else the first 8 and the count. */
static void flatten_sessions(msgpack_object v, a2_test_msg *m)
{
    if (v.type == MSGPACK_OBJECT_NIL) {
        m->all_sessions = 1;
    } else if (v.type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t j = 0; j < v.via.array.size && j < 8; j++)
            copy_str(m->sessions[j], sizeof m->sessions[j], v.via.array.ptr[j]);
        m->n_sessions = (int)v.via.array.size;
    }
}

/* The value v of key into *m. */
static void flatten_key(const char *key, msgpack_object v, a2_test_msg *m)
{
    for (size_t f = 0; f < sizeof str_fields / sizeof *str_fields; f++)
        if (!strcmp(key, str_fields[f].key)) {
            copy_str((char *)m + str_fields[f].off, str_fields[f].len, v);
            return;
        }
    if (!strcmp(key, "lsn"))
        m->lsn = (uint64_t)obj_int(v);
    else if (!strcmp(key, "id"))
        m->id = (uint64_t)obj_int(v);
    else if (!strcmp(key, "fields") && v.type == MSGPACK_OBJECT_MAP)
        flatten_fields(v, m);
    else if (!strcmp(key, "head"))
        m->head = obj_int(v);
    else if (!strcmp(key, "idx"))
        m->idx = obj_int(v);
    else if (!strcmp(key, "clear_index"))
        m->clear_index = obj_int(v);
    else if (!strcmp(key, "sessions"))
        flatten_sessions(v, m);
}

/* The fields of a message map the tests look at, into *m. */
static void flatten(msgpack_object o, a2_test_msg *m)
{
    memset(m, 0, sizeof *m);
    if (o.type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t i = 0; i < o.via.map.size; i++) {
        char key[32] = "";
        copy_str(key, sizeof key, o.via.map.ptr[i].key);
        flatten_key(key, o.via.map.ptr[i].val, m);
    }
}

int a2_test_worker_next(a2_test_worker *w, int timeout_ms, a2_test_msg *m)
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

int a2_test_worker_wait_for(a2_test_worker *w, const char *t, int timeout_ms,
                            a2_test_msg *m)
{
    int64_t deadline = a2_test_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - a2_test_now_ms();
        if (left <= 0)
            return 0;
        int rc = a2_test_worker_next(w, (int)left, m);
        if (rc <= 0)
            return 0;
        if (strcmp(m->t, t) == 0)
            return 1;
    }
}

void a2_test_worker_ping(a2_test_worker *w, uint64_t id)
{
    send_pair(w->fd, "ping", "id", NULL, id);
}

int a2_test_worker_wait_pong(a2_test_worker *w, uint64_t id, int timeout_ms)
{
    int64_t deadline = a2_test_now_ms() + timeout_ms;
    a2_test_msg m;
    for (;;) {
        int64_t left = deadline - a2_test_now_ms();
        if (left <= 0)
            return 0;
        if (!a2_test_worker_wait_for(w, "pong", (int)left, &m))
            return 0;
        if (m.id == id)
            return 1;
    }
}

void a2_test_worker_sync(a2_test_worker *w, uint64_t id, int timeout_ms)
{
    a2_test_worker_ping(w, id);
    if (!a2_test_worker_wait_pong(w, id, timeout_ms))
        fail_msg("no pong %" PRIu64 " within %d ms", id, timeout_ms);
}

int a2_test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = loopback(0);
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)
        fail_msg("no free port: %s", strerror(errno));
    close(fd);
    return ntohs(sa.sin_port);
}

char *a2_test_http_get(int port, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = loopback(port);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return NULL;
    }
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    a2_test_send(fd, req, strlen(req));
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

void a2_test_expect_healthz(int port)
{
    char *h = a2_test_http_get(port, "/healthz");
    assert_non_null(h);
    assert_non_null(strstr(h, "200 OK"));
    free(h);
}
