# Snapshots and presence (include/a2/state.h) extras.
#
#   make state-bench    snapshot and presence operations/s on one connection
#                       beside the raw SQL statement doing the same, and their
#                       round trips (STATE_BENCH_SECONDS per cell, default 3),
#                       on a throwaway cluster, release build

STATE_BENCH_SECONDS ?= 3

.PHONY: state-bench

state-bench:
	$(MAKE) VARIANT=release build/release/tests/integration/test_state_bench
	$(call throwaway_db,a2-state-bench) \
	printf 'cluster: fsync=%s, %s cores\n' "$${PG_DEV_FSYNC:-off}" "$$(nproc)" && \
	A2_TEST_DB="$$db" A2_TEST_PGDEV="$$dir/pg" A2_STATE_BENCH_SECONDS=$(STATE_BENCH_SECONDS) \
	    build/release/tests/integration/test_state_bench
