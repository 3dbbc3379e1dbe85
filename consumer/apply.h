/*
 * The transaction applier of a2-consumer: takes decoded wal2json changes in
 * stream order and, at each commit, writes the transaction's audit lines,
 * pushes its wake-ups through a sink and updates the timers (DESIGN's
 * wake-up table). Knows nothing of sockets or libpq, so it is unit tested
 * with a recording sink.
 *
 * A transaction is buffered from B to C as audit text plus small actions
 * (no payloads). Past A2C_APPLY_MAX_ACTIONS actions the wake-ups are dropped
 * and the commit asks for a resync instead (sink->resync); past
 * A2C_APPLY_MAX_AUDIT_BUFFER bytes the audit text is written out early (the
 * commit LSN is known from B, and the resume logic of audit.h copes with a
 * transaction cut in the middle).
 */
#ifndef A2_CONSUMER_APPLY_H
#define A2_CONSUMER_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "a2/decoder.h"
#include "a2/wire.h"
#include "audit.h"
#include "backlog.h"
#include "timers.h"

#define A2C_APPLY_MAX_ACTIONS      100000
#define A2C_APPLY_MAX_AUDIT_BUFFER ((size_t)4 * 1024 * 1024)

/* Where the applier pushes; every callback may be NULL. Strings are borrowed
 * for the call. lsn is the commit's end LSN, xid its transaction's id (0
 * when unknown, and for a timer's wake-up), trace_us the commit's times on
 * its way (A2_WIRE_TRACE_COMMIT, _SENT and _RECV, µs since the Unix epoch,
 * 0 when unknown; _PUSH is 0). */
typedef struct {
    void *ctx;
    void (*wake)(void *ctx, const char *consumer, const char *session,
                 const char *cursor_key, int64_t head, uint64_t lsn,
                 uint64_t xid, const int64_t *trace_us);
    /* An event inserted (not a clear marker): once per event; the sink
     * routes it to the log consumers that follow its type. */
    void (*log)(void *ctx, const char *session, int64_t idx, const char *type,
                uint64_t lsn, uint64_t xid);
    void (*cleared)(void *ctx, const char *session, int64_t clear_index,
                    uint64_t lsn);
    /* lsn: the transaction's commit end */
    void (*presence)(void *ctx, const char *ns, const char *participant,
                     const char *fields_json, uint64_t lsn);
    /* Wake-ups were dropped (overflow, truncate): resync every worker and
     * rebuild the timers from the database. */
    void (*resync)(void *ctx);
} a2__sink;

/* Sessions whose clear marker the applier remembers; past it the memory of
 * markers starts over (each is asked again when needed). */
#define A2C_APPLY_MAX_CLEARS 100000

/* Live presence fields whose expiry the applier keeps; past it a field's
 * expiry shows only when a read or a reap deletes its row. */
#define A2C_APPLY_MAX_PRESENCE 1000000

/*
 * Presence expiry. The applier keeps each live presence field's expires_at
 * (store clock, ms). When the earliest is due, the daemon commits a
 * transactional logical message with prefix A2C_TICK_PREFIX and content
 * A2C_EXPIRE_TICK "<secret> <now ms>", where the secret is the daemon's,
 * chosen at its start (a2__apply_set_tick_secret): any role may emit a
 * logical message, and a tick without the secret is not acted on (counted
 * in forged_ticks). When that transaction comes back through the
 * stream, the fields expired by then go out as `presence` patches with nil
 * values, at the tick's commit end LSN. Every change committed before the
 * tick was applied first (stream order), and every presence read that began
 * before the tick was committed ends below that LSN, so a subscriber applies
 * the patch exactly when its read still showed the field.
 */
#define A2C_TICK_PREFIX "a2-hb"
#define A2C_EXPIRE_TICK "expire "

typedef struct a2__apply a2__apply;

typedef struct {
    uint64_t transactions; /* committed transactions applied */
    uint64_t skipped;      /* transactions skipped as already applied */
    uint64_t changes;      /* row changes decoded */
    uint64_t audit_lines;  /* lines written */
    uint64_t wakes;        /* wake-ups pushed (not counting timers) */
    uint64_t timer_wakes;  /* wake-ups from expired timers */
    uint64_t logs;
    uint64_t cleared;
    uint64_t presence;         /* presence patches pushed */
    uint64_t presence_expired; /* fields pushed as expired by a tick */
    uint64_t expire_ticks;     /* expiry ticks applied */
    uint64_t forged_ticks;     /* tick messages without the secret, ignored */
    uint64_t overflows;        /* transactions whose wake-ups were dropped */
} a2__apply_stats;

/*
 * A new applier writing to audit (NULL: no audit) and timers (borrowed; both
 * must outlive it). resume says which transactions are already in the audit
 * (zeroed: none). NULL when out of memory.
 */
a2__apply *a2__apply_new(a2__audit *audit, a2__timers *timers,
                         const a2__sink *sink, const a2__audit_resume *resume);

/* NULL-safe. */
void a2__apply_free(a2__apply *ap);

/*
 * Feeds one decoded change, with the dataStart LSN of its XLogData message.
 * Returns 0, or -1 with the reason in err: an audit write failed (fatal for
 * the daemon) or the stream broke its shape (C without B: logged by the
 * caller, the change is ignored when the return is 1).
 */
__attribute__((warn_unused_result)) int
a2__apply_change(a2__apply *ap, const a2_change *c, uint64_t data_start,
                 char *err, size_t errlen);

/* 1 while a transaction is open (B seen, C not yet). */
int a2__apply_in_txn(const a2__apply *ap);

/*
 * Forgets an open transaction (the connection was lost mid-way; the server
 * resends it whole). Audit lines already written for it are remembered, so
 * that the resent transaction skips them.
 */
void a2__apply_abort_txn(a2__apply *ap);

/* End LSN of the last commit applied (or skipped), or of a position known
 * to be complete (a2__apply_note_position). */
uint64_t a2__apply_applied(const a2__apply *ap);

/* The secret the daemon's expiry ticks carry (A2C_TICK_SECRET_LEN hex
 * digits; copied). Until it is set no tick is acted on. */
#define A2C_TICK_SECRET_LEN 32
void a2__apply_set_tick_secret(a2__apply *ap, const char *secret);

/* Records a position with nothing open before it (keepalive walEnd, a
 * non-transactional message): applied moves up to it. Ignored while a
 * transaction is open. */
void a2__apply_note_position(a2__apply *ap, uint64_t lsn);

/* The times of the message the next a2__apply_change comes from: the
 * walsender's send time and when a2-consumer read it (µs since the Unix
 * epoch). A commit's wake-ups carry its message's (A2_WIRE_TRACE_*). */
void a2__apply_note_times(a2__apply *ap, int64_t sent_us, int64_t recv_us);

/* Pushes the wake-ups of every timer due at now_ms; returns how many. */
size_t a2__apply_fire_timers(a2__apply *ap, int64_t now_ms);

/* Writes one explicit gap record (slot recreated: changes between from and
 * to were lost) and marks to as applied. */
__attribute__((warn_unused_result)) int
a2__apply_gap(a2__apply *ap, uint64_t from, uint64_t to, const char *reason,
              char *err, size_t errlen);

void a2__apply_get_stats(const a2__apply *ap, a2__apply_stats *out);

/* Keeps (expires_at > 0) or forgets (0) the expiry of a live presence field:
 * the stream does this itself; the daemon adds the table's rows on start.
 * -1 when out of memory or past A2C_APPLY_MAX_PRESENCE fields. */
int a2__apply_track_presence(a2__apply *ap, const char *ns,
                             const char *participant, const char *field,
                             int64_t expires_at);

/* Moves the backlog gauges (borrowed; NULL: none) with every a2_cursors
 * change of the transactions applied (backlog.h): each change's deltas,
 * classified with the sessions' clear markers as the applier knows them,
 * are committed with the transaction; a transaction already applied
 * (skipped) or cut short gives none, and one that moves a clear marker or
 * truncates a2_cursors or a2_clears is tainted. */
void a2__apply_set_backlog(a2__apply *ap, a2__backlog *bl);

/* Remembers session's clear marker as read from the table (markers only
 * grow: a lower one than the stream showed is ignored). */
void a2__apply_remember_clear(a2__apply *ap, const char *session,
                              int64_t clear_index);

/* Forgets every kept expiry (before the table is read again). */
void a2__apply_forget_presence(a2__apply *ap);

/* No kept field expires before this (ms; INT64_MAX: none kept). */
int64_t a2__apply_expiry_due(const a2__apply *ap);

#endif
