/*
 * The helpers of a2test.h: SQL on the test database, lock-wait polling,
 * auto_explain plans, clocks, files, temporary folders and the TCP
 * settings of sockets.
 */
#include "a2test.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *a2_test_db(void)
{
    const char *db = getenv("A2_TEST_DB");
    return db && *db ? db : NULL;
}

PGconn *a2_test_connect(void)
{
    const char *db = a2_test_db();
    if (!db)
        fail_msg("A2_TEST_DB is not set: run integration tests with tests/run");
    PGconn *conn = PQconnectdb(db);
    if (PQstatus(conn) != CONNECTION_OK)
        fail_msg("could not connect to %s: %s", db, PQerrorMessage(conn));
    return conn;
}

PGconn *a2_test_connect_reset(const char *sql)
{
    PGconn *conn = a2_test_connect();
    a2_test_exec(conn, sql);
    return conn;
}

void a2_test_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("query failed: %s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
}

char *a2_test_scalar(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        fail_msg("query failed: %s: %s", sql, PQerrorMessage(conn));
    char *out = NULL;
    if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
        out = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return out;
}

int64_t a2_test_int(PGconn *conn, const char *sql)
{
    char *s = a2_test_scalar(conn, sql);
    int64_t v = s ? strtoll(s, NULL, 10) : 0;
    free(s);
    return v;
}

/* Formats the arguments after fmt into the array sql. */
#define FORMAT_SQL(sql, fmt)                                                   \
    do {                                                                       \
        va_list ap;                                                            \
        va_start(ap, fmt);                                                     \
        vsnprintf(sql, sizeof sql, fmt, ap);                                   \
        va_end(ap);                                                            \
    } while (0)

void a2_test_execf(PGconn *conn, const char *fmt, ...)
{
    char sql[4096];
    FORMAT_SQL(sql, fmt);
    a2_test_exec(conn, sql);
}

int64_t a2_test_intf(PGconn *conn, const char *fmt, ...)
{
    char sql[4096];
    FORMAT_SQL(sql, fmt);
    return a2_test_int(conn, sql);
}

typedef struct plans_buf {
    char *p;
    size_t len;
} plans_buf;

static void collect_plan(void *arg, const PGresult *res)
{
    plans_buf *b = arg;
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    if (!msg)
        return;
    size_t n = strlen(msg);
    char *p = realloc(b->p, b->len + n + 2);
    if (!p)
        return;
    memcpy(p + b->len, msg, n);
    p[b->len + n] = '\n';
    p[b->len + n + 1] = '\0';
    b->p = p;
    b->len += n + 1;
}

char *a2_test_plans(PGconn *conn, const char *sql)
{
    a2_test_exec(conn, "load 'auto_explain'");
    a2_test_exec(conn, "set auto_explain.log_min_duration = 0");
    a2_test_exec(conn, "set auto_explain.log_nested_statements = on");
    a2_test_exec(conn, "set auto_explain.log_level = notice");
    a2_test_exec(conn, "set client_min_messages = notice");
    plans_buf b = {calloc(1, 1), 0};
    PQnoticeReceiver old = PQsetNoticeReceiver(conn, collect_plan, &b);
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    PQclear(res);
    PQsetNoticeReceiver(conn, old, NULL);
    a2_test_exec(conn, "set auto_explain.log_min_duration = -1");
    a2_test_exec(conn, "reset client_min_messages");
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("query failed: %s: %s", sql, PQerrorMessage(conn));
    return b.p;
}

int64_t a2_test_lock_waiters(PGconn *conn, const char *where, int64_t n,
                             int timeout_ms)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "select count(*) from pg_stat_activity where wait_event_type = "
             "'Lock'%s%s",
             where ? " and " : "", where ? where : "");
    int64_t seen = 0;
    for (int waited = 0;; waited += 10) {
        seen = a2_test_int(conn, sql);
        if (seen >= n || waited >= timeout_ms)
            return seen;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int64_t a2_test_lock_waiters_probe(const char *where, int64_t n, int timeout_ms)
{
    PGconn *probe = a2_test_connect();
    int64_t seen = a2_test_lock_waiters(probe, where, n, timeout_ms);
    PQfinish(probe);
    return seen;
}

int64_t a2_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t a2_test_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void a2_test_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

char *a2_test_read_file(const char *path)
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

int a2_test_count_in_file(const char *path, const char *needle)
{
    char *t = a2_test_read_file(path);
    int n = 0;
    if (t) {
        /* memmem with the length left: strstr under ASan measures the rest
         * of the text at every call, quadratic over a large audit file */
        size_t len = strlen(t), k = strlen(needle);
        for (char *p = t, *end = t + len;
             k > 0 && (p = memmem(p, (size_t)(end - p), needle, k)) != NULL;
             p += k)
            n++;
        free(t);
    }
    return n;
}

int a2_test_wait_in_file(const char *path, const char *needle, int n,
                         int timeout_ms)
{
    int64_t end = a2_test_now_ms() + timeout_ms;
    for (;;) {
        int got = a2_test_count_in_file(path, needle);
        if (got >= n || a2_test_now_ms() >= end)
            return got;
        a2_test_sleep_ms(20);
    }
}

int a2_test_tmpdir(char *dir, size_t dlen, const char *prefix, char *path,
                   size_t plen, const char *name)
{
    snprintf(dir, dlen, "%sXXXXXX", prefix);
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, plen, "%s/%s", dir, name);
    return 0;
}

int a2_test_tmpdir_remove(const char *dir, const char *path)
{
    unlink(path);
    return rmdir(dir) == 0 ? 0 : -1;
}

const char *a2_test_bin(const char *name)
{
    static char path[4096];
    const char *bin = getenv("A2_BIN");
    snprintf(path, sizeof path, "%s/%s", bin ? bin : "build/release/bin", name);
    return path;
}

int a2_test_tcp_sockets(int pid, int port, const int *skip, int nskip,
                        a2_test_tcp *out, int max)
{
    if (pid == 0)
        pid = (int)getpid();
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0)
        return -1;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    if (!d) {
        close(pidfd);
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] == '.')
            continue;
        int target = atoi(e->d_name);
        int skipped = 0;
        for (int i = 0; i < nskip; i++)
            skipped |= pid == (int)getpid() && skip[i] == target;
        if (skipped)
            continue;
        int fd = (int)syscall(SYS_pidfd_getfd, pidfd, target, 0);
        if (fd < 0)
            continue;
        struct sockaddr_storage peer;
        socklen_t len = sizeof peer;
        int type = 0;
        socklen_t tl = sizeof type;
        int peer_port = -1;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
            type == SOCK_STREAM &&
            getpeername(fd, (struct sockaddr *)&peer, &len) == 0) {
            if (peer.ss_family == AF_INET)
                peer_port = ntohs(((struct sockaddr_in *)&peer)->sin_port);
            else if (peer.ss_family == AF_INET6)
                peer_port = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port);
        }
        if (peer_port == port) {
            a2_test_tcp *t = &out[n++];
            *t = (a2_test_tcp){0};
            socklen_t l = sizeof(int);
            getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &t->keepalive, &l);
            l = sizeof(int);
            getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &t->idle, &l);
            l = sizeof(int);
            getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &t->interval, &l);
            l = sizeof(int);
            getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &t->count, &l);
            l = sizeof(int);
            getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &t->user_timeout_ms,
                       &l);
        }
        close(fd);
    }
    closedir(d);
    close(pidfd);
    return n;
}
