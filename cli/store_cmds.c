/*
 * The store-backed commands of `a2` over one session: append, read,
 * cursors, clear, reclaim. Each opens one store connection, runs its
 * operation(s) and prints an aligned table, or JSON with --json.
 */
#include "cli.h"

#include "../common/clock.h"
#include "../common/num.h"
#include "a2/store.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TARGETS A2_STORE_MAX_TARGETS

static void fmt_i64(int64_t v, char *buf, size_t len)
{
    if (v == A2_STORE_NONE)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%lld", (long long)v);
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
    for (size_t i = 0; t && i < ev->count; i++) {
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
        a2__table_add(t, cells);
    }
    return a2__cli_print_table(cli, t);
}

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

int a2__cli_cmd_append(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("id", 'i'),           A2__CLI_ARG("target", 't'),
            A2__CLI_ARG("log-consumer", 'g'), A2__CLI_ARG("at", 'a'),
            A2__CLI_ARG("in", 'n'),           A2__CLI_OPTS_END,
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
                v += a2__real_ms();
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
            a2__cli_fmt_ms(not_before, utc, sizeof utc);
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
            A2__CLI_ARG("after", 'a'),
            A2__CLI_ARG("limit", 'l'),
            A2__CLI_OPTS_END,
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
            if (a2__num_parse_i64(optarg, 0, INT64_MAX, &v) != 0)
                return a2__cli_usage(cli,
                                     "--after needs an index >= 0, "
                                     "not '%s'",
                                     optarg);
            ro.after = v;
        } else if (c == 'l') {
            if (a2__num_parse_i64(optarg, 1, 1000000, &v) != 0)
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

/* A command over one SESSION that takes no option but --help: its
 * arguments, then fn on the store, opened for it. */
static int
session_command(a2__cli *cli, int argc, char **argv, const char *help,
                int (*fn)(a2__cli *cli, a2_store *store, const char *session))
{
    int rc = A2__CLI_OK;
    if (a2__cli_no_options(cli, argc, argv, help, 1, 1, "a SESSION", &rc) != 0)
        return rc;
    a2_store *store = NULL;
    if ((rc = a2__cli_store_open(cli, &store)) == A2__CLI_OK)
        rc = fn(cli, store, argv[optind]);
    a2_store_close(store);
    return rc;
}

/* ── cursors ──────────────────────────────────────────────────────────── */

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

static int print_cursors(a2__cli *cli, const a2_cursors *out)
{
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < out->count; i++) {
            const a2_cursor *cur = &out->items[i];
            json_t *o = a2__cli_dispatch_json(json_object(), &cur->dispatch);
            json_object_set_new(o, "position", json_integer(cur->position));
            json_object_set_new(o, "head", a2__cli_json_i64(cur->head));
            json_object_set_new(o, "types", a2__cli_json_text(cur->types));
            json_array_append_new(arr, o);
        }
        return a2__cli_print_json(cli, arr);
    }
    if (out->count == 0) {
        fprintf(cli->out, "no cursors\n");
        return A2__CLI_OK;
    }
    static const char *const titles[] = {
            "CONSUMER", "KIND",     "CURSOR", "POSITION", "HEAD",
            "ATTEMPT",  "FAILURES", "STATE",  "EXPIRES",  "LAST ERROR"};
    a2__table *t = a2__table_new(10, titles, "lllrrrrlll");
    for (size_t i = 0; t && i < out->count; i++) {
        const a2_cursor *cur = &out->items[i];
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
        a2__table_add(t, cells);
    }
    return a2__cli_print_table(cli, t);
}

static int cursors_of(a2__cli *cli, a2_store *store, const char *session)
{
    a2_cursors out = {0};
    int rc = a2_store_cursors(store, session, &out) != 0
                     ? a2__cli_store_failed(cli, store, "cursors")
                     : print_cursors(cli, &out);
    a2_cursors_free(&out);
    return rc;
}

int a2__cli_cmd_cursors(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 cursors SESSION\n"
            "  the session's current cursor runs: position, head, claim, "
            "failures\n";
    return session_command(cli, argc, argv, help, cursors_of);
}

/* ── clear ────────────────────────────────────────────────────────────── */

static int clear_session(a2__cli *cli, a2_store *store, const char *session)
{
    a2_clear_result out = {0};
    if (a2_store_clear(store, session, A2_STORE_NONE, NULL, &out) != 0)
        return a2__cli_store_failed(cli, store, "clear");
    if (cli->json)
        return a2__cli_print_json(
                cli,
                json_pack("{s:s,s:b,s:I,s:I}", "session", session, "cleared",
                          out.cleared, "index", (json_int_t)out.index,
                          "clear_index", (json_int_t)out.clear_index));
    if (out.cleared)
        a2__cli_line(cli->out, "%s cleared at #%lld\n", session,
                     (long long)out.clear_index);
    else
        a2__cli_line(cli->out, "%s not cleared (clear marker at #%lld)\n",
                     session, (long long)out.clear_index);
    return A2__CLI_OK;
}

int a2__cli_cmd_clear(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 clear SESSION\n"
            "  appends the session's clear marker: earlier events are gone for "
            "reads\n  and their unfinished work is superseded (a2 reclaim "
            "deletes them)\n";
    return session_command(cli, argc, argv, help, clear_session);
}

/* ── reclaim ──────────────────────────────────────────────────────────── */

static int reclaim_session(a2__cli *cli, a2_store *store, const char *session)
{
    int64_t total = 0, batches = 0;
    int tty = isatty(fileno(cli->err));
    for (;;) {
        a2_reclaim_result out = {0};
        if (a2_store_reclaim(store, session, &out) != 0) {
            if (tty && batches)
                fputc('\n', cli->err);
            return a2__cli_store_failed(cli, store, "reclaim");
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
        return a2__cli_print_json(cli,
                                  json_pack("{s:s,s:I,s:I}", "session", session,
                                            "deleted", (json_int_t)total,
                                            "batches", (json_int_t)batches));
    a2__cli_line(cli->out, "%s: reclaimed %lld events\n", session,
                 (long long)total);
    return A2__CLI_OK;
}

int a2__cli_cmd_reclaim(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 reclaim SESSION\n"
            "  deletes, batch by batch, what lies below the session's clear "
            "marker;\n  progress goes to stderr\n";
    return session_command(cli, argc, argv, help, reclaim_session);
}
