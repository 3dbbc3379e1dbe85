/*
 * String hashing: the seeded 64-bit hash of the in-memory tables (the
 * consumer's timers and maps, the worker pool's scheduler) and of the
 * worker server's routing. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_HASH_H
#define A2_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The splitmix64 finaliser: every bit of x moves about half the bits out. */
uint64_t a2__mix64(uint64_t x);

/* 64-bit FNV-1a of data[0..len), seeded, then finalised with a2__mix64
 * (FNV alone mixes its last bytes poorly). The same in every process. */
uint64_t a2__hash(const void *data, size_t len, uint64_t seed);

/* a2__hash with this process's random seed, for a table whose keys others
 * choose (session names, cursor keys): no one can pick keys that share a
 * bucket without knowing it. Stable within the process only. */
uint64_t a2__table_hash(const void *data, size_t len);

/* The seed of a2__table_hash (read from getrandom once). */
uint64_t a2__hash_seed(void);

#endif
