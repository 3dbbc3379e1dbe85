/*
 * a2-worker: runs a command for every event claimed for a consumer.
 *
 * The main thread holds the connection to a2-consumer (liba2worker) and a
 * table of sessions to work; --concurrency threads each own a runner
 * (claim -> handle -> complete/fail, leases renewed while a handler runs)
 * and take sessions from that table. The handler is CMD run by /bin/sh -c:
 * with --exec once per event, the event as JSON on stdin; with --serve once
 * per slot and kept running, one JSON line in and one JSON line out per
 * event, its processes owned by a thread of their own. See docs/worker.md.
 */
#include "../common/addr.h"
#include "../common/clock.h"
#include "a2/store.h"
#include "a2/version.h"
#include "a2/wire.h"
#include "a2/worker.h"
#include "sched.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_CONCURRENCY 256
#define MAX_STDOUT      ((size_t)16 * 1024 * 1024) /* an event's output */
#define STDERR_TAIL     2048

/* --serve */
#define SERVE_BACKOFF_MIN_MS   100   /* restart delay after a death ... */
#define SERVE_BACKOFF_MAX_MS   10000 /* ... doubling up to this */
#define SERVE_EXIT_GRACE_MS    2000  /* closed stdout or stdin: then SIGKILL */
#define SERVE_DRAIN_TERM_MS    5000  /* stopping: stdin closed, then SIGTERM */
#define SERVE_DRAIN_KILL_MS    7000  /* ... then SIGKILL */
#define SERVE_DRAIN_MAX_MS     10000 /* ... then a2-worker stops waiting */
#define SERVE_REAP_STEP_MAX_MS 100   /* waitpid retries while one exits */

static const char usage_text[] =
        "usage: a2-worker --consumer NAME (--exec CMD | --serve CMD) "
        "[options]\n"
        "\n"
        "With --exec CMD, runs CMD (with /bin/sh -c) for every event claimed "
        "for\n"
        "consumer NAME: the event as JSON on stdin; A2_SESSION, A2_CONSUMER,\n"
        "A2_INDEX, A2_ATTEMPT (and A2_LANE, A2_EVENT_TYPE, A2_EVENT_ID) in "
        "its\n"
        "environment.\n"
        "Exit 0 completes the event, and every stdout line that is a JSON "
        "object\n"
        "with a \"type\" is appended as a returned event ({\"type\", "
        "\"payload\",\n"
        "\"id\"}); a non-zero exit fails it with the tail of stderr as the "
        "error.\n"
        "\n"
        "With --serve CMD, CMD is started once per --concurrency slot and "
        "kept\n"
        "running (A2_CONSUMER and A2_SLOT in its environment): each event "
        "goes\n"
        "to its stdin as one JSON line, and it answers each with one line on\n"
        "stdout, {\"ok\":true,\"events\":[...]} or "
        "{\"ok\":false,\"error\":\"...\"},\n"
        "within --ttl. A handler that exits is restarted (100 ms back-off,\n"
        "doubling to 10 s); its event in flight fails.\n"
        "\n"
        "Options:\n"
        "  --consumer NAME        the consumer to serve (required)\n"
        "  --exec CMD             the handler command, run once per event\n"
        "  --serve CMD            the handler command, kept running (one of\n"
        "                         --exec and --serve is required)\n"
        "  --connect ADDR         a2-consumer at unix:PATH or tcp:HOST:PORT\n"
        "                         (default: none, degraded sweep only)\n"
        "  --token-file F         token for a tcp: connection\n"
        "  --db CONNINFO          database (default: $A2_DB, else PG* "
        "variables)\n"
        "  --concurrency N        handlers run at once, 1..256 (default 1)\n"
        "  --ttl MS               claim lease, renewed while a handler runs\n"
        "                         (default 30000)\n"
        "  --max-failures N       failures that dead-letter an event (default "
        "5)\n"
        "  --retry-after MS       hold after a failure before a retry\n"
        "                         (default 1000)\n"
        "  --lane-only            serve targeted events and lanes (the "
        "default)\n"
        "  --log TYPES            be a log consumer of TYPES "
        "(comma-separated;\n"
        "                         '*' for every type)\n"
        "  --degraded-sweep MS    while a2-consumer is unreachable, sweep the\n"
        "                         store's pending sessions this often\n"
        "                         (default 30000)\n"
        "  --name NAME            this worker's name (default host:pid)\n"
        "  -q, --quiet            log only problems\n"
        "  -h, --help             this help\n"
        "  --version              the version\n"
        "\n"
        "Environment: A2_STORE_TIMEOUT_MS bounds each store call (default: "
        "none;\n"
        "see a2_store_set_timeout in <a2/store.h>).\n"
        "SIGTERM or SIGINT: stop claiming, let running handlers finish, exit "
        "0\n"
        "(--serve: then close the handlers' stdin and wait for them to exit).\n"
        "Exit status: 0 success, 1 runtime error, 2 usage error.\n";

typedef struct job {
    char *session;
    int wake_log;      /* run a2_store_wake_log first */
    int queued;        /* in the ready queue */
    int running;       /* a thread works it */
    int again;         /* woken while running: run once more */
    int64_t at;        /* retry timer (monotonic ms), 0: none */
    int timed;         /* in the timer list (at may have been cancelled) */
    int hinted;        /* a wake-up named work here */
    int rechecks;      /* runs that found nothing after a wake-up */
    uint64_t xid;      /* the latest wake-up's commit, which the next run
                          waits for (0: none) */
    struct job *hnext; /* hash chain */
    struct job *rnext; /* ready queue */
    struct job *tnext; /* timer list */
} job;

typedef struct app app;

/* The last bytes a handler wrote to stderr. */
typedef struct {
    char buf[STDERR_TAIL + 1];
    size_t len;
} tail_buf;

/* An event handed to a slot's --serve handler (on the slot's stack). */
typedef struct serve_req {
    const char *line; /* the event, one line with its newline */
    size_t len;
    const char *session;
    int64_t index;
    int done;     /* under serve.mu: settled */
    char *answer; /* done: the answer line (the slot frees it), or NULL */
    size_t answer_len;
    char error[STDERR_TAIL + 512]; /* done without an answer: why */
} serve_req;

/* A slot's --serve handler process. */
typedef struct proc {
    int slot;          /* 1..N: its A2_SLOT */
    pthread_cond_t cv; /* its slot thread waits here for the answer */
    serve_req *req;    /* under serve.mu: posted, not settled yet */

    /* The rest belongs to the serve thread. */
    serve_req *cur;   /* sent (or being sent), awaiting its answer */
    size_t sent;      /* bytes of cur->line written */
    int64_t deadline; /* monotonic ms: cur's answer is due */
    int stale;        /* the line being read began before cur was sent */
    pid_t pid;        /* 0: no process */
    int in, out, err; /* our ends of its pipes, -1 when closed */
    int64_t start_at; /* no process: when to start one */
    int64_t backoff_ms;
    int exiting;     /* going: nothing more is sent to it */
    int discard;     /* its stdout no longer counts */
    int killed;      /* a2-worker sent it SIGKILL */
    int64_t reap_at; /* exiting: the next waitpid */
    int64_t reap_step;
    int64_t term_at;    /* SIGTERM due to its group, 0: none */
    int64_t kill_at;    /* SIGKILL due to its group, 0: none */
    char kill_why[160]; /* then the reason cur fails */
    char *line;         /* stdout: the line being read */
    size_t linelen, linecap;
    char errline[1024]; /* stderr: the line being read, for the log */
    size_t errlinelen;
    tail_buf tail; /* stderr since cur was sent */
} proc;

typedef struct serve {
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int closing; /* under mu: end the handlers */
    int wake[2]; /* a byte wakes the serve thread */
    proc *procs;
    int n;
    int ncv;            /* procs whose cv is initialized */
    serve_req **posted; /* the serve thread's copy of each proc's req */
    struct pollfd *pfd; /* 1 + 3 per proc */
    int *pidx;          /* per proc: pfd index of in, out, err; -1: none */
} serve;

typedef struct {
    app *a;
    int id;
    pthread_t thread;
    a2_worker_runner *runner;
} slot;

struct app {
    /* options */
    const char *consumer;
    const char *cmd;
    int serve_mode; /* --serve: cmd is kept running, one per slot */
    const char *connect;
    const char *db;
    char *token;
    const char *name;
    int concurrency;
    int64_t ttl_ms;
    int max_failures;
    int64_t retry_after_ms;
    int degraded_sweep_ms;
    char **log_types;
    size_t nlog_types;
    int log_all;
    int quiet;

    a2_consumer cons;
    a2_log_spec log_spec;

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job **buckets; /* sessions by name */
    size_t nbuckets;
    size_t njobs;
    job *ready_head; /* FIFO of sessions to run */
    job *ready_tail;
    job *timed; /* sessions with a retry timer */
    int nrunning;
    int stopping;
    uint64_t handled;

    slot slots[MAX_CONCURRENCY];
    a2_store *store; /* main thread: resync paging */
    int sigpipe[2];
    serve srv; /* --serve */
};

static volatile sig_atomic_t got_signal;
static int signal_fd = -1;

static void on_signal(int sig)
{
    got_signal = sig;
    if (signal_fd >= 0) {
        int saved = errno;
        char c = 1;
        ssize_t n = write(signal_fd, &c, 1);
        (void)n;
        errno = saved;
    }
}

/* One log line to stderr with a single write, so threads never interleave. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}

static void lib_log(void *ctx, const char *line)
{
    app *a = ctx;
    (void)a;
    say("a2-worker: %s", line);
}

/* ── the session table ────────────────────────────────────────────────── */

static size_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return (size_t)h;
}

static job *find_job(app *a, const char *session)
{
    if (!a->nbuckets)
        return NULL;
    for (job *j = a->buckets[hash_of(session) & (a->nbuckets - 1)]; j;
         j = j->hnext)
        if (strcmp(j->session, session) == 0)
            return j;
    return NULL;
}

/* Adds a job for session to the table; NULL when out of memory. */
static job *add_job(app *a, const char *session)
{
    if (a->njobs >= a->nbuckets) {
        size_t n = a->nbuckets ? a->nbuckets * 2 : 256;
        job **nb = calloc(n, sizeof *nb);
        if (!nb)
            return NULL;
        for (size_t i = 0; i < a->nbuckets; i++)
            for (job *k = a->buckets[i], *next; k; k = next) {
                next = k->hnext;
                size_t b = hash_of(k->session) & (n - 1);
                k->hnext = nb[b];
                nb[b] = k;
            }
        free(a->buckets);
        a->buckets = nb;
        a->nbuckets = n;
    }
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->session = strdup(session))) {
        free(j);
        return NULL;
    }
    size_t b = hash_of(session) & (a->nbuckets - 1);
    j->hnext = a->buckets[b];
    a->buckets[b] = j;
    a->njobs++;
    return j;
}

/* Removes and frees a job that is not in the ready queue. */
static void remove_job(app *a, job *dead)
{
    for (job **p = &a->buckets[hash_of(dead->session) & (a->nbuckets - 1)]; *p;
         p = &(*p)->hnext)
        if (*p == dead) {
            *p = dead->hnext;
            break;
        }
    if (dead->timed)
        for (job **p = &a->timed; *p; p = &(*p)->tnext)
            if (*p == dead) {
                *p = dead->tnext;
                break;
            }
    a->njobs--;
    free(dead->session);
    free(dead);
}

static void push_ready(app *a, job *j)
{
    j->queued = 1;
    j->rnext = NULL;
    if (a->ready_tail)
        a->ready_tail->rnext = j;
    else
        a->ready_head = j;
    a->ready_tail = j;
    pthread_cond_signal(&a->cv);
}

static job *pop_ready(app *a)
{
    job *j = a->ready_head;
    if (!j)
        return NULL;
    a->ready_head = j->rnext;
    if (!a->ready_head)
        a->ready_tail = NULL;
    j->rnext = NULL;
    j->queued = 0;
    return j;
}

static void set_timer(app *a, job *j, int64_t at)
{
    j->at = at;
    if (!j->timed) {
        j->timed = 1;
        j->tnext = a->timed;
        a->timed = j;
    }
}

/* Queues session for a run (under mu). */
static void schedule_locked(app *a, const char *session, int wake_log,
                            int hinted, uint64_t xid)
{
    if (a->stopping)
        return;
    job *j = find_job(a, session);
    if (!j && !(j = add_job(a, session))) {
        say("a2-worker: out of memory queuing %s", session);
        return;
    }
    j->wake_log |= wake_log;
    if (xid)
        j->xid = xid;
    if (hinted && !j->hinted) {
        j->hinted = 1;
        j->rechecks = 0;
    }
    j->at = 0; /* cancels a timer (dropped from the list when it is seen) */
    if (j->running)
        j->again = 1;
    else if (!j->queued)
        push_ready(a, j);
}

static void schedule(app *a, const char *session, int wake_log, int hinted,
                     uint64_t xid)
{
    pthread_mutex_lock(&a->mu);
    schedule_locked(a, session, wake_log, hinted, xid);
    pthread_mutex_unlock(&a->mu);
}

/* Due retry timers become queued; returns ms to the next timer or -1. */
static int fire_timers(app *a)
{
    int64_t now = a2__mono_ms(), next = -1;
    pthread_mutex_lock(&a->mu);
    for (job **p = &a->timed; *p;) {
        job *j = *p;
        if (!j->at || j->running || j->queued || j->at <= now) {
            *p = j->tnext;
            j->timed = 0;
            j->tnext = NULL;
            if (j->at && !j->running && !j->queued) {
                j->at = 0;
                push_ready(a, j);
            }
            continue;
        }
        if (next < 0 || j->at - now < next)
            next = j->at - now;
        p = &j->tnext;
    }
    pthread_mutex_unlock(&a->mu);
    return next > 24 * 3600 * 1000 ? 24 * 3600 * 1000 : (int)next;
}

/* ── handlers: what --exec and --serve share ──────────────────────────── */

static char *event_json(const app *a, const a2_head *h)
{
    const a2_event *e = &h->event;
    json_t *o = json_object();
    json_object_set_new(o, "session", json_string(e->session_id));
    json_object_set_new(o, "index", json_integer(e->index));
    json_object_set_new(o, "type", json_string(e->type));
    json_object_set_new(o, "id", json_string(e->id));
    json_t *p =
            e->payload ? json_loads(e->payload, JSON_DECODE_ANY, NULL) : NULL;
    json_object_set_new(o, "payload", p ? p : json_null());
    json_object_set_new(o, "created_at", json_integer(e->created_at));
    if (e->has_cause) {
        json_t *c = json_object();
        json_object_set_new(c, "consumer", json_string(e->cause.consumer));
        json_object_set_new(c, "lane",
                            e->cause.lane ? json_string(e->cause.lane)
                                          : json_null());
        json_object_set_new(c, "index", json_integer(e->cause.index));
        json_object_set_new(c, "attempt", json_integer(e->cause.attempt));
        json_object_set_new(o, "cause", c);
    } else {
        json_object_set_new(o, "cause", json_null());
    }
    json_object_set_new(o, "consumer", json_string(a->consumer));
    json_object_set_new(o, "lane",
                        h->dispatch.lane ? json_string(h->dispatch.lane)
                                         : json_null());
    json_object_set_new(o, "cursor",
                        h->dispatch.cursor_key
                                ? json_string(h->dispatch.cursor_key)
                                : json_null());
    json_object_set_new(o, "attempt", json_integer(h->dispatch.attempt_count));
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/* The event as the line a handler reads (event_json and a newline), its
 * length in *len; NULL on ENOMEM. */
static char *event_line(const app *a, const a2_head *h, size_t *len)
{
    char *text = event_json(a, h);
    if (!text)
        return NULL;
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        line[n + 1] = '\0';
        *len = n + 1;
    }
    free(text);
    return line;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* The variables a2-worker sets for its handlers, never inherited. */
static const char *const own_vars[] = {
        "A2_SESSION=", "A2_CONSUMER=",   "A2_INDEX=",    "A2_ATTEMPT=",
        "A2_LANE=",    "A2_EVENT_TYPE=", "A2_EVENT_ID=", "A2_SLOT=",
};

/* environ without own_vars, plus vars[0..nvars) (NULL entries skipped);
 * NULL on ENOMEM. */
static char **build_env(char **vars, size_t nvars)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + nvars + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int own = 0;
        for (size_t j = 0; j < sizeof own_vars / sizeof *own_vars && !own; j++)
            own = strncmp(environ[i], own_vars[j], strlen(own_vars[j])) == 0;
        if (!own)
            env[k++] = environ[i];
    }
    for (size_t i = 0; i < nvars; i++)
        if (vars[i])
            env[k++] = vars[i];
    env[k] = NULL;
    return env;
}

static void tail_add(tail_buf *t, const char *buf, size_t n)
{
    if (n >= STDERR_TAIL) {
        memcpy(t->buf, buf + n - STDERR_TAIL, STDERR_TAIL);
        t->len = STDERR_TAIL;
    } else if (t->len + n <= STDERR_TAIL) {
        memcpy(t->buf + t->len, buf, n);
        t->len += n;
    } else {
        size_t drop = t->len + n - STDERR_TAIL;
        memmove(t->buf, t->buf + drop, t->len - drop);
        t->len -= drop;
        memcpy(t->buf + t->len, buf, n);
        t->len += n;
    }
    t->buf[t->len] = '\0';
}

static void tail_clear(tail_buf *t)
{
    t->len = 0;
    t->buf[0] = '\0';
}

/* The tail as one line: trailing newlines dropped, the others as spaces. */
static void tail_line(const tail_buf *t, char *out, size_t len)
{
    snprintf(out, len, "%.*s", (int)t->len, t->buf);
    size_t n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        out[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\n' || out[i] == '\r')
            out[i] = ' ';
}

/* Replaces each byte of s that is not part of well-formed UTF-8 with '?':
 * the store takes only UTF-8 error texts, and a handler's output (or the
 * start of a tail) may be anything. */
static void utf8_clean(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = a2_wire_utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0)
            s[i++] = '?';
        else
            i += k;
    }
}

/* A waitpid status: "exit status 7" / "killed by signal 9", or with
 * verbs, "exited with status 7" / "killed by signal 9". */
static void status_text(int status, int verbs, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, verbs ? "exited with status %d" : "exit status %d",
                 WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, len, "status %d", status);
}

/*
 * Starts /bin/sh -c CMD with env in its own process group (a terminal's
 * Ctrl-C reaches a2-worker, which lets the handler finish), its stdin,
 * stdout and stderr on pipes whose other ends go to fds[0..2]
 * (close-on-exec; stdin non-blocking, and with nonblock the other two).
 * Returns the pid, or -1 with the reason in err.
 */
static pid_t spawn_handler(const app *a, char **env, int fds[3], int nonblock,
                           char *err, size_t errlen)
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    pid_t pid = -1;
    for (int i = 0; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) != 0) {
            snprintf(err, errlen, "could not create pipes: %s",
                     strerror(errno));
            goto done;
        }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "could not fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(p[0][0], 0);
        dup2(p[1][1], 1);
        dup2(p[2][1], 2);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        char *argv[] = {"sh", "-c", (char *)a->cmd, NULL};
        execve("/bin/sh", argv, env);
        _exit(127);
    }
    /* Here too, so that the group exists as soon as fork returns. */
    setpgid(pid, pid);
    fds[0] = p[0][1];
    fds[1] = p[1][0];
    fds[2] = p[2][0];
    p[0][1] = p[1][0] = p[2][0] = -1;
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    if (nonblock) {
        fcntl(fds[1], F_SETFL, O_NONBLOCK);
        fcntl(fds[2], F_SETFL, O_NONBLOCK);
    }
done:
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            if (p[i][j] >= 0)
                close(p[i][j]);
    return pid;
}

/* Adds v (a JSON object with a string "type", and "payload" and "id") to
 * reply as returned event nth (from 1); 1 with the reason in why when the
 * event is refused. */
static int add_returned(a2_worker_reply *reply, json_t *v, size_t nth,
                        char *why, size_t whylen)
{
    json_t *type = json_object_get(v, "type");
    json_t *payload = json_object_get(v, "payload");
    json_t *id = json_object_get(v, "id");
    char *ptext = payload ? json_dumps(payload, JSON_COMPACT | JSON_ENCODE_ANY)
                          : NULL;
    int rc = a2_worker_reply_add(reply, json_string_value(type), ptext,
                                 json_is_string(id) ? json_string_value(id)
                                                    : NULL);
    free(ptext);
    if (rc != 0) {
        snprintf(why, whylen, "returned event %zu is invalid (type '%.100s')",
                 nth, json_string_value(type));
        return 1;
    }
    return 0;
}

/* ── --exec: CMD once per event, the event on its stdin ──────────────── */

typedef struct {
    int status; /* waitpid status */
    char *out;  /* stdout */
    size_t outlen;
    int overflow; /* stdout went past MAX_STDOUT */
    tail_buf err;
} run_result;

/* Runs the command; 0 when it ran (see res->status), -1 when it could not
 * be started (reason in why). */
static int run_command(const app *a, const a2_head *h, const char *input,
                       size_t inlen, run_result *res, char *why, size_t whylen)
{
    int fds[3] = {-1, -1, -1};
    char *vars[7] = {0};
    char **env = NULL;
    int rc = -1;
    const a2_event *e = &h->event;
    if (asprintf(&vars[0], "A2_SESSION=%s", e->session_id) < 0 ||
        asprintf(&vars[1], "A2_CONSUMER=%s", a->consumer) < 0 ||
        asprintf(&vars[2], "A2_INDEX=%lld", (long long)e->index) < 0 ||
        asprintf(&vars[3], "A2_ATTEMPT=%d", h->dispatch.attempt_count) < 0 ||
        asprintf(&vars[4], "A2_EVENT_TYPE=%s", e->type) < 0 ||
        asprintf(&vars[5], "A2_EVENT_ID=%s", e->id) < 0 ||
        (h->dispatch.lane &&
         asprintf(&vars[6], "A2_LANE=%s", h->dispatch.lane) < 0)) {
        snprintf(why, whylen, "out of memory");
        goto done;
    }
    env = build_env(vars, 7);
    if (!env) {
        snprintf(why, whylen, "out of memory");
        goto done;
    }
    pid_t pid = spawn_handler(a, env, fds, 0, why, whylen);
    if (pid < 0)
        goto done;
    int out = fds[1], err = fds[2];
    size_t sent = 0;
    size_t cap = 0;
    int open_out = 1, open_err = 1;
    while (open_out || open_err) {
        struct pollfd p[3];
        int np = 0, iout = -1, ierr = -1, iin = -1;
        if (open_out) {
            p[np] = (struct pollfd){out, POLLIN, 0};
            iout = np++;
        }
        if (open_err) {
            p[np] = (struct pollfd){err, POLLIN, 0};
            ierr = np++;
        }
        if (fds[0] >= 0) {
            p[np] = (struct pollfd){fds[0], POLLOUT, 0};
            iin = np++;
        }
        if (poll(p, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (iin >= 0 && p[iin].revents) {
            ssize_t n = write(fds[0], input + sent, inlen - sent);
            if (n > 0)
                sent += (size_t)n;
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                sent = inlen; /* the handler closed stdin: fine */
            if (sent >= inlen)
                close_fd(&fds[0]);
        }
        char buf[65536];
        if (iout >= 0 && p[iout].revents) {
            ssize_t n = read(out, buf, sizeof buf);
            if (n <= 0 && !(n < 0 && errno == EINTR)) {
                open_out = 0;
            } else if (n > 0 && res->outlen + (size_t)n > MAX_STDOUT) {
                res->overflow = 1; /* keep draining; the attempt fails */
            } else if (n > 0) {
                if (res->outlen + (size_t)n + 1 > cap) {
                    size_t ncap = cap ? cap * 2 : 65536;
                    while (ncap < res->outlen + (size_t)n + 1)
                        ncap *= 2;
                    char *nb = realloc(res->out, ncap);
                    if (nb) {
                        res->out = nb;
                        cap = ncap;
                    }
                }
                if (res->outlen + (size_t)n + 1 <= cap) {
                    memcpy(res->out + res->outlen, buf, (size_t)n);
                    res->outlen += (size_t)n;
                    res->out[res->outlen] = '\0';
                }
            }
        }
        if (ierr >= 0 && p[ierr].revents) {
            ssize_t n = read(err, buf, sizeof buf);
            if (n <= 0 && !(n < 0 && errno == EINTR))
                open_err = 0;
            else if (n > 0)
                tail_add(&res->err, buf, (size_t)n);
        }
    }
    close_fd(&fds[0]);
    while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR)
        ;
    rc = 0;
done:
    for (int i = 0; i < 3; i++)
        close_fd(&fds[i]);
    for (int i = 0; i < 7; i++)
        free(vars[i]);
    free(env);
    return rc;
}

/* One event through --exec: 0 with the returned events added to reply, or
 * 1 with the reason in why. */
static int exec_event(const app *a, const a2_head *h, const char *line,
                      size_t len, a2_worker_reply *reply, char *why,
                      size_t whylen, size_t *returned)
{
    const a2_event *e = &h->event;
    run_result res = {0};
    int rc = 1;
    if (run_command(a, h, line, len, &res, why, whylen) != 0) {
        if (!*why)
            snprintf(why, whylen, "could not run the command");
    } else if (!WIFEXITED(res.status) || WEXITSTATUS(res.status) != 0) {
        /* The tail of stderr (its last lines), then how it ended. */
        char tail[STDERR_TAIL + 1], how[64];
        tail_line(&res.err, tail, sizeof tail);
        status_text(res.status, 0, how, sizeof how);
        if (*tail)
            snprintf(why, whylen, "%s (%s)", tail, how);
        else
            snprintf(why, whylen, "%s", how);
    } else if (res.overflow) {
        snprintf(why, whylen, "the handler wrote more than 16 MiB to stdout");
    } else {
        rc = 0;
        char *p = res.out;
        while (p && *p) {
            char *nl = strchr(p, '\n');
            if (nl)
                *nl = '\0';
            json_t *v = json_loads(p, 0, NULL);
            if (json_is_object(v) &&
                json_is_string(json_object_get(v, "type"))) {
                if (add_returned(reply, v, *returned + 1, why, whylen) != 0) {
                    rc = 1;
                    json_decref(v);
                    break;
                }
                (*returned)++;
            } else if (*p && !a->quiet) {
                say("a2-worker: [%s #%lld] %s", e->session_id,
                    (long long)e->index, p);
            }
            json_decref(v);
            p = nl ? nl + 1 : NULL;
        }
    }
    free(res.out);
    return rc;
}

/* ── --serve: one long-lived handler per slot ─────────────────────────── */

/*
 * A thread of its own (serve_main) owns every handler process: it starts
 * them (and restarts them with a back-off), writes the events the slot
 * threads post, reads the answers, logs their stderr, and fails an event
 * whose handler dies, answers too late or answers too much. It only ever
 * waits in poll(2). A slot thread posts its event (proc.req) and waits on
 * proc.cv until the event is settled (serve_req.done).
 */

static void serve_wake(serve *sv)
{
    char c = 0;
    ssize_t n = write(sv->wake[1], &c, 1);
    (void)n;
}

/* Signals p's process group (p alone when it has none). */
static void proc_signal(const proc *p, int sig)
{
    if (kill(-p->pid, sig) != 0 && errno == ESRCH)
        kill(p->pid, sig);
}

/* Settles the event in flight: with answer (len bytes, taken), or failed
 * with why and the stderr the handler wrote since the event was sent. */
static void proc_settle(serve *sv, proc *p, char *answer, size_t len,
                        const char *why)
{
    serve_req *r = p->cur;
    if (!r) {
        free(answer);
        return;
    }
    char tail[STDERR_TAIL + 1] = "";
    if (!answer)
        tail_line(&p->tail, tail, sizeof tail);
    pthread_mutex_lock(&sv->mu);
    r->answer = answer;
    r->answer_len = len;
    if (answer)
        r->error[0] = '\0';
    else if (*tail)
        snprintf(r->error, sizeof r->error, "%s: %s", why, tail);
    else
        snprintf(r->error, sizeof r->error, "%s", why);
    r->done = 1;
    p->req = NULL;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&sv->mu);
    p->cur = NULL;
}

/* p is going: nothing more is sent to it; it is reaped once it exits, and
 * killed (SIGKILL to its group) after grace_ms, which fails the event in
 * flight with why. */
static void proc_going(proc *p, int64_t now, int64_t grace_ms, const char *why)
{
    if (!p->exiting) {
        p->exiting = 1;
        p->reap_at = now;
        p->reap_step = 5;
    }
    if (p->killed)
        return;
    if (!p->kill_at || now + grace_ms < p->kill_at) {
        p->kill_at = now + grace_ms;
        snprintf(p->kill_why, sizeof p->kill_why, "%s", why);
    }
}

static void proc_errline(proc *p)
{
    size_t n = p->errlinelen;
    p->errlinelen = 0;
    while (n > 0 && p->errline[n - 1] == '\r')
        n--;
    if (n == 0)
        return;
    if (p->cur)
        say("a2-worker: [handler %d %s #%lld] %.*s", p->slot, p->cur->session,
            (long long)p->cur->index, (int)n, p->errline);
    else
        say("a2-worker: [handler %d] %.*s", p->slot, (int)n, p->errline);
}

/* stderr: kept as the tail of the event in flight, and logged by line. */
static void proc_stderr(proc *p, const char *data, size_t n)
{
    if (p->cur)
        tail_add(&p->tail, data, n);
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            proc_errline(p);
            continue;
        }
        if (p->errlinelen == sizeof p->errline)
            proc_errline(p);
        p->errline[p->errlinelen++] = data[i];
    }
}

/* A whole line of stdout: the answer of the event in flight, or a line
 * that answers nothing (begun before that event was sent, or with none in
 * flight), reported and dropped. An answer that comes before the whole
 * event was written leaves the rest of the event unread: that handler is
 * killed (its stdin would no longer start with an event). */
static void proc_line(serve *sv, proc *p, int64_t now)
{
    size_t n = p->linelen;
    int stale = p->stale;
    p->linelen = 0;
    p->stale = 0;
    if (n > 0 && p->line[n - 1] == '\r')
        n--;
    if (!p->discard && p->cur && !stale && p->sent < p->cur->len) {
        p->discard = 1;
        proc_going(p, now, 0,
                   "the handler answered before it read the whole event");
    } else if (!p->discard && p->cur && !stale) {
        char *answer = malloc(n + 1);
        if (answer) {
            memcpy(answer, p->line, n);
            answer[n] = '\0';
        }
        p->backoff_ms = SERVE_BACKOFF_MIN_MS;
        proc_settle(sv, p, answer, n, "out of memory");
    } else if (!p->discard) {
        say("a2-worker: handler %d answered with no event in flight, "
            "ignored: %.*s",
            p->slot, n > 300 ? 300 : (int)n, p->line);
    }
    if (p->linecap > (size_t)1024 * 1024) {
        free(p->line);
        p->line = NULL;
        p->linecap = 0;
    }
}

static void proc_stdout(serve *sv, proc *p, const char *data, size_t n,
                        int64_t now)
{
    while (n > 0 && !p->discard) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (p->linelen + take > MAX_STDOUT) {
            p->discard = 1;
            proc_going(p, now, 0, "the handler's answer is longer than 16 MiB");
            return;
        }
        if (p->linelen + take + 1 > p->linecap) {
            size_t cap = p->linecap ? p->linecap : 4096;
            while (cap < p->linelen + take + 1)
                cap *= 2;
            if (cap > MAX_STDOUT + 1)
                cap = MAX_STDOUT + 1;
            char *nb = realloc(p->line, cap);
            if (!nb) {
                p->discard = 1;
                proc_going(p, now, 0, "out of memory reading the answer");
                return;
            }
            p->line = nb;
            p->linecap = cap;
        }
        memcpy(p->line + p->linelen, data, take);
        p->linelen += take;
        if (!nl)
            return;
        proc_line(sv, p, now);
        data += take + 1;
        n -= take + 1;
    }
}

/* Reads p's stdout (at most reads chunks, until it has nothing more); its
 * end makes p go. */
static void proc_read_out(serve *sv, proc *p, int64_t now, int reads)
{
    char buf[65536];
    while (reads-- > 0 && p->out >= 0) {
        ssize_t n = read(p->out, buf, sizeof buf);
        if (n > 0) {
            proc_stdout(sv, p, buf, (size_t)n, now);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (p->linelen > 0) /* a last line without its newline */
            proc_line(sv, p, now);
        close_fd(&p->out);
        proc_going(p, now, SERVE_EXIT_GRACE_MS,
                   "the handler closed its stdout");
    }
}

static void proc_read_err(proc *p, int reads)
{
    char buf[16384];
    while (reads-- > 0 && p->err >= 0) {
        ssize_t n = read(p->err, buf, sizeof buf);
        if (n > 0) {
            proc_stderr(p, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        proc_errline(p);
        close_fd(&p->err);
    }
}

/* Writes what is left of the event in flight. */
static void proc_write(proc *p, int64_t now)
{
    while (p->cur && p->in >= 0 && p->sent < p->cur->len) {
        ssize_t n = write(p->in, p->cur->line + p->sent, p->cur->len - p->sent);
        if (n > 0) {
            p->sent += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            return;
        } else {
            close_fd(&p->in);
            proc_going(p, now, SERVE_EXIT_GRACE_MS,
                       "the handler closed its stdin");
        }
    }
}

/* Hands r to p: first takes in what p wrote before (such lines answer
 * nothing), then writes the event. r stays posted when p went meanwhile. */
static void proc_send(serve *sv, proc *p, serve_req *r, int64_t now,
                      int64_t ttl)
{
    proc_read_out(sv, p, now, 16);
    if (p->pid <= 0 || p->exiting || p->in < 0 || p->out < 0)
        return;
    p->cur = r;
    p->sent = 0;
    p->deadline = now + ttl;
    p->stale = p->linelen > 0;
    tail_clear(&p->tail);
    proc_write(p, now);
}

static void proc_start(serve *sv, const app *a, proc *p, int64_t now)
{
    char slotvar[32], why[300] = "";
    char *vars[2] = {NULL, slotvar};
    char **env = NULL;
    int fds[3];
    pid_t pid = -1;
    snprintf(slotvar, sizeof slotvar, "A2_SLOT=%d", p->slot);
    if (asprintf(&vars[0], "A2_CONSUMER=%s", a->consumer) < 0) {
        vars[0] = NULL;
        snprintf(why, sizeof why, "out of memory");
    } else if (!(env = build_env(vars, 2))) {
        snprintf(why, sizeof why, "out of memory");
    } else {
        pid = spawn_handler(a, env, fds, 1, why, sizeof why);
    }
    free(env);
    free(vars[0]);
    if (pid < 0) {
        say("a2-worker: could not start handler %d: %s; trying again in "
            "%lld ms",
            p->slot, why, (long long)p->backoff_ms);
        p->start_at = now + p->backoff_ms;
        p->backoff_ms = p->backoff_ms * 2 > SERVE_BACKOFF_MAX_MS
                                ? SERVE_BACKOFF_MAX_MS
                                : p->backoff_ms * 2;
        /* An event waiting for this start fails rather than wait. */
        pthread_mutex_lock(&sv->mu);
        p->cur = p->req;
        pthread_mutex_unlock(&sv->mu);
        char text[400];
        snprintf(text, sizeof text, "could not start the handler: %s", why);
        tail_clear(&p->tail);
        proc_settle(sv, p, NULL, 0, text);
        return;
    }
    p->pid = pid;
    p->in = fds[0];
    p->out = fds[1];
    p->err = fds[2];
    if (!a->quiet)
        say("a2-worker: handler %d started (pid %ld)", p->slot, (long)pid);
}

/* p's process is gone (status -1: reaped elsewhere): fails the event in
 * flight with how it ended, and schedules the next start. */
static void proc_exited(serve *sv, const app *a, proc *p, int status,
                        int64_t now, int closing)
{
    proc_read_err(p, 64); /* what it wrote before it exited */
    proc_errline(p);
    close_fd(&p->in);
    close_fd(&p->out);
    close_fd(&p->err);
    char how[64], why[300];
    if (status == -1)
        snprintf(how, sizeof how, "ended");
    else
        status_text(status, 1, how, sizeof how);
    snprintf(why, sizeof why, "handler %s", how);
    proc_settle(sv, p, NULL, 0, why);
    int clean = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (closing) {
        if (!a->quiet || !clean)
            say("a2-worker: handler %d (pid %ld) %s", p->slot, (long)p->pid,
                how);
    } else {
        say("a2-worker: handler %d (pid %ld) %s%s%s; restarting in %lld ms",
            p->slot, (long)p->pid, how, p->killed ? ": " : "",
            p->killed ? p->kill_why : "", (long long)p->backoff_ms);
    }
    p->pid = 0;
    p->exiting = p->killed = p->discard = p->stale = 0;
    p->linelen = 0;
    p->term_at = p->kill_at = p->reap_at = 0;
    p->kill_why[0] = '\0';
    p->start_at = now + p->backoff_ms;
    p->backoff_ms = p->backoff_ms * 2 > SERVE_BACKOFF_MAX_MS
                            ? SERVE_BACKOFF_MAX_MS
                            : p->backoff_ms * 2;
}

/* The timers of a running p: the answer's deadline, signals due, reaping. */
static void proc_timers(serve *sv, const app *a, proc *p, int64_t now,
                        int64_t ttl, int closing)
{
    if (p->cur && now >= p->deadline) {
        char why[160];
        snprintf(why, sizeof why,
                 "the handler did not answer within the lease of %lld ms",
                 (long long)ttl);
        p->discard = 1;
        proc_going(p, now, 0, why);
    }
    if (p->term_at && now >= p->term_at) {
        proc_signal(p, SIGTERM);
        p->term_at = 0;
    }
    if (p->kill_at && now >= p->kill_at) {
        proc_signal(p, SIGKILL);
        p->killed = 1;
        p->discard = 1;
        p->kill_at = 0;
        close_fd(&p->in);
        proc_settle(sv, p, NULL, 0, p->kill_why);
    }
    if (p->exiting && now >= p->reap_at) {
        int status = 0;
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD)) {
            proc_exited(sv, a, p, r == p->pid ? status : -1, now, closing);
        } else {
            p->reap_step = p->reap_step * 2 > SERVE_REAP_STEP_MAX_MS
                                   ? SERVE_REAP_STEP_MAX_MS
                                   : p->reap_step * 2;
            p->reap_at = now + p->reap_step;
        }
    }
}

static void earliest(int64_t *next, int64_t at)
{
    if (at > 0 && (*next < 0 || at < *next))
        *next = at;
}

/* Stopping (every event is settled): the end of input for every handler,
 * SIGTERM after a while, then SIGKILL. */
static void serve_drain(serve *sv, int64_t now)
{
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        if (p->pid <= 0)
            continue;
        close_fd(&p->in);
        p->term_at = now + SERVE_DRAIN_TERM_MS;
        proc_going(p, now, SERVE_DRAIN_KILL_MS, "a2-worker is stopping");
    }
}

/* Starts, sends and runs the timers of every handler; returns how many
 * have a process, and the earliest timer in *next. */
static int serve_step(serve *sv, const app *a, int64_t now, int64_t ttl,
                      int closing, int64_t *next)
{
    int live = 0;
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        if (p->pid <= 0 && !closing && now >= p->start_at) {
            proc_start(sv, a, p, now);
            if (p->pid <= 0)
                sv->posted[i] = NULL; /* settled by the failed start */
        }
        if (p->pid > 0 && sv->posted[i] && !p->exiting && p->in >= 0 &&
            p->out >= 0)
            proc_send(sv, p, sv->posted[i], now, ttl);
        if (p->pid > 0)
            proc_timers(sv, a, p, now, ttl, closing);
        if (p->pid > 0) {
            live++;
            if (p->cur)
                earliest(next, p->deadline);
            earliest(next, p->term_at);
            earliest(next, p->kill_at);
            if (p->exiting)
                earliest(next, p->reap_at);
        } else if (!closing) {
            earliest(next, p->start_at);
        }
    }
    return live;
}

/* Fills sv->pfd: the wake pipe, then each handler's pipes that have
 * something to do. */
static nfds_t serve_pollfds(serve *sv)
{
    nfds_t np = 0;
    sv->pfd[np++] = (struct pollfd){sv->wake[0], POLLIN, 0};
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        int *ix = &sv->pidx[3 * (size_t)i];
        ix[0] = ix[1] = ix[2] = -1;
        if (p->pid <= 0)
            continue;
        if (p->cur && p->in >= 0 && p->sent < p->cur->len) {
            ix[0] = (int)np;
            sv->pfd[np++] = (struct pollfd){p->in, POLLOUT, 0};
        }
        if (p->out >= 0) {
            ix[1] = (int)np;
            sv->pfd[np++] = (struct pollfd){p->out, POLLIN, 0};
        }
        if (p->err >= 0) {
            ix[2] = (int)np;
            sv->pfd[np++] = (struct pollfd){p->err, POLLIN, 0};
        }
    }
    return np;
}

/* The I/O that poll found ready. */
static void serve_io(serve *sv, int64_t now)
{
    if (sv->pfd[0].revents) {
        char buf[256];
        while (read(sv->wake[0], buf, sizeof buf) > 0)
            ;
    }
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        const int *ix = &sv->pidx[3 * (size_t)i];
        if (ix[2] >= 0 && sv->pfd[ix[2]].revents)
            proc_read_err(p, 1);
        if (ix[1] >= 0 && sv->pfd[ix[1]].revents)
            proc_read_out(sv, p, now, 1);
        if (ix[0] >= 0 && sv->pfd[ix[0]].revents)
            proc_write(p, now);
    }
}

static void *serve_main(void *arg)
{
    app *a = arg;
    serve *sv = &a->srv;
    int64_t ttl = a->ttl_ms ? a->ttl_ms : A2_WORKER_DEFAULT_TTL_MS;
    int64_t drain_end = 0;
    for (;;) {
        int64_t now = a2__mono_ms();
        pthread_mutex_lock(&sv->mu);
        int closing = sv->closing;
        for (int i = 0; i < sv->n; i++)
            sv->posted[i] = sv->procs[i].cur ? NULL : sv->procs[i].req;
        pthread_mutex_unlock(&sv->mu);
        if (closing && !drain_end) {
            drain_end = now + SERVE_DRAIN_MAX_MS;
            serve_drain(sv, now);
        }
        int64_t next = closing ? drain_end : -1;
        int live = serve_step(sv, a, now, ttl, closing, &next);
        if (closing && (live == 0 || now >= drain_end))
            break;
        nfds_t np = serve_pollfds(sv);
        int64_t wait = next < 0 ? -1 : next > now ? next - now : 0;
        if (wait > 60000)
            wait = 60000;
        int n = poll(sv->pfd, np, (int)wait);
        if (n < 0 && errno != EINTR) {
            say("a2-worker: poll failed: %s", strerror(errno));
            poll(NULL, 0, 100);
        } else if (n > 0) {
            serve_io(sv, a2__mono_ms());
        }
    }
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        if (p->pid <= 0)
            continue;
        say("a2-worker: handler %d (pid %ld) did not exit; killed", p->slot,
            (long)p->pid);
        proc_signal(p, SIGKILL);
        int status;
        if (waitpid(p->pid, &status, WNOHANG) == p->pid)
            p->pid = 0;
    }
    return NULL;
}

/* Starts the handlers' thread (which starts the handlers); 0 or -1. */
static int serve_start(app *a)
{
    serve *sv = &a->srv;
    sv->n = a->concurrency;
    sv->wake[0] = sv->wake[1] = -1;
    pthread_mutex_init(&sv->mu, NULL);
    sv->procs = calloc((size_t)sv->n, sizeof *sv->procs);
    sv->posted = calloc((size_t)sv->n, sizeof(serve_req *));
    sv->pfd = calloc(1 + 3 * (size_t)sv->n, sizeof *sv->pfd);
    sv->pidx = calloc(3 * (size_t)sv->n, sizeof(int));
    if (!sv->procs || !sv->posted || !sv->pfd || !sv->pidx ||
        pipe2(sv->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        p->slot = i + 1;
        p->in = p->out = p->err = -1;
        p->backoff_ms = SERVE_BACKOFF_MIN_MS;
        pthread_cond_init(&p->cv, NULL);
    }
    sv->ncv = sv->n;
    if (pthread_create(&sv->thread, NULL, serve_main, a) != 0)
        return -1;
    sv->started = 1;
    return 0;
}

/* Closes the handlers' stdin, waits (bounded) for them to exit, frees. Call
 * it once no slot thread runs. */
static void serve_stop(app *a)
{
    serve *sv = &a->srv;
    if (sv->n == 0)
        return; /* never started */
    if (sv->started) {
        pthread_mutex_lock(&sv->mu);
        sv->closing = 1;
        pthread_mutex_unlock(&sv->mu);
        serve_wake(sv);
        pthread_join(sv->thread, NULL);
        sv->started = 0;
    }
    for (int i = 0; sv->procs && i < sv->ncv; i++) {
        proc *p = &sv->procs[i];
        close_fd(&p->in);
        close_fd(&p->out);
        close_fd(&p->err);
        free(p->line);
        pthread_cond_destroy(&p->cv);
    }
    free(sv->procs);
    free(sv->posted);
    free(sv->pfd);
    free(sv->pidx);
    close_fd(&sv->wake[0]);
    close_fd(&sv->wake[1]);
    pthread_mutex_destroy(&sv->mu);
}

/* A --serve answer: {"ok":true,"events":[...]} adds the events to reply
 * (0); {"ok":false,"error":"..."} and anything else fail (1, why). */
static int parse_answer(const char *line, size_t len, a2_worker_reply *reply,
                        char *why, size_t whylen, size_t *returned)
{
    json_t *v = json_loadb(line, len, 0, NULL);
    json_t *ok = json_is_object(v) ? json_object_get(v, "ok") : NULL;
    json_t *events = json_is_object(v) ? json_object_get(v, "events") : NULL;
    int rc = 1;
    if (!json_is_boolean(ok)) {
        snprintf(why, whylen,
                 "invalid answer from the handler (not a JSON object with "
                 "\"ok\" true or false): %.200s",
                 line);
    } else if (json_is_false(ok)) {
        json_t *e = json_object_get(v, "error");
        snprintf(why, whylen, "%s",
                 json_is_string(e) && *json_string_value(e)
                         ? json_string_value(e)
                         : "the handler answered \"ok\" false with no "
                           "\"error\"");
    } else if (events && !json_is_null(events) && !json_is_array(events)) {
        snprintf(why, whylen,
                 "invalid answer from the handler (\"events\" is not an "
                 "array): %.200s",
                 line);
    } else {
        rc = 0;
        size_t i;
        json_t *ev;
        json_array_foreach(events, i, ev)
        {
            if (!json_is_object(ev) ||
                !json_is_string(json_object_get(ev, "type"))) {
                snprintf(why, whylen,
                         "invalid answer from the handler (events[%zu] is "
                         "not an object with a string \"type\")",
                         i);
                rc = 1;
                break;
            }
            if (add_returned(reply, ev, i + 1, why, whylen) != 0) {
                rc = 1;
                break;
            }
            (*returned)++;
        }
    }
    json_decref(v);
    return rc;
}

/* One event through slot s's --serve handler: 0 with the returned events
 * added to reply, or 1 with the reason in why. */
static int serve_event(app *a, const slot *s, const a2_head *h,
                       const char *line, size_t len, a2_worker_reply *reply,
                       char *why, size_t whylen, size_t *returned)
{
    serve *sv = &a->srv;
    proc *p = &sv->procs[s->id];
    serve_req r = {.line = line,
                   .len = len,
                   .session = h->event.session_id,
                   .index = h->event.index};
    pthread_mutex_lock(&sv->mu);
    p->req = &r;
    pthread_mutex_unlock(&sv->mu);
    serve_wake(sv);
    pthread_mutex_lock(&sv->mu);
    while (!r.done)
        pthread_cond_wait(&p->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
    if (!r.answer) {
        snprintf(why, whylen, "%s", r.error);
        return 1;
    }
    int rc = parse_answer(r.answer, r.answer_len, reply, why, whylen, returned);
    free(r.answer);
    return rc;
}

/* ── the runner's handler ─────────────────────────────────────────────── */

static int handle(void *ctx, const a2_head *h, a2_worker_reply *reply)
{
    slot *s = ctx;
    app *a = s->a;
    const a2_event *e = &h->event;
    size_t len = 0;
    char *line = event_line(a, h, &len);
    if (!line) {
        a2_worker_reply_error(reply, "could not render the event as JSON");
        return 1;
    }
    if (!a->quiet)
        say("a2-worker: run %s #%lld %s attempt %d%s%s", e->session_id,
            (long long)e->index, e->type, h->dispatch.attempt_count,
            h->dispatch.lane ? " lane " : "",
            h->dispatch.lane ? h->dispatch.lane : "");
    int64_t start = a2__mono_ms();
    char why[STDERR_TAIL + 512] = "";
    size_t returned = 0;
    int rc = a->serve_mode ? serve_event(a, s, h, line, len, reply, why,
                                         sizeof why, &returned)
                           : exec_event(a, h, line, len, reply, why, sizeof why,
                                        &returned);
    free(line);
    int64_t ms = a2__mono_ms() - start;
    if (rc == 0) {
        if (!a->quiet)
            say("a2-worker: ok %s #%lld in %lld ms, %zu returned",
                e->session_id, (long long)e->index, (long long)ms, returned);
    } else {
        utf8_clean(why);
        a2_worker_reply_error(reply, why);
        say("a2-worker: failed %s #%lld attempt %d in %lld ms: %s",
            e->session_id, (long long)e->index, h->dispatch.attempt_count,
            (long long)ms, why);
    }
    return rc;
}

/* ── runner threads ───────────────────────────────────────────────────── */

static void *slot_main(void *arg)
{
    slot *s = arg;
    app *a = s->a;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        job *j = a->stopping ? NULL : pop_ready(a);
        if (!j) {
            if (a->stopping)
                break;
            pthread_cond_wait(&a->cv, &a->mu);
            continue;
        }
        j->running = 1;
        j->again = 0;
        int wake_log = j->wake_log;
        j->wake_log = 0;
        uint64_t xid = j->xid;
        j->xid = 0;
        /* Woken by a2-consumer, which announces every head that becomes
         * claimable: one claim round is enough. */
        int woken = j->hinted;
        char *session = strdup(j->session);
        a->nrunning++;
        pthread_mutex_unlock(&a->mu);

        a2_worker_run_stats st = {0};
        int rc = !session ? A2_WORKER_ENOMEM
                 : woken  ? a2_worker_runner_run_woken(s->runner, session,
                                                       wake_log != 0, xid, &st)
                          : a2_worker_runner_run(s->runner, session,
                                                 wake_log != 0, &st);
        if (rc != 0 && rc != A2_WORKER_ESTOPPED)
            say("a2-worker: %s",
                rc == A2_WORKER_ESTORE ? a2_worker_runner_last_error(s->runner)
                                       : "out of memory");

        pthread_mutex_lock(&a->mu);
        a->nrunning--;
        a->handled += st.completed + st.failed + st.dead_lettered;
        j = session ? find_job(a, session) : NULL;
        free(session);
        if (j) {
            j->running = 0;
            a2w_ran ran = {
                    .again = j->again,
                    .failed = rc != 0 && rc != A2_WORKER_ESTOPPED,
                    .retry_at = st.retry_at,
                    .now = a2__real_ms(),
                    .hinted = j->hinted,
                    .claimed = st.claimed > 0,
                    .rechecks = j->rechecks,
                    .waited = xid != 0,
                    .wake_log = wake_log,
            };
            a2w_next next = a2w_after_run(&ran);
            if (a->stopping || next.kind == A2W_DONE) {
                remove_job(a, j);
            } else {
                j->wake_log |= next.wake_log;
                if (next.kind == A2W_RUN_AGAIN) {
                    j->again = 0;
                    push_ready(a, j);
                } else {
                    set_timer(a, j, a2__mono_ms() + next.delay_ms);
                    j->rechecks += next.recheck;
                }
            }
        }
        /* Wake the main loop so it recomputes its timers. */
        char c = 0;
        ssize_t n = write(a->sigpipe[1], &c, 1);
        (void)n;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ── the main loop ────────────────────────────────────────────────────── */

static void resync_all(app *a)
{
    if (!a->store) {
        a2_store_error err = {0};
        if (a2_store_open(&a->store, a->db, &err) != 0) {
            say("a2-worker: could not resync: %s", err.message);
            return;
        }
    }
    char *after = NULL;
    size_t total = 0;
    for (;;) {
        a2_sessions page = {0};
        const char *names[1] = {a->consumer};
        if (a2_store_pending_sessions(a->store, names, 1, after, 1000, &page) !=
            0) {
            const a2_store_error *e = a2_store_last_error(a->store);
            say("a2-worker: could not resync: %s", e->message);
            if (e->code == A2_ESTORE_UNAVAILABLE) {
                a2_store_close(a->store);
                a->store = NULL;
            }
            a2_sessions_free(&page);
            break;
        }
        pthread_mutex_lock(&a->mu);
        for (size_t i = 0; i < page.count; i++)
            schedule_locked(a, page.items[i], 0, 0, 0);
        pthread_mutex_unlock(&a->mu);
        total += page.count;
        free(after);
        after = page.count == 1000 ? strdup(page.items[999]) : NULL;
        a2_sessions_free(&page);
        if (!after)
            break;
    }
    free(after);
    if (!a->quiet)
        say("a2-worker: resync: %zu session%s with pending work", total,
            total == 1 ? "" : "s");
}

static void on_event(app *a, const a2_worker_event *ev)
{
    int is_log = a->cons.log != NULL;
    switch (ev->type) {
    case A2_WORKER_EV_WAKE:
        if (!a->quiet)
            say("a2-worker: wake %s %s head %lld", ev->session,
                ev->cursor ? ev->cursor : "", (long long)ev->head);
        schedule(a, ev->session, 0, 1, ev->xid);
        break;
    case A2_WORKER_EV_LOG:
        if (!a->quiet)
            say("a2-worker: log %s #%lld %s", ev->session, (long long)ev->idx,
                ev->event_type ? ev->event_type : "");
        schedule(a, ev->session, 1, 1, ev->xid);
        break;
    case A2_WORKER_EV_SWEEP:
        schedule(a, ev->session, is_log, 0, 0);
        break;
    case A2_WORKER_EV_RESYNC:
        if (ev->all_sessions) {
            resync_all(a);
        } else {
            if (!a->quiet)
                say("a2-worker: resync of %zu session%s", ev->nsessions,
                    ev->nsessions == 1 ? "" : "s");
            for (size_t i = 0; i < ev->nsessions; i++)
                schedule(a, ev->sessions[i], is_log, 0, 0);
        }
        break;
    case A2_WORKER_EV_CLEARED:
        if (!a->quiet)
            say("a2-worker: cleared %s at #%lld", ev->session,
                (long long)ev->clear_index);
        break;
    default:
        break; /* connected/disconnected are logged by the library */
    }
}

static int usage_error(const char *fmt, ...)
        __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "a2-worker: %s\n", msg);
    return 2;
}

static int parse_int(const char *s, long long min, long long max,
                     long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_args(app *a, int argc, char **argv)
{
    static const struct option opts[] = {
            {"consumer", required_argument, NULL, 'c'},
            {"exec", required_argument, NULL, 'e'},
            {"serve", required_argument, NULL, 'S'},
            {"connect", required_argument, NULL, 'C'},
            {"token-file", required_argument, NULL, 'T'},
            {"db", required_argument, NULL, 'd'},
            {"concurrency", required_argument, NULL, 'n'},
            {"ttl", required_argument, NULL, 't'},
            {"max-failures", required_argument, NULL, 'm'},
            {"retry-after", required_argument, NULL, 'r'},
            {"lane-only", no_argument, NULL, 'L'},
            {"log", required_argument, NULL, 'l'},
            {"degraded-sweep", required_argument, NULL, 's'},
            {"name", required_argument, NULL, 'N'},
            {"quiet", no_argument, NULL, 'q'},
            {"help", no_argument, NULL, 'h'},
            {"version", no_argument, NULL, 'V'},
            {NULL, 0, NULL, 0},
    };
    const char *token_file = NULL, *log_arg = NULL, *exec_cmd = NULL,
               *serve_cmd = NULL;
    int lane_only = 0;
    long long v;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            a->consumer = optarg;
            break;
        case 'e':
            exec_cmd = optarg;
            break;
        case 'S':
            serve_cmd = optarg;
            break;
        case 'C':
            a->connect = optarg;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 'd':
            a->db = optarg;
            break;
        case 'n':
            if (parse_int(optarg, 1, MAX_CONCURRENCY, &v) != 0)
                return usage_error("--concurrency needs 1..%d, not '%s'",
                                   MAX_CONCURRENCY, optarg);
            a->concurrency = (int)v;
            break;
        case 't':
            if (parse_int(optarg, 10, 86400000LL, &v) != 0)
                return usage_error("--ttl needs milliseconds in "
                                   "10..86400000, not '%s'",
                                   optarg);
            a->ttl_ms = v;
            break;
        case 'm':
            if (parse_int(optarg, 1, 1000000, &v) != 0)
                return usage_error("--max-failures needs a count >= 1, not "
                                   "'%s'",
                                   optarg);
            a->max_failures = (int)v;
            break;
        case 'r':
            if (parse_int(optarg, 0, 86400000LL, &v) != 0)
                return usage_error("--retry-after needs milliseconds in "
                                   "0..86400000, not '%s'",
                                   optarg);
            a->retry_after_ms = v == 0 ? -1 : v;
            break;
        case 'L':
            lane_only = 1;
            break;
        case 'l':
            log_arg = optarg;
            break;
        case 's':
            if (parse_int(optarg, 10, 86400000LL, &v) != 0)
                return usage_error("--degraded-sweep needs milliseconds in "
                                   "10..86400000, not '%s'",
                                   optarg);
            a->degraded_sweep_ms = (int)v;
            break;
        case 'N':
            a->name = optarg;
            break;
        case 'q':
            a->quiet = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return -1;
        case 'V':
            puts("a2-worker " A2_VERSION_LINE);
            return -1;
        case ':':
            return usage_error("option %s needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option %s (see a2-worker --help)",
                               argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s' (quote CMD in --exec or "
                           "--serve)",
                           argv[optind]);
    if (!a->consumer || !*a->consumer)
        return usage_error("--consumer NAME is required");
    if (exec_cmd && serve_cmd)
        return usage_error("--exec and --serve exclude each other");
    a->cmd = serve_cmd ? serve_cmd : exec_cmd;
    a->serve_mode = serve_cmd != NULL;
    if (!a->cmd || !*a->cmd)
        return usage_error(a->serve_mode ? "--serve CMD must not be empty"
                                         : "--exec CMD is required (or "
                                           "--serve CMD)");
    if (lane_only && log_arg)
        return usage_error("--lane-only and --log exclude each other");
    if (a->connect && !a2__addr_kind(a->connect))
        return usage_error("--connect needs unix:PATH or tcp:HOST:PORT, not "
                           "'%s'",
                           a->connect);
    if (a2__addr_kind(a->connect) == A2__ADDR_TCP && !token_file)
        return usage_error("--connect tcp: needs --token-file");
    if (token_file) {
        char err[512];
        a->token = a2_wire_read_token(token_file, err, sizeof err);
        if (!a->token) {
            fprintf(stderr, "a2-worker: %s\n", err);
            return 1;
        }
    }
    if (log_arg) {
        if (strcmp(log_arg, "*") == 0) {
            a->log_all = 1;
        } else {
            char *copy = strdup(log_arg);
            if (!copy)
                return 1;
            size_t n = 1;
            for (char *p = copy; *p; p++)
                n += *p == ',';
            a->log_types = calloc(n, sizeof *a->log_types);
            if (!a->log_types) {
                free(copy);
                return 1;
            }
            char *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (!*t)
                    continue;
                a->log_types[a->nlog_types] = strdup(t);
                if (!a->log_types[a->nlog_types]) {
                    free(copy);
                    return 1;
                }
                a->nlog_types++;
            }
            free(copy);
            if (a->nlog_types == 0)
                return usage_error("--log needs event types (or '*')");
        }
    }
    if (!a->db) {
        const char *env = getenv("A2_DB");
        a->db = env ? env : "";
    }
    return 0;
}

int main(int argc, char **argv)
{
    app a = {.concurrency = 1, .sigpipe = {-1, -1}};
    int rc = parse_args(&a, argc, argv);
    if (rc != 0) {
        for (size_t i = 0; i < a.nlog_types; i++)
            free(a.log_types[i]);
        free(a.log_types);
        free(a.token);
        return rc < 0 ? 0 : rc;
    }
    a2_worker *w = NULL;
    int nslots = 0;
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    a.cons.name = a.consumer;
    if (a.log_all || a.nlog_types) {
        a.log_spec.lane = "log";
        a.log_spec.types = a.log_all ? NULL : (const char *const *)a.log_types;
        a.log_spec.ntypes = a.log_all ? 0 : a.nlog_types;
        a.log_spec.backfill = false;
        a.cons.log = &a.log_spec;
    }
    if (pipe2(a.sigpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "a2-worker: could not create a pipe: %s\n",
                strerror(errno));
        rc = 1;
        goto done;
    }
    signal_fd = a.sigpipe[1];
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Check the store is reachable before starting anything. */
    a2_store_error serr = {0};
    if (a2_store_open(&a.store, a.db, &serr) != 0) {
        fprintf(stderr, "a2-worker: %s\n",
                serr.message[0] ? serr.message
                                : "could not connect to the database");
        rc = serr.code == A2_EINVALID_ARGUMENT ? 2 : 1;
        goto done;
    }
    if (a.serve_mode && serve_start(&a) != 0) {
        fprintf(stderr, "a2-worker: could not start the handlers' thread\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < a.concurrency; i++) {
        char err[1024], holder[400];
        char name[300];
        if (a.name)
            snprintf(name, sizeof name, "%s", a.name);
        else {
            char host[256] = "worker";
            gethostname(host, sizeof host);
            host[sizeof host - 1] = '\0';
            snprintf(name, sizeof name, "%s:%ld", host, (long)getpid());
        }
        snprintf(holder, sizeof holder, "%s/%d", name, i + 1);
        a2_worker_runner_options ro = {
                .db = a.db,
                .holder = holder,
                .consumers = &a.cons,
                .nconsumers = 1,
                .ttl_ms = a.ttl_ms,
                .max_failures = a.max_failures,
                .retry_after_ms = a.retry_after_ms,
                .handler = handle,
                .ctx = &a.slots[i],
                .log = a.quiet ? NULL : lib_log,
                .log_ctx = &a,
        };
        slot *s = &a.slots[i];
        s->a = &a;
        s->id = i;
        s->runner = a2_worker_runner_new(&ro, err, sizeof err);
        if (!s->runner) {
            fprintf(stderr, "a2-worker: %s\n", err);
            rc = 1;
            goto done;
        }
        if (pthread_create(&s->thread, NULL, slot_main, s) != 0) {
            a2_worker_runner_free(s->runner);
            s->runner = NULL;
            fprintf(stderr, "a2-worker: could not start a thread\n");
            rc = 1;
            goto done;
        }
        nslots++;
    }

    char err[1024];
    a2_worker_options wo = {
            .connect = a.connect,
            .token = a.token,
            .name = a.name,
            .db = a.db,
            .degraded_sweep_ms = a.degraded_sweep_ms,
            .log = lib_log,
            .log_ctx = &a,
    };
    w = a2_worker_new(&wo, err, sizeof err);
    if (!w) {
        fprintf(stderr, "a2-worker: %s\n", err);
        rc = 1;
        goto done;
    }
    int lf = a.cons.log ? (a.log_all ? A2_WIRE_LOG_ALL : A2_WIRE_LOG_TYPES)
                        : A2_WIRE_LOG_NONE;
    if (a2_worker_subscribe(w, a.consumer, lf, (const char *const *)a.log_types,
                            a.nlog_types) != 0) {
        fprintf(stderr, "a2-worker: could not subscribe to %s\n", a.consumer);
        rc = 1;
        goto done;
    }
    if (!a.quiet)
        say("a2-worker: serving %s%s with %d %shandler%s, ttl %lld ms, %s",
            a.consumer, a.cons.log ? " (log consumer)" : "", a.concurrency,
            a.serve_mode ? "long-lived " : "", a.concurrency == 1 ? "" : "s",
            (long long)(a.ttl_ms ? a.ttl_ms : A2_WORKER_DEFAULT_TTL_MS),
            a.connect ? a.connect : "no a2-consumer (degraded sweep only)");

    while (!got_signal) {
        int prc = a2_worker_process(w);
        if (prc != 0) {
            say("a2-worker: %s",
                prc == A2_WORKER_ENOMEM ? "out of memory" : "poll failed");
            rc = 1;
            break;
        }
        a2_worker_event ev;
        while (a2_worker_next(w, &ev) == 1)
            on_event(&a, &ev);
        int t = a2_worker_timeout(w);
        int tt = fire_timers(&a);
        if (tt >= 0 && (t < 0 || tt < t))
            t = tt;
        struct pollfd p[2];
        int np = 0;
        p[np++] = (struct pollfd){a.sigpipe[0], POLLIN, 0};
        if (a2_worker_fd(w) >= 0)
            p[np++] = (struct pollfd){a2_worker_fd(w), a2_worker_poll_events(w),
                                      0};
        if (poll(p, (nfds_t)np, t) > 0 && (p[0].revents & POLLIN)) {
            char buf[64];
            while (read(a.sigpipe[0], buf, sizeof buf) > 0)
                ;
        }
    }
    if (got_signal) {
        pthread_mutex_lock(&a.mu);
        int running = a.nrunning;
        pthread_mutex_unlock(&a.mu);
        say("a2-worker: %s received, draining %d running handler%s",
            got_signal == SIGTERM ? "SIGTERM" : "SIGINT", running,
            running == 1 ? "" : "s");
    }
done:
    pthread_mutex_lock(&a.mu);
    a.stopping = 1;
    for (int i = 0; i < nslots; i++)
        a2_worker_runner_stop(a.slots[i].runner);
    pthread_cond_broadcast(&a.cv);
    pthread_mutex_unlock(&a.mu);
    for (int i = 0; i < nslots; i++) {
        pthread_join(a.slots[i].thread, NULL);
        a2_worker_runner_free(a.slots[i].runner);
    }
    if (a.serve_mode) {
        if (a.srv.started && !a.quiet)
            say("a2-worker: closing %d handler%s", a.srv.n,
                a.srv.n == 1 ? "" : "s");
        serve_stop(&a);
    }
    if (nslots && !a.quiet)
        say("a2-worker: stopped after %llu handler runs",
            (unsigned long long)a.handled);
    for (size_t i = 0; i < a.nbuckets; i++)
        for (job *k = a.buckets[i], *next; k; k = next) {
            next = k->hnext;
            free(k->session);
            free(k);
        }
    free(a.buckets);
    a2_worker_free(w);
    a2_store_close(a.store);
    signal_fd = -1;
    if (a.sigpipe[0] >= 0)
        close(a.sigpipe[0]);
    if (a.sigpipe[1] >= 0)
        close(a.sigpipe[1]);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.mu);
    for (size_t i = 0; i < a.nlog_types; i++)
        free(a.log_types[i]);
    free(a.log_types);
    free(a.token);
    return rc;
}
