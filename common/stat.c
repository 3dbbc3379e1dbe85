/*
 * Order statistics of measured samples: sorting and percentiles.
 */
#include "stat.h"

#include <stdlib.h>

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

void a2__stat_sort_i64(int64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_i64);
}

int64_t a2__stat_pct_i64(const int64_t *v, size_t n, double p)
{
    return n ? v[(size_t)((double)(n - 1) * p + 0.5)] : -1;
}
