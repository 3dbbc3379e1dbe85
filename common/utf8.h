/*
 * UTF-8 well-formedness (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF), for the protocol's strings, the store's arguments and the
 * CLI's escaping. Internal (liba2common, not installed); liba2wire offers
 * the same as a2_wire_utf8_seq and a2_wire_utf8_valid.
 */
#ifndef A2_COMMON_UTF8_H
#define A2_COMMON_UTF8_H

#include <stddef.h>

/* Bytes of the well-formed UTF-8 sequence at s (1 to 4, within n), or 0
 * when s does not start one (overlong, surrogate, past U+10FFFF, cut). */
size_t a2__utf8_seq(const unsigned char *s, size_t n);

/* 1 when s[0..n) is well-formed UTF-8, else 0. */
int a2__utf8_valid(const char *s, size_t n);

#endif
