/* Text output of the a2 command line: escaping, aligned tables, times. */
#include "cli.h"

#include "a2/wire.h"

#include <stdarg.h>
#include <stdbool.h>
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
    bool failed; /* a row could not be added (out of memory) */
};

size_t a2__utf8_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

/* Writes s escaped into out (when out is not NULL); returns the length. */
static size_t escape_into(char *out, const unsigned char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k = a2_wire_utf8_seq(s + i, len - i);
        char esc[8];
        const char *put = NULL;
        size_t plen = 0;
        if (k == 1 && s[i] >= 0x20 && s[i] != 0x7F) {
            put = (const char *)s + i, plen = 1;
        } else if (k == 1) {
            if (s[i] == '\n')
                put = "\\n", plen = 2;
            else if (s[i] == '\t')
                put = "\\t", plen = 2;
            else if (s[i] == '\r')
                put = "\\r", plen = 2;
            else
                plen = (size_t)snprintf(esc, sizeof esc, "\\x%02x", s[i]),
                put = esc;
        } else if (k == 2 && s[i] == 0xC2 && s[i + 1] < 0xA0) {
            /* C1 controls, U+0080..U+009F (CSI among them) */
            plen = (size_t)snprintf(esc, sizeof esc, "\\u%04x", s[i + 1]);
            put = esc;
        } else if (k > 1) {
            put = (const char *)s + i, plen = k;
        } else {
            plen = (size_t)snprintf(esc, sizeof esc, "\\x%02x", s[i]);
            put = esc;
            k = 1;
        }
        if (out)
            memcpy(out + n, put, plen);
        n += plen;
        i += k;
    }
    return n;
}

char *a2__cli_escape(const char *s)
{
    size_t len = strlen(s);
    size_t n = escape_into(NULL, (const unsigned char *)s, len);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    escape_into(out, (const unsigned char *)s, len);
    out[n] = '\0';
    return out;
}

void a2__cli_put(FILE *out, const char *s)
{
    char *e = a2__cli_escape(s);
    fputs(e ? e : "(out of memory)", out);
    free(e);
}

void a2__cli_vline(FILE *out, const char *fmt, va_list ap)
{
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0) {
        fputs("(out of memory)\n", out);
        return;
    }
    size_t n = strlen(text);
    int nl = n > 0 && text[n - 1] == '\n';
    if (nl)
        text[n - 1] = '\0';
    a2__cli_put(out, text);
    if (nl)
        fputc('\n', out);
    free(text);
}

void a2__cli_line(FILE *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    a2__cli_vline(out, fmt, ap);
    va_end(ap);
}

static int add_row(a2__table *t, const char *const *cells)
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
        char *copy = a2__cli_escape(v);
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
    if (add_row(t, titles) != 0)
        goto error;
    return t;
error:
    a2__table_free(t);
    return NULL;
}

int a2__table_add(a2__table *t, const char *const *cells)
{
    if (!t)
        return -1;
    if (add_row(t, cells) == 0)
        return 0;
    t->failed = true;
    return -1;
}

int a2__cli_print_table(a2__cli *cli, a2__table *t)
{
    int rc = A2__CLI_OK;
    if (!t || t->failed)
        rc = a2__cli_fail(cli, "out of memory");
    else
        a2__table_print(t, cli->out);
    a2__table_free(t);
    return rc;
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
