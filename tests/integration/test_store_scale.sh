#!/usr/bin/env bash
# Store operations on a table with no statistics yet (just filled, not yet
# analyzed) read a few index entries a head, whatever the other sessions
# hold: tests/sql/no_statistics.sql claims one session's 100 heads beside
# 39 other sessions' 3,900 cursors and completes them in one a2_batch; the
# index entries of a2_cursors read by that transaction must stay under 20 a
# head (a lookup by (consumer, session) read every head of the session at
# each completion, about 150 a head; a claim beside it could scan the whole
# index of heads). Then tests/sql/history.sql runs each of a worker's
# operations once on a session of 2,000 completed events, again with no
# statistics: none may read more than 200 rows and index entries (a join on
# a cursor's or an event's key planned as a scan of the session read some
# 4,000). tests/sql/vacuumed_empty.sql counts the blocks a session's
# operations read when the statistics record every index of heads empty.
set -uo pipefail
: "${A2_TEST_DB:?run under tests/run}"
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/no_statistics.sql" 2>&1)
rc=$?
value() { printf '%s\n' "$out" | sed -n "s/^$1 //p"; }
completed=$(value completed)
total=$(value total_read)
claim=$(value claim_read)
reltuples=$(value reltuples)
echo "test_store_scale: reltuples $reltuples; index entries read: claim $claim, claim and 100 completions $total"
fail() { echo "test_store_scale: $*"; printf '%s\n' "$out" | tail -n 5; exit 1; }
[ $rc -eq 0 ] || fail "psql exited $rc"
[ "$completed" = 100 ] || fail "completed $completed of 100 heads"
[ "$reltuples" = -1 ] || fail "the table has statistics (reltuples $reltuples): the case is not tested"
[ -n "$total" ] && [ "$total" -le 2000 ] || fail "read $total index entries for 100 heads (at most 2000)"

# bounded FILE WHAT OP:ROWS:BLOCKS...: runs tests/sql/FILE; each operation
# it marks read at most ROWS rows and index entries and BLOCKS blocks.
bounded() {
    local file=$1 what=$2 op name rows blocks line=
    shift 2
    out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/$file" 2>&1) ||
        fail "$file: psql failed"
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
bounded history.sql "a session of 2,000 completed events" \
    append:200:300 append_ids:200:300 append_replay:200:300 claim:200:300 complete:200:300 \
    batch:200:300 renew:200:300 fail:200:300 claim_busy:200:300 claim_retry:200:300 \
    complete_events:200:300 complete_replay:200:300 claim_after_xid:200:300
[ "$(value reltuples)" = -1 ] || fail "history.sql: the table has statistics: the case is not tested"
[ "$(value claim_hot)" -ge 1 ] ||
    fail "history.sql: the claim of 4 heads made $(value claim_hot) heap-only updates (an index on a claim's columns?)"

# Statistics that record both indexes of heads empty, a2_cursors_pending
# the smaller, beside 3,000 sessions with a head (a scan of
# a2_cursors_pending for a session read 74 and 96 blocks in the two claims).
bounded vacuumed_empty.sql "indexes of heads recorded empty" \
    vclaim:200:50 vclaim_empty:200:30 vcomplete:200:50 vappend:200:50
echo "test_store_scale: passed"
