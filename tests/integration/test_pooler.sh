#!/usr/bin/env bash
# The store behind a real PgBouncer (Debian's pgbouncer) in transaction mode,
# server_reset_query at its default, where each transaction may land on
# another server connection:
#   * the store's concurrency suite (every operation, a mixed workload) runs
#     through it unchanged, with a store timeout on every call;
#   * that timeout stays in each call's transaction: no server connection
#     keeps it afterwards;
#   * a2-worker works through it (a2-consumer streams from the server
#     itself: replication does not go through a pooler).
PREFIX="a2-worker: "
. "$(dirname "$0")/test_cli.lib"
W=$A2_BIN/a2-worker
C=$A2_BIN/a2-consumer
for p in "$W" "$C"; do [ -x "$p" ] || { echo "$p is not built" >&2; exit 1; }; done
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
[ -x "$PGBOUNCER" ] || { echo "test_pooler: pgbouncer is not installed (deploy/install-deps installs it)" >&2; exit 1; }
pids=()
cleanup_all() {
    [ -f "$pgb/pgbouncer.pid" ] && kill -TERM "$(cat "$pgb/pgbouncer.pid")" 2>/dev/null
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup_all EXIT
chmod 755 "$TMP"
# PgBouncer refuses to run as root: as root, it runs as postgres, in a
# folder of its own.
pgb=$TMP/pgbouncer
mkdir -p "$pgb"
[ "$(id -u)" -eq 0 ] && chown postgres: "$pgb"

# The test database's host, port and name, from its conninfo.
field() { printf '%s\n' "$A2_TEST_DB" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
host=$(field host) port=$(field port) dbname=$(field dbname) user=$(field user)
bport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$pgb/pgbouncer.ini" <<INI
[databases]
$dbname = host=$host port=$port dbname=$dbname
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $pgb/users.txt
pool_mode = transaction
default_pool_size = 20
admin_users = $user
max_client_conn = 200
ignore_startup_parameters = extra_float_digits, options
logfile = $pgb/pgbouncer.log
pidfile = $pgb/pgbouncer.pid
INI
echo "\"$user\" \"\"" >"$pgb/users.txt"
chmod 644 "$pgb/pgbouncer.ini" "$pgb/users.txt"
if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$PGBOUNCER" -d "$pgb/pgbouncer.ini" >/dev/null 2>&1
else
    "$PGBOUNCER" -d "$pgb/pgbouncer.ini" >/dev/null 2>&1
fi
pooled="host=127.0.0.1 port=$bport dbname=$dbname user=$user"
deadline=$((SECONDS + 20))
until psql "$pooled" -XAtqc "select 1" >/dev/null 2>&1; do
    if [ $SECONDS -gt $deadline ]; then
        echo "test_pooler: pgbouncer did not start: $(tail -3 "$pgb/pgbouncer.log" 2>/dev/null)" >&2
        exit 1
    fi
    sleep 0.1
done
checks=$((checks + 1))
mode=$(psql "host=127.0.0.1 port=$bport dbname=pgbouncer user=$user" -XAtqc "show config" 2>/dev/null |
    awk -F'|' '$1 == "pool_mode" { print $2 }')
[ "$mode" = transaction ] || fail "pgbouncer is not in transaction mode (pool_mode '$mode')"

# Every store operation, under concurrency, through the pooler, with a
# store timeout (a transaction-local statement_timeout) on every call.
checks=$((checks + 1))
if ! A2_TEST_DB=$pooled A2_STORE_SOAK_SECONDS=5 A2_STORE_TIMEOUT_MS=30000 \
    "$A2_BIN/../tests/integration/test_store_concurrency" >"$TMP/concurrency.log" 2>&1; then
    fail "the concurrency suite failed through pgbouncer: $(grep -E 'FAILED|ERROR|rror' "$TMP/concurrency.log" | head -5)"
fi

# No server connection kept the timeout: twenty sessions at once hold the
# pool's twenty server connections, and each reads the server's default.
# They are held at a barrier: each waits for a shared advisory lock that a
# session on the server itself holds until all twenty wait (at most 60 s).
checks=$((checks + 1))
lock_waits="select count(*) from pg_locks where locktype = 'advisory' and classid = 0
    and objid = 4242 and database = (select oid from pg_database where datname = current_database())"
psql "$A2_TEST_DB" -XAtq >"$TMP/barrier.log" 2>&1 <<SQL &
do \$\$
declare
    deadline timestamptz := clock_timestamp() + interval '60 s';
    n bigint;
begin
    perform pg_advisory_xact_lock(4242);
    loop
        select w.count into n from ($lock_waits and not granted) w;
        exit when n >= 20;
        if clock_timestamp() > deadline then
            raise exception 'only % of 20 sessions reached the barrier', n;
        end if;
        perform pg_sleep(0.05);
    end loop;
end
\$\$;
SQL
deadline=$((SECONDS + 20))
until [ "$(sql "$lock_waits and granted")" = 1 ]; do
    [ $SECONDS -gt $deadline ] && { fail "the barrier's lock was not taken: $(cat "$TMP/barrier.log")"; break; }
    sleep 0.05
done
for i in $(seq 1 20); do
    psql "$pooled" -XAtqc "select current_setting('statement_timeout') || ' ' || pg_backend_pid() from pg_advisory_xact_lock_shared(4242)" \
        >"$TMP/timeout.$i" 2>&1 &
done
wait_jobs() { for j in $(jobs -p); do case " ${pids[*]} " in *" $j "*) ;; *) wait "$j" ;; esac; done; }
wait_jobs
grep -q . "$TMP/barrier.log" && fail "the barrier: $(cat "$TMP/barrier.log")"
backends=$(cut -d' ' -f2 "$TMP"/timeout.* | sort -u | wc -l)
settings=$(cut -d' ' -f1 "$TMP"/timeout.* | sort -u | tr '\n' ' ')
[ "$settings" = "0 " ] || fail "a server connection kept a statement_timeout: $settings"
[ "$backends" -eq 20 ] || fail "the twenty sessions did not use twenty server connections ($backends)"

# a2-worker through the pooler, woken by a2-consumer on the server.
sock=$TMP/a2.sock
"$C" --db "$A2_TEST_DB" --slot "pool_$$" --listen "unix:$sock" --audit "$TMP/audit.jsonl" \
    >"$TMP/consumer.log" 2>&1 &
pids+=($!)
wait_out "$TMP/consumer.log" ready 20
A2_DB=$pooled A2_STORE_TIMEOUT_MS=30000 "$W" --consumer pooled --connect "unix:$sock" \
    --exec 'cat >/dev/null' --concurrency 4 --name pw >"$TMP/worker.out" 2>"$TMP/worker.log" &
pids+=($!)
wait_out "$TMP/worker.log" "connected to a2-consumer" 20
psql "$pooled" -XAtqc "select count(*) from (select a2_append(session => 'pool-' || i,
    events => '[{\"type\": \"job\", \"targets\": [{\"consumer\": \"pooled\"}]}]') from generate_series(1, 200) i) s" \
    >/dev/null || fail "appends through pgbouncer failed"
checks=$((checks + 1))
deadline=$((SECONDS + 60))
done_count=0
while [ $SECONDS -le $deadline ]; do
    done_count=$(psql "$A2_TEST_DB" -XAtqc "select count(*) from a2_cursors where consumer = 'pooled' and head is null and completed_idx = 1")
    [ "$done_count" = 200 ] && break
    sleep 0.2
done
[ "$done_count" = 200 ] || fail "a2-worker through pgbouncer completed $done_count of 200 events: $(tail -3 "$TMP/worker.log")"
checks=$((checks + 1))
if grep -qiE "error|could not" "$TMP/worker.log"; then
    fail "a2-worker logged errors through pgbouncer: $(grep -iE 'error|could not' "$TMP/worker.log" | head -3)"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_pooler.sh: $failures of $checks checks failed"
    exit 1
fi
echo "test_pooler.sh: $checks checks passed"
