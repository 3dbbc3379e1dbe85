# liba2wire extras: the libFuzzer target of the frame reader.
#
#   make fuzz-wire            build build/fuzz/fuzz_wire and fuzz for FUZZ_WIRE_TIME
#                             seconds (default 30) from tests/fuzz/wire/corpus
#   make fuzz-wire-corpus     regenerate the seed corpus with the encoders

FUZZ_WIRE_TIME ?= 30
FUZZ_WIRE_BIN := build/fuzz/fuzz_wire
FUZZ_WIRE_GEN := build/fuzz/wire_gen_corpus
FUZZ_WIRE_SRCS := $(wildcard wire/*.c) common/utf8.c common/buf.c
FUZZ_WIRE_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Wall -Wextra -Werror

.PHONY: fuzz-wire fuzz-wire-corpus

$(FUZZ_WIRE_BIN): tests/fuzz/wire/fuzz_reader.c $(FUZZ_WIRE_SRCS) $(wildcard wire/*.h) include/a2/wire.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_WIRE_CFLAGS) -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -o $@ tests/fuzz/wire/fuzz_reader.c \
	    $(FUZZ_WIRE_SRCS) -ljansson -lmsgpackc -lm

fuzz-wire: $(FUZZ_WIRE_BIN)
	@mkdir -p build/fuzz/wire-corpus
	$(FUZZ_WIRE_BIN) -max_total_time=$(FUZZ_WIRE_TIME) -max_len=70000 \
	    -rss_limit_mb=1024 -timeout=10 -artifact_prefix=build/fuzz/ \
	    build/fuzz/wire-corpus tests/fuzz/wire/corpus

$(FUZZ_WIRE_GEN): tests/fuzz/wire/gen_corpus.c $(FUZZ_WIRE_SRCS) include/a2/wire.h
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_WIRE_CFLAGS) -o $@ $< $(FUZZ_WIRE_SRCS) -ljansson -lmsgpackc -lm

fuzz-wire-corpus: $(FUZZ_WIRE_GEN)
	@mkdir -p tests/fuzz/wire/corpus
	$(FUZZ_WIRE_GEN) tests/fuzz/wire/corpus

CHECK_EXTRA += fuzz-wire
