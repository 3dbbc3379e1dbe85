#!/usr/bin/env bash
# make install: PREFIX and DESTDIR, headers, libraries, pkg-config, schema;
# a program builds against the staged install with pkg-config.
set -uo pipefail
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
pass=0 fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
bad() { echo "not ok - $1"; fail=$((fail + 1)); }
stage=$(mktemp -d /tmp/a2-install.XXXXXX)
trap 'rm -rf "$stage"' EXIT

if make -s -C "$top" VARIANT=release install PREFIX=/opt/a2 DESTDIR="$stage" >"$stage.log" 2>&1; then
    ok "make install"
else
    bad "make install: $(tail -n 3 "$stage.log")"
fi
rm -f "$stage.log"
root=$stage/opt/a2
for f in include/a2/schema.h lib/liba2store.a lib/pkgconfig/a2store.pc share/a2/schema.sql; do
    [ -f "$root/$f" ] && ok "installed $f" || bad "missing $f"
done
grep -q '^prefix=/opt/a2$' "$root/lib/pkgconfig/a2store.pc" && ok "pc prefix" || bad "pc prefix"
ver=$(sed -n 's/^#define A2_VERSION "\(.*\)"$/\1/p' "$top/include/a2/version.h")
for pc in a2store a2worker; do
    [ -n "$ver" ] && grep -qx "Version: $ver" "$root/lib/pkgconfig/$pc.pc" && ok "$pc.pc version $ver" || bad "$pc.pc version: $(grep Version "$root/lib/pkgconfig/$pc.pc")"
done
cmp -s <("$top/deploy/assemble-schema") "$root/share/a2/schema.sql" && ok "schema installed whole" || bad "installed schema is not the assembly of sql/src"
grep -q '^\\ir ' "$root/share/a2/schema.sql" && bad "installed schema includes other files" || ok "installed schema stands alone"

# A consumer of the library, built only from the staged tree.
cat >"$stage/prog.c" <<'C'
#include <a2/schema.h>
#include <stdio.h>
int main(void)
{
    char report[512];
    int rc = a2_schema_check(NULL, report, sizeof report);
    printf("%d %s\n", rc, report);
    return rc == 0 ? 0 : 1;
}
C
sed -i "s|^prefix=.*|prefix=$root|" "$root/lib/pkgconfig/a2store.pc"
if cc -o "$stage/prog" "$stage/prog.c" $(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --cflags --libs a2store) 2>"$stage/cc.log"; then
    ok "program links with pkg-config a2store"
    # The check reads the PG* environment when given no conninfo.
    out=$(PGDATABASE=$(sed -n 's/.*dbname=\([^ ]*\).*/\1/p' <<<"$A2_TEST_DB") \
        PGHOST=127.0.0.1 PGPORT=$(sed -n 's/.*port=\([0-9]*\).*/\1/p' <<<"$A2_TEST_DB") \
        PGUSER=postgres "$stage/prog")
    [ "$out" = "0 " ] && ok "installed library checks the test database" || bad "prog said: $out"
else
    bad "link: $(cat "$stage/cc.log")"
fi

# The complete worker of docs/worker.md builds and links against the staged
# install (pkg-config a2worker), and so does its pool variant: its code as
# written, given the card check it leaves to the application.
doc=$top/docs/worker.md
block() { # N: the Nth ```c block of the section "A complete worker in C"
    awk -v want="$1" '/^### A complete worker in C/ { on = 1; next }
        on && /^### / { on = 0 }
        on && /^```c$/ { n++; inside = 1; next }
        inside && /^```$/ { inside = 0; next }
        inside && n == want { print }' "$doc"
}
{
    block 1
    printf 'int card_ok(const char *payload) { return payload != NULL; }\n'
} >"$stage/worker.c"
{
    printf '#include <a2/worker.h>\n#include <stdlib.h>\n'
    printf 'static int charge(void *ctx, int slot, const a2_head *h, a2_worker_reply *reply)\n'
    printf '{ (void)ctx; (void)slot; (void)h; (void)reply; return 0; }\n'
    printf 'int pool_main(a2_worker *w);\nint pool_main(a2_worker *w)\n{\n'
    printf '    char err[256];\n    a2_consumer billing = {.name = "billing"};\n'
    block 2
    printf '    return 0;\n}\n'
} >"$stage/pool.c"
[ -s "$stage/worker.c" ] && grep -q 'int main' "$stage/worker.c" && ok "docs/worker.md has a complete worker" ||
    bad "no complete worker in docs/worker.md"
sed -i "s|^prefix=.*|prefix=$root|" "$root/lib/pkgconfig/a2worker.pc"
wflags=$(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --cflags --libs a2worker)
if cc -std=c11 -Wall -Werror -o "$stage/worker" "$stage/worker.c" $wflags 2>"$stage/cc.log"; then
    ok "the complete worker of docs/worker.md builds with pkg-config a2worker"
else
    bad "the complete worker of docs/worker.md: $(head -n 20 "$stage/cc.log")"
fi
if cc -std=c11 -Wall -Werror -c -o "$stage/pool.o" "$stage/pool.c" $wflags 2>"$stage/cc.log"; then
    ok "its pool variant builds"
else
    bad "the pool variant of docs/worker.md: $(head -n 20 "$stage/cc.log")"
fi

# The README's producer (its tour's C block, the body of a main) builds
# with pkg-config a2store.
{
    printf '#include <a2/store.h>\n#include <stdio.h>\nint main(void)\n{\n'
    awk '/^```c$/ { n++; inside = 1; next } inside && /^```$/ { inside = 0; next }
         inside && n == 1 { print }' "$top/README.md"
    printf '    return 0;\n}\n'
} >"$stage/producer.c"
if grep -q a2_store_append "$stage/producer.c" &&
    cc -std=c11 -Wall -Werror -o "$stage/producer" "$stage/producer.c" \
        $(PKG_CONFIG_PATH=$root/lib/pkgconfig pkg-config --cflags --libs a2store) 2>"$stage/cc.log"; then
    ok "the README's C producer builds with pkg-config a2store"
else
    bad "the README's C producer: $(head -n 20 "$stage/cc.log")"
fi

echo "install: $pass passed, $fail failed"
[ $fail -eq 0 ]
