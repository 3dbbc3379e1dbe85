#!/usr/bin/env bash
# a2 CLI: argument handling, schema, audit and status against real Postgres.
. "$(dirname "$0")/test_cli.lib"

# --- usage errors: exit 2, one line naming the cause ---
expect 2 "$A2"; contains "missing command" err
expect 2 "$A2" frobnicate; contains "unknown command 'frobnicate'" err
expect 2 "$A2" --bogus status; contains "unknown option --bogus" err
expect 2 "$A2" --db; contains "--db needs a value" err
expect 2 "$A2" schema
expect 2 "$A2" schema drop; contains "unknown schema action 'drop'" err
expect 2 "$A2" schema apply extra
expect 2 "$A2" audit; contains "audit needs a FILE" err
expect 2 "$A2" audit a b
expect 2 "$A2" audit f --session; contains "--session needs a value" err
expect 2 "$A2" audit f --nope
expect 2 "$A2" status extra
expect 2 "$A2" status --slot
expect 2 "$A2" append s1; contains "SESSION and TYPE" err
expect 2 "$A2" append s1 t '{bad'; contains "PAYLOAD is not JSON" err
expect 2 "$A2" append s1 t null --target ''; contains "bad target" err
expect 2 "$A2" append s1 t null --target 'c:'
expect 2 "$A2" append s1 t 1 2
expect 2 "$A2" append '' t
expect 2 "$A2" read; contains "read needs a SESSION" err
expect 2 "$A2" read s --after -1
expect 2 "$A2" read s --limit 0
expect 2 "$A2" read s --limit x
expect 2 "$A2" cursors
expect 2 "$A2" dead-letters a b
expect 2 "$A2" redrive s c 1; contains "--retry or --skip" err
expect 2 "$A2" redrive s c x --retry; contains "INDEX must be" err
expect 2 "$A2" redrive s c 1 --retry --skip
expect 2 "$A2" redrive s c
expect 2 "$A2" clear
expect 2 "$A2" reclaim s t

# --- help: exit 0 on every command ---
expect 0 "$A2" --help; contains "usage: a2"
ver=$(sed -n 's/^#define A2_VERSION "\(.*\)"$/\1/p' "$A2_TOP/include/a2/version.h")
schema_ver=$(sed -n 's/^#define A2_SCHEMA_VERSION "\(.*\)"$/\1/p' "$A2_TOP/include/a2/schema.h")
expect 0 "$A2" --version; contains "a2 $ver (schema $schema_ver, wire protocol 1)"
checks=$((checks + 1)); [ -n "$ver" ] && [ -z "$err" ] || fail "--version: no version in version.h, or stderr: $err"
for c in append read cursors dead-letters redrive clear reclaim schema audit status; do
    expect 0 "$A2" "$c" --help && contains "usage: a2"
done

# --- runtime errors: exit 1, one line ---
expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" status
contains "could not connect to the database" err
expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" schema check
expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" read s
contains "could not connect" err
expect 1 "$A2" audit "$TMP/missing.jsonl"; contains "could not open" err

# --- schema: check, apply (idempotent), check finds a missing table ---
expect 0 "$A2" schema check; contains "ready"
expect 0 "$A2" --json schema check; contains '"ready":true'
expect 0 "$A2" schema apply; contains "applied"
sql "drop table a2_presence cascade"
expect 1 "$A2" schema check; contains "a2_presence"
expect 1 "$A2" --json schema check; contains '"ready":false'
expect 0 "$A2" schema apply
expect 0 "$A2" schema check
# The database also comes from --db after the command.
expect 0 env -u A2_DB "$A2" schema check --db "$A2_TEST_DB"

# --- status: no slot, then a real wal2json slot with WAL behind it ---
expect 0 "$A2" status; contains "no replication slot"
slot=a2_cli_test_$$
sql "select pg_create_logical_replication_slot('$slot', 'wal2json')" >/dev/null
sql "create table if not exists cli_filler as select g, repeat('x', 200) as pad from generate_series(1, 5000) g"
expect 0 "$A2" status; contains "$slot"; contains "RETAINED"; contains "max_slot_wal_keep_size"
expect 0 "$A2" --json status --slot "$slot"
lag=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); s=d["slots"][0]; print(s["lag_bytes"], s["retained_bytes"], s["active"], s["wal_status"])')
set -- $lag
checks=$((checks + 1))
if [ "${1:-0}" -lt 100000 ] || [ "${2:-0}" -lt "${1:-0}" ] || [ "${3:-}" != False ]; then
    fail "status lag/retained not plausible: $lag"
fi
expect 0 "$A2" status --slot nosuch; contains "no replication slot named nosuch"
# Consumer metrics: a fake endpoint serving Prometheus text once.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 - "$port" "$TMP/ready" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4); s.settimeout(30)
open(sys.argv[2], "w").close()
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.recv(4096)
    body = b"a2_consumer_up 1\n# HELP a2_consumer_workers workers connected\n# TYPE a2_consumer_workers gauge\na2_consumer_workers 3\na2_consumer_lag_bytes 2048\na2_consumer_lag_seconds 0.250\n"
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + body); c.close()
PY
srv=$!
deadline=$((SECONDS + 20))
until [ -e "$TMP/ready" ] || [ $SECONDS -gt $deadline ]; do sleep 0.05; done
expect 0 "$A2" status --metrics "127.0.0.1:$port"; contains "streaming, 3 connected workers"; contains "lag 2.0 kB"
expect 0 "$A2" --json status --metrics "tcp:127.0.0.1:$port"; contains '"workers":3'; contains '"up":true'
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
expect 1 "$A2" status --metrics "127.0.0.1:$port"; contains "could not connect to metrics" err
expect 1 "$A2" status --metrics "nocolon"; contains "bad metrics address" err
sql "select pg_drop_replication_slot('$slot')" >/dev/null

# --- audit: table, filters, JSON lines, bad lines, --follow with rotation ---
line() { # lsn transition session consumer head attempt holder
    printf '{"lsn":"%s","xid":7,"at":"2026-01-01T00:00:00.000Z","op":"update","transition":"%s","session":"%s","consumer":"%s","cursor":"#%s","epoch":%s,"kind":"event","before":{"head":%s,"position":0,"attempt":0,"holder":null,"expires_at":null,"failures":0,"failed_at":null,"error":null},"after":{"head":%s,"position":0,"attempt":%s,"holder":"%s","expires_at":1,"failures":0,"failed_at":null,"error":null}}\n' \
        "$1" "$2" "$3" "$4" "$5" "$5" "$5" "$5" "$6" "$7"
}
f=$TMP/audit.jsonl
{ line 0/10 claimed s1 mailer 1 1 w1; line 0/20 claimed s2 mailer 2 1 w2; line 0/30 renewed s1 billing 3 1 w3; } >"$f"
expect 0 "$A2" audit "$f"; contains "TRANSITION"; contains "0/30"
checks=$((checks + 1)); [ "$(printf '%s\n' "$out" | wc -l)" = 4 ] || fail "audit table should have 4 lines: $out"
expect 0 "$A2" audit "$f" --session s1
checks=$((checks + 1)); [ "$(printf '%s\n' "$out" | wc -l)" = 3 ] || fail "--session s1 should keep 2 lines: $out"
expect 0 "$A2" audit "$f" --consumer mailer --transition claimed --session s2; contains "w2"
checks=$((checks + 1)); [ "$(printf '%s\n' "$out" | wc -l)" = 2 ] || fail "three filters should keep 1 line: $out"
expect 0 "$A2" --json audit "$f" --transition renewed
checks=$((checks + 1)); [ "$out" = "$(sed -n 3p "$f")" ] || fail "--json should print the line as is: $out"
expect 0 "$A2" audit "$f" --transition nothing; contains "no matching audit lines"
printf 'not json\n[1]\n' >>"$f"
expect 1 "$A2" audit "$f"; contains "0/30"; contains "audit.jsonl:4: not a JSON object" err; contains "2 lines could not be read" err
# --follow: lines appended later show up; a partial line waits; rotation reopens.
# read_to_end PID FILE SECONDS: waits until PID has read FILE to its end
# (the offset of its descriptor on FILE reaches FILE's size).
read_to_end() {
    local deadline=$((SECONDS + $3)) size fd pos
    size=$(stat -c %s "$2")
    checks=$((checks + 1))
    while [ $SECONDS -le $deadline ]; do
        for fd in /proc/"$1"/fd/*; do
            [ "$(readlink "$fd" 2>/dev/null)" = "$2" ] || continue
            pos=$(sed -n 's/^pos:[[:space:]]*//p' "/proc/$1/fdinfo/${fd##*/}" 2>/dev/null)
            [ "${pos:-0}" -ge "$size" ] && return 0
        done
        sleep 0.05
    done
    fail "process $1 did not read $2 to its end ($size bytes) in $3 s"
    return 1
}
g=$TMP/follow.jsonl
line 0/40 claimed s9 mailer 1 1 w1 >"$g"
"$A2" --json audit "$g" --follow --session s9 >"$TMP/follow.out" 2>"$TMP/follow.err" &
fpid=$!
wait_out "$TMP/follow.out" '"0/40"' 15
line 0/50 completed s9 mailer 1 1 w1 | head -c 60 >>"$g"
read_to_end "$fpid" "$g" 15 # it holds the partial line
line 0/50 completed s9 mailer 1 1 w1 | tail -c +61 >>"$g"
line 0/55 claimed other mailer 1 1 w1 >>"$g"
wait_out "$TMP/follow.out" '"0/50"' 15
mv "$g" "$g.1"
line 0/60 started s9 mailer 2 0 w1 >"$g"
wait_out "$TMP/follow.out" '"0/60"' 15
kill -INT "$fpid"
wait "$fpid"
frc=$?
checks=$((checks + 1))
[ "$frc" = 0 ] || fail "audit --follow should exit 0 on SIGINT, got $frc: $(cat "$TMP/follow.err")"
got=$(python3 -c 'import json,sys; print(" ".join(json.loads(l)["lsn"] for l in open(sys.argv[1])))' "$TMP/follow.out")
checks=$((checks + 1))
[ "$got" = "0/40 0/50 0/60" ] || fail "audit --follow saw '$got', wanted '0/40 0/50 0/60'"
# --follow as text: a moved head ("1→2", three bytes for the arrow) keeps the
# columns after it where an unchanged head and the titles put them.
h=$TMP/follow-text.jsonl
{ line 0/70 claimed s8 mailer 1 1 w1; line 0/80 started s8 mailer 1 1 w2 | sed 's/"after":{"head":1/"after":{"head":2/'; } >"$h"
"$A2" audit "$h" --follow >"$TMP/follow-text.out" 2>"$TMP/follow-text.err" &
fpid=$!
deadline=$((SECONDS + 15))
until [ "$(wc -l <"$TMP/follow-text.out")" -ge 3 ] || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
kill -INT "$fpid"
wait "$fpid" || true
checks=$((checks + 1))
grep -q "1→2" "$TMP/follow-text.out" || fail "audit --follow should show the moved head as 1→2: $(cat "$TMP/follow-text.out")"
cols=$(python3 -c 'import sys
for l in open(sys.argv[1], encoding="utf-8"):
    print(l.rindex("  ") + 2)' "$TMP/follow-text.out" | sort -u | wc -l)
checks=$((checks + 1))
[ "$cols" = 1 ] || fail "audit --follow columns should line up: $(cat "$TMP/follow-text.out")"

finish
