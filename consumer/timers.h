/*
 * Lease-expiry and retry-after timers of a2-consumer: a binary min-heap of
 * deadlines keyed by (session, consumer, cursor key), with replace and cancel
 * by key in O(log n). At most one timer per key: setting a key again moves
 * its deadline. Deadlines are epoch milliseconds (the store's clock). The
 * applier keeps the expiries of presence fields in a set of its own, keyed
 * by (namespace, participant, field).
 */
#ifndef A2_CONSUMER_TIMERS_H
#define A2_CONSUMER_TIMERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct a2__timers a2__timers;

/* A timer as a2__timers_pop returns it; the strings live until the next
 * call on the set (or a2__timers_free). */
typedef struct {
    const char *session;
    const char *consumer;
    const char *cursor_key;
    int64_t epoch;
    int64_t head;
    int64_t deadline_ms;
} a2__timer;

/* An empty set, or NULL when out of memory. */
a2__timers *a2__timers_new(void);

/* NULL-safe. */
void a2__timers_free(a2__timers *t);

/*
 * Sets (or moves) the timer of the key to deadline_ms, remembering head for
 * the wake-up it will cause. Returns 0, or -1 when out of memory (the set is
 * unchanged).
 */
__attribute__((warn_unused_result)) int
a2__timers_set(a2__timers *t, const char *session, const char *consumer,
               const char *cursor_key, int64_t epoch, int64_t head,
               int64_t deadline_ms);

/*
 * Cancels the key's timer when it was set for epoch (any epoch when epoch is
 * negative); returns 1 when one was cancelled, else 0.
 */
int a2__timers_cancel(a2__timers *t, const char *session, const char *consumer,
                      const char *cursor_key, int64_t epoch);

/* Number of pending timers. */
size_t a2__timers_count(const a2__timers *t);

/* Earliest deadline, or INT64_MAX when empty. */
int64_t a2__timers_next(const a2__timers *t);

/*
 * Removes the earliest timer when its deadline is <= now_ms and copies it to
 * out (strings valid until the next call on the set). Returns 1 when one was
 * popped, else 0.
 */
int a2__timers_pop(a2__timers *t, int64_t now_ms, a2__timer *out);

/* The timer a2__timers_pop would remove, left in place (strings valid until
 * the next call on the set). Returns 1 when there is one, else 0. */
int a2__timers_peek(const a2__timers *t, int64_t now_ms, a2__timer *out);

/* Removes every timer. */
void a2__timers_clear(a2__timers *t);

#endif
