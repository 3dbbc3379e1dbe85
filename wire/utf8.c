/* The protocol's UTF-8 check (a2/wire.h), liba2common's rule. */
#include "a2/wire.h"

#include "../common/utf8.h"

size_t a2_wire_utf8_seq(const unsigned char *s, size_t n)
{
    return a2__utf8_seq(s, n);
}

int a2_wire_utf8_valid(const char *s, size_t n)
{
    return a2__utf8_valid(s, n);
}
