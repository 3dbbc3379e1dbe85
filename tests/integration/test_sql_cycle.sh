#!/usr/bin/env bash
# The whole cycle of tests/sql/cycle.sql from psql alone (append, claim,
# complete with a returned event, fail to a dead letter, dead_letters,
# redrive retry and skip, clear, reclaim), every result checked; and a
# wrong expectation is caught (the check can fail).
set -uo pipefail
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$top/tests/integration/sql_steps.lib"
sql_steps test_sql_cycle "$top/tests/sql/cycle.sql" || exit 1
# The same check with a wrong expectation fails, naming the step.
bad=$(psql "$A2_TEST_DB" -X -q -At -v ON_ERROR_STOP=1 -f "$top/tests/sql/expect.sql" -f - 2>&1 <<'SQL'
select pg_temp.expect(a2_reclaim(session => 'shop-1'), '{"deleted": 7}', 'wrong');
SQL
)
if ! printf '%s' "$bad" | grep -q 'step "wrong": got'; then
    echo "test_sql_cycle: a wrong expectation was not caught: $bad"
    exit 1
fi
