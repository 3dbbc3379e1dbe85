/*
 * The arguments of `a2`'s commands: options (getopt_long with --help and
 * the usage errors), the count of positionals, numbers, times and
 * durations.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int a2__cli_getopt(a2__cli *cli, int argc, char **argv, const char *shortopts,
                   const struct option *longopts, const char *help_text,
                   int *rc)
{
    int c = getopt_long(argc, argv, shortopts, longopts, NULL);
    switch (c) {
    case 'h':
        fputs(help_text, cli->out);
        *rc = A2__CLI_OK;
        return -2;
    case ':':
        *rc = a2__cli_usage(cli, "option %s needs a value", argv[optind - 1]);
        return -2;
    case '?':
        *rc = a2__cli_usage(cli, "unknown option %s for %s", argv[optind - 1],
                            argv[0]);
        return -2;
    default:
        return c;
    }
}

int a2__cli_next_opt(a2__cli *cli, int argc, char **argv,
                     const struct option *longopts, const char *help_text,
                     int *rc)
{
    return a2__cli_getopt(cli, argc, argv, ":h", longopts, help_text, rc);
}

int a2__cli_positionals(a2__cli *cli, int argc, char **argv, int min, int max,
                        const char *what, int *rc)
{
    int n = argc - optind;
    if (n < min) {
        *rc = a2__cli_usage(cli, "%s needs %s", argv[0], what);
        return -1;
    }
    if (n > max) {
        *rc = a2__cli_usage(cli, "%s: unexpected argument '%s'", argv[0],
                            argv[optind + max]);
        return -1;
    }
    return 0;
}

const struct option a2__cli_help_only[] = {A2__CLI_OPTS_END};

int a2__cli_no_options(a2__cli *cli, int argc, char **argv,
                       const char *help_text, int min, int max,
                       const char *what, int *rc)
{
    int c;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, a2__cli_help_only, help_text,
                                 rc)) != -1)
        if (c == -2)
            return -1;
    return a2__cli_positionals(cli, argc, argv, min, max, what, rc);
}

int a2__cli_parse_at(const char *s, int64_t *ms)
{
    char *end;
    if (*s >= '0' && *s <= '9' && strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || v > 253402300799999LL)
            return -1;
        *ms = v;
        return 0;
    }
    struct tm tm = {0};
    const char *p = strptime(s, "%Y-%m-%dT%H:%M", &tm);
    if (!p)
        return -1;
    int64_t frac = 0;
    if (*p == ':') {
        if (p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9')
            return -1;
        tm.tm_sec = (p[1] - '0') * 10 + (p[2] - '0');
        if (tm.tm_sec > 60)
            return -1;
        p += 3;
        if (*p == '.') {
            int digits = 0;
            for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                if (digits < 3)
                    frac = frac * 10 + (*p - '0');
            if (digits == 0)
                return -1;
            for (; digits < 3; digits++)
                frac *= 10;
        }
    }
    int64_t offset = 0;
    if (*p == 'Z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':' &&
               strspn(p + 1, "0123456789") == 2 &&
               strspn(p + 4, "0123456789") == 2) {
        int h = (p[1] - '0') * 10 + (p[2] - '0');
        int m = (p[4] - '0') * 10 + (p[5] - '0');
        if (h > 23 || m > 59)
            return -1;
        offset = (*p == '+' ? 1 : -1) * (h * 3600 + m * 60);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || t - offset < 0 || t - offset > 253402300799LL)
        return -1;
    *ms = ((int64_t)t - offset) * 1000 + frac;
    return 0;
}

int a2__cli_parse_in(const char *s, int64_t *ms)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno)
        return -1;
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1},
                 {"s", 1000},
                 {"m", 60000},
                 {"h", 3600000},
                 {"d", 86400000}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            if (v > 100LL * 365 * 86400000 / units[i].ms)
                return -1; /* more than a century */
            *ms = v * units[i].ms;
            return 0;
        }
    return -1;
}
