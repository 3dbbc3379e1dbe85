/*
 * Growing a byte buffer by doubling.
 */
#include "buf.h"

#include <stdlib.h>

void *a2__buf_grow(void *p, size_t *cap, size_t first, size_t need)
{
    size_t ncap = *cap ? *cap : first;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(p, ncap);
    if (np)
        *cap = ncap;
    return np;
}
