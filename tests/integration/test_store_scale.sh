#!/usr/bin/env bash
# Store operations on a table with no statistics yet (just filled, not yet
# analyzed) read a few index entries a head, whatever the other sessions
# hold: tests/sql/no_statistics.sql claims one session's 100 heads beside
# 39 other sessions' 3,900 cursors and completes them in one a2_batch; the
# index entries of a2_cursors read by that transaction must stay under 20 a
# head (a lookup by (consumer, session) read every head of the session at
# each completion, about 150 a head; a claim beside it could scan the whole
# index of heads).
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
echo "test_store_scale: passed"
