/*
 * liba2store: presence registers (a2/state.h): field-wise last-writer-wins
 * with a TTL on the store's clock, tombstones, reads exact at a WAL position,
 * and reaping of expired rows.
 */
#include "a2/state.h"
#include "store_int.h"
#include "store_sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REAP 100000

/* clang-format off */

#define NS P_TEXT("ns")
#define NS_LOCK(fn)                                                         \
    fn "(24882, hashtext(" NS "))"
#define NS_LOCK_OF(ns)                                                      \
    "pg_advisory_xact_lock_shared(24882, hashtext(" ns "))"

/*
 * Each field as a row (a tombstone's value is JSON null), under the
 * namespace's shared lock: an unexpired stored row with a strictly newer
 * `at` survives, anything else is replaced. The rows that won, in order.
 */
#define SQL_PRESENCE_WRITE                                                  \
    "with lock as materialized (select " NS_LOCK("pg_advisory_xact_lock_"   \
    "shared") "::text as held), input as materialized (select e.n, "        \
    "e.item->>'f' as field, coalesce(e.item->'v', 'null'::jsonb) as value " \
    "from jsonb_array_elements($1->'fields') with ordinality as e(item, "   \
    "n)), written as (insert into a2_presence (ns, participant, field, "    \
    "value, seen, at, expires_at) select " NS ", " P_TEXT("participant")    \
    ", input.field, input.value, " P_BIGINT("seen") ", " P_BIGINT("at")     \
    ", " P_BIGINT("expires") " from input, lock where lock.held is not "    \
    "null on conflict (ns, participant, field) do update set value = "      \
    "excluded.value, seen = excluded.seen, at = excluded.at, expires_at = " \
    "excluded.expires_at where a2_presence.at <= excluded.at or "           \
    "a2_presence.expires_at <= " P_BIGINT("now") " returning "              \
    "a2_presence.participant, a2_presence.field, a2_presence.value, "       \
    "a2_presence.seen, a2_presence.at, a2_presence.expires_at) select "     \
    "jsonb_build_object('participant', written.participant, 'field', "      \
    "written.field, 'value', written.value::text, 'seen', written.seen, "   \
    "'at', written.at, 'expires_at', written.expires_at) from written "     \
    "join input on input.field = written.field order by input.n"

/* The namespace's exclusive lock: no write of it is in flight or starts. */
#define SQL_PRESENCE_LOCK                                                   \
    "select jsonb_build_object('locked', true) from "                       \
    NS_LOCK("pg_advisory_xact_lock")

/*
 * In one snapshot after the lock: deletes the namespace's expired rows,
 * returns the live ones, then the WAL insert position (the last row).
 */
#define SQL_PRESENCE_READ                                                   \
    "with reaped as (delete from a2_presence p where p.ns = " NS " and "    \
    "p.expires_at <= " P_BIGINT("now") " returning 1), live as (select "    \
    "p.participant, p.field, p.value, p.seen, p.at, p.expires_at from "     \
    "a2_presence p where p.ns = " NS " and p.expires_at > "                 \
    P_BIGINT("now") " and p.value <> 'null'::jsonb) select r from (select " \
    "0 as ord, live.participant as pa, live.field as fi, "                  \
    "jsonb_build_object('participant', live.participant, 'field', "         \
    "live.field, 'value', live.value::text, 'seen', live.seen, 'at', "      \
    "live.at, 'expires_at', live.expires_at) as r from live union all "     \
    "select 1, null, null, jsonb_build_object('lsn', "                      \
    "(pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text, 'reaped', "       \
    "(select count(*) from reaped))) rows order by ord, pa collate \"C\", " \
    "fi collate \"C\""

/*
 * At most "limit" expired rows of namespace "ns" (null: of any). The shared
 * lock of a row's namespace is taken before the row's lock, as writes do,
 * so a reap never commits inside a read's window and never closes a cycle
 * with a writer and a waiting reader.
 */
#define SQL_PRESENCE_REAP                                                   \
    "with spaces as materialized (select distinct p.ns from a2_presence p " \
    "where p.expires_at <= " P_BIGINT("now") " and (" NS " is null or "     \
    "p.ns = " NS ") limit " P_BIGINT("limit") "), locked as materialized "  \
    "(select spaces.ns from spaces where " NS_LOCK_OF("spaces.ns")          \
    "::text is not null), doomed as materialized (select p.ctid from "      \
    "a2_presence p where p.expires_at <= " P_BIGINT("now") " and p.ns in "  \
    "(select locked.ns from locked) order by p.expires_at limit "           \
    P_BIGINT("limit") " for update skip locked), gone as (delete from "     \
    "a2_presence p using doomed where p.ctid = doomed.ctid returning 1) "   \
    "select jsonb_build_object('reaped', (select count(*) from gone))"

/* clang-format on */

static int check_name(a2_store *s, const char *what, const char *v)
{
    if (!v || !*v)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s must not be empty",
                              what);
    if (strlen(v) > A2_STORE_MAX_NAME)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "%s is longer than %d bytes", what,
                              A2_STORE_MAX_NAME);
    json_t *probe = json_string(v); /* NULL when not UTF-8 */
    if (!probe)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "%s is not valid UTF-8",
                              what);
    json_decref(probe);
    return 0;
}

static bool set(json_t *o, const char *k, json_t *v)
{
    return v && json_object_set_new(o, k, v) == 0;
}

static int nomem(a2_store *s)
{
    return a2__store_fail(s, A2_ESTORE_NOMEM, "out of memory");
}

void a2_presence_free(a2_presence *r)
{
    if (!r)
        return;
    a2__arena_free(r->arena_);
    memset(r, 0, sizeof *r);
}

static int cmp_field(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int check_write(a2_store *s, const a2_presence_write_req *req)
{
    if (!req)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "presence write must not be NULL");
    int rc = check_name(s, "ns", req->ns);
    if (rc == 0)
        rc = check_name(s, "participant", req->participant);
    if (rc)
        return rc;
    if (req->ttl_ms <= 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "ttl_ms must be positive");
    if (req->at < 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "at must not be negative");
    if (!req->fields || req->nfields == 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "a presence write needs at least one field");
    if (req->nfields > A2_PRESENCE_MAX_FIELDS)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d fields in one write",
                              A2_PRESENCE_MAX_FIELDS);
    const char **names = malloc(req->nfields * sizeof *names);
    if (!names)
        return nomem(s);
    for (size_t i = 0; i < req->nfields && rc == 0; i++) {
        rc = check_name(s, "a field's name", req->fields[i].field);
        const char *v = req->fields[i].value;
        if (rc == 0 && v && strlen(v) > A2_STORE_MAX_PAYLOAD)
            rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                "a field's value is longer than %d bytes",
                                A2_STORE_MAX_PAYLOAD);
        names[i] = req->fields[i].field;
    }
    if (rc == 0) {
        qsort(names, req->nfields, sizeof *names, cmp_field);
        for (size_t i = 1; i < req->nfields && rc == 0; i++)
            if (strcmp(names[i], names[i - 1]) == 0)
                rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                    "field %s given twice", names[i]);
    }
    free(names);
    return rc;
}

static json_t *write_params(a2_store *s, const a2_presence_write_req *req,
                            int *rc)
{
    int64_t now = a2__store_now(s);
    json_t *p = json_object(), *fields = json_array();
    if (!p || !fields)
        goto nomem;
    if (req->ttl_ms > INT64_MAX - now) {
        *rc = a2__store_fail(s, A2_EINVALID_ARGUMENT, "ttl_ms is too large");
        goto fail;
    }
    if (!set(p, "ns", json_string(req->ns)) ||
        !set(p, "participant", json_string(req->participant)) ||
        !set(p, "at", json_integer(req->at)) ||
        !set(p, "seen",
             req->seen == A2_STORE_NONE ? json_null()
                                        : json_integer(req->seen)) ||
        !set(p, "now", json_integer(now)) ||
        !set(p, "expires", json_integer(now + req->ttl_ms)))
        goto nomem;
    for (size_t i = 0; i < req->nfields; i++) {
        const a2_presence_field *f = &req->fields[i];
        json_t *v = NULL;
        if (f->value) {
            json_error_t jerr;
            v = json_loads(f->value, JSON_DECODE_ANY, &jerr);
            if (!v) {
                *rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                     "field %s: value is not JSON: %s",
                                     f->field, jerr.text);
                goto fail;
            }
        }
        json_t *o = json_object();
        if (!o || !set(o, "f", json_string(f->field)) ||
            (v && json_object_set(o, "v", v) != 0)) {
            json_decref(v);
            json_decref(o);
            goto nomem;
        }
        json_decref(v);
        if (json_array_append_new(fields, o) != 0)
            goto nomem; /* the append released o */
    }
    if (json_object_set(p, "fields", fields) != 0)
        goto nomem;
    json_decref(fields);
    return p;
nomem:
    *rc = nomem(s);
fail:
    json_decref(fields);
    json_decref(p);
    return NULL;
}

/* Fills out with the entry rows of rows (those holding "field"). */
static int decode_entries(a2_store *s, const json_t *rows, a2_presence *out)
{
    size_t n = 0, k;
    json_t *r;
    json_array_foreach(rows, k, r) if (json_object_get(r, "field")) n++;
    out->arena_ = a2__arena_new();
    if (!out->arena_)
        return nomem(s);
    if (n > 0) {
        out->items = a2__arena_alloc(out->arena_, n * sizeof *out->items);
        if (!out->items)
            return nomem(s);
    }
    json_array_foreach(rows, k, r)
    {
        if (!json_object_get(r, "field"))
            continue;
        a2_presence_entry *e = &out->items[out->count++];
        e->participant = a2__row_str(out->arena_, r, "participant");
        e->field = a2__row_str(out->arena_, r, "field");
        e->value = a2__row_str(out->arena_, r, "value");
        e->seen = a2__row_int(r, "seen");
        e->at = a2__row_int(r, "at");
        e->expires_at = a2__row_int(r, "expires_at");
    }
    if (a2__arena_failed(out->arena_))
        return nomem(s);
    return 0;
}

static int run(a2_store *s, const char *const *st, size_t n, json_t *p,
               json_t **rows)
{
    json_t *abort_row = NULL;
    int rc = a2__store_batch(s, st, n, p, rows, &abort_row);
    if (rc == A2__ABORTED) {
        json_decref(abort_row);
        rc = A2_ESTORE_FAILED;
    }
    return rc;
}

int a2_store_presence_write(a2_store *s, const a2_presence_write_req *req,
                            a2_presence *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_write(s, req);
    if (rc)
        return rc;
    json_t *p = write_params(s, req, &rc), *rows = NULL;
    if (!p)
        return rc;
    const char *st[] = {SQL_PRESENCE_WRITE};
    rc = run(s, st, 1, p, &rows);
    if (rc == 0)
        rc = decode_entries(s, rows, out);
    if (rc)
        a2_presence_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}

int a2_store_presence_read(a2_store *s, const char *ns, a2_presence *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = check_name(s, "ns", ns);
    if (rc)
        return rc;
    json_t *p = json_object(), *rows = NULL;
    if (!p || !set(p, "ns", json_string(ns)) ||
        !set(p, "now", json_integer(a2__store_now(s)))) {
        json_decref(p);
        return nomem(s);
    }
    const char *st[] = {SQL_PRESENCE_LOCK, SQL_PRESENCE_READ};
    rc = run(s, st, 2, p, &rows);
    if (rc == 0) {
        json_t *last = json_array_get(rows, json_array_size(rows) - 1);
        const char *lsn = json_string_value(json_object_get(last, "lsn"));
        if (!lsn)
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "presence read returned no position");
        else
            out->lsn = strtoull(lsn, NULL, 10);
    }
    if (rc == 0)
        rc = decode_entries(s, rows, out);
    if (rc)
        a2_presence_free(out);
    json_decref(rows);
    json_decref(p);
    return rc;
}

int a2_store_presence_reap(a2_store *s, const char *ns, size_t limit,
                           int64_t *reaped)
{
    if (reaped)
        *reaped = 0;
    if (!s)
        return A2_EINVALID_ARGUMENT;
    if (limit < 1 || limit > MAX_REAP)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "limit must be within 1..%d", MAX_REAP);
    int rc = ns ? check_name(s, "ns", ns) : 0;
    if (rc)
        return rc;
    json_t *p = json_object(), *rows = NULL;
    if (!p || !set(p, "now", json_integer(a2__store_now(s))) ||
        !set(p, "ns", ns ? json_string(ns) : json_null()) ||
        !set(p, "limit", json_integer((json_int_t)limit))) {
        json_decref(p);
        return nomem(s);
    }
    const char *st[] = {SQL_PRESENCE_REAP};
    rc = run(s, st, 1, p, &rows);
    if (rc == 0 && reaped)
        *reaped = a2__row_int(json_array_get(rows, 0), "reaped");
    json_decref(rows);
    json_decref(p);
    return rc;
}
