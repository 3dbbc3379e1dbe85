#!/usr/bin/env bash
# A wake-up that arrives before its commit is visible. With
# synchronous_standby_names naming a standby that never connects, an
# append's commit is flushed and decoded (a2-consumer pushes its wake-up)
# but stays invisible to new snapshots until the setting is cleared. The
# woken worker must run that head once it becomes visible, with no further
# append to its session: a2-worker (the C runner), the Python Worker, and a
# SQL caller passing the wake-up's xid to a2_claim. Without the xid a claim
# finds the session settled.
PREFIX="a2-worker: "
. "$(dirname "$0")/test_cli.lib"
W=$A2_BIN/a2-worker
PY=/usr/bin/python3
for p in "$W" "$PY"; do [ -x "$p" ] || { echo "$p is not there" >&2; exit 1; }; done
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
slot=vis_$$
. "$(dirname "$0")/test_consumer.lib"
db=$(sql "select current_database()")
has() { case "$1" in *"$2"*) return 0 ;; esac; return 1; } # TEXT PART
check() { # DESCRIPTION TEST...: one check
    local what=$1
    shift
    checks=$((checks + 1))
    "$@" || fail "$what"
}
release() {
    sql "alter system reset synchronous_standby_names" >/dev/null 2>&1
    sql "select pg_reload_conf()" >/dev/null 2>&1
}
trap 'release; cleanup_all' EXIT

# Everything but the held appends commits locally: the consumer's, the
# workers' and this script's own transactions never wait for the standby.
sql "alter database \"$db\" set synchronous_commit = local" >/dev/null
start_consumer || finish
sql "select a2_append(session => 'warm', events => '[{\"type\":\"x\"}]')" >/dev/null

hold() { # waits until new sessions see the standby that never comes
    sql "alter system set synchronous_standby_names = 'a2_never'" >/dev/null
    sql "select pg_reload_conf()" >/dev/null
    local deadline=$((SECONDS + 20))
    until [ "$(sql "show synchronous_standby_names")" = a2_never ]; do
        [ $SECONDS -gt $deadline ] && { fail "synchronous_standby_names did not take"; return 1; }
        sleep 0.05
    done
}
held_append() { # SESSION CONSUMER: an append whose commit waits for the standby
    psql "$A2_TEST_DB" -XAtq -c "set synchronous_commit = on" \
        -c "select a2_append(session => '$1', events => '[{\"type\":\"job\",\"targets\":[{\"consumer\":\"$2\"}]}]')" \
        >"$TMP/append.$1" 2>&1 &
    held=$!
    pids+=($held)
}
# The xid of the append held at its commit.
held_xid() {
    local deadline=$((SECONDS + 20)) x
    while [ $SECONDS -le $deadline ]; do
        x=$(sql "select backend_xid from pg_stat_activity where datname = current_database() and wait_event = 'SyncRep'")
        [ -n "$x" ] && { echo "$x"; return 0; }
        sleep 0.05
    done
    fail "no append waits for the standby"
    return 1
}
# The one held append ran: visible, handled once, completed.
visible_then_run() { # SESSION WORKERLOG WHO
    check "$3: the append of $1 was visible before its commit came back" \
        [ "$(sql "select count(*) from a2_events where session_id = '$1'")" = 0 ]
    # The worker has the wake-up and its claim waits in the server (an
    # advisory lock wait on the session, or its retry after a second).
    wait_log 20 "$audit" "\"session\":\"$1\""
    release
    wait "$held"
    check "$3: the held append failed: $(cat "$TMP/append.$1")" grep -q '"events"' "$TMP/append.$1"
    wait_for 30 "select count(*) from a2_events where session_id = '$1' and event_type = 'job.done'" 1
    check "$3: $1's head ran $(grep -c " $1 " "$RUNS") times" [ "$(grep -c " $1 " "$RUNS")" = 1 ]
}

export RUNS=$TMP/runs
: >"$RUNS"

# --- a2-worker: the C runner passes the wake-up's xid ---
"$W" --consumer vis --connect "unix:$sock" --name vw \
    --exec 'echo "c $A2_SESSION $A2_INDEX" >>"$RUNS"; echo "{\"type\":\"job.done\"}"' \
    >/dev/null 2>"$TMP/w.log" &
wp=$!
pids+=($wp)
wait_log 20 "$TMP/w.log" "connected to a2-consumer"
hold || finish
held_append v-c vis
xid=$(held_xid) || finish
wait_log 20 "$TMP/w.log" "wake v-c"
# the claim waits for the commit, in the server
wait_for 20 "select count(*) from pg_stat_activity where datname = current_database() and query like '%a2_claim%' and wait_event in ('advisory', 'PgSleep')" 1
visible_then_run v-c "$TMP/w.log" a2-worker

# --- the Python Worker ---
cat >"$TMP/pw.py" <<'PYW'
import os, sys, time
import a2
def handle(ev):
    with open(os.environ["RUNS"], "a") as f:
        f.write(f"py {ev.session} {ev.index}\n")
    return [{"type": "job.done"}]
w = a2.Worker(os.environ["A2_TEST_DB"], ["vispy"], handle, connect="unix:" + sys.argv[1],
              name="pyw")
w.start()
if not w.wait_connected(20):
    sys.exit("not connected")
print("connected", flush=True)
try:
    time.sleep(120)
finally:
    w.stop()
    w.join(20)
PYW
PYTHONPATH=$top/clients/python "$PY" "$TMP/pw.py" "$sock" >"$TMP/pw.out" 2>"$TMP/pw.log" &
pids+=($!)
wait_log 30 "$TMP/pw.out" connected
hold || finish
held_append v-py vispy
xid=$(held_xid) || finish
wait_for 20 "select count(*) from pg_stat_activity where datname = current_database() and query like '%a2_claim%' and wait_event in ('advisory', 'PgSleep')" 1
visible_then_run v-py "$TMP/pw.log" "Python Worker"

# --- SQL: a2_claim with after_xid ---
hold || finish
held_append v-sql vissql
xid=$(held_xid) || finish
claim() { # ARGS...: a2_claim of v-sql for vissql with more named arguments
    sql "select a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 60000, consumers => '[\"vissql\"]'$*)"
}
got=$(claim)
check "without after_xid the held head is not seen: $got" has "$got" '"outcome": "settled"'
got=$(claim ", after_xid => $xid, wait_ms => 200")
check "a short wait reports the commit still invisible: $got" has "$got" "\"waiting_for\": $xid"
check "... as busy: $got" has "$got" '"outcome": "busy"'
# A claim that waits, in the server, until the commit is visible.
psql "$A2_TEST_DB" -XAtq -c "select a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 60000, consumers => '[\"vissql\"]', after_xid => $xid, wait_ms => 60000)" \
    >"$TMP/claim.out" 2>&1 &
cl=$!
pids+=($cl)
wait_for 20 "select count(*) from pg_stat_activity where datname = current_database() and query like '%wait_ms => 60000%' and wait_event in ('advisory', 'PgSleep') and pid <> pg_backend_pid()" 1
check "the waiting claim returned early: $(cat "$TMP/claim.out")" kill -0 "$cl"
release
wait "$held"
wait "$cl"
check "the waiting claim did not take the head once visible: $(cat "$TMP/claim.out")" grep -q '"outcome": "claimed"' "$TMP/claim.out"
check "... of v-sql: $(cat "$TMP/claim.out")" grep -q '"session": "v-sql"\|"index": 1' "$TMP/claim.out"
# Bad values are refused (an xid before every snapshot's xmin skips the
# wait, but not these checks).
while IFS='|' read -r call want; do
    run psql "$A2_TEST_DB" -XAtq -v ON_ERROR_STOP=1 -c "select $call" </dev/null
    check "$call is refused: $err" has "$err" "$want"
done <<'CALLS'
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, after_xid => -1)|after_xid must be a 32-bit transaction id
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, after_xid => 5, wait_ms => -1)|wait_ms must not be negative
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, after_xid => 4294967296)|after_xid must be a 32-bit transaction id
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, after_xid => 5, wait_ms => null)|wait_ms must not be negative
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, wake_logs => true, log_from => -1)|log_from must not be negative
a2_claim(session => 'v-sql', holder => 'sql', ttl_ms => 1000, through => -1)|through must not be negative
a2_wake_log(session => 'v-sql', consumer => 'vislog', lane => 'log', log_from => -1)|log_from must not be negative
CALLS
# An xid that is not in progress (committed, or never used) is not waited
# for (the head is sql's now: busy until its lease ends).
got=$(claim ", after_xid => 3, wait_ms => 60000")
check "a finished xid is not waited for: $got" has "$got" '"outcome": "busy", "retry_at": '
check "... nor reported: $got" eval '! has "$got" waiting_for'


# --- a claim is durable before its handler runs ---
# A claim lost in a crash would hand its attempt number to the next claim,
# and the first holder's completion would pass the fence. With the standby
# held and synchronous_commit on, a2-worker's claim waits for the standby
# and the handler does not run until it is released.
sql "alter database \"$db\" set synchronous_commit = on" >/dev/null
hold || finish
psql "$A2_TEST_DB" -XAtq -c "set synchronous_commit = local" \
    -c "select a2_append(session => 'v-dur', events => '[{\"type\":\"job\",\"targets\":[{\"consumer\":\"visdur\"}]}]')" >/dev/null
"$W" --consumer visdur --connect "unix:$sock" --name dw \
    --exec 'echo "d $A2_SESSION $A2_INDEX" >>"$RUNS"; echo "{\"type\":\"job.done\"}"' \
    >/dev/null 2>"$TMP/dw.log" &
pids+=($!)
wait_for 30 "select count(*) from pg_stat_activity where datname = current_database() and wait_event = 'SyncRep' and query like '%a2_claim%'" 1
check "the claim waits for the standby ($(cat "$TMP/dw.log"))" \
    [ "$(sql "select count(*) from pg_stat_activity where datname = current_database() and wait_event = 'SyncRep' and query like '%a2_claim%'")" = 1 ]
check "the handler did not run before its claim was durable" eval '! grep -q " v-dur " "$RUNS"'
release
wait_for 30 "select count(*) from a2_events where session_id = 'v-dur' and event_type = 'job.done'" 1
check "v-dur's head ran $(grep -c " v-dur " "$RUNS") times" [ "$(grep -c " v-dur " "$RUNS")" = 1 ]
sql "alter database \"$db\" set synchronous_commit = local" >/dev/null

finish
