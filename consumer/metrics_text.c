/*
 * The answers of a2-consumer's metrics endpoint (metrics.h), rendered from
 * a snapshot of the daemon (daemon.h) and nothing else: /metrics in the
 * Prometheus text format, /healthz "ok" or why not. A standby, or a
 * consumer still starting, has no stream to report: its /metrics says only
 * that it is not active.
 */
#include "daemon.h"

#include "a2/schema.h"
#include "a2/version.h"
#include "a2/wire.h"

#include <inttypes.h>

/* Not active: a standby, or starting (before the locks). */
static char *render_inactive(const a2__daemon_snapshot *s, int health)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (health) {
        if (s->standby)
            a2__metrics_appendf(&buf, &len, &cap, "standby: %s\n",
                                s->standby_msg);
        else
            a2__metrics_appendf(&buf, &len, &cap, "starting\n");
        return buf;
    }
    a2__metrics_appendf(
            &buf, &len, &cap,
            "# HELP a2_consumer_active 1 when this consumer streams "
            "the slot, 0 while it is a standby\n"
            "# TYPE a2_consumer_active gauge\na2_consumer_active 0\n"
            "# HELP a2_consumer_standby_refusals_total worker hellos "
            "refused as a standby\n"
            "# TYPE a2_consumer_standby_refusals_total counter\n"
            "a2_consumer_standby_refusals_total %" PRIu64 "\n"
            "# HELP a2_consumer_build_info the release and the "
            "schema and wire protocol versions it speaks\n"
            "# TYPE a2_consumer_build_info gauge\n"
            "a2_consumer_build_info{version=\"%s\",schema=\"%s\","
            "wire=\"%d\"} 1\n",
            s->server.standby_refusals, A2_VERSION, A2_SCHEMA_VERSION,
            A2_WIRE_VERSION);
    return buf;
}

char *a2__daemon_render(const a2__daemon_snapshot *s, int health, int *healthy)
{
    *healthy = s->streaming;
    if (s->standby || s->starting) {
        *healthy = 0;
        return render_inactive(s, health);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (health) {
        if (s->streaming)
            a2__metrics_appendf(&buf, &len, &cap, "ok\n");
        else
            a2__metrics_appendf(&buf, &len, &cap, "replication down: %s\n",
                                s->down_reason[0] ? s->down_reason
                                                  : "starting");
        return buf;
    }
    const a2__apply_stats *as = &s->apply;
    const a2__server_stats *ss = &s->server;
    /* The server's WAL position, as the tick connection last read it. */
    uint64_t current = s->server_wal_lsn;
    uint64_t flush = s->flush_sent;
    uint64_t lag = current > flush ? current - flush : 0;
#define G(name, help, type, fmt, val)                                          \
    a2__metrics_appendf(&buf, &len, &cap,                                      \
                        "# HELP " name " " help "\n# TYPE " name " " type      \
                        "\n" name " " fmt "\n",                                \
                        val)
    a2__metrics_appendf(
            &buf, &len, &cap,
            "# HELP a2_consumer_build_info the release and the schema and "
            "wire protocol versions it speaks\n"
            "# TYPE a2_consumer_build_info gauge\n"
            "a2_consumer_build_info{version=\"%s\",schema=\"%s\","
            "wire=\"%d\"} 1\n",
            A2_VERSION, A2_SCHEMA_VERSION, A2_WIRE_VERSION);
    G("a2_consumer_up", "1 while streaming from the slot", "gauge", "%d",
      s->streaming);
    G("a2_consumer_active",
      "1 when this consumer streams the slot, 0 while it is a standby", "gauge",
      "%d", 1);
    G("a2_consumer_standby_refusals_total",
      "worker hellos refused as a standby", "counter", "%" PRIu64,
      ss->standby_refusals);
    G("a2_consumer_lag_bytes",
      "WAL bytes between the server and the confirmed "
      "flush position",
      "gauge", "%" PRIu64, lag);
    G("a2_consumer_lag_seconds", "age of the last applied commit when applied",
      "gauge", "%.3f", s->lag_seconds);
    G("a2_consumer_confirmed_lsn", "flush LSN last confirmed to the server",
      "gauge", "%" PRIu64, flush);
    G("a2_consumer_applied_lsn", "end LSN of the last applied commit", "gauge",
      "%" PRIu64, s->applied);
    G("a2_consumer_changes_decoded_total", "row changes decoded", "counter",
      "%" PRIu64, as->changes);
    G("a2_consumer_transactions_total", "transactions applied", "counter",
      "%" PRIu64, as->transactions);
    G("a2_consumer_decode_errors_total", "messages that did not decode",
      "counter", "%" PRIu64, s->decode_errors);
    G("a2_consumer_presence_expired_total",
      "presence fields pushed as expired at their time", "counter", "%" PRIu64,
      as->presence_expired);
    G("a2_consumer_forged_ticks_total",
      "expiry tick messages without this consumer's secret, ignored", "counter",
      "%" PRIu64, as->forged_ticks);
    a2__metrics_appendf(
            &buf, &len, &cap,
            "# HELP a2_consumer_wakeups_sent_total wake-ups sent to workers\n"
            "# TYPE a2_consumer_wakeups_sent_total counter\n"
            "a2_consumer_wakeups_sent_total{type=\"wake\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"log\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"cleared\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"resync\"} %" PRIu64 "\n"
            "a2_consumer_wakeups_sent_total{type=\"presence\"} %" PRIu64 "\n",
            ss->wakes_sent, ss->logs_sent, ss->cleared_sent, ss->resyncs_sent,
            ss->presence_sent);
    G("a2_consumer_timer_wakeups_total",
      "wake-ups caused by lapsed leases "
      "and retry times",
      "counter", "%" PRIu64, as->timer_wakes);
    G("a2_consumer_workers", "workers connected", "gauge", "%" PRIu64,
      ss->workers);
    G("a2_consumer_connections",
      "worker connections open, with or without "
      "a hello",
      "gauge", "%" PRIu64, ss->connections);
    G("a2_consumer_auth_failures_total",
      "worker hellos with a wrong or missing token (each answered after 1 s)",
      "counter", "%" PRIu64, ss->auth_failures);
    G("a2_consumer_connections_refused_total",
      "worker connections refused: past --max-connections or no descriptor "
      "free",
      "counter", "%" PRIu64, ss->refused);
    G("a2_consumer_queue_overflows_total",
      "worker queues dropped for a "
      "resync",
      "counter", "%" PRIu64, ss->overflows);
    G("a2_consumer_protocol_errors_total",
      "workers disconnected for bad "
      "frames",
      "counter", "%" PRIu64, ss->protocol_errors);
    G("a2_consumer_timers_pending", "lease and retry timers pending", "gauge",
      "%zu", s->timers);
    G("a2_consumer_audit_lines_total", "audit lines written", "counter",
      "%" PRIu64, as->audit_lines);
    G("a2_consumer_reconnects_total", "replication reconnect attempts",
      "counter", "%" PRIu64, s->reconnects);
    G("a2_consumer_gaps_total", "slots recreated with a data gap", "counter",
      "%" PRIu64, s->gaps);
#undef G
    a2__hist_render(&ss->wake_latency, "a2_consumer_commit_to_wake_seconds",
                    "time from a commit (its timestamp in the stream) to its "
                    "wake-up frame handed to a worker's socket",
                    &buf, &len, &cap);
    a2__backlog_render(s->backlog, &buf, &len, &cap);
    return buf;
}
