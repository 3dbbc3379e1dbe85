/*
 * Whole numbers in options, environment variables and arguments.
 */
#include "num.h"

#include <errno.h>
#include <stdlib.h>

int a2__num_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s)
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = (int64_t)v;
    return 0;
}
