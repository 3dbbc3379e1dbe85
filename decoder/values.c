/*
 * The decoder's scalar values: the texts of wal2json's integers, LSNs and
 * commit timestamps turned into numbers, exactly and without locale or libc
 * time functions.
 */
#include "decoder_int.h"

/* Parses an integer slice (a JSON integer: -?digits) exactly; 0, or
 * A2_EDEC_RANGE when it does not fit an int64. */
int a2__decoder_parse_i64(const char *p, size_t n, int64_t *out)
{
    bool neg = n > 0 && p[0] == '-';
    size_t i = neg ? 1 : 0;
    uint64_t v = 0;
    /* Up to 19 digits fit in a uint64 without overflow (10^19 < 2^64). */
    if (n - i > 19)
        return A2_EDEC_RANGE;
    for (; i < n; i++)
        v = v * 10 + (uint64_t)(p[i] - '0');
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0))
        return A2_EDEC_RANGE;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

int a2__decoder_parse_lsn(const char *p, size_t n, uint64_t *out)
{
    uint64_t hi = 0, lo = 0;
    size_t i = 0, digits = 0;
    for (; i < n && p[i] != '/'; i++) {
        int h = a2__decoder_hexval((unsigned char)p[i]);
        if (h < 0 || ++digits > 8)
            return -1;
        hi = hi << 4 | (uint64_t)h;
    }
    if (digits == 0 || i >= n)
        return -1;
    digits = 0;
    for (i++; i < n; i++) {
        int h = a2__decoder_hexval((unsigned char)p[i]);
        if (h < 0 || ++digits > 8)
            return -1;
        lo = lo << 4 | (uint64_t)h;
    }
    if (digits == 0)
        return -1;
    *out = hi << 32 | lo;
    return 0;
}

static int digits_at(const char *p, size_t n, size_t *i, size_t count, int *out)
{
    int v = 0;
    if (*i + count > n)
        return -1;
    for (size_t k = 0; k < count; k++) {
        char c = p[*i + k];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *i += count;
    *out = v;
    return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, int m, int dd)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/*
 * PostgreSQL's timestamptz text in ISO DateStyle:
 * "YYYY-MM-DD HH:MM:SS[.ffffff]{+|-}HH[:MM[:SS]]" -> Unix microseconds.
 */
int a2__decoder_parse_timestamp(const char *p, size_t n, int64_t *out)
{
    size_t i = 0;
    int y, mo, dd, h, mi, sec, oh = 0, om = 0, os = 0;
    int64_t frac = 0;
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (digits_at(p, n, &i, 4, &y) < 0 || i >= n || p[i++] != '-' ||
        digits_at(p, n, &i, 2, &mo) < 0 || i >= n || p[i++] != '-' ||
        digits_at(p, n, &i, 2, &dd) < 0 || i >= n || p[i++] != ' ' ||
        digits_at(p, n, &i, 2, &h) < 0 || i >= n || p[i++] != ':' ||
        digits_at(p, n, &i, 2, &mi) < 0 || i >= n || p[i++] != ':' ||
        digits_at(p, n, &i, 2, &sec) < 0)
        return -1;
    if (i < n && p[i] == '.') {
        int scale = 0;
        i++;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            if (++scale > 6)
                return -1;
            frac = frac * 10 + (p[i] - '0');
            i++;
        }
        if (scale == 0)
            return -1;
        for (; scale < 6; scale++)
            frac *= 10;
    }
    if (i >= n || (p[i] != '+' && p[i] != '-'))
        return -1;
    int sign = p[i++] == '-' ? -1 : 1;
    if (digits_at(p, n, &i, 2, &oh) < 0)
        return -1;
    if (i < n && p[i] == ':') {
        i++;
        if (digits_at(p, n, &i, 2, &om) < 0)
            return -1;
        if (i < n && p[i] == ':') {
            i++;
            if (digits_at(p, n, &i, 2, &os) < 0)
                return -1;
        }
    }
    if (i != n || mo < 1 || mo > 12 || dd < 1 || dd > mdays[mo - 1] || h > 23 ||
        mi > 59 || sec > 60 || oh > 15 || om > 59 || os > 59)
        return -1;
    if (mo == 2 && dd == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return -1;
    int64_t secs =
            days_from_civil(y, mo, dd) * 86400 + h * 3600 + mi * 60 + sec;
    secs -= sign * (oh * 3600 + om * 60 + os);
    *out = secs * 1000000 + frac;
    return 0;
}
