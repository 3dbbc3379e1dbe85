/* The log line: common/log.h. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void a2__log_v(const char *program, const char *fmt, va_list ap)
{
    char line[A2__LOG_MAX];
    size_t n = 0;
    if (program) {
        int k = snprintf(line, sizeof line - 1, "%s: ", program);
        if (k > 0)
            n = (size_t)k < sizeof line - 2 ? (size_t)k : sizeof line - 2;
    }
    int k = vsnprintf(line + n, sizeof line - 1 - n, fmt, ap);
    if (k < 0)
        return;
    n += (size_t)k;
    if (n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(2, line, n);
    (void)w;
}

void a2__log(const char *program, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    a2__log_v(program, fmt, ap);
    va_end(ap);
}
