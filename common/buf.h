/*
 * Growing a byte buffer by doubling, as the parts' output and input buffers
 * do. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_BUF_H
#define A2_COMMON_BUF_H

#include <stddef.h>

/*
 * Reallocates p (NULL: none yet) to the capacity that holds need bytes: *cap
 * (first when *cap is 0; first >= 1) doubled until it does, stored in *cap.
 * Returns the new block, or NULL when memory ran out (p and *cap as they
 * were). The caller checks that the doubling cannot overflow.
 */
void *a2__buf_grow(void *p, size_t *cap, size_t first, size_t need);

#endif
