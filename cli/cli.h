/*
 * Internals of `a2`, the operator's command line (cli/main.c is the
 * program). Every command function returns the process exit status:
 * 0 success, 1 runtime error, 2 usage error, and prints at most one error
 * line to stderr naming the cause.
 */
#ifndef A2_CLI_H
#define A2_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define A2__CLI_OK      0
#define A2__CLI_RUNTIME 1
#define A2__CLI_USAGE   2

typedef struct {
    const char *db; /* libpq conninfo ("" = PG* variables) */
    int json;       /* --json: machine-readable output */
    FILE *out;
    FILE *err;
} a2__cli;

/* Runs `a2` with argv (argv[0] is the program name). */
int a2__cli_main(int argc, char **argv);

/* Prints "a2: <message>" to cli->err and returns status. */
__attribute__((format(printf, 3, 4))) int
a2__cli_error(const a2__cli *cli, int status, const char *fmt, ...);
/* The same, returning A2__CLI_USAGE, and A2__CLI_RUNTIME. */
#define a2__cli_usage(cli, ...) a2__cli_error((cli), A2__CLI_USAGE, __VA_ARGS__)
#define a2__cli_fail(cli, ...)                                                 \
    a2__cli_error((cli), A2__CLI_RUNTIME, __VA_ARGS__)
/* Prints doc (taking it; NULL: out of memory) as one compact JSON line. */
int a2__cli_print_json(a2__cli *cli, json_t *doc);

/* ── the arguments (cli/args.c) ──────────────────────────────────────── */

struct option;

/* The entries of a command's option table: an option that takes a value,
 * a flag, and the end: --help, then the terminator. */
/* clang-format off */
#define A2__CLI_ARG(name, val)  {name, required_argument, NULL, val}
#define A2__CLI_FLAG(name, val) {name, no_argument, NULL, val}
#define A2__CLI_OPTS_END        A2__CLI_FLAG("help", 'h'), {NULL, 0, NULL, 0}
/* clang-format on */
/* --help alone. */
extern const struct option a2__cli_help_only[];

/* getopt_long (shortopts as getopt_long's, with ":" first and "h") with a
 * command's --help and its usage errors: returns the option, -1 at the
 * end, or -2 when the command ends with *rc (help printed, or the error
 * line of a missing value or an unknown option). */
int a2__cli_getopt(a2__cli *cli, int argc, char **argv, const char *shortopts,
                   const struct option *longopts, const char *help_text,
                   int *rc);
/* a2__cli_getopt with shortopts ":h". */
int a2__cli_next_opt(a2__cli *cli, int argc, char **argv,
                     const struct option *longopts, const char *help_text,
                     int *rc);
/* Checks the positional count; returns 0 or sets the usage error in *rc. */
int a2__cli_positionals(a2__cli *cli, int argc, char **argv, int min, int max,
                        const char *what, int *rc);
/* The arguments of a command that takes no option but --help: its options
 * (from optind 0), then a2__cli_positionals. 0, or -1 with *rc. */
int a2__cli_no_options(a2__cli *cli, int argc, char **argv,
                       const char *help_text, int min, int max,
                       const char *what, int *rc);
/* A time: epoch ms or 2026-12-02T09:00:00Z (seconds, fraction optional; Z
 * or +HH:MM). A duration: a whole number with ms, s, m, h or d. 0 or -1. */
int a2__cli_parse_at(const char *s, int64_t *ms);
int a2__cli_parse_in(const char *s, int64_t *ms);

/* ── the store and its records (cli/store_json.c) ────────────────────── */

typedef struct a2_store a2_store;
struct a2_event;
struct a2_dispatch;

/* Opens the store on cli->db; on failure prints the one error line and
 * returns A2__CLI_RUNTIME (A2__CLI_USAGE for a bad A2_STORE_TIMEOUT_MS). */
int a2__cli_store_open(a2__cli *cli, a2_store **out);
/* Maps a failed store call to its exit status and one error line (a refused
 * argument is a usage error). */
int a2__cli_store_failed(a2__cli *cli, a2_store *store, const char *what);
/* Epoch ms as the commands print times; "-" for A2_STORE_NONE. */
void a2__cli_fmt_time(int64_t ms, char *buf, size_t len);
/* A2_STORE_NONE or NULL as JSON null. */
json_t *a2__cli_json_i64(int64_t v);
json_t *a2__cli_json_str(const char *s);
/* A JSON value from the server's JSON text (NULL: null; a string when it
 * does not parse). */
json_t *a2__cli_json_text(const char *text);
/* An event's cause as a JSON object (null when it has none), its strings
 * made by str. */
json_t *a2__cli_cause_json(const struct a2_event *e,
                           json_t *(*str)(const char *));
/* An event's session, index, type, id and created_at as a JSON object,
 * its strings made by str. */
json_t *a2__cli_event_fields(const struct a2_event *e,
                             json_t *(*str)(const char *));
/* An event, and a dispatch state added to o, as the commands' --json. */
json_t *a2__cli_event_json(const struct a2_event *e);
json_t *a2__cli_dispatch_json(json_t *o, const struct a2_dispatch *d);

/* ── an HTTP answer (cli/http.c) ─────────────────────────────────────── */

/* The HOST:PORT part of spec (HOST:PORT, tcp:HOST:PORT or
 * http://HOST:PORT[/PATH]): where it starts, *len its length, *path the
 * path (NULL when spec has none). */
const char *a2__cli_http_hostport(const char *spec, size_t *len,
                                  const char **path);

/* The returns of a2__cli_http_read. */
#define A2__CLI_HTTP_OK       0
#define A2__CLI_HTTP_ETIMEOUT (-1) /* the deadline passed */
#define A2__CLI_HTTP_ETOOBIG  (-2) /* more than max bytes */
#define A2__CLI_HTTP_ENOMEM   (-3)
#define A2__CLI_HTTP_EREAD    (-4) /* recv failed with *errnum */

/* Reads what fd sends until the peer closes it, until deadline (an
 * a2__mono_ms time) and max bytes at most: *answer is that text (malloc'd),
 * or NULL when nothing came or on an error. */
int a2__cli_http_read(int fd, int64_t deadline, size_t max, char **answer,
                      int *errnum);
/* A copy of the body of an answer (what follows its headers), or NULL with
 * err "out of memory". */
char *a2__cli_http_body(const char *answer, char *err, size_t errlen);

/* ── a2-consumer's audit trail, one JSON object a line (cli/audit.c) ─── */

/* What lines to show: those whose fields are these (NULL: any). */
typedef struct a2__cli_audit_filter {
    const char *session;
    const char *consumer;
    const char *transition;
} a2__cli_audit_filter;

/* The string field key of an audit line (NULL-safe), or NULL. */
const char *a2__cli_audit_str(const json_t *line, const char *key);
/* Whether the line passes the filter. */
bool a2__cli_audit_matches(const json_t *line, const a2__cli_audit_filter *f);

/* Commands. argv[0] is the command's name. */
int a2__cli_cmd_schema(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_audit(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_status(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_console(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_append(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_read(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_cursors(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_dead_letters(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_redrive(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_cancel(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_backlog(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_clear(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_reclaim(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_state(a2__cli *cli, int argc, char **argv);
int a2__cli_cmd_presence(a2__cli *cli, int argc, char **argv);

/*
 * An aligned text table: columns sized to their widest cell, two spaces
 * apart, numeric columns right-aligned.
 */
typedef struct a2__table a2__table;

/* ncols column titles; right_align is a string of 'l'/'r' per column (or
 * NULL for all left). NULL when out of memory. */
a2__table *a2__table_new(size_t ncols, const char *const *titles,
                         const char *align);
/* Adds a row of ncols cells (copied; NULL prints as "-"). 0, or -1 when t
 * is NULL or out of memory (the table remembers it). */
int a2__table_add(a2__table *t, const char *const *cells);
/* Prints t (NULL-safe) to cli->out and frees it: A2__CLI_OK, or the error
 * line of out of memory, printing nothing, when t is NULL or a row could
 * not be added. */
int a2__cli_print_table(a2__cli *cli, a2__table *t);
size_t a2__table_rows(const a2__table *t);
void a2__table_print(const a2__table *t, FILE *out);
void a2__table_free(a2__table *t);

/*
 * Text output never passes a control character to the terminal: C0 and
 * DEL as \n, \t, \r or \xNN, C1 (U+0080..U+009F) as \u00NN, and a byte
 * that is not well-formed UTF-8 as \xNN. --json output is exact.
 */
/* An escaped copy of s (malloc'd), or NULL when out of memory. */
char *a2__cli_escape(const char *s);
/* Writes s escaped. */
void a2__cli_put(FILE *out, const char *s);
/* printf, escaped, but for one final newline. */
__attribute__((format(printf, 2, 3))) void a2__cli_line(FILE *out,
                                                        const char *fmt, ...);
__attribute__((format(printf, 2, 0))) void a2__cli_vline(FILE *out,
                                                         const char *fmt,
                                                         va_list ap);

/* Columns s takes on a terminal: its UTF-8 code points. */
size_t a2__utf8_width(const char *s);

/* Formats epoch milliseconds as RFC 3339 UTC with ms into buf. */
void a2__cli_fmt_ms(int64_t ms, char *buf, size_t len);

#endif
