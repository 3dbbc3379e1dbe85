/*
 * `a2 state SESSION REDUCER [--at N]` and `a2 presence NS [--follow]`:
 * reducer snapshots and presence registers (a2/state.h).
 *
 * `a2 presence NS --follow` subscribes at a2-consumer, waits for the pong of
 * a ping sent after the subscription (from then on every change committed
 * comes as a patch), reads the namespace through the store (its state and
 * the WAL position it is exact at), prints it, then prints the patches whose
 * lsn lies above that position: nothing missed, nothing twice.
 */
#include "../common/addr.h"
#include "../common/clock.h"
#include "../common/num.h"
#include "a2/state.h"
#include "a2/store.h"
#include "a2/wire.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PONG_TIMEOUT_MS 10000
#define PING_EVERY_MS   15000
#define MAX_BUFFERED    100000 /* patches held while the read runs */
#define REAP_EVERY_MS   1000   /* --follow reaps its namespace this often */
#define REAP_LIMIT      1000

/* ── state ────────────────────────────────────────────────────────────── */

int a2__cli_cmd_state(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("at", 'a'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 state SESSION REDUCER [--at N]\n"
            "  the reducer's latest snapshot, or with --at the newest version\n"
            "  at or below event index N (the latest or one a pin keeps)\n";
    int rc = A2__CLI_OK, c;
    int64_t at = A2_STORE_NONE;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        if (c == 'a' && a2__num_parse_i64(optarg, 0, INT64_MAX, &at) != 0)
            return a2__cli_usage(cli, "--at needs an index >= 0, not '%s'",
                                 optarg);
    }
    if (a2__cli_positionals(cli, argc, argv, 2, 2, "a SESSION and a REDUCER",
                            &rc) != 0)
        return rc;
    const char *session = argv[optind], *reducer = argv[optind + 1];
    a2_store *store = NULL;
    a2_state st = {0};
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    if (a2_store_read_state(store, session, reducer, at, &st) != 0) {
        rc = a2__cli_store_failed(cli, store, "state");
        goto done;
    }
    if (cli->json) {
        json_t *o = json_null();
        if (st.found)
            o = json_pack("{s:s, s:s, s:I, s:I, s:o}", "session", session,
                          "reducer", reducer, "up_to_index",
                          (json_int_t)st.up_to_index, "written_at",
                          (json_int_t)st.written_at, "state",
                          a2__cli_json_text(st.state));
        rc = a2__cli_print_json(cli, o);
    } else if (!st.found) {
        fprintf(cli->out, "no snapshot\n");
    } else {
        char when[64];
        a2__cli_fmt_ms(st.written_at, when, sizeof when);
        a2__cli_line(cli->out, "up_to_index %" PRId64 "  written %s\n",
                     st.up_to_index, when);
        a2__cli_line(cli->out, "%s\n", st.state);
    }
done:
    a2_state_free(&st);
    a2_store_close(store);
    return rc;
}

/* ── presence ─────────────────────────────────────────────────────────── */

static json_t *entry_json(const char *ns, const a2_presence_entry *e)
{
    return json_pack(
            "{s:s, s:s, s:s, s:s, s:o, s:o, s:I, s:I}", "kind", "state", "ns",
            ns, "participant", e->participant, "field", e->field, "value",
            a2__cli_json_text(e->value), "seen",
            e->seen == A2_STORE_NONE ? json_null() : json_integer(e->seen),
            "at", (json_int_t)e->at, "expires_at", (json_int_t)e->expires_at);
}

static int print_state(a2__cli *cli, const char *ns, const a2_presence *p,
                       int follow)
{
    int rc = A2__CLI_OK;
    if (cli->json && !follow) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < p->count; i++)
            json_array_append_new(arr, entry_json(ns, &p->items[i]));
        return a2__cli_print_json(cli, json_pack("{s:s, s:I, s:o}", "ns", ns, "lsn",
                                         (json_int_t)p->lsn, "fields", arr));
    }
    if (cli->json) {
        for (size_t i = 0; i < p->count && rc == A2__CLI_OK; i++)
            rc = a2__cli_print_json(cli, entry_json(ns, &p->items[i]));
        if (rc == A2__CLI_OK)
            rc = a2__cli_print_json(cli, json_pack("{s:s, s:s, s:I, s:I}", "kind",
                                           "snapshot", "ns", ns, "lsn",
                                           (json_int_t)p->lsn, "count",
                                           (json_int_t)p->count));
        return rc;
    }
    if (p->count == 0) {
        a2__cli_line(cli->out, "no presence in %s\n", ns);
    } else {
        static const char *const titles[] = {"PARTICIPANT", "FIELD", "VALUE",
                                             "AT", "EXPIRES"};
        a2__table *t = a2__table_new(5, titles, "lllll");
        for (size_t i = 0; t && i < p->count; i++) {
            char at[64], exp[64];
            a2__cli_fmt_ms(p->items[i].at, at, sizeof at);
            a2__cli_fmt_ms(p->items[i].expires_at, exp, sizeof exp);
            const char *cells[] = {p->items[i].participant, p->items[i].field,
                                   p->items[i].value, at, exp};
            a2__table_add(t, cells);
        }
        if ((rc = a2__cli_print_table(cli, t)) != A2__CLI_OK)
            return rc;
    }
    if (follow)
        a2__cli_line(cli->out, "-- following %s after %" PRIu64 "\n", ns,
                     p->lsn);
    return A2__CLI_OK;
}

static int print_patch(a2__cli *cli, const char *ns, const char *participant,
                       const char *fields, uint64_t lsn)
{
    if (cli->json) {
        json_t *f = json_loads(fields, 0, NULL);
        return a2__cli_print_json(
                cli, json_pack("{s:s, s:s, s:s, s:o, s:I}", "kind", "patch",
                               "ns", ns, "participant", participant, "fields",
                               f ? f : json_object(), "lsn", (json_int_t)lsn));
    }
    a2__cli_line(cli->out, "%s %s\n", participant, fields);
    return A2__CLI_OK;
}

/* Connects to "unix:PATH" or "tcp:HOST:PORT" ("tcp:[::1]:PORT"); -1 with
 * err set. */
static int dial(const char *addr, char *err, size_t errlen)
{
    a2__addr a;
    int fd = -1, rc = a2__addr_parse(addr, &a);
    if (rc == A2__ADDR_OK)
        fd = a2__addr_dial(&a, addr, 0, err, errlen);
    else if (rc == A2__ADDR_ENOMEM)
        snprintf(err, errlen, "out of memory");
    else
        snprintf(err, errlen, "bad address %s", addr);
    a2__addr_clear(&a);
    return fd;
}

static int send_all(int fd, a2_wire_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t n = send(fd, b->data + off, b->len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    a2_wire_buf_consume(b, b->len);
    return 0;
}

static char *read_token(a2__cli *cli, const char *path, int *rc)
{
    char err[512];
    char *tok = a2_wire_read_token(path, err, sizeof err);
    if (!tok)
        *rc = a2__cli_fail(cli, "%s", err);
    return tok;
}

/* A patch received before the read. */
typedef struct {
    char *participant;
    char *fields;
    uint64_t lsn;
} held_patch;

typedef struct {
    a2__cli *cli;
    const char *ns;
    int fd;
    a2_wire_reader *rd;
    held_patch *held;
    size_t nheld, capheld;
    int ponged;      /* the subscription is in effect */
    uint64_t after;  /* patches at or below it are in the read */
    int have_state;  /* the read is printed: print patches as they come */
    int64_t pong_by; /* a ping is out: its answer is due by then (0: none) */
    uint64_t ping_id;
} follower;

static void free_held(follower *fw)
{
    for (size_t i = 0; i < fw->nheld; i++) {
        free(fw->held[i].participant);
        free(fw->held[i].fields);
    }
    free(fw->held);
    fw->held = NULL;
    fw->nheld = fw->capheld = 0;
}

/* Handles one message; A2__CLI_OK, or an exit status. */
static int on_message(follower *fw, const a2_wire_msg *m)
{
    a2__cli *cli = fw->cli;
    switch (m->type) {
    case A2_WIRE_PONG:
        if (m->id == fw->ping_id) {
            fw->pong_by = 0;
            fw->ponged = 1;
        }
        return A2__CLI_OK;
    case A2_WIRE_ERROR:
        return a2__cli_fail(cli, "a2-consumer refused: %s (%s)", m->message,
                            m->code);
    case A2_WIRE_PRESENCE:
        if (strcmp(m->ns, fw->ns) != 0)
            return A2__CLI_OK;
        if (fw->have_state) {
            if (m->lsn <= fw->after)
                return A2__CLI_OK;
            return print_patch(cli, fw->ns, m->participant, m->fields_json,
                               m->lsn);
        }
        if (fw->nheld == MAX_BUFFERED)
            return a2__cli_fail(cli,
                                "more than %d patches arrived during the "
                                "read",
                                MAX_BUFFERED);
        if (fw->nheld == fw->capheld) {
            size_t cap = fw->capheld ? fw->capheld * 2 : 64;
            held_patch *h = realloc(fw->held, cap * sizeof *h);
            if (!h)
                return a2__cli_fail(cli, "out of memory");
            fw->held = h;
            fw->capheld = cap;
        }
        held_patch *h = &fw->held[fw->nheld];
        h->participant = strdup(m->participant);
        h->fields = strdup(m->fields_json);
        h->lsn = m->lsn;
        if (!h->participant || !h->fields) {
            free(h->participant);
            free(h->fields);
            return a2__cli_fail(cli, "out of memory");
        }
        fw->nheld++;
        return A2__CLI_OK;
    default: /* welcome, wake, resync...: not ours */
        return A2__CLI_OK;
    }
}

/* Reads what the socket has (waiting up to timeout_ms) and handles it. */
static int pump(follower *fw, int timeout_ms)
{
    struct pollfd p = {.fd = fw->fd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0)
        return errno == EINTR
                       ? A2__CLI_OK
                       : a2__cli_fail(fw->cli, "poll: %s", strerror(errno));
    if (n == 0)
        return A2__CLI_OK;
    char buf[65536];
    ssize_t got = recv(fw->fd, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR)
        return A2__CLI_OK;
    if (got <= 0)
        return a2__cli_fail(fw->cli, "a2-consumer closed the connection%s%s",
                            got < 0 ? ": " : "",
                            got < 0 ? strerror(errno) : "");
    if (a2_wire_reader_feed(fw->rd, buf, (size_t)got) != 0)
        return a2__cli_fail(fw->cli, "out of memory");
    for (;;) {
        a2_wire_msg m;
        int r = a2_wire_reader_next(fw->rd, &m);
        if (r == 0)
            return A2__CLI_OK;
        if (r < 0)
            return a2__cli_fail(fw->cli, "bad frame from a2-consumer: %s",
                                a2_wire_reader_error(fw->rd));
        int rc = on_message(fw, &m);
        if (rc != A2__CLI_OK)
            return rc;
    }
}

static int send_ping(follower *fw, a2_wire_buf *out)
{
    fw->ping_id++;
    if (a2_wire_encode_ping(out, fw->ping_id) != 0 || send_all(fw->fd, out))
        return a2__cli_fail(fw->cli, "could not write to a2-consumer");
    fw->pong_by = a2__mono_ms() + PONG_TIMEOUT_MS;
    return A2__CLI_OK;
}

static volatile sig_atomic_t stop_follow;

static void on_stop(int sig)
{
    (void)sig;
    stop_follow = 1;
}

static int follow(a2__cli *cli, a2_store *store, const char *ns,
                  const char *addr, const char *token)
{
    char err[512];
    follower fw = {.cli = cli, .ns = ns, .fd = -1};
    a2_wire_buf out = {0};
    a2_presence p = {0};
    int rc = A2__CLI_OK;
    fw.fd = dial(addr, err, sizeof err);
    if (fw.fd < 0)
        return a2__cli_fail(cli, "%s", err);
    fw.rd = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    char name[64];
    snprintf(name, sizeof name, "a2-presence-%ld", (long)getpid());
    if (!fw.rd || a2_wire_encode_hello(&out, name, token) != 0 ||
        a2_wire_encode_presence_sub(&out, ns) != 0) {
        rc = a2__cli_fail(cli, "could not encode the subscription for %s", ns);
        goto done;
    }
    if (send_all(fw.fd, &out) != 0) {
        rc = a2__cli_fail(cli, "could not write to a2-consumer");
        goto done;
    }
    if ((rc = send_ping(&fw, &out)) != A2__CLI_OK)
        goto done;
    /* 1. the subscription is in effect once the ping's pong is back */
    while (!fw.ponged && rc == A2__CLI_OK) {
        int64_t left = fw.pong_by - a2__mono_ms();
        if (left <= 0) {
            rc = a2__cli_fail(cli, "no answer from a2-consumer at %s", addr);
            goto done;
        }
        rc = pump(&fw, (int)left);
    }
    if (rc != A2__CLI_OK)
        goto done;
    /* 2. the state, exact at p.lsn */
    if (a2_store_presence_read(store, ns, &p) != 0) {
        rc = a2__cli_store_failed(cli, store, "presence");
        goto done;
    }
    fw.after = p.lsn;
    if ((rc = print_state(cli, ns, &p, 1)) != A2__CLI_OK)
        goto done;
    /* 3. the patches held, then the stream: only those after the read */
    for (size_t i = 0; i < fw.nheld && rc == A2__CLI_OK; i++)
        if (fw.held[i].lsn > fw.after)
            rc = print_patch(cli, ns, fw.held[i].participant, fw.held[i].fields,
                             fw.held[i].lsn);
    free_held(&fw);
    fw.have_state = 1;
    fflush(cli->out);
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int64_t next_ping = a2__mono_ms() + PING_EVERY_MS;
    int64_t next_reap = a2__mono_ms() + REAP_EVERY_MS;
    int reap_failing = 0;
    while (rc == A2__CLI_OK && !stop_follow) {
        rc = pump(&fw, 200);
        if (rc == A2__CLI_OK && a2__mono_ms() >= next_reap) {
            /* expiry reaches every subscriber as the reap's patches */
            int64_t n = 0;
            if (a2_store_presence_reap(store, ns, REAP_LIMIT, &n) != 0) {
                if (!reap_failing)
                    a2__cli_line(cli->err,
                                 "a2: warning: reaping %s failed: %s\n", ns,
                                 a2_store_last_error(store)->message);
                reap_failing = 1;
            } else {
                reap_failing = 0;
            }
            next_reap = a2__mono_ms() + (n == REAP_LIMIT ? 0 : REAP_EVERY_MS);
        }
        if (fflush(cli->out) != 0 && rc == A2__CLI_OK)
            rc = a2__cli_fail(cli, "could not write output: %s",
                              strerror(errno));
        int64_t now = a2__mono_ms();
        if (rc == A2__CLI_OK && fw.pong_by && now > fw.pong_by)
            rc = a2__cli_fail(cli, "a2-consumer stopped answering");
        if (rc == A2__CLI_OK && !fw.pong_by && now >= next_ping) {
            rc = send_ping(&fw, &out);
            next_ping = now + PING_EVERY_MS;
        }
    }
done:
    free_held(&fw);
    a2_presence_free(&p);
    a2_wire_buf_free(&out);
    a2_wire_reader_free(fw.rd);
    if (fw.fd >= 0)
        close(fw.fd);
    return rc;
}

int a2__cli_cmd_presence(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_FLAG("follow", 'f'),
            A2__CLI_ARG("connect", 'C'),
            A2__CLI_ARG("token-file", 'T'),
            A2__CLI_FLAG("reap", 'r'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 presence NS [--follow [--connect ADDR] [--token-file "
            "F]]\n"
            "       a2 presence NS --reap\n"
            "  the namespace's live presence fields (expired ones are "
            "deleted)\n"
            "  --reap         only delete the expired fields, print how many\n"
            "  --follow       then every change, from a2-consumer (--connect\n"
            "                 unix:PATH or tcp:HOST:PORT, default "
            "$A2_CONSUMER),\n"
            "                 with nothing missed or repeated between the "
            "two;\n"
            "                 reaps the namespace every second, so expiry\n"
            "                 reaches every subscriber\n"
            "  --token-file F token for a tcp: address\n";
    int rc = A2__CLI_OK, c, follow_on = 0, reap = 0;
    const char *addr = getenv("A2_CONSUMER"), *token_file = NULL;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        if (c == 'f')
            follow_on = 1;
        else if (c == 'C')
            addr = optarg;
        else if (c == 'T')
            token_file = optarg;
        else if (c == 'r')
            reap = 1;
    }
    if (reap && follow_on)
        return a2__cli_usage(cli, "--reap and --follow do not go together");
    if (a2__cli_positionals(cli, argc, argv, 1, 1, "a namespace", &rc) != 0)
        return rc;
    const char *ns = argv[optind];
    if (follow_on) {
        if (!addr || !*addr)
            return a2__cli_usage(cli, "--follow needs --connect ADDR (or "
                                      "A2_CONSUMER)");
        if (!a2__addr_kind(addr))
            return a2__cli_usage(cli,
                                 "--connect needs unix:PATH or "
                                 "tcp:HOST:PORT, not '%s'",
                                 addr);
        if (a2__addr_kind(addr) == A2__ADDR_TCP && !token_file)
            return a2__cli_usage(cli, "--connect tcp: needs --token-file");
    }
    char *token = NULL;
    if (follow_on && token_file && !(token = read_token(cli, token_file, &rc)))
        return rc;
    a2_store *store = NULL;
    a2_presence p = {0};
    if ((rc = a2__cli_store_open(cli, &store)) != A2__CLI_OK)
        goto done;
    if (follow_on) {
        rc = follow(cli, store, ns, addr, token);
        goto done;
    }
    if (reap) {
        int64_t n = 0, total = 0;
        do {
            if (a2_store_presence_reap(store, ns, REAP_LIMIT, &n) != 0) {
                rc = a2__cli_store_failed(cli, store, "presence --reap");
                goto done;
            }
            total += n;
        } while (n == REAP_LIMIT);
        if (cli->json)
            rc = a2__cli_print_json(cli, json_pack("{s:s, s:I}", "ns", ns, "reaped",
                                           (json_int_t)total));
        else
            a2__cli_line(cli->out, "reaped %" PRId64 " expired fields in %s\n",
                         total, ns);
        goto done;
    }
    if (a2_store_presence_read(store, ns, &p) != 0) {
        rc = a2__cli_store_failed(cli, store, "presence");
        goto done;
    }
    rc = print_state(cli, ns, &p, 0);
done:
    a2_presence_free(&p);
    a2_store_close(store);
    free(token);
    return rc;
}
