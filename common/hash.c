/*
 * String hashing (hash.h).
 */
#include "hash.h"

#include <pthread.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

uint64_t a2__mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t a2__hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL ^ a2__mix64(seed);
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return a2__mix64(h ^ len);
}

static uint64_t seed;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        /* no entropy yet (early boot): the clock and the pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = a2__mix64((uint64_t)ts.tv_sec * 1000000000ULL +
                      (uint64_t)ts.tv_nsec) ^
            (uint64_t)getpid();
    }
    seed = s;
}

uint64_t a2__hash_seed(void)
{
    pthread_once(&seed_once, seed_init);
    return seed;
}

uint64_t a2__table_hash(const void *data, size_t len)
{
    return a2__hash(data, len, a2__hash_seed());
}
