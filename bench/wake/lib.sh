# bench/wake/lib.sh: shared by bench/{wake,consumer,e2e}/run (sourced).
# bench_start NAME: a throwaway cluster (fsync on) with the schema and the
# NOTIFY trigger function, in $dir, conninfo in $db; removed on exit.
# bench_consumer_start SLOT / bench_consumer_stop: a2-consumer on the
# cluster, workers' socket unix:$dir/a2.sock, pid in $consumer_pid; the stop
# drops the slot.
# The WAL clients (a2-consumer, pg_recvlogical) connect with $wal_db when it
# is set (bench_unix_db: the cluster's Unix socket), else with $db (TCP
# loopback, as the writers do).

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
bin=${A2_BIN:-$top/build/release/bin}
benchbin=$top/build/release/bench
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
secs=${BENCH_SECONDS:-3}
bench_pids=()
consumer_pid=
consumer_slot=
dir=
db=
wal_db=

bench_cleanup() {
    local p
    for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${bench_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    # Started in subshells: listed in $dir/pids.
    if [ -n "$dir" ] && [ -f "$dir/pids" ]; then
        while read -r p; do kill "$p" 2>/dev/null || true; done <"$dir/pids"
    fi
    if [ -n "$dir" ]; then
        deploy/pg-dev destroy "$dir/pg" >/dev/null 2>&1 || true
        rm -rf "$dir"
    fi
}

bench_start() {
    [ -x "$bin/a2-consumer" ] || { echo "bench/$1: build first (make)" >&2; exit 1; }
    dir=$(mktemp -d "/tmp/a2-bench-$1.XXXXXX")
    chmod 755 "$dir"
    trap bench_cleanup EXIT
    # Private copies: the shared build tree may be relinked meanwhile.
    mkdir -p "$dir/bin"
    cp "$bin/a2-consumer" "$benchbin"/a2-bench-* "$dir/bin/"
    bin=$dir/bin benchbin=$dir/bin
    PG_DEV_FSYNC=on deploy/pg-dev start "$dir/pg" >/dev/null
    db=$(deploy/pg-dev url "$dir/pg")
    deploy/apply-schema "$db"
    psql "$db" -q <<'SQL'
create or replace function bench_notify() returns trigger language plpgsql as $$
begin
  perform pg_notify('a2_events', new.session_id || ':' || new.idx);
  return null;
end $$;
SQL
    mkdir -p bench/results
}

bench_unix_db() { # $db with the cluster's socket folder for its host
    echo "$db" | sed "s|host=[^ ]*|host=$dir/pg/sock|"
}

bench_set() { # NAME VALUE: a server setting, reloaded
    psql "$db" -qAtc "alter system set $1 = '$2'" -c "select pg_reload_conf()" >/dev/null
}

bench_consumer_start() { # SLOT [extra options]
    local slot=$1
    consumer_slot=$slot
    shift
    rm -f "$dir/a2.sock"
    # BENCH_AUDIT=0: no audit file (to tell its fsyncs apart).
    local audit=(--audit "$dir/audit-$slot.jsonl")
    [ "${BENCH_AUDIT:-1}" = 0 ] && audit=()
    "$bin/a2-consumer" --db "${wal_db:-$db}" --slot "$slot" --listen "unix:$dir/a2.sock" \
        "${audit[@]}" "$@" >>"$dir/consumer.log" 2>&1 &
    consumer_pid=$!
    bench_pids+=("$consumer_pid")
    echo "$consumer_pid" >>"$dir/pids"
    local i
    for i in $(seq 1 100); do
        grep -q "ready:" "$dir/consumer.log" 2>/dev/null && [ -S "$dir/a2.sock" ] && return 0
        sleep 0.1
    done
    echo "bench: a2-consumer did not start:" >&2
    cat "$dir/consumer.log" >&2
    exit 1
}

# Stops a2-consumer and drops its slot and audit file: the next start
# begins at the current WAL position, not with the backlog of the cells
# measured in between.
bench_consumer_stop() {
    [ -n "$consumer_pid" ] || return 0
    kill "$consumer_pid" 2>/dev/null || true
    wait "$consumer_pid" 2>/dev/null || true
    consumer_pid=
    bench_drop_slot "$consumer_slot"
    rm -f "$dir/audit-$consumer_slot.jsonl" "$dir/audit-$consumer_slot.jsonl.lsn"
    : >"$dir/consumer.log"
}

# bench_recv_start SLOT / bench_recv_stop: pg_recvlogical draining SLOT
# (created here, with a2-consumer's wal2json options) to /dev/null, pid in
# $recv_pid; the stop drops the slot.
recv_pid=
recv_slot=
bench_recv_start() {
    recv_slot=$1
    "$PGBIN/pg_recvlogical" -d "${wal_db:-$db}" --slot "$recv_slot" --create-slot --if-not-exists -P wal2json >/dev/null 2>&1
    "$PGBIN/pg_recvlogical" -d "${wal_db:-$db}" --slot "$recv_slot" --start -f /dev/null \
        -o format-version=2 -o include-xids=1 -o include-timestamp=1 -o include-lsn=1 \
        -o include-types=0 -o add-msg-prefixes=a2-hb \
        -o add-tables=public.a2_events,public.a2_cursors,public.a2_lane_events,public.a2_clears,public.a2_presence \
        >/dev/null 2>&1 &
    recv_pid=$!
    bench_pids+=("$recv_pid")
    echo "$recv_pid" >>"$dir/pids"
    sleep 0.5
}
bench_recv_stop() {
    [ -n "$recv_pid" ] || return 0
    kill -INT "$recv_pid" 2>/dev/null || true
    wait "$recv_pid" 2>/dev/null || true
    recv_pid=
    bench_drop_slot "$recv_slot"
}

bench_drop_slot() {
    psql "$db" -qAtc "select pg_drop_replication_slot('$1')" >/dev/null 2>&1 || true
}

bench_ratio() { # a b -> a/b with 2 decimals, or -
    awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && a != "-" && b != "-" && b + 0 > 0) printf "%.2f", a / b; else print "-" }'
}
