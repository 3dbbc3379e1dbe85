#!/usr/bin/env bash
# a2 CLI store commands against real Postgres: append, read, cursors,
# dead-letters, redrive, clear, reclaim; tables and --json; store errors.
. "$(dirname "$0")/test_cli.lib"
j() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# append: table line, --json, idempotent replay by id, targets.
expect 0 "$A2" append s1 order.created '{"n":1}' --target mailer --target billing:main
contains "s1 order.created #1 id "
expect 0 "$A2" --json append s1 order.paid '{"n":2}' --id pay-1 --target billing:main
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j 'd["index"], d["id"], d["payload"]["n"], d["replayed"]')" = "2 pay-1 2 False" ] || fail "append --json: $out"
expect 0 "$A2" --json append s1 order.paid '{"n":2}' --id pay-1 --target billing:main
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j 'd["index"], d["replayed"]')" = "2 True" ] || fail "replayed append: $out"
expect 0 "$A2" append s1 note    # no payload: null
checks=$((checks + 1)); [ "$(sql "select payload::text from a2_events where session_id = 's1' and idx = 3")" = null ] || fail "default payload"
# A clear-type event is refused as bad input.
expect 2 "$A2" append s1 a2.cleared; contains "append:" err

# --log-consumer starts a log cursor when the type is one it follows.
expect 0 "$A2" append s3 order.placed '{}' --log-consumer auditor:order.placed,invoice.sent --log-consumer other:x
checks=$((checks + 1))
[ "$(sql "select string_agg(consumer || ':' || kind || ':' || cursor_key || ':' || head, ' ') from a2_cursors where session_id = 's3'")" = "auditor:log:lane:log:1" ] || fail "log cursor not started"
expect 2 "$A2" append s3 x --log-consumer ':a'; contains "bad log consumer" err
expect 2 "$A2" append s3 x --log-consumer 'a:'
# Delayed dispatch: --at / --in hold the head (a claim is busy until then).
expect 0 "$A2" append sd job --target dc --at 2099-01-02T03:04:05.5Z; contains "sd job #1 id "; contains ", not before 2099-01-02T03:04:05.500Z"
checks=$((checks + 1)); [ "$(sql "select claim_expires_at from a2_cursors where session_id = 'sd' and head = 1")" = 4071006245500 ] || fail "--at did not hold the head"
checks=$((checks + 1)); [ "$(sql "select a2_claim(session => 'sd', holder => 'h', ttl_ms => 1000)->>'outcome'")" = busy ] || fail "a delayed head was claimable"
expect 0 "$A2" --json append sd job --target dc:L --at 2099-01-02T04:04:05+01:00
[ "$(printf '%s' "$out" | j 'd["not_before"]')" = 4071006245000 ] || fail "--at with an offset: $out"
t0=$(date +%s%3N)
expect 0 "$A2" --json append sd job --target dc --in 90s
nb=$(printf '%s' "$out" | j 'd["not_before"]')
checks=$((checks + 1)); [ $((nb - t0)) -ge 90000 ] && [ $((nb - t0)) -lt 150000 ] || fail "--in 90s gave $nb at $t0"
expect 0 "$A2" append sd job --target dc --at 1000; contains "not before 1970-01-01T00:00:01.000Z"
checks=$((checks + 1)); [ "$(sql "select a2_claim(session => 'sd', holder => 'h', ttl_ms => 1000)->'heads'->0->>'index'")" = 4 ] || fail "a time in the past was not claimable at once"
for bad in soon 2099-01-02 2099-01-02T03:04:05 2099-13-02T03:04Z 1.5 -1 99999999999999999; do
    expect 2 "$A2" append sd job --at "$bad"; contains "--at must be epoch milliseconds or a UTC time" err
done
for bad in 5 5x -5s 1.5s 99999999d; do
    expect 2 "$A2" append sd job --in "$bad"; contains "--in must be a duration like 300ms" err
done
expect 2 "$A2" append sd job --in 5s --at 1; contains "--at and --in exclude each other" err
checks=$((checks + 1)); [ "$(sql "select count(*) from a2_events where session_id = 'sd'")" = 4 ] || fail "a refused append wrote"

# read: table, --after/--limit, --json.
expect 0 "$A2" read s1; contains "order.created"; contains "pay-1"; contains '{"n": 1}'
checks=$((checks + 1)); [ "$(printf '%s\n' "$out" | wc -l)" = 4 ] || fail "read table lines: $out"
expect 0 "$A2" --json read s1 --after 1 --limit 1
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j 'len(d), d[0]["index"], d[0]["type"]')" = "1 2 order.paid" ] || fail "read --after --limit: $out"
expect 0 "$A2" read nosuch; contains "no events"

# cursors: one concurrent cursor for mailer, one lane cursor for billing.
expect 0 "$A2" cursors s1; contains "mailer"; contains "lane:main"; contains "pending"
expect 0 "$A2" --json cursors s1
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j '" ".join(sorted(c["consumer"] + ":" + c["kind"] + ":" + str(c["head"]) for c in d))')" = "billing:lane:1 mailer:event:1" ] || fail "cursors --json: $out"
expect 0 "$A2" cursors nosuch; contains "no cursors"

# dead-letters and redrive: dead-letter mailer's head #1 through the store.
sql "update a2_cursors set failed_at = 1, failure_count = 3, attempt_count = 3, last_error = 'smtp down' where consumer = 'mailer'"
expect 0 "$A2" dead-letters s1; contains "mailer"; contains "smtp down"
expect 0 "$A2" --json dead-letters s1
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j 'len(d), d[0]["consumer"], d[0]["event"]["index"], d[0]["failures"]')" = "1 mailer 1 3" ] || fail "dead-letters --json: $out"
expect 1 "$A2" redrive s1 billing 1 --retry; contains "no dead letter of billing at index 1" err
expect 0 "$A2" redrive s1 mailer 1 --retry; contains "will run again"
expect 0 "$A2" dead-letters s1; contains "no dead letters"
checks=$((checks + 1)); [ "$(sql "select failed_at is null from a2_cursors where consumer = 'mailer'")" = t ] || fail "retry did not clear failed_at"
sql "update a2_cursors set failed_at = 1, failure_count = 3 where consumer = 'mailer'"
expect 0 "$A2" --json redrive s1 mailer 1 --skip
checks=$((checks + 1)); [ "$(printf '%s' "$out" | j 'd["redriven"], d["action"]')" = "True skip" ] || fail "redrive --skip --json: $out"
checks=$((checks + 1)); [ "$(sql "select count(*) from a2_cursors where consumer = 'mailer' and head is not null")" = 0 ] || fail "skip should pass the head"

# clear and reclaim (progress on stderr).
for i in $(seq 1 30); do "$A2" append s2 tick "$i" >/dev/null || fail "append tick $i"; done
expect 0 "$A2" clear s2; contains "s2 cleared at #31"
expect 0 "$A2" read s2; contains "a2.cleared"
checks=$((checks + 1)); [ "$(printf '%s\n' "$out" | wc -l)" = 2 ] || fail "read after clear: $out"
expect 0 "$A2" --json clear s2
checks=$((checks + 1)); [ "$(printf '%s' "$out" | j 'd["cleared"], d["clear_index"]')" = "True 31" ] || fail "clear --json: $out"
expect 0 "$A2" reclaim s2; contains "reclaimed 30 events"; contains "reclaim s2: batch 1" err
checks=$((checks + 1)); [ "$(sql "select count(*) from a2_events where session_id = 's2'")" = 1 ] || fail "reclaim left events"
expect 0 "$A2" --json reclaim s2
checks=$((checks + 1)); [ "$(printf '%s' "$out" | j 'd["deleted"]')" = 0 ] || fail "second reclaim: $out"

# Text output never hands a control character to the terminal: ESC, BEL,
# C1 controls (U+009B is CSI) and bytes that are not UTF-8 print escaped;
# --json stays exact.
clean() { # the last command's stdout and stderr hold no control byte
    checks=$((checks + 1))
    python3 - "$TMP/out" "$TMP/err" <<'PY' || fail "control characters reached the terminal in: $*"
import re, sys
bad = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
sys.exit(1 if any(bad.search(open(f, "rb").read()) for f in sys.argv[1:]) else 0)
PY
}
es=$'ev\e[31m'
et=$'t\e]0;pwned\a'
expect 0 "$A2" append "$es" "$et" '{"x":"\u009b2J"}' --target $'m\e[2J'; clean append
contains 'ev\x1b[31m t\x1b]0;pwned\x07 #1'
expect 0 "$A2" read "$es"; clean read; contains 't\x1b]0;pwned\x07'; contains '\u009b2J'
expect 0 "$A2" cursors "$es"; clean cursors; contains 'm\x1b[2J'
sql "update a2_cursors set failed_at = 1, failure_count = 3, attempt_count = 3, last_error = E'\\x1b[5mdown' || chr(155) || E'\\x07' where session_id = 'ev' || chr(27) || '[31m'"
expect 0 "$A2" dead-letters "$es"; clean dead-letters; contains '\x1b[5mdown\u009b\x07'
expect 1 "$A2" redrive "$es" $'no\e[1mbody' 1 --retry; clean redrive; contains 'no dead letter of no\x1b[1mbody at index 1 in ev\x1b[31m' err
expect 0 "$A2" --json read "$es"
checks=$((checks + 1))
[ "$(printf '%s' "$out" | j 'd[0]["session"] == "ev\x1b[31m" and d[0]["type"] == "t\x1b]0;pwned\x07" and d[0]["payload"]["x"] == "\x9b2J"')" = True ] || fail "--json read is not exact: $out"
printf '{"lsn":"0/1","at":"2026-01-01T00:00:00.000Z","transition":"failed","session":"a\\u001b[31m\\u009b","consumer":"c\\u0007","cursor":"#1","before":null,"after":{"head":1,"attempt":1,"error":"bad\\u001b]0;x\\u0007"}}\n' >"$TMP/evil.jsonl"
printf '\xff\xfe{"lsn":"0/2"}\n' >>"$TMP/evil.jsonl"
expect 1 "$A2" audit "$TMP/evil.jsonl"; clean audit; contains 'a\x1b[31m\u009b'; contains 'error: bad\x1b]0;x\x07'; contains 'evil.jsonl:2: not a JSON object' err
# Emptied here, before the start: the child's own redirection may come after
# wait_out has read the previous command's output.
: >"$TMP/out"
"$A2" audit "$TMP/evil.jsonl" --follow >"$TMP/out" 2>"$TMP/err" &
fpid=$!
wait_out "$TMP/out" 'a\\x1b' 15
kill -INT "$fpid"; wait "$fpid" 2>/dev/null
out=$(cat "$TMP/out"); err=$(cat "$TMP/err")
clean "audit --follow"; contains 'c\x07'

# Store errors: no schema -> exit 1 naming it; no server -> exit 1.
sql "alter table a2_events rename to a2_events_gone"
expect 1 "$A2" read s1; contains "read failed" err
expect 1 "$A2" append s1 x; contains "append failed" err
sql "alter table a2_events_gone rename to a2_events"
expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" cursors s1; contains "could not connect to the database" err
# A2_STORE_TIMEOUT_MS: a bad value is a usage error; a good one bounds a
# call that waits for its session's lock (held here for up to 60 s, and
# cancelled once the append is done).
expect 2 env A2_STORE_TIMEOUT_MS=soon "$A2" read s1; contains "A2_STORE_TIMEOUT_MS must be a whole number" err
expect 2 env A2_STORE_TIMEOUT_MS=-1 "$A2" append s1 x; contains 'not "-1"' err
psql "$A2_TEST_DB" -XAtqc "begin; select pg_advisory_xact_lock(hashtext('s9')); select pg_sleep(60); commit" >/dev/null &
holder=$!
deadline=$((SECONDS + 20))
until [ "$(sql "select count(*) from pg_locks l join pg_database d on d.oid = l.database where l.locktype = 'advisory' and l.granted and d.datname = current_database()")" = 1 ]; do
    [ $SECONDS -gt $deadline ] && { fail "the holder did not take the session's lock"; break; }
    sleep 0.1
done
t0=$(date +%s%N)
expect 1 env A2_STORE_TIMEOUT_MS=300 "$A2" append s9 x; contains "canceling statement due to statement timeout" err
# (well under the 60 s hold: the timeout ended the wait, not the holder)
checks=$((checks + 1)); [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 10000 ] || fail "A2_STORE_TIMEOUT_MS=300 did not bound the append"
sql "select pg_cancel_backend(pid) from pg_stat_activity where datname = current_database() and query like '%pg_sleep(60)%' and pid <> pg_backend_pid()" >/dev/null
wait "$holder" 2>/dev/null
checks=$((checks + 1)); [ "$(sql "select count(*) from a2_events where session_id = 's9'")" = 0 ] || fail "a timed-out append wrote"
for c in "append s t" "read s" "cursors s" "dead-letters s" "redrive s c 1 --skip" "clear s" "reclaim s"; do
    expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" $c
done
finish
