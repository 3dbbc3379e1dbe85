#!/usr/bin/env bash
# The store's statements are prepared once per connection by a2_batch, so
# after a few calls PostgreSQL may run them with generic plans, where no
# parameter is folded into a constant. Run the whole store suite under forced
# generic plans and under forced custom plans: each outcome must be the same.
set -uo pipefail
t=${A2_BIN:?}/../tests/integration/test_store
[ -x "$t" ] || { echo "test_store_plans: $t is not built" >&2; exit 1; }
status=0
for mode in force_generic_plan force_custom_plan; do
    echo "== plan_cache_mode=$mode"
    A2_TEST_STORE_OPTIONS="options='-c plan_cache_mode=$mode'" "$t" || status=1
done
exit $status
