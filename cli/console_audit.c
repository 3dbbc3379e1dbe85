/*
 * `a2 console`: what it reads from a2-consumer's audit trail (JSON lines,
 * docs/consumer.md).
 *
 * The overview and an event's page read only the end of the file (a
 * bounded read: RECENT_BYTES, HISTORY_BYTES), from the first whole line in
 * it. The live tail follows the file as `a2 audit --follow` does: it waits
 * for a partly written last line, and starts again from the top of the
 * file when the file is rotated (a new file at the path) or truncated. It
 * writes text/event-stream: one `data:` message per matching line (the
 * line as it is), with an id "INODE:OFFSET" that a reconnecting client
 * sends back to resume where it was, and `event: notice` messages (the
 * file missing, rotated, truncated).
 */
#include "cli.h"
#include "console.h"

#include "../common/buf.h"
#include "../common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECENT_BYTES   (4 * 1024 * 1024)
#define HISTORY_BYTES  (64 * 1024 * 1024)
#define HISTORY_MAX    1000
#define TAIL_BACKLOG   (4 * 1024 * 1024)
#define MAX_LINE       (1024 * 1024)
#define FOLLOW_POLL_MS 200
#define KEEPALIVE_MS   15000
#define FOLLOW_READ    (256 * 1024)

/* ── times and lines ─────────────────────────────────────────────────── */

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int64_t a2__con_parse_rfc3339(const char *s)
{
    int y, mo, d, h, mi, sec, ms = 0;
    if (!s || strlen(s) < 20 || digits(s, 4, &y) || s[4] != '-' ||
        digits(s + 5, 2, &mo) || s[7] != '-' || digits(s + 8, 2, &d) ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &mi) ||
        s[16] != ':' || digits(s + 17, 2, &sec))
        return -1;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        int n = 0;
        while (*p >= '0' && *p <= '9') {
            if (n < 3)
                ms = ms * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0)
            return -1;
        for (; n < 3; n++)
            ms *= 10;
    }
    if ((*p != 'Z' && *p != 'z') || p[1])
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec};
    return (int64_t)timegm(&tm) * 1000 + ms;
}

/* The end of the file, from its first whole line: a malloc'd buffer of
 * *len bytes that started at *start, or NULL with err. */
static char *read_end(const char *path, size_t max, size_t *len, off_t *start,
                      off_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "could not open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "could not stat %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    off_t from = st.st_size > (off_t)max ? st.st_size - (off_t)max : 0;
    size_t want = (size_t)(st.st_size - from);
    char *buf = malloc(want + 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory");
        close(fd);
        return NULL;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t n = pread(fd, buf + got, want - got, from + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "could not read %s: %s", path,
                     strerror(errno));
            free(buf);
            close(fd);
            return NULL;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    size_t skip = 0;
    if (from > 0) { /* the cut line is not whole */
        char *nl = memchr(buf, '\n', got);
        skip = nl ? (size_t)(nl - buf) + 1 : got;
    }
    memmove(buf, buf + skip, got - skip);
    *len = got - skip;
    buf[*len] = '\0';
    *start = from + (off_t)skip;
    *size = from + (off_t)got;
    return buf;
}

/* read_end for an answer: on failure NULL, with doc's "error" saying why. */
static char *read_end_for(json_t *doc, const char *path, size_t max,
                          size_t *len, off_t *start, off_t *size)
{
    char err[512];
    char *buf = read_end(path, max, len, start, size, err, sizeof err);
    if (!buf)
        json_object_set_new(doc, "error", a2__con_jstr(err));
    return buf;
}

/* ── the overview's completions ──────────────────────────────────────── */

json_t *a2__con_audit_recent(const char *path, int64_t now_ms,
                             int64_t window_ms)
{
    json_t *doc = json_object(), *per = json_object();
    json_object_set_new(doc, "per_consumer", per);
    json_object_set_new(doc, "window_ms", json_integer(window_ms));
    size_t len;
    off_t start, size;
    char *buf = read_end_for(doc, path, RECENT_BYTES, &len, &start, &size);
    if (!buf) {
        json_object_set_new(doc, "covered_ms", json_integer(0));
        return doc;
    }
    int64_t from = now_ms - window_ms, first_at = -1;
    for (char *p = buf; p < buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        if (!nl)
            break; /* a line still being written */
        size_t n = (size_t)(nl - p);
        bool first = first_at < 0;
        bool done = memmem(p, n, "\"transition\":\"completed\"", 24) ||
                    memmem(p, n, "\"transition\":\"went_idle\"", 24);
        if (first || done) {
            json_t *line = json_loadb(p, n, 0, NULL);
            int64_t at = a2__con_parse_rfc3339(a2__cli_audit_str(line, "at"));
            if (first && at >= 0)
                first_at = at;
            const char *tr = a2__cli_audit_str(line, "transition");
            const char *consumer = a2__cli_audit_str(line, "consumer");
            if (at >= from && tr && consumer &&
                (strcmp(tr, "completed") == 0 ||
                 strcmp(tr, "went_idle") == 0)) {
                json_int_t c =
                        json_integer_value(json_object_get(per, consumer));
                json_object_set_new(per, consumer, json_integer(c + 1));
            }
            json_decref(line);
        }
        p = nl + 1;
    }
    free(buf);
    /* The rate is over the window, or over what the bytes read cover when
     * the file's end is younger than the window. */
    int64_t covered = window_ms;
    if (start > 0 && first_at > from)
        covered = now_ms - first_at;
    if (covered < 1000)
        covered = 1000;
    json_object_set_new(doc, "covered_ms", json_integer(covered));
    json_object_set_new(doc, "size", json_integer((json_int_t)size));
    return doc;
}

/* ── one event's history ─────────────────────────────────────────────── */

/* The session's raw bytes can be looked for in a line when they need no
 * escaping in JSON. */
static bool plain(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == '"' || *p == '\\' || *p == '/' || *p >= 0x7f)
            return false;
    return true;
}

static bool head_is(const json_t *row, int64_t index)
{
    const json_t *h = json_is_object(row) ? json_object_get(row, "head") : NULL;
    return json_is_integer(h) && json_integer_value(h) == index;
}

json_t *a2__con_audit_history(const char *path, const char *session,
                              int64_t index)
{
    json_t *doc = json_object(), *lines = json_array();
    json_object_set_new(doc, "lines", lines);
    size_t len;
    off_t start, size;
    char *buf = read_end_for(doc, path, HISTORY_BYTES, &len, &start, &size);
    if (!buf)
        return doc;
    char own_key[32];
    snprintf(own_key, sizeof own_key, "#%lld", (long long)index);
    bool prefilter = plain(session);
    size_t slen = strlen(session);
    bool dropped = false;
    for (char *p = buf; p < buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        if (!nl)
            break;
        size_t n = (size_t)(nl - p);
        char *line_start = p;
        p = nl + 1;
        if (prefilter && !memmem(line_start, n, session, slen))
            continue;
        json_t *line = json_loadb(line_start, n, 0, NULL);
        const char *s = a2__cli_audit_str(line, "session");
        if (!s || strcmp(s, session) != 0) {
            json_decref(line);
            continue;
        }
        const char *cursor = a2__cli_audit_str(line, "cursor");
        const json_t *before = json_object_get(line, "before");
        const json_t *after = json_object_get(line, "after");
        bool own = cursor && strcmp(cursor, own_key) == 0;
        bool was = head_is(before, index), is = head_is(after, index);
        if (!own && !was && !is) {
            json_decref(line);
            continue;
        }
        /* How the line concerns the event: its head arrived (a lane or
         * log cursor moved onto it), left, or stayed. */
        const char *role = own          ? "own"
                           : !was && is ? "arrived"
                           : was && !is ? "left"
                                        : "head";
        json_object_set_new(line, "role", json_string(role));
        if (json_array_size(lines) >= HISTORY_MAX) {
            json_array_remove(lines, 0);
            dropped = true;
        }
        json_array_append_new(lines, line);
    }
    free(buf);
    json_object_set_new(doc, "scanned_bytes",
                        json_integer((json_int_t)(size - start)));
    json_object_set_new(doc, "truncated", json_boolean(start > 0 || dropped));
    return doc;
}

/* ── the live tail ───────────────────────────────────────────────────── */

struct a2__con_tail {
    a2__console *con;
    char *path;
    char *consumer, *session, *transition;
    int last;
    char *last_id;
    int client_fd;
    int fd;     /* the audit file, -1 while it cannot be opened */
    ino_t ino;  /* of the open file */
    off_t off;  /* the next byte to read */
    char *line; /* a line not yet ended by its newline */
    size_t used, cap;
    bool skipping; /* inside a line over MAX_LINE */
    char *out;     /* what is to be sent */
    size_t out_len, out_off, out_cap;
    bool started;
    bool missing_told;
    int64_t last_sent;
};

static int out_add(a2__con_tail *t, const char *s, size_t n)
{
    if (t->out_off > 0 && t->out_off == t->out_len)
        t->out_off = t->out_len = 0;
    if (t->out_len + n > t->out_cap) {
        char *nb = a2__buf_grow(t->out, &t->out_cap, 16384, t->out_len + n);
        if (!nb)
            return -1;
        t->out = nb;
    }
    memcpy(t->out + t->out_len, s, n);
    t->out_len += n;
    return 0;
}

static int out_str(a2__con_tail *t, const char *s)
{
    return out_add(t, s, strlen(s));
}

/* An `event: notice` message: {"notice": kind, "message": text}. */
static int notice(a2__con_tail *t, const char *kind, const char *message)
{
    json_t *o = json_object();
    json_object_set_new(o, "notice", json_string(kind));
    json_object_set_new(o, "message", a2__con_jstr(message));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return -1;
    int rc = out_str(t, "event: notice\ndata: ") | out_str(t, s) |
             out_str(t, "\n\n");
    free(s);
    return rc ? -1 : 0;
}

static bool tail_matches(const a2__con_tail *t, const char *text, size_t n)
{
    json_t *line = json_loadb(text, n, 0, NULL);
    if (!json_is_object(line)) {
        json_decref(line);
        return false;
    }
    a2__cli_audit_filter f = {.session = t->session,
                              .consumer = t->consumer,
                              .transition = t->transition};
    bool ok = a2__cli_audit_matches(line, &f);
    json_decref(line);
    return ok;
}

/* One message for a line that ends at file offset end. */
static int emit(a2__con_tail *t, const char *text, size_t n, off_t end)
{
    char id[64];
    snprintf(id, sizeof id, "id: %llu:%lld\ndata: ", (unsigned long long)t->ino,
             (long long)end);
    if (out_str(t, id) != 0)
        return -1;
    /* A line holds no newline; a carriage return, which would end the
     * field too, can only be whitespace between JSON tokens. */
    size_t from = 0;
    for (size_t i = 0; i < n; i++)
        if (text[i] == '\r') {
            if (out_add(t, text + from, i - from) != 0 || out_add(t, " ", 1))
                return -1;
            from = i + 1;
        }
    if (out_add(t, text + from, n - from) != 0 || out_str(t, "\n\n") != 0)
        return -1;
    return 0;
}

static void tail_close_file(a2__con_tail *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    t->used = 0;
    t->skipping = false;
}

/* Opens the file (from its top). 0, or -1 when it is not there. */
static int tail_open(a2__con_tail *t, char *err, size_t errlen)
{
    int fd = open(t->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "could not open %s: %s", t->path,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    tail_close_file(t);
    t->fd = fd;
    t->ino = st.st_ino;
    t->off = 0;
    return 0;
}

/* The last t->last matching lines of the file's end; t->off after them. */
static int tail_backlog(a2__con_tail *t)
{
    struct stat st;
    if (fstat(t->fd, &st) != 0)
        return 0;
    /* A reconnecting client resumes at its last id. */
    if (t->last_id) {
        unsigned long long ino;
        long long off;
        char extra;
        if (sscanf(t->last_id, "%llu:%lld%c", &ino, &off, &extra) == 2 &&
            ino == (unsigned long long)t->ino && off >= 0 &&
            off <= (long long)st.st_size) {
            t->off = (off_t)off;
            return 0;
        }
    }
    char err[512];
    size_t len;
    off_t start, size;
    char *buf = read_end(t->path, TAIL_BACKLOG, &len, &start, &size, err,
                         sizeof err);
    if (!buf)
        return notice(t, "error", err);
    size_t cap = t->last > 0 ? (size_t)t->last : 1;
    size_t *from = calloc(cap, sizeof *from), *to = calloc(cap, sizeof *to);
    size_t kept = 0, next = 0, end = 0;
    int rc = 0;
    if (!from || !to) {
        rc = -1;
        goto done;
    }
    for (size_t p = 0; p < len;) {
        char *nl = memchr(buf + p, '\n', len - p);
        if (!nl)
            break;
        size_t n = (size_t)(nl - (buf + p));
        if (t->last > 0 && n > 0 && tail_matches(t, buf + p, n)) {
            from[next] = p;
            to[next] = p + n;
            next = (next + 1) % cap;
            if (kept < cap)
                kept++;
        }
        p += n + 1;
        end = p;
    }
    for (size_t i = 0; i < kept && rc == 0; i++) {
        size_t k = (next + cap - kept + i) % cap;
        rc = emit(t, buf + from[k], to[k] - from[k], start + (off_t)to[k] + 1);
    }
    /* The file may have been replaced between the two opens: then follow
     * the one open from its top. */
    if (size <= st.st_size)
        t->off = start + (off_t)end;
done:
    free(from);
    free(to);
    free(buf);
    return rc;
}

/* Reads what the file has after t->off and turns whole lines into
 * messages: 1 when it read something, 0 at the end, -1 out of memory. */
static int tail_read_file(a2__con_tail *t)
{
    char *chunk = malloc(FOLLOW_READ);
    if (!chunk)
        return -1;
    ssize_t n;
    do
        n = pread(t->fd, chunk, FOLLOW_READ, t->off);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
        free(chunk);
        return 0;
    }
    off_t base = t->off;
    t->off += n;
    int rc = 1;
    size_t start = 0;
    for (size_t i = 0; i <= (size_t)n && rc == 1; i++) {
        bool end = i == (size_t)n;
        if (!end && chunk[i] != '\n')
            continue;
        size_t piece = i - start;
        if (t->skipping) {
            if (!end)
                t->skipping = false;
        } else if (t->used + piece > MAX_LINE) {
            t->used = 0;
            t->skipping = !end;
            if (notice(t, "skipped", "a line longer than 1 MiB was skipped"))
                rc = -1;
        } else if (end) {
            if (piece > 0) {
                if (t->used + piece > t->cap) {
                    char *nb = a2__buf_grow(t->line, &t->cap, 4096,
                                            t->used + piece);
                    if (!nb) {
                        rc = -1;
                        break;
                    }
                    t->line = nb;
                }
                memcpy(t->line + t->used, chunk + start, piece);
                t->used += piece;
            }
        } else {
            const char *text = chunk + start;
            size_t len = piece;
            if (t->used > 0) {
                if (t->used + piece > t->cap) {
                    char *nb = realloc(t->line, t->used + piece);
                    if (!nb) {
                        rc = -1;
                        break;
                    }
                    t->line = nb;
                    t->cap = t->used + piece;
                }
                memcpy(t->line + t->used, chunk + start, piece);
                text = t->line;
                len = t->used + piece;
                t->used = 0;
            }
            if (len > 0 && tail_matches(t, text, len) &&
                emit(t, text, len, base + (off_t)i + 1) != 0)
                rc = -1;
        }
        start = i + 1;
    }
    free(chunk);
    return rc;
}

/* The file was rotated or truncated (or has appeared): start it over. */
static int tail_check_file(a2__con_tail *t)
{
    char err[512];
    struct stat st;
    if (t->fd < 0) {
        if (tail_open(t, err, sizeof err) != 0) {
            if (!t->missing_told) {
                t->missing_told = true;
                return notice(t, "missing", err);
            }
            return 0;
        }
        t->missing_told = false;
        return notice(t, "opened",
                      "the audit file is there: reading it from "
                      "its top");
    }
    if (stat(t->path, &st) != 0)
        return 0; /* moved away and not yet replaced: keep the open one */
    if (st.st_ino != t->ino) {
        if (tail_open(t, err, sizeof err) == 0)
            return notice(t, "rotated",
                          "the audit file was rotated: reading "
                          "the new file from its top");
        return 0;
    }
    if (st.st_size < t->off) {
        t->off = 0;
        t->used = 0;
        t->skipping = false;
        return notice(t, "truncated",
                      "the audit file was truncated: reading "
                      "it from its top");
    }
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* Frees the path and the options a2__con_tail_new copied. */
static void free_copies(a2__con_tail *t)
{
    char *copies[] = {t->path, t->consumer, t->session, t->transition,
                      t->last_id};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++)
        free(copies[i]);
}

a2__con_tail *a2__con_tail_new(a2__console *con, const char *path,
                               const a2__con_tail_opts *o)
{
    a2__con_tail *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->con = con;
    t->fd = -1;
    t->client_fd = o->client_fd;
    t->last = o->last;
    t->path = strdup(path);
    t->consumer = dup_or_null(o->consumer);
    t->session = dup_or_null(o->session);
    t->transition = dup_or_null(o->transition);
    t->last_id = dup_or_null(o->last_id);
    if (!t->path || (o->consumer && !t->consumer) ||
        (o->session && !t->session) || (o->transition && !t->transition) ||
        (o->last_id && !t->last_id)) {
        free_copies(t);
        free(t);
        return NULL;
    }
    return t;
}

void a2__con_tail_free(void *cls)
{
    a2__con_tail *t = cls;
    if (!t)
        return;
    tail_close_file(t);
    free_copies(t);
    free(t->line);
    free(t->out);
    atomic_fetch_sub(&t->con->tails, 1);
    free(t);
}

/* Waits up to FOLLOW_POLL_MS; false when the client has hung up. */
static bool client_wait(const a2__con_tail *t)
{
    if (t->client_fd < 0) {
        a2__sleep_ms(FOLLOW_POLL_MS);
        return true;
    }
    struct pollfd pfd = {t->client_fd, POLLRDHUP, 0};
    int n = poll(&pfd, 1, FOLLOW_POLL_MS);
    if (n > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
        return false;
    return true;
}

ssize_t a2__con_tail_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    a2__con_tail *t = cls;
    for (;;) {
        if (t->out_off < t->out_len) {
            size_t n = t->out_len - t->out_off;
            if (n > max)
                n = max;
            memcpy(buf, t->out + t->out_off, n);
            t->out_off += n;
            t->last_sent = a2__mono_ms();
            return (ssize_t)n;
        }
        t->out_off = t->out_len = 0;
        if (atomic_load(&t->con->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (!t->started) {
            t->started = true;
            char err[512];
            int rc = out_str(t, "retry: 3000\n\n");
            if (rc == 0 && tail_open(t, err, sizeof err) != 0) {
                t->missing_told = true;
                rc = notice(t, "missing", err);
            } else if (rc == 0) {
                rc = tail_backlog(t);
                if (rc == 0)
                    rc = notice(t, "following", t->path);
            }
            if (rc != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        int got = t->fd >= 0 ? tail_read_file(t) : 0;
        if (got < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (got > 0)
            continue;
        if (tail_check_file(t) != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (t->out_len > 0)
            continue;
        if (a2__mono_ms() - t->last_sent >= KEEPALIVE_MS) {
            if (out_str(t, ": keep-alive\n\n") != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (!client_wait(t))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}
