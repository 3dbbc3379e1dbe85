#!/usr/bin/env bash
# Schema 8 over an older one: `a2 schema apply` rebuilds a2_cursors_heads
# and a2_cursors_pending from schema 5's definitions (two keys; no
# "failed_at is null" in the heads index), keeps the rows, drops the old
# a2__unpin(text, text, text, bigint), and a second apply changes nothing;
# over schema 6 it rebuilds a2_cursors_pending (no "consumer <> ''"), drops
# a2_cursors_holds and sets a2_cursors' fillfactor to 80; over schema 7 it
# drops the CHECK constraint on a2_cursors.kind; and it replaces an
# a2__wake_log whose parameters were named otherwise.
set -uo pipefail
: "${A2_TEST_DB:?run under tests/run}" "${A2_BIN:?run under tests/run}"
fail() { echo "test_schema_upgrade: $*"; exit 1; }
q() { psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
defs() {
    q "select string_agg(indexdef, ' | ' order by indexname) from pg_indexes
        where indexname in ('a2_cursors_heads', 'a2_cursors_pending')"
}
q "select a2_append(session => 'up', events => '[{\"type\": \"t\", \"targets\": [{\"consumer\": \"c\"}]}]')" >/dev/null ||
    fail "append failed"
want=$(defs)
# The definitions of schema 5, and its a2__unpin.
q "drop index a2_cursors_heads, a2_cursors_pending" || fail "drop failed"
q "create index a2_cursors_heads on a2_cursors (session_id, head) where head is not null" || fail "old heads"
q "create index a2_cursors_pending on a2_cursors (consumer, session_id)
     where head is not null and failed_at is null" || fail "old pending"
q "create function a2__unpin(session text, consumer text, cursor_key text, head bigint)
     returns void language sql as 'select null'" || fail "old a2__unpin"
[ "$(defs)" != "$want" ] || fail "the old definitions were not made"
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema apply >/dev/null || fail "a2 schema apply failed"
[ "$(defs)" = "$want" ] || fail "after apply: $(defs), expected $want"
[ "$(q "select count(*) from pg_proc where proname = 'a2__unpin'")" = 1 ] ||
    fail "a2__unpin overloads: $(q "select string_agg(oid::regprocedure::text, ', ') from pg_proc where proname = 'a2__unpin'")"
[ "$(q "select count(*) from a2_cursors where session_id = 'up' and head = 1")" = 1 ] ||
    fail "the cursor row is gone"
# A second apply keeps the indexes (same objects, not rebuilt).
before=$(q "select string_agg(oid::text, ',' order by relname) from pg_class
            where relname in ('a2_cursors_heads', 'a2_cursors_pending')")
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema apply >/dev/null || fail "second apply failed"
after=$(q "select string_agg(oid::text, ',' order by relname) from pg_class
           where relname in ('a2_cursors_heads', 'a2_cursors_pending')")
[ "$before" = "$after" ] || fail "a second apply rebuilt the indexes ($before -> $after)"
# Schema 6's a2_cursors_pending.
q "drop index a2_cursors_pending" || fail "drop failed"
q "create index a2_cursors_pending on a2_cursors (consumer, session_id, head)
     where head is not null and failed_at is null" || fail "schema 6 pending"
q "create index a2_cursors_holds on a2_cursors (claim_expires_at) where claim_expires_at is not null" ||
    fail "schema 6 holds"
q "alter table a2_cursors reset (fillfactor)" || fail "schema 6 fillfactor"
[ "$(defs)" != "$want" ] || fail "schema 6's definition was not made"
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema apply >/dev/null || fail "a2 schema apply over schema 6 failed"
[ "$(defs)" = "$want" ] || fail "after apply over schema 6: $(defs), expected $want"
[ -z "$(q "select to_regclass('a2_cursors_holds')")" ] || fail "a2_cursors_holds is still there"
[ "$(q "select reloptions::text from pg_class where oid = 'a2_cursors'::regclass")" = "{fillfactor=80}" ] ||
    fail "a2_cursors' options: $(q "select reloptions::text from pg_class where oid = 'a2_cursors'::regclass")"
# Schema 7's CHECK on a2_cursors.kind.
checks() { q "select count(*) from pg_constraint where conrelid = 'a2_cursors'::regclass and contype = 'c'"; }
[ "$(checks)" = 0 ] || fail "a fresh schema has CHECK constraints on a2_cursors"
q "alter table a2_cursors add constraint a2_cursors_kind_check check (kind in ('event', 'lane', 'log'))" ||
    fail "schema 7 check"
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema apply >/dev/null || fail "a2 schema apply over schema 7 failed"
[ "$(checks)" = 0 ] || fail "after apply over schema 7: $(checks) CHECK constraints on a2_cursors"
[ "$(q "select count(*) from a2_cursors where session_id = 'up' and head = 1")" = 1 ] ||
    fail "the cursor row is gone after apply over schema 7"
# An earlier schema's a2__wake_log (five parameters, some named otherwise)
# and a2_wake_log (without log_from): replaced by this one's, no overload left.
q "drop function a2__wake_log(text, text, text, jsonb, boolean, bigint)" || fail "drop a2__wake_log"
q "create function a2__wake_log(v_session text, v_consumer text, v_lane text, v_types jsonb,
                                v_backfill boolean) returns jsonb language sql as 'select null::jsonb'" ||
    fail "the renamed a2__wake_log"
q "drop function a2_wake_log(text, text, text, jsonb, boolean, bigint, bigint, bigint)" || fail "drop a2_wake_log"
q "create function a2_wake_log(session text, consumer text, lane text, types jsonb default null,
                               backfill boolean default false, after_xid bigint default null,
                               wait_ms bigint default 1000) returns jsonb language sql as 'select null::jsonb'" ||
    fail "the old a2_wake_log"
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema apply >/dev/null || fail "a2 schema apply over a renamed a2__wake_log failed"
[ "$(q "select string_agg(proargnames::text, ' ') from pg_proc where proname = 'a2__wake_log'")" = "{session,consumer,lane,types,backfill,log_from}" ] ||
    fail "a2__wake_log's parameters: $(q "select string_agg(proargnames::text, ' ') from pg_proc where proname = 'a2__wake_log'")"
[ "$(q "select count(*) from pg_proc where proname = 'a2_wake_log'")" = 1 ] ||
    fail "a2_wake_log overloads: $(q "select string_agg(oid::regprocedure::text, ' ') from pg_proc where proname = 'a2_wake_log'")"
A2_DB=$A2_TEST_DB "$A2_BIN/a2" schema check >/dev/null || fail "schema check after the upgrade"
echo "test_schema_upgrade: passed"
