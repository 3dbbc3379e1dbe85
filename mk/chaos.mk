# Reliability: the chaos run, fuzz campaigns of the consumer's and the
# worker's frame handling, resource bounds.
#
#   make chaos          tests/chaos/run for CHAOS_SECONDS (default 600) on a
#                       throwaway cluster, release build: kill -9 of the
#                       consumer and workers, PostgreSQL restarts (fast and
#                       immediate), cut TCP connections, then a drain and the
#                       invariants table (tests/chaos/check.sql)
#   make chaos-short    the same for 120 s (part of make check)

CHAOS_SECONDS ?= 600

.PHONY: chaos chaos-short

chaos:
	$(MAKE) VARIANT=release all
	A2_BIN=build/release/bin CHAOS_SECONDS=$(CHAOS_SECONDS) tests/chaos/run

chaos-short:
	$(MAKE) VARIANT=release all
	A2_BIN=build/release/bin CHAOS_SECONDS=120 CHAOS_DRAIN=150 tests/chaos/run

CHECK_EXTRA += chaos-short
