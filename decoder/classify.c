/*
 * Cursor-transition classifier: (old a2_cursors row, new row) -> the name of
 * the store operation that made the write.
 *
 * The rules follow the store's writes to a2_cursors:
 *   insert                                    started
 *   claim of an unclaimed head                claimed (attempt+1, holder set,
 *                                             failure_count unchanged)
 *   claim of a lapsed claim                   taken_over (attempt+1,
 *                                             failure_count+1, new holder)
 *   claim that spends the last attempt        dead_lettered (failed_at set)
 *   renew                                     renewed (only claim_expires_at
 *                                             moves, same holder and attempt)
 *   fail                                      failed (failure_count+1, claim
 *                                             released, retry hold) or
 *                                             dead_lettered (failed_at set)
 *   complete                                  completed (head moves to a next
 *                                             head) or went_idle (head null),
 *                                             position = old head, fresh
 *                                             dispatch columns (a delayed
 *                                             next head held until its time)
 *   redrive --retry                           retried (failed_at cleared,
 *                                             failure_count 0)
 *   redrive --skip                            skipped (a dead head advanced
 *                                             past, fresh dispatch)
 *   wake_log on a kept run                    retyped (only types change)
 *   clear of the clearing consumer's head     released (head null, position
 *                                             kept, fresh dispatch)
 *   delete of an idle or superseded run       retired (head null, or at or
 *                                             below the clear marker)
 *   any other delete                          deleted
 * Anything else is other.
 */
#include "a2/decoder.h"

#include <string.h>

static const char *const names[A2_TRANSITION_COUNT] = {
        [A2_TRANSITION_STARTED] = "started",
        [A2_TRANSITION_CLAIMED] = "claimed",
        [A2_TRANSITION_RENEWED] = "renewed",
        [A2_TRANSITION_TAKEN_OVER] = "taken_over",
        [A2_TRANSITION_COMPLETED] = "completed",
        [A2_TRANSITION_WENT_IDLE] = "went_idle",
        [A2_TRANSITION_FAILED] = "failed",
        [A2_TRANSITION_DEAD_LETTERED] = "dead_lettered",
        [A2_TRANSITION_RETRIED] = "retried",
        [A2_TRANSITION_SKIPPED] = "skipped",
        [A2_TRANSITION_CANCELLED] = "cancelled",
        [A2_TRANSITION_RETYPED] = "retyped",
        [A2_TRANSITION_RELEASED] = "released",
        [A2_TRANSITION_RETIRED] = "retired",
        [A2_TRANSITION_DELETED] = "deleted",
        [A2_TRANSITION_OTHER] = "other",
};

const char *a2_transition_name(a2_transition t)
{
    if ((int)t < 0 || (int)t >= A2_TRANSITION_COUNT)
        return "other";
    return names[t];
}

static bool text_eq(a2_change_text a, a2_change_text b)
{
    if (!a.ptr || !b.ptr)
        return !a.ptr && !b.ptr;
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

static bool int_eq(a2_change_int a, a2_change_int b)
{
    return a.null == b.null && (a.null || a.value == b.value);
}

static bool is_null(a2_change_int a)
{
    return a.null;
}

/* The run's identity: the key and kind never change. */
static bool same_run(const a2_cursor_row *b, const a2_cursor_row *a)
{
    return text_eq(b->session_id, a->session_id) &&
           text_eq(b->consumer, a->consumer) &&
           text_eq(b->cursor_key, a->cursor_key) && b->epoch == a->epoch &&
           text_eq(b->kind, a->kind) && text_eq(b->lane, a->lane);
}

/* The dispatch columns as a completion or a clear leaves them; a next head
 * whose event is delayed is held (claim_expires_at set, no holder). */
static bool fresh_dispatch(const a2_cursor_row *a)
{
    return a->attempt_count == 0 && is_null(a->first_claimed_at) &&
           is_null(a->last_claimed_at) && !a->claim_holder.ptr &&
           a->failure_count == 0 &&
           is_null(a->last_failed_at) && is_null(a->last_failed_attempt) &&
           !a->last_error.ptr && is_null(a->failed_at);
}

static bool same_receipt(const a2_cursor_row *b, const a2_cursor_row *a)
{
    return int_eq(b->completed_idx, a->completed_idx) &&
           int_eq(b->completed_attempt, a->completed_attempt) &&
           text_eq(b->returned_event_ids, a->returned_event_ids);
}

/* The failure record (last_failed_at/attempt, last_error) is unchanged. */
static bool same_failure_record(const a2_cursor_row *b, const a2_cursor_row *a)
{
    return int_eq(b->last_failed_at, a->last_failed_at) &&
           int_eq(b->last_failed_attempt, a->last_failed_attempt) &&
           text_eq(b->last_error, a->last_error);
}

static bool is_kind(const a2_cursor_row *r, const char *kind)
{
    size_t n = strlen(kind);
    return r->kind.ptr && r->kind.len == n && memcmp(r->kind.ptr, kind, n) == 0;
}

/* The head moved: a completion, a skip, or a clear's release. */
static a2_transition head_moved(const a2_cursor_row *b, const a2_cursor_row *a)
{
    if (is_null(b->head) || !fresh_dispatch(a))
        return A2_TRANSITION_OTHER;
    if (!is_null(a->head) && a->head.value <= b->head.value)
        return A2_TRANSITION_OTHER;
    if (a->position == b->head.value) {
        if (!is_null(b->failed_at)) {
            /* A skip writes no receipt and keeps the types. */
            if (!same_receipt(b, a) || !text_eq(b->types, a->types))
                return A2_TRANSITION_OTHER;
            return A2_TRANSITION_SKIPPED;
        }
        /* Only a log cursor's types may change with its completion; a
         * concurrent or log cursor records the receipt of the completed
         * head, a lane cursor keeps the run's (the lane event holds it). */
        if (!is_kind(b, "log") && !text_eq(b->types, a->types))
            return A2_TRANSITION_OTHER;
        if (is_kind(b, "lane")) {
            if (!same_receipt(b, a))
                return A2_TRANSITION_OTHER;
        } else if (is_null(a->completed_idx) ||
                   a->completed_idx.value != b->head.value) {
            return A2_TRANSITION_OTHER;
        }
        return is_null(a->head) ? A2_TRANSITION_WENT_IDLE
                                : A2_TRANSITION_COMPLETED;
    }
    if (is_null(a->head) && a->position == b->position && same_receipt(b, a) &&
        text_eq(b->types, a->types))
        return A2_TRANSITION_RELEASED;
    return A2_TRANSITION_OTHER;
}

/* Same head, attempt_count + 1: a claim. */
static a2_transition claimed(const a2_cursor_row *b, const a2_cursor_row *a)
{
    if (!is_null(b->failed_at) || !same_failure_record(b, a))
        return A2_TRANSITION_OTHER;
    if (!is_null(a->failed_at)) {
        /* A takeover that spent the last attempt: the head is dead, the
         * claim released, the claim times kept. */
        if (!b->claim_holder.ptr || a->failure_count != b->failure_count + 1 ||
            a->claim_holder.ptr || !is_null(a->claim_expires_at) ||
            !int_eq(b->first_claimed_at, a->first_claimed_at) ||
            !int_eq(b->last_claimed_at, a->last_claimed_at))
            return A2_TRANSITION_OTHER;
        return A2_TRANSITION_DEAD_LETTERED;
    }
    if (!a->claim_holder.ptr || is_null(a->claim_expires_at) ||
        is_null(a->last_claimed_at) || is_null(a->first_claimed_at))
        return A2_TRANSITION_OTHER;
    if (!is_null(b->first_claimed_at) &&
        !int_eq(b->first_claimed_at, a->first_claimed_at))
        return A2_TRANSITION_OTHER;
    if (b->claim_holder.ptr)
        return a->failure_count == b->failure_count + 1
                       ? A2_TRANSITION_TAKEN_OVER
                       : A2_TRANSITION_OTHER;
    return a->failure_count == b->failure_count ? A2_TRANSITION_CLAIMED
                                                : A2_TRANSITION_OTHER;
}

/* Same head, same attempt: renew, fail, retry or retype. */
static a2_transition same_attempt(const a2_cursor_row *b,
                                  const a2_cursor_row *a)
{
    bool same_claim_times = int_eq(b->first_claimed_at, a->first_claimed_at) &&
                            int_eq(b->last_claimed_at, a->last_claimed_at);
    bool same_types = text_eq(b->types, a->types);

    if (!same_claim_times || !same_receipt(b, a))
        return A2_TRANSITION_OTHER;

    /* fail: the holder's attempt failed. */
    if (b->claim_holder.ptr && !a->claim_holder.ptr && is_null(b->failed_at) &&
        a->failure_count == b->failure_count + 1 &&
        !is_null(a->last_failed_at) &&
        int_eq(a->last_failed_attempt,
               (a2_change_int){b->attempt_count, false}) &&
        same_types) {
        if (!is_null(a->failed_at))
            return is_null(a->claim_expires_at) ? A2_TRANSITION_DEAD_LETTERED
                                                : A2_TRANSITION_OTHER;
        return A2_TRANSITION_FAILED;
    }

    /* cancel: a pending head marked dead by an operator, its claim (a lapsed
     * one, or a hold) released, no failure counted; the skip that passes it
     * follows in the same transaction. */
    if (is_null(b->failed_at) && !is_null(a->failed_at) &&
        a->failure_count == b->failure_count && !a->claim_holder.ptr &&
        is_null(a->claim_expires_at) && a->last_error.ptr &&
        int_eq(b->last_failed_at, a->last_failed_at) &&
        int_eq(b->last_failed_attempt, a->last_failed_attempt) && same_types)
        return A2_TRANSITION_CANCELLED;

    if (!same_failure_record(b, a))
        return A2_TRANSITION_OTHER;

    /* redrive --retry: the dead letter cleared, its history kept. */
    if (!is_null(b->failed_at) && is_null(a->failed_at) &&
        a->failure_count == 0 && text_eq(b->claim_holder, a->claim_holder) &&
        int_eq(b->claim_expires_at, a->claim_expires_at) && same_types)
        return A2_TRANSITION_RETRIED;

    if (!int_eq(b->failed_at, a->failed_at) ||
        a->failure_count != b->failure_count ||
        !text_eq(b->claim_holder, a->claim_holder))
        return A2_TRANSITION_OTHER;

    bool expiry_moved = !int_eq(b->claim_expires_at, a->claim_expires_at);
    /* renew: a live claim's lease moves. */
    if (expiry_moved && b->claim_holder.ptr && !is_null(a->claim_expires_at) &&
        same_types)
        return A2_TRANSITION_RENEWED;
    /* wake_log on a kept run: only the types change. */
    if (!expiry_moved && !same_types)
        return A2_TRANSITION_RETYPED;
    return A2_TRANSITION_OTHER;
}

static a2_transition classify(const a2_cursor_row *b, const a2_cursor_row *a,
                              const a2_change_int *clear_index)
{
    if (!b && !a)
        return A2_TRANSITION_OTHER;
    if (!b)
        return A2_TRANSITION_STARTED;
    if (!a) {
        if (is_null(b->head) || (clear_index && !clear_index->null &&
                                 b->head.value <= clear_index->value))
            return A2_TRANSITION_RETIRED;
        return A2_TRANSITION_DELETED;
    }
    if (!same_run(b, a))
        return A2_TRANSITION_OTHER;
    if (!int_eq(b->head, a->head))
        return head_moved(b, a);
    if (is_null(a->head) || a->position != b->position)
        return A2_TRANSITION_OTHER;
    if (a->attempt_count == b->attempt_count + 1)
        return claimed(b, a);
    if (a->attempt_count == b->attempt_count)
        return same_attempt(b, a);
    return A2_TRANSITION_OTHER;
}

a2_transition a2_transition_classify(const a2_cursor_row *before,
                                     const a2_cursor_row *after)
{
    return classify(before, after, NULL);
}

a2_transition a2_transition_classify_cleared(const a2_cursor_row *before,
                                             const a2_cursor_row *after,
                                             int64_t clear_index)
{
    a2_change_int ci = {clear_index, false};
    return classify(before, after, &ci);
}

a2_transition a2_change_transition(const a2_change *c)
{
    if (!c || c->table != A2_TABLE_CURSORS)
        return A2_TRANSITION_OTHER;
    switch (c->action) {
    case A2_ACTION_INSERT:
    case A2_ACTION_UPDATE:
    case A2_ACTION_DELETE:
        return a2_transition_classify(c->old_row ? &c->old_row->cursor : NULL,
                                      c->new_row ? &c->new_row->cursor : NULL);
    default:
        return A2_TRANSITION_OTHER;
    }
}
