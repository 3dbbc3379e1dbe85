/* Internals shared by liba2worker's files. */
#ifndef A2_WORKER_INT_H
#define A2_WORKER_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* vsnprintf into buf and, when log is set, hands the line to it. */
void a2__worker_logf(void (*log)(void *, const char *), void *ctx,
                     const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* "<hostname>:<pid>" into buf. */
void a2__worker_default_name(char *buf, size_t len);

#endif
