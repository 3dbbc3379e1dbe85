/*
 * Random hex text from getrandom.
 */
#include "random.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/types.h>

int a2__random_hex(char *out, size_t bytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    size_t done = 0;
    while (done < bytes) {
        size_t want = bytes - done < sizeof raw ? bytes - done : sizeof raw;
        ssize_t n = getrandom(raw, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        for (size_t i = 0; i < (size_t)n; i++) {
            out[2 * (done + i)] = hex[raw[i] >> 4];
            out[2 * (done + i) + 1] = hex[raw[i] & 15];
        }
        done += (size_t)n;
    }
    out[2 * bytes] = '\0';
    return 0;
}
