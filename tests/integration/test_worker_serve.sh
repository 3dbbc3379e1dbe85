#!/usr/bin/env bash
# a2-worker --serve with the real a2-consumer: long-lived handlers (Python,
# Node) answer one JSON line per event and stay the same process across
# events; a handler that crashes or is killed fails its event with how it
# ended and is restarted, and the event completes later; a garbage answer,
# an answer too many and a handler that never answers each fail only their
# own attempt, and nothing is lost; SIGTERM finishes the event in flight,
# then ends the handlers through their stdin; --exec and --serve exclude
# each other.
PREFIX="a2-worker: "
. "$(dirname "$0")/test_cli.lib"
W=$A2_BIN/a2-worker
PY=/usr/bin/python3
for p in "$W" "$PY"; do [ -x "$p" ] || { echo "$p is not there" >&2; exit 1; }; done
slot=ws_$$
. "$(dirname "$0")/test_consumer.lib"
check() { # DESCRIPTION TEST...: one check
    local what=$1
    shift
    checks=$((checks + 1))
    "$@" || fail "$what"
}
# The pids that ran consumer $1's events of sessions matching $2, one a line.
pids_of() { awk -v c="$1" -v s="$2" '$1 == c && $2 ~ s {print $5}' "$RUNS" | sort -u; }
# The error of the audit's failed transitions of session $1 (one a line).
audit_errors() {
    grep "\"transition\":\"failed\",\"session\":\"$1\"" "$audit" 2>/dev/null |
        "$PY" -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print((r.get("after") or {}).get("error"))'
}
append() { # a2 append ARGS...: an append that fails is a failure of the test
    "$A2" append "$@" >/dev/null || fail "a2 append $* exited $?"
}
stop_worker() { # PID: SIGTERM, then wait for its exit (bounded); sets wrc
    kill -TERM "$1"
    await_exit "$1"
}
await_exit() { # PID: wait for its exit (bounded); sets wrc
    local deadline=$((SECONDS + 40))
    while kill -0 "$1" 2>/dev/null && [ $SECONDS -le $deadline ]; do sleep 0.05; done
    if kill -0 "$1" 2>/dev/null; then
        fail "a2-worker $1 did not exit after SIGTERM"
        kill -KILL "$1"
    fi
    wait "$1"
    wrc=$?
}

# --- usage ---
expect 2 "$W" --consumer c --exec true --serve true; contains "--exec and --serve exclude each other" err
expect 2 "$W" --consumer c --serve ''
expect 2 "$W" --consumer c; contains "--serve CMD" err
expect 0 "$W" --help; contains "--serve CMD"; contains '{"ok":true,"events":[...]}'

start_consumer || finish
export RUNS=$TMP/runs
: >"$RUNS"
export GATE=$TMP/gate
# One handler for every case, driven by the event's type and attempt.
cat >"$TMP/h.py" <<'H'
import json, os, sys, time
pid = os.getpid()
cons, slot = os.environ["A2_CONSUMER"], os.environ["A2_SLOT"]
sys.stderr.write("handler %d up\n" % pid)
sys.stderr.flush()
for line in sys.stdin:
    ev = json.loads(line)
    t, first = ev["type"], ev["attempt"] == 1
    with open(os.environ["RUNS"], "a") as f:
        f.write("%s %s %d %d %d %s %s\n" % (cons, ev["session"], ev["index"],
                                           ev["attempt"], pid, slot, t))
    if (t == "crash" and first) or t == "crash-always":
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    if t == "kill9" and first:
        os.kill(pid, 9)
    if (t == "silent" and first) or t == "silent-always":
        continue
    if t == "slow":  # held until the test creates $GATE (at most 30 s)
        end = time.monotonic() + 30
        while not os.path.exists(os.environ["GATE"]) and time.monotonic() < end:
            time.sleep(0.05)
    if t == "flood" and first:  # a line past 16 MiB
        sys.stdout.write("x" * (17 << 20))
        sys.stdout.flush()
    if t == "garbage-always":  # not even UTF-8
        sys.stdout.buffer.write(b"this is not json \xff\xfe\n")
        sys.stdout.buffer.flush()
        continue
    if t == "garbage" and first:
        out = "this is not json\n"
    elif t == "double":
        # Two answers in one write: the second answers nothing.
        out = (json.dumps({"ok": True, "events": [{"type": "double.first"}]}) + "\n" +
               json.dumps({"ok": False, "error": "stale second answer"}) + "\n")
    elif t == "refuse":
        out = json.dumps({"ok": False, "error": "card declined"}) + "\n"
    else:
        out = json.dumps({"ok": True, "events": [
            {"type": t + ".done", "payload": {"n": ev["payload"]}},
            {"type": "audit.line", "id": "aud-%s-%d" % (ev["session"], ev["index"])}]}) + "\n"
    sys.stdout.write(out)
    sys.stdout.flush()
sys.stderr.write("handler %d bye\n" % pid)
H

# --- (1) a long-lived Python handler: events complete, returned events are
# appended (default and own ids, cause), one process for every event ---
"$W" --consumer py --connect "unix:$sock" --serve "exec $PY $TMP/h.py" --retry-after 200 \
    --max-failures 2 --name py >"$TMP/py.out" 2>"$TMP/py.log" &
wpy=$!
pids+=($wpy)
wait_log 20 "$TMP/py.log" "connected to a2-consumer"
append py-a order 1 --target py:main
append py-a order 2 --target py:main
append py-b order 3 --target py
wait_for 30 "select count(*) from a2_events where event_type = 'order.done'" 3
wait_for 30 "select count(*) from a2_events where event_type = 'audit.line'" 3
# (Returned events take indexes too: the second order of py-a is #2 or #4.)
got=$(sql "select string_agg(session_id || ':' || (event_id = 'ret-py-' || (cause->>'index') || '-1') || ':' || payload::text || ':' || (cause->>'consumer') || '/' || (cause->>'attempt'), ' ' order by payload->>'n') from a2_events where event_type = 'order.done'")
check "returned events (default ids, cause): $got" [ "$got" = 'py-a:true:{"n": 1}:py/1 py-a:true:{"n": 2}:py/1 py-b:true:{"n": 3}:py/1' ]
got=$(sql "select string_agg(session_id || ':' || (event_id = 'aud-' || session_id || '-' || (cause->>'index')), ' ' order by session_id, idx) from a2_events where event_type = 'audit.line'")
check "returned events (own ids): $got" [ "$got" = "py-a:true py-a:true py-b:true" ]
check "one handler process for the three events: $(cat "$RUNS")" [ "$(pids_of py '^py-[ab]$' | wc -l)" = 1 ]
check "A2_CONSUMER and A2_SLOT: $(cat "$RUNS")" [ "$(awk '$2 ~ /^py-[ab]$/ {print $1, $6}' "$RUNS" | sort -u)" = "py 1" ]
first_pid=$(pids_of py '^py-[ab]$')
check "the handler's stderr is in the log: $(head -5 "$TMP/py.log")" grep -q "\[handler 1[^]]*\] handler $first_pid up" "$TMP/py.log"

# --- (3)-(5) crashes, a kill, an endless line, garbage, a refusal, two
# answers at once ---
append py-crash crash '{}' --target py
append py-kill kill9 '{}' --target py
append py-flood flood '{}' --target py
append py-crash-always crash-always '{}' --target py
append py-garbage garbage '{}' --target py
append py-garbage-always garbage-always '{}' --target py
append py-refuse refuse '{}' --target py
append py-double double '{}' --target py:main
append py-double after '{}' --target py:main
wait_for 60 "select count(*) from a2_cursors where consumer = 'py' and failed_at is not null" 3
wait_for 60 "select count(*) from a2_cursors where consumer = 'py' and head is not null and failed_at is null" 0
dead() { sql "select failure_count || ' ' || last_error from a2_cursors where consumer = 'py' and session_id = '$1' and failed_at is not null"; }
# The crash: its recorded error names the exit and the stderr tail; the
# restarted handler completed the event.
got=$(dead py-crash-always)
check "crash-always dead letter: $got" eval 'case "$got" in "2 handler exited with status 3"*"crashing on purpose"*) true ;; *) false ;; esac'
wait_log 30 "$audit" '"transition":"failed","session":"py-crash"'
got=$(audit_errors py-crash)
check "the crash's failure: $got" eval 'case "$got" in "handler exited with status 3"*"crashing on purpose"*) true ;; *) false ;; esac'
check "py-crash completed on attempt 2: $(grep py-crash "$RUNS")" [ "$(sql "select count(*) from a2_events where session_id = 'py-crash' and event_type = 'crash.done' and cause->>'attempt' = '2'")" = 1 ]
check "py-crash ran in two processes: $(grep ' py-crash ' "$RUNS")" [ "$(pids_of py '^py-crash$' | wc -l)" = 2 ]
wait_log 30 "$audit" '"transition":"failed","session":"py-kill"'
got=$(audit_errors py-kill)
check "the kill's failure: $got" eval 'case "$got" in "handler killed by signal 9"*) true ;; *) false ;; esac'
check "py-kill completed: $(grep py-kill "$RUNS")" [ "$(sql "select count(*) from a2_events where session_id = 'py-kill' and event_type = 'kill9.done'")" = 1 ]
wait_log 30 "$audit" '"transition":"failed","session":"py-flood"'
got=$(audit_errors py-flood)
check "the flood's failure: $got" eval 'case "$got" in "the handler'"'"'s answer is longer than 16 MiB"*) true ;; *) false ;; esac'
check "py-flood completed" [ "$(sql "select count(*) from a2_events where session_id = 'py-flood' and event_type = 'flood.done' and cause->>'attempt' = '2'")" = 1 ]
check "the restarts are logged: $(grep restarting "$TMP/py.log")" grep -q "handler 1 (pid [0-9]*) exited with status 3; restarting in [0-9]* ms" "$TMP/py.log"
# Garbage fails that attempt, and the same process goes on with the next
# event (one slot: the runs are in order).
got=$(dead py-garbage-always)
# (Its bytes that are not UTF-8 are recorded as '?'.)
check "garbage-always dead letter: $got" eval 'case "$got" in "2 invalid answer from the handler"*": this is not json ??") true ;; *) false ;; esac'
wait_log 30 "$audit" '"transition":"failed","session":"py-garbage"'
got=$(audit_errors py-garbage)
check "the garbage's failure: $got" eval 'case "$got" in "invalid answer from the handler"*) true ;; *) false ;; esac'
got=$(awk '$1 == "py" {print $2, $4, $5}' "$RUNS" | awk 'p {print $3 == pid ? "same" : "other"; exit} $1 == "py-garbage" && $2 == 1 {p = 1; pid = $3}')
check "the handler that answered garbage ran the next event: $(cat "$RUNS")" [ "$got" = same ]
check "py-garbage completed on attempt 2" [ "$(sql "select count(*) from a2_events where session_id = 'py-garbage' and event_type = 'garbage.done' and cause->>'attempt' = '2'")" = 1 ]
got=$(dead py-refuse)
check "refusal: $got" [ "$got" = "2 card declined" ]
# Two answers: the first completes "double", the second is reported and
# dropped, and "after" completes with its own answer on its first attempt.
after=$(sql "select idx from a2_events where session_id = 'py-double' and event_type = 'after'")
got=$(sql "select string_agg(event_type || '#' || (cause->>'index') || '/' || (cause->>'attempt'), ' ' order by idx) from a2_events where session_id = 'py-double' and cause is not null")
check "py-double's returned events: $got" [ "$got" = "double.first#1/1 after.done#$after/1 audit.line#$after/1" ]
check "'after' ran once: $(grep py-double "$RUNS")" [ "$(awk -v a="$after" '$2 == "py-double" && $3 == a' "$RUNS" | wc -l)" = 1 ]
check "no failure in py-double: $(audit_errors py-double)" [ -z "$(audit_errors py-double)" ]
check "the extra answer is reported: $(grep -i 'no event' "$TMP/py.log")" \
    grep -q 'handler 1 answered with no event in flight, ignored: {"ok": false, "error": "stale second answer"}' "$TMP/py.log"

# --- SIGTERM while an event is in flight: it completes, then the handler
# reads the end of its stdin and exits, and a2-worker exits 0 ---
# (the slow handler holds its answer until the test creates $GATE)
append py-slow slow '{}' --target py
wait_log 30 "$RUNS" " py-slow "
last_pid=$(awk '$2 == "py-slow" {print $5}' "$RUNS")
kill -TERM "$wpy"
wait_log 20 "$TMP/py.log" "SIGTERM received, draining 1 running handler"
check "a2-worker waits for the event in flight" kill -0 "$wpy"
check "the event in flight is not completed before its answer" [ "$(sql "select count(*) from a2_events where session_id = 'py-slow' and event_type = 'slow.done'")" = 0 ]
: >"$GATE"
await_exit "$wpy"
check "a2-worker exited $wrc after SIGTERM: $(tail -3 "$TMP/py.log")" [ "$wrc" = 0 ]
check "the event in flight completed" [ "$(sql "select count(*) from a2_events where session_id = 'py-slow' and event_type = 'slow.done'")" = 1 ]
check "the handler saw the end of its stdin: $(tail -5 "$TMP/py.log")" grep -q "\[handler 1\] handler $last_pid bye" "$TMP/py.log"
check "draining is logged" grep -q "SIGTERM received, draining 1 running handler" "$TMP/py.log"
check "the handler's exit is logged" grep -q "handler 1 (pid [0-9]*) exited with status 0" "$TMP/py.log"
got=$(grep -o "stopped after .*" "$TMP/py.log")
check "the stop line counts the runs: $got" eval '[[ "$got" =~ ^stopped\ after\ ([0-9]+)\ handler\ runs\ in\ ([0-9]+)\ session\ runs\ \(([0-9]+)\ of\ them\ woken,\ ([0-9]+)\ run\ together\ with\ other\ sessions\)$ ]] && [ "${BASH_REMATCH[1]}" -ge "$(awk '"'"'$1 == "py"'"'"' "$RUNS" | wc -l)" ] && [ "${BASH_REMATCH[3]}" -le "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[3]}" -gt 0 ]'

# --- (6) a handler that never answers, on a 4000 ms lease: the attempt
# fails when the lease would lapse, the handler is restarted, nothing lost
# (the answer deadline runs from when the event is written, maybe to a
# freshly restarted python) ---
"$W" --consumer quiet --connect "unix:$sock" --serve "exec $PY $TMP/h.py" --ttl 4000 \
    --retry-after 200 --max-failures 2 --name quiet >/dev/null 2>"$TMP/quiet.log" &
wq=$!
pids+=($wq)
append q-silent silent '{}' --target quiet
append q-silent-always silent-always '{}' --target quiet
append q-after order 7 --target quiet
wait_for 60 "select count(*) from a2_cursors where consumer = 'quiet' and failed_at is not null" 1
wait_for 60 "select count(*) from a2_cursors where consumer = 'quiet' and head is not null and failed_at is null" 0
got=$(sql "select failure_count || ' ' || last_error from a2_cursors where consumer = 'quiet' and failed_at is not null")
check "silent-always dead letter: $got" eval 'case "$got" in "2 the handler did not answer within the lease of 4000 ms"*) true ;; *) false ;; esac'
wait_log 30 "$audit" '"transition":"failed","session":"q-silent"'
got=$(audit_errors q-silent)
check "the silence's failure: $got" eval 'case "$got" in "the handler did not answer within the lease of 4000 ms"*) true ;; *) false ;; esac'
check "q-silent completed on a retry: $(grep q-silent "$RUNS")" [ "$(sql "select count(*) from a2_events where session_id = 'q-silent' and event_type = 'silent.done' and (cause->>'attempt')::int >= 2")" = 1 ]
check "q-after completed" [ "$(sql "select count(*) from a2_events where session_id = 'q-after' and event_type = 'order.done'")" = 1 ]
check "the silent handler was killed and restarted: $(grep restarting "$TMP/quiet.log")" \
    grep -q "handler 1 (pid [0-9]*) killed by signal 9: the handler did not answer within the lease of 4000 ms; restarting" "$TMP/quiet.log"
stop_worker "$wq"
check "a2-worker (quiet) exited $wrc after SIGTERM" [ "$wrc" = 0 ]

# --- (2) a Node handler, two slots ---
if command -v node >/dev/null 2>&1; then
    cat >"$TMP/h.js" <<'H'
const fs = require("fs");
const rl = require("readline").createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const ev = JSON.parse(line);
  fs.appendFileSync(process.env.RUNS, `${process.env.A2_CONSUMER} ${ev.session} ${ev.index} ` +
    `${ev.attempt} ${process.pid} ${process.env.A2_SLOT} ${ev.type}\n`);
  const events = [{ type: "node.done", payload: { from: "node", n: ev.payload } }];
  process.stdout.write(JSON.stringify({ ok: true, events }) + "\n");
});
H
    "$W" --consumer nd --connect "unix:$sock" --serve "exec node $TMP/h.js" --concurrency 2 \
        --name nd >/dev/null 2>"$TMP/nd.log" &
    wn=$!
    pids+=($wn)
    for i in 1 2 3 4 5 6; do append "nd-$i" job "$i" --target nd; done
    wait_for 30 "select count(*) from a2_events where event_type = 'node.done'" 6
    got=$(sql "select string_agg(session_id || ':' || event_id || ':' || payload::text, ' ' order by session_id) from a2_events where event_type = 'node.done' and session_id in ('nd-1', 'nd-6')")
    check "node's returned events: $got" [ "$got" = 'nd-1:ret-nd-1-1:{"n": 1, "from": "node"} nd-6:ret-nd-1-1:{"n": 6, "from": "node"}' ]
    # Each slot keeps its process: one pid per slot, a different one each.
    per_slot=$(awk '$1 == "nd" {print $6, $5}' "$RUNS" | sort -u)
    check "one process per slot: $per_slot" [ "$(echo "$per_slot" | awk '{print $1}' | uniq -d)" = "" ]
    check "slots are 1 and 2: $per_slot" eval '[ -z "$(echo "$per_slot" | awk '\''$1 != 1 && $1 != 2'\'')" ]'
    check "distinct processes for distinct slots: $per_slot" [ "$(echo "$per_slot" | awk '{print $2}' | sort | uniq -d)" = "" ]
    check "two handlers started: $(grep started "$TMP/nd.log")" [ "$(grep -c "handler [12] started" "$TMP/nd.log")" = 2 ]
    stop_worker "$wn"
    check "a2-worker (node) exited $wrc after SIGTERM" [ "$wrc" = 0 ]
else
    echo "node is not installed: the Node handler case is skipped"
fi
pids=()

# No sanitizer report in any program's log (ASan builds).
checks=$((checks + 1))
if grep -l 'Sanitizer\|runtime error:' "$TMP"/*.log >/dev/null 2>&1; then
    fail "sanitizer report: $(grep -h -m3 'Sanitizer\|runtime error:' "$TMP"/*.log)"
fi
finish
