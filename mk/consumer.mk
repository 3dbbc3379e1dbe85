# a2-consumer extras.
#
#   make consumer-latency   on a throwaway cluster, measure wake-up latency
#                           (synchronous_commit on and off) and the catch-up
#                           rate from a 20000-transaction backlog against
#                           pg_recvlogical (tests/integration/
#                           test_consumer_latency.c prints the tables)

.PHONY: consumer-latency

consumer-latency:
	$(MAKE) VARIANT=release all build/release/tests/integration/test_consumer_latency
	@set -e; dir=$$(mktemp -d /tmp/a2-consumer-latency.XXXXXX); \
	trap 'deploy/pg-dev destroy "$$dir" >/dev/null 2>&1 || true' EXIT; \
	deploy/pg-dev start "$$dir" >/dev/null; \
	url=$$(deploy/pg-dev url "$$dir"); \
	psql "$$url" -v ON_ERROR_STOP=1 -qf sql/schema.sql >/dev/null; \
	A2_TEST_DB="$$url" A2_TEST_PGDEV="$$dir" A2_BIN=$$PWD/build/release/bin \
	A2_TOP=$$PWD CMOCKA_MESSAGE_OUTPUT=stdout \
	    build/release/tests/integration/test_consumer_latency
