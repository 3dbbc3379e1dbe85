#!/usr/bin/env bash
# PostgreSQL failover, for real: a primary and its physical standby
# (pg_basebackup, streaming replication) on loopback. a2-consumer and
# a2-worker are pointed at both with a multi-host conninfo and
# target_session_attrs=read-write. Events flow; the primary is stopped
# hard; the standby is promoted. The consumer finds no slot on the new
# primary (PostgreSQL 15 keeps no logical slots on a standby), creates it,
# writes one gap record naming both positions, resyncs its workers, and
# the events appended after the promotion are woken, run and audited.
set -uo pipefail
: "${A2_BIN:?run with tests/run}" "${A2_TOP:?run with tests/run}"
C=$A2_BIN/a2-consumer W=$A2_BIN/a2-worker A2=$A2_BIN/a2
PGDEV=$A2_TOP/deploy/pg-dev
T=$(mktemp -d /tmp/a2-failover.XXXXXX)
chmod 755 "$T"
pids=()
failures=0
checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); }
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    "$PGDEV" destroy "$T/s" >/dev/null 2>&1
    "$PGDEV" destroy "$T/p" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
wait_until() { # SECONDS WHAT SHELL-CODE: polls SHELL-CODE until it succeeds
    local deadline=$((SECONDS + $1)) what=$2
    until eval "$3" >/dev/null 2>&1; do
        [ $SECONDS -gt $deadline ] && { fail "timed out: $what"; return 1; }
        sleep 0.1
    done
    check
}

"$PGDEV" start "$T/p" >/dev/null || { echo "primary did not start" >&2; exit 1; }
psql "$("$PGDEV" url "$T/p")" -qX -v ON_ERROR_STOP=1 -f "$A2_TOP/sql/schema.sql" >/dev/null
"$PGDEV" standby "$T/s" "$T/p" >/dev/null || { echo "standby did not start" >&2; exit 1; }
pp=$(cat "$T/p/port") sp=$(cat "$T/s/port")
primary="host=127.0.0.1 port=$pp dbname=a2 user=postgres"
standby="host=127.0.0.1 port=$sp dbname=a2 user=postgres"
both="host=127.0.0.1,127.0.0.1 port=$pp,$sp dbname=a2 user=postgres target_session_attrs=read-write connect_timeout=2"
export A2_DB=$both
sql() { psql "$1" -qXAt -c "$2"; }
[ "$(sql "$standby" "select pg_is_in_recovery()")" = t ] || fail "the standby is in recovery"

audit=$T/audit.jsonl
"$C" --db "$both" --slot fo --listen "unix:$T/a2.sock" --audit "$audit" \
    --status-interval 200 >"$T/consumer.log" 2>&1 &
pids+=($!)
wait_until 30 "consumer ready" 'grep -q ready "$T/consumer.log"'
cat >"$T/h.sh" <<'H'
cat >/dev/null
echo "$A2_SESSION $A2_INDEX" >>"$RUNS"
H
export RUNS=$T/runs
: >"$RUNS"
"$W" --consumer billing --connect "unix:$T/a2.sock" --exec "sh $T/h.sh" --concurrency 2 \
    --degraded-sweep 1000 --name fo-w >"$T/worker.out" 2>"$T/worker.log" &
pids+=($!)
wait_until 30 "worker connected" 'grep -q "connected to a2-consumer" "$T/worker.log"'

# Before: events flow through the primary.
for i in 1 2 3; do
    "$A2" append "before-$i" job '{}' --target billing >/dev/null || fail "append before-$i"
done
wait_until 30 "three events run before the failover" 'test "$(wc -l <"$RUNS")" -ge 3'
wait_until 30 "their completions audited" ' test "$(grep -c '\''"transition":"went_idle","session":"before-'\'' "$audit")" -ge 3'
# The standby has replayed everything the primary wrote.
lsn=$(sql "$primary" "select pg_current_wal_lsn()")
wait_until 30 "the standby replayed $lsn" ' test "$(sql "$standby" "select pg_last_wal_replay_lsn() >= '\''$lsn'\''")" = t'
last_before=$(tail -1 "$audit" | python3 -c 'import json,sys; print(json.load(sys.stdin)["lsn"])')

# The primary dies; the standby is promoted.
# (immediate shutdown: no shutdown checkpoint, as in a crash)
as_pg=()
[ "$(id -u)" -eq 0 ] && as_pg=(runuser -u postgres --)
"${as_pg[@]}" /usr/lib/postgresql/15/bin/pg_ctl -D "$T/p/data" -m immediate -w stop >/dev/null ||
    fail "the primary did not stop"
"$PGDEV" promote "$T/s" || fail "promote"
promoted_ms=$(date +%s%3N)
[ "$(sql "$standby" "select pg_is_in_recovery()")" = f ] || fail "the standby is a primary now"

# After: the consumer streams from the new primary, with one gap record.
wait_until 60 "consumer streams from the new primary" ' test "$(sql "$standby" "select count(*) from pg_replication_slots where slot_name = '\''fo'\'' and active")" = 1'
echo "streaming from the new primary $(($(date +%s%3N) - promoted_ms)) ms after the promotion (a bound of the poll, 100 ms)"
wait_until 30 "the gap record" 'grep -q '\''"op":"gap"'\'' "$audit"'
gaps=$(grep -c '"op":"gap"' "$audit")
[ "$gaps" = 1 ] || fail "one gap record, not $gaps"
check
gap=$(grep '"op":"gap"' "$audit")
python3 - "$gap" "$last_before" <<'PY' || fail "the gap record names both positions: $gap"
import json, sys
g = json.loads(sys.argv[1])
def lsn(s):
    a, b = s.split("/")
    return (int(a, 16) << 32) | int(b, 16)
assert g["transition"] == "gap", g
assert lsn(g["from"]) >= lsn(sys.argv[2]), (g, sys.argv[2])
assert lsn(g["to"]) > lsn(g["from"]), g
print("gap: %s .. %s (%d bytes of WAL), reason %s" % (g["from"], g["to"], lsn(g["to"]) - lsn(g["from"]), g.get("reason")))
PY
check
for i in 1 2 3; do
    "$A2" append "after-$i" job '{}' --target billing >/dev/null || fail "append after-$i"
done
wait_until 60 "the events appended after the promotion run" ' test "$(grep -c '\''^after-'\'' "$RUNS")" -ge 3'
wait_until 30 "and are audited after the gap" ' test "$(sed -n '\''/"op":"gap"/,$p'\'' "$audit" | grep -c '\''"transition":"went_idle","session":"after-'\'')" -ge 3'
[ "$(grep -c '^before-' "$RUNS")" = 3 ] || fail "no event before the failover ran twice: $(sort "$RUNS" | uniq -c)"
check
grep -q "resync\|slot" "$T/consumer.log" || fail "the consumer logged the new slot: $(tail -5 "$T/consumer.log")"
check
if [ $failures -gt 0 ]; then
    echo "--- consumer log"; tail -20 "$T/consumer.log"; echo "--- worker log"; tail -20 "$T/worker.log"
    echo "test_failover: $failures of $checks checks failed" >&2
    exit 1
fi
echo "test_failover: $checks checks passed"
