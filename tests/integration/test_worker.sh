#!/usr/bin/env bash
# a2-worker end to end on real Postgres, driven by its degraded sweep (no
# a2-consumer): success completes with returned events and their cause,
# failures retry then dead-letter, a long handler's lease is renewed and never
# taken over, SIGTERM lets the running handler finish; usage errors exit 2.
PREFIX="a2-worker: "
. "$(dirname "$0")/test_cli.lib"
W=$A2_BIN/a2-worker
[ -x "$W" ] || { echo "$W is not built" >&2; exit 1; }
pids=()
cleanup_workers() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup_workers EXIT

# wait_for SECONDS SQL EXPECTED: polls until the query prints EXPECTED.
wait_for() {
    local deadline=$((SECONDS + $1)) got
    while [ $SECONDS -le $deadline ]; do
        got=$(sql "$2")
        [ "$got" = "$3" ] && return 0
        sleep 0.1
    done
    fail "timed out waiting for [$2] = '$3' (last: '$got')"
    return 1
}

# --- usage errors ---
expect 2 "$W"; contains "--consumer NAME is required" err
expect 2 "$W" --consumer c; contains "--exec CMD is required" err
expect 2 "$W" --consumer c --exec true --concurrency 0
expect 2 "$W" --consumer c --exec true --ttl abc
expect 2 "$W" --consumer c --exec true --max-failures 0
expect 2 "$W" --consumer c --exec true --retry-after -5
expect 2 "$W" --consumer c --exec true --lane-only --log a,b; contains "exclude each other" err
expect 2 "$W" --consumer c --exec true --connect http://x; contains "unix:PATH or tcp:HOST:PORT" err
expect 2 "$W" --consumer c --exec true --connect tcp:127.0.0.1:1; contains "--token-file" err
# --connect repeated (a standby consumer): every address is checked.
expect 2 "$W" --consumer c --exec true --connect unix:/tmp/a.sock --connect http://x
contains "unix:PATH or tcp:HOST:PORT, not 'http://x'" err
expect 2 "$W" --consumer c --exec true --connect unix:/tmp/a.sock --connect tcp:127.0.0.1:1
contains "--token-file" err
expect 2 "$W" --consumer c --exec true stray
expect 2 "$W" --consumer c --exec true --bogus
expect 0 "$W" --help; contains "usage: a2-worker"; contains "A2_STORE_TIMEOUT_MS"
contains "repeat for a standby consumer"
ver=$(sed -n 's/^#define A2_VERSION "\(.*\)"$/\1/p' "$A2_TOP/include/a2/version.h")
schema_ver=$(sed -n 's/^#define A2_SCHEMA_VERSION "\(.*\)"$/\1/p' "$A2_TOP/include/a2/schema.h")
expect 0 "$W" --version; contains "a2-worker $ver (schema $schema_ver, wire protocol 1)"
expect 2 env A2_STORE_TIMEOUT_MS=soon "$W" --consumer c --exec true; contains 'A2_STORE_TIMEOUT_MS must be a whole number of milliseconds from 0 to 86400000, not "soon"' err
expect 1 "$W" --consumer c --exec true --connect tcp:127.0.0.1:1 --token-file "$TMP/none"
contains "could not open token file" err
printf 'tok\n' >"$TMP/open-token"; chmod 0644 "$TMP/open-token"
expect 1 "$W" --consumer c --exec true --connect tcp:127.0.0.1:1 --token-file "$TMP/open-token"
contains "has group or world access (mode 0644)" err
expect 1 "$W" --consumer c --exec true --db "host=127.0.0.1 port=1 connect_timeout=2"
contains "could not connect to the database" err

start_worker() { # log-file args...
    local log=$1
    shift
    "$W" --degraded-sweep 150 "$@" >"$log.out" 2>"$log" &
    pids+=($!)
    last_pid=$!
}

# --- two --connect: both taken, tried in turn (no a2-consumer at either) ---
start_worker "$TMP/two.log" --consumer nobody --exec true \
    --connect "unix:$TMP/a.sock" --connect "unix:$TMP/b.sock"
tp=$last_pid
wait_out "$TMP/two.log" "serving nobody .*unix:$TMP/a.sock, unix:$TMP/b.sock" 10
wait_out "$TMP/two.log" "could not connect to unix:$TMP/a.sock: .*; trying unix:$TMP/b.sock next" 10
kill -TERM "$tp"; wait "$tp"; trc=$?
checks=$((checks + 1)); [ "$trc" = 0 ] || fail "a2-worker with two --connect exited $trc: $(tail -3 "$TMP/two.log")"

# --- success, returned events with their cause, failures, dead letter ---
cat >"$TMP/handler.sh" <<'H'
read -r ev
echo "$A2_SESSION $A2_CONSUMER $A2_INDEX $A2_ATTEMPT" >>"$RUNS"
case "$ev" in
*'"fail"'*) echo "first line" >&2; echo "boom at $A2_INDEX" >&2; exit 7 ;;
esac
echo "not an event line"
echo '{"type":"mail.sent","payload":{"for":'"$A2_INDEX"'}}'
echo '{"type":"mail.logged","id":"log-'"$A2_INDEX"'"}'
H
export RUNS=$TMP/runs
: >"$RUNS"
"$A2" append w1 order '{"ok":1}' --target mailer >/dev/null
"$A2" append w1 order '"fail"' --target mailer >/dev/null
"$A2" append w2 order '{"ok":2}' --target mailer:main >/dev/null
start_worker "$TMP/w1.log" --consumer mailer --exec "sh $TMP/handler.sh" \
    --max-failures 3 --retry-after 200 --ttl 5000
wp=$last_pid
wait_for 20 "select count(*) from a2_events where event_type in ('mail.sent', 'mail.logged')" 4
wait_for 20 "select count(*) from a2_cursors where failed_at is not null" 1
kill -TERM "$wp"; wait "$wp"; wrc=$?
checks=$((checks + 1)); [ "$wrc" = 0 ] || fail "a2-worker exited $wrc after SIGTERM: $(tail -3 "$TMP/w1.log")"
# Returned events carry their cause (consumer, index, attempt 1).
got=$(sql "select string_agg(session_id || ':' || event_type || ':' || event_id || ':' || (cause->>'consumer') || '#' || (cause->>'index') || '/' || (cause->>'attempt'), ' ' order by session_id, idx) from a2_events where cause is not null")
checks=$((checks + 1))
[ "$got" = "w1:mail.sent:ret-mailer-1-1:mailer#1/1 w1:mail.logged:log-1:mailer#1/1 w2:mail.sent:ret-mailer-1-1:mailer#1/1 w2:mail.logged:log-1:mailer#1/1" ] ||
    fail "returned events: $got"
# The failing event ran 3 times (attempts 1..3) and is dead-lettered with
# the tail of stderr as its error.
checks=$((checks + 1))
[ "$(grep -c '^w1 mailer 2 ' "$RUNS")" = 3 ] || fail "failing event should run 3 times: $(cat "$RUNS")"
checks=$((checks + 1))
[ "$(grep '^w1 mailer 2 ' "$RUNS" | awk '{print $4}' | tr '\n' ' ')" = "1 2 3 " ] || fail "attempts: $(cat "$RUNS")"
expect 0 "$A2" dead-letters w1; contains "boom at 2"; contains "exit status 7"
got=$(sql "select failure_count || ' ' || last_error from a2_cursors where failed_at is not null")
checks=$((checks + 1))
[ "$got" = "3 first line boom at 2 (exit status 7)" ] || fail "dead letter: $got"
# Successful events ran once each.
checks=$((checks + 1))
[ "$(grep -c ' 1 1$' "$RUNS")" = 2 ] || fail "each good event should run once: $(cat "$RUNS")"
contains_log() { checks=$((checks + 1)); grep -q "$1" "$2" || fail "'$1' not in $2: $(cat "$2")"; }
contains_log "degraded: a2-consumer unreachable" "$TMP/w1.log"
contains_log "\[w1 #1\] not an event line" "$TMP/w1.log"
contains_log "dead-lettered w1 mailer #2 after 3 failures" "$TMP/w1.log"

# Redrive with --retry: the worker runs it again (and it fails again).
expect 0 "$A2" redrive w1 mailer 2 --retry
: >"$RUNS"
start_worker "$TMP/w1b.log" --consumer mailer --exec "sh $TMP/handler.sh" --max-failures 1
wp=$last_pid
wait_for 20 "select count(*) from a2_cursors where failed_at is not null and failure_count = 1" 1
kill -TERM "$wp"; wait "$wp"
checks=$((checks + 1)); [ "$(wc -l <"$RUNS")" = 1 ] || fail "the redriven head should run once: $(cat "$RUNS")"

# --- a 6 s handler with a 2 s lease: renewed, never taken over ---
# (renewed every third of the lease: a renewal may come 1.3 s late)
: >"$RUNS"
"$A2" append long1 slow '{}' --target slowpoke >/dev/null
start_worker "$TMP/l1.log" --consumer slowpoke --ttl 2000 --name one \
    --exec 'echo "$A2_ATTEMPT $(date +%s%N)" >>"$RUNS"; sleep 6'
l1=$last_pid
wait_for 10 "select count(*) from a2_cursors where consumer = 'slowpoke' and claim_holder is not null" 1
# A second worker sweeping every 150 ms would take over a lapsed lease.
start_worker "$TMP/l2.log" --consumer slowpoke --ttl 2000 --name two \
    --exec 'echo "$A2_ATTEMPT $(date +%s%N) two" >>"$RUNS"; sleep 6'
l2=$last_pid
wait_for 30 "select count(*) from a2_cursors where consumer = 'slowpoke' and head is not null" 0
kill -TERM "$l1" "$l2"; wait "$l1"; wait "$l2"
checks=$((checks + 1))
[ "$(wc -l <"$RUNS")" = 1 ] || fail "the long handler ran more than once: $(cat "$RUNS")"
checks=$((checks + 1))
grep -q '^1 ' "$RUNS" || fail "the long handler's attempt should be 1: $(cat "$RUNS")"
got=$(sql "select completed_attempt from a2_cursors where consumer = 'slowpoke'")
checks=$((checks + 1))
[ "${got:-}" = 1 ] || [ -z "$got" ] || fail "completed attempt $got, wanted 1"
checks=$((checks + 1))
sql "select count(*) from a2_events where session_id = 'long1'" | grep -qx 1 || fail "unexpected events in long1"

# --- SIGTERM while a handler runs: it finishes and completes first ---
# The handler blocks on a FIFO until the test releases it, after the TERM
# (at most 30 s, should the test never do so).
: >"$RUNS"
export GATE=$TMP/gate
mkfifo "$GATE"
"$A2" append term1 job '{}' --target drainer >/dev/null
start_worker "$TMP/t.log" --consumer drainer --ttl 5000 \
    --exec 'echo start >>"$RUNS"; timeout 30 sh -c "read -r x <\"\$GATE\""; echo end >>"$RUNS"; echo "{\"type\":\"job.done\"}"'
tp=$last_pid
wait_out "$RUNS" start 20
kill -TERM "$tp"
wait_out "$TMP/t.log" "SIGTERM received, draining 1 running handler" 20
# Still running while its handler is held: it waits for the handler.
checks=$((checks + 1)); kill -0 "$tp" 2>/dev/null || fail "a2-worker exited before its handler finished"
echo released >>"$RUNS"
timeout 20 sh -c 'echo go >"$GATE"' || fail "the held handler never opened the gate"
wait "$tp"; trc=$?
checks=$((checks + 1)); [ "$trc" = 0 ] || fail "a2-worker exited $trc on SIGTERM"
checks=$((checks + 1)); [ "$(tr '\n' ' ' <"$RUNS")" = "start released end " ] || fail "handler did not finish: $(cat "$RUNS")"
got=$(sql "select count(*) from a2_events where session_id = 'term1' and event_type = 'job.done'")
checks=$((checks + 1)); [ "$got" = 1 ] || fail "the drained handler's completion is missing"
contains_log "SIGTERM received, draining 1 running handler" "$TMP/t.log"

# --- handler edge cases: each is dead-lettered (max 1) with its reason ---
cat >"$TMP/edge.sh" <<'H'
case "$A2_EVENT_TYPE" in
nostdin) exit 0 ;;                                  # never reads stdin: fine
badret) echo '{"type":""}' ;;                       # an invalid returned event
badjson) echo '{"type":"x","payload":' ;;           # not JSON: just a log line
signal) kill -9 $$ ;;
flood) head -c 17000000 /dev/zero | tr '\0' 'x' ;;
dupid) echo '{"type":"x","id":"taken"}' ;;          # an id another event owns
esac
H
for t in nostdin badret badjson signal flood dupid; do
    "$A2" append "edge-$t" "$t" '{}' --target edge >/dev/null
done
"$A2" append edge-dupid other '{}' --id taken >/dev/null
start_worker "$TMP/edge.log" --consumer edge --exec "exec sh $TMP/edge.sh" --max-failures 1 --retry-after 0 --concurrency 2
ep=$last_pid
wait_for 30 "select count(*) from a2_cursors where consumer = 'edge' and head is not null and failed_at is null" 0
kill -TERM "$ep"; wait "$ep"
edge_error() { sql "select coalesce(last_error, 'completed') from a2_cursors c where consumer = 'edge' and session_id = 'edge-$1' order by epoch desc limit 1"; }
checks=$((checks + 1)); [ "$(sql "select count(*) from a2_cursors where consumer = 'edge' and session_id in ('edge-nostdin', 'edge-badjson') and failed_at is not null")" = 0 ] || fail "nostdin/badjson should complete"
got=$(edge_error badret); checks=$((checks + 1)); case "$got" in *"returned event 1 is invalid"*) ;; *) fail "badret: $got" ;; esac
got=$(edge_error signal); checks=$((checks + 1)); case "$got" in *"killed by signal 9"*) ;; *) fail "signal: $got" ;; esac
got=$(edge_error flood); checks=$((checks + 1)); case "$got" in *"more than 16 MiB"*) ;; *) fail "flood: $got" ;; esac
got=$(edge_error dupid); checks=$((checks + 1)); case "$got" in *"returned events refused"*) ;; *) fail "dupid: $got" ;; esac
contains_log '\[edge-badjson #1\] {"type":"x","payload":' "$TMP/edge.log"

expect 2 "$W" --consumer audit --exec true --log ''
# No sanitizer report in any program's log (ASan builds).
checks=$((checks + 1))
if grep -l 'Sanitizer\|runtime error:' "$TMP"/*.log >/dev/null 2>&1; then
    fail "sanitizer report: $(grep -h -m3 'Sanitizer\|runtime error:' "$TMP"/*.log)"
fi
finish
