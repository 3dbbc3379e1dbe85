#!/usr/bin/env bash
# tests/sql/batch_runs.sql from psql: a2_batch's runs of completions settled
# together give the results and rows of the same operations one at a time
# (held heads, stale attempts, a head twice, replays, pins, a lane between,
# a clear marker), and a refused operation refuses the whole batch with
# a2_complete's error.
set -uo pipefail
: "${A2_TEST_DB:?run under tests/run}"
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
sql=$top/tests/sql/batch_runs.sql
out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$sql" 2>&1)
rc=$?
steps=$(printf '%s\n' "$out" | grep -c ': ok$')
want=$(grep -cE '^select pg_temp\.(expect|same)\(' "$sql")
if [ $rc -ne 0 ] || [ "$steps" -ne "$want" ]; then
    echo "test_batch_runs: exit $rc, $steps of $want steps ok:"
    printf '%s\n' "$out" | tail -n 8
    exit 1
fi
echo "test_batch_runs: $steps steps passed"
