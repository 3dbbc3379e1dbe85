/* LSN text: common/lsn.h. */
#include "lsn.h"

#include <stdio.h>

int a2__lsn_parse(const char *s, uint64_t *lsn)
{
    unsigned int hi, lo;
    int n = 0;
    if (!s || sscanf(s, "%X/%X%n", &hi, &lo, &n) != 2 || s[n] != '\0')
        return -1;
    *lsn = ((uint64_t)hi << 32) | lo;
    return 0;
}
