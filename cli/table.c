/* Aligned text tables for the a2 command line. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct a2__table {
    size_t ncols;
    size_t nrows;
    size_t cap;
    char **cells; /* (nrows + 1) * ncols; row 0 holds the titles */
    size_t *width;
    char *align;
};

size_t a2__utf8_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

a2__table *a2__table_new(size_t ncols, const char *const *titles,
                         const char *align)
{
    a2__table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ncols = ncols;
    t->width = calloc(ncols, sizeof *t->width);
    t->align = calloc(ncols + 1, 1);
    if (!t->width || !t->align)
        goto error;
    for (size_t i = 0; i < ncols; i++)
        t->align[i] = align && align[i] == 'r' ? 'r' : 'l';
    t->nrows = (size_t)-1; /* the title row becomes row 0 */
    if (a2__table_add(t, titles) != 0)
        goto error;
    return t;
error:
    a2__table_free(t);
    return NULL;
}

int a2__table_add(a2__table *t, const char *const *cells)
{
    size_t row = t->nrows + 1;
    if ((row + 1) * t->ncols > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : t->ncols * 16;
        while (cap < (row + 1) * t->ncols)
            cap *= 2;
        char **c = realloc(t->cells, cap * sizeof *c);
        if (!c)
            return -1;
        t->cells = c;
        t->cap = cap;
    }
    for (size_t i = 0; i < t->ncols; i++) {
        const char *v = cells[i] ? cells[i] : "-";
        char *copy = strdup(v);
        if (!copy) {
            for (size_t j = 0; j < i; j++)
                free(t->cells[row * t->ncols + j]);
            return -1;
        }
        t->cells[row * t->ncols + i] = copy;
        size_t w = a2__utf8_width(copy);
        if (w > t->width[i])
            t->width[i] = w;
    }
    t->nrows = row;
    return 0;
}

size_t a2__table_rows(const a2__table *t)
{
    return t->nrows;
}

void a2__table_print(const a2__table *t, FILE *out)
{
    for (size_t r = 0; r <= t->nrows; r++) {
        for (size_t i = 0; i < t->ncols; i++) {
            const char *v = t->cells[r * t->ncols + i];
            size_t pad = t->width[i] - a2__utf8_width(v);
            int last = i + 1 == t->ncols;
            if (t->align[i] == 'r')
                fprintf(out, "%*s%s", (int)pad, "", v);
            else if (last)
                fputs(v, out);
            else
                fprintf(out, "%s%*s", v, (int)pad, "");
            if (!last)
                fputs("  ", out);
        }
        fputc('\n', out);
    }
}

void a2__table_free(a2__table *t)
{
    if (!t)
        return;
    if (t->cells)
        for (size_t i = 0; i < (t->nrows + 1) * t->ncols; i++)
            free(t->cells[i]);
    free(t->cells);
    free(t->width);
    free(t->align);
    free(t);
}

void a2__cli_fmt_ms(int64_t ms, char *buf, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    int frac = (int)(ms % 1000);
    if (frac < 0) {
        frac += 1000;
        secs -= 1;
    }
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        snprintf(buf, len, "%lld", (long long)ms);
        return;
    }
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", base, frac);
}
