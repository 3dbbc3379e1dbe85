/* `a2`: global options, command dispatch, `schema apply|check`. */
#include "cli.h"

#include "a2/schema.h"
#include "a2/version.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
        "usage: a2 [--db CONNINFO] [--json] COMMAND [ARGS]\n"
        "\n"
        "Commands:\n"
        "  append SESSION TYPE [PAYLOAD] [--id ID] [--target "
        "CONSUMER[:LANE]]...\n"
        "                        append one event (PAYLOAD is JSON, default "
        "null)\n"
        "  read SESSION [--after N] [--limit N]\n"
        "                        list a session's events\n"
        "  cursors SESSION       list the session's consumer cursors\n"
        "  dead-letters [SESSION] [--consumer C] [--type T] [--error TEXT] "
        "[--since W]\n"
        "                        list dead-lettered heads, of one session or "
        "of all\n"
        "  redrive SESSION CONSUMER INDEX (--retry|--skip)\n"
        "                        retry or skip a dead-lettered head\n"
        "  redrive --all [FILTER] [--max N] [--yes] (--retry|--skip)\n"
        "                        retry or skip every dead letter a filter "
        "matches\n"
        "  cancel SESSION CONSUMER INDEX [--reason TEXT]\n"
        "                        pass a pending head without running it\n"
        "  backlog [CONSUMER...] pending heads, running claims, dead letters\n"
        "  clear SESSION         append the session's clear marker\n"
        "  reclaim SESSION       delete what lies below the clear marker\n"
        "  state SESSION REDUCER [--at N]\n"
        "                        a reducer's snapshot\n"
        "  presence NS [--follow [--connect ADDR]]\n"
        "                        a namespace's presence, then its changes\n"
        "  schema (apply|check)  install the schema / check a database is "
        "ready\n"
        "  audit FILE [--session S] [--consumer C] [--transition T] "
        "[--follow]\n"
        "                        show a2-consumer's audit trail\n"
        "  status [--slot NAME] [--metrics HOST:PORT]\n"
        "                        replication slot lag, retained WAL, workers\n"
        "  console [--listen tcp:HOST:PORT] [--audit FILE] ...\n"
        "                        the operator console in a browser\n"
        "\n"
        "Options:\n"
        "  --db CONNINFO  libpq connection string (default: $A2_DB, else PG*)\n"
        "  --json         machine-readable output\n"
        "  -h, --help     this help\n"
        "  --version      the version of a2\n"
        "\n"
        "Environment: A2_STORE_TIMEOUT_MS bounds each store call (default: "
        "none;\n"
        "see a2_store_set_timeout in <a2/store.h>).\n"
        "Exit status: 0 success, 1 runtime error, 2 usage error.\n";

int a2__cli_error(const a2__cli *cli, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("a2: ", cli->err);
    a2__cli_vline(cli->err, fmt, ap);
    fputc('\n', cli->err);
    va_end(ap);
    return status;
}

int a2__cli_print_json(a2__cli *cli, json_t *doc)
{
    if (!doc)
        return a2__cli_fail(cli, "out of memory");
    int rc = json_dumpf(doc, cli->out, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(doc);
    fputc('\n', cli->out);
    return rc == 0 ? A2__CLI_OK : a2__cli_fail(cli, "could not write output");
}

typedef struct {
    const char *name;
    int (*fn)(a2__cli *cli, int argc, char **argv);
} command;

static const command commands[] = {
        {"append", a2__cli_cmd_append},
        {"read", a2__cli_cmd_read},
        {"cursors", a2__cli_cmd_cursors},
        {"dead-letters", a2__cli_cmd_dead_letters},
        {"redrive", a2__cli_cmd_redrive},
        {"cancel", a2__cli_cmd_cancel},
        {"backlog", a2__cli_cmd_backlog},
        {"clear", a2__cli_cmd_clear},
        {"reclaim", a2__cli_cmd_reclaim},
        {"state", a2__cli_cmd_state},
        {"presence", a2__cli_cmd_presence},
        {"schema", a2__cli_cmd_schema},
        {"audit", a2__cli_cmd_audit},
        {"status", a2__cli_cmd_status},
        {"console", a2__cli_cmd_console},
};

int a2__cli_main(int argc, char **argv)
{
    a2__cli cli = {.db = NULL, .json = 0, .out = stdout, .err = stderr};
    static const struct option opts[] = {
            A2__CLI_ARG("db", 'd'),    A2__CLI_FLAG("json", 'j'),
            A2__CLI_FLAG("help", 'h'), A2__CLI_FLAG("version", 'V'),
            {NULL, 0, NULL, 0},
    };
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            cli.db = optarg;
            break;
        case 'j':
            cli.json = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return A2__CLI_OK;
        case 'V':
            puts("a2 " A2_VERSION_LINE);
            return A2__CLI_OK;
        case ':':
            return a2__cli_usage(&cli, "option %s needs a value",
                                 argv[optind - 1]);
        default:
            return a2__cli_usage(&cli, "unknown option %s (see a2 --help)",
                                 argv[optind - 1]);
        }
    }
    if (!cli.db) {
        const char *env = getenv("A2_DB");
        cli.db = env ? env : "";
    }
    if (optind >= argc)
        return a2__cli_usage(&cli, "missing command (see a2 --help)");
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        fputs(usage_text, stdout);
        return A2__CLI_OK;
    }
    /* --json and --db are also accepted after the command (before a "--"):
     * take them out of the command's arguments. */
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    int n = 1;
    for (int i = 1; i < sub_argc; i++) {
        const char *a = sub_argv[i];
        if (strcmp(a, "--") == 0) {
            while (i < sub_argc)
                sub_argv[n++] = sub_argv[i++];
            break;
        }
        if (strcmp(a, "--json") == 0) {
            cli.json = 1;
        } else if (strncmp(a, "--db=", 5) == 0) {
            cli.db = a + 5;
        } else if (strcmp(a, "--db") == 0) {
            if (i + 1 >= sub_argc)
                return a2__cli_usage(&cli, "option --db needs a value");
            cli.db = sub_argv[++i];
        } else {
            sub_argv[n++] = sub_argv[i];
        }
    }
    sub_argc = n;
    sub_argv[n] = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) {
            int rc = commands[i].fn(&cli, sub_argc, sub_argv);
            if (fflush(cli.out) != 0 && rc == A2__CLI_OK)
                rc = a2__cli_fail(&cli, "could not write output: %s",
                                  strerror(errno));
            return rc;
        }
    return a2__cli_usage(&cli, "unknown command '%s' (see a2 --help)", name);
}

/* schema (apply|check) */
int a2__cli_cmd_schema(a2__cli *cli, int argc, char **argv)
{
    if (argc == 2 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs("usage: a2 schema (apply|check)\n"
              "  apply  install or upgrade the a2 schema (idempotent)\n"
              "  check  report what the database lacks; exit 1 if anything\n",
              cli->out);
        return A2__CLI_OK;
    }
    if (argc != 2)
        return a2__cli_usage(cli, argc < 2 ? "schema needs apply or check"
                                           : "schema takes one argument");
    char msg[4096];
    if (strcmp(argv[1], "apply") == 0) {
        if (a2_schema_apply(cli->db, msg, sizeof msg) != 0)
            return a2__cli_fail(cli, "schema apply failed: %s", msg);
        if (cli->json)
            fprintf(cli->out, "{\"applied\":true,\"version\":\"%s\"}\n",
                    A2_SCHEMA_VERSION);
        else
            fprintf(cli->out, "schema version %s applied\n", A2_SCHEMA_VERSION);
        return A2__CLI_OK;
    }
    if (strcmp(argv[1], "check") == 0) {
        msg[0] = '\0';
        int rc = a2_schema_check(cli->db, msg, sizeof msg);
        if (rc < 0)
            return a2__cli_fail(cli, "schema check failed: %s", msg);
        if (cli->json) {
            fprintf(cli->out, "{\"ready\":%s,\"problems\":[",
                    rc == 0 ? "true" : "false");
            const char *p = msg;
            int first = 1;
            while (rc != 0 && *p) {
                const char *nl = strchr(p, '\n');
                size_t n = nl ? (size_t)(nl - p) : strlen(p);
                if (n > 0) {
                    fputs(first ? "\"" : ",\"", cli->out);
                    for (size_t i = 0; i < n; i++) {
                        unsigned char ch = (unsigned char)p[i];
                        if (ch == '"' || ch == '\\')
                            fprintf(cli->out, "\\%c", ch);
                        else if (ch < 0x20)
                            fprintf(cli->out, "\\u%04x", ch);
                        else
                            fputc(ch, cli->out);
                    }
                    fputc('"', cli->out);
                    first = 0;
                }
                p += n + (nl ? 1 : 0);
            }
            fputs("]}\n", cli->out);
        } else if (rc == 0) {
            fprintf(cli->out, "schema version %s: ready\n", A2_SCHEMA_VERSION);
        } else {
            fputs(msg, cli->out);
            if (*msg && msg[strlen(msg) - 1] != '\n')
                fputc('\n', cli->out);
        }
        if (rc != 0)
            fprintf(cli->err, "a2: the database is not ready for a2\n");
        return rc == 0 ? A2__CLI_OK : A2__CLI_RUNTIME;
    }
    return a2__cli_usage(cli, "unknown schema action '%s' (apply or check)",
                         argv[1]);
}
