/*
 * Worker server internals: one worker's bounded outbound queue. Wakes
 * coalesce by (consumer, session, cursor key), keeping the latest head and
 * LSN in the place of the first; other frames are queued as encoded bytes.
 * Past the bound the whole queue is dropped and the queue is marked
 * overflowed: it then drops everything until the owner clears the mark
 * (after sending the worker its resyncs).
 */
#ifndef A2_CONSUMER_QUEUE_H
#define A2_CONSUMER_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "a2/wire.h"

typedef struct a2__queue a2__queue;

/*
 * Results of the pushes:
 *   QUEUED     a new frame was queued
 *   COALESCED  an existing wake was updated
 *   OVERFLOW   the bound was hit: the queue was dropped just now
 *   DROPPED    already overflowed: the frame was dropped
 *   ENOMEM     out of memory
 *   EINVAL     the frame could not be encoded (limits, bad fields JSON)
 */
#define A2C_QUEUE_QUEUED    0
#define A2C_QUEUE_COALESCED 1
#define A2C_QUEUE_OVERFLOW  2
#define A2C_QUEUE_DROPPED   3
#define A2C_QUEUE_ENOMEM    (-2)
#define A2C_QUEUE_EINVAL    (-1)

/* A queue holding at most limit frames (limit >= 1). NULL when out of memory.
 */
a2__queue *a2__queue_new(size_t limit);
void a2__queue_free(a2__queue *q); /* NULL-safe */

/* A wake-up, coalesced with one queued for the same (consumer, session,
 * cursor): the latest head, lsn and (when not 0) xid. */
int a2__queue_push_wake(a2__queue *q, const char *consumer, const char *session,
                        const char *cursor, int64_t head, uint64_t lsn,
                        uint64_t xid);
/* The same for a wake-up of a commit whose times on its way are trace_us
 * (A2_WIRE_TRACE_COMMIT, _SENT, _RECV, µs since the Unix epoch; NULL or a
 * 0 commit time: none, a timer's): a coalesced wake keeps the earliest
 * commit it stands for, and its times. */
int a2__queue_push_wake_at(a2__queue *q, const char *consumer,
                           const char *session, const char *cursor,
                           int64_t head, uint64_t lsn, uint64_t xid,
                           const int64_t *trace_us);

/* Where a2__queue_drain counts, for each wake frame it moves that carries a
 * commit time, the time from that commit to the move (NULL: nowhere). */
struct a2__hist;
void a2__queue_set_latency(a2__queue *q, struct a2__hist *h);
/* When on, each wake frame that stands for a commit carries that commit's
 * `trace`, its _PUSH time the frame's move. */
void a2__queue_set_trace(a2__queue *q, int on);
/* Any other message, encoded now. */
int a2__queue_push(a2__queue *q, const a2_wire_msg *m);

/*
 * Moves frames, oldest first, to the end of out until out holds at least
 * max_bytes or the queue is empty. Adds one to sent[type] per frame moved
 * (sent may be NULL; it has room for every a2_wire_type). Returns the number
 * of frames moved, or A2C_QUEUE_ENOMEM (frames stay queued).
 */
int a2__queue_drain(a2__queue *q, a2_wire_buf *out, size_t max_bytes,
                    uint64_t *sent);

size_t a2__queue_len(const a2__queue *q);
int a2__queue_overflowed(const a2__queue *q);
void a2__queue_clear_overflow(a2__queue *q);
/* Drops every frame (without marking overflow). */
void a2__queue_clear(a2__queue *q);

#endif
