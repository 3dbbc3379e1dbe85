/*
 * liba2store: presence registers (a2/state.h), one call each of
 * a2_presence_write, a2_presence_read and a2_presence_reap
 * (sql/src/85-presence.sql): field-wise last-writer-wins with a TTL on the
 * store's clock, tombstones, reads exact at a WAL position, and reaping of
 * expired rows.
 */
#include "a2/state.h"
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REAP 100000

#define SQL_PRESENCE_WRITE                                                     \
    "select a2_presence_write(ns => $1, participant => $2, fields => "       \
    "$3::jsonb, ttl_ms => $4::bigint, at => $5::bigint, seen => $6::bigint, " \
    "now_ms => $7::bigint, text_payloads => true)"
#define SQL_PRESENCE_READ                                                      \
    "select a2_presence_read(ns => $1, now_ms => $2::bigint, text_payloads "  \
    "=> true)"
#define SQL_PRESENCE_REAP                                                      \
    "select a2_presence_reap(ns => $1, max_rows => $2::integer, now_ms => "   \
    "$3::bigint)"

void a2_presence_free(a2_presence *r)
{
    if (r)
        a2__store_free_result(r->arena_, r, sizeof *r);
}

static int check_write(a2_store *s, const a2_presence_write_req *req)
{
    if (!req)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "presence write must not be NULL");
    int rc = a2__store_check_name(s, "ns", req->ns);
    if (rc == 0)
        rc = a2__store_check_name(s, "participant", req->participant);
    if (rc)
        return rc;
    if (req->ttl_ms <= 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "ttl_ms must be positive");
    rc = a2__store_check_not_negative(s, "at", req->at);
    if (rc)
        return rc;
    if (!req->fields || req->nfields == 0)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "a presence write needs at least one field");
    if (req->nfields > A2_PRESENCE_MAX_FIELDS)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT,
                              "more than %d fields in one write",
                              A2_PRESENCE_MAX_FIELDS);
    const char **names = malloc(req->nfields * sizeof *names);
    if (!names)
        return a2__store_nomem(s);
    for (size_t i = 0; i < req->nfields && rc == 0; i++) {
        rc = a2__store_check_name(s, "a field's name", req->fields[i].field);
        const char *v = req->fields[i].value;
        if (rc == 0 && v && strlen(v) > A2_STORE_MAX_PAYLOAD)
            rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                "a field's value is longer than %d bytes",
                                A2_STORE_MAX_PAYLOAD);
        names[i] = req->fields[i].field;
    }
    const char *twice = rc ? NULL : a2__store_first_repeat(names, req->nfields);
    if (twice)
        rc = a2__store_fail(s, A2_EINVALID_ARGUMENT, "field %s given twice",
                            twice);
    free(names);
    return rc;
}

/* The fields as a2_presence_write takes them: [{"field", "value_text"}],
 * no value for a tombstone. NULL with rc set on failure. */
static json_t *fields_json(a2_store *s, const a2_presence_write_req *req,
                           int *rc)
{
    json_t *fields = json_array();
    for (size_t i = 0; fields && i < req->nfields; i++) {
        const a2_presence_field *f = &req->fields[i];
        if (f->value) {
            json_error_t jerr;
            json_t *v = json_loads(
                    f->value, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &jerr);
            if (!v) {
                *rc = a2__store_fail(s, A2_EINVALID_ARGUMENT,
                                     "field %s: value is not JSON: %s",
                                     f->field, jerr.text);
                json_decref(fields);
                return NULL;
            }
            json_decref(v);
        }
        json_t *o = f->value ? json_pack("{s:s, s:s}", "field", f->field,
                                         "value_text", f->value)
                             : json_pack("{s:s}", "field", f->field);
        fields = a2__store_push(fields, o);
    }
    if (!fields)
        *rc = a2__store_nomem(s);
    return fields;
}

/* Fills out with the entries of list. */
static int decode_entries(a2_store *s, const json_t *list, a2_presence *out)
{
    size_t n = json_array_size(list), k;
    json_t *r;
    out->arena_ = a2__arena_new();
    if (!out->arena_)
        return a2__store_nomem(s);
    if (n > 0) {
        out->items = a2__arena_alloc(out->arena_, n * sizeof *out->items);
        if (!out->items)
            return a2__store_nomem(s);
    }
    json_array_foreach(list, k, r)
    {
        a2_presence_entry *e = &out->items[out->count++];
        e->participant = a2__row_str(out->arena_, r, "participant");
        e->field = a2__row_str(out->arena_, r, "field");
        e->value = a2__row_str(out->arena_, r, "value");
        e->seen = a2__row_int(r, "seen");
        e->at = a2__row_int(r, "at");
        e->expires_at = a2__row_int(r, "expires_at");
    }
    if (a2__arena_failed(out->arena_))
        return a2__store_nomem(s);
    return 0;
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
    int64_t now = a2__store_now(s);
    if (req->ttl_ms > INT64_MAX - now)
        return a2__store_fail(s, A2_EINVALID_ARGUMENT, "ttl_ms is too large");
    json_t *fields = fields_json(s, req, &rc);
    if (!fields)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, req->ns);
    a2__store_param_text(&p, req->participant);
    a2__store_param_json(&p, fields);
    a2__store_param_int(&p, req->ttl_ms);
    a2__store_param_int(&p, req->at);
    a2__store_param_int(&p, req->seen);
    a2__store_param_int(&p, now);
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_PRESENCE_WRITE, &p, false, &res);
    if (rc == 0)
        rc = decode_entries(s, json_object_get(res, "written"), out);
    if (rc)
        a2_presence_free(out);
    json_decref(res);
    return rc;
}

int a2_store_presence_read(a2_store *s, const char *ns, a2_presence *out)
{
    if (!s || !out)
        return A2_EINVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int rc = a2__store_check_name(s, "ns", ns);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, ns);
    a2__store_param_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_PRESENCE_READ, &p, false, &res);
    if (rc == 0) {
        const char *lsn = a2__row_text(res, "lsn");
        if (!lsn)
            rc = a2__store_fail(s, A2_ESTORE_FAILED,
                                "presence read returned no position");
        else
            out->lsn = strtoull(lsn, NULL, 10);
    }
    if (rc == 0)
        rc = decode_entries(s, json_object_get(res, "entries"), out);
    if (rc)
        a2_presence_free(out);
    json_decref(res);
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
    int rc = a2__store_check_opt_name(s, "ns", ns);
    if (rc)
        return rc;
    a2__store_params p = {0};
    a2__store_param_text(&p, ns);
    a2__store_param_int(&p, (int64_t)limit);
    a2__store_param_int(&p, a2__store_now(s));
    json_t *res = NULL;
    rc = a2__store_run(s, SQL_PRESENCE_REAP, &p, false, &res);
    if (rc == 0 && reaped)
        *reaped = a2__row_int(res, "reaped");
    json_decref(res);
    return rc;
}
