#!/usr/bin/env bash
# The whole cycle of tests/sql/cycle.sql from psql alone (append, claim,
# complete with a returned event, fail to a dead letter, dead_letters,
# redrive retry and skip, clear, reclaim), every result checked; and a
# wrong expectation is caught (the check can fail).
set -uo pipefail
: "${A2_TEST_DB:?run under tests/run}"
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
out=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/cycle.sql" 2>&1)
rc=$?
steps=$(printf '%s\n' "$out" | grep -c ': ok$')
want=$(grep -c '^select pg_temp.expect(' "$top/tests/sql/cycle.sql")
if [ $rc -ne 0 ] || [ "$steps" -ne "$want" ]; then
    echo "test_sql_cycle: exit $rc, $steps of $want steps ok:"
    printf '%s\n' "$out" | tail -n 5
    exit 1
fi
# The same check with a wrong expectation fails, naming the step.
bad=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/expect.sql" -f - 2>&1 <<'SQL'
select pg_temp.expect(a2_reclaim(session => 'shop-1'), '{"deleted": 7}', 'wrong');
SQL
)
if ! printf '%s' "$bad" | grep -q 'step "wrong": got'; then
    echo "test_sql_cycle: a wrong expectation was not caught: $bad"
    exit 1
fi
echo "test_sql_cycle: $steps steps passed"
