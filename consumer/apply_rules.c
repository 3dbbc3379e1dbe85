/*
 * What a row change does, as actions for the commit: the wake-ups and
 * timers of an a2_cursors change, decided by its transition (the
 * classifier's, decoder/classify.c) through one table; the log and cleared
 * wake-ups of a2_events and a2_clears; and the sessions' clear markers, by
 * which a delete is retired and the backlog counts heads.
 */
#include "apply_int.h"

#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "a2/store.h"

/* ---- clear markers ---- */

typedef struct {
    int64_t clear_index;
    char session[]; /* NUL-terminated */
} clear_entry;

static int clear_cmp(const void *a, const void *b)
{
    return strcmp(((const clear_entry *)a)->session,
                  ((const clear_entry *)b)->session);
}

void a2__apply_forget_clears(a2__apply *ap)
{
    tdestroy(ap->clears, free);
    ap->clears = NULL;
    ap->nclears = 0;
}

/* Remembers session's clear marker (markers only grow). */
static void remember_clear(a2__apply *ap, const char *session, size_t len,
                           int64_t clear_index)
{
    clear_entry *e = malloc(sizeof *e + len + 1);
    if (!e)
        return;
    memcpy(e->session, session, len);
    e->session[len] = '\0';
    e->clear_index = clear_index;
    clear_entry **found = tfind(e, &ap->clears, clear_cmp);
    if (found) {
        if ((*found)->clear_index < clear_index)
            (*found)->clear_index = clear_index;
        free(e);
        return;
    }
    if (ap->nclears >= A2C_APPLY_MAX_CLEARS)
        a2__apply_forget_clears(ap);
    if (!tsearch(e, &ap->clears, clear_cmp)) {
        free(e);
        return;
    }
    ap->nclears++;
}

/* The session's clear marker, as the stream showed it (the store writes it
 * again ahead of the deletes it makes: a2__announce_clear); -1 when
 * unknown. */
static int64_t clear_index_of(a2__apply *ap, a2_change_text session)
{
    if (!session.ptr || !ap->clears)
        return -1;
    /* the key on the stack when it fits (the common case: per change) */
    union {
        clear_entry e;
        char bytes[sizeof(clear_entry) + 256];
    } local;
    clear_entry *key = &local.e;
    if (session.len >= 256 && !(key = malloc(sizeof *key + session.len + 1)))
        return -1;
    memcpy(key->session, session.ptr, session.len);
    key->session[session.len] = '\0';
    clear_entry **found = tfind(key, &ap->clears, clear_cmp);
    int64_t idx = found ? (*found)->clear_index : -1;
    if (key != &local.e)
        free(key);
    return idx;
}

void a2__apply_remember_clear(a2__apply *ap, const char *session,
                              int64_t clear_index)
{
    if (ap && session)
        remember_clear(ap, session, strlen(session), clear_index);
}

/* The clear marker that classifies row r for the backlog (0: none known). */
static int64_t backlog_clear(a2__apply *ap, const a2_cursor_row *r)
{
    if (!r || r->head.null)
        return 0; /* counts nowhere whatever the marker */
    int64_t idx = clear_index_of(ap, r->session_id);
    return idx < 0 ? 0 : idx;
}

/* ---- actions ---- */

static a2__apply_key key_of(const a2_cursor_row *r)
{
    return (a2__apply_key){a2__apply_tdup(r->session_id),
                           a2__apply_tdup(r->consumer),
                           a2__apply_tdup(r->cursor_key)};
}

/* A wake-up for the row's head. */
static a2__apply_act wake_act(const a2_cursor_row *r)
{
    a2__apply_act a = {.kind = A2C_ACT_WAKE};
    a.wake.key = key_of(r);
    a.wake.head = r->head.value;
    return a;
}

/* A claim of the row's head: voids the earlier wake-ups of that head. */
static a2__apply_act void_act(const a2_cursor_row *r)
{
    a2__apply_act a = wake_act(r);
    a.kind = A2C_ACT_VOID;
    return a;
}

/* The row's timer, due at its claim_expires_at. */
static a2__apply_act arm_act(const a2_cursor_row *r)
{
    a2__apply_act a = {.kind = A2C_ACT_ARM};
    a.arm.key = key_of(r);
    a.arm.epoch = r->epoch;
    a.arm.head = r->head.value;
    a.arm.deadline_ms = r->claim_expires_at.value;
    return a;
}

/* Cancels the timer of the row's key set for epoch (negative: any). */
static a2__apply_act cancel_act(const a2_cursor_row *r, int64_t epoch)
{
    a2__apply_act a = {.kind = A2C_ACT_CANCEL};
    a.cancel.key = key_of(r);
    a.cancel.epoch = epoch;
    return a;
}

static a2__apply_act log_act(const a2_event_row *e)
{
    a2__apply_act a = {.kind = A2C_ACT_LOG};
    a.log.session = a2__apply_tdup(e->session_id);
    a.log.type = a2__apply_tdup(e->event_type);
    a.log.idx = e->idx;
    return a;
}

static a2__apply_act cleared_act(a2_change_text session, int64_t clear_index)
{
    a2__apply_act a = {.kind = A2C_ACT_CLEARED};
    a.cleared.session = a2__apply_tdup(session);
    a.cleared.clear_index = clear_index;
    return a;
}

/* ---- the rules of a2_cursors ---- */

/* The wake-up a change pushes (for the after row's head). */
typedef enum {
    WAKE_NONE,
    /* when the head can be claimed now: there is one, it is not dead and
     * not held until a time (a delayed head, a retry hold: its timer
     * wakes it) */
    WAKE_HEAD,
    /* as WAKE_HEAD, when the head is new (no before row, or another head)
     * or was dead before */
    WAKE_IF_MOVED,
    /* none, and a wake-up for the same head earlier in the transaction is
     * void: a claim holds the head at its commit (a log cursor started
     * and claimed in one transaction, say) */
    WAKE_VOID,
} wake_rule;

/* What happens to the timer of the after row's key. */
typedef enum {
    TIMER_NONE,
    /* arm at the after row's claim_expires_at (the transition has one) */
    TIMER_ARM,
    /* arm at the after row's claim_expires_at when its head is live (not
     * dead) and it has one: a lease, a retry hold or a delayed head; else
     * cancel */
    TIMER_DEADLINE,
    TIMER_CANCEL, /* whatever run set it */
} timer_rule;

/* What happens to the timer of the before row's run (its epoch). */
typedef enum {
    RUN_KEEP,
    RUN_CANCEL,  /* the run is gone */
    RUN_REKEYED, /* cancelled when the after row is another run */
} run_rule;

typedef struct {
    wake_rule wake;
    timer_rule timer;
    run_rule run;
} cursor_rule;

/*
 * The wake-up table, by transition. The rule says what happens; the rows
 * give the values (the key, the head, the deadline) and whether the head
 * can be claimed now. Every change also writes one audit line named by its
 * transition. A change no rule explains (other) is judged by its rows: a
 * wake-up when its head is new or was dead, the timer by the after row's
 * deadline, and the old run's timer cancelled when it became another run.
 */
/* clang-format off */
static const cursor_rule rules[A2_TRANSITION_COUNT] = {
  /*                               wake           timer           run */
  [A2_TRANSITION_STARTED]       = {WAKE_HEAD,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_CLAIMED]       = {WAKE_VOID,     TIMER_ARM,      RUN_KEEP},
  [A2_TRANSITION_RENEWED]       = {WAKE_NONE,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_TAKEN_OVER]    = {WAKE_VOID,     TIMER_ARM,      RUN_KEEP},
  [A2_TRANSITION_COMPLETED]     = {WAKE_HEAD,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_WENT_IDLE]     = {WAKE_NONE,     TIMER_CANCEL,   RUN_KEEP},
  [A2_TRANSITION_FAILED]        = {WAKE_NONE,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_DEAD_LETTERED] = {WAKE_NONE,     TIMER_CANCEL,   RUN_KEEP},
  [A2_TRANSITION_RETRIED]       = {WAKE_HEAD,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_SKIPPED]       = {WAKE_HEAD,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_RETYPED]       = {WAKE_NONE,     TIMER_DEADLINE, RUN_KEEP},
  [A2_TRANSITION_RELEASED]      = {WAKE_NONE,     TIMER_CANCEL,   RUN_KEEP},
  [A2_TRANSITION_RETIRED]       = {WAKE_NONE,     TIMER_NONE,     RUN_CANCEL},
  [A2_TRANSITION_DELETED]       = {WAKE_NONE,     TIMER_NONE,     RUN_CANCEL},
  [A2_TRANSITION_CANCELLED]     = {WAKE_NONE,     TIMER_CANCEL,   RUN_KEEP},
  [A2_TRANSITION_OTHER]         = {WAKE_IF_MOVED, TIMER_DEADLINE, RUN_REKEYED},
};
/* clang-format on */

/* The row's head exists and is not dead. */
static int live(const a2_cursor_row *r)
{
    return !r->head.null && r->failed_at.null;
}

/* Held until a time (a delayed head, a retry hold): no holder, a deadline. */
static int held(const a2_cursor_row *r)
{
    return !r->claim_holder.ptr && !r->claim_expires_at.null;
}

static int wakes(wake_rule rule, const a2_cursor_row *before,
                 const a2_cursor_row *after)
{
    if (rule == WAKE_NONE || rule == WAKE_VOID || !live(after) ||
        held(after))
        return 0;
    if (rule == WAKE_HEAD || !before)
        return 1;
    return before->head.null || before->head.value != after->head.value ||
           !before->failed_at.null;
}

a2_transition a2__apply_cursor_transition(a2__apply *ap, const a2_change *c)
{
    const a2_cursor_row *before = c->old_row ? &c->old_row->cursor : NULL;
    a2_transition tr = a2_change_transition(c);
    if (tr == A2_TRANSITION_DELETED && before && !before->head.null) {
        int64_t clear_index = clear_index_of(ap, before->session_id);
        if (clear_index >= 0)
            tr = a2_transition_classify_cleared(before, NULL, clear_index);
    }
    return tr;
}

/* The wake-up and timer actions of one change, by its rule. */
static void cursor_actions(a2__apply *ap, const cursor_rule *rule,
                           const a2_cursor_row *o, const a2_cursor_row *n)
{
    if (ap->overflow)
        return; /* the commit resyncs instead: copy nothing */
    if (n && rule->wake == WAKE_VOID && !n->head.null && ap->nwakes > 0)
        a2__apply_add(ap, void_act(n)); /* none to void: none to add */
    if (n && wakes(rule->wake, o, n))
        a2__apply_add(ap, wake_act(n));
    if (n) {
        switch (rule->timer) {
        case TIMER_NONE:
            break;
        case TIMER_ARM:
            a2__apply_add(ap, arm_act(n));
            break;
        case TIMER_DEADLINE:
            if (live(n) && !n->claim_expires_at.null)
                a2__apply_add(ap, arm_act(n));
            else
                a2__apply_add(ap, cancel_act(n, -1));
            break;
        case TIMER_CANCEL:
            a2__apply_add(ap, cancel_act(n, -1));
            break;
        }
    }
    if (o && (rule->run == RUN_CANCEL ||
              (rule->run == RUN_REKEYED && n && o->epoch != n->epoch)))
        a2__apply_add(ap, cancel_act(o, o->epoch));
}

void a2__apply_cursor_change(a2__apply *ap, const a2_change *c,
                             a2_transition tr)
{
    const a2_cursor_row *o = c->old_row ? &c->old_row->cursor : NULL;
    const a2_cursor_row *n = c->new_row ? &c->new_row->cursor : NULL;
    cursor_actions(ap, &rules[tr], o, n);
    if (ap->backlog && !ap->skip_all)
        a2__backlog_change(ap->backlog, o, backlog_clear(ap, o), n,
                           backlog_clear(ap, n));
}

/* ---- a2_events, a2_clears ---- */

void a2__apply_event_change(a2__apply *ap, const a2_change *c)
{
    if (c->action != A2_ACTION_INSERT || !c->new_row || ap->overflow)
        return;
    const a2_event_row *e = &c->new_row->event;
    if (a2__apply_teq(e->event_type, A2_STORE_CLEAR_TYPE))
        a2__apply_add(ap, cleared_act(e->session_id, e->idx));
    else /* a log cursor may start later in this transaction */
        a2__apply_add(ap, log_act(e));
}

void a2__apply_clear_change(a2__apply *ap, const a2_change *c)
{
    /* A marker that moves (up, or away) changes which heads count: the
     * same marker written again (a2__announce_clear) does not. */
    if (ap->backlog && !ap->skip_all &&
        (c->action != A2_ACTION_UPDATE || !c->new_row ||
         c->new_row->clear.clear_index >
                 clear_index_of(ap, c->new_row->clear.session_id)))
        a2__backlog_taint(ap->backlog);
    if (c->new_row && c->new_row->clear.session_id.ptr)
        remember_clear(ap, c->new_row->clear.session_id.ptr,
                       c->new_row->clear.session_id.len,
                       c->new_row->clear.clear_index);
    if (c->new_row && !ap->overflow)
        a2__apply_add(ap, cleared_act(c->new_row->clear.session_id,
                                      c->new_row->clear.clear_index));
}
