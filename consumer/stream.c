/*
 * The daemon's replication stream (repl.h): the startup checks and the
 * slot (created when missing, recreated when invalidated, with the gap
 * recorded), START_REPLICATION from what the applier holds, the messages
 * of a turn decoded and applied, standby status updates with the durable
 * position, the silent stream's timeout, and the stream going down and
 * (with backoff) up again.
 */
#include "daemon.h"

#include "../common/clock.h"
#include "../common/lsn.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS        100
#define BACKOFF_MAX_MS        10000
#define MAX_MESSAGES_PER_TURN 5000
#define LAG_WARN_SECONDS      10.0

void a2__stream_down(a2__daemon *d, const char *reason)
{
    if (d->repl) {
        d->walsender_pid = a2__repl_backend_pid(d->repl);
        a2__repl_close(d->repl);
        d->repl = NULL;
    }
    /* The server may have restarted: the other connections are then gone
     * too, and would only say so at their next query. Open them afresh. */
    a2__queries_reset(d);
    a2__apply_abort_txn(d->apply);
    d->streaming = 0;
    snprintf(d->down_reason, sizeof d->down_reason, "%s", reason);
    if (d->backoff_ms < BACKOFF_MIN_MS)
        d->backoff_ms = BACKOFF_MIN_MS;
    d->reconnect_at_ms = a2__mono_ms() + d->backoff_ms;
    a2__daemon_log("%s; reconnecting in %d ms", reason, d->backoff_ms);
    d->backoff_ms *= 2;
    if (d->backoff_ms > BACKOFF_MAX_MS)
        d->backoff_ms = BACKOFF_MAX_MS;
}

/* The last commit whose lines the audit file holds: what was applied, or
 * the transaction whose lines end the file on open (a2__audit_resume: it
 * may look partial, but a slot that confirmed it saw all of it durable). */
static uint64_t audit_holds(const a2__daemon *d)
{
    uint64_t have = a2__apply_applied(d->apply);
    return d->resume.partial_lsn > have ? d->resume.partial_lsn : have;
}

/* Drops and recreates an invalidated slot, records the gap. */
static int recreate_slot(a2__daemon *d, const char *why, char *err,
                         size_t errlen)
{
    if (a2__db_drop_slot(d->db, d->slot, err, errlen) != 0)
        return -1;
    int created;
    uint64_t consistent;
    char st[6];
    if (a2__repl_create_slot(d->repl, d->slot, d->plugin, &created, &consistent,
                             err, errlen, st) != 0)
        return -1;
    uint64_t from = a2__apply_applied(d->apply);
    a2__daemon_log("replication slot \"%s\" was %s; recreated at %X/%X, "
                   "changes after %X/%X are lost",
                   d->slot, why, A2__LSN_ARGS(consistent), A2__LSN_ARGS(from));
    if (a2__apply_gap(d->apply, from, consistent, why, err, errlen) != 0)
        return -1;
    d->gaps++;
    d->need_resync = 1;
    return 0;
}

int a2__stream_up(a2__daemon *d, int startup, char *err, size_t errlen)
{
    a2__slot_info info;
    if (a2__queries_ensure_db(d, err, errlen) != 0)
        return startup ? -2 : -1;
    /* After a lost connection, "is active for PID" (the old walsender has
     * not noticed yet) and the like are retried with backoff. At startup a
     * walsender of a killed predecessor gets a moment to go away. */
    for (int tries = 0;; tries++) {
        if (a2__db_check(d->db, d->slot, d->plugin, &info, err, errlen) == 0)
            break;
        if (info.active_pid && info.active_pid == d->walsender_pid)
            snprintf(err, errlen,
                     "replication slot \"%s\" is still held by the walsender "
                     "of this consumer's last stream (PID %d), which has not "
                     "exited yet",
                     d->slot, info.active_pid);
        if (!startup)
            return -1;
        if (!strstr(err, "is active for PID") || tries >= 25)
            return -2;
        a2__sleep_ms(200);
    }
    d->repl = a2__repl_connect(d->conninfo, err, errlen);
    if (!d->repl)
        return startup ? -2 : -1;
    char st[6] = "";
    if (!info.exists) {
        int created;
        uint64_t consistent;
        if (a2__repl_create_slot(d->repl, d->slot, d->plugin, &created,
                                 &consistent, err, errlen, st) != 0)
            goto fail;
        if (created) {
            a2__daemon_log("created replication slot \"%s\" at %X/%X", d->slot,
                           A2__LSN_ARGS(consistent));
            uint64_t applied = a2__apply_applied(d->apply);
            if (applied > 0 && consistent > applied) {
                if (a2__apply_gap(d->apply, applied, consistent, "slot missing",
                                  err, errlen) != 0)
                    goto fail;
                d->gaps++;
                d->need_resync = 1;
            }
        }
    } else if (info.lost) {
        if (recreate_slot(d, "invalidated", err, errlen) != 0)
            goto fail;
    } else if (d->audit && info.confirmed > audit_holds(d)) {
        /* The slot confirmed what this audit file does not hold (a file
         * lost, replaced or truncated, or another host's): the stream
         * resumes at the slot, so say what the trail misses. */
        uint64_t from = audit_holds(d);
        a2__daemon_log("audit file \"%s\" ends at %X/%X but slot \"%s\" "
                       "confirmed %X/%X: the transitions between are not in "
                       "the file",
                       d->audit_path, A2__LSN_ARGS(from), d->slot,
                       A2__LSN_ARGS(info.confirmed));
        if (a2__apply_gap(d->apply, from, info.confirmed, "audit behind slot",
                          err, errlen) != 0)
            goto fail;
        d->gaps++;
        d->need_resync = 1;
    }
    uint64_t start = a2__apply_applied(d->apply);
    if (a2__repl_start(d->repl, d->slot, d->plugin, start, err, errlen, st) !=
        0) {
        if (strcmp(st, "55000") == 0 && strstr(err, "cannot read from")) {
            if (recreate_slot(d, "invalidated", err, errlen) != 0)
                goto fail;
            start = a2__apply_applied(d->apply);
            if (a2__repl_start(d->repl, d->slot, d->plugin, start, err, errlen,
                               st) == 0)
                goto started;
        }
        goto fail;
    }
started:
    d->streaming = 1;
    /* what the stream missed while down, and the start: read it whole */
    a2__backlog_want(d->backlog);
    d->backoff_ms = BACKOFF_MIN_MS;
    d->down_reason[0] = '\0';
    d->last_activity_ms = a2__mono_ms();
    d->last_recv_ms = d->last_activity_ms;
    d->ping_sent_ms = 0;
    d->last_status_ms = 0;
    a2__daemon_log("streaming from slot \"%s\" at %X/%X", d->slot,
                   A2__LSN_ARGS(start));
    return 0;
fail:
    a2__repl_close(d->repl);
    d->repl = NULL;
    return startup ? -2 : -1;
}

/* What may be confirmed to the server: what a restart will find the audit
 * file to hold durably, or without one what was applied; never below what
 * was confirmed. */
static uint64_t flush_lsn(const a2__daemon *d)
{
    uint64_t flush = d->audit ? a2__audit_confirmable(d->audit)
                              : a2__apply_applied(d->apply);
    return flush < d->flush_sent ? d->flush_sent : flush;
}

int a2__stream_send_status(a2__daemon *d, int reply, char *err, size_t errlen)
{
    uint64_t flush = flush_lsn(d);
    uint64_t write = d->received > flush ? d->received : flush;
    if (a2__repl_feedback(d->repl, write, flush, reply, err, errlen) != 0)
        return -1;
    d->flush_sent = flush;
    d->last_status_ms = a2__mono_ms();
    return 0;
}

/* A keepalive, or a change to decode and apply. 0, or -1 with the reason in
 * err (fatal). */
static int handle_message(a2__daemon *d, const a2__msg *m, int *reply,
                          char *err, size_t errlen)
{
    if (m->type == 'k') {
        if (m->wal_end > d->received)
            d->received = m->wal_end;
        if (!a2__apply_in_txn(d->apply)) {
            a2__apply_note_position(d->apply, m->wal_end);
            d->lag_seconds = 0;
        }
        if (m->reply_requested)
            *reply = 1;
        return 0;
    }
    if (m->data_start > d->received)
        d->received = m->data_start;
    d->last_activity_ms = d->last_recv_ms; /* this turn's time */
    const a2_change *c = NULL;
    if (a2_decoder_decode(d->dec, m->data, m->len, &c) != 0) {
        const a2_decoder_error *e = a2_decoder_last_error(d->dec);
        d->decode_errors++;
        a2__daemon_log("could not decode the change at %X/%X: %s (byte %zu)",
                       A2__LSN_ARGS(m->data_start), e->message, e->offset);
        d->need_resync = 1;
        /* its backlog change is lost: a read must see its transaction */
        if (a2__apply_in_txn(d->apply))
            a2__backlog_taint(d->backlog);
        return 0;
    }
    a2__apply_note_times(d->apply, m->send_time_us, a2__real_us());
    int rc = a2__apply_change(d->apply, c, m->data_start, err, errlen);
    if (rc < 0)
        return -1;
    if (rc > 0)
        a2__daemon_log("%s", err);
    if (c->action == A2_ACTION_COMMIT && c->has_time) {
        d->lag_seconds = (double)(a2__real_us() - c->time_us) / 1e6;
        /* say so when falling behind, at most once a minute */
        if (d->lag_seconds >= LAG_WARN_SECONDS &&
            a2__mono_ms() - d->last_lag_log_ms >= 60000) {
            d->last_lag_log_ms = a2__mono_ms();
            a2__daemon_log("falling behind: the commit at %X/%X was applied "
                           "%.1f s after it was made (received up to %X/%X)",
                           A2__LSN_ARGS(m->data_start), d->lag_seconds,
                           A2__LSN_ARGS(d->received));
        }
    }
    return 0;
}

int a2__stream_read(a2__daemon *d, int *reply, int *more)
{
    char err[1024];
    for (int i = 0; i < MAX_MESSAGES_PER_TURN; i++) {
        a2__msg m;
        int rc = a2__repl_read(d->repl, &m, err, sizeof err);
        if (rc == 0)
            break;
        if (i == MAX_MESSAGES_PER_TURN - 1)
            *more = 1;
        if (rc < 0) {
            a2__stream_down(d, err);
            break;
        }
        if (i == 0) {
            d->last_recv_ms = a2__mono_ms();
            d->ping_sent_ms = 0;
        }
        if (handle_message(d, &m, reply, err, sizeof err) != 0) {
            a2__daemon_log("%s", err);
            return -1;
        }
    }
    return 0;
}

/*
 * A stream the server has sent nothing on for half the stream timeout is
 * asked for a reply (a standby status update with its reply flag; the
 * walsender answers with a keepalive). One still silent at the full timeout,
 * and half of it after the request, is dropped and opened again: a stopped
 * or hung walsender, or a network path that lost the connection without
 * closing it. The second condition keeps a stall of this loop (a slow query
 * on the normal connection) from counting against the stream.
 */
int64_t a2__stream_silence_deadline(const a2__daemon *d)
{
    int64_t half = d->stream_timeout_ms / 2;
    if (!d->ping_sent_ms)
        return d->last_recv_ms + half;
    int64_t a = d->last_recv_ms + d->stream_timeout_ms;
    int64_t b = d->ping_sent_ms + half;
    return a > b ? a : b;
}

void a2__stream_check_silence(a2__daemon *d, int64_t now)
{
    if (!d->streaming || d->stream_timeout_ms <= 0 ||
        now < a2__stream_silence_deadline(d))
        return;
    if (d->ping_sent_ms) {
        char why[160];
        snprintf(why, sizeof why,
                 "the server sent nothing for %.1f s (--stream-timeout)",
                 (double)(now - d->last_recv_ms) / 1000.0);
        a2__stream_down(d, why);
        return;
    }
    char err[512];
    if (a2__stream_send_status(d, 1, err, sizeof err) != 0)
        a2__stream_down(d, err);
    else
        d->ping_sent_ms = now;
}

void a2__stream_stop(a2__daemon *d)
{
    if (!d->streaming)
        return;
    uint64_t flush = flush_lsn(d);
    a2__repl_stop(d->repl, d->received > flush ? d->received : flush, flush);
    a2__daemon_log("stopped at %X/%X", A2__LSN_ARGS(flush));
}
