/*
 * The store as the commands of `a2` use it: opening it, a failed call's
 * exit status and error line, and what it returns (events, their causes,
 * dispatch states) as the commands' JSON, its times as text.
 */
#include "cli.h"

#include "a2/store.h"

#include <jansson.h>
#include <stdio.h>

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

json_t *a2__cli_json_text(const char *text)
{
    if (!text)
        return json_null();
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    return v ? v : json_string(text);
}

json_t *a2__cli_cause_json(const a2_event *e, json_t *(*str)(const char *))
{
    if (!e->has_cause)
        return json_null();
    json_t *c = json_object();
    json_object_set_new(c, "consumer", str(e->cause.consumer));
    json_object_set_new(c, "lane", str(e->cause.lane));
    json_object_set_new(c, "index", json_integer(e->cause.index));
    json_object_set_new(c, "attempt", json_integer(e->cause.attempt));
    return c;
}

json_t *a2__cli_event_fields(const a2_event *e, json_t *(*str)(const char *))
{
    json_t *o = json_object();
    json_object_set_new(o, "session", str(e->session_id));
    json_object_set_new(o, "index", json_integer(e->index));
    json_object_set_new(o, "type", str(e->type));
    json_object_set_new(o, "id", str(e->id));
    json_object_set_new(o, "created_at", json_integer(e->created_at));
    return o;
}

json_t *a2__cli_event_json(const a2_event *e)
{
    json_t *o = a2__cli_event_fields(e, json_string);
    json_object_set_new(o, "payload", a2__cli_json_text(e->payload));
    json_object_set_new(o, "cause", a2__cli_cause_json(e, a2__cli_json_str));
    return o;
}

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
