/*
 * What the C benchmarks share: the table of their options and its parser,
 * their store connections, LISTEN and a2-consumer subscribers, the numbers
 * in their session names.
 */
#include "common.h"

#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum kind { STR, TAG, INT, LONG, DBL, MODE };

/* clang-format off */
#define ARG(name, kind, field) {name, kind, offsetof(a2__bench_args, field)}
/* clang-format on */

static const struct {
    const char *name;
    enum kind kind;
    size_t off;
} table[] = {
        ARG("db", STR, db),
        ARG("mode", MODE, mode),
        ARG("connect", STR, connect),
        ARG("subscribe", STR, subscribe),
        ARG("prefix", STR, prefix),
        ARG("dump", STR, dump),
        ARG("tag", TAG, tag),
        ARG("writers", INT, writers),
        ARG("sessions", INT, sessions),
        ARG("workers", INT, workers),
        ARG("interval-ms", INT, interval_ms),
        ARG("batch", INT, batch),
        ARG("seconds", DBL, seconds),
        ARG("rate", DBL, rate),
        ARG("drain", DBL, drain_s),
        ARG("max-events", LONG, max_events),
        ARG("max-commits", LONG, max_commits),
};

#define NTABLE (sizeof table / sizeof table[0])
#define VAL0   256 /* getopt's val of table[0]; above every short option */

/* Sets the option table[i] from optarg: 0, or 2 for an unknown mode. */
static int set(a2__bench_args *a, size_t i, const char *prog,
               const char *const *modes)
{
    void *p = (char *)a + table[i].off;
    switch (table[i].kind) {
    case STR:
        *(const char **)p = optarg;
        break;
    case TAG:
        snprintf(a->tag, sizeof a->tag, "%s", optarg);
        break;
    case INT:
        *(int *)p = atoi(optarg);
        break;
    case LONG:
        *(long *)p = atol(optarg);
        break;
    case DBL:
        *(double *)p = atof(optarg);
        break;
    case MODE:
        for (int m = 0; modes[m]; m++)
            if (strcmp(optarg, modes[m]) == 0) {
                a->mode = m;
                return 0;
            }
        fprintf(stderr, "%s: unknown mode %s\n", prog, optarg);
        return 2;
    }
    return 0;
}

static const char *usage_text = "";

int a2__bench_usage(void)
{
    fputs(usage_text, stderr);
    return 2;
}

int a2__bench_parse(a2__bench_args *a, int argc, char **argv, const char *prog,
                    const char *usage, const char *const *modes)
{
    usage_text = usage;
    struct option opts[NTABLE + 2];
    size_t n = 0;
    for (const char *p = strstr(usage, "--"); p && n < NTABLE;
         p = strstr(p, "--")) {
        p += 2;
        size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz-");
        for (size_t i = 0; i < NTABLE; i++)
            if (strlen(table[i].name) == len &&
                strncmp(table[i].name, p, len) == 0)
                opts[n++] = (struct option){table[i].name, required_argument,
                                            NULL, (int)(VAL0 + i)};
        p += len;
    }
    opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    opts[n] = (struct option){NULL, 0, NULL, 0};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (c < VAL0)
            return a2__bench_usage();
        if (set(a, (size_t)(c - VAL0), prog, modes) != 0)
            return 2;
    }
    if (!a->db)
        a->db = getenv("A2_DB");
    return -1;
}

int a2__bench_open_stores(const char *db, a2_store **stores, int n,
                          const char *what)
{
    for (int i = 0; i < n; i++) {
        a2_store_error err;
        if (a2_store_open(&stores[i], db, &err) != 0) {
            fprintf(stderr, "%s: %s\n", what, err.message);
            return -1;
        }
    }
    return 0;
}

int a2__bench_listen(PGconn *conn, const char *what)
{
    PGresult *res = PQexec(conn, "listen a2_events");
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "%s: %s", what, PQerrorMessage(conn));
    PQclear(res);
    return ok ? 0 : -1;
}

a2_worker *a2__bench_subscriber(const char *connect, const char *name,
                                char *err, size_t errlen)
{
    a2_worker_options o = {.connect = connect, .name = name};
    a2_worker *w = a2_worker_new(&o, err, errlen);
    if (w && a2_worker_subscribe(w, "bench", 0, NULL, 0) != 0) {
        snprintf(err, errlen, "could not subscribe to consumer bench");
        a2_worker_free(w);
        return NULL;
    }
    return w;
}

bool a2__bench_wait_connected(a2_worker *w)
{
    for (int i = 0; i < 100 && !a2_worker_connected(w); i++) {
        a2_worker_event ev;
        if (a2_worker_wait(w, &ev, 50) < 0)
            break;
    }
    return a2_worker_connected(w);
}

int a2__bench_session_number(const char *tag, int sessions, const char *name,
                             bool colon)
{
    size_t n = strlen(tag);
    if (!name || strncmp(name, tag, n) != 0 || name[n] != '.')
        return -1;
    char *end;
    long v = strtol(name + n + 1, &end, 10);
    if (end == name + n + 1 || (*end != '\0' && (!colon || *end != ':')) ||
        v < 0 || v >= sessions)
        return -1;
    return (int)v;
}
