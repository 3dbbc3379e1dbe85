/*
 * The store-backed commands of `a2`: append, read, cursors, dead-letters,
 * redrive, clear, reclaim. Each opens one store connection, runs its
 * operation(s) and prints an aligned table, or JSON with --json.
 */
#include "cli.h"

#include "a2/store.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_TARGETS A2_STORE_MAX_TARGETS

int a2__cli_store_open(a2__cli *cli, a2_store **out)
{
    a2_store_error err = {0};
    if (a2_store_open(out, cli->db, &err) == 0)
        return A2__CLI_OK;
    if (err.code == A2_EINVALID_ARGUMENT) /* A2_STORE_TIMEOUT_MS */
        return a2__cli_usage(cli, "%s", err.message);
    return a2__cli_fail(cli, "%s",
                        err.message[0] ? err.message
                                       : "could not connect to the database");
}

int a2__cli_store_failed(a2__cli *cli, a2_store *store, const char *what)
{
    const a2_store_error *e = a2_store_last_error(store);
    int code = e ? e->code : A2_ESTORE_FAILED;
    const char *msg = e && e->message[0] ? e->message : "unknown error";
    if (code == A2_EINVALID_ARGUMENT)
        return a2__cli_usage(cli, "%s: %s", what, msg);
    return a2__cli_fail(cli, "%s failed: %s (%s)", what, msg,
                        a2_store_code_name(code));
}

static void fmt_i64(int64_t v, char *buf, size_t len)
{
    if (v == A2_STORE_NONE)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%lld", (long long)v);
}

void a2__cli_fmt_time(int64_t ms, char *buf, size_t len)
{
    if (ms == A2_STORE_NONE)
        snprintf(buf, len, "-");
    else
        a2__cli_fmt_ms(ms, buf, len);
}

json_t *a2__cli_json_i64(int64_t v)
{
    return v == A2_STORE_NONE ? json_null() : json_integer((json_int_t)v);
}

json_t *a2__cli_json_str(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* A JSON value from the server's jsonb text (a string when unparseable). */
static json_t *json_from_text(const char *text)
{
    if (!text)
        return json_null();
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    return v ? v : json_string(text);
}

json_t *a2__cli_event_json(const a2_event *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "session", json_string(e->session_id));
    json_object_set_new(o, "index", json_integer(e->index));
    json_object_set_new(o, "type", json_string(e->type));
    json_object_set_new(o, "id", json_string(e->id));
    json_object_set_new(o, "created_at", json_integer(e->created_at));
    json_object_set_new(o, "payload", json_from_text(e->payload));
    if (e->has_cause) {
        json_t *c = json_object();
        json_object_set_new(c, "consumer", a2__cli_json_str(e->cause.consumer));
        json_object_set_new(c, "lane", a2__cli_json_str(e->cause.lane));
        json_object_set_new(c, "index", json_integer(e->cause.index));
        json_object_set_new(c, "attempt", json_integer(e->cause.attempt));
        json_object_set_new(o, "cause", c);
    } else {
        json_object_set_new(o, "cause", json_null());
    }
    return o;
}

static void cause_text(const a2_event *e, char *buf, size_t len)
{
    if (!e->has_cause)
        snprintf(buf, len, "-");
    else if (e->cause.lane)
        snprintf(buf, len, "%s:%s#%lld/%d", e->cause.consumer, e->cause.lane,
                 (long long)e->cause.index, e->cause.attempt);
    else
        snprintf(buf, len, "%s#%lld/%d", e->cause.consumer,
                 (long long)e->cause.index, e->cause.attempt);
}

static int print_events(a2__cli *cli, const a2_events *ev, int with_payload)
{
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < ev->count; i++)
            json_array_append_new(arr, a2__cli_event_json(&ev->items[i]));
        return a2__cli_print_json(cli, arr);
    }
    static const char *const titles[] = {"INDEX",   "TYPE",  "ID",
                                         "CREATED", "CAUSE", "PAYLOAD"};
    a2__table *t = a2__table_new(with_payload ? 6 : 5, titles, "rllll");
    if (!t)
        return a2__cli_fail(cli, "out of memory");
    for (size_t i = 0; i < ev->count; i++) {
        const a2_event *e = &ev->items[i];
        char idx[32], created[40], cause[300], payload[200];
        fmt_i64(e->index, idx, sizeof idx);
        a2__cli_fmt_time(e->created_at, created, sizeof created);
        cause_text(e, cause, sizeof cause);
        const char *p = e->payload ? e->payload : "null";
        if (strlen(p) > 120)
            snprintf(payload, sizeof payload, "%.117s...", p);
        else
            snprintf(payload, sizeof payload, "%s", p);
        const char *cells[] = {idx, e->type, e->id, created, cause, payload};
        if (a2__table_add(t, cells) != 0) {
            a2__table_free(t);
            return a2__cli_fail(cli, "out of memory");
        }
    }
    a2__table_print(t, cli->out);
    a2__table_free(t);
    return A2__CLI_OK;
}

/*
 * Parses options of a command. longopts entries; returns -1 after all
 * options, or the val of an option, or sets *rc and returns -2 on error or
 * --help (help is printed from help_text).
 */
int a2__cli_next_opt(a2__cli *cli, int argc, char **argv,
                     const struct option *longopts, const char *help_text,
                     int *rc)
{
    int c = getopt_long(argc, argv, ":h", longopts, NULL);
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

/* Checks the positional count; returns 0 or sets the usage error in *rc. */
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

const struct option a2__cli_help_only[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
};

/* ── append ───────────────────────────────────────────────────────────── */

#define MAX_LOG_CONSUMERS 16

/* "NAME" or "NAME:TYPE,TYPE": a log consumer whose cursor is named
 * "lane:log" (as a2-worker --log names it). *owned and *types are the
 * caller's to free. */
static int parse_log_consumer(const char *arg, a2_consumer *c, a2_log_spec *l,
                              char **owned, char ***types)
{
    *owned = strdup(arg);
    *types = NULL;
    if (!*owned)
        return -1;
    char *colon = strchr(*owned, ':');
    if (colon)
        *colon = '\0';
    memset(l, 0, sizeof *l);
    l->lane = "log";
    c->name = *owned;
    c->log = l;
    if (!**owned)
        return -1;
    if (!colon)
        return 0;
    size_t n = 1;
    for (char *p = colon + 1; *p; p++)
        n += *p == ',';
    *types = calloc(n, sizeof **types);
    if (!*types)
        return -1;
    char *save = NULL;
    for (char *t = strtok_r(colon + 1, ",", &save); t;
         t = strtok_r(NULL, ",", &save))
        (*types)[l->ntypes++] = t;
    l->types = (const char *const *)*types;
    return l->ntypes ? 0 : -1;
}

/* --at: epoch milliseconds, or a time like 2026-12-02T09:00:00Z (seconds
 * and a fraction optional; Z or an offset +HH:MM required). 0 or -1. */
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

/* --in: a whole number with a unit (ms, s, m, h, d). 0 or -1. */
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
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},
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

/* Epoch ms as 2026-12-02T09:00:00.000Z. */
static void format_utc_ms(int64_t ms, char *buf, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", day, (int)(ms % 1000));
}

int a2__cli_cmd_append(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            {"id", required_argument, NULL, 'i'},
            {"target", required_argument, NULL, 't'},
            {"log-consumer", required_argument, NULL, 'g'},
            {"at", required_argument, NULL, 'a'},
            {"in", required_argument, NULL, 'n'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    static const char help[] =
            "usage: a2 append SESSION TYPE [PAYLOAD] [--id ID] "
            "[--target CONSUMER[:LANE]]... [--log-consumer NAME[:TYPES]]...\n"
            "                 [--at TIME | --in DURATION]\n"
            "  PAYLOAD is JSON (default null); --id makes a retry idempotent;\n"
            "  each --target dispatches the event to a consumer: alone "
            "(CONSUMER) or in a FIFO lane (CONSUMER:LANE);\n"
            "  each --log-consumer starts that log consumer's cursor here if "
            "the "
            "event's type is one of TYPES\n  (comma-separated; all types when "
            "omitted);\n"
            "  --at TIME (epoch ms, or UTC like 2026-12-02T09:00:00Z) or --in "
            "DURATION (300ms, 90s, 5m, 2h, 1d)\n"
            "  delays its dispatch: stored now, claimable (and woken) then\n";
    int rc = A2__CLI_OK, c;
    const char *id = NULL;
    int64_t not_before = 0;
    const char *when = NULL; /* the --at or --in given */
    a2_target targets[MAX_TARGETS];
    char *owned[MAX_TARGETS];
    size_t ntargets = 0;
    a2_consumer logc[MAX_LOG_CONSUMERS];
    a2_log_spec logs[MAX_LOG_CONSUMERS];
    char *logowned[MAX_LOG_CONSUMERS];
    char **logtypes[MAX_LOG_CONSUMERS];
    size_t nlogc = 0;
    a2_store *store = NULL;
    a2_events out = {0};
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            goto done;
        if (c == 'i') {
            if (!*optarg) {
                rc = a2__cli_usage(cli, "--id must not be empty");
                goto done;
            }
            id = optarg;
        } else if (c == 'a' || c == 'n') {
            if (when) {
                rc = a2__cli_usage(cli, "--at and --in exclude each other "
                                        "(and are given once)");
                goto done;
            }
            when = optarg;
            int64_t v = 0;
            if (c == 'a' && a2__cli_parse_at(optarg, &v) != 0) {
                rc = a2__cli_usage(cli,
                                   "--at must be epoch milliseconds or a UTC "
                                   "time like 2026-12-02T09:00:00Z, not '%s'",
                                   optarg);
                goto done;
            }
            if (c == 'n') {
                if (a2__cli_parse_in(optarg, &v) != 0) {
                    rc = a2__cli_usage(cli,
                                       "--in must be a duration like 300ms, "
                                       "90s, 5m, 2h or 1d (at most a century), "
                                       "not '%s'",
                                       optarg);
                    goto done;
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                v += (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            }
            not_before = v;
        } else if (c == 'g') {
            if (nlogc == MAX_LOG_CONSUMERS) {
                rc = a2__cli_usage(cli, "at most %d log consumers",
                                   MAX_LOG_CONSUMERS);
                goto done;
            }
            if (parse_log_consumer(optarg, &logc[nlogc], &logs[nlogc],
                                   &logowned[nlogc], &logtypes[nlogc]) != 0) {
                free(logowned[nlogc]);
                free(logtypes[nlogc]);
                rc = a2__cli_usage(cli,
                                   "bad log consumer '%s' (NAME or "
                                   "NAME:TYPE,TYPE...)",
                                   optarg);
                goto done;
            }
            nlogc++;
        } else if (c == 't') {
            if (ntargets == MAX_TARGETS) {
                rc = a2__cli_usage(cli, "at most %d targets", MAX_TARGETS);
                goto done;
            }
            char *copy = strdup(optarg);
            if (!copy) {
                rc = a2__cli_fail(cli, "out of memory");
                goto done;
            }
            owned[ntargets] = copy;
            char *colon = strchr(copy, ':');
            if (colon)
                *colon = '\0';
            targets[ntargets].consumer = copy;
            targets[ntargets].lane = colon ? colon + 1 : NULL;
            ntargets++;
            if (!*copy || (colon && !colon[1])) {
                rc = a2__cli_usage(cli,
                                   "bad target '%s' (CONSUMER or "
                                   "CONSUMER:LANE)",
                                   optarg);
                goto done;
            }
        }
    }
    if (a2__cli_positionals(cli, argc, argv, 2, 3, "SESSION and TYPE", &rc) != 0)
        goto done;
    const char *session = argv[optind];
    const char *type = argv[optind + 1];
    const char *payload = argc - optind > 2 ? argv[optind + 2] : NULL;
    if (!*session) {
        rc = a2__cli_usage(cli, "SESSION must not be empty");
        goto done;
    }
    if (!*type) {
        rc = a2__cli_usage(cli, "TYPE must not be empty");
        goto done;
    }
    if (payload) {
        json_error_t jerr;
        json_t *v = json_loads(payload, JSON_DECODE_ANY, &jerr);
        if (!v) {
            rc = a2__cli_usage(cli, "PAYLOAD is not JSON: %s (column %d)",
                               jerr.text, jerr.column);
            goto done;
        }
        json_decref(v);
    }
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    a2_append_event ev = {.type = type,
                          .payload = payload,
                          .id = id,
                          .targets = ntargets ? targets : NULL,
                          .ntargets = ntargets,
                          .not_before = not_before};
    a2_append_options ao = {.consumers = logc, .nconsumers = nlogc};
    if (a2_store_append(store, session, &ev, 1, nlogc ? &ao : NULL, &out) !=
        0) {
        rc = a2__cli_store_failed(cli, store, "append");
        goto done;
    }
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < out.count; i++) {
            json_t *o = a2__cli_event_json(&out.items[i]);
            json_object_set_new(o, "replayed", json_boolean(out.replayed));
            if (not_before)
                json_object_set_new(o, "not_before", json_integer(not_before));
            json_array_append_new(arr, o);
        }
        json_t *one = json_incref(json_array_get(arr, 0));
        json_decref(arr);
        rc = a2__cli_print_json(cli, one ? one : json_null());
    } else {
        char at[64] = "";
        if (not_before) {
            char utc[40];
            format_utc_ms(not_before, utc, sizeof utc);
            snprintf(at, sizeof at, ", not before %s", utc);
        }
        for (size_t i = 0; i < out.count; i++)
            a2__cli_line(cli->out, "%s %s #%lld id %s%s%s\n",
                         out.items[i].session_id, out.items[i].type,
                         (long long)out.items[i].index, out.items[i].id, at,
                         out.replayed ? " (already stored: replayed)" : "");
    }
done:
    for (size_t i = 0; i < ntargets; i++)
        free(owned[i]);
    for (size_t i = 0; i < nlogc; i++) {
        free(logowned[i]);
        free(logtypes[i]);
    }
    a2_events_free(&out);
    a2_store_close(store);
    return rc;
}

/* ── read ─────────────────────────────────────────────────────────────── */

int a2__cli_cmd_read(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            {"after", required_argument, NULL, 'a'},
            {"limit", required_argument, NULL, 'l'},
            {"help", no_argument, NULL, 'h'},
            {NULL, 0, NULL, 0},
    };
    static const char help[] =
            "usage: a2 read SESSION [--after N] [--limit N]\n"
            "  the session's events after index N (default: from the clear "
            "marker on)\n";
    int rc = A2__CLI_OK, c;
    a2_read_options ro = {0};
    a2_store *store = NULL;
    a2_events out = {0};
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        int64_t v;
        if (c == 'a') {
            if (a2__cli_parse_i64(optarg, 0, INT64_MAX, &v) != 0)
                return a2__cli_usage(cli,
                                     "--after needs an index >= 0, "
                                     "not '%s'",
                                     optarg);
            ro.after = v;
        } else if (c == 'l') {
            if (a2__cli_parse_i64(optarg, 1, 1000000, &v) != 0)
                return a2__cli_usage(cli,
                                     "--limit needs a count in "
                                     "1..1000000, not '%s'",
                                     optarg);
            ro.limit = (size_t)v;
        }
    }
    if (a2__cli_positionals(cli, argc, argv, 1, 1, "a SESSION", &rc) != 0)
        return rc;
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    if (a2_store_read(store, argv[optind], &ro, &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "read");
        goto done;
    }
    if (!cli->json && out.count == 0)
        fprintf(cli->out, "no events\n");
    else
        rc = print_events(cli, &out, 1);
done:
    a2_events_free(&out);
    a2_store_close(store);
    return rc;
}

/* ── cursors ──────────────────────────────────────────────────────────── */

json_t *a2__cli_dispatch_json(json_t *o, const a2_dispatch *d)
{
    json_object_set_new(o, "consumer", a2__cli_json_str(d->consumer));
    json_object_set_new(o, "lane", a2__cli_json_str(d->lane));
    json_object_set_new(o, "cursor", a2__cli_json_str(d->cursor_key));
    json_object_set_new(o, "kind", a2__cli_json_str(d->kind));
    json_object_set_new(o, "epoch", a2__cli_json_i64(d->epoch));
    json_object_set_new(o, "attempt", json_integer(d->attempt_count));
    json_object_set_new(o, "holder", a2__cli_json_str(d->claim_holder));
    json_object_set_new(o, "expires_at", a2__cli_json_i64(d->claim_expires_at));
    json_object_set_new(o, "failures", json_integer(d->failure_count));
    json_object_set_new(o, "last_failed_at",
                        a2__cli_json_i64(d->last_failed_at));
    json_object_set_new(o, "error", a2__cli_json_str(d->last_error));
    json_object_set_new(o, "failed_at", a2__cli_json_i64(d->failed_at));
    return o;
}

static const char *cursor_state(const a2_cursor *cur, char *buf, size_t len)
{
    const a2_dispatch *d = &cur->dispatch;
    if (cur->head == A2_STORE_NONE)
        return "idle";
    if (d->failed_at != A2_STORE_NONE)
        return "dead";
    if (d->claim_holder) {
        snprintf(buf, len, "claimed by %s", d->claim_holder);
        return buf;
    }
    if (d->claim_expires_at != A2_STORE_NONE && d->failure_count > 0)
        return "retry held";
    return "pending";
}

int a2__cli_cmd_cursors(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 cursors SESSION\n"
            "  the session's current cursor runs: position, head, claim, "
            "failures\n";
    int rc = A2__CLI_OK, c;
    a2_store *store = NULL;
    a2_cursors out = {0};
    a2__table *t = NULL;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, a2__cli_help_only, help, &rc)) != -1)
        if (c == -2)
            return rc;
    if (a2__cli_positionals(cli, argc, argv, 1, 1, "a SESSION", &rc) != 0)
        return rc;
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    if (a2_store_cursors(store, argv[optind], &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "cursors");
        goto done;
    }
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < out.count; i++) {
            const a2_cursor *cur = &out.items[i];
            json_t *o = a2__cli_dispatch_json(json_object(), &cur->dispatch);
            json_object_set_new(o, "position", json_integer(cur->position));
            json_object_set_new(o, "head", a2__cli_json_i64(cur->head));
            json_object_set_new(o, "types", json_from_text(cur->types));
            json_array_append_new(arr, o);
        }
        rc = a2__cli_print_json(cli, arr);
        goto done;
    }
    if (out.count == 0) {
        fprintf(cli->out, "no cursors\n");
        goto done;
    }
    static const char *const titles[] = {
            "CONSUMER", "KIND",     "CURSOR", "POSITION", "HEAD",
            "ATTEMPT",  "FAILURES", "STATE",  "EXPIRES",  "LAST ERROR"};
    t = a2__table_new(10, titles, "lllrrrrlll");
    if (!t) {
        rc = a2__cli_fail(cli, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < out.count; i++) {
        const a2_cursor *cur = &out.items[i];
        const a2_dispatch *d = &cur->dispatch;
        char pos[32], head[32], att[16], fails[16], st[300], exp[40], err[100];
        fmt_i64(cur->position, pos, sizeof pos);
        fmt_i64(cur->head, head, sizeof head);
        snprintf(att, sizeof att, "%d", d->attempt_count);
        snprintf(fails, sizeof fails, "%d", d->failure_count);
        a2__cli_fmt_time(d->claim_expires_at, exp, sizeof exp);
        snprintf(err, sizeof err, "%.96s", d->last_error ? d->last_error : "-");
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\t')
                *p = ' ';
        const char *cells[] = {d->consumer,   d->kind,
                               d->cursor_key, pos,
                               head,          att,
                               fails,         cursor_state(cur, st, sizeof st),
                               exp,           err};
        if (a2__table_add(t, cells) != 0) {
            rc = a2__cli_fail(cli, "out of memory");
            goto done;
        }
    }
    a2__table_print(t, cli->out);
done:
    a2__table_free(t);
    a2_cursors_free(&out);
    a2_store_close(store);
    return rc;
}

/* ── dead-letters ─────────────────────────────────────────────────────── */

/* ── clear ────────────────────────────────────────────────────────────── */

int a2__cli_cmd_clear(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 clear SESSION\n"
            "  appends the session's clear marker: earlier events are gone for "
            "reads\n  and their unfinished work is superseded (a2 reclaim "
            "deletes them)\n";
    int rc = A2__CLI_OK, c;
    a2_store *store = NULL;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, a2__cli_help_only, help, &rc)) != -1)
        if (c == -2)
            return rc;
    if (a2__cli_positionals(cli, argc, argv, 1, 1, "a SESSION", &rc) != 0)
        return rc;
    const char *session = argv[optind];
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    a2_clear_result out = {0};
    if (a2_store_clear(store, session, A2_STORE_NONE, NULL, &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "clear");
        goto done;
    }
    if (cli->json)
        rc = a2__cli_print_json(cli, json_pack("{s:s,s:b,s:I,s:I}", "session", session,
                                       "cleared", out.cleared, "index",
                                       (json_int_t)out.index, "clear_index",
                                       (json_int_t)out.clear_index));
    else if (out.cleared)
        a2__cli_line(cli->out, "%s cleared at #%lld\n", session,
                     (long long)out.clear_index);
    else
        a2__cli_line(cli->out, "%s not cleared (clear marker at #%lld)\n",
                     session, (long long)out.clear_index);
done:
    a2_store_close(store);
    return rc;
}

/* ── reclaim ──────────────────────────────────────────────────────────── */

int a2__cli_cmd_reclaim(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 reclaim SESSION\n"
            "  deletes, batch by batch, what lies below the session's clear "
            "marker;\n  progress goes to stderr\n";
    int rc = A2__CLI_OK, c;
    a2_store *store = NULL;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, a2__cli_help_only, help, &rc)) != -1)
        if (c == -2)
            return rc;
    if (a2__cli_positionals(cli, argc, argv, 1, 1, "a SESSION", &rc) != 0)
        return rc;
    const char *session = argv[optind];
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    int64_t total = 0, batches = 0;
    int tty = isatty(fileno(cli->err));
    for (;;) {
        a2_reclaim_result out = {0};
        if (a2_store_reclaim(store, session, &out) != 0) {
            if (tty && batches)
                fputc('\n', cli->err);
            rc = a2__cli_store_failed(cli, store, "reclaim");
            goto done;
        }
        total += out.deleted;
        batches++;
        if (tty) {
            fputs("\rreclaim ", cli->err);
            a2__cli_put(cli->err, session);
            fprintf(cli->err, ": %lld events deleted (%lld batches)",
                    (long long)total, (long long)batches);
        } else if (!out.done || out.deleted > 0)
            a2__cli_line(cli->err,
                         "reclaim %s: batch %lld deleted %lld events "
                         "(%lld so far)\n",
                         session, (long long)batches, (long long)out.deleted,
                         (long long)total);
        if (out.done)
            break;
    }
    if (tty)
        fputc('\n', cli->err);
    if (cli->json)
        rc = a2__cli_print_json(cli, json_pack("{s:s,s:I,s:I}", "session", session,
                                       "deleted", (json_int_t)total, "batches",
                                       (json_int_t)batches));
    else
        a2__cli_line(cli->out, "%s: reclaimed %lld events\n", session,
                     (long long)total);
done:
    a2_store_close(store);
    return rc;
}
