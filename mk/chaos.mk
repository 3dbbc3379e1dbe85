# Reliability: the chaos run, fuzz campaigns of the consumer's and the
# worker's frame handling, resource bounds.
#
#   make chaos          tests/chaos/run for CHAOS_SECONDS (default 600) on a
#                       throwaway cluster: kill -9 of the consumer and
#                       workers, PostgreSQL restarts (fast and immediate), cut
#                       TCP connections, then a drain and the invariants
#                       table (tests/chaos/check.sql). CHAOS_VARIANT=asan runs
#                       the ASan/UBSan programs (with a larger RSS bound).
#   make chaos-short    the same for 120 s at up to 20 appends/s a producer
#                       (part of make check)
#   make fuzz-server    build build/fuzz/fuzz_server (a2-consumer's worker
#                       server: frame reader and message handling over a real
#                       socket) and fuzz for FUZZ_SERVER_TIME s (default 20)
#   make fuzz-worker    build build/fuzz/fuzz_worker (liba2worker's
#                       connection: frame reader and events over a real
#                       socket) and fuzz for FUZZ_WORKER_TIME s (default 20)
#   make fuzz-campaign  the four libFuzzer targets (decoder, wire reader,
#                       consumer server, worker connection) one after the
#                       other, FUZZ_CAMPAIGN_TIME s each (default 600)
# New inputs go to build/fuzz/{server,worker}-corpus; the seeds (and the
# inputs of past findings) stay in tests/fuzz/{consumer,worker}/corpus.

CHAOS_SECONDS ?= 600
CHAOS_VARIANT ?= release
CHAOS_RSS_ASAN := $(if $(filter asan,$(CHAOS_VARIANT)),CHAOS_RSS_MB=512)

.PHONY: chaos chaos-short fuzz-server fuzz-worker fuzz-campaign

chaos:
	$(MAKE) VARIANT=$(CHAOS_VARIANT) all
	A2_BIN=build/$(CHAOS_VARIANT)/bin CHAOS_SECONDS=$(CHAOS_SECONDS) $(CHAOS_RSS_ASAN) tests/chaos/run

chaos-short:
	$(MAKE) VARIANT=$(CHAOS_VARIANT) all
	A2_BIN=build/$(CHAOS_VARIANT)/bin CHAOS_SECONDS=120 CHAOS_RATE=20 CHAOS_DRAIN=150 $(CHAOS_RSS_ASAN) tests/chaos/run

FUZZ_SERVER_TIME ?= 20
FUZZ_WORKER_TIME ?= 20
FUZZ_SERVER_BIN := build/fuzz/fuzz_server
FUZZ_WORKER_BIN := build/fuzz/fuzz_worker
FUZZ_CHAOS_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude \
    -I$(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql) \
    -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SERVER_SRCS := $(wildcard consumer/server*.c) consumer/route.c consumer/queue.c consumer/prom.c \
    $(wildcard wire/*.c) \
    $(wildcard common/*.c)
FUZZ_WORKER_SRCS := $(filter-out worker/main.c,$(wildcard worker/*.c)) \
    $(filter-out store/schema.c,$(wildcard store/*.c)) $(wildcard wire/*.c) \
    $(wildcard common/*.c)

$(FUZZ_SERVER_BIN): tests/fuzz/consumer/fuzz_server.c $(FUZZ_SERVER_SRCS) $(wildcard consumer/*.h wire/*.h common/*.h) include/a2/wire.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_CHAOS_CFLAGS) -o $@ tests/fuzz/consumer/fuzz_server.c $(FUZZ_SERVER_SRCS) \
	    -lpq -ljansson -lmsgpackc -lm

$(FUZZ_WORKER_BIN): tests/fuzz/worker/fuzz_worker.c $(FUZZ_WORKER_SRCS) $(wildcard worker/*.h store/*.h wire/*.h common/*.h) include/a2/worker.h include/a2/wire.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_CHAOS_CFLAGS) -o $@ tests/fuzz/worker/fuzz_worker.c $(FUZZ_WORKER_SRCS) \
	    -lpq -ljansson -lmsgpackc -lm -lpthread

fuzz-server: $(FUZZ_SERVER_BIN)
	@mkdir -p build/fuzz/server-corpus
	$(FUZZ_SERVER_BIN) -max_total_time=$(FUZZ_SERVER_TIME) -max_len=70000 \
	    -rss_limit_mb=1024 -timeout=10 -artifact_prefix=build/fuzz/server- \
	    build/fuzz/server-corpus tests/fuzz/consumer/corpus

fuzz-worker: $(FUZZ_WORKER_BIN)
	@mkdir -p build/fuzz/worker-corpus
	$(FUZZ_WORKER_BIN) -max_total_time=$(FUZZ_WORKER_TIME) -max_len=70000 \
	    -rss_limit_mb=1024 -timeout=10 -artifact_prefix=build/fuzz/worker- \
	    build/fuzz/worker-corpus tests/fuzz/worker/corpus

fuzz: fuzz-server fuzz-worker

FUZZ_CAMPAIGN_TIME ?= 600

fuzz-campaign:
	$(MAKE) fuzz-decoder FUZZ_DECODER_TIME=$(FUZZ_CAMPAIGN_TIME)
	$(MAKE) fuzz-wire FUZZ_WIRE_TIME=$(FUZZ_CAMPAIGN_TIME)
	$(MAKE) fuzz-server FUZZ_SERVER_TIME=$(FUZZ_CAMPAIGN_TIME)
	$(MAKE) fuzz-worker FUZZ_WORKER_TIME=$(FUZZ_CAMPAIGN_TIME)

CHECK_EXTRA += fuzz-server fuzz-worker chaos-short
