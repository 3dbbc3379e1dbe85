/*
 * liba2store: reducer snapshots with pins, and presence registers with a
 * TTL. Same conventions as a2/store.h (one SQL function call per operation,
 * values only as parameters, 0 or a negative a2_store_code, results
 * owned by their struct and released with their NULL-safe _free, the error
 * in a2_store_last_error()).
 *
 * ── Snapshots ────────────────────────────────────────────────────────────
 *
 * A reducer folds a session's events into a state. write_state stores the
 * state a reducer reached after the event at up_to_index: the newest write
 * of (session, reducer) is kept in a2_snapshots (a write older than the
 * stored one leaves it; an equal index replaces it). A head that read a
 * snapshot pins it: a pin names the head (consumer, lane or concurrent,
 * event index) and keeps that version in a2_snapshot_history, so a re-run of
 * the same head reads the same state (read_state with at_index) even after
 * newer snapshots were written.
 *
 * Pins are accepted only for live, unfinished heads: the cursor
 * (consumer, cursor key) must have that event index as its head, not be
 * dead-lettered and lie above the clear marker. Other pins are dropped and
 * counted in pins_refused; a version none of whose pins was accepted is not
 * kept in the history. The cursor rows are read `for share`, so a completion
 * or dead letter releasing that head waits for the write to commit and sees
 * its pins. Completing a head, skipping it (redrive skip) and dead-lettering
 * it release its pins and delete the history no other pin keeps (liba2store's
 * a2_store_complete / a2_store_redrive / a2_store_fail / a2_store_claim).
 * a2_store_reclaim deletes snapshots, history and pins below the clear
 * marker.
 *
 * ── Presence ─────────────────────────────────────────────────────────────
 *
 * Field-wise last-writer-wins registers per (namespace, participant, field).
 * A write carries the sender's `at` (epoch ms): it orders writes and never
 * sets their lifetime, which is ttl_ms from the store's clock (the clock of
 * a2_store_set_clock). For each field:
 *   - an unexpired stored row with a strictly newer `at` survives;
 *   - otherwise (older or equal `at`: ties go to the incoming write; or the
 *     stored row has expired) the incoming value replaces it;
 *   - a delete (value NULL or JSON null) writes a tombstone under the same
 *     rule, kept until it expires, so a late older write cannot bring the
 *     field back.
 * Reads hide expired rows and tombstones and delete expired rows of the
 * namespace; a2_store_presence_reap deletes them without a read.
 *
 * Subscribing without a gap. a2-consumer turns every committed change of
 * a2_presence into a `presence` patch {ns, participant, fields, lsn} for the
 * workers subscribed to ns, where lsn is the transaction's commit end LSN
 * (docs/protocol.md). Presence writes and reaps hold a shared advisory lock
 * on the namespace; a2_store_presence_read takes it exclusively, then reads
 * the rows and pg_current_wal_insert_lsn() in one snapshot. Every change of
 * the namespace whose commit ends at or below the returned lsn is in the
 * rows; every later one ends above it. A subscriber therefore:
 *   1. subscribes (`presence` {ns}) and sends a `ping`: once its `pong` is
 *      back the consumer has taken the subscription. It buffers the patches
 *      it receives from then on;
 *   2. calls a2_store_presence_read: the state as of lsn;
 *   3. applies, in order, only the patches with lsn greater than the read's.
 * Nothing committed after the read is missed (it is decoded after the
 * subscription took effect) and nothing in the read is applied twice. A new
 * connection to the consumer (liba2worker's A2_WORKER_EV_CONNECTED) starts
 * over at step 1: patches are not replayed across connections, nor after the
 * consumer dropped a worker's overflowing queue.
 * Expiry shows as a patch at its time: a2-consumer keeps each live field's
 * expires_at and, when one is due, commits an expiry tick (a transactional
 * logical message) whose commit end is the patch's lsn; every read begun
 * before the tick ends below it (docs/protocol.md). A read or reap that
 * deletes an expired row sends a nil patch again, which changes nothing.
 * Reaps take the shared lock of each namespace they delete in, before its
 * rows.
 */
#ifndef A2_STATE_H
#define A2_STATE_H

#include "a2/store.h"

/* ── snapshots ────────────────────────────────────────────────────────── */

/* Limits (A2_EINVALID_ARGUMENT past them). */
#define A2_STATE_MAX_WRITES 1000  /* writes in one write_state */
#define A2_STATE_MAX_PINS   10000 /* pins in one write_state */

/* A head that read a snapshot. */
typedef struct a2_state_pin {
    const char *consumer;
    const char *lane; /* NULL: a concurrent cursor ("#<index>") */
    int64_t index;    /* the head's event index, >= 1 */
} a2_state_pin;

/* One version of a reducer's state. */
typedef struct a2_state_write {
    int64_t up_to_index; /* the last event folded in, >= 0 */
    const char *state;   /* JSON text (any JSON value) */
    const a2_state_pin *pins;
    size_t npins;
} a2_state_write;

typedef struct a2_state_write_result {
    int64_t up_to_index;  /* the latest snapshot's index after the call */
    bool replaced_latest; /* a write of this call is now the latest */
    size_t pins_accepted;
    size_t pins_refused; /* not a live, unfinished head */
} a2_state_write_result;

/*
 * Stores the writes of reducer in session (in one transaction): the newest
 * becomes the latest snapshot unless a newer one is stored; versions with
 * accepted pins go to the history. Two writes with the same up_to_index in
 * one call are refused (A2_EINVALID_ARGUMENT). A write below the session's
 * clear marker fails with A2_ESESSION_CLEARED and writes nothing. Like every
 * write, it runs under the session's advisory lock; the pinned heads' rows
 * are read for share before it, in the order append's fence takes them.
 */
A2_STORE_MUST_CHECK int
a2_store_write_state(a2_store *store, const char *session, const char *reducer,
                     const a2_state_write *writes, size_t nwrites,
                     a2_state_write_result *out);

/* A snapshot as read. */
typedef struct a2_state {
    bool found;
    int64_t up_to_index;
    const char *state; /* JSON text as the server renders jsonb */
    int64_t written_at;
    a2_store_arena *arena_;
} a2_state;
void a2_state_free(a2_state *r);

/*
 * Reads reducer's state in session: with at_index A2_STORE_NONE, the latest
 * snapshot; otherwise the newest version (latest or kept in the history)
 * with up_to_index <= at_index. out->found is false when there is none, or
 * when it lies below the session's clear marker.
 */
A2_STORE_MUST_CHECK int a2_store_read_state(a2_store *store,
                                            const char *session,
                                            const char *reducer,
                                            int64_t at_index, a2_state *out);

/* ── presence ─────────────────────────────────────────────────────────── */

#define A2_PRESENCE_MAX_FIELDS 1024 /* fields in one write (the wire's map) */

/* The advisory lock class of a namespace: (A2_PRESENCE_LOCK_CLASS,
 * hashtext(ns)), in the two-key space (apart from the session locks). */
#define A2_PRESENCE_LOCK_CLASS 24882

typedef struct a2_presence_field {
    const char *field;
    const char *value; /* JSON text; NULL or "null": delete (tombstone) */
} a2_presence_field;

typedef struct a2_presence_write_req {
    const char *ns;
    const char *participant;
    int64_t at;     /* the sender's clock, epoch ms: orders writes */
    int64_t seen;   /* the sender's last-seen mark; A2_STORE_NONE: none */
    int64_t ttl_ms; /* > 0: lifetime from the store's clock */
    const a2_presence_field *fields;
    size_t nfields; /* 1..A2_PRESENCE_MAX_FIELDS, names distinct */
} a2_presence_write_req;

/* One register. */
typedef struct a2_presence_entry {
    const char *participant;
    const char *field;
    const char *value; /* JSON text; "null" in write results: deleted */
    int64_t seen;      /* A2_STORE_NONE when none */
    int64_t at;
    int64_t expires_at;
} a2_presence_entry;

typedef struct a2_presence {
    a2_presence_entry *items; /* by participant, then field (byte order) */
    size_t count;
    uint64_t lsn; /* read: the WAL position the rows are exact at */
    a2_store_arena *arena_;
} a2_presence;
void a2_presence_free(a2_presence *r);

/*
 * Writes the fields of req under the LWW rules above. out->items are the
 * fields that won (a deleted field with value "null"), in the order given;
 * the others lost to a newer unexpired row.
 */
A2_STORE_MUST_CHECK int
a2_store_presence_write(a2_store *store, const a2_presence_write_req *req,
                        a2_presence *out);

/*
 * The namespace's live registers (no tombstones, nothing expired) and the
 * lsn they are exact at; deletes the namespace's expired rows. It waits for
 * the namespace's writes in flight, and writes that start meanwhile wait for
 * it (one short transaction).
 */
A2_STORE_MUST_CHECK int a2_store_presence_read(a2_store *store, const char *ns,
                                               a2_presence *out);

/*
 * Deletes at most limit (1..100000) expired rows of namespace ns (NULL:
 * of every namespace); *reaped (may be NULL) is how many. Each deletion
 * reaches the namespace's subscribers as a patch (a nil value; a2-consumer
 * has pushed the expiry itself at its time): run it periodically so that
 * expired rows do not pile up (`a2 presence NS --follow` reaps its
 * namespace every second). Call again while it returns limit.
 */
A2_STORE_MUST_CHECK int a2_store_presence_reap(a2_store *store, const char *ns,
                                               size_t limit, int64_t *reaped);

#endif
