#!/usr/bin/env bash
# a2-worker with the real a2-consumer on a real slot: wake-ups drive the
# handler (no sweep while connected), retries come from the consumer's timers,
# a long handler's renewed lease is never taken over by a second worker, the
# audit trail records it all; when the consumer stops, the degraded sweep
# keeps work moving, and it stops once the consumer is back.
PREFIX="a2-worker: "
. "$(dirname "$0")/test_cli.lib"
W=$A2_BIN/a2-worker
[ -x "$W" ] || { echo "$W is not built" >&2; exit 1; }
slot=wc_$$
. "$(dirname "$0")/test_consumer.lib"
count() { grep -c "$2" "$1" 2>/dev/null || true; }
now_ms() { date +%s%3N; }

start_consumer || finish
export RUNS=$TMP/runs
: >"$RUNS"
cat >"$TMP/h.sh" <<'H'
read -r ev
echo "$(date +%s%3N) $A2_SESSION $A2_INDEX $A2_ATTEMPT" >>"$RUNS"
case "$ev" in *'"fail"'*) echo "nope" >&2; exit 1 ;; esac
echo '{"type":"done"}'
H
"$W" --consumer live --connect "unix:$sock" --exec "sh $TMP/h.sh" --retry-after 300 \
    --max-failures 2 --degraded-sweep 400 --name w1 >"$TMP/w1.out" 2>"$TMP/w1.log" &
w1=$!
pids+=($w1)
wait_log 10 "$TMP/w1.log" "connected to a2-consumer"

# Two --connect, no a2-consumer at the first: the worker goes on to the
# second at once and connects there.
"$W" --consumer multi --connect "unix:$TMP/none.sock" --connect "unix:$sock" --exec true \
    --degraded-sweep 60000 --name multi >/dev/null 2>"$TMP/multi.log" &
mp=$!
pids+=($mp)
wait_log 10 "$TMP/multi.log" "connected to a2-consumer at unix:$sock"
checks=$((checks + 1))
grep -q "could not connect to unix:$TMP/none.sock: .*; trying unix:$sock next" "$TMP/multi.log" ||
    fail "the first address was not tried first: $(cat "$TMP/multi.log")"
kill -TERM "$mp"; wait "$mp"

# Wake-ups: each append runs promptly, driven by a wake (not a sweep).
lat=()
for i in 1 2 3 4 5; do
    t0=$(now_ms)
    "$A2" append "live-$i" job '{}' --target live >/dev/null
    wait_for 10 "select count(*) from a2_events where session_id = 'live-$i' and event_type = 'done'" 1
    t1=$(grep " live-$i 1 1$" "$RUNS" | awk '{print $1}')
    lat+=($((t1 - t0)))
done
checks=$((checks + 1))
[ "$(count "$TMP/w1.log" "degraded")" = 0 ] || fail "the worker swept while connected: $(grep degraded "$TMP/w1.log")"
checks=$((checks + 1))
[ "$(count "$TMP/w1.log" "wake live-")" -ge 5 ] || fail "runs were not driven by wake-ups: $(cat "$TMP/w1.log")"
echo "append -> handler start via a2-consumer (ms, includes process start-ups): ${lat[*]}"

# A failure is retried when the consumer's retry timer fires, then
# dead-lettered at --max-failures 2.
"$A2" append live-f job '"fail"' --target live >/dev/null
wait_for 10 "select count(*) from a2_cursors where session_id = 'live-f' and failed_at is not null" 1
a1=$(grep " live-f 1 1$" "$RUNS" | awk '{print $1}')
a2=$(grep " live-f 1 2$" "$RUNS" | awk '{print $1}')
checks=$((checks + 1))
if [ -z "$a1" ] || [ -z "$a2" ] || [ $((a2 - a1)) -lt 250 ] || [ $((a2 - a1)) -gt 10000 ]; then
    fail "retry should follow the 300 ms hold: attempts at '$a1' and '$a2'"
fi
checks=$((checks + 1))
[ "$(count "$TMP/w1.log" "degraded")" = 0 ] || fail "the retry came from a sweep"

# A 6 s handler on a 2 s lease (renewed every third of it, so a renewal may
# come 1.3 s late), a second worker connected: renewed, never taken over (the
# consumer's lease timers would wake the second worker).
: >"$TMP/long"
"$W" --consumer slow --connect "unix:$sock" --ttl 2000 --name s1 \
    --exec 'echo "s1 $A2_ATTEMPT" >>'"$TMP/long"'; sleep 6' >/dev/null 2>"$TMP/s1.log" &
pids+=($!)
"$W" --consumer slow --connect "unix:$sock" --ttl 2000 --name s2 \
    --exec 'echo "s2 $A2_ATTEMPT" >>'"$TMP/long"'; sleep 6' >/dev/null 2>"$TMP/s2.log" &
pids+=($!)
wait_log 10 "$TMP/s1.log" "connected to a2-consumer"
wait_log 10 "$TMP/s2.log" "connected to a2-consumer"
"$A2" append long-1 slow '{}' --target slow >/dev/null
wait_for 30 "select count(*) from a2_cursors where session_id = 'long-1' and head is not null" 0
# The audit trail follows the slot: wait for it to reach the completion
# (the head done, the cursor idle).
checks=$((checks + 1))
wait_log 20 "$audit" '"transition":"went_idle","session":"long-1"'
checks=$((checks + 1))
[ "$(wc -l <"$TMP/long")" = 1 ] && grep -q ' 1$' "$TMP/long" || fail "long handler taken over: $(cat "$TMP/long")"
checks=$((checks + 1))
[ "$(count "$audit" '"transition":"taken_over","session":"long-1"')" = 0 ] || fail "audit shows a takeover"
checks=$((checks + 1))
[ "$(count "$audit" '"transition":"renewed","session":"long-1"')" -ge 2 ] || fail "audit shows fewer than 2 renewals: $(grep long-1 "$audit")"

# The audit trail, through the CLI.
expect 0 "$A2" audit "$audit" --session live-1; contains "claimed"; contains "live-1"
expect 0 "$A2" audit "$audit" --session live-f --transition dead_lettered; contains "nope"

# The consumer stops: the worker reports it, and its degraded sweep keeps
# work moving.
stop_consumer
wait_log 10 "$TMP/w1.log" "a2-consumer at unix:.* closed the connection\|could not connect"
"$A2" append live-d job '{}' --target live >/dev/null
wait_for 10 "select count(*) from a2_events where session_id = 'live-d' and event_type = 'done'" 1
wait_log 5 "$TMP/w1.log" "degraded: a2-consumer unreachable"

# The consumer is back: the worker reconnects and the sweep stops.
start_consumer || finish
deadline=$((SECONDS + 15))
until [ "$(count "$TMP/w1.log" "connected to a2-consumer")" -ge 2 ] || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
checks=$((checks + 1))
[ "$(count "$TMP/w1.log" "connected to a2-consumer")" -ge 2 ] || fail "the worker did not reconnect: $(tail -5 "$TMP/w1.log")"
sleep 0.3
n=$(count "$TMP/w1.log" "degraded")
sleep 1.5
checks=$((checks + 1))
[ "$(count "$TMP/w1.log" "degraded")" = "$n" ] || fail "the sweep went on after the consumer came back"
"$A2" append live-back job '{}' --target live >/dev/null
wait_for 10 "select count(*) from a2_events where session_id = 'live-back' and event_type = 'done'" 1
wait_log 5 "$TMP/w1.log" "wake live-back"

# A log consumer (--log TYPES): its cursor is started by an append naming
# it; later events of its types, appended without naming it (here returned
# by another consumer's handler), reach it through `log` wake-ups.
: >"$TMP/logruns"
"$W" --consumer auditor --log order.placed,done --connect "unix:$sock" --degraded-sweep 60000 \
    --exec 'cat >/dev/null; echo "$A2_SESSION $A2_INDEX $A2_EVENT_TYPE" >>'"$TMP/logruns" \
    >/dev/null 2>"$TMP/log.log" &
pids+=($!)
wait_log 10 "$TMP/log.log" "connected to a2-consumer"
"$A2" append logs-1 order.placed '{}' --target live --log-consumer auditor:order.placed,done >/dev/null
"$A2" append logs-1 order.ignored '{}' >/dev/null
wait_for 10 "select count(*) from a2_events where session_id = 'logs-1' and event_type = 'done'" 1
wait_for 10 "select count(*) from a2_cursors where session_id = 'logs-1' and consumer = 'auditor' and head is not null" 0
deadline=$((SECONDS + 10))
until [ "$(wc -l <"$TMP/logruns")" -ge 2 ] || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
sleep 0.5
checks=$((checks + 1))
[ "$(awk '{print $3}' "$TMP/logruns" | sort | tr '\n' ' ')" = "done order.placed " ] ||
    fail "the log consumer ran: $(tr '\n' ';' <"$TMP/logruns") (wanted order.placed and done, not order.ignored)"
checks=$((checks + 1))
grep -q "\(log\|wake\) logs-1 " "$TMP/log.log" || fail "the log consumer was not woken: $(tail -5 "$TMP/log.log")"
# A log consumer no append names: the `log` wake-up of a session's first
# event of its types starts its cursor at that event (not after it), here
# in two new sessions; an event of another type is not run.
: >"$TMP/trackruns"
"$W" --consumer tracker --log order.placed --connect "unix:$sock" --degraded-sweep 60000 \
    --exec 'cat >/dev/null; echo "$A2_SESSION $A2_INDEX $A2_EVENT_TYPE" >>'"$TMP/trackruns" \
    >/dev/null 2>"$TMP/track.log" &
pids+=($!)
wait_log 10 "$TMP/track.log" "connected to a2-consumer"
"$A2" append track-1 order.placed '{}' >/dev/null
"$A2" append track-2 order.noted '{}' >/dev/null
"$A2" append track-2 order.placed '{}' >/dev/null
deadline=$((SECONDS + 20))
until [ "$(wc -l <"$TMP/trackruns")" -ge 2 ] || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
checks=$((checks + 1))
[ "$(sort "$TMP/trackruns" | tr '\n' ';')" = "track-1 1 order.placed;track-2 2 order.placed;" ] ||
    fail "the unnamed log consumer ran: $(tr '\n' ';' <"$TMP/trackruns") (wanted track-1 #1 and track-2 #2)"

kill -TERM "${pids[@]}" 2>/dev/null
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()
stop_consumer

# TCP with a token: the right token connects and works, a wrong one is
# refused with the consumer's reason and retried with backoff.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "s3cret-token" >"$TMP/token"
echo "wrong-token" >"$TMP/bad-token"
chmod 600 "$TMP/token" "$TMP/bad-token"
"$C" --db "$A2_TEST_DB" --slot "$slot" --listen "tcp:127.0.0.1:$port" --token-file "$TMP/token" \
    --audit "$audit" >>"$TMP/consumer.log" 2>&1 &
cpid=$!
"$W" --consumer live --connect "tcp:127.0.0.1:$port" --token-file "$TMP/token" \
    --exec "sh $TMP/h.sh" --degraded-sweep 60000 --name tcp-ok >/dev/null 2>"$TMP/tcp-ok.log" &
pids+=($!)
"$W" --consumer live --connect "tcp:127.0.0.1:$port" --token-file "$TMP/bad-token" \
    --exec "sh $TMP/h.sh" --degraded-sweep 60000 --name tcp-bad >/dev/null 2>"$TMP/tcp-bad.log" &
pids+=($!)
wait_log 20 "$TMP/tcp-ok.log" "connected to a2-consumer at tcp:127.0.0.1:$port"
wait_log 20 "$TMP/tcp-bad.log" "refused the worker: .*(auth)"
"$A2" append live-tcp job '{}' --target live >/dev/null
wait_for 10 "select count(*) from a2_events where session_id = 'live-tcp' and event_type = 'done'" 1
checks=$((checks + 1))
grep -q "wake live-tcp" "$TMP/tcp-ok.log" || fail "the TCP worker was not woken: $(tail -5 "$TMP/tcp-ok.log")"
checks=$((checks + 1))
! grep -q "connected to a2-consumer" "$TMP/tcp-bad.log" || fail "a wrong token was accepted"
# The consumer logs the failed authentication with the peer.
checks=$((checks + 1))
grep -q 'worker "tcp-bad" from tcp 127.0.0.1:[0-9]* failed authentication: wrong token' "$TMP/consumer.log" ||
    fail "no log line for the failed authentication: $(tail -5 "$TMP/consumer.log")"
kill -TERM "${pids[@]}" 2>/dev/null
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()
stop_consumer
# No sanitizer report in any program's log (ASan builds).
checks=$((checks + 1))
if grep -l 'Sanitizer\|runtime error:' "$TMP"/*.log >/dev/null 2>&1; then
    fail "sanitizer report: $(grep -h -m3 'Sanitizer\|runtime error:' "$TMP"/*.log)"
fi
finish
