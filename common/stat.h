/*
 * Order statistics of measured samples (latencies in the benchmarks):
 * sorting and nearest-rank percentiles. Internal (liba2common, not
 * installed).
 */
#ifndef A2_COMMON_STAT_H
#define A2_COMMON_STAT_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) in ascending order. */
void a2__stat_sort_i64(int64_t *v, size_t n);

/* The p-quantile (0 <= p <= 1; 1 is the maximum) of sorted v[0..n): the
 * sample at rank (n - 1) * p rounded half up, or -1 when n is 0. */
int64_t a2__stat_pct_i64(const int64_t *v, size_t n, double p);

#endif
