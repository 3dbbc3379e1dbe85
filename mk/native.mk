# The native a2_batch: sql/a2_batch.c -> build/pg/a2_batch.so, a server
# module built against PostgreSQL's server headers
# (postgresql-server-dev-<major>, which deploy/install-deps installs). The
# store works without it: schema.sql's a2_batch is PL/pgSQL, and
# sql/a2_batch_native.sql swaps in this one.
#
#   make native           build/pg/a2_batch.so (also part of `make`)
#   make install-native   into the server's library folder (pg_config
#                         --pkglibdir), for sql/a2_batch_native.sql's default
#
# deploy/pg-dev copies build/pg/a2_batch.so into each throwaway cluster's
# folder, and deploy/apply-schema loads it there.

.PHONY: native install-native

PG_SERVER_INC := $(shell pg_config --includedir-server 2>/dev/null)
PG_PKGLIBDIR := $(shell pg_config --pkglibdir 2>/dev/null)
NATIVE_SO := build/pg/a2_batch.so
NATIVE_CFLAGS := -std=gnu11 -O2 -g -fPIC -fno-strict-aliasing -fwrapv \
                 -Wall -Wmissing-prototypes -Werror -I$(PG_SERVER_INC)

ifneq ($(wildcard $(PG_SERVER_INC)/postgres.h),)
all: $(NATIVE_SO)
endif

native: $(NATIVE_SO)

$(NATIVE_SO): sql/a2_batch.c
	@test -f "$(PG_SERVER_INC)/postgres.h" || { echo "native: PostgreSQL server headers not found (install postgresql-server-dev-15)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(NATIVE_CFLAGS) -shared -o $@ $<

install-native: $(NATIVE_SO)
	install -d $(DESTDIR)$(PG_PKGLIBDIR)
	install -m 0755 $(NATIVE_SO) $(DESTDIR)$(PG_PKGLIBDIR)/a2_batch.so
