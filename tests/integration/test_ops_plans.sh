#!/usr/bin/env bash
# The operators' functions (sql/src/65-ops.sql) read a2_cursors and
# a2_events through their indexes, never a sequential scan: each statement
# they run is planned and printed by auto_explain (nested statements,
# as notices) over 20,000 seeded dead letters across 2,000 sessions.
set -uo pipefail
: "${A2_TEST_DB:?run with tests/run}" "${A2_TOP:?run with tests/run}"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
psql "$A2_TEST_DB" -qX -v sessions=2000 -v per=10 -v t0=1800000000000 \
    -f "$A2_TOP/tests/sql/dead_letters_seed.sql" >/dev/null || { echo "seed failed" >&2; exit 1; }
# A few pending heads too, for the backlog's pending walk, and what most of
# the tables hold in a deployment: 100,000 events whose runs are done.
psql "$A2_TEST_DB" -qX -v ON_ERROR_STOP=1 >/dev/null <<'SQL' || { echo "appends failed" >&2; exit 1; }
insert into a2_events (session_id, idx, event_type, event_id, created_at)
select 'done-' || s, i, 't', 'e-' || i, 1800000000000
  from generate_series(1, 10000) s, generate_series(1, 10) i;
insert into a2_cursors (session_id, consumer, cursor_key, epoch, kind, position, head)
select 'done-' || s, case when s % 2 = 0 then 'billing' else 'mail' end, '#' || i, i, 'event', i, null
  from generate_series(1, 10000) s, generate_series(1, 10) i;
select a2_append(session => 'p-' || i, events => '[{"type":"t","targets":[{"consumer":"billing"}]}]')
  from generate_series(1, 50) i;
analyze a2_cursors;
analyze a2_events;
SQL

plans() { # SQL: the plans of every statement SQL runs, as notices
    psql "$A2_TEST_DB" -qX -v ON_ERROR_STOP=1 2>&1 <<SQL
load 'auto_explain';
set auto_explain.log_min_duration = 0;
set auto_explain.log_nested_statements = on;
set auto_explain.log_level = notice;
set client_min_messages = notice;
$1
SQL
}

check() { # NAME SQL INDEX...: the plans name each INDEX and scan no a2 table sequentially
    local name=$1 sql=$2 out
    shift 2
    out=$(plans "$sql")
    if ! grep -q "Query Text" <<<"$out"; then
        fail "$name: no plans printed: $out"
        return
    fi
    if grep -q "ERROR" <<<"$out"; then
        fail "$name: $(grep ERROR <<<"$out")"
        return
    fi
    for ix in "$@"; do
        grep -q "using $ix on\|on $ix\b" <<<"$out" || { fail "$name: no scan of $ix in: $out"; return; }
    done
    if grep -E "Seq Scan on a2_(cursors|events)" <<<"$out" >/dev/null; then
        fail "$name: a sequential scan: $(grep -E 'Seq Scan on a2_' <<<"$out")"
        return
    fi
    echo "ok: $name"
}

key='{"failed_at": 1800001800000, "session": "dl-01000", "consumer": "mail", "cursor_key": "#4", "epoch": 4}'
check "find, every consumer" "select count(*) from a2_find_dead_letters(max_rows => 100)" a2_cursors_dead a2_events_pkey
check "find, every consumer, next page" \
    "select count(*) from a2_find_dead_letters(after => '$key', max_rows => 100)" a2_cursors_dead
check "find, one consumer, error text, next page" \
    "select count(*) from a2_find_dead_letters(consumer_name => 'mail', error_text => 'timeout', after => '$key')" \
    a2_cursors_dead_consumer
check "find, a time range and a type" \
    "select count(*) from a2_find_dead_letters(event_type => 'mail.send', failed_after => 1800000000000, failed_before => 1800000600000)" \
    a2_cursors_dead
check "count, one consumer" "select a2_count_dead_letters(consumer_name => 'billing')" a2_cursors_dead_consumer
check "count, a time range" \
    "select a2_count_dead_letters(failed_after => 1800000000000, failed_before => 1800000600000)" a2_cursors_dead
check "bulk retry of one consumer's" \
    "select a2_redrive_matching(action => 'retry', consumer_name => 'billing', max_rows => 500)" \
    a2_cursors_dead_consumer
check "bulk skip of a time range" \
    "select a2_redrive_matching(action => 'skip', failed_before => 1800000600000, max_rows => 200)" \
    a2_cursors_dead
check "backlog" "select * from a2_backlog()" a2_cursors_pending a2_cursors_dead_consumer
check "cancel" "select a2_cancel(session => 'p-7', consumer => 'billing', index => 1)" a2_cursors_heads

# The head's event is looked up row by row whatever the planner expects of
# the dead letters: with nested loops priced out (what a planner expecting
# thousands of them does to a join), no call reads a2_events sequentially.
events_by_index() { # NAME SQL
    local out
    out=$(plans "begin; set local enable_nestloop = off; $2; rollback;")
    if grep -q "ERROR" <<<"$out" || ! grep -q "Query Text" <<<"$out"; then
        fail "$1, no nested loops: $out"
    elif grep -E "Seq Scan on a2_events" <<<"$out" >/dev/null; then
        fail "$1, no nested loops: $(grep -E 'Seq Scan on a2_events' <<<"$out")"
    elif ! grep -E "Index (Only )?Scan using a2_events_(pkey|types) on a2_events" <<<"$out" >/dev/null; then
        fail "$1, no nested loops: no lookup of the head's event in: $out"
    else
        echo "ok: $1, no nested loops"
    fi
}
events_by_index "find, every consumer" "select count(*) from a2_find_dead_letters(max_rows => 100)"
events_by_index "find, one consumer" "select count(*) from a2_find_dead_letters(consumer_name => 'mail', max_rows => 1000)"
events_by_index "count, a type" "select a2_count_dead_letters(event_type => 'mail.send')"
events_by_index "bulk retry of one consumer's" \
    "select a2_redrive_matching(action => 'retry', consumer_name => 'billing', max_rows => 500)"
events_by_index "bulk skip of a type" \
    "select a2_redrive_matching(action => 'skip', event_type => 'mail.send', max_rows => 200)"

# What the calls did is what they say.
n=$(psql "$A2_TEST_DB" -qXAt -c "select count(*) from a2_cursors where session_id = 'p-7' and head is null and position = 1")
[ "$n" = 1 ] || fail "the cancelled head was not passed ($n)"
# A dead letter written while a bulk retry waits for its row: the retry
# redrives the row's new version (the one it locked).
key=$(psql "$A2_TEST_DB" -qXAt -c "select session_id || ' ' || cursor_key from a2_cursors
                                    where consumer = 'mail' and failed_at is not null
                                    order by failed_at, session_id, consumer, cursor_key, epoch limit 1")
read -r ks kc <<<"$key"
psql "$A2_TEST_DB" -qXAt >/dev/null <<SQL &
begin;
update a2_cursors set last_error = 'written meanwhile'
 where session_id = '$ks' and cursor_key = '$kc' and consumer = 'mail';
do \$\$ begin
    for i in 1..600 loop
        exit when exists (select 1 from pg_locks where not granted);
        perform pg_sleep(0.05);
    end loop;
end \$\$;
commit;
SQL
holder=$!
# (the retry starts once the writer holds the row: it waits in its loop)
for _ in $(seq 1 600); do
    [ "$(psql "$A2_TEST_DB" -qXAt -c "select count(*) from pg_stat_activity
                                      where state = 'active' and query like 'do %pg_locks%'")" = 1 ] && break
    sleep 0.05
done
got=$(psql "$A2_TEST_DB" -qXAt -c "select a2_redrive_matching(action => 'retry', consumer_name => 'mail', max_rows => 1)->'count'")
wait $holder
row=$(psql "$A2_TEST_DB" -qXAt -c "select (failed_at is null) || ' ' || last_error from a2_cursors
                                   where session_id = '$ks' and cursor_key = '$kc' and consumer = 'mail'")
if [ "$got" = 1 ] && [ "$row" = "true written meanwhile" ]; then
    echo "ok: bulk retry of a row written while it waited"
else
    fail "bulk retry of a row written while it waited: count $got, row ($key): $row"
fi

[ $failures -eq 0 ] || { echo "$failures failures" >&2; exit 1; }
echo "test_ops_plans: all passed"
