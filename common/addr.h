/*
 * The addresses of a2-consumer's worker server, as every part writes them:
 * "unix:PATH" or "tcp:HOST:PORT" (an IPv6 HOST in brackets, tcp:[::1]:PORT).
 * Parsing and connecting; the callers word their own errors of syntax.
 * Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_ADDR_H
#define A2_COMMON_ADDR_H

#include <stddef.h>

/* The kinds of address. */
#define A2__ADDR_UNIX 1
#define A2__ADDR_TCP  2

/* The returns of a2__addr_parse and a2__addr_split. */
#define A2__ADDR_OK        0
#define A2__ADDR_ESCHEME   (-1) /* neither "unix:" nor "tcp:" */
#define A2__ADDR_EPATH     (-2) /* "unix:" with an empty path */
#define A2__ADDR_EHOSTPORT (-3) /* not HOST:PORT with both parts non-empty */
#define A2__ADDR_EPORT     (-4) /* a PORT that is not decimal digits */
#define A2__ADDR_ENOMEM    (-5)

/* a2__addr_dial flag: a non-blocking socket, for which a connect still in
 * progress is a success. */
#define A2__ADDR_NONBLOCK 1

typedef struct a2__addr {
    int kind;   /* A2__ADDR_UNIX or A2__ADDR_TCP; 0 when parsing failed */
    char *path; /* unix: the socket path (its length is not checked) */
    char *host; /* tcp: without the brackets */
    char *port; /* tcp: decimal digits from a2__addr_parse; as written from
                   a2__addr_split */
} a2__addr;

/* A2__ADDR_UNIX or A2__ADDR_TCP by spec's prefix alone; 0 for anything
 * else (NULL too). */
int a2__addr_kind(const char *spec);

/*
 * Parses spec into *out (always initialised: clear it with a2__addr_clear
 * whatever the return). For tcp: HOST is what precedes the last ':' and
 * PORT what follows it. A2__ADDR_OK or a negative A2__ADDR_E* code.
 */
int a2__addr_parse(const char *spec, a2__addr *out);

/*
 * Splits "HOST:PORT" (no prefix) into out->host and out->port by the rule of
 * a2__addr_parse, without checking PORT; out->kind is A2__ADDR_TCP on
 * success. *out is always initialised. A2__ADDR_OK, A2__ADDR_EHOSTPORT or
 * A2__ADDR_ENOMEM.
 */
int a2__addr_split(const char *hostport, a2__addr *out);

/* Frees what *a holds and zeroes it. NULL-safe. */
void a2__addr_clear(a2__addr *a);

/*
 * Connects a stream socket (close-on-exec) to a. name is how the peer is
 * named in err ("could not connect to NAME: reason"). TCP tries every
 * address the host resolves to, in order. Returns the descriptor, or -1
 * with err set.
 */
int a2__addr_dial(const a2__addr *a, const char *name, int flags, char *err,
                  size_t errlen);

/* The TCP port a bound socket listens on (IPv4 or IPv6), 0 when it has
 * none (not bound, not TCP). */
int a2__addr_bound_port(int fd);

#endif
