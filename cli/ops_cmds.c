/*
 * The operator's commands over dead letters and backlogs: dead-letters (one
 * session, or every session by filter), redrive (one head, or a filter's
 * dead letters in bounded calls), cancel and backlog.
 */
#include "cli.h"

#include "../common/clock.h"
#include "../common/num.h"
#include "a2/store.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The options of a dead-letter filter, shared by dead-letters and redrive. */
#define FILTER_OPTIONS                                                         \
    A2__CLI_ARG("consumer", 'c'), A2__CLI_ARG("type", 't'),                    \
            A2__CLI_ARG("error", 'e'), A2__CLI_ARG("since", 'S'),              \
            A2__CLI_ARG("until", 'U')

#define FILTER_HELP                                                            \
    "  --consumer NAME   only this consumer's\n"                               \
    "  --type TYPE       only events of this type\n"                           \
    "  --error TEXT      only those whose last error contains TEXT (any "     \
    "case)\n"                                                                  \
    "  --since WHEN      failed at or after WHEN\n"                            \
    "  --until WHEN      failed before WHEN\n"                                 \
    "  WHEN: epoch ms, a time like 2026-12-02T09:00:00Z, or a duration ago "  \
    "(30m, 2h, 1d)\n"

typedef struct filter_args {
    a2_dead_letter_filter f;
    bool any; /* a filter option was given */
} filter_args;

/* --since/--until: a time, or a duration before now. */
static int parse_when(a2__cli *cli, const char *opt, const char *v,
                      int64_t *out)
{
    int64_t d;
    if (a2__cli_parse_in(v, &d) == 0) {
        *out = a2__real_ms() - d;
        return 0;
    }
    if (a2__cli_parse_at(v, out) == 0)
        return 0;
    return a2__cli_usage(cli,
                         "--%s needs a time (epoch ms or "
                         "2026-12-02T09:00:00Z) or a duration (30m), not '%s'",
                         opt, v);
}

/* A filter option c with value v into fa; 0, 1 when c is not one, or a
 * usage status (> 1). */
static int filter_opt(a2__cli *cli, int c, const char *v, filter_args *fa)
{
    switch (c) {
    case 'c':
        fa->f.consumer = v;
        break;
    case 't':
        fa->f.type = v;
        break;
    case 'e':
        fa->f.error = v;
        break;
    case 'S':
        if (parse_when(cli, "since", v, &fa->f.failed_after) != 0)
            return A2__CLI_USAGE;
        break;
    case 'U':
        if (parse_when(cli, "until", v, &fa->f.failed_before) != 0)
            return A2__CLI_USAGE;
        break;
    default:
        return 1;
    }
    fa->any = true;
    return 0;
}

static void filter_init(filter_args *fa)
{
    memset(fa, 0, sizeof *fa);
    fa->f.failed_after = A2_STORE_NONE;
    fa->f.failed_before = A2_STORE_NONE;
}

/* ── dead-letters ─────────────────────────────────────────────────────── */

static json_t *key_json(const a2_head *h)
{
    return json_pack("{s:I, s:s, s:s, s:s, s:I}", "failed_at",
                     (json_int_t)h->dispatch.failed_at, "session",
                     h->event.session_id, "consumer", h->dispatch.consumer,
                     "cursor_key", h->dispatch.cursor_key, "epoch",
                     (json_int_t)h->dispatch.epoch);
}

/* --after: the key a page's "next" gave. */
static int parse_key(a2__cli *cli, const char *text, json_t **doc,
                     a2_dead_letter_key *key)
{
    *doc = json_loads(text, 0, NULL);
    json_int_t failed_at = 0, epoch = 0;
    const char *session = NULL, *consumer = NULL, *cursor_key = NULL;
    if (!*doc || json_unpack(*doc, "{s:I, s:s, s:s, s:s, s:I}", "failed_at",
                             &failed_at, "session", &session, "consumer",
                             &consumer, "cursor_key", &cursor_key, "epoch",
                             &epoch) != 0)
        return a2__cli_usage(cli, "--after needs the \"next\" key a page "
                                  "printed ({\"failed_at\", \"session\", "
                                  "\"consumer\", \"cursor_key\", \"epoch\"})");
    key->failed_at = failed_at;
    key->session_id = session;
    key->consumer = consumer;
    key->cursor_key = cursor_key;
    key->epoch = epoch;
    return 0;
}

static int print_heads(a2__cli *cli, const a2_heads *out, bool sessions,
                       size_t limit)
{
    bool more = sessions && out->count == limit && limit > 0;
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < out->count; i++) {
            json_t *o = a2__cli_dispatch_json(json_object(),
                                              &out->items[i].dispatch);
            json_object_set_new(o, "event",
                                a2__cli_event_json(&out->items[i].event));
            if (sessions)
                json_object_set_new(o, "key", key_json(&out->items[i]));
            json_array_append_new(arr, o);
        }
        if (!sessions)
            return a2__cli_print_json(cli, arr);
        return a2__cli_print_json(
                cli, json_pack("{s:o, s:o}", "dead_letters", arr, "next",
                               more ? key_json(&out->items[out->count - 1])
                                    : json_null()));
    }
    if (out->count == 0) {
        fprintf(cli->out, "no dead letters\n");
        return A2__CLI_OK;
    }
    static const char *const titles[] = {
            "SESSION",  "CONSUMER", "LANE",      "INDEX",     "TYPE",
            "ATTEMPTS", "FAILURES", "FAILED AT", "LAST ERROR"};
    size_t skip = sessions ? 0 : 1;
    a2__table *t = a2__table_new(9 - skip, titles + skip, &"lllrlrrll"[skip]);
    for (size_t i = 0; t && i < out->count; i++) {
        const a2_head *h = &out->items[i];
        char idx[32], att[16], fails[16], at[40], err[200];
        snprintf(idx, sizeof idx, "%" PRId64, h->event.index);
        snprintf(att, sizeof att, "%d", h->dispatch.attempt_count);
        snprintf(fails, sizeof fails, "%d", h->dispatch.failure_count);
        a2__cli_fmt_time(h->dispatch.failed_at, at, sizeof at);
        snprintf(err, sizeof err, "%.160s",
                 h->dispatch.last_error ? h->dispatch.last_error : "-");
        const char *cells[] = {h->event.session_id, h->dispatch.consumer,
                               h->dispatch.lane,    idx,
                               h->event.type,       att,
                               fails,               at,
                               err};
        a2__table_add(t, cells + skip);
    }
    int rc = a2__cli_print_table(cli, t);
    if (rc == A2__CLI_OK && more) {
        json_t *k = key_json(&out->items[out->count - 1]);
        char *text = k ? json_dumps(k, JSON_COMPACT) : NULL;
        json_decref(k);
        if (!text)
            return a2__cli_fail(cli, "out of memory");
        a2__cli_line(cli->out, "next page: --after '%s'\n", text);
        free(text);
    }
    return rc;
}

int a2__cli_cmd_dead_letters(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            FILTER_OPTIONS,
            A2__CLI_ARG("after", 'a'),
            A2__CLI_ARG("limit", 'n'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 dead-letters SESSION\n"
            "       a2 dead-letters [FILTER] [--limit N] [--after KEY]\n"
            "  heads that failed too often: one session's, or every "
            "session's\n"
            "  (newest failure first) that match the filter; redrive them "
            "with\n"
            "  a2 redrive\n" FILTER_HELP
            "  --limit N         at most N rows (1..1000, default 100)\n"
            "  --after KEY       the page after KEY (the \"next page\" line "
            "of the last)\n";
    int rc = A2__CLI_OK, c;
    filter_args fa;
    filter_init(&fa);
    const char *after_text = NULL;
    int64_t limit = 100;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        if (c == 'a') {
            after_text = optarg;
        } else if (c == 'n') {
            if (a2__num_parse_i64(optarg, 1, 1000, &limit) != 0)
                return a2__cli_usage(cli, "--limit needs 1..1000, not '%s'",
                                     optarg);
        } else if ((rc = filter_opt(cli, c, optarg, &fa)) > 1) {
            return rc;
        }
    }
    rc = A2__CLI_OK;
    if (a2__cli_positionals(cli, argc, argv, 0, 1, "", &rc) != 0)
        return rc;
    bool one = optind < argc;
    if (one && (fa.any || after_text))
        return a2__cli_usage(cli, "dead-letters SESSION takes no filter; "
                                  "leave SESSION out to search every session");
    a2_dead_letter_key key;
    json_t *key_doc = NULL;
    if (after_text && (rc = parse_key(cli, after_text, &key_doc, &key)) != 0) {
        json_decref(key_doc);
        return rc;
    }
    a2_store *store = NULL;
    a2_heads out = {0};
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    int src = one ? a2_store_dead_letters(store, argv[optind], &out)
                  : a2_store_find_dead_letters(store, &fa.f,
                                               after_text ? &key : NULL,
                                               (size_t)limit, &out);
    if (src != 0) {
        rc = a2__cli_store_failed(cli, store, "dead-letters");
        goto done;
    }
    rc = print_heads(cli, &out, !one, one ? 0 : (size_t)limit);
done:
    json_decref(key_doc);
    a2_heads_free(&out);
    a2_store_close(store);
    return rc;
}

/* The head that SESSION CONSUMER INDEX (the positionals, counted already)
 * name, and the store opened: 0, or -1 with *rc. */
static int open_head(a2__cli *cli, char **argv, const char **session,
                     const char **consumer, int64_t *index, a2_store **store,
                     int *rc)
{
    if (a2__num_parse_i64(argv[optind + 2], 1, INT64_MAX, index) != 0) {
        *rc = a2__cli_usage(cli, "INDEX must be an event index >= 1, not '%s'",
                            argv[optind + 2]);
        return -1;
    }
    *session = argv[optind];
    *consumer = argv[optind + 1];
    *rc = a2__cli_store_open(cli, store);
    return *rc == A2__CLI_OK ? 0 : -1;
}

/* ── redrive ──────────────────────────────────────────────────────────── */

/* Dead letters redriven per call of a bulk redrive. */
#define BULK_PER_CALL 1000

static int redrive_matching(a2__cli *cli, const filter_args *fa, int action,
                            int64_t max, bool yes)
{
    const char *verb = action == A2_REDRIVE_RETRY ? "retry" : "skip";
    a2_store *store = NULL;
    int rc = a2__cli_store_open(cli, &store);
    if (rc != A2__CLI_OK)
        return rc;
    int64_t matching = 0, done = 0;
    bool more = false;
    if (a2_store_count_dead_letters(store, &fa->f, &matching) != 0) {
        rc = a2__cli_store_failed(cli, store, "redrive");
        goto out;
    }
    if (!yes) {
        if (cli->json)
            rc = a2__cli_print_json(
                    cli, json_pack("{s:s, s:I, s:I, s:b}", "action", verb,
                                   "matching", (json_int_t)matching, "count",
                                   (json_int_t)0, "done", 0));
        else
            a2__cli_line(cli->out,
                         "%" PRId64 " dead letters match; run again with "
                         "--yes to %s %s\n",
                         matching, verb,
                         max != INT64_MAX && max < matching ? "the first of "
                                                              "them"
                                                            : "them");
        goto out;
    }
    do {
        int64_t want = max - done < BULK_PER_CALL ? max - done : BULK_PER_CALL;
        a2_bulk_result r = {0};
        if (a2_store_redrive_matching(store, &fa->f, action, (size_t)want,
                                      &r) != 0) {
            rc = a2__cli_store_failed(cli, store, "redrive");
            if (done > 0)
                fprintf(cli->err, "a2: %" PRId64 " were redriven before\n",
                        done);
            goto out;
        }
        done += r.count;
        more = r.more;
        if (r.count == 0)
            break; /* what is left cannot be redriven */
    } while (more && done < max);
    if (cli->json)
        rc = a2__cli_print_json(cli, json_pack("{s:s, s:I, s:I, s:b}", "action",
                                               verb, "matching",
                                               (json_int_t)matching, "count",
                                               (json_int_t)done, "more", more));
    else
        a2__cli_line(cli->out, "%s: %" PRId64 " dead letters%s\n",
                     action == A2_REDRIVE_RETRY ? "retried" : "skipped", done,
                     more ? " (more match: run again)" : "");
out:
    a2_store_close(store);
    return rc;
}

int a2__cli_cmd_redrive(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            FILTER_OPTIONS,
            A2__CLI_FLAG("retry", 'r'),
            A2__CLI_FLAG("skip", 's'),
            A2__CLI_FLAG("all", 'A'),
            A2__CLI_ARG("max", 'm'),
            A2__CLI_FLAG("yes", 'y'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 redrive SESSION CONSUMER INDEX (--retry|--skip)\n"
            "       a2 redrive --all [FILTER] [--max N] [--yes] "
            "(--retry|--skip)\n"
            "  --retry runs a dead-lettered head again (failures reset);\n"
            "  --skip passes it, moving the cursor to its next head.\n"
            "  --all redrives every session's dead letters that match the "
            "filter,\n"
            "  oldest failure first, 1000 per transaction; without --yes it "
            "only\n"
            "  says how many match.\n" FILTER_HELP
            "  --max N           redrive at most N\n";
    int rc = A2__CLI_OK, c, action = 0;
    bool all = false, yes = false;
    int64_t max = INT64_MAX;
    filter_args fa;
    filter_init(&fa);
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        if (c == 'r' || c == 's') {
            int a = c == 'r' ? A2_REDRIVE_RETRY : A2_REDRIVE_SKIP;
            if (action && action != a)
                return a2__cli_usage(cli, "redrive takes --retry or --skip, "
                                          "not both");
            action = a;
        } else if (c == 'A') {
            all = true;
        } else if (c == 'y') {
            yes = true;
        } else if (c == 'm') {
            if (a2__num_parse_i64(optarg, 1, INT64_MAX, &max) != 0)
                return a2__cli_usage(cli, "--max needs a count >= 1, not '%s'",
                                     optarg);
        } else if ((rc = filter_opt(cli, c, optarg, &fa)) > 1) {
            return rc;
        }
    }
    rc = A2__CLI_OK;
    if (all) {
        if (a2__cli_positionals(cli, argc, argv, 0, 0, "", &rc) != 0)
            return rc;
        if (!action)
            return a2__cli_usage(cli, "redrive needs --retry or --skip");
        return redrive_matching(cli, &fa, action, max, yes);
    }
    if (fa.any || yes || max != INT64_MAX)
        return a2__cli_usage(cli, "filters, --max and --yes go with --all");
    if (a2__cli_positionals(cli, argc, argv, 3, 3,
                            "SESSION, CONSUMER and INDEX (or --all)",
                            &rc) != 0)
        return rc;
    if (!action)
        return a2__cli_usage(cli, "redrive needs --retry or --skip");
    const char *session, *consumer;
    int64_t index;
    a2_store *store = NULL;
    if (open_head(cli, argv, &session, &consumer, &index, &store, &rc) != 0)
        return rc;
    a2_redrive_result out = {0};
    if (a2_store_redrive(store, session, consumer, index, action, NULL, 0,
                         &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "redrive");
        goto done;
    }
    const char *verb = action == A2_REDRIVE_RETRY ? "retry" : "skip";
    if (cli->json) {
        json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:b,s:b}", "session", session,
                              "consumer", consumer, "index", (json_int_t)index,
                              "action", verb, "redriven", out.redriven,
                              "pending", out.has_pending);
        rc = a2__cli_print_json(cli, o);
    } else if (out.redriven) {
        a2__cli_line(cli->out, "%s %s #%lld: %s\n", session, consumer,
                     (long long)index,
                     action == A2_REDRIVE_RETRY ? "will run again" : "skipped");
    }
    if (!out.redriven && rc == A2__CLI_OK)
        rc = a2__cli_fail(cli, "no dead letter of %s at index %lld in %s",
                          consumer, (long long)index, session);
done:
    a2_store_close(store);
    return rc;
}

/* ── cancel ───────────────────────────────────────────────────────────── */

int a2__cli_cmd_cancel(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("reason", 'r'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 cancel SESSION CONSUMER INDEX [--reason TEXT]\n"
            "  passes a pending head without running it (waiting, delayed, "
            "held\n"
            "  for a retry, or under a lapsed claim); refused while a live "
            "claim\n"
            "  holds it. The audit shows \"cancelled\" (with the reason), then "
            "\"skipped\".\n";
    int rc = A2__CLI_OK, c;
    const char *reason = NULL;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        reason = optarg;
    }
    if (a2__cli_positionals(cli, argc, argv, 3, 3, "SESSION, CONSUMER and INDEX",
                            &rc) != 0)
        return rc;
    const char *session, *consumer;
    int64_t index;
    a2_store *store = NULL;
    if (open_head(cli, argv, &session, &consumer, &index, &store, &rc) != 0)
        return rc;
    a2_cancel_result out = {0};
    if (a2_store_cancel(store, session, consumer, index, reason, NULL, 0,
                        &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "cancel");
        goto done;
    }
    static const char *const names[] = {"", "cancelled", "running",
                                        "not_pending"};
    if (cli->json) {
        rc = a2__cli_print_json(
                cli, json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "session",
                               session, "consumer", consumer, "index",
                               (json_int_t)index, "outcome",
                               names[out.outcome], "holder",
                               a2__cli_json_str(out.holder), "expires_at",
                               a2__cli_json_i64(out.expires_at)));
        if (rc == A2__CLI_OK && out.outcome != A2_CANCEL_CANCELLED)
            rc = A2__CLI_RUNTIME;
    } else if (out.outcome == A2_CANCEL_CANCELLED) {
        a2__cli_line(cli->out, "%s %s #%" PRId64 ": cancelled\n", session,
                     consumer, index);
    } else if (out.outcome == A2_CANCEL_RUNNING) {
        char until[40];
        a2__cli_fmt_time(out.expires_at, until, sizeof until);
        rc = a2__cli_fail(cli,
                          "%s #%" PRId64 " in %s is running (held by %s until "
                          "%s); fail or complete it, or cancel once its "
                          "lease lapses",
                          consumer, index, session, out.holder ? out.holder : "?",
                          until);
    } else {
        rc = a2__cli_fail(cli, "no pending head of %s at index %" PRId64
                               " in %s (done, dead-lettered or never "
                               "targeted: see a2 cursors)",
                          consumer, index, session);
    }
done:
    a2_cancel_result_free(&out);
    a2_store_close(store);
    return rc;
}

/* ── backlog ──────────────────────────────────────────────────────────── */

/* An age in ms as "3d 4h", "2h 5m", "4m 10s", "12s" or "350ms". */
static void fmt_age(int64_t ms, char *buf, size_t len)
{
    if (ms < 0)
        ms = 0;
    int64_t s = ms / 1000;
    if (s == 0)
        snprintf(buf, len, "%" PRId64 "ms", ms);
    else if (s < 60)
        snprintf(buf, len, "%" PRId64 "s", s);
    else if (s < 3600)
        snprintf(buf, len, "%" PRId64 "m %" PRId64 "s", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, len, "%" PRId64 "h %" PRId64 "m", s / 3600,
                 s / 60 % 60);
    else
        snprintf(buf, len, "%" PRId64 "d %" PRId64 "h", s / 86400,
                 s / 3600 % 24);
}

int a2__cli_cmd_backlog(a2__cli *cli, int argc, char **argv)
{
    static const char help[] =
            "usage: a2 backlog [CONSUMER...]\n"
            "  each consumer's pending heads (running ones included), those "
            "held by\n"
            "  a claim, its dead letters and the age of its oldest pending "
            "head's\n"
            "  event; without names, every consumer that has any\n";
    int rc = A2__CLI_OK;
    if (a2__cli_no_options(cli, argc, argv, help, 0, argc, "", &rc) != 0)
        return rc;
    size_t n = (size_t)(argc - optind);
    a2_store *store = NULL;
    a2_backlog out = {0};
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        return rc;
    if (a2_store_backlog(store, n ? (const char *const *)argv + optind : NULL,
                         n, &out) != 0) {
        rc = a2__cli_store_failed(cli, store, "backlog");
        goto done;
    }
    int64_t now = a2__real_ms();
    if (cli->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < out.count; i++) {
            const a2_backlog_row *b = &out.items[i];
            json_array_append_new(
                    arr, json_pack("{s:s, s:I, s:I, s:I, s:o}", "consumer",
                                   b->consumer, "pending",
                                   (json_int_t)b->pending, "running",
                                   (json_int_t)b->running, "dead_letters",
                                   (json_int_t)b->dead_letters,
                                   "oldest_pending_at",
                                   a2__cli_json_i64(b->oldest_pending_at)));
        }
        rc = a2__cli_print_json(cli, arr);
        goto done;
    }
    if (out.count == 0) {
        fprintf(cli->out, "no backlog\n");
        goto done;
    }
    static const char *const titles[] = {"CONSUMER", "PENDING", "RUNNING",
                                         "DEAD LETTERS", "OLDEST PENDING"};
    a2__table *t = a2__table_new(5, titles, "lrrrr");
    for (size_t i = 0; t && i < out.count; i++) {
        const a2_backlog_row *b = &out.items[i];
        char p[24], r[24], d[24], age[32];
        snprintf(p, sizeof p, "%" PRId64, b->pending);
        snprintf(r, sizeof r, "%" PRId64, b->running);
        snprintf(d, sizeof d, "%" PRId64, b->dead_letters);
        if (b->oldest_pending_at == A2_STORE_NONE)
            snprintf(age, sizeof age, "-");
        else
            fmt_age(now - b->oldest_pending_at, age, sizeof age);
        const char *cells[] = {b->consumer, p, r, d, age};
        a2__table_add(t, cells);
    }
    rc = a2__cli_print_table(cli, t);
done:
    a2_backlog_free(&out);
    a2_store_close(store);
    return rc;
}
