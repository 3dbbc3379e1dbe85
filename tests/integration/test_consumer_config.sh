#!/usr/bin/env bash
# a2-consumer: usage errors exit 2, bad configuration exits 1 with one clear
# stderr line naming the cause. Needs A2_TEST_DB, A2_BIN (tests/run).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${A2_BIN:?}/a2-consumer
db=${A2_TEST_DB:?}
tmp=$(mktemp -d /tmp/a2-tc-config.XXXXXX)
pg2=""
bg=""
failures=0
admin=$(echo "$db" | sed -e 's/dbname=[^ ]*/dbname=postgres/')

silent=""
cleanup() {
    [ -n "$bg" ] && kill "$bg" 2>/dev/null && wait "$bg" 2>/dev/null
    [ -n "$silent" ] && kill "$silent" 2>/dev/null && wait "$silent" 2>/dev/null
    [ -n "$pg2" ] && "$top/deploy/pg-dev" destroy "$pg2" >/dev/null 2>&1
    psql "$admin" -qc "drop database if exists a2_tc_noschema" >/dev/null 2>&1
    psql "$admin" -qc "drop role if exists a2_tc_norepl" >/dev/null 2>&1
    psql "$db" -qAtc "select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name like 'tc\_%' and not active" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect CODE PATTERN ARGS...: runs a2-consumer, checks the exit status, that
# stderr is exactly one line, and that it matches PATTERN (grep -E).
expect() {
    local code=$1 pattern=$2
    shift 2
    timeout 30 "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    local lines
    lines=$(grep -c '' "$tmp/err")
    if [ "$rc" -ne "$code" ]; then
        fail "$* → exit $rc, wanted $code; stderr: $(cat "$tmp/err")"
    elif [ "$code" -eq 1 ] && [ "$lines" -ne 1 ]; then
        fail "$* → $lines stderr lines, wanted 1: $(cat "$tmp/err")"
    elif ! grep -Eq "$pattern" "$tmp/err"; then
        fail "$* → stderr does not match /$pattern/: $(cat "$tmp/err")"
    else
        echo "ok: exit $code: $(head -n 1 "$tmp/err")"
    fi
}

sock="unix:$tmp/w.sock"

# --help
if timeout 10 "$bin" --help >"$tmp/out" 2>"$tmp/err" && grep -q -- "--status-interval" "$tmp/out" && [ ! -s "$tmp/err" ]; then
    echo "ok: --help"
else
    fail "--help"
fi
# --version: the version of include/a2/version.h, on stdout
ver=$(sed -n 's/^#define A2_VERSION "\(.*\)"$/\1/p' "${A2_TOP:-.}/include/a2/version.h")
schema_ver=$(sed -n 's/^#define A2_SCHEMA_VERSION "\(.*\)"$/\1/p' "${A2_TOP:-.}/include/a2/schema.h")
if [ -n "$ver" ] && timeout 10 "$bin" --version >"$tmp/out" 2>"$tmp/err" &&
    [ "$(cat "$tmp/out")" = "a2-consumer $ver (schema $schema_ver, wire protocol 1)" ] && [ ! -s "$tmp/err" ]; then
    echo "ok: --version"
else
    fail "--version: $(cat "$tmp/out" "$tmp/err")"
fi

# usage errors: exit 2
expect 2 'unknown option "--nope"' --nope
expect 2 'invalid --route "sideways"' --db "$db" --listen "$sock" --route sideways
expect 2 'needs --token-file' --db "$db" --listen tcp:127.0.0.1:0
expect 2 'no worker listener' --db "$db"
expect 2 'invalid --status-interval "0"' --db "$db" --listen "$sock" --status-interval 0
expect 2 'invalid --stream-timeout "50" .0, or at least 100 ms.' --db "$db" --listen "$sock" --stream-timeout 50
expect 2 'invalid --max-connections "0" .1 to 1000000.' --db "$db" --listen "$sock" --max-connections 0
expect 2 'invalid --max-connections "lots"' --db "$db" --listen "$sock" --max-connections lots
expect 2 'invalid --listen address "udp:x"' --db "$db" --listen udp:x
expect 2 'invalid --metrics address' --db "$db" --listen "$sock" --metrics localhost
expect 2 'unexpected argument "extra"' --db "$db" --listen "$sock" extra
expect 2 'needs a value' --db "$db" --listen

# runtime errors: exit 1, one line
expect 1 '^a2-consumer: could not open audit file "/nonexistent/dir/audit": No such file or directory$' \
    --db "$db" --slot tc_audit --listen "$sock" --audit /nonexistent/dir/audit
mkdir -p "$tmp/blocked.jsonl.lsn"
expect 1 "^a2-consumer: could not write audit state file \"$tmp/blocked.jsonl.lsn\": Is a directory\$" \
    --db "$db" --slot tc_audit --listen "$sock" --audit "$tmp/blocked.jsonl"
expect 1 'could not open token file' --db "$db" --listen tcp:127.0.0.1:0 --token-file "$tmp/missing"
expect 1 '^a2-consumer: could not connect to the database: ' \
    --db "host=127.0.0.1 port=1 dbname=x user=postgres connect_timeout=2" --listen "$sock"

# the database from A2_DB, else the PG* variables
A2_DB="host=127.0.0.1 port=1 dbname=a2_from_env user=postgres connect_timeout=2" \
    expect 1 'could not connect to the database: connection to server at "127.0.0.1", port 1 failed' --listen "$sock"
A2_DB= PGHOST=127.0.0.1 PGPORT=2 PGDATABASE=x PGCONNECT_TIMEOUT=2 \
    expect 1 'could not connect to the database: connection to server at "127.0.0.1", port 2 failed' --listen "$sock"

# A server that takes the connection and never answers: without a
# connect_timeout in the conninfo or PGCONNECT_TIMEOUT, the attempt ends after
# the default 10 s, for a2-consumer and for the store (the a2 CLI, a2-worker),
# with one line naming the cause.
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$tmp/silent.port" &
silent=$!
for _ in $(seq 1 50); do [ -s "$tmp/silent.port" ] && break; sleep 0.1; done
sport=$(cat "$tmp/silent.port")
unset PGCONNECT_TIMEOUT
t0=$SECONDS
expect 1 "^a2-consumer: could not connect to the database: connection to server at \"127.0.0.1\", port $sport failed: timeout expired\$" \
    --db "host=127.0.0.1 port=$sport dbname=x user=postgres" --listen "$sock"
took=$((SECONDS - t0))
{ [ "$took" -ge 9 ] && [ "$took" -le 20 ]; } || fail "a2-consumer gave up on a silent server after $took s, wanted 10"
t0=$SECONDS
timeout 30 "$A2_BIN/a2" --db "host=127.0.0.1 port=$sport dbname=x user=postgres" read s1 >"$tmp/out" 2>"$tmp/err"
rc=$? took=$((SECONDS - t0))
if [ "$rc" -eq 1 ] && [ "$took" -ge 9 ] && [ "$took" -le 20 ] &&
    grep -Eq "^a2: could not connect to the database: connection to server at \"127.0.0.1\", port $sport failed: timeout expired\$" "$tmp/err"; then
    echo "ok: a2 gives up on a silent server after $took s"
else
    fail "a2 on a silent server: exit $rc after $took s: $(cat "$tmp/err")"
fi
kill "$silent" 2>/dev/null
wait "$silent" 2>/dev/null
silent=""

# schema missing
psql "$admin" -qc "create database a2_tc_noschema" >/dev/null
noschema=$(echo "$db" | sed -e 's/dbname=[^ ]*/dbname=a2_tc_noschema/')
expect 1 'the a2 schema is missing in database "a2_tc_noschema" \(no table a2_clears, a2_cursors, a2_events, a2_lane_events, a2_presence\)' \
    --db "$noschema" --slot tc_schema --listen "$sock"

# a2_cursors without REPLICA IDENTITY FULL
psql "$db" -qc "alter table a2_cursors replica identity default" >/dev/null
expect 1 'table a2_cursors needs REPLICA IDENTITY FULL' --db "$db" --slot tc_ident --listen "$sock"
psql "$db" -qc "alter table a2_cursors replica identity full" >/dev/null

# no REPLICATION attribute
psql "$admin" -qc "drop role if exists a2_tc_norepl" >/dev/null 2>&1
psql "$admin" -qc "create role a2_tc_norepl login" >/dev/null
norepl="$db user=a2_tc_norepl"
expect 1 'role "a2_tc_norepl" lacks the REPLICATION attribute' --db "$norepl" --slot tc_norepl --listen "$sock"

# Servers from PostgreSQL 15.19 on only load the output plugins that
# output_plugin_libraries names; allow LIST sets it for the test database
# (a list, unquoted; empty: back to the server's).
plugin_list=$(psql "$db" -qAtc "select current_setting('output_plugin_libraries', true)")
dbname=$(psql "$db" -qAtc "select current_database()")
allow() {
    if [ -z "$plugin_list" ]; then
        return 0
    elif [ -n "$1" ]; then
        psql "$admin" -qc "alter database \"$dbname\" set output_plugin_libraries = $1"
    else
        psql "$admin" -qc "alter database \"$dbname\" reset output_plugin_libraries"
    fi
}

# no wal2json (an output plugin that is not installed)
allow "pgoutput, wal2json, a2_no_such_plugin"
expect 1 'output plugin a2_no_such_plugin is not installed: could not access file "a2_no_such_plugin"' \
    --db "$db" --slot tc_noplugin --listen "$sock" --plugin a2_no_such_plugin
allow ""
n=$(psql "$db" -qAtc "select count(*) from pg_replication_slots where slot_name = 'tc_noplugin'")
[ "$n" = 0 ] || fail "a slot was left behind by the failed start"

# a slot of another plugin
psql "$db" -qAtc "select pg_create_logical_replication_slot('tc_decoding', 'test_decoding')" >/dev/null
expect 1 'replication slot "tc_decoding" uses output plugin "test_decoding", not wal2json' \
    --db "$db" --slot tc_decoding --listen "$sock"

# a server that does not allow wal2json as an output plugin (PostgreSQL
# 15.19 and later name the allowed ones in output_plugin_libraries): when the
# slot is created, and when an existing slot starts streaming
if [ -n "$plugin_list" ]; then
    allow "pgoutput"
    expect 1 'the server does not allow output plugin wal2json \(add it to output_plugin_libraries and reload the server configuration\): library "wal2json" may not be used as an output plugin' \
        --db "$db" --slot tc_refused --listen "$sock"
    n=$(psql "$db" -qAtc "select count(*) from pg_replication_slots where slot_name = 'tc_refused'")
    [ "$n" = 0 ] || fail "a slot was left behind by the refused start"
    allow ""
    psql "$db" -qAtc "select pg_create_logical_replication_slot('tc_refused_later', 'wal2json')" >/dev/null
    allow "pgoutput"
    expect 1 'the server does not allow output plugin wal2json \(add it to output_plugin_libraries' \
        --db "$db" --slot tc_refused_later --listen "$sock"
    # the refusal names the slot's plugin (--plugin), not wal2json
    allow ""
    psql "$db" -qAtc "select pg_create_logical_replication_slot('tc_refused_td', 'test_decoding')" >/dev/null
    allow "pgoutput"
    expect 1 'the server does not allow output plugin test_decoding \(add it to output_plugin_libraries' \
        --db "$db" --slot tc_refused_td --listen "$sock" --plugin test_decoding
    allow ""
else
    echo "test_consumer_config.sh: this server has no output_plugin_libraries: its refusal is not tested"
fi

# a slot of another database
psql "$admin" -qAtc "select pg_create_logical_replication_slot('tc_otherdb', 'wal2json')" >/dev/null
expect 1 'replication slot "tc_otherdb" belongs to database "postgres"' \
    --db "$db" --slot tc_otherdb --listen "$sock"
psql "$admin" -qAtc "select pg_drop_replication_slot('tc_otherdb')" >/dev/null

# slot active elsewhere, for a client that is no a2-consumer: refused
psql "$db" -qAtc "select pg_create_logical_replication_slot('tc_busy', 'wal2json')" >/dev/null
recv=/usr/lib/postgresql/15/bin/pg_recvlogical
"$recv" -d "$db" -S tc_busy --start -f /dev/null 2>"$tmp/recv.log" &
rpid=$!
for _ in $(seq 1 200); do
    [ "$(psql "$db" -qAtc "select active from pg_replication_slots where slot_name = 'tc_busy'")" = t ] && break
    sleep 0.05
done
expect 1 'replication slot "tc_busy" is active for PID [0-9]+' --db "$db" --slot tc_busy --listen "$sock"
kill "$rpid"
wait "$rpid" 2>/dev/null

# a second a2-consumer of a slot is a standby; it takes over when the first stops
"$bin" --db "$db" --slot tc_busy --listen "unix:$tmp/busy.sock" --audit "$tmp/busy.audit" 2>"$tmp/busy.log" &
bg=$!
for _ in $(seq 1 200); do grep -q "ready:" "$tmp/busy.log" && break; sleep 0.05; done
"$bin" --db "$db" --slot tc_busy --listen "unix:$tmp/busy2.sock" --audit "$tmp/busy.audit" 2>"$tmp/busy2.log" &
bg2=$!
for _ in $(seq 1 200); do grep -q "standby:" "$tmp/busy2.log" && break; sleep 0.05; done
grep -q 'standby: another a2-consumer (.*) holds the audit file.s lock' "$tmp/busy2.log" ||
    fail "the second consumer is a standby: $(cat "$tmp/busy2.log")"
kill "$bg"
wait "$bg"
rc=$?
bg=""
[ "$rc" -eq 0 ] || fail "SIGTERM → exit $rc, wanted 0"
grep -q "stopped at" "$tmp/busy.log" || fail "no clean stop logged: $(cat "$tmp/busy.log")"
for _ in $(seq 1 400); do grep -q "ready:" "$tmp/busy2.log" && break; sleep 0.05; done
grep -q 'taking over slot "tc_busy"' "$tmp/busy2.log" && grep -q "ready:" "$tmp/busy2.log" ||
    fail "the standby took over: $(cat "$tmp/busy2.log")"
kill "$bg2"
wait "$bg2" 2>/dev/null
echo "ok: a second consumer waited as a standby and took over"

# A start that fails on something local creates no slot: the listeners and
# the metrics port come before CREATE_REPLICATION_SLOT.
no_slot() {
    local n
    n=$(psql "$db" -qAtc "select count(*) from pg_replication_slots where slot_name = '$1'")
    if [ "$n" = 0 ]; then echo "ok: no slot $1 left"; else fail "the failed start left slot $1"; fi
}
long=$tmp/$(printf 'x%.0s' $(seq 1 120))/w.sock
expect 1 'could not listen on unix:.*: path too long' --db "$db" --slot tc_longsock --listen "unix:$long"
no_slot tc_longsock
"$bin" --db "$db" --slot tc_served --listen "unix:$tmp/served.sock" 2>"$tmp/served.log" &
bg=$!
for _ in $(seq 1 200); do grep -q "ready:" "$tmp/served.log" && break; sleep 0.05; done
expect 1 'another server is listening' --db "$db" --slot tc_served2 --listen "unix:$tmp/served.sock"
no_slot tc_served2
mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(60)' "$mport" &
holder=$!
for _ in $(seq 1 100); do ss -ltn 2>/dev/null | grep -q ":$mport " && break; sleep 0.05; done
expect 1 "could not bind metrics tcp:127.0.0.1:$mport" --db "$db" --slot tc_metricsbusy --listen "$sock" --metrics "tcp:127.0.0.1:$mport"
no_slot tc_metricsbusy
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect 1 'could not open token file' --db "$db" --slot tc_notoken --listen tcp:127.0.0.1:0 --token-file "$tmp/missing"
no_slot tc_notoken
# Token files are read as libpq reads a password file.
printf 's3cret\n' >"$tmp/tok-open"
chmod 0644 "$tmp/tok-open"
expect 1 'token file ".*/tok-open" has group or world access \(mode 0644\): it must be u=rw \(0600\) or less' \
    --db "$db" --slot tc_tokmode --listen tcp:127.0.0.1:0 --token-file "$tmp/tok-open"
no_slot tc_tokmode
mkdir -m 0700 "$tmp/tok-dir"
expect 1 'token file ".*/tok-dir" is a directory' --db "$db" --listen tcp:127.0.0.1:0 --token-file "$tmp/tok-dir"
: >"$tmp/tok-empty"
chmod 0600 "$tmp/tok-empty"
expect 1 'token file ".*/tok-empty" is empty' --db "$db" --listen tcp:127.0.0.1:0 --token-file "$tmp/tok-empty"
printf 'one\ntwo\n' >"$tmp/tok-two"
chmod 0600 "$tmp/tok-two"
expect 1 'token file ".*/tok-two" holds a control character or more than one line' \
    --db "$db" --listen tcp:127.0.0.1:0 --token-file "$tmp/tok-two"
printf 'caf\351\n' >"$tmp/tok-latin1"
chmod 0600 "$tmp/tok-latin1"
expect 1 'token file ".*/tok-latin1" is not UTF-8 text' --db "$db" --listen tcp:127.0.0.1:0 --token-file "$tmp/tok-latin1"
# 0640 is enough when root owns the file (a group of services reads it)
if [ "$(id -u)" = 0 ]; then
    chmod 0640 "$tmp/tok-open"
    "$bin" --db "$db" --slot tc_tokroot --listen "unix:$tmp/tokroot.sock" --listen tcp:127.0.0.1:0 \
        --token-file "$tmp/tok-open" 2>"$tmp/tokroot.log" &
    tpid=$!
    for _ in $(seq 1 200); do grep -q "ready:" "$tmp/tokroot.log" && break; sleep 0.05; done
    if grep -q "ready:" "$tmp/tokroot.log"; then echo "ok: a root-owned 0640 token file"; else fail "root-owned 0640 token file refused: $(cat "$tmp/tokroot.log")"; fi
    kill "$tpid"; wait "$tpid"
fi
kill "$bg"
wait "$bg"
bg=""

# a URI works as well as a conninfo; SIGINT stops cleanly too
port=$(echo "$db" | sed -e 's/.*port=\([0-9]*\).*/\1/')
dbname=$(echo "$db" | sed -e 's/.*dbname=\([^ ]*\).*/\1/')
"$bin" --db "postgresql://postgres@127.0.0.1:$port/$dbname" --slot tc_uri --listen "unix:$tmp/uri.sock" 2>"$tmp/uri.log" &
bg=$!
for _ in $(seq 1 200); do grep -q "ready:" "$tmp/uri.log" && break; sleep 0.05; done
kill -INT "$bg"
wait "$bg"
rc=$?
bg=""
if [ "$rc" -eq 0 ] && grep -q "ready:" "$tmp/uri.log" && grep -q "stopped at" "$tmp/uri.log"; then
    echo "ok: URI conninfo, SIGINT → exit 0"
else
    fail "URI conninfo / SIGINT → exit $rc: $(cat "$tmp/uri.log")"
fi

# wal_level=replica: a second throwaway cluster
pg2=$(mktemp -d /tmp/a2-tc-replica.XXXXXX)
if PG_DEV_WAL_LEVEL=replica "$top/deploy/pg-dev" start "$pg2" >/dev/null 2>&1; then
    url2=$("$top/deploy/pg-dev" url "$pg2")
    psql "$url2" -qf "$top/sql/schema.sql" >/dev/null 2>&1
    expect 1 'wal_level is "replica": logical decoding needs wal_level=logical' \
        --db "$url2" --listen "$sock"
else
    fail "could not start a second cluster with wal_level=replica"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_consumer_config: $failures failures"
    exit 1
fi
echo "test_consumer_config: all passed"
