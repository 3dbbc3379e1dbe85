#!/usr/bin/env bash
# tests/sql/batch_runs.sql from psql: a2_batch's runs of completions settled
# together give the results and rows of the same operations one at a time
# (held heads, stale attempts, a head twice, replays, pins, a lane between,
# a clear marker), and a refused operation refuses the whole batch with
# a2_complete's error.
set -uo pipefail
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$top/tests/integration/sql_steps.lib"
sql_steps test_batch_runs "$top/tests/sql/batch_runs.sql"
