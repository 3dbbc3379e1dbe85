/* UTF-8 well-formedness: common/utf8.h. */
#include "utf8.h"

size_t a2__utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x3Fu >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int a2__utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    while (n > 0) {
        size_t k = a2__utf8_seq(p, n);
        if (k == 0)
            return 0;
        p += k;
        n -= k;
    }
    return 1;
}
