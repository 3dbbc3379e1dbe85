/*
 * `a2 status`: the logical replication slots of the database (lag behind the
 * server's WAL, confirmed LSN, WAL retained by each slot and how much more
 * the server may keep before invalidating it) from pg_replication_slots on a
 * normal connection, and, with --metrics (or A2_METRICS), the consumer's
 * connected workers and lag from its Prometheus endpoint.
 */
#include "cli.h"

#include "../common/addr.h"
#include "../common/clock.h"
#include "../common/pgconn.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define METRICS_TIMEOUT_MS 3000
#define METRICS_MAX_BYTES  (4 * 1024 * 1024)

static const char slots_sql[] =
        "select s.slot_name, s.plugin, s.active::text, s.active_pid::text,"
        "       s.confirmed_flush_lsn::text, s.restart_lsn::text,"
        "       pg_current_wal_lsn()::text,"
        "       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)"
        "           ::bigint::text,"
        "       pg_wal_lsn_diff(pg_current_wal_lsn(), "
        "s.restart_lsn)::bigint::text,"
        "       s.wal_status, s.safe_wal_size::text,"
        "       extract(epoch from r.replay_lag)::numeric(12,3)::text,"
        "       current_setting('max_slot_wal_keep_size')"
        "  from pg_replication_slots s"
        "  left join pg_stat_replication r on r.pid = s.active_pid"
        " where s.database = current_database()"
        "   and ($1::text is null or s.slot_name = $1)"
        " order by s.slot_name";

static void human_bytes(const char *s, char *buf, size_t len)
{
    if (!s || !*s) {
        snprintf(buf, len, "-");
        return;
    }
    double v = strtod(s, NULL);
    const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while ((v >= 1024 || v <= -1024) && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
}

typedef struct {
    char *name;
    double value;
} metric;

typedef struct {
    metric *m;
    size_t n;
} metrics;

static void metrics_free(metrics *ms)
{
    for (size_t i = 0; i < ms->n; i++)
        free(ms->m[i].name);
    free(ms->m);
    ms->m = NULL;
    ms->n = 0;
}

/* Parses Prometheus text: "name{labels} value" lines, comments skipped.
 * Labelled samples are kept with their labels in the name. */
static int metrics_parse(const char *body, metrics *ms)
{
    const char *p = body;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0 && p[0] != '#') {
            char *line = strndup(p, n);
            if (!line)
                return -1;
            char *sp = strrchr(line, ' ');
            if (sp && sp != line) {
                *sp = '\0';
                char *end = NULL;
                double v = strtod(sp + 1, &end);
                if (end != sp + 1) {
                    metric *m = realloc(ms->m, (ms->n + 1) * sizeof *m);
                    if (!m) {
                        free(line);
                        return -1;
                    }
                    ms->m = m;
                    ms->m[ms->n].name = strdup(line);
                    ms->m[ms->n].value = v;
                    if (!ms->m[ms->n].name) {
                        free(line);
                        return -1;
                    }
                    ms->n++;
                }
            }
            free(line);
        }
        p += n + (nl ? 1 : 0);
    }
    return 0;
}

static const metric *metrics_find(const metrics *ms, const char *name)
{
    for (size_t i = 0; i < ms->n; i++)
        if (strcmp(ms->m[i].name, name) == 0)
            return &ms->m[i];
    return NULL;
}

/*
 * GET /metrics from HOST:PORT (also accepts tcp:HOST:PORT and
 * http://HOST:PORT[/path]). Returns the body (free it) or NULL with err.
 */
static char *fetch_metrics(const char *spec, char *err, size_t errlen)
{
    char path[256] = "/metrics";
    const char *slash;
    size_t hp_len;
    const char *s = a2__cli_http_hostport(spec, &hp_len, &slash);
    if (slash)
        snprintf(path, sizeof path, "%s", slash);
    char hp[300];
    if (hp_len == 0 || hp_len >= sizeof hp) {
        snprintf(err, errlen, "bad metrics address '%s' (HOST:PORT)", spec);
        return NULL;
    }
    memcpy(hp, s, hp_len);
    hp[hp_len] = '\0';
    a2__addr a;
    int rc = a2__addr_split(hp, &a);
    if (rc != A2__ADDR_OK) {
        if (rc == A2__ADDR_ENOMEM)
            snprintf(err, errlen, "out of memory");
        else
            snprintf(err, errlen, "bad metrics address '%s' (HOST:PORT)", spec);
        return NULL;
    }

    char name[1024];
    snprintf(name, sizeof name, "metrics at %s", spec);
    char *body = NULL, *buf = NULL;
    int64_t deadline = a2__mono_ms() + METRICS_TIMEOUT_MS;
    int fd = a2__addr_dial(&a, name, 0, err, errlen);
    if (fd < 0) {
        a2__addr_clear(&a);
        return NULL;
    }
    char req[600];
    int rn =
            snprintf(req, sizeof req,
                     "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, a.host);
    if (send(fd, req, (size_t)rn, MSG_NOSIGNAL) != rn) {
        snprintf(err, errlen, "could not send to metrics at %s: %s", spec,
                 strerror(errno));
        goto done;
    }
    int errnum = 0;
    switch (a2__cli_http_read(fd, deadline, METRICS_MAX_BYTES, &buf, &errnum)) {
    case A2__CLI_HTTP_ETIMEOUT:
        snprintf(err, errlen, "metrics at %s did not answer in %d ms", spec,
                 METRICS_TIMEOUT_MS);
        goto done;
    case A2__CLI_HTTP_ETOOBIG:
        snprintf(err, errlen, "metrics at %s: answer too large", spec);
        goto done;
    case A2__CLI_HTTP_ENOMEM:
        snprintf(err, errlen, "out of memory");
        goto done;
    case A2__CLI_HTTP_EREAD:
        snprintf(err, errlen, "could not read metrics at %s: %s", spec,
                 strerror(errnum));
        goto done;
    default:
        break;
    }
    if (!buf) {
        snprintf(err, errlen, "metrics at %s: empty answer", spec);
        goto done;
    }
    if (strncmp(buf, "HTTP/", 5) != 0 || !strstr(buf, " 200")) {
        char *eol = strpbrk(buf, "\r\n");
        if (eol)
            *eol = '\0';
        snprintf(err, errlen, "metrics at %s answered '%.80s'", spec, buf);
        goto done;
    }
    body = a2__cli_http_body(buf, err, errlen);
done:
    free(buf);
    close(fd);
    a2__addr_clear(&a);
    return body;
}

/* The first metric whose name is one of names. */
static const metric *find_any(const metrics *ms, const char *const *names)
{
    for (; *names; names++) {
        const metric *m = metrics_find(ms, *names);
        if (m)
            return m;
    }
    return NULL;
}

/* "what: " and the first line of conn's error: A2__CLI_RUNTIME. */
static int pg_failed(a2__cli *cli, PGconn *conn, const char *what)
{
    const char *m = PQerrorMessage(conn);
    return a2__cli_fail(cli, "%s: %.*s", what, (int)strcspn(m, "\n"), m);
}

int a2__cli_cmd_status(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("slot", 's'),
            A2__CLI_ARG("metrics", 'm'),
            A2__CLI_OPTS_END,
    };
    static const char help[] =
            "usage: a2 [--db CONNINFO] [--json] status [--slot NAME] "
            "[--metrics HOST:PORT]\n"
            "  the database's logical slots: lag, confirmed LSN, retained "
            "WAL;\n"
            "  with --metrics (or A2_METRICS), a2-consumer's workers and "
            "lag\n";
    const char *slot = NULL;
    const char *metrics_at = getenv("A2_METRICS");
    int c, rc = A2__CLI_OK;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help, &rc)) != -1) {
        if (c == -2)
            return rc;
        if (c == 's')
            slot = optarg;
        else if (c == 'm')
            metrics_at = optarg;
    }
    if (optind < argc)
        return a2__cli_usage(cli, "status takes no argument (got '%s')",
                             argv[optind]);
    if (metrics_at && !*metrics_at)
        metrics_at = NULL;

    PGresult *res = NULL;
    char *body = NULL;
    metrics ms = {0};
    json_t *doc = NULL;
    PGconn *conn = a2__connect(cli->db);
    if (PQstatus(conn) != CONNECTION_OK) {
        rc = pg_failed(cli, conn, "could not connect to the database");
        goto done;
    }
    const char *params[1] = {slot};
    res = PQexecParams(conn, slots_sql, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        rc = pg_failed(cli, conn, "could not read pg_replication_slots");
        goto done;
    }
    char merr[512] = "";
    if (metrics_at) {
        body = fetch_metrics(metrics_at, merr, sizeof merr);
        if (body && metrics_parse(body, &ms) != 0) {
            rc = a2__cli_fail(cli, "out of memory");
            goto done;
        }
    }
    static const char *const workers_names[] = {
            "a2_workers", "a2_consumer_workers", "a2_workers_connected", NULL};
    static const char *const lag_bytes_names[] = {
            "a2_lag_bytes", "a2_consumer_lag_bytes", "a2_replication_lag_bytes",
            NULL};
    static const char *const lag_seconds_names[] = {
            "a2_lag_seconds", "a2_consumer_lag_seconds",
            "a2_replication_lag_seconds", NULL};
    const metric *mw = find_any(&ms, workers_names);
    const metric *mlb = find_any(&ms, lag_bytes_names);
    const metric *mls = find_any(&ms, lag_seconds_names);
    const metric *mup = metrics_find(&ms, "a2_consumer_up");
    int nslots = PQntuples(res);

    if (cli->json) {
        doc = json_object();
        json_t *arr = json_array();
        json_object_set_new(doc, "slots", arr);
        for (int i = 0; i < nslots; i++) {
            json_t *o = json_object();
            static const char *const keys[] = {"slot",
                                               "plugin",
                                               "active",
                                               "active_pid",
                                               "confirmed_lsn",
                                               "restart_lsn",
                                               "current_lsn",
                                               "lag_bytes",
                                               "retained_bytes",
                                               "wal_status",
                                               "safe_wal_size",
                                               "replay_lag_seconds",
                                               "max_slot_wal_keep_size"};
            for (int k = 0; k < 13; k++) {
                json_t *v;
                if (PQgetisnull(res, i, k))
                    v = json_null();
                else if (k == 2)
                    v = json_boolean(strcmp(PQgetvalue(res, i, k), "true") ==
                                     0);
                else if (k == 3 || k == 7 || k == 8 || k == 10)
                    v = json_integer(strtoll(PQgetvalue(res, i, k), NULL, 10));
                else if (k == 11)
                    v = json_real(strtod(PQgetvalue(res, i, k), NULL));
                else
                    v = json_string(PQgetvalue(res, i, k));
                json_object_set_new(o, keys[k], v);
            }
            json_array_append_new(arr, o);
        }
        if (metrics_at) {
            json_t *m = json_object();
            json_object_set_new(m, "address", json_string(metrics_at));
            if (body) {
                json_object_set_new(m, "up",
                                    mup ? json_boolean(mup->value > 0)
                                        : json_null());
                json_object_set_new(m, "workers",
                                    mw ? json_integer((json_int_t)mw->value)
                                       : json_null());
                json_object_set_new(m, "lag_bytes",
                                    mlb ? json_integer((json_int_t)mlb->value)
                                        : json_null());
                json_object_set_new(m, "lag_seconds",
                                    mls ? json_real(mls->value) : json_null());
            } else {
                json_object_set_new(m, "error", json_string(merr));
            }
            json_object_set_new(doc, "consumer", m);
        }
        if (json_dumpf(doc, cli->out, JSON_COMPACT) != 0) {
            rc = a2__cli_fail(cli, "could not write output");
            goto done;
        }
        fputc('\n', cli->out);
    } else {
        if (nslots == 0) {
            if (slot)
                fprintf(cli->out,
                        "no replication slot named %s in this "
                        "database\n",
                        slot);
            else
                fprintf(cli->out, "no replication slot in this database "
                                  "(a2-consumer creates one when it "
                                  "starts)\n");
        } else {
            static const char *const titles[] = {
                    "SLOT",       "ACTIVE",   "CONFIRMED",  "CURRENT",  "LAG",
                    "REPLAY LAG", "RETAINED", "WAL STATUS", "SAFE LEFT"};
            a2__table *t = a2__table_new(9, titles, "llllrrrlr");
            for (int i = 0; t && i < nslots; i++) {
                char lag[32], ret[32], safe[32], replay[32];
                human_bytes(PQgetvalue(res, i, 7), lag, sizeof lag);
                human_bytes(PQgetvalue(res, i, 8), ret, sizeof ret);
                if (PQgetisnull(res, i, 10))
                    snprintf(safe, sizeof safe, "unbounded");
                else
                    human_bytes(PQgetvalue(res, i, 10), safe, sizeof safe);
                if (PQgetisnull(res, i, 11))
                    snprintf(replay, sizeof replay, "-");
                else
                    snprintf(replay, sizeof replay, "%s s",
                             PQgetvalue(res, i, 11));
                const char *active = strcmp(PQgetvalue(res, i, 2), "true") == 0
                                             ? "yes"
                                             : "no";
                const char *cells[] = {
                        PQgetvalue(res, i, 0),
                        active,
                        PQgetisnull(res, i, 4) ? NULL : PQgetvalue(res, i, 4),
                        PQgetvalue(res, i, 6),
                        PQgetisnull(res, i, 7) ? NULL : lag,
                        replay,
                        PQgetisnull(res, i, 8) ? NULL : ret,
                        PQgetisnull(res, i, 9) ? NULL : PQgetvalue(res, i, 9),
                        safe};
                a2__table_add(t, cells);
            }
            if ((rc = a2__cli_print_table(cli, t)) != A2__CLI_OK)
                goto done;
            fprintf(cli->out, "max_slot_wal_keep_size: %s\n",
                    PQgetvalue(res, 0, 12));
        }
        if (metrics_at) {
            if (!body) {
                a2__cli_line(cli->out, "consumer metrics: unavailable (%s)\n",
                             merr);
            } else {
                fprintf(cli->out, "consumer at %s:", metrics_at);
                if (mup)
                    fprintf(cli->out, " %s,",
                            mup->value > 0 ? "streaming" : "not streaming");
                if (mw)
                    fprintf(cli->out, " %lld connected worker%s",
                            (long long)mw->value, mw->value == 1 ? "" : "s");
                else
                    fprintf(cli->out, " workers unknown");
                if (mlb) {
                    char b[32], v[32];
                    snprintf(v, sizeof v, "%.0f", mlb->value);
                    human_bytes(v, b, sizeof b);
                    fprintf(cli->out, ", lag %s", b);
                }
                if (mls)
                    fprintf(cli->out, ", %.3f s", mls->value);
                fputc('\n', cli->out);
            }
        }
    }
    if (metrics_at && !body)
        rc = a2__cli_fail(cli, "%s", merr);
done:
    json_decref(doc);
    metrics_free(&ms);
    free(body);
    PQclear(res);
    PQfinish(conn);
    return rc;
}
