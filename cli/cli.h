/*
 * Internals of `a2`, the operator's command line (cli/main.c is the
 * program). Every command function returns the process exit status:
 * 0 success, 1 runtime error, 2 usage error, and prints at most one error
 * line to stderr naming the cause.
 */
#ifndef A2_CLI_H
#define A2_CLI_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <getopt.h>
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

/* Prints "a2: <message>" to cli->err and returns A2__CLI_USAGE. */
__attribute__((format(printf, 2, 3))) int a2__cli_usage(const a2__cli *cli,
                                                        const char *fmt, ...);
/* Prints "a2: <message>" to cli->err and returns A2__CLI_RUNTIME. */
__attribute__((format(printf, 2, 3))) int a2__cli_fail(const a2__cli *cli,
                                                       const char *fmt, ...);
/* Prints doc (taking it; NULL: out of memory) as one compact JSON line. */
int a2__cli_print_json(a2__cli *cli, json_t *doc);

/*
 * Parses a decimal int64 in [min, max]; returns 0, or -1 when s is not one.
 */
int a2__cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

struct option;
typedef struct a2_store a2_store;

/* Opens the store on cli->db; on failure prints the one error line and
 * returns A2__CLI_RUNTIME. */
int a2__cli_store_open(a2__cli *cli, a2_store **out);

/* Maps a failed store call to its exit status and one error line (a refused
 * argument is a usage error). */
int a2__cli_store_failed(a2__cli *cli, a2_store *store, const char *what);

/* getopt_long with a command's --help and error handling: returns the
 * option, -1 at the end, or -2 when the command ends with *rc. */
int a2__cli_next_opt(a2__cli *cli, int argc, char **argv,
                     const struct option *longopts, const char *help_text,
                     int *rc);

/* Shared by the commands (cli/store_cmds.c). */
struct a2_event;
struct a2_dispatch;
/* Epoch ms as the commands print times; "-" for A2_STORE_NONE. */
void a2__cli_fmt_time(int64_t ms, char *buf, size_t len);
/* A2_STORE_NONE or NULL as JSON null. */
json_t *a2__cli_json_i64(int64_t v);
json_t *a2__cli_json_str(const char *s);
/* An event, and a dispatch state added to o, as the commands' --json. */
json_t *a2__cli_event_json(const struct a2_event *e);
json_t *a2__cli_dispatch_json(json_t *o, const struct a2_dispatch *d);
/* Checks the positional count; returns 0 or sets the usage error in *rc. */
int a2__cli_positionals(a2__cli *cli, int argc, char **argv, int min, int max,
                        const char *what, int *rc);
/* --help alone. */
extern const struct option a2__cli_help_only[];
/* A time: epoch ms or 2026-12-02T09:00:00Z (seconds, fraction optional; Z
 * or +HH:MM). A duration: a whole number with ms, s, m, h or d. 0 or -1. */
int a2__cli_parse_at(const char *s, int64_t *ms);
int a2__cli_parse_in(const char *s, int64_t *ms);

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
/* Adds a row of ncols cells (copied; NULL prints as "-"). 0 or -1 (ENOMEM). */
int a2__table_add(a2__table *t, const char *const *cells);
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
