/*
 * The daemon's normal libpq connections (repl.h's a2__db_* calls):
 * - the normal connection, blocking: the startup checks (stream.c) and the
 *   read of the live claims, retry holds and presence fields that rebuilds
 *   the timers;
 * - the tick connection, nonblocking: heartbeats, presence expiry ticks and
 *   reads of the server's WAL position, one message in flight at a time;
 * - the backlog connection, nonblocking: the backlog reads (backlog.sql).
 * A message or read unanswered for the stream timeout is given up with its
 * connection; the next one goes out on a new connection.
 */
#include "daemon.h"

#include "../common/clock.h"
#include "../common/lsn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A presence expiry tick not back through the stream after this is sent
 * again; ticks are at least EXPIRE_SPACING_MS apart (expiries due meanwhile
 * go out together). */
#define EXPIRE_RETRY_MS     1000
#define EXPIRE_SPACING_MS   50
/* Backlog reads go at most once in this long, and at most once in ten
 * times what the last one took; the clear markers a read returns are at
 * most half of what the applier keeps. */
#define BACKLOG_INTERVAL_MS 1000
#define BACKLOG_MAX_MARKERS (A2C_APPLY_MAX_CLEARS / 2)

/* ---- normal connection ---- */

int a2__queries_ensure_db(a2__daemon *d, char *err, size_t errlen)
{
    if (d->db && PQstatus(d->db) == CONNECTION_OK)
        return 0;
    if (d->db) {
        PQreset(d->db);
        if (PQstatus(d->db) == CONNECTION_OK)
            return 0;
        PQfinish(d->db);
        d->db = NULL;
    }
    d->db = a2__db_connect(d->conninfo, err, errlen);
    return d->db ? 0 : -1;
}

int a2__queries_rebuild_timers(a2__daemon *d, char *err, size_t errlen)
{
    if (a2__queries_ensure_db(d, err, errlen) != 0)
        return -1;
    PGresult *res = a2__db_query(
            d->db,
            "select session_id, consumer, cursor_key, epoch, head, "
            "claim_expires_at from a2_cursors where claim_expires_at is not "
            "null and head is not null and failed_at is null",
            0, NULL, "read the live claims", err, errlen);
    if (!res)
        return -1;
    a2__timers_clear(d->timers);
    for (int i = 0; i < PQntuples(res); i++) {
        if (a2__timers_set(d->timers, PQgetvalue(res, i, 0),
                           PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
                           strtoll(PQgetvalue(res, i, 3), NULL, 10),
                           strtoll(PQgetvalue(res, i, 4), NULL, 10),
                           strtoll(PQgetvalue(res, i, 5), NULL, 10)) != 0) {
            snprintf(err, errlen, "out of memory");
            PQclear(res);
            return -1;
        }
    }
    PQclear(res);
    /* live presence fields, whose expiry the stream alone would only show
     * for the ones written from now on */
    res = a2__db_query(d->db,
                       "select ns, participant, field, expires_at from "
                       "a2_presence where value <> 'null'::jsonb",
                       0, NULL, "read the presence fields", err, errlen);
    if (!res)
        return -1;
    a2__apply_forget_presence(d->apply);
    int kept = 0;
    for (int i = 0; i < PQntuples(res); i++)
        if (a2__apply_track_presence(
                    d->apply, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                    PQgetvalue(res, i, 2),
                    strtoll(PQgetvalue(res, i, 3), NULL, 10)) == 0)
            kept++;
    if (kept < PQntuples(res))
        a2__daemon_log("keeping the expiry of %d of %d presence fields; the "
                       "others show when a read or a reap deletes them",
                       kept, PQntuples(res));
    PQclear(res);
    return 0;
}

/* ---- tick connection ---- */

enum { TICK_EXPIRE, TICK_HEARTBEAT, TICK_WAL };

/* What the messages of the tick connection are called in the log. */
static const struct {
    const char *what;  /* "could not <what>: ..." */
    const char *name;  /* "<name> got no answer ..." */
    const char *after; /* what happens next */
} tick_kinds[] = {
        [TICK_EXPIRE] = {"commit a presence expiry tick",
                         "a presence expiry tick",
                         "sending it on a new connection"},
        [TICK_HEARTBEAT] = {"send a heartbeat", "a heartbeat",
                            "the next goes out on a new connection"},
        [TICK_WAL] = {"read the server's WAL position",
                      "a read of the server's WAL position",
                      "the next goes out on a new connection"},
};

static void drop_tick_db(a2__daemon *d)
{
    PQfinish(d->tick_db);
    d->tick_db = NULL;
    d->tick_busy = 0;
    PQclear(d->tick_res);
    d->tick_res = NULL;
}

void a2__queries_tick_answer(a2__daemon *d)
{
    char err[512];
    int rc = a2__db_result_poll(d->tick_db, tick_kinds[d->tick_kind].what,
                                &d->tick_res, err, sizeof err);
    if (rc == 0) {
        /* The answer may have come in an earlier call than its end. */
        PGresult *res = d->tick_res;
        d->tick_res = NULL;
        d->tick_busy = 0;
        uint64_t lsn;
        if (d->tick_kind == TICK_WAL && res && PQntuples(res) > 0 &&
            PQnfields(res) > 0 &&
            a2__lsn_parse(PQgetvalue(res, 0, 0), &lsn) == 0)
            d->server_wal_lsn = lsn;
        PQclear(res);
    } else if (rc < 0) {
        a2__daemon_log("%s", err);
        drop_tick_db(d);
    }
}

void a2__queries_tick_overdue(a2__daemon *d)
{
    if (!d->tick_busy || d->stream_timeout_ms <= 0 ||
        a2__mono_ms() - d->tick_sent_ms < d->stream_timeout_ms)
        return;
    a2__daemon_log("%s got no answer from the server in %.1f s "
                   "(--stream-timeout); %s",
                   tick_kinds[d->tick_kind].name,
                   (double)d->stream_timeout_ms / 1000.0,
                   tick_kinds[d->tick_kind].after);
    drop_tick_db(d);
}

/* Sends a message of the kind on the tick connection (opened when needed)
 * without waiting for it; a2__queries_tick_answer reads the answer. */
static void tick_send(a2__daemon *d, int kind)
{
    char err[512];
    if (d->tick_db && PQstatus(d->tick_db) != CONNECTION_OK)
        drop_tick_db(d);
    if (!d->tick_db) {
        d->tick_db = a2__db_connect(d->conninfo, err, sizeof err);
        if (!d->tick_db) {
            a2__daemon_log("%s", err);
            return;
        }
    }
    int rc = kind == TICK_HEARTBEAT
                     ? a2__db_heartbeat_send(d->tick_db, err, sizeof err)
             : kind == TICK_WAL
                     ? a2__db_wal_position_send(d->tick_db, err, sizeof err)
                     : a2__db_expire_tick_send(d->tick_db, d->tick_secret,
                                               a2__real_ms(), err, sizeof err);
    if (rc != 0) {
        a2__daemon_log("%s", err);
        drop_tick_db(d);
        return;
    }
    d->tick_busy = 1;
    d->tick_kind = kind;
    d->tick_sent_ms = a2__mono_ms();
}

/* The last one came back through the stream, or was sent EXPIRE_RETRY_MS
 * ago. */
int64_t a2__queries_expire_next_ms(const a2__daemon *d)
{
    if (!d->expire_sent_ms)
        return 0;
    a2__apply_stats as;
    a2__apply_get_stats(d->apply, &as);
    return d->expire_sent_ms + (as.expire_ticks > d->expire_sent_seen
                                        ? EXPIRE_SPACING_MS
                                        : EXPIRE_RETRY_MS);
}

/* Its commit (a WAL flush) is not waited for. */
void a2__queries_expire_presence(a2__daemon *d)
{
    if (!d->streaming || d->tick_busy ||
        a2__apply_expiry_due(d->apply) == INT64_MAX)
        return;
    int64_t now = a2__mono_ms();
    if (a2__apply_expiry_due(d->apply) > a2__real_ms() ||
        now < a2__queries_expire_next_ms(d))
        return;
    a2__apply_stats as;
    a2__apply_get_stats(d->apply, &as);
    d->expire_sent_ms = now;
    d->expire_sent_seen = as.expire_ticks;
    tick_send(d, TICK_EXPIRE);
}

/* A quiet database still moves the slot (a message in flight on the tick
 * connection moves it too, or is overdue; a WAL position read does not,
 * and is waited for). */
void a2__queries_heartbeat(a2__daemon *d, int64_t now)
{
    if (d->streaming && now - d->last_activity_ms >= d->heartbeat_ms &&
        now - d->last_heartbeat_ms >= d->heartbeat_ms &&
        !(d->tick_busy && d->tick_kind == TICK_WAL)) {
        d->last_heartbeat_ms = now;
        d->last_activity_ms = now;
        if (!d->tick_busy)
            tick_send(d, TICK_HEARTBEAT);
    }
}

void a2__queries_read_wal(a2__daemon *d, int64_t now)
{
    if (d->met && !d->tick_busy && now - d->wal_read_ms >= 1000) {
        d->wal_read_ms = now;
        tick_send(d, TICK_WAL);
    }
}

/* ---- backlog reads ---- */

static void drop_backlog_db(a2__daemon *d)
{
    PQclear(d->backlog_res);
    d->backlog_res = NULL;
    PQfinish(d->backlog_db);
    d->backlog_db = NULL;
    d->backlog_busy = 0;
}

/* A read that failed: asked for again after A2C_REBUILD_RETRY_MS. */
static void backlog_failed(a2__daemon *d, const char *err)
{
    a2__daemon_log("%s; reading the backlog again in %d ms", err,
                   A2C_REBUILD_RETRY_MS);
    drop_backlog_db(d);
    a2__backlog_want(d->backlog);
    d->backlog_next_ms = a2__mono_ms() + A2C_REBUILD_RETRY_MS;
}

/* Its answer is read by a2__queries_backlog_answer, the loop goes on
 * meanwhile. */
void a2__queries_backlog_send(a2__daemon *d)
{
    char err[512];
    int64_t now = a2__mono_ms();
    if (!d->streaming || d->backlog_busy ||
        !a2__backlog_wants_read(d->backlog) || now < d->backlog_next_ms)
        return;
    if (d->backlog_db && PQstatus(d->backlog_db) != CONNECTION_OK)
        drop_backlog_db(d);
    if (!d->backlog_db) {
        d->backlog_db = a2__db_connect(d->conninfo, err, sizeof err);
        if (!d->backlog_db) {
            backlog_failed(d, err);
            return;
        }
    }
    if (a2__db_backlog_send(d->backlog_db, BACKLOG_MAX_MARKERS, err,
                            sizeof err) != 0) {
        backlog_failed(d, err);
        return;
    }
    a2__backlog_read_sent(d->backlog);
    d->backlog_busy = 1;
    d->backlog_sent_ms = a2__mono_ms();
}

/* Applies the rows of a backlog read (backlog.sql). */
static void backlog_load(a2__daemon *d, PGresult *res)
{
    int n = PQntuples(res);
    a2__backlog_row *rows = calloc((size_t)n + 1, sizeof *rows);
    if (!rows) {
        backlog_failed(d, "could not read the backlog: out of memory");
        return;
    }
    size_t nrows = 0;
    const char *snapshot = NULL;
    uint64_t lsn = 0;
    for (int i = 0; i < n; i++) {
        const char *kind = PQgetvalue(res, i, 0);
        const char *name = PQgetvalue(res, i, 1);
        if (kind[0] == 's') {
            snapshot = name;
            if (a2__lsn_parse(PQgetvalue(res, i, 5), &lsn) != 0)
                lsn = 0;
        } else if (kind[0] == 'c') {
            rows[nrows++] = (a2__backlog_row){
                    name, strtoll(PQgetvalue(res, i, 2), NULL, 10),
                    strtoll(PQgetvalue(res, i, 3), NULL, 10),
                    strtoll(PQgetvalue(res, i, 4), NULL, 10)};
        } else if (kind[0] == 'm') {
            a2__apply_remember_clear(d->apply, name,
                                     strtoll(PQgetvalue(res, i, 2), NULL, 10));
        }
    }
    int rc = snapshot ? a2__backlog_load(d->backlog, snapshot, lsn, rows, nrows)
                      : -1;
    free(rows);
    int64_t now = a2__mono_ms(), took = now - d->backlog_sent_ms;
    int64_t wait =
            took * 10 > BACKLOG_INTERVAL_MS ? took * 10 : BACKLOG_INTERVAL_MS;
    d->backlog_next_ms = d->backlog_sent_ms + wait;
    if (rc < 0)
        backlog_failed(d, "could not read the backlog: no snapshot in the "
                          "answer");
}

void a2__queries_backlog_answer(a2__daemon *d)
{
    char err[512];
    int rc = a2__db_result_poll(d->backlog_db, "read the backlog",
                                &d->backlog_res, err, sizeof err);
    if (rc > 0)
        return;
    if (rc < 0) {
        backlog_failed(d, err);
        return;
    }
    d->backlog_busy = 0;
    PGresult *res = d->backlog_res;
    d->backlog_res = NULL;
    if (res)
        backlog_load(d, res);
    else
        backlog_failed(d, "could not read the backlog: no rows");
    PQclear(res);
}

/* It is sent again later on a new connection. */
void a2__queries_backlog_overdue(a2__daemon *d)
{
    if (!d->backlog_busy || d->stream_timeout_ms <= 0 ||
        a2__mono_ms() - d->backlog_sent_ms < d->stream_timeout_ms)
        return;
    char err[160];
    snprintf(err, sizeof err,
             "the backlog read got no answer from the server in %.1f s "
             "(--stream-timeout)",
             (double)d->stream_timeout_ms / 1000.0);
    backlog_failed(d, err);
}

/* ---- all of them ---- */

void a2__queries_reset(a2__daemon *d)
{
    if (d->db) {
        PQfinish(d->db);
        d->db = NULL;
    }
    if (d->tick_db)
        drop_tick_db(d);
    if (d->backlog_db)
        drop_backlog_db(d);
}
