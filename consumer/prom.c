/*
 * The Prometheus text format's pieces (metrics.h): growing strings, label
 * escaping, latency histograms. Pure: the worker server counts into a
 * histogram without the HTTP endpoint.
 */
#include "metrics.h"

#include "../common/buf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the Prometheus text ---- */

/* Grows *buf to hold need bytes: *cap (4096 at first) doubled until it
 * does; -1, *buf as it was, when memory ran out. */
static int reserve(char **buf, size_t *cap, size_t need)
{
    char *nb = a2__buf_grow(*buf, cap, 4096, need);
    if (!nb)
        return -1;
    *buf = nb;
    return 0;
}

void a2__metrics_appendf(char **buf, size_t *len, size_t *cap, const char *fmt,
                         ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? *cap - *len : 0,
                          fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (*buf && *len + (size_t)n < *cap) {
            *len += (size_t)n;
            return;
        }
        if (reserve(buf, cap, *len + (size_t)n + 1) != 0)
            return;
    }
}

void a2__metrics_append_label(char **buf, size_t *len, size_t *cap,
                              const char *v)
{
    size_t n = strlen(v), extra = 0;
    for (size_t i = 0; i < n; i++)
        extra += v[i] == '\\' || v[i] == '"' || v[i] == '\n';
    if ((!*buf || *len + n + extra + 1 > *cap) &&
        reserve(buf, cap, *len + n + extra + 1) != 0)
        return;
    char *o = *buf + *len;
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (ch == '\\' || ch == '"') {
            *o++ = '\\';
            *o++ = ch;
        } else if (ch == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else {
            *o++ = ch;
        }
    }
    *o = '\0';
    *len = (size_t)(o - *buf);
}

static const int64_t hist_bounds_us[A2C_HIST_NBOUNDS] = A2C_HIST_BOUNDS_US;

void a2__hist_observe(a2__hist *h, int64_t us)
{
    if (us < 0)
        us = 0;
    size_t i = 0;
    while (i < A2C_HIST_NBOUNDS && us > hist_bounds_us[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum_us += (uint64_t)us;
}

void a2__hist_render(const a2__hist *h, const char *name, const char *help,
                     char **buf, size_t *len, size_t *cap)
{
    a2__metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s histogram\n",
                        name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < A2C_HIST_NBOUNDS; i++) {
        cum += h->bucket[i];
        a2__metrics_appendf(buf, len, cap, "%s_bucket{le=\"%g\"} %" PRIu64 "\n",
                            name, (double)hist_bounds_us[i] / 1e6, cum);
    }
    cum += h->bucket[A2C_HIST_NBOUNDS];
    a2__metrics_appendf(buf, len, cap,
                        "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n"
                        "%s_sum %.6f\n%s_count %" PRIu64 "\n",
                        name, cum, name, (double)h->sum_us / 1e6, name,
                        h->count);
}
