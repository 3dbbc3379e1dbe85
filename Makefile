# a2: build, test, install.
#
#   make               release build in build/release
#   make check         dependencies, release + ASan/UBSan builds, every test
#   make demo          live demo on a throwaway cluster
#   make bench         benchmarks (tables on stdout, CSV in bench/results)
#   make install       PREFIX=/usr/local DESTDIR=
#   make clean
#
# Layout conventions (so modules never need to edit this file):
#   <lib>/*.c                     -> build/<v>/lib/liba2<lib>.a  (lib: decoder wire store worker common)
#   common/*.c                    -> liba2common.a, internal: what several parts share (clocks,
#                                    addresses and dialing, libpq connections, UTF-8, hashing); its headers stay in common/ and
#                                    are not installed, the archive is (liba2store and liba2worker
#                                    link it)
#   <dir>/main.c                  -> a program (consumer: a2-consumer, worker: a2-worker, cli: a2)
#   consumer/*.c, cli/*.c (not main.c) -> internal archives the tests link too
#   tests/unit/test_*.c           -> one cmocka executable each (no database)
#   tests/integration/test_*.c    -> one cmocka executable each (A2_TEST_DB set by tests/run)
#   tests/integration/test_*.sh   -> shell tests run by tests/run with the same environment
#   tests/common/*.c              -> linked into every test executable
#   mk/*.mk                       -> extra targets of a module (fuzz, fixtures, bench ...)

PREFIX  ?= /usr/local
DESTDIR ?=
VARIANT ?= release
CC      ?= cc

B := build/$(VARIANT)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wformat=2 -Wvla
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -g -Iinclude -Itests/common \
               -I$(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql) \
               -MMD -MP

ifeq ($(VARIANT),asan)
OPT_CFLAGS := -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=all
OPT_LDFLAGS := -fsanitize=address,undefined
else ifeq ($(VARIANT),debug)
OPT_CFLAGS := -O0
OPT_LDFLAGS :=
else
OPT_CFLAGS := -O2
OPT_LDFLAGS :=
endif

ALL_CFLAGS  := $(BASE_CFLAGS) $(OPT_CFLAGS) $(CFLAGS)
ALL_LDFLAGS := $(OPT_LDFLAGS) $(LDFLAGS)
LDLIBS_ALL  := -lpq -ljansson -lmsgpackc -lmicrohttpd -lpthread -lm

# Libraries in link order (users first); common is used by all the others.
LIBDIRS := worker store wire decoder common
INTDIRS := consumer cli

lib_srcs = $(filter-out $(1)/main.c,$(wildcard $(1)/*.c))
lib_objs = $(patsubst %.c,$(B)/obj/%.o,$(call lib_srcs,$(1)))

# build/gen/schema_sql.c: the assembled schema as a C string, for `a2 schema apply`.
GEN_SCHEMA := $(B)/obj/gen/schema_sql.o

LIBS_PRESENT := $(foreach d,$(LIBDIRS),$(if $(call lib_srcs,$(d)),$(d)))
INTS_PRESENT := $(foreach d,$(INTDIRS),$(if $(call lib_srcs,$(d)),$(d)))
LIB_ARCHIVES := $(foreach d,$(LIBS_PRESENT),$(B)/lib/liba2$(d).a)
INT_ARCHIVES := $(foreach d,$(INTS_PRESENT),$(B)/lib/liba2$(d)_int.a)
# Everything a program or test links, users before providers.
LINK_ARCHIVES := $(INT_ARCHIVES) $(LIB_ARCHIVES)

PROGRAMS := $(if $(wildcard consumer/main.c),$(B)/bin/a2-consumer) \
            $(if $(wildcard worker/main.c),$(B)/bin/a2-worker) \
            $(if $(wildcard cli/main.c),$(B)/bin/a2)

COMMON_TEST_SRCS := $(wildcard tests/common/*.c)
COMMON_TEST_OBJS := $(patsubst %.c,$(B)/obj/%.o,$(COMMON_TEST_SRCS))
UNIT_TESTS := $(patsubst tests/unit/%.c,$(B)/tests/unit/%,$(wildcard tests/unit/test_*.c))
INTEG_TESTS := $(patsubst tests/integration/%.c,$(B)/tests/integration/%,$(wildcard tests/integration/test_*.c))

# bench/<name>/*.c -> build/<v>/bench/a2-bench-<name>; bench/*.c (what the
# benchmarks share) goes into each of them.
BENCH_NAMES := $(sort $(patsubst bench/%/,%,$(dir $(wildcard bench/*/*.c))))
BENCH_PROGS := $(foreach n,$(BENCH_NAMES),$(B)/bench/a2-bench-$(n))

.PHONY: all tests check check-variant demo bench install clean deps format format-check tidy cppcheck
.DEFAULT_GOAL := all
# Keep objects that only pattern rules name.
.SECONDARY:

all: build/gen/schema.sql $(LIB_ARCHIVES) $(PROGRAMS) $(BENCH_PROGS)

tests: all $(UNIT_TESTS) $(INTEG_TESTS)

deps:
	@deploy/install-deps

# The test command of the README. Release build first (warnings are errors),
# then everything again under AddressSanitizer + UndefinedBehaviorSanitizer.
# The extra checks of the modules (short fuzz runs, the short chaos run) go
# first, each into its own log under build/check/ with one line of result, so
# the output ends with the test summaries.
# Both builds use every core; the tests run one at a time.
NPROC := $(shell nproc 2>/dev/null || echo 2)
check: deps
	$(MAKE) -j$(NPROC) VARIANT=release tests
	$(MAKE) -j$(NPROC) VARIANT=asan tests
	@mkdir -p build/check
	@for t in $(CHECK_EXTRA); do \
	    start=$$(date +%s); \
	    if $(MAKE) --no-print-directory $$t > build/check/$$t.log 2>&1; then \
	        echo "check: $$t passed in $$(( $$(date +%s) - start )) s (log: build/check/$$t.log)"; \
	    else \
	        echo "check: $$t FAILED; the end of build/check/$$t.log:"; \
	        tail -n 60 build/check/$$t.log; \
	        exit 1; \
	    fi; \
	done
	tests/run release
	tests/run asan

# Run the tests of one variant against an already built tree.
check-variant: tests
	tests/run $(VARIANT)

demo: deps
	$(MAKE) VARIANT=release all
	deploy/demo

bench: deps
	$(MAKE) VARIANT=release all
	@if [ -x bench/run ]; then bench/run; else echo "bench: no benchmarks yet"; fi

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# build/gen/schema.sql is sql/src/*.sql as one file (what sql/schema.sql
# includes with psql's \ir), for the library and `make install`.
build/gen/schema.sql: $(sort $(wildcard sql/src/*.sql)) deploy/assemble-schema
	@mkdir -p $(dir $@)
	deploy/assemble-schema > $@.tmp && mv $@.tmp $@

build/gen/schema_sql.c: build/gen/schema.sql deploy/embed-sql
	@mkdir -p $(dir $@)
	deploy/embed-sql a2_schema_sql $< > $@.tmp && mv $@.tmp $@

$(GEN_SCHEMA): build/gen/schema_sql.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

define LIB_RULE
$(B)/lib/liba2$(1).a: $(call lib_objs,$(1)) $(if $(filter store,$(1)),$(GEN_SCHEMA))
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach d,$(LIBS_PRESENT),$(eval $(call LIB_RULE,$(d))))

define INT_RULE
$(B)/lib/liba2$(1)_int.a: $(call lib_objs,$(1))
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach d,$(INTS_PRESENT),$(eval $(call INT_RULE,$(d))))

$(B)/bin/a2-consumer: $(B)/obj/consumer/main.o $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(B)/bin/a2-worker: $(B)/obj/worker/main.o $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(B)/bin/a2: $(B)/obj/cli/main.o $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

define BENCH_RULE
$(B)/bench/a2-bench-$(1): $(patsubst %.c,$(B)/obj/%.o,$(wildcard bench/$(1)/*.c) $(wildcard bench/*.c)) $(LINK_ARCHIVES)
	@mkdir -p $$(dir $$@)
	$(CC) $(ALL_LDFLAGS) -o $$@ $$^ $(LDLIBS_ALL)
endef
$(foreach n,$(BENCH_NAMES),$(eval $(call BENCH_RULE,$(n))))

$(B)/tests/unit/%: $(B)/obj/tests/unit/%.o $(COMMON_TEST_OBJS) $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL) -lcmocka

$(B)/tests/integration/%: $(B)/obj/tests/integration/%.o $(COMMON_TEST_OBJS) $(LINK_ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS_ALL) -lcmocka

# The release version, as include/a2/version.h defines it.
A2_VERSION := $(shell sed -n 's/^\#define A2_VERSION "\(.*\)"$$/\1/p' include/a2/version.h)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	        $(DESTDIR)$(PREFIX)/include/a2 $(DESTDIR)$(PREFIX)/share/a2
	$(if $(strip $(PROGRAMS)),install -m 0755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin/)
	install -m 0644 $(LIB_ARCHIVES) $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 include/a2/*.h $(DESTDIR)$(PREFIX)/include/a2/
	for pc in a2store a2worker; do \
	    sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(A2_VERSION)|g' \
	        deploy/$$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc; \
	done
	install -m 0644 build/gen/schema.sql $(DESTDIR)$(PREFIX)/share/a2/

clean:
	rm -rf build

format:
	clang-format -i --style=file $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror --style=file $$(git ls-files '*.c' '*.h')

tidy:
	clang-tidy $$(git ls-files '*.c') -- $(BASE_CFLAGS)

cppcheck:
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability -Iinclude $$(git ls-files '*.c')

-include $(wildcard mk/*.mk)
-include $(shell find build/$(VARIANT) -name '*.d' 2>/dev/null)
