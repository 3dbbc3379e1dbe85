#!/usr/bin/env bash
# deploy/pg-dev: its life cycle and the one-line errors for missing pieces.
set -uo pipefail
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
pgdev=$top/deploy/pg-dev
pass=0 fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
bad() { echo "not ok - $1"; fail=$((fail + 1)); }
expect_err() { # name expected-fragment command...
    local name=$1 frag=$2
    shift 2
    local out rc
    out=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
        printf '%s' "$out" | grep -qF -- "$frag"; then
        ok "$name"
    else
        bad "$name (exit $rc: $out)"
    fi
}
tmp=$(mktemp -d /tmp/a2-pgdev-test.XXXXXX)
chmod 755 "$tmp"
trap '"$pgdev" destroy "$tmp/c1" >/dev/null 2>&1; rm -rf "$tmp"' EXIT

# Missing server binaries.
PGBIN=$tmp/nobin expect_err "no server binaries" "PostgreSQL server binaries not found" "$pgdev" start "$tmp/x"

# wal2json missing: a PGBIN whose pg_config points at a library folder without it.
mkdir -p "$tmp/bin" "$tmp/lib"
for b in initdb pg_ctl postgres psql; do ln -s "/usr/lib/postgresql/15/bin/$b" "$tmp/bin/$b"; done
printf '#!/bin/sh\necho %s\n' "$tmp/lib" >"$tmp/bin/pg_config"
chmod +x "$tmp/bin/pg_config"
PGBIN=$tmp/bin expect_err "no wal2json" "wal2json is not installed" "$pgdev" start "$tmp/x"

# A port that is taken: the test cluster's own.
port=$(cat "$A2_TEST_PGDEV/port")
expect_err "port taken" "port $port on 127.0.0.1 is taken" "$pgdev" start "$tmp/c2" --port "$port"
"$pgdev" destroy "$tmp/c2" >/dev/null 2>&1

# A folder the postgres user cannot reach.
mkdir -m 700 "$tmp/private"
expect_err "unreachable folder" "the postgres user cannot reach" "$pgdev" start "$tmp/private/c"

# Life cycle.
if "$pgdev" start "$tmp/c1" >/dev/null; then ok "start"; else bad "start"; fi
url=$("$pgdev" url "$tmp/c1")
case "$url" in "host=127.0.0.1 port="*" dbname=a2 user=postgres") ok "url" ;; *) bad "url: $url" ;; esac
if [ "$(psql "$url" -tAc 'show wal_level')" = logical ]; then ok "wal_level logical"; else bad "wal_level"; fi
if [ "$(psql "$url" -tAc 'show listen_addresses')" = 127.0.0.1 ]; then ok "loopback only"; else bad "listen_addresses"; fi
if psql "$url" -tAc "select pg_drop_replication_slot(slot_name) from pg_create_logical_replication_slot('t', 'wal2json')" >/dev/null; then
    ok "wal2json slot"
else
    bad "wal2json slot"
fi
if psql "$url replication=database" -c "IDENTIFY_SYSTEM" >/dev/null 2>&1; then ok "replication connection"; else bad "replication connection"; fi
if "$pgdev" status "$tmp/c1" | grep -q running; then ok "status running"; else bad "status"; fi
"$pgdev" start "$tmp/c1" >/dev/null && ok "start is idempotent" || bad "start twice"
"$pgdev" stop "$tmp/c1" >/dev/null
"$pgdev" status "$tmp/c1" >/dev/null
[ $? -eq 3 ] && ok "status stopped" || bad "status after stop"
"$pgdev" start "$tmp/c1" >/dev/null && ok "restart after stop" || bad "restart after stop"
"$pgdev" destroy "$tmp/c1" >/dev/null
[ ! -e "$tmp/c1" ] && ok "destroy removes the folder" || bad "destroy"
"$pgdev" frobnicate "$tmp/c1" >/dev/null 2>&1
[ $? -eq 2 ] && ok "unknown command exits 2" || bad "unknown command"

# install-deps: silent when everything is there; one clear line when not root.
out=$(A2_DEPS_OPTIONAL="" "$top/deploy/install-deps" 2>&1)
[ $? -eq 0 ] && [ -z "$out" ] && ok "install-deps quiet when complete" || bad "install-deps: $out"
cp "$top/deploy/install-deps" "$tmp/install-deps" && chmod 755 "$tmp/install-deps"
out=$(cd / && A2_DEPS_PACKAGES="a2-no-such-package" runuser -u nobody -- "$tmp/install-deps" 2>&1)
rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "missing packages: a2-no-such-package; run this script as root"; then
    ok "install-deps asks for root"
else
    bad "install-deps as non-root (exit $rc: $out)"
fi
# A missing optional package is a warning, not a failure.
out=$(cd / && A2_DEPS_PACKAGES="procps" A2_DEPS_OPTIONAL="a2-no-such-package" runuser -u nobody -- "$tmp/install-deps" 2>&1)
rc=$?
if [ $rc -eq 0 ] && printf '%s' "$out" | grep -q "optional packages missing: a2-no-such-package (as root: apt-get install a2-no-such-package)"; then
    ok "install-deps warns of a missing optional package"
else
    bad "install-deps with an optional package missing (exit $rc: $out)"
fi

echo "pgdev: $pass passed, $fail failed"
[ $fail -eq 0 ]
