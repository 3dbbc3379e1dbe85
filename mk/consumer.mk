# a2-consumer extras.
#
#   make consumer-latency   on a throwaway cluster, measure wake-up latency
#                           (synchronous_commit on and off) and the catch-up
#                           rate from a 20000-transaction backlog against
#                           pg_recvlogical (tests/integration/
#                           test_consumer_latency.c prints the tables)
#
# The consumer's SQL lives in consumer/*.sql; each file NAME.sql is embedded
# (deploy/embed-sql) as `const char a2__NAME_sql[]` in the consumer's
# archive.

.PHONY: consumer-latency

CONSUMER_SQL_OBJS := $(patsubst consumer/%.sql,$(B)/obj/gen/consumer_%_sql.o,\
                       $(wildcard consumer/*.sql))

build/gen/consumer_%_sql.c: consumer/%.sql deploy/embed-sql mk/consumer.mk
	@mkdir -p $(dir $@)
	deploy/embed-sql a2__$*_sql $< > $@.tmp && mv $@.tmp $@

$(B)/obj/gen/consumer_%_sql.o: build/gen/consumer_%_sql.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/lib/liba2consumer_int.a: $(CONSUMER_SQL_OBJS)

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
