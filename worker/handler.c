/*
 * a2-worker's handler processes: what --exec and --serve share (the event's
 * line, the environment, the process, stderr's tail), and --exec, CMD once
 * per event with the event on its stdin. See handler.h.
 */
#include "handler.h"

#include "a2/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ── what --exec and --serve share ─────────────────────────────────────── */

static char *event_json(const a2__cmd *cmd, const a2_head *h)
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
    json_object_set_new(o, "consumer", json_string(cmd->consumer));
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
char *a2__event_line(const a2__cmd *c, const a2_head *h, size_t *len)
{
    char *text = event_json(c, h);
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

void a2__close_fd(int *fd)
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
char **a2__build_env(char **vars, size_t nvars)
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

void a2__tail_add(a2__tail *t, const char *buf, size_t n)
{
    if (n >= A2W_STDERR_TAIL) {
        memcpy(t->buf, buf + n - A2W_STDERR_TAIL, A2W_STDERR_TAIL);
        t->len = A2W_STDERR_TAIL;
    } else if (t->len + n <= A2W_STDERR_TAIL) {
        memcpy(t->buf + t->len, buf, n);
        t->len += n;
    } else {
        size_t drop = t->len + n - A2W_STDERR_TAIL;
        memmove(t->buf, t->buf + drop, t->len - drop);
        t->len -= drop;
        memcpy(t->buf + t->len, buf, n);
        t->len += n;
    }
    t->buf[t->len] = '\0';
}

void a2__tail_clear(a2__tail *t)
{
    t->len = 0;
    t->buf[0] = '\0';
}

/* The tail as one line: trailing newlines dropped, the others as spaces. */
void a2__tail_line(const a2__tail *t, char *out, size_t len)
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
void a2__utf8_clean(char *s)
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
void a2__status_text(int status, int verbs, char *buf, size_t len)
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
pid_t a2__spawn(const a2__cmd *c, char **env, int fds[3], int nonblock,
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
        char *argv[] = {"sh", "-c", (char *)c->cmd, NULL};
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
int a2__add_returned(a2_worker_reply *reply, json_t *v, size_t nth, char *why,
                      size_t whylen)
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
    int overflow; /* stdout went past A2W_MAX_STDOUT */
    a2__tail err;
} run_result;

/* Runs the command; 0 when it ran (see res->status), -1 when it could not
 * be started (reason in why). */
static int run_command(const a2__cmd *c, const a2_head *h, const char *input,
                       size_t inlen, run_result *res, char *why, size_t whylen)
{
    int fds[3] = {-1, -1, -1};
    char *vars[7] = {0};
    char **env = NULL;
    int rc = -1;
    const a2_event *e = &h->event;
    if (asprintf(&vars[0], "A2_SESSION=%s", e->session_id) < 0 ||
        asprintf(&vars[1], "A2_CONSUMER=%s", c->consumer) < 0 ||
        asprintf(&vars[2], "A2_INDEX=%lld", (long long)e->index) < 0 ||
        asprintf(&vars[3], "A2_ATTEMPT=%d", h->dispatch.attempt_count) < 0 ||
        asprintf(&vars[4], "A2_EVENT_TYPE=%s", e->type) < 0 ||
        asprintf(&vars[5], "A2_EVENT_ID=%s", e->id) < 0 ||
        (h->dispatch.lane &&
         asprintf(&vars[6], "A2_LANE=%s", h->dispatch.lane) < 0)) {
        snprintf(why, whylen, "out of memory");
        goto done;
    }
    env = a2__build_env(vars, 7);
    if (!env) {
        snprintf(why, whylen, "out of memory");
        goto done;
    }
    pid_t pid = a2__spawn(c, env, fds, 0, why, whylen);
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
                a2__close_fd(&fds[0]);
        }
        char buf[65536];
        if (iout >= 0 && p[iout].revents) {
            ssize_t n = read(out, buf, sizeof buf);
            if (n <= 0 && !(n < 0 && errno == EINTR)) {
                open_out = 0;
            } else if (n > 0 && res->outlen + (size_t)n > A2W_MAX_STDOUT) {
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
                a2__tail_add(&res->err, buf, (size_t)n);
        }
    }
    a2__close_fd(&fds[0]);
    while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR)
        ;
    rc = 0;
done:
    for (int i = 0; i < 3; i++)
        a2__close_fd(&fds[i]);
    for (int i = 0; i < 7; i++)
        free(vars[i]);
    free(env);
    return rc;
}

/* One event through --exec: 0 with the returned events added to reply, or
 * 1 with the reason in why. */
int a2__exec_event(const a2__cmd *c, const a2_head *h, const char *line,
                    size_t len, a2_worker_reply *reply, char *why,
                    size_t whylen, size_t *returned)
{
    const a2_event *e = &h->event;
    run_result res = {0};
    int rc = 1;
    if (run_command(c, h, line, len, &res, why, whylen) != 0) {
        if (!*why)
            snprintf(why, whylen, "could not run the command");
    } else if (!WIFEXITED(res.status) || WEXITSTATUS(res.status) != 0) {
        /* The tail of stderr (its last lines), then how it ended. */
        char tail[A2W_STDERR_TAIL + 1], how[64];
        a2__tail_line(&res.err, tail, sizeof tail);
        a2__status_text(res.status, 0, how, sizeof how);
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
                if (a2__add_returned(reply, v, *returned + 1, why, whylen) !=
                    0) {
                    rc = 1;
                    json_decref(v);
                    break;
                }
                (*returned)++;
            } else if (*p && !c->quiet) {
                a2__log("a2-worker", "[%s #%lld] %s", e->session_id,
                         (long long)e->index, p);
            }
            json_decref(v);
            p = nl ? nl + 1 : NULL;
        }
    }
    free(res.out);
    return rc;
}
