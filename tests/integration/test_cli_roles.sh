#!/usr/bin/env bash
# deploy/create-roles on real Postgres: idempotent; bad arguments exit 2; a
# database without the schema or an unreachable one exit 1; the store role
# can do every a2 CLI operation and nothing beyond; the consumer role cannot
# write, yet a2-consumer runs with it and wakes a worker that uses the store
# role.
PREFIX="create-roles: "
. "$(dirname "$0")/test_cli.lib"
top=$(cd "$(dirname "$0")/../.." && pwd)
CR=$top/deploy/create-roles
cpid=
wpid=
trap 'kill -TERM $cpid $wpid 2>/dev/null; sleep 0.3; kill -KILL $cpid $wpid 2>/dev/null; rm -rf "$TMP"' EXIT

expect 2 "$CR" --bogus; contains "unknown argument --bogus" err
expect 2 "$CR" --store-role 'Bad-Name'; contains "must match" err
expect 2 "$CR" --store-role x --consumer-role x; contains "must differ" err
expect 2 "$CR" --db; contains "--db needs a conninfo" err
expect 0 "$CR" --help; contains "least-privilege roles"
run "$CR" --db "host=127.0.0.1 port=1 connect_timeout=2"
checks=$((checks + 1)); [ "$rc" = 1 ] || fail "unreachable database: exit $rc"
# The admin database has no a2 schema.
admin=$(printf '%s' "$A2_TEST_DB" | sed 's/dbname=[^ ]*/dbname=postgres/')
run "$CR" --db "$admin"
checks=$((checks + 1)); [ "$rc" = 1 ] || fail "no schema: exit $rc"
contains "a2 schema is not applied" err

expect 0 "$CR" --db "$A2_TEST_DB"; contains "are ready"
expect 0 "$CR" --db "$A2_TEST_DB"   # idempotent
store_db="$A2_TEST_DB user=a2_store"
cons_db="$A2_TEST_DB user=a2_consumer"

# The store role: every CLI operation works.
expect 0 "$A2" --db "$store_db" append r1 order '{"n":1}' --target billing:main --id o1
expect 0 "$A2" --db "$store_db" read r1; contains "o1"
expect 0 "$A2" --db "$store_db" cursors r1; contains "billing"
expect 0 "$A2" --db "$store_db" dead-letters r1
expect 0 "$A2" --db "$store_db" clear r1
expect 0 "$A2" --db "$store_db" reclaim r1
expect 0 "$A2" --db "$store_db" schema check
# ... and nothing beyond.
for stmt in "create table a2_x (i int)" "select pg_create_logical_replication_slot('x', 'wal2json')" \
    "update a2_meta set value = '0'" "drop table a2_events"; do
    checks=$((checks + 1))
    if psql "$store_db" -XAtqc "$stmt" >/dev/null 2>&1; then fail "a2_store could run: $stmt"; fi
done
# The consumer role reads, never writes, and cannot call the store functions.
checks=$((checks + 1))
psql "$cons_db" -XAtqc "select count(*) from a2_cursors" >/dev/null 2>&1 || fail "a2_consumer cannot read a2_cursors"
# ... but commits its presence expiry ticks (a transactional logical message).
checks=$((checks + 1))
psql "$cons_db" -XAtqc "select pg_logical_emit_message(true, 'a2-hb', 'expire 1')" >/dev/null 2>&1 ||
    fail "a2_consumer cannot commit a presence expiry tick"
for stmt in "delete from a2_events" "insert into a2_clears values ('x', 1)" "select a2_batch('[]')" \
    "select a2_append(session => 'x', events => '[]')" "select a2__fail('STORE_FAILED', 'x')"; do
    checks=$((checks + 1))
    if psql "$cons_db" -XAtqc "$stmt" >/dev/null 2>&1; then fail "a2_consumer could run: $stmt"; fi
done

# --revoke-public: PUBLIC loses pg_logical_emit_message and TEMPORARY here;
# the consumer role keeps the messages it emits.
expect 0 "$CR" --db "$A2_TEST_DB" --revoke-public; contains "are ready"
for stmt in "select pg_logical_emit_message(true, 'a2-hb', 'expire 1')" "create temporary table t (i int)"; do
    checks=$((checks + 1))
    if psql "$store_db" -XAtqc "$stmt" >/dev/null 2>&1; then fail "a2_store could run after --revoke-public: $stmt"; fi
done
checks=$((checks + 1))
psql "$cons_db" -XAtqc "select pg_logical_emit_message(true, 'a2-hb', 'expire 1')" >/dev/null 2>&1 ||
    fail "a2_consumer lost its messages to --revoke-public"

# a2-consumer runs as the consumer role; a worker as the store role is woken.
if [ -x "$A2_BIN/a2-consumer" ]; then
    "$A2_BIN/a2-consumer" --db "$cons_db" --slot "roles_$$" --listen "unix:$TMP/a2.sock" \
        --audit "$TMP/audit.jsonl" >"$TMP/consumer.log" 2>&1 &
    cpid=$!
    deadline=$((SECONDS + 20))
    until grep -q "ready" "$TMP/consumer.log" || [ $SECONDS -gt $deadline ] || ! kill -0 "$cpid" 2>/dev/null; do sleep 0.1; done
    checks=$((checks + 1))
    grep -q "ready" "$TMP/consumer.log" || fail "a2-consumer as a2_consumer did not start: $(tail -3 "$TMP/consumer.log")"
    A2_DB=$store_db "$A2_BIN/a2-worker" --consumer billing --connect "unix:$TMP/a2.sock" \
        --exec 'cat >/dev/null' --degraded-sweep 60000 >/dev/null 2>"$TMP/worker.log" &
    wpid=$!
    deadline=$((SECONDS + 20))
    until grep -q "connected to a2-consumer" "$TMP/worker.log" || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
    "$A2" --db "$store_db" append r2 order '{"n":2}' --target billing:main >/dev/null
    deadline=$((SECONDS + 20))
    until grep -q "completed r2 billing #1" "$TMP/worker.log" || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
    checks=$((checks + 1))
    grep -q "wake r2 " "$TMP/worker.log" && grep -q "completed r2 billing #1" "$TMP/worker.log" ||
        fail "the worker was not woken through the least-privilege consumer: $(tail -5 "$TMP/worker.log"); consumer: $(tail -3 "$TMP/consumer.log")"
    # The consumer writes its audit lines in groups: wait for them.
    checks=$((checks + 1))
    deadline=$((SECONDS + 20))
    until grep -q '"session":"r2"' "$TMP/audit.jsonl" 2>/dev/null || [ $SECONDS -gt $deadline ]; do sleep 0.1; done
    grep -q '"session":"r2"' "$TMP/audit.jsonl" || fail "no audit line for r2"
    kill -TERM "$wpid" "$cpid"
    wait "$wpid" "$cpid" 2>/dev/null
    cpid= wpid=
fi
finish
