# liba2decoder extras: real fixtures, the libFuzzer target, the benchmark.
#
#   make fixtures             on a throwaway cluster, run tests/fixtures/
#                             scenario.sql (row changes in SQL) and then the
#                             store's own operations (drive_store.c, liba2store)
#                             and capture the real wal2json output into
#                             tests/fixtures/store.jsonl and store_ops.jsonl
#   make fuzz                 (fuzz-decoder) build build/fuzz/fuzz_decoder and
#                             fuzz for FUZZ_DECODER_TIME seconds (default 30)
#                             from tests/fuzz/decoder/corpus
#   make fuzz-decoder-corpus  reseed the corpus from the fixtures
#   bench/decode/run          (make bench) decoder throughput against
#                             pg_recvlogical, see bench/decode/run

FUZZ_DECODER_TIME ?= 30
FUZZ_DECODER_BIN := build/fuzz/fuzz_decoder
FUZZ_DECODER_SRCS := $(wildcard decoder/*.c)
FUZZ_DECODER_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Wall -Wextra -Werror

.PHONY: fixtures fuzz fuzz-decoder fuzz-decoder-corpus

FIXTURE_STORE := $(B)/fixtures/a2-fixture-store

$(FIXTURE_STORE): $(B)/obj/tests/fixtures/drive_store.o $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

fixtures: $(FIXTURE_STORE)
	tests/fixtures/capture $(FIXTURE_STORE)

$(FUZZ_DECODER_BIN): tests/fuzz/decoder/fuzz_decoder.c $(FUZZ_DECODER_SRCS) $(wildcard decoder/*.h) include/a2/decoder.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_DECODER_CFLAGS) -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -o $@ tests/fuzz/decoder/fuzz_decoder.c \
	    $(FUZZ_DECODER_SRCS) -ljansson

# The run's new inputs go to build/fuzz/decoder-corpus; the seeds in the
# repository stay as they are. rss_limit_mb bounds what one input may cost
# (the 100 MB and deep-nesting inputs are in tests/unit/test_decoder.c).
fuzz-decoder: $(FUZZ_DECODER_BIN)
	@mkdir -p build/fuzz/decoder-corpus
	$(FUZZ_DECODER_BIN) -max_total_time=$(FUZZ_DECODER_TIME) -max_len=65536 \
	    -rss_limit_mb=1024 -timeout=10 -artifact_prefix=build/fuzz/decoder- \
	    -dict=tests/fuzz/decoder/wal2json.dict \
	    build/fuzz/decoder-corpus tests/fuzz/decoder/corpus

fuzz: fuzz-decoder

fuzz-decoder-corpus:
	tests/fuzz/decoder/seed

CHECK_EXTRA += fuzz-decoder
