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

out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/history.sql" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "history.sql: psql exited $rc"
[ "$(value reltuples)" = -1 ] || fail "history.sql: the table has statistics: the case is not tested"
ops="append append_ids append_replay claim complete batch renew fail claim_busy claim_retry complete_events complete_replay claim_after_xid"
line=
for op in $ops; do
    n=$(value "$op")
    line="$line $op $n"
    [ -n "$n" ] || fail "history.sql: no count for $op"
    [ "$n" -le 200 ] || fail "history.sql: $op read $n rows and index entries on a session of 2,000 events (at most 200)"
done
echo "test_store_scale: a session of 2,000 completed events, rows and index entries read:$line"

# Statistics that record both indexes of heads empty, a2_cursors_pending
# the smaller, beside 3,000 sessions with a head: a claim, an empty claim,
# a completion and an append read a few dozen blocks (a scan of
# a2_cursors_pending for a session read 74 and 96, for the two claims).
out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/vacuumed_empty.sql" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "vacuumed_empty.sql: psql exited $rc"
line=
for op in vclaim:50 vclaim_empty:30 vcomplete:50 vappend:50; do
    name=${op%%:*}
    blocks=$(value "$name" | awk '{ print $2 }')
    line="$line $name $blocks"
    [ -n "$blocks" ] || fail "vacuumed_empty.sql: no count for $name"
    [ "$blocks" -le "${op#*:}" ] ||
        fail "vacuumed_empty.sql: $name read $blocks blocks (at most ${op#*:}; the other sessions hold 3,000 heads)"
done
echo "test_store_scale: indexes of heads recorded empty, blocks read:$line"
echo "test_store_scale: passed"
