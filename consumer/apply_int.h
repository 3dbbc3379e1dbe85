/*
 * Internals of the transaction applier (apply.h), shared by its files:
 *   apply.c          the transaction: B, its changes, C (audit lines, then
 *                    the actions in order), timers, gaps
 *   apply_rules.c    what a change to a2_cursors, a2_events or a2_clears
 *                    does: the rule table over the classifier's
 *                    transitions, and the sessions' clear markers
 *   apply_presence.c presence patches and the expiry of presence fields
 *
 * A transaction's effects are buffered from B to C as typed actions, each
 * owning its strings; the commit consumes them in order.
 */
#ifndef A2_CONSUMER_APPLY_INT_H
#define A2_CONSUMER_APPLY_INT_H

#include <jansson.h>
#include <stdbool.h>

#include "apply.h"

typedef enum {
    A2C_ACT_WAKE,     /* push a wake-up for a cursor's head */
    A2C_ACT_ARM,      /* set (or move) a cursor's timer */
    A2C_ACT_CANCEL,   /* cancel a cursor's timer */
    A2C_ACT_LOG,      /* an event inserted: route it to the log consumers */
    A2C_ACT_CLEARED,  /* a session cleared up to an index */
    A2C_ACT_PRESENCE, /* a presence field written or deleted */
    A2C_ACT_TRUNCATE, /* a2_cursors truncated: drop the timers, resync */
    /* a claim of a cursor's head: the wake-ups of that head before it in
     * the transaction are void (the head is held at the commit) */
    A2C_ACT_VOID,
    A2C_ACT_DROPPED, /* settled away at the commit: nothing to do */
} a2__apply_act_kind;

/* A cursor, as the timers and wake-ups name it. */
typedef struct {
    char *session, *consumer, *cursor_key;
} a2__apply_key;

typedef struct {
    a2__apply_act_kind kind;
    union {
        struct {
            a2__apply_key key;
            int64_t head;
        } wake; /* also A2C_ACT_VOID's */
        struct {
            a2__apply_key key;
            int64_t epoch, head, deadline_ms;
        } arm;
        struct {
            a2__apply_key key;
            int64_t epoch; /* the run's; negative: whatever run set it */
        } cancel;
        struct {
            char *session, *type;
            int64_t idx;
        } log;
        struct {
            char *session;
            int64_t clear_index;
        } cleared;
        struct {
            char *ns, *participant, *field;
            char *value;        /* jsonb text; NULL: a tombstone or a delete */
            int64_t expires_at; /* 0: none (a delete) */
            /* an update that left a TOASTed value as it was: no patch,
             * only its new expiry */
            bool kept;
        } presence;
    };
} a2__apply_act;

struct a2__apply {
    a2__audit *audit;
    a2__timers *timers;
    a2__sink sink;

    uint64_t done;        /* transactions ending at or before: applied */
    uint64_t partial_lsn; /* transaction whose first lines are written */
    size_t partial_lines;
    uint64_t applied;

    /* The open transaction. */
    int in_txn;
    uint64_t end;        /* its commit end LSN (B's nextlsn) */
    uint64_t xid_n;      /* the transaction's id, 0 when unknown */
    a2__audit_text text; /* its audit lines not yet written */
    int skip_all;
    size_t skip_lines;    /* lines already in the file to skip */
    size_t written_early; /* lines of this transaction already written */
    a2__apply_act *acts;
    size_t nacts, capacts;
    size_t nwakes; /* of acts, the wake-ups */
    int overflow;

    int64_t commit_us; /* the open transaction's commit time, 0: unknown */
    /* the last message's: the walsender's send time and its reading (µs
     * since the Unix epoch), a2__apply_note_times */
    int64_t msg_sent_us, msg_recv_us;
    a2__backlog *backlog;

    char tick_secret[A2C_TICK_SECRET_LEN + 1]; /* "": none */

    /* session -> clear marker (tsearch tree, apply_rules.c) */
    void *clears;
    size_t nclears;

    /* Live presence fields by expires_at, keyed (ns, participant, field). */
    a2__timers *expiries;
    int64_t expire_tick; /* > 0: the open transaction carries an expiry tick
                            of that time */

    a2__apply_stats stats;
};

/* ---- apply.c ---- */

/* Adds an action; on overflow or out of memory, drops every action and asks
 * for a resync at commit. Takes ownership of the action's strings. */
void a2__apply_add(a2__apply *ap, a2__apply_act act);

/* The actions of kind that are about something (see has_subject in
 * apply.c; for presence, the patches), sorted by what they are about and
 * then by their place in the transaction: a new array (free it), or NULL
 * when there are none (*n is 0) or out of memory (*n is not). */
a2__apply_act **a2__apply_sorted(a2__apply *ap, a2__apply_act_kind kind,
                                 size_t *n);

/* Compares two wake-ups' or voids' (pointers to pointers, as qsort passes
 * them) cursor and head. */
int a2__apply_same_head(const void *pa, const void *pb);

/* A copy of t as a C string (NULL for SQL NULL or out of memory). */
char *a2__apply_tdup(a2_change_text t);

/* 1 when t is the string s (0 when either is NULL). */
int a2__apply_teq(a2_change_text t, const char *s);

/* ---- apply_rules.c ---- */

/* The transition of an a2_cursors I/U/D, as the audit names it: a deleted
 * run with a head is retired when the session's clear marker passed it. */
a2_transition a2__apply_cursor_transition(a2__apply *ap, const a2_change *c);

/* The actions of an a2_cursors I/U/D of transition tr, and its backlog
 * deltas. */
void a2__apply_cursor_change(a2__apply *ap, const a2_change *c,
                             a2_transition tr);

/* The actions of an a2_events insert and of an a2_clears write. */
void a2__apply_event_change(a2__apply *ap, const a2_change *c);
void a2__apply_clear_change(a2__apply *ap, const a2_change *c);

/* Forgets every clear marker. */
void a2__apply_forget_clears(a2__apply *ap);

/* ---- apply_presence.c ---- */

/* The action of an a2_presence I/U/D. */
void a2__apply_presence_change(a2__apply *ap, const a2_change *c);

/* Sends the transaction's presence patches, one per (ns, participant);
 * -1 when out of memory. */
int a2__apply_push_presence(a2__apply *ap);

/* The expiry tick of time now_ms: a patch (nil values) for each participant
 * with fields expired by then, at the tick's commit end; the fields are
 * forgotten. */
void a2__apply_push_expired(a2__apply *ap, int64_t now_ms);

#endif
