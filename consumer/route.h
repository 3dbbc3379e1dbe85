/*
 * Worker server internals: hashing and rendezvous (highest random weight)
 * routing of sessions to workers, and a small string-keyed hash map.
 */
#ifndef A2_CONSUMER_ROUTE_H
#define A2_CONSUMER_ROUTE_H

#include <stddef.h>
#include <stdint.h>

/* A worker's routing identity: the hash of its hello name. Workers with the
 * same name share an identity; the router breaks their ties by serial. */
uint64_t a2__route_worker_id(const char *name);

/* The rendezvous weight of (worker, session). */
uint64_t a2__route_score(uint64_t worker_id, uint64_t session_hash);

/* A candidate for a2__route_pick. */
typedef struct {
    uint64_t id;     /* a2__route_worker_id */
    uint64_t serial; /* connection serial: lower wins a tie */
} a2__route_cand;

/*
 * The index of the candidate session goes to: the highest score, ties to the
 * lowest serial. Returns n when n == 0. Removing one candidate only moves the
 * sessions it had; adding one only takes sessions to it.
 */
size_t a2__route_pick(const a2__route_cand *c, size_t n, const char *session);

/* String-keyed (binary-safe) map of non-NULL void pointers. */
typedef struct a2__map a2__map;

a2__map *a2__map_new(void);
/* Frees the map; calls free_val on each value when not NULL. NULL-safe. */
void a2__map_free(a2__map *m, void (*free_val)(void *));
void *a2__map_get(const a2__map *m, const void *key, size_t klen);
/* Sets key (copied) to val, returning the previous value through *old (NULL
 * when new). Returns 0, or -1 when out of memory. */
int a2__map_put(a2__map *m, const void *key, size_t klen, void *val,
                void **old);
/* The value under key, or a new zeroed one of size bytes (calloc) put
 * there (the caller frees it with the map's values); NULL when out of
 * memory. */
void *a2__map_get_new(a2__map *m, const void *key, size_t klen, size_t size);
/* Removes key; returns its value or NULL. */
void *a2__map_del(a2__map *m, const void *key, size_t klen);
size_t a2__map_count(const a2__map *m);

/* Iteration; the map must not change meanwhile. Start with *it = 0; returns
 * 1 with key/val set, 0 at the end. The key is borrowed from the map. */
int a2__map_next(const a2__map *m, size_t *it, void **entry, const char **key,
                 size_t *klen, void **val);

#endif
