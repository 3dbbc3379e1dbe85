/* The active lock of a2-consumer (active.h). */
#include "active.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "repl.h"

#define LOCK_SQL                                                               \
    "select pg_advisory_lock(hashtext('a2-consumer'), hashtext($1))"
#define TRY_LOCK_SQL                                                           \
    "select pg_try_advisory_lock(hashtext('a2-consumer'), hashtext($1))"

struct a2__active {
    char *conninfo;
    char *slot;
    char *lock_path; /* NULL without an audit file */
    int fd;          /* the lock file, or -1 */
    int file_held;
    PGconn *db;
    int waiting; /* the blocking lock query was sent */
    int held;    /* the advisory lock is ours */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

a2__active *a2__active_new(const char *conninfo, const char *slot,
                           const char *audit_path, char *err, size_t errlen)
{
    a2__active *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->fd = -1;
    a->conninfo = dup_or_null(conninfo ? conninfo : "");
    a->slot = dup_or_null(slot);
    if (audit_path && asprintf(&a->lock_path, "%s.lock", audit_path) < 0)
        a->lock_path = NULL;
    if (!a->conninfo || !a->slot || (audit_path && !a->lock_path)) {
        snprintf(err, errlen, "out of memory");
        a2__active_free(a);
        return NULL;
    }
    if (a->lock_path) {
        a->fd = open(a->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
        if (a->fd < 0) {
            /* beside the audit file: the same folder, the same cause */
            snprintf(err, errlen, "could not open audit file \"%s\": %s",
                     audit_path, strerror(errno));
            a2__active_free(a);
            return NULL;
        }
    }
    return a;
}

void a2__active_free(a2__active *a)
{
    if (!a)
        return;
    if (a->db)
        PQfinish(a->db);
    if (a->fd >= 0)
        close(a->fd); /* releases the flock */
    free(a->conninfo);
    free(a->slot);
    free(a->lock_path);
    free(a);
}

/* The holder a lock file names ("PID@HOST"), into buf. */
static void file_holder(const a2__active *a, char *buf, size_t len)
{
    ssize_t n = pread(a->fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            *p = '?';
}

static void write_holder(const a2__active *a)
{
    char host[256] = "", line[300];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    int n = snprintf(line, sizeof line, "%ld@%s\n", (long)getpid(), host);
    if (n > 0 && ftruncate(a->fd, 0) == 0 &&
        pwrite(a->fd, line, (size_t)n, 0) == n)
        (void)fdatasync(a->fd);
}

static void drop_db(a2__active *a)
{
    if (a->db)
        PQfinish(a->db);
    a->db = NULL;
    a->waiting = 0;
    a->held = 0;
}

static int ensure_db(a2__active *a, char *err, size_t errlen)
{
    if (a->db && PQstatus(a->db) == CONNECTION_OK)
        return 0;
    drop_db(a);
    /* its own name: an operator (or a test) that ends the consumer's
     * connections by name does not end its lock by accident */
    a->db = a2__db_connect_as(a->conninfo, "a2-consumer lock", err, errlen);
    if (!a->db)
        return -1;
    if (PQsetnonblocking(a->db, 1) != 0) {
        snprintf(err, errlen, "could not make the lock connection "
                              "non-blocking");
        drop_db(a);
        return -1;
    }
    return 0;
}

static void one_line_error(const char *prefix, PGconn *db, char *err,
                           size_t errlen)
{
    snprintf(err, errlen, "%s%s", prefix, db ? PQerrorMessage(db) : "");
    err[strcspn(err, "\n")] = '\0';
}

/* pg_try_advisory_lock on the (connected) lock connection, waiting for
 * the answer: 1 taken, 0 held elsewhere, -1 an error (the connection is
 * dropped). */
static int try_lock(a2__active *a, char *err, size_t errlen)
{
    if (PQsetnonblocking(a->db, 0) != 0) {
        snprintf(err, errlen, "could not use the lock connection");
        drop_db(a);
        return -1;
    }
    const char *v[1] = {a->slot};
    PGresult *r = PQexecParams(a->db, TRY_LOCK_SQL, 1, NULL, v, NULL, NULL, 0);
    int got = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    else
        one_line_error("could not take the active lock: ", a->db, err, errlen);
    PQclear(r);
    if (got < 0 || PQsetnonblocking(a->db, 1) != 0) {
        drop_db(a);
        return -1;
    }
    a->held = got;
    return got;
}

int a2__active_step(a2__active *a, char *msg, size_t msglen, char *err,
                    size_t errlen)
{
    msg[0] = err[0] = '\0';
    if (a->fd >= 0 && !a->file_held) {
        if (flock(a->fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno != EWOULDBLOCK) {
                snprintf(err, errlen, "could not lock \"%s\": %s",
                         a->lock_path, strerror(errno));
                return -1;
            }
            char who[128];
            file_holder(a, who, sizeof who);
            snprintf(msg, msglen,
                     "another a2-consumer (%s) holds the audit file's lock "
                     "\"%s\"",
                     who[0] ? who : "unknown", a->lock_path);
            return 0;
        }
        a->file_held = 1;
        write_holder(a);
    }
    if (a->held)
        return 1;
    if (ensure_db(a, err, errlen) != 0)
        return -1;
    if (!a->waiting) {
        int got = try_lock(a, err, errlen);
        if (got != 0)
            return got;
        /* Held elsewhere: wait for it in the server, so that the answer
         * comes the moment its holder's connection ends. */
        const char *v[1] = {a->slot};
        if (!PQsendQueryParams(a->db, LOCK_SQL, 1, NULL, v, NULL, NULL, 0)) {
            one_line_error("could not ask for the active lock: ", a->db, err,
                           errlen);
            drop_db(a);
            return -1;
        }
        a->waiting = 1;
    }
    (void)PQflush(a->db);
    if (!PQconsumeInput(a->db)) {
        one_line_error("lost the lock connection: ", a->db, err, errlen);
        drop_db(a);
        return -1;
    }
    if (PQisBusy(a->db)) {
        snprintf(msg, msglen,
                 "another a2-consumer holds the active lock of slot \"%s\"",
                 a->slot);
        return 0;
    }
    int ok = 0;
    PGresult *r;
    while ((r = PQgetResult(a->db)) != NULL) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK)
            ok = 1;
        else
            one_line_error("could not take the active lock: ", a->db, err,
                           errlen);
        PQclear(r);
    }
    a->waiting = 0;
    if (!ok) {
        drop_db(a); /* a statement_timeout, say: ask again on a new one */
        return -1;
    }
    a->held = 1;
    return 1;
}

int a2__active_fd(const a2__active *a)
{
    return a->db ? PQsocket(a->db) : -1;
}

int a2__active_check(a2__active *a, char *err, size_t errlen)
{
    if (!a->held)
        return -1;
    if (!PQconsumeInput(a->db) || PQstatus(a->db) != CONNECTION_OK) {
        one_line_error("lost the connection that holds the active lock: ",
                       a->db, err, errlen);
        drop_db(a);
        return -1;
    }
    PGnotify *n;
    while ((n = PQnotifies(a->db)) != NULL)
        PQfreemem(n);
    return 0;
}

int a2__active_retake(a2__active *a, char *err, size_t errlen)
{
    if (a->held)
        return 1;
    if (ensure_db(a, err, errlen) != 0)
        return -1;
    return try_lock(a, err, errlen);
}
