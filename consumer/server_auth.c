/*
 * The hello of a worker connection: the first frame must be hello; over TCP
 * its token is compared in constant time, and a failed authentication is
 * logged (rate-limited) and answered late and spaced (paced denials); a
 * standby refuses every hello; otherwise the worker becomes LIVE and gets
 * `welcome`.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/clock.h"
#include "server_int.h"

#define AUTH_LOGS_PER_SECOND 5 /* then counted, and said once a second */

__attribute__((format(printf, 2, 3))) static void slog(a2__server *srv,
                                                       const char *fmt, ...)
{
    char line[512];
    va_list ap;
    if (!srv->log)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    srv->log(srv->log_arg, line);
}

/* A peer-chosen string for a log line: printable ASCII kept, the rest '?',
 * at most len - 1 bytes. */
static const char *printable(const char *s, char *buf, size_t len)
{
    size_t n = 0;
    for (; s && *s && n + 1 < len; s++)
        buf[n++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
    buf[n] = '\0';
    return buf;
}

static int token_eq(const char *given, const char *want)
{
    size_t lg = strlen(given), lw = strlen(want);
    unsigned char d = lg != lw;
    for (size_t i = 0; i < lw; i++)
        d |= (unsigned char)((i < lg ? given[i] : 0) ^ want[i]);
    return d == 0;
}

/* Starts a new second of authentication log lines when the last is over,
 * saying how many went unlogged in it. */
void a2__server_auth_log_roll(a2__server *srv, int64_t now)
{
    if (now - srv->auth_window_ms < 1000)
        return;
    if (srv->auth_unlogged)
        slog(srv, "%" PRIu64 " more failed authentications not logged",
             srv->auth_unlogged);
    srv->auth_window_ms = now;
    srv->auth_logged = 0;
    srv->auth_unlogged = 0;
}

/*
 * A hello that failed authentication: logged with the peer (at most
 * AUTH_LOGS_PER_SECOND lines a second, the rest counted), and answered only
 * after auth_delay_ms, one denial per auth_spacing_ms at most, so guesses
 * come back slowly however many connections ask at once.
 */
static void deny(a2__server *srv, a2__server_worker *w, const char *name,
                 const char *why)
{
    int64_t now = a2__mono_ms();
    char nb[64];
    srv->auth_failures++;
    a2__server_auth_log_roll(srv, now);
    if (srv->auth_logged < AUTH_LOGS_PER_SECOND) {
        srv->auth_logged++;
        slog(srv, "worker \"%s\" from %s failed authentication: %s",
             printable(name, nb, sizeof nb), w->peer, why);
    } else {
        srv->auth_unlogged++;
    }
    int64_t at = now + srv->auth_delay_ms;
    if (at < srv->auth_next_ms)
        at = srv->auth_next_ms;
    srv->auth_next_ms = at + srv->auth_spacing_ms;
    w->state = A2C_WORKER_DENIED;
    w->denied = why;
    a2__server_deadline_set(srv, w, at);
}

void a2__server_hello(a2__server *srv, a2__server_worker *w,
                      const a2_wire_msg *m)
{
    char why[160];

    if (m->type != A2_WIRE_HELLO) {
        snprintf(why, sizeof why, "first frame must be hello, got %s",
                 a2_wire_type_name(m->type));
        a2__server_proto_error(srv, w, A2_WIRE_CODE_PROTOCOL, why);
        return;
    }
    if (w->tcp && (!m->token || !token_eq(m->token, srv->token))) {
        deny(srv, w, m->name,
             m->token ? "wrong token" : "token required over TCP");
        return;
    }
    if (srv->standby) {
        srv->standby_refusals++;
        a2__server_proto_error(srv, w, A2_WIRE_CODE_STANDBY, srv->standby);
        return;
    }
    if (!(w->name = a2__server_dupstr(m->name))) {
        a2__server_close_now(srv, w);
        return;
    }
    w->id = a2__route_worker_id(w->name);
    w->state = A2C_WORKER_LIVE;
    a2__server_deadline_set(srv, w, a2__mono_ms() + srv->subscribe_timeout_ms);
    srv->gen++;
    srv->live++;
    a2_wire_msg wel = {.type = A2_WIRE_WELCOME, .lsn = srv->lsn};
    (void)a2__server_push(srv, w, &wel);
}
