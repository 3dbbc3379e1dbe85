/*
 * String hashing for the in-memory tables (the consumer's timers, the
 * worker pool's scheduler). Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_HASH_H
#define A2_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* 64-bit FNV-1a of data[0..len). */
uint64_t a2__fnv1a(const void *data, size_t len);

#endif
