/*
 * liba2store operations not yet implemented: each refuses with
 * A2_ESTORE_FAILED so callers can be built against include/a2/store.h.
 */
#include "a2/store.h"

#include <stdlib.h>
#include <string.h>

struct a2_store {
    a2_store_error err;
};

static int not_yet(a2_store *s)
{
    if (s) {
        s->err.code = A2_ESTORE_FAILED;
        s->err.sqlstate[0] = '\0';
        strcpy(s->err.message, "operation not implemented");
    }
    return A2_ESTORE_FAILED;
}

const char *a2_store_code_name(int code)
{
    switch (code) {
    case A2_STORE_OK: return "OK";
    case A2_EINVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case A2_ESTORE_UNAVAILABLE: return "STORE_UNAVAILABLE";
    case A2_ESCHEMA_MISSING: return "SCHEMA_MISSING";
    case A2_EPARTIAL_DUPLICATE_BATCH: return "PARTIAL_DUPLICATE_BATCH";
    case A2_ESUPERSEDED_ATTEMPT: return "SUPERSEDED_ATTEMPT";
    case A2_ESESSION_CLEARED: return "SESSION_CLEARED";
    case A2_ENO_SUCH_EVENT: return "NO_SUCH_EVENT";
    case A2_ESTORE_FAILED: return "STORE_FAILED";
    case A2_ESTORE_NOMEM: return "OUT_OF_MEMORY";
    default: return "UNKNOWN";
    }
}

int a2_store_open(a2_store **out, const char *conninfo, a2_store_error *err)
{
    (void)conninfo;
    if (out) *out = NULL;
    if (err) {
        err->code = A2_ESTORE_FAILED;
        err->sqlstate[0] = '\0';
        strcpy(err->message, "store not implemented");
    }
    return A2_ESTORE_FAILED;
}

void a2_store_close(a2_store *store) { free(store); }
const a2_store_error *a2_store_last_error(const a2_store *store) { return store ? &store->err : NULL; }
void a2_store_set_clock(a2_store *store, a2_store_clock_fn fn, void *ctx) { (void)store; (void)fn; (void)ctx; }
void a2_store_set_ids(a2_store *store, a2_store_id_fn fn, void *ctx) { (void)store; (void)fn; (void)ctx; }
uint64_t a2_store_round_trips(const a2_store *store) { (void)store; return 0; }

void a2_events_free(a2_events *r) { if (r) memset(r, 0, sizeof *r); }
void a2_heads_free(a2_heads *r) { if (r) memset(r, 0, sizeof *r); }
void a2_cursors_free(a2_cursors *r) { if (r) memset(r, 0, sizeof *r); }
void a2_claim_result_free(a2_claim_result *r) { if (r) memset(r, 0, sizeof *r); }
void a2_renew_result_free(a2_renew_result *r) { if (r) memset(r, 0, sizeof *r); }
void a2_complete_result_free(a2_complete_result *r) { if (r) memset(r, 0, sizeof *r); }
void a2_sessions_free(a2_sessions *r) { if (r) memset(r, 0, sizeof *r); }

int a2_store_append(a2_store *s, const char *session, const a2_append_event *events, size_t n,
                    const a2_append_options *opts, a2_events *out)
{ (void)session; (void)events; (void)n; (void)opts; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_read(a2_store *s, const char *session, const a2_read_options *opts, a2_events *out)
{ (void)session; (void)opts; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_cursors(a2_store *s, const char *session, a2_cursors *out)
{ (void)session; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_wake_log(a2_store *s, const char *session, const a2_consumer *c, a2_cursors *out, int64_t *head)
{ (void)session; (void)c; (void)head; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_claim(a2_store *s, const char *session, const a2_claim_request *req, a2_claim_result *out)
{ (void)session; (void)req; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_renew(a2_store *s, const char *session, const char *holder, const a2_attempt_ref *claims,
                   size_t n, int64_t ttl, int64_t exp, a2_renew_result *out)
{ (void)session; (void)holder; (void)claims; (void)n; (void)ttl; (void)exp; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_complete(a2_store *s, const char *session, const a2_attempt_ref *a, const a2_append_event *ev,
                      size_t n, const a2_consumer *c, size_t nc, a2_complete_result *out)
{ (void)session; (void)a; (void)ev; (void)n; (void)c; (void)nc; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_fail(a2_store *s, const char *session, const a2_attempt_ref *a, const a2_fail_request *req,
                  a2_fail_result *out)
{ (void)session; (void)a; (void)req; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_dead_letters(a2_store *s, const char *session, a2_heads *out)
{ (void)session; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_redrive(a2_store *s, const char *session, const char *consumer, int64_t index, int action,
                     const a2_consumer *c, size_t nc, a2_redrive_result *out)
{ (void)session; (void)consumer; (void)index; (void)action; (void)c; (void)nc; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_clear(a2_store *s, const char *session, int64_t if_last, const a2_cause *cause, a2_clear_result *out)
{ (void)session; (void)if_last; (void)cause; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_reclaim(a2_store *s, const char *session, a2_reclaim_result *out)
{ (void)session; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
int a2_store_pending_sessions(a2_store *s, const char *const *consumers, size_t n, const char *after,
                              size_t limit, a2_sessions *out)
{ (void)consumers; (void)n; (void)after; (void)limit; if (out) memset(out, 0, sizeof *out); return not_yet(s); }
