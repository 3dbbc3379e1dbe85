#!/usr/bin/env bash
# The a2 functions plan their statements generically (plan_cache_mode is
# set on each function), whatever the caller's session says. Run the whole
# store suite with the session under forced generic plans and under forced
# custom plans: each outcome must be the same.
set -uo pipefail
t=${A2_BIN:?}/../tests/integration/test_store
[ -x "$t" ] || { echo "test_store_plans: $t is not built" >&2; exit 1; }
status=0
for mode in force_generic_plan force_custom_plan; do
    echo "== plan_cache_mode=$mode"
    A2_TEST_STORE_OPTIONS="options='-c plan_cache_mode=$mode'" "$t" || status=1
done
exit $status
