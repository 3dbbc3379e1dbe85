/*
 * Where the daemon's parts send what they produce: log lines go to stderr
 * ("a2-consumer: ..."), the worker server's too; the applier's wake-ups,
 * logs, clears and presence patches go to the worker server, and its
 * resync request to the loop (d->need_resync).
 */
#include "daemon.h"

#include "../common/log.h"

#include <stdarg.h>
#include <stdio.h>

void a2__daemon_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    a2__log_v("a2-consumer", fmt, ap);
    va_end(ap);
}

void a2__sinks_server_log(void *arg, const char *line)
{
    (void)arg;
    a2__daemon_log("%s", line);
}

static void sink_wake(void *ctx, const char *consumer, const char *session,
                      const char *cursor_key, int64_t head, uint64_t lsn,
                      uint64_t xid, const int64_t *trace_us)
{
    a2__daemon *d = ctx;
    a2__server_wake_at(d->srv, consumer, session, cursor_key, head, lsn, xid,
                       trace_us);
}

static void sink_log(void *ctx, const char *session, int64_t idx,
                     const char *type, uint64_t lsn, uint64_t xid)
{
    a2__daemon *d = ctx;
    a2__server_log(d->srv, session, idx, type, lsn, xid);
}

static void sink_cleared(void *ctx, const char *session, int64_t clear_index,
                         uint64_t lsn)
{
    a2__daemon *d = ctx;
    a2__server_cleared(d->srv, session, clear_index, lsn);
}

static void sink_presence(void *ctx, const char *ns, const char *participant,
                          const char *fields_json, uint64_t lsn)
{
    a2__daemon *d = ctx;
    a2__server_presence(d->srv, ns, participant, fields_json, lsn);
}

static void sink_resync(void *ctx)
{
    a2__daemon *d = ctx;
    d->need_resync = 1;
}

a2__sink a2__sinks_for(a2__daemon *d)
{
    a2__sink sink = {
            d, sink_wake, sink_log, sink_cleared, sink_presence, sink_resync};
    return sink;
}
