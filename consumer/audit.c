/*
 * Audit file: append, group fsync, tail recovery, state file.
 */
#include "audit.h"

#include "../common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The group fsync runs on a helper thread so the daemon's loop never waits
 * for the disk; it reports through an eventfd. Only the fields under `mu`
 * are shared; everything else belongs to the caller's thread. */
typedef struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    int efd;
    /* under mu */
    int stop;
    int requested;
    int fd;
    uint64_t req_lsn;
    int completed;
    uint64_t done_lsn;
    int sync_errno;
    /* The state file is written after the fsync when asked (its own two
     * fsyncs stay off the daemon's loop too). */
    const char *state_path;
    int state_wanted;
    int state_done;      /* the last request wrote it (at done_lsn) */
    char state_err[512]; /* or why it could not */
} syncer;

struct a2__audit {
    char *path;
    char *state_path;
    int fd;
    int dirty;
    int64_t dirty_since;
    size_t pending_lines;
    uint64_t marked;  /* every transaction up to here is written */
    uint64_t durable; /* ... and fsynced */
    uint64_t state_written;
    int64_t state_at; /* monotonic ms of the last state file write */
    /* The end of the last transaction marked after lines of its own were
     * written (the "lsn" of the file's last line), and that position once
     * fsynced. A restart finds in the file no more than the larger of it
     * and the state file's position: nothing beyond may be confirmed. */
    int unmarked_lines; /* lines written since the last mark */
    uint64_t held;
    uint64_t held_durable;
    uint64_t sync_held; /* held when the outstanding fsync was requested */
    uint64_t lines;
    int outstanding; /* a background fsync was requested, not yet finished */
    int failed; /* a write or fsync failed: what is marked is not all there */
    syncer sy;
    char *wbuf; /* WBUF_MAX bytes: lines a2__audit_flush has yet to write */
    size_t wlen;
};

/* Lines are gathered up to this many bytes between flushes. */
#define WBUF_MAX (256 * 1024)

static int write_all(a2__audit *a, const char *buf, size_t len, char *err,
                     size_t errlen)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(a->fd, buf + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            a->failed = 1;
            snprintf(err, errlen, "could not write audit file \"%s\": %s",
                     a->path, strerror(errno));
            return -1;
        }
        off += (size_t)w;
    }
    return 0;
}

int a2__audit_flush(a2__audit *a, char *err, size_t errlen)
{
    if (!a || a->wlen == 0)
        return 0;
    size_t n = a->wlen;
    a->wlen = 0; /* a failed write leaves a torn tail; the next open cuts it */
    return write_all(a, a->wbuf, n, err, errlen);
}

static int write_state(const char *spath, uint64_t lsn, char *err,
                       size_t errlen);

static void *sync_main(void *arg)
{
    syncer *sy = arg;
    pthread_mutex_lock(&sy->mu);
    for (;;) {
        while (!sy->stop && !sy->requested)
            pthread_cond_wait(&sy->cv, &sy->mu);
        if (sy->stop && !sy->requested)
            break;
        int fd = sy->fd;
        uint64_t lsn = sy->req_lsn;
        int want_state = sy->state_wanted;
        sy->requested = 0;
        pthread_mutex_unlock(&sy->mu);
        int rc = fdatasync(fd);
        int e = rc != 0 ? errno : 0;
        char serr[512] = "";
        int state_rc = -1;
        if (e == 0 && want_state)
            state_rc = write_state(sy->state_path, lsn, serr, sizeof serr);
        pthread_mutex_lock(&sy->mu);
        sy->completed = 1;
        sy->done_lsn = lsn;
        sy->sync_errno = e;
        sy->state_done = state_rc == 0;
        memcpy(sy->state_err, serr, sizeof serr);
        uint64_t one = 1;
        if (write(sy->efd, &one, sizeof one) < 0) {
            /* the counter cannot overflow here; nothing to do */
        }
    }
    pthread_mutex_unlock(&sy->mu);
    return NULL;
}

static int sync_start_thread(a2__audit *a)
{
    syncer *sy = &a->sy;
    if (sy->started)
        return 0;
    sy->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sy->efd < 0)
        return -1;
    sy->state_path = a->state_path;
    pthread_mutex_init(&sy->mu, NULL);
    pthread_cond_init(&sy->cv, NULL);
    if (pthread_create(&sy->thread, NULL, sync_main, sy) != 0) {
        close(sy->efd);
        sy->efd = -1;
        pthread_mutex_destroy(&sy->mu);
        pthread_cond_destroy(&sy->cv);
        return -1;
    }
    sy->started = 1;
    return 0;
}

/* Waits until the helper is idle (no request pending or running). */
static void sync_drain(a2__audit *a)
{
    syncer *sy = &a->sy;
    if (!sy->started || !a->outstanding)
        return;
    for (;;) {
        pthread_mutex_lock(&sy->mu);
        int done = sy->completed;
        pthread_mutex_unlock(&sy->mu);
        if (done)
            break;
        a2__sleep_ms(1);
    }
}

static void sync_stop_thread(a2__audit *a)
{
    syncer *sy = &a->sy;
    if (!sy->started)
        return;
    pthread_mutex_lock(&sy->mu);
    sy->stop = 1;
    pthread_cond_signal(&sy->cv);
    pthread_mutex_unlock(&sy->mu);
    pthread_join(sy->thread, NULL);
    pthread_mutex_destroy(&sy->mu);
    pthread_cond_destroy(&sy->cv);
    close(sy->efd);
    sy->started = 0;
}

static char *state_path_of(const char *path)
{
    size_t n = strlen(path);
    char *s = malloc(n + 5);
    if (s) {
        memcpy(s, path, n);
        memcpy(s + n, ".lsn", 5);
    }
    return s;
}

/* Reads the state file; *lsn = 0 when it does not exist. */
static int read_state(const char *spath, uint64_t *lsn, char *err,
                      size_t errlen)
{
    *lsn = 0;
    FILE *f = fopen(spath, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "could not open audit state file \"%s\": %s",
                 spath, strerror(errno));
        return -1;
    }
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0)
        return 0;
    if (a2__lsn_parse(buf, lsn) != 0) {
        snprintf(err, errlen, "invalid audit state file \"%s\": \"%s\"", spath,
                 buf);
        return -1;
    }
    return 0;
}

static int write_state(const char *spath, uint64_t lsn, char *err,
                       size_t errlen)
{
    char tmp[4096], text[32];
    int fd = -1;
    snprintf(tmp, sizeof tmp, "%s.tmp", spath);
    a2__lsn_format(lsn, text, sizeof text);
    size_t n = strlen(text);
    text[n++] = '\n';
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        goto error;
    if (write(fd, text, n) != (ssize_t)n)
        goto error;
    if (fsync(fd) != 0)
        goto error;
    if (close(fd) != 0) {
        fd = -1;
        goto error;
    }
    fd = -1;
    if (rename(tmp, spath) != 0)
        goto error;
    /* Make the rename durable. */
    char *dcopy = strdup(spath);
    if (dcopy) {
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dcopy);
    }
    return 0;
error:
    snprintf(err, errlen, "could not write audit state file \"%s\": %s", spath,
             strerror(errno ? errno : EIO));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return -1;
}

/*
 * The line ending just before offset end (end is just past its '\n', or the
 * start of a region that starts a line). Sets *start and returns a new
 * NUL-terminated copy without the '\n', or NULL at the file start or on error
 * (*ioerr set).
 */
static char *prev_line(int fd, off_t end, off_t *start, int *ioerr)
{
    *ioerr = 0;
    if (end <= 0)
        return NULL;
    off_t stop = end - 1; /* the '\n' of this line */
    char *buf = NULL;
    size_t have = 0;
    off_t pos = stop;
    for (;;) {
        size_t chunk = pos > 4096 ? 4096 : (size_t)pos;
        if (chunk == 0) {
            *start = 0;
            break;
        }
        char *nb = malloc(have + chunk + 1);
        if (!nb) {
            *ioerr = ENOMEM;
            free(buf);
            return NULL;
        }
        ssize_t r = pread(fd, nb, chunk, pos - (off_t)chunk);
        if (r != (ssize_t)chunk) {
            *ioerr = r < 0 ? errno : EIO;
            free(nb);
            free(buf);
            return NULL;
        }
        if (have)
            memcpy(nb + chunk, buf, have);
        free(buf);
        buf = nb;
        have += chunk;
        pos -= (off_t)chunk;
        char *nl = memrchr(buf, '\n', chunk);
        if (nl) {
            size_t skip = (size_t)(nl - buf) + 1;
            memmove(buf, buf + skip, have - skip);
            have -= skip;
            *start = pos + (off_t)skip;
            break;
        }
    }
    if (!buf) {
        buf = malloc(1);
        if (!buf) {
            *ioerr = ENOMEM;
            return NULL;
        }
    }
    buf[have] = '\0';
    return buf;
}

/* The "lsn" of an audit line; -1 when the line has none. */
static int line_lsn(const char *line, uint64_t *lsn)
{
    json_t *j = json_loads(line, 0, NULL);
    if (!j)
        return -1;
    int rc = a2__lsn_parse(json_string_value(json_object_get(j, "lsn")), lsn);
    json_decref(j);
    return rc;
}

int a2__audit_scan(const char *path, a2__audit_resume *resume, int repair,
                   char *err, size_t errlen)
{
    int rc = -1, fd = -1;
    char *line = NULL, *spath = NULL;
    memset(resume, 0, sizeof *resume);
    spath = state_path_of(path);
    if (!spath) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    uint64_t state = 0;
    if (read_state(spath, &state, err, errlen) != 0)
        goto done;
    fd = open(path, (repair ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            resume->done = state;
            rc = 0;
        } else {
            snprintf(err, errlen, "could not open audit file \"%s\": %s", path,
                     strerror(errno));
        }
        goto done;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "could not stat audit file \"%s\": %s", path,
                 strerror(errno));
        goto done;
    }
    off_t end = st.st_size;
    /* A torn last line: cut it off. */
    if (end > 0) {
        char c;
        if (pread(fd, &c, 1, end - 1) != 1) {
            snprintf(err, errlen, "could not read audit file \"%s\": %s", path,
                     strerror(errno));
            goto done;
        }
        if (c != '\n') {
            off_t start;
            int ioerr;
            /* Pretend the torn text ends with a newline to find its start. */
            line = prev_line(fd, end + 1, &start, &ioerr);
            if (!line && ioerr) {
                snprintf(err, errlen, "could not read audit file \"%s\": %s",
                         path, strerror(ioerr));
                goto done;
            }
            /* prev_line read [start, end): the torn bytes. Only a record
             * of ours is cut: anything else means a wrong path. */
            if (strncmp(line, "{\"lsn\":\"",
                        strlen(line) < 8 ? strlen(line) : 8) != 0) {
                snprintf(err, errlen,
                         "audit file \"%s\" ends with an incomplete line "
                         "that is not an audit record",
                         path);
                goto done;
            }
            resume->truncated_bytes = (size_t)(end - start);
            end = start;
            free(line);
            line = NULL;
            if (repair) {
                if (ftruncate(fd, end) != 0 || fsync(fd) != 0) {
                    snprintf(err, errlen,
                             "could not truncate torn audit line in \"%s\": %s",
                             path, strerror(errno));
                    goto done;
                }
            }
        }
    }
    uint64_t last = 0, before = 0;
    size_t k = 0;
    while (end > 0) {
        off_t start;
        int ioerr;
        line = prev_line(fd, end, &start, &ioerr);
        if (!line) {
            if (ioerr) {
                snprintf(err, errlen, "could not read audit file \"%s\": %s",
                         path, strerror(ioerr));
                goto done;
            }
            break;
        }
        uint64_t l;
        if (line[0] == '\0') { /* empty line: skip */
            free(line);
            line = NULL;
            end = start;
            continue;
        }
        if (line_lsn(line, &l) != 0) {
            snprintf(err, errlen,
                     "audit file \"%s\" has a line without a valid \"lsn\" "
                     "at byte %lld",
                     path, (long long)start);
            goto done;
        }
        free(line);
        line = NULL;
        if (k == 0) {
            last = l;
            k = 1;
        } else if (l == last) {
            k++;
        } else {
            before = l;
            break;
        }
        end = start;
    }
    resume->done = before > state ? before : state;
    if (k > 0 && last > resume->done) {
        resume->partial_lsn = last;
        resume->partial_lines = k;
    }
    rc = 0;
done:
    free(line);
    free(spath);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int open_append(a2__audit *a, char *err, size_t errlen)
{
    int fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "could not open audit file \"%s\": %s", a->path,
                 strerror(errno));
        return -1;
    }
    a->fd = fd;
    return 0;
}

a2__audit *a2__audit_open(const char *path, a2__audit_resume *resume, char *err,
                          size_t errlen)
{
    a2__audit *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->fd = -1;
    a->path = strdup(path);
    a->state_path = state_path_of(path);
    if (!a->path || !a->state_path) {
        snprintf(err, errlen, "out of memory");
        goto error;
    }
    /* Create first so that an unwritable path fails with its own reason. */
    if (open_append(a, err, errlen) != 0)
        goto error;
    if (a2__audit_scan(path, resume, 1, err, errlen) != 0)
        goto error;
    /* A partial transaction is marked once its remaining lines are written. */
    a->marked = a->durable = a->state_written = resume->done;
    a->held = a->held_durable = resume->done;
    /* The state file must be writable too: find out now, not at the first
     * group fsync. */
    if (write_state(a->state_path, resume->done, err, errlen) != 0)
        goto error;
    a->state_at = a2__mono_ms();
    return a;
error:
    a2__audit_close(a);
    return NULL;
}

int a2__audit_write(a2__audit *a, const char *buf, size_t len, size_t lines,
                    char *err, size_t errlen)
{
    if (!a->wbuf)
        a->wbuf = malloc(WBUF_MAX); /* without it, lines are written at once */
    if (a->wlen + len > WBUF_MAX && a2__audit_flush(a, err, errlen) != 0)
        return -1;
    if (a->wbuf && len < WBUF_MAX) {
        memcpy(a->wbuf + a->wlen, buf, len);
        a->wlen += len;
    } else if (write_all(a, buf, len, err, errlen) != 0) {
        return -1;
    }
    if (len > 0) {
        a->unmarked_lines = 1;
        if (!a->dirty)
            a->dirty_since = a2__mono_ms();
        a->dirty = 1;
    }
    a->pending_lines += lines;
    a->lines += lines;
    return 0;
}

void a2__audit_mark(a2__audit *a, uint64_t lsn)
{
    if (lsn > a->marked)
        a->marked = lsn;
    if (a->unmarked_lines && lsn > a->held)
        a->held = lsn;
    a->unmarked_lines = 0;
    if (!a->dirty && !a->outstanding) {
        a->durable = a->marked;
        a->held_durable = a->held;
    }
}

int a2__audit_dirty(const a2__audit *a)
{
    return a->dirty;
}

int64_t a2__audit_dirty_since(const a2__audit *a)
{
    return a->dirty ? a->dirty_since : 0;
}

size_t a2__audit_pending_lines(const a2__audit *a)
{
    return a->pending_lines;
}

static int write_state_if_due(a2__audit *a, int state_interval_ms, char *err,
                              size_t errlen)
{
    int64_t now = a2__mono_ms();
    if (a->durable > a->state_written &&
        now - a->state_at >= state_interval_ms) {
        if (write_state(a->state_path, a->durable, err, errlen) != 0)
            return -1;
        a->state_written = a->durable;
        a->state_at = now;
    }
    return 0;
}

int a2__audit_event_fd(a2__audit *a)
{
    return a->sy.started ? a->sy.efd : -1;
}

/* The state file is behind what is marked and its interval passed. */
static int state_due(const a2__audit *a, int state_interval_ms)
{
    return a->marked > a->state_written &&
           a2__mono_ms() - a->state_at >= state_interval_ms;
}

int a2__audit_sync_start(a2__audit *a, int state_interval_ms, char *err,
                         size_t errlen)
{
    if (a->outstanding || (!a->dirty && !state_due(a, state_interval_ms)))
        return 0;
    if (a2__audit_flush(a, err, errlen) != 0)
        return -1;
    if (sync_start_thread(a) != 0) /* no thread: fsync here instead */
        return a2__audit_sync(a, 1000, err, errlen);
    syncer *sy = &a->sy;
    pthread_mutex_lock(&sy->mu);
    sy->fd = a->fd;
    sy->req_lsn = a->marked;
    sy->state_wanted = state_due(a, state_interval_ms);
    a->sync_held = a->held;
    sy->requested = 1;
    sy->completed = 0;
    pthread_cond_signal(&sy->cv);
    pthread_mutex_unlock(&sy->mu);
    a->outstanding = 1;
    a->dirty = 0;
    a->pending_lines = 0;
    return 0;
}

int a2__audit_sync_finish(a2__audit *a, char *err, size_t errlen)
{
    syncer *sy = &a->sy;
    if (!sy->started || !a->outstanding)
        return 0;
    pthread_mutex_lock(&sy->mu);
    int done = sy->completed;
    uint64_t lsn = sy->done_lsn;
    int e = sy->sync_errno;
    int wanted = sy->state_wanted, written = sy->state_done;
    if (done && wanted && !written && e == 0)
        snprintf(err, errlen, "%s", sy->state_err);
    pthread_mutex_unlock(&sy->mu);
    if (!done)
        return 0;
    /* The helper signals under mu in the same step that sets completed, so
     * the signal is there now: consume it, or poll would report it on every
     * turn until the next fsync. Read before the flag, a signal sent after
     * the read and before the lock would be left behind. */
    uint64_t n;
    if (read(sy->efd, &n, sizeof n) < 0) {
        /* already consumed by an earlier call: nothing left to clear */
    }
    a->outstanding = 0;
    if (e != 0) {
        a->failed = 1;
        snprintf(err, errlen, "could not fsync audit file \"%s\": %s", a->path,
                 strerror(e));
        return -1;
    }
    if (wanted && !written)
        return -1; /* err holds the helper's reason */
    if (written) {
        a->state_written = lsn;
        a->state_at = a2__mono_ms();
    }
    if (lsn > a->durable)
        a->durable = lsn;
    if (a->sync_held > a->held_durable)
        a->held_durable = a->sync_held;
    /* nothing written since the request: everything marked is covered */
    if (!a->dirty) {
        if (a->marked > a->durable)
            a->durable = a->marked;
        a->held_durable = a->held;
    }
    return 0;
}

int a2__audit_busy(const a2__audit *a)
{
    return a->outstanding;
}

int a2__audit_sync(a2__audit *a, int state_interval_ms, char *err,
                   size_t errlen)
{
    if (a->outstanding) {
        sync_drain(a);
        if (a2__audit_sync_finish(a, err, errlen) != 0)
            return -1;
    }
    if (a->dirty) {
        if (a2__audit_flush(a, err, errlen) != 0)
            return -1;
        if (fdatasync(a->fd) != 0) {
            a->failed = 1;
            snprintf(err, errlen, "could not fsync audit file \"%s\": %s",
                     a->path, strerror(errno));
            return -1;
        }
        a->dirty = 0;
        a->pending_lines = 0;
    }
    a->durable = a->marked;
    a->held_durable = a->held;
    return write_state_if_due(a, state_interval_ms, err, errlen);
}

uint64_t a2__audit_durable(const a2__audit *a)
{
    return a->durable;
}

uint64_t a2__audit_confirmable(const a2__audit *a)
{
    uint64_t c = a->held_durable > a->state_written ? a->held_durable
                                                    : a->state_written;
    return c < a->durable ? c : a->durable;
}

uint64_t a2__audit_lines(const a2__audit *a)
{
    return a->lines;
}

int a2__audit_reopen(a2__audit *a, char *err, size_t errlen)
{
    if (a2__audit_sync(a, 0, err, errlen) != 0)
        return -1;
    int old = a->fd;
    if (open_append(a, err, errlen) != 0) {
        a->fd = old;
        return -1;
    }
    close(old);
    return 0;
}

void a2__audit_close(a2__audit *a)
{
    if (!a)
        return;
    sync_drain(a);
    sync_stop_thread(a);
    a->outstanding = 0;
    if (a->fd >= 0) {
        /* The position file moves only over lines known to be in the file:
         * after a failed write or fsync the file may end short of what is
         * marked (a torn line, lines never written), and the next start
         * writes the rest. */
        char err[256];
        if (!a->failed && a2__audit_flush(a, err, sizeof err) != 0)
            fprintf(stderr, "a2-consumer: %s\n", err);
        if (!a->failed && fdatasync(a->fd) != 0)
            a->failed = 1;
        if (!a->failed) {
            a->dirty = 0;
            a->durable = a->marked;
            if (a->durable > a->state_written && a->state_path)
                (void)write_state(a->state_path, a->durable, err, sizeof err);
        }
        close(a->fd);
    }
    free(a->wbuf);
    free(a->path);
    free(a->state_path);
    free(a);
}
