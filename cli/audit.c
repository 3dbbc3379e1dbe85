/*
 * `a2 audit FILE`: a2-consumer's audit trail (one JSON object per line),
 * filtered by session, consumer and transition; --follow keeps reading as
 * the file grows and reopens it when it is rotated or truncated.
 */
#include "cli.h"

#include "../common/clock.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Lines longer than this are reported and skipped. */
#define AUDIT_MAX_LINE (1024 * 1024)
#define FOLLOW_POLL_MS 200

static volatile sig_atomic_t stop_follow;

static void on_stop(int sig)
{
    (void)sig;
    stop_follow = 1;
}

const char *a2__cli_audit_str(const json_t *line, const char *key)
{
    const json_t *v = json_object_get(line, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A scalar field of obj as text into buf ("" when absent or null). */
static const char *scalar(const json_t *obj, const char *key, char *buf,
                          size_t len)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    buf[0] = '\0';
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, len, "%s", json_is_true(v) ? "true" : "false");
    return buf;
}

/* Whether the field key of line is want (NULL: anything). */
static bool field_is(const json_t *line, const char *key, const char *want)
{
    const char *s;
    return !want ||
           ((s = a2__cli_audit_str(line, key)) && strcmp(s, want) == 0);
}

bool a2__cli_audit_matches(const json_t *line, const a2__cli_audit_filter *f)
{
    return field_is(line, "session", f->session) &&
           field_is(line, "consumer", f->consumer) &&
           field_is(line, "transition", f->transition);
}

/* "before→after" of a field, or the one value when unchanged. */
static void change(const json_t *before, const json_t *after, const char *key,
                   char *buf, size_t len)
{
    char b[64], a[64];
    scalar(before, key, b, sizeof b);
    scalar(after, key, a, sizeof a);
    if (!before || !json_is_object(before))
        snprintf(buf, len, "%s", a[0] ? a : "-");
    else if (!after || !json_is_object(after))
        snprintf(buf, len, "%s→", b[0] ? b : "-");
    else if (strcmp(a, b) == 0)
        snprintf(buf, len, "%s", a[0] ? a : "-");
    else
        snprintf(buf, len, "%s→%s", b[0] ? b : "-", a[0] ? a : "-");
}

#define NCOLS 9
static const char *const titles[NCOLS] = {
        "AT",     "LSN",  "TRANSITION", "SESSION",       "CONSUMER",
        "CURSOR", "HEAD", "ATTEMPT",    "HOLDER / ERROR"};

/* Fills the cells of one line (buffers are the caller's). */
static void cells_of(const json_t *line, char bufs[NCOLS][256],
                     const char *cells[NCOLS])
{
    const json_t *before = json_object_get(line, "before");
    const json_t *after = json_object_get(line, "after");
    const json_t *now = json_is_object(after) ? after : before;
    scalar(line, "at", bufs[0], sizeof bufs[0]);
    scalar(line, "lsn", bufs[1], sizeof bufs[1]);
    scalar(line, "transition", bufs[2], sizeof bufs[2]);
    scalar(line, "session", bufs[3], sizeof bufs[3]);
    scalar(line, "consumer", bufs[4], sizeof bufs[4]);
    scalar(line, "cursor", bufs[5], sizeof bufs[5]);
    change(before, after, "head", bufs[6], sizeof bufs[6]);
    scalar(now, "attempt", bufs[7], sizeof bufs[7]);
    char err[200];
    scalar(now, "error", err, sizeof err);
    if (err[0])
        snprintf(bufs[8], sizeof bufs[8], "error: %s", err);
    else
        scalar(now, "holder", bufs[8], sizeof bufs[8]);
    for (int i = 0; i < NCOLS; i++)
        cells[i] = bufs[i][0] ? bufs[i] : NULL;
}

/* Follow mode cannot size columns in advance: fixed minimum widths, in
 * columns on the terminal (HEAD's arrow is one column, three bytes). */
static void print_streamed(FILE *out, const char *cells[NCOLS])
{
    static const int width[NCOLS] = {24, 11, 13, 12, 12, 10, 9, 7, 0};
    for (int i = 0; i < NCOLS; i++) {
        char *v = a2__cli_escape(cells[i] ? cells[i] : "-");
        if (!v)
            v = strdup("?");
        if (!v)
            continue;
        if (i + 1 == NCOLS)
            fprintf(out, "%s\n", v);
        else {
            size_t w = a2__utf8_width(v);
            int pad = w < (size_t)width[i] ? width[i] - (int)w : 0;
            fprintf(out, "%s%*s  ", v, pad, "");
        }
        free(v);
    }
}

typedef struct {
    a2__cli *cli;
    const char *path;
    a2__cli_audit_filter filter;
    int follow;
    a2__table *table; /* NULL in JSON or follow mode */
    long lineno;
    long bad;
    long shown;
} audit_run;

/* Handles one complete line (without its newline). 0, or -1 on ENOMEM. */
static int handle_line(audit_run *r, const char *text, size_t len)
{
    r->lineno++;
    if (len == 0)
        return 0;
    json_error_t jerr;
    json_t *line = json_loadb(text, len, 0, &jerr);
    if (!line || !json_is_object(line)) {
        a2__cli_line(r->cli->err,
                     "a2: %s:%ld: not a JSON object (%s), skipped\n", r->path,
                     r->lineno, line ? "another JSON value" : jerr.text);
        json_decref(line);
        r->bad++;
        return 0;
    }
    int rc = 0;
    if (a2__cli_audit_matches(line, &r->filter)) {
        r->shown++;
        if (r->cli->json) {
            fwrite(text, 1, len, r->cli->out);
            fputc('\n', r->cli->out);
        } else {
            char bufs[NCOLS][256];
            const char *cells[NCOLS];
            cells_of(line, bufs, cells);
            if (r->table)
                rc = a2__table_add(r->table, cells);
            else
                print_streamed(r->cli->out, cells);
        }
        if (r->follow)
            fflush(r->cli->out);
    }
    json_decref(line);
    return rc;
}

int a2__cli_cmd_audit(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("session", 's'),
            A2__CLI_ARG("consumer", 'c'),
            A2__CLI_ARG("transition", 't'),
            A2__CLI_FLAG("follow", 'f'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 [--json] audit FILE [--session S] [--consumer C] "
            "[--transition T] [--follow]\n"
            "  shows a2-consumer's audit trail (JSON lines); --json prints "
            "the matching lines as they are\n"
            "  --follow  keep reading as the file grows (Ctrl-C stops)\n";
    audit_run r = {.cli = cli};
    int c, rc = A2__CLI_OK;
    optind = 0;
    while ((c = a2__cli_getopt(cli, argc, argv, ":hf", opts, help, &rc)) !=
           -1) {
        if (c == -2)
            return rc;
        if (c == 's')
            r.filter.session = optarg;
        else if (c == 'c')
            r.filter.consumer = optarg;
        else if (c == 't')
            r.filter.transition = optarg;
        else if (c == 'f')
            r.follow = 1;
    }
    if (optind >= argc)
        return a2__cli_usage(cli, "audit needs a FILE");
    if (argc - optind > 1)
        return a2__cli_usage(cli, "audit takes one FILE (got '%s' too)",
                             argv[optind + 1]);
    r.path = argv[optind];

    char *buf = NULL;
    size_t cap = 0, used = 0;
    FILE *f = fopen(r.path, "r");
    if (!f)
        return a2__cli_fail(cli, "could not open %s: %s", r.path,
                            strerror(errno));
    if (!cli->json && !r.follow) {
        r.table = a2__table_new(NCOLS, titles, "lllllllrl");
        if (!r.table) {
            rc = a2__cli_fail(cli, "out of memory");
            goto done;
        }
    }
    if (r.follow && !cli->json) {
        const char *cells[NCOLS];
        for (int i = 0; i < NCOLS; i++)
            cells[i] = titles[i];
        print_streamed(cli->out, cells);
        fflush(cli->out);
    }
    if (r.follow) {
        struct sigaction sa = {0};
        sa.sa_handler = on_stop;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        signal(SIGPIPE, SIG_DFL);
    }
    struct stat st;
    ino_t ino = fstat(fileno(f), &st) == 0 ? st.st_ino : 0;
    off_t offset = 0;
    cap = 65536;
    buf = malloc(cap);
    if (!buf) {
        rc = a2__cli_fail(cli, "out of memory");
        goto done;
    }
    for (;;) {
        if (used == cap) {
            if (cap >= AUDIT_MAX_LINE) {
                r.lineno++;
                fprintf(cli->err,
                        "a2: %s:%ld: line longer than %d bytes, skipped\n",
                        r.path, r.lineno, AUDIT_MAX_LINE);
                r.bad++;
                /* Skip to the end of that line. */
                int ch;
                while ((ch = fgetc(f)) != EOF && ch != '\n')
                    offset++;
                if (ch == '\n')
                    offset++;
                used = 0;
                continue;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                rc = a2__cli_fail(cli, "out of memory");
                goto done;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + used, 1, cap - used, f);
        if (n > 0) {
            used += n;
            offset += (off_t)n;
            size_t start = 0;
            for (size_t i = 0; i < used; i++) {
                if (buf[i] != '\n')
                    continue;
                if (handle_line(&r, buf + start, i - start) != 0) {
                    rc = a2__cli_fail(cli, "out of memory");
                    goto done;
                }
                start = i + 1;
            }
            memmove(buf, buf + start, used - start);
            used -= start;
            continue;
        }
        if (ferror(f)) {
            rc = a2__cli_fail(cli, "could not read %s: %s", r.path,
                              strerror(errno));
            goto done;
        }
        if (!r.follow) {
            /* A last line without its newline is still a line. */
            if (used > 0 && handle_line(&r, buf, used) != 0) {
                rc = a2__cli_fail(cli, "out of memory");
                goto done;
            }
            break;
        }
        /* --follow: a partial last line waits for the rest. */
        clearerr(f);
        if (stop_follow)
            break;
        a2__sleep_ms(FOLLOW_POLL_MS);
        if (stop_follow)
            break;
        struct stat now;
        if (stat(r.path, &now) == 0 &&
            (now.st_ino != ino || now.st_size < offset)) {
            /* Rotated (new file) or truncated: start over from its top. */
            FILE *nf = fopen(r.path, "r");
            if (nf) {
                fclose(f);
                f = nf;
                ino = now.st_ino;
                offset = 0;
                used = 0;
            }
        }
    }
    if (r.table) {
        if (a2__table_rows(r.table) > 0)
            a2__table_print(r.table, cli->out);
        else
            a2__cli_line(cli->out, "no matching audit lines in %s\n", r.path);
    }
    if (r.bad > 0)
        rc = a2__cli_fail(cli, "%s: %ld line%s could not be read", r.path,
                          r.bad, r.bad == 1 ? "" : "s");
done:
    free(buf);
    a2__table_free(r.table);
    if (f)
        fclose(f);
    return rc;
}
