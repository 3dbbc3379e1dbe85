/*
 * a2-worker's --serve: one long-lived handler per slot, one JSON line in and
 * one JSON line out per event (see handler.h and docs/worker.md).
 *
 * A thread of its own (serve_main) owns every handler process: it starts
 * them (and restarts them with a back-off), writes the events the slot
 * threads post, reads the answers, logs their stderr, and fails an event
 * whose handler dies, answers too late or answers too much. It only ever
 * waits in poll(2). A slot thread posts its event (proc.req) and waits on
 * proc.cv until the event is settled (serve_req.done).
 */
#include "handler.h"

#include "../common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SERVE_BACKOFF_MIN_MS   100   /* restart delay after a death ... */
#define SERVE_BACKOFF_MAX_MS   10000 /* ... doubling up to this */
#define SERVE_EXIT_GRACE_MS    2000  /* closed stdout or stdin: then SIGKILL */
#define SERVE_DRAIN_TERM_MS    5000  /* stopping: stdin closed, then SIGTERM */
#define SERVE_DRAIN_KILL_MS    7000  /* ... then SIGKILL */
#define SERVE_DRAIN_MAX_MS     10000 /* ... then a2-worker stops waiting */
#define SERVE_REAP_STEP_MAX_MS 100   /* waitpid retries while one exits */

/* An event handed to a slot's --serve handler (on the slot's stack). */
typedef struct serve_req {
    const char *line; /* the event, one line with its newline */
    size_t len;
    const char *session;
    int64_t index;
    int done;     /* under serve.mu: settled */
    char *answer; /* done: the answer line (the slot frees it), or NULL */
    size_t answer_len;
    char error[A2W_STDERR_TAIL + 512]; /* done without an answer: why */
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
    a2__tail tail; /* stderr since cur was sent */
} proc;

typedef struct a2__serve serve;

struct a2__serve {
    const a2__cmd *cmd;
    int64_t ttl_ms; /* the time a handler has to answer */
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
};

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
    char tail[A2W_STDERR_TAIL + 1] = "";
    if (!answer)
        a2__tail_line(&p->tail, tail, sizeof tail);
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
        a2__log("a2-worker", "[handler %d %s #%lld] %.*s", p->slot,
                 p->cur->session, (long long)p->cur->index, (int)n, p->errline);
    else
        a2__log("a2-worker", "[handler %d] %.*s", p->slot, (int)n, p->errline);
}

/* stderr: kept as the tail of the event in flight, and logged by line. */
static void proc_stderr(proc *p, const char *data, size_t n)
{
    if (p->cur)
        a2__tail_add(&p->tail, data, n);
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
        a2__log("a2-worker", "handler %d answered with no event in flight, "
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
        if (p->linelen + take > A2W_MAX_STDOUT) {
            p->discard = 1;
            proc_going(p, now, 0, "the handler's answer is longer than 16 MiB");
            return;
        }
        if (p->linelen + take + 1 > p->linecap) {
            size_t cap = p->linecap ? p->linecap : 4096;
            while (cap < p->linelen + take + 1)
                cap *= 2;
            if (cap > A2W_MAX_STDOUT + 1)
                cap = A2W_MAX_STDOUT + 1;
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
        a2__close_fd(&p->out);
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
        a2__close_fd(&p->err);
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
            a2__close_fd(&p->in);
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
    a2__tail_clear(&p->tail);
    proc_write(p, now);
}

static void proc_start(serve *sv, const a2__cmd *c, proc *p, int64_t now)
{
    char slotvar[32], why[300] = "";
    char *vars[2] = {NULL, slotvar};
    char **env = NULL;
    int fds[3];
    pid_t pid = -1;
    snprintf(slotvar, sizeof slotvar, "A2_SLOT=%d", p->slot);
    if (asprintf(&vars[0], "A2_CONSUMER=%s", c->consumer) < 0) {
        vars[0] = NULL;
        snprintf(why, sizeof why, "out of memory");
    } else if (!(env = a2__build_env(vars, 2))) {
        snprintf(why, sizeof why, "out of memory");
    } else {
        pid = a2__spawn(c, env, fds, 1, why, sizeof why);
    }
    free(env);
    free(vars[0]);
    if (pid < 0) {
        a2__log("a2-worker", "could not start handler %d: %s; trying again in "
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
        a2__tail_clear(&p->tail);
        proc_settle(sv, p, NULL, 0, text);
        return;
    }
    p->pid = pid;
    p->in = fds[0];
    p->out = fds[1];
    p->err = fds[2];
    if (!c->quiet)
        a2__log("a2-worker", "handler %d started (pid %ld)", p->slot, (long)pid);
}

/* p's process is gone (status -1: reaped elsewhere): fails the event in
 * flight with how it ended, and schedules the next start. */
static void proc_exited(serve *sv, const a2__cmd *c, proc *p, int status,
                        int64_t now, int closing)
{
    proc_read_err(p, 64); /* what it wrote before it exited */
    proc_errline(p);
    a2__close_fd(&p->in);
    a2__close_fd(&p->out);
    a2__close_fd(&p->err);
    char how[64], why[300];
    if (status == -1)
        snprintf(how, sizeof how, "ended");
    else
        a2__status_text(status, 1, how, sizeof how);
    snprintf(why, sizeof why, "handler %s", how);
    proc_settle(sv, p, NULL, 0, why);
    int clean = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (closing) {
        if (!c->quiet || !clean)
            a2__log("a2-worker", "handler %d (pid %ld) %s", p->slot,
                     (long)p->pid, how);
    } else {
        a2__log("a2-worker", "handler %d (pid %ld) %s%s%s; restarting in %lld ms",
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
static void proc_timers(serve *sv, const a2__cmd *c, proc *p, int64_t now,
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
        a2__close_fd(&p->in);
        proc_settle(sv, p, NULL, 0, p->kill_why);
    }
    if (p->exiting && now >= p->reap_at) {
        int status = 0;
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD)) {
            proc_exited(sv, c, p, r == p->pid ? status : -1, now, closing);
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
        a2__close_fd(&p->in);
        p->term_at = now + SERVE_DRAIN_TERM_MS;
        proc_going(p, now, SERVE_DRAIN_KILL_MS, "a2-worker is stopping");
    }
}

/* Starts, sends and runs the timers of every handler; returns how many
 * have a process, and the earliest timer in *next. */
static int serve_step(serve *sv, const a2__cmd *c, int64_t now, int64_t ttl,
                      int closing, int64_t *next)
{
    int live = 0;
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        if (p->pid <= 0 && !closing && now >= p->start_at) {
            proc_start(sv, c, p, now);
            if (p->pid <= 0)
                sv->posted[i] = NULL; /* settled by the failed start */
        }
        if (p->pid > 0 && sv->posted[i] && !p->exiting && p->in >= 0 &&
            p->out >= 0)
            proc_send(sv, p, sv->posted[i], now, ttl);
        if (p->pid > 0)
            proc_timers(sv, c, p, now, ttl, closing);
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
    serve *sv = arg;
    const a2__cmd *c = sv->cmd;
    int64_t ttl = sv->ttl_ms;
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
        int live = serve_step(sv, c, now, ttl, closing, &next);
        if (closing && (live == 0 || now >= drain_end))
            break;
        nfds_t np = serve_pollfds(sv);
        int64_t wait = next < 0 ? -1 : next > now ? next - now : 0;
        if (wait > 60000)
            wait = 60000;
        int n = poll(sv->pfd, np, (int)wait);
        if (n < 0 && errno != EINTR) {
            a2__log("a2-worker", "poll failed: %s", strerror(errno));
            poll(NULL, 0, 100);
        } else if (n > 0) {
            serve_io(sv, a2__mono_ms());
        }
    }
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        if (p->pid <= 0)
            continue;
        a2__log("a2-worker", "handler %d (pid %ld) did not exit; killed",
                 p->slot, (long)p->pid);
        proc_signal(p, SIGKILL);
        int status;
        if (waitpid(p->pid, &status, WNOHANG) == p->pid)
            p->pid = 0;
    }
    return NULL;
}

a2__serve *a2__serve_start(const a2__cmd *c, int slots, int64_t ttl_ms)
{
    serve *sv = calloc(1, sizeof *sv);
    if (!sv)
        return NULL;
    sv->cmd = c;
    sv->ttl_ms = ttl_ms ? ttl_ms : A2_WORKER_DEFAULT_TTL_MS;
    sv->n = slots;
    sv->wake[0] = sv->wake[1] = -1;
    pthread_mutex_init(&sv->mu, NULL);
    sv->procs = calloc((size_t)sv->n, sizeof *sv->procs);
    sv->posted = calloc((size_t)sv->n, sizeof(serve_req *));
    sv->pfd = calloc(1 + 3 * (size_t)sv->n, sizeof *sv->pfd);
    sv->pidx = calloc(3 * (size_t)sv->n, sizeof(int));
    if (!sv->procs || !sv->posted || !sv->pfd || !sv->pidx ||
        pipe2(sv->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        a2__serve_stop(sv);
        return NULL;
    }
    for (int i = 0; i < sv->n; i++) {
        proc *p = &sv->procs[i];
        p->slot = i + 1;
        p->in = p->out = p->err = -1;
        p->backoff_ms = SERVE_BACKOFF_MIN_MS;
        pthread_cond_init(&p->cv, NULL);
    }
    sv->ncv = sv->n;
    if (pthread_create(&sv->thread, NULL, serve_main, sv) != 0) {
        a2__serve_stop(sv);
        return NULL;
    }
    sv->started = 1;
    return sv;
}

void a2__serve_stop(serve *sv)
{
    if (!sv)
        return;
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
        a2__close_fd(&p->in);
        a2__close_fd(&p->out);
        a2__close_fd(&p->err);
        free(p->line);
        pthread_cond_destroy(&p->cv);
    }
    free(sv->procs);
    free(sv->posted);
    free(sv->pfd);
    free(sv->pidx);
    a2__close_fd(&sv->wake[0]);
    a2__close_fd(&sv->wake[1]);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
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
            if (a2__add_returned(reply, ev, i + 1, why, whylen) != 0) {
                rc = 1;
                break;
            }
            (*returned)++;
        }
    }
    json_decref(v);
    return rc;
}

int a2__serve_event(serve *sv, int slot, const a2_head *h, const char *line,
                     size_t len, a2_worker_reply *reply, char *why,
                     size_t whylen, size_t *returned)
{
    proc *p = &sv->procs[slot - 1];
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
