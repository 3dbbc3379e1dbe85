#!/usr/bin/env bash
# The operator's commands across sessions, on a real store and a real
# a2-consumer: dead-letters by filter and by page, bulk redrive (counted
# first, done with --yes, bounded by --max), cancel (and its audited
# "cancelled" then "skipped"), backlog; and their refusals.
. "$(dirname "$0")/test_cli.lib"
slot=ops_$$
. "$(dirname "$0")/test_consumer.lib"

claim_fail() { # SESSION ERROR: claims billing's head 1 and fails it for good
    sql "select a2_claim(session => '$1', holder => 'w1', ttl_ms => 30000, consumers => '[\"billing\"]')" >/dev/null
    sql "select a2_fail(session => '$1', consumer => 'billing', lane => null, index => 1, attempt => 1,
                        error => '$2', max_failures => 1)" >/dev/null
}
# what a JSON document on stdout says at a jq-like path, with python
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); exec("print(" + sys.argv[2] + ")")' "$out" "$1"; }

start_consumer || finish

# Dead letters in five sessions, two kinds of error, one of them hostile.
for i in 1 2 3 4 5; do
    expect 0 "$A2" append "ops-$i" invoice.send '{"n":'$i'}' --target billing
done
expect 0 "$A2" append "ops-6" mail.send '{"x":"<script>alert(1)</script>"}' --target billing
claim_fail ops-1 "upstream TIMEOUT after 30 s"
claim_fail ops-2 "upstream timeout after 30 s"
claim_fail ops-3 "connection refused"
claim_fail ops-4 "connection refused"
claim_fail ops-5 "100% of \"quotes\" and \\ backslash"
claim_fail ops-6 "connection refused"

expect 0 "$A2" --json dead-letters
[ "$(jget 'len(d["dead_letters"])')" = 6 ] || fail "six dead letters across sessions: $out"
[ "$(jget 'd["next"]')" = None ] || fail "one page has no next: $out"
expect 0 "$A2" --json dead-letters --error timeout
[ "$(jget 'sorted(r["event"]["session"] for r in d["dead_letters"])')" = "['ops-1', 'ops-2']" ] ||
    fail "error filter, any case: $out"
expect 0 "$A2" --json dead-letters --error '100%'
[ "$(jget 'len(d["dead_letters"])')" = 1 ] || fail "a % in the filter is a literal: $out"
expect 0 "$A2" --json dead-letters --type mail.send
[ "$(jget '[r["event"]["session"] for r in d["dead_letters"]]')" = "['ops-6']" ] || fail "type filter: $out"
[ "$(jget 'd["dead_letters"][0]["event"]["payload"]["x"]')" = "<script>alert(1)</script>" ] ||
    fail "the payload comes back exactly: $out"
expect 0 "$A2" --json dead-letters --consumer nobody
[ "$(jget 'len(d["dead_letters"])')" = 0 ] || fail "consumer filter: $out"
expect 0 "$A2" --json dead-letters --since 1h
[ "$(jget 'len(d["dead_letters"])')" = 6 ] || fail "--since 1h: $out"
expect 0 "$A2" --json dead-letters --until 1h
[ "$(jget 'len(d["dead_letters"])')" = 0 ] || fail "--until 1h: $out"
expect 0 "$A2" dead-letters --error refused
contains "ops-3"; contains "connection refused"

# Pages of two: newest first, every dead letter once, a next key while a
# page is full (the last one may be empty).
seen=()
after=()
for page in 1 2 3 4; do
    expect 0 "$A2" --json dead-letters --limit 2 "${after[@]}"
    for r in $(jget '" ".join(r["event"]["session"] for r in d["dead_letters"])'); do seen+=("$r"); done
    next=$(jget 'json.dumps(d["next"]) if d["next"] else ""')
    [ -z "$next" ] && break
    after=(--after "$next")
done
[ "${#seen[@]}" = 6 ] && [ "$(printf '%s\n' "${seen[@]}" | sort -u | wc -l)" = 6 ] ||
    fail "paging saw ${seen[*]}"
expect 0 "$A2" --json dead-letters
want=$(jget '" ".join(r["event"]["session"] for r in d["dead_letters"])')
[ "${seen[*]}" = "$want" ] || fail "pages in the order of one list: ${seen[*]} vs $want"
expect 0 "$A2" dead-letters --limit 2
contains "next page: --after '"

# Bulk retry: counted without --yes, nothing changes; with it, the audit
# shows each "retried" and the heads are pending again.
expect 0 "$A2" redrive --all --retry --error refused
contains "3 dead letters match; run again with --yes"
[ "$(sql "select count(*) from a2_cursors where failed_at is not null")" = 6 ] || fail "a count changed nothing"
expect 0 "$A2" --json redrive --all --retry --error refused --yes
[ "$(jget '(d["count"], d["more"])')" = "(3, False)" ] || fail "bulk retry: $out"
for s in ops-3 ops-4 ops-6; do
    wait_log 20 "$audit" "\"transition\":\"retried\",\"session\":\"$s\"" || true
done
[ "$(sql "select count(*) from a2_cursors where failed_at is null and head = 1")" = 3 ] || fail "three pending again"

# --max bounds a bulk skip; what is left is still there.
expect 0 "$A2" redrive --all --skip --max 1 --yes
contains "skipped: 1 dead letters (more match: run again)"
[ "$(sql "select count(*) from a2_cursors where failed_at is not null")" = 2 ] || fail "--max 1 skipped one"
wait_log 20 "$audit" '"transition":"skipped"' || true

# Backlog: what the tables hold.
expect 0 "$A2" --json backlog billing
[ "$(jget '[(r["consumer"], r["pending"], r["running"], r["dead_letters"]) for r in d]')" = "[('billing', 3, 0, 2)]" ] ||
    fail "backlog: $out"
expect 0 "$A2" backlog
contains "DEAD LETTERS"; contains "billing"

# Cancel: a waiting head, a lane's head (its next event becomes the head), a
# delayed head; a running one and one that is not pending are refused.
expect 0 "$A2" cancel ops-3 billing 1 --reason "duplicate order"
contains "ops-3 billing #1: cancelled"
wait_log 20 "$audit" '"transition":"cancelled","session":"ops-3"' &&
    grep '"transition":"cancelled","session":"ops-3"' "$audit" | grep -q '"error":"cancelled: duplicate order"' ||
    fail "the cancel's audit line carries its reason: $(grep ops-3 "$audit" | tail -2)"
wait_log 20 "$audit" '"transition":"skipped","session":"ops-3"' || true
c_line=$(grep -n '"transition":"cancelled","session":"ops-3"' "$audit" | cut -d: -f1)
s_line=$(grep -n '"transition":"skipped","session":"ops-3"' "$audit" | cut -d: -f1)
[ -n "$c_line" ] && [ -n "$s_line" ] && [ "$c_line" -lt "$s_line" ] || fail "cancelled comes before skipped"

expect 0 "$A2" append lane-1 a '{}' --target billing:q
expect 0 "$A2" append lane-1 b '{}' --target billing:q
expect 0 "$A2" cancel lane-1 billing 1
[ "$(sql "select head from a2_cursors where session_id = 'lane-1' and cursor_key = 'lane:q'")" = 2 ] ||
    fail "the lane's next event is its head"
expect 0 "$A2" append later-1 t '{}' --target billing --in 1h
expect 0 "$A2" cancel later-1 billing 1
[ "$(sql "select coalesce(head::text, 'idle') from a2_cursors where session_id = 'later-1'")" = idle ] ||
    fail "a delayed head is cancelled"
sql "select a2_claim(session => 'ops-4', holder => 'w9', ttl_ms => 600000, consumers => '[\"billing\"]')" >/dev/null
expect 1 "$A2" cancel ops-4 billing 1
contains "is running (held by w9" err
[ "$(sql "select claim_holder from a2_cursors where session_id = 'ops-4'")" = w9 ] || fail "a running head is kept"
expect 1 "$A2" --json cancel ops-4 billing 1
[ "$(jget '(d["outcome"], d["holder"])')" = "('running', 'w9')" ] || fail "--json running: $out"
expect 1 "$A2" cancel ops-1 billing 1
contains "no pending head of billing at index 1 in ops-1" err
expect 1 "$A2" cancel no-such-session billing 1

# Refusals: one usage line each, nothing written.
expect 2 "$A2" dead-letters ops-1 --consumer billing
expect 2 "$A2" dead-letters --limit 0
expect 2 "$A2" dead-letters --limit 1001
expect 2 "$A2" dead-letters --after '{"failed_at":"x"}'
expect 2 "$A2" dead-letters --after 'not json'
expect 2 "$A2" dead-letters --since yesterday
expect 2 "$A2" dead-letters --type ''
expect 2 "$A2" dead-letters --consumer ''
expect 2 "$A2" redrive --all --error x
expect 2 "$A2" redrive --all --retry --skip
expect 2 "$A2" redrive --yes --retry ops-1 billing 1
expect 2 "$A2" redrive --all --retry --max 0
expect 2 "$A2" redrive --all --retry ops-1
expect 2 "$A2" cancel ops-1 billing
expect 2 "$A2" cancel ops-1 billing zero
expect 2 "$A2" cancel ops-1 billing 1 --reason "$(head -c 70000 /dev/zero | tr '\0' x)"
expect 0 "$A2" dead-letters --help
contains "--error TEXT"
[ "$(sql "select count(*) from a2_cursors where failed_at is not null")" = 2 ] || fail "the refusals wrote nothing"
finish
