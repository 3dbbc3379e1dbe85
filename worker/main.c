/*
 * a2-worker: runs a command for every event claimed for a consumer.
 *
 * The main thread holds the connection to a2-consumer (liba2worker) and a
 * table of sessions to work; --concurrency threads each own a runner
 * (claim -> handle -> complete/fail, leases renewed while a handler runs)
 * and take sessions from that table. The handler is CMD run by /bin/sh -c,
 * with the event as JSON on stdin. See docs/worker.md.
 */
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
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_CONCURRENCY 256
#define MAX_STDOUT      (16 * 1024 * 1024)
#define STDERR_TAIL     2048

static const char usage_text[] =
        "usage: a2-worker --consumer NAME --exec CMD [options]\n"
        "\n"
        "Runs CMD (with /bin/sh -c) for every event claimed for consumer "
        "NAME:\n"
        "the event as JSON on stdin; A2_SESSION, A2_CONSUMER, A2_INDEX,\n"
        "A2_ATTEMPT (and A2_LANE, A2_EVENT_TYPE, A2_EVENT_ID) in its "
        "environment.\n"
        "Exit 0 completes the event, and every stdout line that is a JSON "
        "object\n"
        "with a \"type\" is appended as a returned event ({\"type\", "
        "\"payload\",\n"
        "\"id\"}); a non-zero exit fails it with the tail of stderr as the "
        "error.\n"
        "\n"
        "Options:\n"
        "  --consumer NAME        the consumer to serve (required)\n"
        "  --exec CMD             the handler command (required)\n"
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
        "0.\n"
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
    struct job *hnext; /* hash chain */
    struct job *rnext; /* ready queue */
    struct job *tnext; /* timer list */
} job;

typedef struct app app;

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

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
                            int hinted)
{
    if (a->stopping)
        return;
    job *j = find_job(a, session);
    if (!j && !(j = add_job(a, session))) {
        say("a2-worker: out of memory queuing %s", session);
        return;
    }
    j->wake_log |= wake_log;
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

static void schedule(app *a, const char *session, int wake_log, int hinted)
{
    pthread_mutex_lock(&a->mu);
    schedule_locked(a, session, wake_log, hinted);
    pthread_mutex_unlock(&a->mu);
}

/* Due retry timers become queued; returns ms to the next timer or -1. */
static int fire_timers(app *a)
{
    int64_t now = mono_ms(), next = -1;
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

/* ── the handler: CMD with the event on stdin ─────────────────────────── */

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

/* environ plus the A2_* variables of the run; NULL on ENOMEM. */
static char **build_env(const app *a, const a2_head *h, char **owned,
                        size_t nowned)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + nowned + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "A2_SESSION=", 11) == 0 ||
            strncmp(environ[i], "A2_CONSUMER=", 12) == 0 ||
            strncmp(environ[i], "A2_INDEX=", 9) == 0 ||
            strncmp(environ[i], "A2_ATTEMPT=", 11) == 0 ||
            strncmp(environ[i], "A2_LANE=", 8) == 0 ||
            strncmp(environ[i], "A2_EVENT_TYPE=", 14) == 0 ||
            strncmp(environ[i], "A2_EVENT_ID=", 12) == 0)
            continue;
        env[k++] = environ[i];
    }
    (void)a;
    (void)h;
    for (size_t i = 0; i < nowned; i++)
        if (owned[i])
            env[k++] = owned[i];
    env[k] = NULL;
    return env;
}

typedef struct {
    int status; /* waitpid status */
    char *out;  /* stdout */
    size_t outlen;
    int overflow; /* stdout went past MAX_STDOUT */
    char err[STDERR_TAIL + 1];
    size_t errlen;
    int64_t ms;
} run_result;

static void keep_tail(run_result *res, const char *buf, size_t n)
{
    if (n >= STDERR_TAIL) {
        memcpy(res->err, buf + n - STDERR_TAIL, STDERR_TAIL);
        res->errlen = STDERR_TAIL;
    } else if (res->errlen + n <= STDERR_TAIL) {
        memcpy(res->err + res->errlen, buf, n);
        res->errlen += n;
    } else {
        size_t drop = res->errlen + n - STDERR_TAIL;
        memmove(res->err, res->err + drop, res->errlen - drop);
        res->errlen -= drop;
        memcpy(res->err + res->errlen, buf, n);
        res->errlen += n;
    }
    res->err[res->errlen] = '\0';
}

/* Runs the command; 0 when it ran (see res->status), -1 when it could not
 * be started (reason in res->err). */
static int run_command(const app *a, const a2_head *h, const char *input,
                       run_result *res)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    char *vars[7] = {0};
    char **env = NULL;
    int rc = -1;
    int64_t start = mono_ms();
    const a2_event *e = &h->event;
    if (asprintf(&vars[0], "A2_SESSION=%s", e->session_id) < 0 ||
        asprintf(&vars[1], "A2_CONSUMER=%s", a->consumer) < 0 ||
        asprintf(&vars[2], "A2_INDEX=%lld", (long long)e->index) < 0 ||
        asprintf(&vars[3], "A2_ATTEMPT=%d", h->dispatch.attempt_count) < 0 ||
        asprintf(&vars[4], "A2_EVENT_TYPE=%s", e->type) < 0 ||
        asprintf(&vars[5], "A2_EVENT_ID=%s", e->id) < 0 ||
        (h->dispatch.lane &&
         asprintf(&vars[6], "A2_LANE=%s", h->dispatch.lane) < 0)) {
        snprintf(res->err, sizeof res->err, "out of memory");
        goto done;
    }
    env = build_env(a, h, vars, 7);
    if (!env || pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
        pipe2(err, O_CLOEXEC) != 0) {
        snprintf(res->err, sizeof res->err, "could not create pipes: %s",
                 strerror(errno));
        goto done;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(res->err, sizeof res->err, "could not fork: %s",
                 strerror(errno));
        goto done;
    }
    if (pid == 0) {
        /* Its own process group: a terminal's Ctrl-C reaches a2-worker,
         * which lets the handler finish. */
        setpgid(0, 0);
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
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
    close(in[0]);
    in[0] = -1;
    close(out[1]);
    out[1] = -1;
    close(err[1]);
    err[1] = -1;
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    size_t inlen = strlen(input), sent = 0;
    size_t cap = 0;
    int open_out = 1, open_err = 1;
    while (open_out || open_err) {
        struct pollfd p[3];
        int np = 0, iout = -1, ierr = -1, iin = -1;
        if (open_out) {
            p[np] = (struct pollfd){out[0], POLLIN, 0};
            iout = np++;
        }
        if (open_err) {
            p[np] = (struct pollfd){err[0], POLLIN, 0};
            ierr = np++;
        }
        if (in[1] >= 0) {
            p[np] = (struct pollfd){in[1], POLLOUT, 0};
            iin = np++;
        }
        if (poll(p, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (iin >= 0 && p[iin].revents) {
            ssize_t n = write(in[1], input + sent, inlen - sent);
            if (n > 0)
                sent += (size_t)n;
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                sent = inlen; /* the handler closed stdin: fine */
            if (sent >= inlen) {
                close(in[1]);
                in[1] = -1;
            }
        }
        char buf[65536];
        if (iout >= 0 && p[iout].revents) {
            ssize_t n = read(out[0], buf, sizeof buf);
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
            ssize_t n = read(err[0], buf, sizeof buf);
            if (n <= 0 && !(n < 0 && errno == EINTR))
                open_err = 0;
            else if (n > 0)
                keep_tail(res, buf, (size_t)n);
        }
    }
    if (in[1] >= 0) {
        close(in[1]);
        in[1] = -1;
    }
    while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR)
        ;
    rc = 0;
done:
    res->ms = mono_ms() - start;
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    for (int i = 0; i < 7; i++)
        free(vars[i]);
    free(env);
    return rc;
}

/* Trims res->err to its last non-empty line(s), newlines as " | ". */
static void error_text(const run_result *res, char *buf, size_t len)
{
    char tail[STDERR_TAIL + 1];
    snprintf(tail, sizeof tail, "%s", res->err);
    size_t n = strlen(tail);
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r'))
        tail[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (tail[i] == '\n')
            tail[i] = ' ';
    char how[64];
    if (WIFEXITED(res->status))
        snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(res->status));
    else if (WIFSIGNALED(res->status))
        snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(res->status));
    else
        snprintf(how, sizeof how, "status %d", res->status);
    if (n > 0)
        snprintf(buf, len, "%s (%s)", tail, how);
    else
        snprintf(buf, len, "%s", how);
}

static int handle(void *ctx, const a2_head *h, a2_worker_reply *reply)
{
    app *a = ctx;
    const a2_event *e = &h->event;
    char *input = event_json(a, h);
    if (!input) {
        a2_worker_reply_error(reply, "could not render the event as JSON");
        return 1;
    }
    if (!a->quiet)
        say("a2-worker: run %s #%lld %s attempt %d%s%s", e->session_id,
            (long long)e->index, e->type, h->dispatch.attempt_count,
            h->dispatch.lane ? " lane " : "",
            h->dispatch.lane ? h->dispatch.lane : "");
    size_t inlen = strlen(input);
    char *line = malloc(inlen + 2);
    if (line) {
        memcpy(line, input, inlen);
        line[inlen] = '\n';
        line[inlen + 1] = '\0';
    }
    run_result res = {0};
    int started = line ? run_command(a, h, line, &res) : -1;
    free(line);
    free(input);
    int rc;
    if (started != 0) {
        a2_worker_reply_error(reply, res.err[0] ? res.err
                                                : "could not run the command");
        say("a2-worker: could not run the handler for %s #%lld: %s",
            e->session_id, (long long)e->index, res.err);
        rc = 1;
    } else if (WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0 &&
               res.overflow) {
        a2_worker_reply_error(reply, "the handler wrote more than 16 MiB "
                                     "to stdout");
        say("a2-worker: failed %s #%lld: stdout over 16 MiB", e->session_id,
            (long long)e->index);
        rc = 1;
    } else if (WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0) {
        rc = 0;
        size_t returned = 0;
        char *p = res.out;
        while (p && *p) {
            char *nl = strchr(p, '\n');
            if (nl)
                *nl = '\0';
            json_t *v = json_loads(p, 0, NULL);
            json_t *type = v ? json_object_get(v, "type") : NULL;
            if (json_is_object(v) && json_is_string(type)) {
                json_t *payload = json_object_get(v, "payload");
                json_t *id = json_object_get(v, "id");
                char *ptext =
                        payload ? json_dumps(payload,
                                             JSON_COMPACT | JSON_ENCODE_ANY)
                                : NULL;
                int arc = a2_worker_reply_add(
                        reply, json_string_value(type), ptext,
                        json_is_string(id) ? json_string_value(id) : NULL);
                free(ptext);
                if (arc != 0) {
                    char msg[300];
                    snprintf(msg, sizeof msg,
                             "returned event %zu is invalid (type '%.100s')",
                             returned + 1, json_string_value(type));
                    a2_worker_reply_error(reply, msg);
                    rc = 1;
                    json_decref(v);
                    break;
                }
                returned++;
            } else if (*p && !a->quiet) {
                say("a2-worker: [%s #%lld] %s", e->session_id,
                    (long long)e->index, p);
            }
            json_decref(v);
            p = nl ? nl + 1 : NULL;
        }
        if (!a->quiet && rc == 0)
            say("a2-worker: ok %s #%lld in %lld ms, %zu returned",
                e->session_id, (long long)e->index, (long long)res.ms,
                returned);
    } else {
        char text[STDERR_TAIL + 100];
        error_text(&res, text, sizeof text);
        a2_worker_reply_error(reply, text);
        say("a2-worker: failed %s #%lld attempt %d in %lld ms: %s",
            e->session_id, (long long)e->index, h->dispatch.attempt_count,
            (long long)res.ms, text);
        rc = 1;
    }
    free(res.out);
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
        /* Woken by a2-consumer, which announces every head that becomes
         * claimable: one claim round is enough. */
        int woken = j->hinted;
        char *session = strdup(j->session);
        a->nrunning++;
        pthread_mutex_unlock(&a->mu);

        a2_worker_run_stats st = {0};
        int rc = !session ? A2_WORKER_ENOMEM
                 : woken  ? a2_worker_runner_run_woken(s->runner, session,
                                                       wake_log != 0, &st)
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
                    .now = real_ms(),
                    .hinted = j->hinted,
                    .claimed = st.claimed > 0,
                    .rechecks = j->rechecks,
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
                    set_timer(a, j, mono_ms() + next.delay_ms);
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
            schedule_locked(a, page.items[i], 0, 0);
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
        schedule(a, ev->session, 0, 1);
        break;
    case A2_WORKER_EV_LOG:
        if (!a->quiet)
            say("a2-worker: log %s #%lld %s", ev->session, (long long)ev->idx,
                ev->event_type ? ev->event_type : "");
        schedule(a, ev->session, 1, 1);
        break;
    case A2_WORKER_EV_SWEEP:
        schedule(a, ev->session, is_log, 0);
        break;
    case A2_WORKER_EV_RESYNC:
        if (ev->all_sessions) {
            resync_all(a);
        } else {
            if (!a->quiet)
                say("a2-worker: resync of %zu session%s", ev->nsessions,
                    ev->nsessions == 1 ? "" : "s");
            for (size_t i = 0; i < ev->nsessions; i++)
                schedule(a, ev->sessions[i], is_log, 0);
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

static char *read_token(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "could not open token file %s: %s", path,
                 strerror(errno));
        return NULL;
    }
    char buf[4096];
    char *tok = NULL;
    if (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (*buf)
            tok = strdup(buf);
    }
    fclose(f);
    if (!tok)
        snprintf(err, errlen, "token file %s is empty", path);
    return tok;
}

static int parse_args(app *a, int argc, char **argv)
{
    static const struct option opts[] = {
            {"consumer", required_argument, NULL, 'c'},
            {"exec", required_argument, NULL, 'e'},
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
    const char *token_file = NULL, *log_arg = NULL;
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
            a->cmd = optarg;
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
        return usage_error("unexpected argument '%s' (quote CMD in --exec)",
                           argv[optind]);
    if (!a->consumer || !*a->consumer)
        return usage_error("--consumer NAME is required");
    if (!a->cmd || !*a->cmd)
        return usage_error("--exec CMD is required");
    if (lane_only && log_arg)
        return usage_error("--lane-only and --log exclude each other");
    if (a->connect && strncmp(a->connect, "unix:", 5) != 0 &&
        strncmp(a->connect, "tcp:", 4) != 0)
        return usage_error("--connect needs unix:PATH or tcp:HOST:PORT, not "
                           "'%s'",
                           a->connect);
    if (a->connect && strncmp(a->connect, "tcp:", 4) == 0 && !token_file)
        return usage_error("--connect tcp: needs --token-file");
    if (token_file) {
        char err[512];
        a->token = read_token(token_file, err, sizeof err);
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
                .ctx = &a,
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
        say("a2-worker: serving %s%s with %d handler%s, ttl %lld ms, %s",
            a.consumer, a.cons.log ? " (log consumer)" : "", a.concurrency,
            a.concurrency == 1 ? "" : "s",
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
