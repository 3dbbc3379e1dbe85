/*
 * The daemon's loop: one thread, one poll() over the replication socket,
 * the worker server, the metrics endpoint's request descriptor, a
 * signalfd, the active lock's connection, the audit file's fsync, the tick
 * and backlog-read connections, and the nearest deadline (timer, status
 * update, group fsync, heartbeat, stream timeout, reconnect, backlog read).
 * Before it, the wait for the active lock (a standby's loop). Also the
 * snapshot of the daemon the metrics endpoint renders, taken on this
 * thread when a request asks for one.
 */
#include "daemon.h"

#include "../common/clock.h"
#include "../common/lsn.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define FSYNC_GROUP_MS    100
#define FSYNC_GROUP_LINES 10000
#define STATE_INTERVAL_MS 1000
#define STANDBY_POLL_MS   200 /* a standby looks at the file lock */

/*
 * Group fsync: in the background when the group is due (FSYNC_GROUP_MS after
 * its first line, or FSYNC_GROUP_LINES lines, or a status update is due), so
 * the loop never waits for the disk; wait = fsync here (the clean stop). The
 * group's lines are written with one write(2) as its fsync starts. With no
 * line waiting, the state file alone when it is behind, at most every
 * STATE_INTERVAL_MS: a position that moved without a line is confirmed to
 * the server only once the state file holds it.
 */
static int sync_audit(a2__daemon *d, int due, int wait, char *err,
                      size_t errlen)
{
    if (!d->audit)
        return 0;
    if (wait)
        return a2__audit_sync(d->audit, 0, err, errlen);
    if (a2__audit_sync_finish(d->audit, err, errlen) != 0)
        return -1;
    if (a2__audit_busy(d->audit))
        return 0;
    if (!a2__audit_dirty(d->audit)) /* the state file alone, when due */
        return a2__audit_sync_start(d->audit, STATE_INTERVAL_MS, err, errlen);
    int64_t since = a2__audit_dirty_since(d->audit);
    if (!due && a2__mono_ms() - since < FSYNC_GROUP_MS &&
        a2__audit_pending_lines(d->audit) < FSYNC_GROUP_LINES)
        return 0;
    return a2__audit_sync_start(d->audit, STATE_INTERVAL_MS, err, errlen);
}

/* SIGHUP reopens the audit file; SIGTERM and SIGINT stop the daemon. */
static void handle_signals(a2__daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP) {
            char err[512];
            if (d->audit && a2__audit_reopen(d->audit, err, sizeof err) != 0)
                a2__daemon_log("%s", err);
            else if (d->audit)
                a2__daemon_log("reopened audit file \"%s\"", d->audit_path);
        } else {
            d->stop = 1;
        }
    }
}

/*
 * Until active, the worker listener answers every hello with a "standby"
 * error and /healthz says "standby". An error at the first step (the
 * database unreachable at start) is fatal, as for the stream.
 */
int a2__loop_wait_active(a2__daemon *d)
{
    char msg[512], err[512];
    int64_t next_ms = 0, last_error_ms = 0;
    for (;;) {
        int64_t now = a2__mono_ms();
        if (now >= next_ms) {
            int r = a2__active_step(d->active, msg, sizeof msg, err,
                                    sizeof err);
            next_ms = now + STANDBY_POLL_MS;
            if (r == 1) {
                if (d->standby) {
                    a2__daemon_log("taking over slot \"%s\": this consumer "
                                   "is active now",
                                   d->slot);
                    d->standby = 0;
                    if (a2__server_set_standby(d->srv, NULL) != 0)
                        return -1;
                }
                return 0;
            }
            if (r < 0 && !d->standby) {
                a2__daemon_log("%s", err);
                return -1;
            }
            if (r < 0 && now - last_error_ms >= 10000) {
                last_error_ms = now;
                a2__daemon_log("standby: %s; trying again", err);
            }
            if (r < 0)
                next_ms = now + 1000;
            if (r == 0 && strcmp(msg, d->standby_msg) != 0) {
                snprintf(d->standby_msg, sizeof d->standby_msg, "%s", msg);
                a2__daemon_log("standby: %s; taking over when it ends", msg);
                if (a2__server_set_standby(d->srv, msg) != 0)
                    return -1;
            }
            d->standby = 1;
        }
        struct pollfd pfd[4];
        int n = 0, imet = -1, ilock = -1;
        pfd[n++] = (struct pollfd){d->sigfd, POLLIN, 0};
        pfd[n++] = (struct pollfd){a2__server_fd(d->srv), POLLIN, 0};
        if (d->met) {
            imet = n;
            pfd[n++] = (struct pollfd){a2__metrics_fd(d->met), POLLIN, 0};
        }
        if (a2__active_fd(d->active) >= 0) {
            ilock = n;
            pfd[n++] = (struct pollfd){a2__active_fd(d->active), POLLIN, 0};
        }
        int64_t timeout = next_ms - a2__mono_ms();
        int pr = poll(pfd, (nfds_t)n, timeout < 0 ? 0 : (int)timeout);
        if (pr < 0 && errno != EINTR) {
            a2__daemon_log("could not poll: %s", strerror(errno));
            return -1;
        }
        if (pr > 0 && (pfd[0].revents & POLLIN))
            handle_signals(d);
        if (d->stop)
            return 1;
        if (pr > 0 && pfd[1].revents && a2__server_run(d->srv) != 0) {
            a2__daemon_log("the worker server failed");
            return -1;
        }
        if (imet >= 0 && pr > 0 && (pfd[imet].revents & POLLIN))
            a2__metrics_handle(d->met);
        if (ilock >= 0 && pr > 0 && pfd[ilock].revents)
            next_ms = 0; /* the lock's answer: look at once */
    }
}

/* Lowers *timeout to t ms (0 when t is past). */
static void sooner(int64_t *timeout, int64_t t)
{
    if (t < *timeout)
        *timeout = t < 0 ? 0 : t;
}

/* How long the loop may wait in poll (ms): until the nearest deadline, at
 * most a second. */
static int64_t next_timeout(const a2__daemon *d, int64_t now)
{
    int64_t timeout = 1000;
    int64_t next_timer = a2__timers_next(d->timers);
    if (next_timer != INT64_MAX)
        sooner(&timeout, next_timer - a2__real_ms());
    if (d->streaming) {
        sooner(&timeout, d->last_status_ms + d->status_interval_ms - now);
        sooner(&timeout, d->last_activity_ms + d->heartbeat_ms - now);
        if (d->stream_timeout_ms > 0)
            sooner(&timeout, a2__stream_silence_deadline(d) - now);
    } else {
        sooner(&timeout, d->reconnect_at_ms - now);
    }
    if (d->streaming && !d->tick_busy &&
        a2__apply_expiry_due(d->apply) != INT64_MAX) {
        int64_t t = a2__apply_expiry_due(d->apply) - a2__real_ms();
        int64_t next = a2__queries_expire_next_ms(d) - now;
        if (next > t)
            t = next;
        sooner(&timeout, t);
    }
    if (d->tick_busy && d->stream_timeout_ms > 0)
        sooner(&timeout, d->tick_sent_ms + d->stream_timeout_ms - now);
    if (d->rebuild_at_ms)
        sooner(&timeout, d->rebuild_at_ms - now);
    if (d->streaming && !d->backlog_busy && a2__backlog_wants_read(d->backlog))
        sooner(&timeout, d->backlog_next_ms - now);
    if (d->backlog_busy && d->stream_timeout_ms > 0)
        sooner(&timeout, d->backlog_sent_ms + d->stream_timeout_ms - now);
    if (d->audit && a2__audit_dirty(d->audit) && !a2__audit_busy(d->audit))
        sooner(&timeout,
               a2__audit_dirty_since(d->audit) + FSYNC_GROUP_MS - now);
    return timeout;
}

/* Reads the timers and presence fields again when due, and resyncs the
 * workers when the stream asked for it. */
static void resync(a2__daemon *d)
{
    char err[1024];
    int asked = d->need_resync;
    if (asked) {
        d->need_resync = 0;
        d->rebuild_at_ms = a2__mono_ms();
        a2__backlog_want(d->backlog);
    }
    if (d->rebuild_at_ms && a2__mono_ms() >= d->rebuild_at_ms) {
        if (a2__queries_rebuild_timers(d, err, sizeof err) == 0) {
            d->rebuild_at_ms = 0;
        } else {
            /* the stream cleared what this read replaces: try again */
            a2__daemon_log("%s; reading again in %d ms", err,
                           A2C_REBUILD_RETRY_MS);
            d->rebuild_at_ms = a2__mono_ms() + A2C_REBUILD_RETRY_MS;
        }
    }
    if (asked)
        a2__server_resync_all(d->srv);
}

/* What to poll on a connection with a query in flight: its answer, and
 * room to send what libpq has not sent yet. */
static struct pollfd busy_pollfd(PGconn *db)
{
    short ev = POLLIN;
    if (PQflush(db) == 1)
        ev |= POLLOUT;
    return (struct pollfd){PQsocket(db), ev, 0};
}

/* The loop itself: 0 on a clean stop, 1 on an error (logged). */
static int run(a2__daemon *d)
{
    char err[1024];
    int more = 0;
    for (;;) {
        if (d->stop)
            break;
        int64_t now = a2__mono_ms();
        int64_t timeout = next_timeout(d, now);

        struct pollfd pfd[8];
        int n = 0, irepl = -1, isrv, imet = -1, isig, itick = -1, iback = -1,
            ilock = -1;
        if (!d->lock_lost && a2__active_fd(d->active) >= 0) {
            ilock = n;
            pfd[n++] = (struct pollfd){a2__active_fd(d->active), POLLIN, 0};
        }
        if (d->audit && a2__audit_event_fd(d->audit) >= 0)
            pfd[n++] = (struct pollfd){a2__audit_event_fd(d->audit), POLLIN, 0};
        isig = n;
        pfd[n++] = (struct pollfd){d->sigfd, POLLIN, 0};
        isrv = n;
        pfd[n++] = (struct pollfd){a2__server_fd(d->srv), POLLIN, 0};
        if (d->met) {
            imet = n;
            pfd[n++] = (struct pollfd){a2__metrics_fd(d->met), POLLIN, 0};
        }
        if (d->streaming) {
            irepl = n;
            pfd[n++] = (struct pollfd){a2__repl_socket(d->repl), POLLIN, 0};
        }
        if (d->tick_busy) {
            itick = n;
            pfd[n++] = busy_pollfd(d->tick_db);
        }
        if (d->backlog_busy) {
            iback = n;
            pfd[n++] = busy_pollfd(d->backlog_db);
        }
        if (more)
            timeout =
                    0; /* libpq may hold messages the socket no longer shows */
        int pr = poll(pfd, (nfds_t)n, (int)timeout);
        if (pr < 0 && errno != EINTR) {
            a2__daemon_log("could not poll: %s", strerror(errno));
            return 1;
        }
        if (pr > 0 && (pfd[isig].revents & POLLIN))
            handle_signals(d);
        if (irepl >= 0 && pr > 0 && pfd[irepl].revents)
            a2__repl_readable(d->repl);
        if (d->stop)
            break;
        if (ilock >= 0 && pr > 0 && pfd[ilock].revents &&
            a2__active_check(d->active, err, sizeof err) != 0) {
            /* Without its lock a consumer must not stream: a standby may
             * be taking over. Stream again only once the lock is back. */
            d->lock_lost = 1;
            if (d->streaming)
                a2__stream_down(d, err);
            else
                a2__daemon_log("%s", err);
        }
        if (pr > 0 && pfd[isrv].revents) {
            if (a2__server_run(d->srv) != 0) {
                a2__daemon_log("the worker server failed");
                return 1;
            }
        }
        if (imet >= 0 && pr > 0 && (pfd[imet].revents & POLLIN))
            a2__metrics_handle(d->met);
        if (itick >= 0 && pr > 0 && pfd[itick].revents)
            a2__queries_tick_answer(d);
        a2__queries_tick_overdue(d);
        if (iback >= 0 && pr > 0 && pfd[iback].revents)
            a2__queries_backlog_answer(d);
        a2__queries_backlog_overdue(d);

        /* reconnect */
        if (!d->streaming && a2__mono_ms() >= d->reconnect_at_ms) {
            d->reconnects++;
            int lock = d->lock_lost
                               ? a2__active_retake(d->active, err, sizeof err)
                               : 1;
            if (lock == 0) {
                a2__daemon_log("another a2-consumer took the active lock of "
                               "slot \"%s\" while this one had lost it: "
                               "stopping",
                               d->slot);
                return 1;
            }
            if (lock == 1)
                d->lock_lost = 0;
            if (lock < 0 || a2__stream_up(d, 0, err, sizeof err) != 0)
                a2__stream_down(d, err);
        }

        /* stream */
        int reply = 0;
        more = 0;
        if (d->streaming && a2__stream_read(d, &reply, &more) != 0)
            return 1;

        resync(d);
        a2__queries_backlog_send(d);

        a2__apply_fire_timers(d->apply, a2__real_ms());
        a2__queries_expire_presence(d);
        a2__server_flush(d->srv); /* this turn's wake-ups, one send each */

        now = a2__mono_ms();
        a2__stream_check_silence(d, now);
        int status_due = d->streaming &&
                         now - d->last_status_ms >= d->status_interval_ms;
        if (sync_audit(d, reply || status_due, 0, err, sizeof err) != 0) {
            a2__daemon_log("%s", err);
            return 1;
        }
        a2__server_set_lsn(d->srv, a2__apply_applied(d->apply));
        if (d->streaming && (reply || status_due)) {
            if (a2__stream_send_status(d, 0, err, sizeof err) != 0)
                a2__stream_down(d, err);
        }
        a2__queries_heartbeat(d, now);
        /* the server's WAL position for the lag metric */
        a2__queries_read_wal(d, now);
    }
    /* clean stop */
    if (sync_audit(d, 1, 1, err, sizeof err) != 0)
        a2__daemon_log("%s", err);
    a2__stream_stop(d);
    return 0;
}

int a2__loop_run(a2__daemon *d)
{
    char err[1024];
    if (a2__stream_up(d, 1, err, sizeof err) != 0) {
        a2__daemon_log("%s", err);
        return 1;
    }
    if (a2__queries_rebuild_timers(d, err, sizeof err) != 0) {
        a2__daemon_log("%s", err);
        return 1;
    }
    a2__daemon_log("ready: %zu timers, resume after %X/%X",
                   a2__timers_count(d->timers),
                   A2__LSN_ARGS(a2__apply_applied(d->apply)));
    a2__server_resync_all(d->srv);
    d->need_resync = 0;
    return run(d);
}

/* ---- the metrics snapshot ---- */

static void snapshot(const a2__daemon *d, a2__daemon_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->standby = d->standby;
    s->starting = !d->apply;
    s->streaming = d->streaming;
    snprintf(s->standby_msg, sizeof s->standby_msg, "%s", d->standby_msg);
    snprintf(s->down_reason, sizeof s->down_reason, "%s", d->down_reason);
    a2__server_get_stats(d->srv, &s->server);
    if (s->standby || s->starting)
        return;
    a2__apply_get_stats(d->apply, &s->apply);
    s->applied = a2__apply_applied(d->apply);
    s->server_wal_lsn = d->server_wal_lsn;
    s->flush_sent = d->flush_sent;
    s->lag_seconds = d->lag_seconds;
    s->decode_errors = d->decode_errors;
    s->timers = a2__timers_count(d->timers);
    s->reconnects = d->reconnects;
    s->gaps = d->gaps;
    s->backlog = d->backlog;
}

void a2__loop_publish(void *ctx, char **text, char **health, int *healthy)
{
    a2__daemon_snapshot s;
    int ignored;
    snapshot(ctx, &s);
    *text = a2__daemon_render(&s, 0, &ignored);
    *health = a2__daemon_render(&s, 1, healthy);
}
