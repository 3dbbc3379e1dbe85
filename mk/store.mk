# liba2store extras.
#
#   make store-soak     the store's concurrency tests with a longer mixed
#                       workload (STORE_SOAK_SECONDS, default 300) on a
#                       throwaway cluster, release build
#   bench/store/run     (make bench) append and claim+complete throughput
#                       beside a raw INSERT, and round trips per operation

STORE_SOAK_SECONDS ?= 300

# $(call throwaway_db,NAME) begins a recipe line: a fresh deploy/pg-dev
# cluster in $$dir/pg (dir from mktemp /tmp/NAME.XXXXXX, removed on exit)
# with sql/schema.sql loaded, its URL in $$db; the command after it follows
# with &&.
throwaway_db = @dir=$$(mktemp -d /tmp/$(1).XXXXXX); chmod 755 "$$dir"; \
	trap 'deploy/pg-dev destroy "$$dir/pg" >/dev/null 2>&1; rm -rf "$$dir"' EXIT; \
	deploy/pg-dev start "$$dir/pg" >/dev/null && \
	db=$$(deploy/pg-dev url "$$dir/pg") && \
	psql "$$db" -qf sql/schema.sql &&

.PHONY: store-soak

store-soak:
	$(MAKE) VARIANT=release build/release/tests/integration/test_store_concurrency
	$(call throwaway_db,a2-store-soak) \
	A2_TEST_DB="$$db" A2_TEST_PGDEV="$$dir/pg" A2_STORE_SOAK_SECONDS=$(STORE_SOAK_SECONDS) \
	    build/release/tests/integration/test_store_concurrency
