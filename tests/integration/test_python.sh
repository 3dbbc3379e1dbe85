#!/usr/bin/env bash
# The Python package (clients/python): it installs offline into a venv with
# Debian's setuptools (pip --no-build-isolation), and its tests pass against
# the real cluster and a real a2-consumer: the producer API in the caller's
# transaction, the error mapping, the Worker's wake-ups, retries and dead
# letters, log consumers, reconnects and the degraded sweep, and four worker
# processes sharing 1,000 events while one is killed -9.
. "$(dirname "$0")/test_cli.lib"
C=$A2_BIN/a2-consumer
[ -x "$C" ] || { echo "$C is not built" >&2; exit 1; }
PY=/usr/bin/python3
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}
cpid=
slot=py_$$
cleanup_all() {
    [ -n "$cpid" ] && kill -TERM "$cpid" 2>/dev/null && wait "$cpid" 2>/dev/null
    # Processes a Python test left behind (it writes their pids here).
    for f in "$TMP"/*.pid; do
        [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    sql "select pg_drop_replication_slot(slot_name) from pg_replication_slots
         where slot_name like '${slot}%' and not active" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup_all EXIT

for m in psycopg msgpack venv ensurepip; do
    "$PY" -c "import $m" 2>/dev/null || {
        echo "$(basename "$0"): $PY lacks the module $m (deploy/install-deps installs python3-psycopg, python3-msgpack, python3-venv, python3-pip)" >&2
        exit 1
    }
done

# Installs into a venv, offline: the system site packages give psycopg,
# msgpack and setuptools. A copy of the source, so the build writes nothing
# into the work tree.
cp -r "$top/clients/python" "$TMP/src"
rm -rf "$TMP/src/build" "$TMP/src"/*.egg-info
checks=$((checks + 1))
if ! "$PY" -m venv --system-site-packages "$TMP/venv" >"$TMP/venv.log" 2>&1; then
    fail "could not create the venv: $(tail -3 "$TMP/venv.log")"
    finish
fi
checks=$((checks + 1))
if ! "$TMP/venv/bin/pip" install --no-build-isolation --no-index "$TMP/src" >"$TMP/pip.log" 2>&1; then
    fail "pip install --no-build-isolation failed: $(tail -5 "$TMP/pip.log")"
    finish
fi
VPY=$TMP/venv/bin/python
checks=$((checks + 1))
where=$(cd "$TMP" && "$VPY" -c 'import a2; print(a2.__file__)' 2>&1)
case "$where" in
"$TMP/venv/"*) ;;
*) fail "a2 is not imported from the venv: $where" ;;
esac

# docs/sql.md's Python example, as written but for its conninfo: the order
# and its event in one transaction, then billing's claim and completion.
sql "create table if not exists orders (id text primary key)" >/dev/null
{
    echo "import os"
    awk '/^\*\*Python\*\*/ { on = 1 } on && /^```python$/ { inside = 1; next }
         inside && /^```$/ { exit } inside { print }' "$top/docs/sql.md" |
        sed 's/"dbname=shop"/os.environ["A2_TEST_DB"]/'
} >"$TMP/sql_md_example.py"
checks=$((checks + 1))
if ! grep -q 'os.environ\["A2_TEST_DB"\]' "$TMP/sql_md_example.py"; then
    fail "docs/sql.md's Python example was not found (or connects elsewhere)"
elif ! out=$(cd "$TMP" && "$VPY" "$TMP/sql_md_example.py" 2>&1); then
    fail "docs/sql.md's Python example failed: $out"
fi
checks=$((checks + 1))
[ "$(sql "select count(*) from orders o join a2_events e on e.event_id = o.id
          where o.id = 'order-7' and e.session_id = 'shop-1'")" = 1 ] ||
    fail "docs/sql.md's Python example stored no order-7 with its event"
checks=$((checks + 1))
[ "$(sql "select count(*) from a2_cursors c join a2_events e on e.session_id = c.session_id
          and e.idx = c.position where e.event_id = 'order-7' and c.consumer = 'billing'")" = 1 ] ||
    fail "docs/sql.md's Python example did not complete order-7 for billing"

# The a2-consumer of the tests (one test starts and stops its own as well).
sock=$TMP/a2.sock
"$C" --db "$A2_TEST_DB" --slot "$slot" --listen "unix:$sock" --audit "$TMP/audit.jsonl" \
    --status-interval 200 >"$TMP/consumer.log" 2>&1 &
cpid=$!
deadline=$((SECONDS + 30))
until [ -S "$sock" ] && grep -q "ready" "$TMP/consumer.log" 2>/dev/null; do
    if [ $SECONDS -gt $deadline ] || ! kill -0 "$cpid" 2>/dev/null; then
        fail "a2-consumer did not start: $(tail -3 "$TMP/consumer.log")"
        finish
    fi
    sleep 0.1
done

# The tests (of the copy) run from $TMP, so `import a2` can only find the
# installed package.
export A2_PY_TMP=$TMP A2_PY_SOCK=$sock A2_PY_AUDIT=$TMP/audit.jsonl A2_PY_SLOT=$slot
(cd "$TMP" && "$VPY" -m unittest discover -v -s "$TMP/src/tests" -t "$TMP/src/tests") \
    >"$TMP/unittest.log" 2>&1
urc=$?
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$TMP/unittest.log" | tail -1)
checks=$((checks + ${ran:-0}))
if [ "$urc" != 0 ] || [ -z "$ran" ] || [ "$ran" = 0 ]; then
    cat "$TMP/unittest.log" >&2
    fail "the Python tests failed (unittest exit $urc)"
    for f in "$TMP"/*.log; do
        case "$f" in */unittest.log|*/pip.log|*/venv.log) continue ;; esac
        echo "--- tail of $f" >&2
        tail -20 "$f" >&2
    done
else
    grep -E '(ok|skipped .*)$' "$TMP/unittest.log" | sed 's/^/  /'
fi

kill -TERM "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
crc=$?
cpid=
checks=$((checks + 1))
[ "$crc" = 0 ] || fail "a2-consumer exited $crc: $(tail -3 "$TMP/consumer.log")"
checks=$((checks + 1))
if grep -l 'Sanitizer\|runtime error:' "$TMP"/consumer*.log >/dev/null 2>&1; then
    fail "sanitizer report: $(grep -h -m3 'Sanitizer\|runtime error:' "$TMP"/consumer*.log)"
fi
finish
