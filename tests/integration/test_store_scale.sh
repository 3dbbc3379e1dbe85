#!/usr/bin/env bash
# What a store operation reads stays what its heads need, whatever else the
# tables hold and whatever the planner was told. Each script of tests/sql
# prints counts this test bounds:
# - planned_empty.sql (first, on the empty tables): a connection that
#   planned its statements on empty tables, then saw 3,000 cursors come;
#   a claim, a batch of completions and a completion (an update by ctid
#   planned on a small table was a sequential scan: 3,017 rows, 151 blocks);
# - no_statistics.sql: a table just filled, not analyzed; one session's 100
#   heads claimed beside 3,900 cursors of 39 other sessions and completed in
#   one a2_batch read under 20 index entries a head (a lookup by (consumer,
#   session) read every head of the session at each completion, about 150
#   a head; a claim beside it could scan the whole index of heads);
# - history.sql: each of a worker's operations once on a session of 2,000
#   completed events, with no statistics (a join on a cursor's or an
#   event's key planned as a scan of the session read some 4,000 rows);
# - vacuumed_empty.sql: statistics that record every index of heads empty
#   (a scan of a2_cursors_pending for a session read 74 and 96 blocks).
set -uo pipefail
: "${A2_TEST_DB:?run under tests/run}"
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
out=
value() { printf '%s\n' "$out" | sed -n "s/^$1 //p"; }
fail() { echo "test_store_scale: $*"; printf '%s\n' "$out" | tail -n 5; exit 1; }
run() { out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/$1" 2>&1) || fail "$1: psql failed"; }

# bounded FILE WHAT OP:ROWS:BLOCKS...: runs tests/sql/FILE; each operation
# it marks (read_marks.sql) read at most ROWS rows and index entries and
# BLOCKS blocks.
bounded() {
    local file=$1 what=$2 op name rows blocks line=
    shift 2
    run "$file"
    for op in "$@"; do
        name=${op%%:*}
        read -r rows blocks <<<"$(value "$name")"
        [ -n "$blocks" ] || fail "$file: no count for $name"
        line="$line $name $rows/$blocks"
        [ "$rows" -le "$(cut -d: -f2 <<<"$op")" ] && [ "$blocks" -le "$(cut -d: -f3 <<<"$op")" ] ||
            fail "$file: $name read $rows rows and index entries, $blocks blocks ($what; at most ${op#*:})"
    done
    echo "test_store_scale: $what, rows/blocks read:$line"
}

bounded planned_empty.sql "planned on empty tables" pclaim:200:80 pbatch:200:80 pcomplete:200:80

run no_statistics.sql
completed=$(value completed)
total=$(value total_read)
echo "test_store_scale: reltuples $(value reltuples); index entries read: claim $(value claim_read), claim and 100 completions $total"
[ "$completed" = 100 ] || fail "completed $completed of 100 heads"
[ "$(value reltuples)" = -1 ] || fail "the table has statistics (reltuples $(value reltuples)): the case is not tested"
[ -n "$total" ] && [ "$total" -le 2000 ] || fail "read $total index entries for 100 heads (at most 2000)"

bounded history.sql "a session of 2,000 completed events" \
    append:200:300 append_ids:200:300 append_replay:200:300 claim:200:300 complete:200:300 \
    batch:200:300 renew:200:300 fail:200:300 claim_busy:200:300 claim_retry:200:300 \
    complete_events:200:300 complete_replay:200:300 claim_after_xid:200:300
[ "$(value reltuples)" = -1 ] || fail "history.sql: the table has statistics: the case is not tested"
[ "$(value claim_hot)" -ge 1 ] ||
    fail "history.sql: the claim of 4 heads made $(value claim_hot) heap-only updates (an index on a claim's columns?)"

bounded vacuumed_empty.sql "indexes of heads recorded empty" \
    vclaim:200:50 vclaim_empty:200:30 vcomplete:200:50 vappend:200:50
echo "test_store_scale: passed"
