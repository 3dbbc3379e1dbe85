/*
 * The clocks of every a2 part: CLOCK_MONOTONIC for deadlines and intervals,
 * CLOCK_REALTIME for timestamps. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_CLOCK_H
#define A2_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t a2__mono_ms(void);

/* CLOCK_MONOTONIC in microseconds. */
int64_t a2__mono_us(void);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t a2__mono_ns(void);

/* CLOCK_REALTIME in milliseconds since the Unix epoch. */
int64_t a2__real_ms(void);

/* CLOCK_REALTIME in microseconds since the Unix epoch. */
int64_t a2__real_us(void);

/* CLOCK_REALTIME in nanoseconds since the Unix epoch. */
int64_t a2__real_ns(void);

/* Sleeps ms milliseconds; a signal ends the sleep early (so that a loop
 * can look at its stop flag). */
void a2__sleep_ms(int ms);

/* Sleeps us microseconds (nothing when us <= 0), resuming after a signal. */
void a2__sleep_us(int64_t us);

/* mono_ms (an a2__mono_ms value) as a timespec, for pthread_cond_timedwait
 * on a condition variable whose clock is CLOCK_MONOTONIC. */
struct timespec a2__mono_timespec(int64_t mono_ms);

/* Initialises cv with CLOCK_MONOTONIC as its clock, so that its timed
 * waits take a2__mono_timespec deadlines; destroyed as any other. */
void a2__mono_cond_init(pthread_cond_t *cv);

#endif
