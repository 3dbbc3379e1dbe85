/*
 * Per-consumer backlog gauges of a2-consumer, kept from the stream: pending
 * heads, running claims and dead letters, read once from the database
 * (consumer/backlog.sql, the definitions of a2_backlog()) and then moved by
 * every decoded a2_cursors change. Knows nothing of sockets or libpq.
 *
 * A row's contribution (a2__backlog_classify): a head above its session's
 * clear marker that is not dead-lettered is pending, and running too when
 * a claim holds it (live or lapsed); a dead-lettered head above the marker
 * is a dead letter; anything else counts nowhere. Each change adds the new
 * row's contribution and takes away the old row's (a2_cursors has REPLICA
 * IDENTITY FULL: updates and deletes carry the old row), per consumer, into
 * the open transaction's deltas; the commit applies them.
 *
 * The read and the stream overlap. The read returns, with its counts, the
 * snapshot its statement ran in (pg_current_snapshot). A transaction of the
 * stream that this snapshot sees is already in the counts and its deltas
 * are left out; every other transaction's deltas count, whether it is
 * applied before the answer arrives or after. For that, the deltas of the
 * transactions applied are kept in a bounded journal: when an answer comes,
 * the entries its snapshot sees are dropped, the others are applied again on
 * top of the counts read (and kept, for they may still be missing from the
 * next read). A read whose snapshot misses an entry the journal dropped for
 * room, or misses a transaction whose effect deltas cannot express (a
 * clear marker raised, a truncate: "tainted"), is not used: the caller reads
 * again.
 *
 * Clear markers: a head at or below its session's marker does not count,
 * so raising a marker takes heads out of the counts that no cursor change
 * names. The transaction that raises it is tainted: it asks for a read
 * (a2__backlog_wants_read), and until that read arrives the gauges still
 * count the heads the clear passed. The markers that classify the rows of
 * later changes are the ones the applier learnt from the stream and from
 * the reads.
 *
 * Bounded: at most A2C_BACKLOG_MAX_CONSUMERS consumer names (the rest are
 * counted in `dropped` and not kept); at most A2C_BACKLOG_JOURNAL_MAX
 * journal deltas while a read is in flight, A2C_BACKLOG_JOURNAL_IDLE
 * otherwise (an entry evicted before a read was sent is taken as seen by
 * it). A gauge never goes below zero: a delta that would take it there
 * leaves it at zero, counts a clamp and asks for a read.
 *
 * Single-threaded: the consumer's loop calls everything here, the metrics
 * rendering included.
 */
#ifndef A2_CONSUMER_BACKLOG_H
#define A2_CONSUMER_BACKLOG_H

#include <stddef.h>
#include <stdint.h>

#include "a2/decoder.h"

/* consumer/backlog.sql (embedded by the build): the read, with $1 the most
 * clear markers it returns. */
extern const char a2__backlog_sql[];

#define A2C_BACKLOG_MAX_CONSUMERS 10000
#define A2C_BACKLOG_JOURNAL_MAX   65536
#define A2C_BACKLOG_JOURNAL_IDLE  4096

/* What a row counts as (bits). */
#define A2C_BACKLOG_PENDING 1u
#define A2C_BACKLOG_RUNNING 2u
#define A2C_BACKLOG_DEAD    4u

/* The contribution of row r (NULL: none) in a session whose clear marker is
 * clear_index (0 or below: none). */
unsigned a2__backlog_classify(const a2_cursor_row *r, int64_t clear_index);

typedef struct a2__backlog a2__backlog;

typedef struct {
    uint64_t reads;        /* reads applied */
    uint64_t reads_unused; /* answers that could not be used (read again) */
    uint64_t clamps;       /* deltas that would have taken a gauge below 0 */
    uint64_t dropped;      /* deltas and rows of consumers past the cap */
    uint64_t consumers;    /* consumer names kept now */
    uint64_t journal;      /* journal deltas kept now */
} a2__backlog_stats;

/* NULL when out of memory. */
a2__backlog *a2__backlog_new(void);
void a2__backlog_free(a2__backlog *bl); /* NULL-safe */

/* ---- the stream (called by the applier) ---- */

/* One a2_cursors change: old (NULL for an insert) and new (NULL for a
 * delete) rows, each with its session's clear marker (-1: unknown, taken
 * as none). */
void a2__backlog_change(a2__backlog *bl, const a2_cursor_row *old_row,
                        int64_t old_clear, const a2_cursor_row *new_row,
                        int64_t new_clear);

/* The open transaction did what deltas cannot express (a clear marker
 * moved, a truncate, a change that did not decode): once it commits, a read
 * is wanted, and a read whose snapshot misses it is not used. */
void a2__backlog_taint(a2__backlog *bl);

/* The open transaction committed: xid (0: unknown, then end LSN decides
 * against the read's WAL position) and end, its commit's end LSN. */
void a2__backlog_commit(a2__backlog *bl, uint64_t xid, uint64_t end);

/* The open transaction is forgotten (skipped as already applied, or cut by
 * a lost connection: the server sends it again). */
void a2__backlog_abort(a2__backlog *bl);

/* ---- reads ---- */

/* 1 when a read is wanted (a tainted commit, a clamp, a2__backlog_want). */
int a2__backlog_wants_read(const a2__backlog *bl);

/* Asks for a read (start, reconnect, resync). */
void a2__backlog_want(a2__backlog *bl);

/* A read was sent: what is applied from now on is kept for its answer. */
void a2__backlog_read_sent(a2__backlog *bl);

/* One consumer's counts in a read. */
typedef struct {
    const char *consumer;
    int64_t pending, running, dead;
} a2__backlog_row;

/*
 * The answer to the read last sent (a2__backlog_read_sent; an answer with
 * none sent is not used): snapshot is pg_current_snapshot()'s text
 * ("xmin:xmax:xip,..."), insert_lsn the server's WAL insert position read
 * in the same statement. Returns 0 when the counts were replaced by the
 * rows (plus the journal's transactions the snapshot misses), 1 when the
 * answer cannot be used (read again; a read is wanted again), -1 when the
 * snapshot text does not parse.
 */
int a2__backlog_load(a2__backlog *bl, const char *snapshot, uint64_t insert_lsn,
                     const a2__backlog_row *rows, size_t n);

/* 1 once a read has been applied. */
int a2__backlog_loaded(const a2__backlog *bl);

/* ---- what the gauges say ---- */

/* The consumer's counts (0 and return 0 when it is not kept). */
int a2__backlog_get(const a2__backlog *bl, const char *consumer,
                    a2__backlog_row *out);

void a2__backlog_get_stats(const a2__backlog *bl, a2__backlog_stats *out);

/* Appends the gauges a2_consumer_backlog_pending, _running and
 * _dead_letters (one sample per consumer kept, by name, label values
 * escaped; none before the first read) and the read, clamp and cap
 * counters, in Prometheus text (consumer/metrics.h's buffer). */
void a2__backlog_render(const a2__backlog *bl, char **buf, size_t *len,
                        size_t *cap);

#endif
