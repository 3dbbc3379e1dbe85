/*
 * The clocks of every a2 part, and sleeping on them.
 */
#include "clock.h"

#include <errno.h>

static int64_t ms_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t us_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t ns_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t a2__mono_ms(void)
{
    return ms_of(CLOCK_MONOTONIC);
}

int64_t a2__mono_us(void)
{
    return us_of(CLOCK_MONOTONIC);
}

int64_t a2__mono_ns(void)
{
    return ns_of(CLOCK_MONOTONIC);
}

int64_t a2__real_ms(void)
{
    return ms_of(CLOCK_REALTIME);
}

int64_t a2__real_us(void)
{
    return us_of(CLOCK_REALTIME);
}

void a2__sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void a2__sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int64_t a2__real_ns(void)
{
    return ns_of(CLOCK_REALTIME);
}

struct timespec a2__mono_timespec(int64_t mono_ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(mono_ms / 1000);
    ts.tv_nsec = (long)(mono_ms % 1000) * 1000000L;
    return ts;
}

void a2__mono_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}
