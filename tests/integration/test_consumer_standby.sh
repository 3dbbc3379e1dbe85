#!/usr/bin/env bash
# Active and standby consumers of one slot, on a real cluster: exactly one
# streams; a standby refuses workers with a "standby" error and says so on
# /healthz; when the active one is killed the standby takes over (its
# takeover time is printed), wake-ups resume, and the audit trail is
# continuous: one file shared by both has no gap record and every
# transition once; a consumer with a file of its own (or one whose file was
# lost) starts it with one "audit behind slot" gap record.
. "$(dirname "$0")/test_cli.lib"
slot=sb_$$
C=$A2_BIN/a2-consumer
W=$A2_BIN/a2-worker
[ -x "$C" ] && [ -x "$W" ] || { echo "a2-consumer or a2-worker is not built" >&2; exit 1; }
pids=()
cleanup_all() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    psql "$A2_TEST_DB" -qXAt -c "select pg_drop_replication_slot('$slot')" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup_all EXIT
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
now_ms() { date +%s%3N; }
wait_until() { # SECONDS WHAT SHELL-CODE
    local deadline=$((SECONDS + $1))
    until eval "$3" >/dev/null 2>&1; do
        [ $SECONDS -gt $deadline ] && { fail "timed out: $2"; return 1; }
        sleep 0.05
    done
    checks=$((checks + 1))
}
start() { # NAME AUDIT PORT: a consumer with its socket TMP/NAME.sock
    "$C" --db "$A2_TEST_DB" --slot "$slot" --listen "unix:$TMP/$1.sock" --audit "$2" \
        --metrics "tcp:127.0.0.1:$3" --status-interval 200 >>"$TMP/$1.log" 2>&1 &
    pids+=($!)
    eval "pid_$1=$!"
}
health() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/healthz"; }
hello() { # SOCKET: what a2-consumer answers a worker's hello
    /usr/bin/python3 - "$1" <<'PY'
import socket, sys, msgpack
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(msgpack.packb({"t": "hello", "v": 1, "name": "probe"}))
u = msgpack.Unpacker(raw=False)
while True:
    data = s.recv(65536)
    if not data:
        break
    u.feed(data)
    for m in u:
        print(m.get("t"), m.get("code", ""), m.get("message", ""))
        sys.exit(0)
PY
}

# ── one audit file, two consumers ──────────────────────────────────────
audit=$TMP/audit.jsonl
pa=$(free_port) pb=$(free_port)
start a "$audit" "$pa"
wait_until 30 "a is ready" 'grep -q ready "$TMP/a.log"'
start b "$audit" "$pb"
wait_until 30 "b is a standby" 'grep -q "standby: another a2-consumer" "$TMP/b.log"'
grep -q "holds the audit file's lock" "$TMP/b.log" || fail "b names the file lock: $(cat "$TMP/b.log")"
[ "$(health "$pb")" = 503 ] || fail "a standby's /healthz is 503"
curl -s "http://127.0.0.1:$pb/healthz" | grep -q '^standby: ' || fail "/healthz says standby"
curl -s "http://127.0.0.1:$pb/metrics" | grep -q '^a2_consumer_active 0' || fail "a2_consumer_active 0"
curl -s "http://127.0.0.1:$pa/metrics" | grep -q '^a2_consumer_active 1' || fail "a2_consumer_active 1"
[ "$(health "$pa")" = 200 ] || fail "the active /healthz is 200"
out=$(hello "$TMP/b.sock")
case "$out" in "error standby "*) ;; *) fail "a standby refuses a hello with code standby: $out" ;; esac
case "$(hello "$TMP/a.sock")" in welcome*) ;; *) fail "the active one welcomes" ;; esac
checks=$((checks + 6))
[ "$(psql "$A2_TEST_DB" -qXAt -c "select count(*) from pg_replication_slots where slot_name = '$slot' and active")" = 1 ] ||
    fail "one stream"

# A worker given both addresses, b's first, runs what is appended.
cat >"$TMP/h.sh" <<'H'
cat >/dev/null
echo "$A2_SESSION" >>"$RUNS"
H
export RUNS=$TMP/runs
: >"$RUNS"
"$W" --consumer sb --connect "unix:$TMP/b.sock" --connect "unix:$TMP/a.sock" --exec "sh $TMP/h.sh" \
    --degraded-sweep 60000 --name sbw >"$TMP/w.out" 2>"$TMP/w.log" &
wpid=$!
pids+=($wpid)
wait_until 30 "the worker connects to the active one" 'grep -q "connected to a2-consumer" "$TMP/w.log"'
grep -q "standby" "$TMP/w.log" || fail "the worker was told b is a standby: $(cat "$TMP/w.log")"
for i in 1 2 3; do "$A2" append "one-$i" job '{}' --target sb >/dev/null; done
wait_until 30 "three run" '[ "$(grep -c "^one-" "$RUNS")" = 3 ]'
wait_until 30 "and are audited" '[ "$(grep -c "\"transition\":\"went_idle\",\"session\":\"one-" "$audit")" = 3 ]'

# The active one dies; the standby takes over.
t0=$(now_ms)
kill -KILL "$pid_a"
wait_until 30 "b takes over" 'grep -q "taking over slot" "$TMP/b.log"'
wait_until 30 "b streams" '[ "$(health "$pb")" = 200 ]'
t1=$(now_ms)
echo "takeover: b streamed $((t1 - t0)) ms after a was killed"
wait_until 30 "the worker follows b" '[ "$(grep -c "connected to a2-consumer" "$TMP/w.log")" -ge 2 ]'
for i in 1 2 3; do "$A2" append "two-$i" job '{}' --target sb >/dev/null; done
wait_until 30 "three more run" '[ "$(grep -c "^two-" "$RUNS")" = 3 ]'
wait_until 30 "audited in the same file" '[ "$(grep -c "\"transition\":\"went_idle\",\"session\":\"two-" "$audit")" = 3 ]'
t2=$(now_ms)
echo "wake-ups resumed: an event appended after the takeover ran $((t2 - t1)) ms later at most"
! grep -q '"op":"gap"' "$audit" || fail "one shared file has no gap: $(grep gap "$audit")"
dups=$(grep -v '"op":"gap"' "$audit" | python3 -c '
import json, sys, collections
c = collections.Counter()
for l in sys.stdin:
    o = json.loads(l)
    c[(o["xid"], o["session"], o["consumer"], o["cursor"], o["transition"], json.dumps(o.get("after")))] += 1
print(sum(1 for v in c.values() if v > 1))')
[ "$dups" = 0 ] || fail "every transition once ($dups written twice)"
checks=$((checks + 2))

# ── a consumer with an audit file of its own ───────────────────────────
pc=$(free_port)
start c "$TMP/c.jsonl" "$pc"
wait_until 30 "c is a standby (the database lock)" 'grep -q "holds the active lock of slot" "$TMP/c.log"'
kill -TERM "$pid_b"
wait_until 30 "c takes over" 'grep -q "taking over slot" "$TMP/c.log"'
wait_until 30 "c streams" '[ "$(health "$pc")" = 200 ]'
wait_until 30 "c's file starts with a gap record" 'head -1 "$TMP/c.jsonl" | grep -q "\"op\":\"gap\""'
head -1 "$TMP/c.jsonl" | grep -q '"reason":"audit behind slot"' || fail "the gap says why: $(head -1 "$TMP/c.jsonl")"
grep -q "audit file .* ends at 0/0 but slot" "$TMP/c.log" || fail "c logs the gap: $(cat "$TMP/c.log")"
"$A2" append "three-1" job '{}' --target sb >/dev/null
wait_until 30 "c audits what follows" 'grep -q "\"session\":\"three-1\"" "$TMP/c.jsonl"'
[ "$(grep -c '"op":"gap"' "$TMP/c.jsonl")" = 1 ] || fail "one gap record"
checks=$((checks + 2))

# ── a lost audit file ──────────────────────────────────────────────────
kill -TERM "$pid_c"
wait "$pid_c" 2>/dev/null
"$A2" append "four-1" job '{}' --target sb >/dev/null
rm -f "$TMP/c.jsonl" "$TMP/c.jsonl.lsn"
pd=$(free_port)
start d "$TMP/c.jsonl" "$pd"
wait_until 30 "d is ready" 'grep -q ready "$TMP/d.log"'
head -1 "$TMP/c.jsonl" | grep -q '"reason":"audit behind slot"' ||
    fail "a lost file is refilled from a gap record: $(head -1 "$TMP/c.jsonl")"
checks=$((checks + 1))

# ── a file whose last transaction the slot confirmed: no gap ───────────
# Without its state file the last transaction of the file may look partial
# (its lines are only known to be complete because the slot confirmed it).
"$A2" append "five-1" job '{}' --target sb >/dev/null
wait_until 30 "d audits five-1" 'grep -q "\"session\":\"five-1\"" "$TMP/c.jsonl"'
kill -TERM "$pid_d"
wait "$pid_d" 2>/dev/null
gaps_before=$(grep -c '"op":"gap"' "$TMP/c.jsonl")
rm -f "$TMP/c.jsonl.lsn"
# Should WAL of no a2 line (a checkpoint's record, say) have come before the
# stop, the slot confirmed past the file's last line, and without the state
# file nothing says that no transition lies between: one gap record is then
# the right answer.
last=$(tail -1 "$TMP/c.jsonl" | sed 's/^{"lsn":"\([^"]*\)".*/\1/')
past=$(psql "$A2_TEST_DB" -qXAt -c "select confirmed_flush_lsn > '$last'::pg_lsn from pg_replication_slots where slot_name = '$slot'")
want=$gaps_before
[ "$past" = t ] && want=$((gaps_before + 1))
pe=$(free_port)
start e "$TMP/c.jsonl" "$pe"
wait_until 30 "e is ready" 'grep -q ready "$TMP/e.log"'
[ "$(grep -c '"op":"gap"' "$TMP/c.jsonl")" = "$want" ] ||
    fail "gaps: $want when the slot confirmed past the file's last line $last: $past: $(grep gap "$TMP/c.jsonl" | tail -1)"
checks=$((checks + 1))

kill -TERM "$wpid" "$pid_e" 2>/dev/null
finish
