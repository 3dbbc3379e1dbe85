/*
 * The active lock of a2-consumer: of the consumers started for one slot,
 * exactly one streams, for as long as it lives; the others are standbys
 * that wait for it and take over when it ends.
 *
 * Two locks, held together for the active consumer's whole life:
 * - with an audit file, an exclusive flock(2) on PATH.lock beside it (its
 *   content names the holder, "PID@HOST"): two consumers that write the
 *   same file (shared storage, or one host) never both write it, and the
 *   trail stays continuous;
 * - a session advisory lock on a normal connection of its own,
 *   pg_advisory_lock(hashtext('a2-consumer'), hashtext(slot)) (the two-key
 *   form, apart from the one-key locks a2's writes take): consumers on
 *   hosts that share nothing else.
 * The slot's active PID alone is not enough: a walsender outlives a killed
 * consumer for a moment, and nothing ties the audit file to it.
 *
 * A standby polls the file lock (no query) and then waits on the advisory
 * lock with a query that blocks in the server, so it takes over the moment
 * the active consumer's connection ends.
 */
#ifndef A2_CONSUMER_ACTIVE_H
#define A2_CONSUMER_ACTIVE_H

#include <stddef.h>

typedef struct a2__active a2__active;

/* audit_path: NULL without an audit file. NULL with err set when out of
 * memory or the lock file cannot be opened. */
a2__active *a2__active_new(const char *conninfo, const char *slot,
                           const char *audit_path, char *err, size_t errlen);

/* Closes the lock file and the connection: the locks are released. */
void a2__active_free(a2__active *a);

/*
 * One step towards the locks, without blocking (but for connecting):
 * 1 both are held; 0 another consumer holds one (who, in msg); -1 an error
 * (err: the database is unreachable, a query failed), to be retried.
 */
int a2__active_step(a2__active *a, char *msg, size_t msglen, char *err,
                    size_t errlen);

/* The descriptor to poll while waiting for the advisory lock, or while
 * holding it (its connection), or -1. */
int a2__active_fd(const a2__active *a);

/*
 * While active: reads what the lock connection has (call when its
 * descriptor is readable). 0 while the lock is held; -1 when its
 * connection is gone, and the lock with it (err says why).
 */
int a2__active_check(a2__active *a, char *err, size_t errlen);

/*
 * After a2__active_check failed: connects again and takes the advisory lock
 * if it is free (pg_try_advisory_lock). 1 held again; 0 another consumer
 * took it meanwhile; -1 the database is still unreachable (err).
 */
int a2__active_retake(a2__active *a, char *err, size_t errlen);

#endif
