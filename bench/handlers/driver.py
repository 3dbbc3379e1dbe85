# bench/handlers/driver.py: the producer and the measurements of
# bench/handlers/run (run with PYTHONPATH=clients/python). Times are wall
# clock microseconds (time.time_ns), the clock the handlers record with.
#
#   paced   --db D --consumer C --prefix P --count N --rate R [--acks F]
#           N events, one append (its own transaction) each, at R/s on one
#           connection: event id P-n in session P.<n % sessions>, targeted at
#           C (a concurrent cursor); the acknowledgement time of each to F as
#           "id ack_us". Prints: appended seconds rate max_behind_ms
#   fill    --db D --consumer C --prefix P --count N
#           N events, the same ids and sessions, appended in one batch per
#           session (at most 500 events an append). Prints: appended seconds
#   wait    --db D --consumer C --prefix P --count N --records F --timeout S
#           waits until F holds N records of ids P-* and the store has
#           completed N heads of C in sessions P.*; prints: end_us handled
#           completed failed (end_us: when the completions were seen).
#           Exit 1 on timeout.
#   stats   --acks F --records F [--prefix P]
#           pickup latency (handler start - ack) per id, the first record of
#           an id counting. Prints: matched missing p50_us p99_us max_us
#   startup [--runs N]
#           a python3's start-up: spawn to its first statement, the median
#           of N runs, in us
import argparse
import os
import subprocess
import sys
import time

SESSIONS = int(os.environ.get("BENCH_SESSIONS", "64"))  # sessions the events go to
POLL_S = 0.005


def now_us() -> int:
    return time.time_ns() // 1000


def connect(db):
    import psycopg
    return psycopg.connect(db, autocommit=True)


def event(a, n):
    return {"type": "bench.job", "id": f"{a.prefix}-{n}", "payload": {"n": n},
            "targets": [{"consumer": a.consumer}]}


def cmd_paced(a) -> int:
    import a2
    conn = connect(a.db)
    out = open(a.acks, "w") if a.acks else None
    gap = 1e6 / a.rate
    start = now_us() + 10000
    deadline = start + a.count * gap + 60e6  # bounded even when appends stall
    behind = 0
    n = 0
    for n in range(a.count):
        at = start + n * gap
        left = at - now_us()
        if left > 0:
            time.sleep(left / 1e6)
        else:
            behind = max(behind, -left)
        a2.append(conn, f"{a.prefix}.{n % SESSIONS}", [event(a, n)])
        t = now_us()
        if out:
            out.write(f"{a.prefix}-{n} {t}\n")
        if t > deadline:
            break
    n += 1
    if out:
        out.close()
    el = (now_us() - start) / 1e6
    print(f"{n} {el:.3f} {n / el if el > 0 else 0:.1f} {behind / 1000:.1f}")
    return 0


def cmd_fill(a) -> int:
    import a2
    conn = connect(a.db)
    t0 = now_us()
    n = 0
    for s in range(SESSIONS):
        evs = [event(a, i) for i in range(s, a.count, SESSIONS)]
        for k in range(0, len(evs), 500):
            a2.append(conn, f"{a.prefix}.{s}", evs[k:k + 500])
            n += len(evs[k:k + 500])
    print(f"{n} {(now_us() - t0) / 1e6:.3f}")
    return 0


def cmd_wait(a) -> int:
    deadline = time.monotonic() + a.timeout
    want = a.prefix + "-"
    handled = set()
    pos = 0
    buf = b""
    # The handlers' records first (a file read: nothing taken from the
    # store meanwhile), then the completions in the store.
    while time.monotonic() < deadline:
        try:
            with open(a.records, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        pos += len(data)
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            parts = line.decode(errors="replace").split()
            if len(parts) == 2 and parts[0].startswith(want):
                handled.add(parts[0])
        if len(handled) >= a.count:
            break
        time.sleep(POLL_S)
    conn = connect(a.db)
    done = failed = 0
    end = 0
    like = a.prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ".%"
    while True:
        row = conn.execute(
            "select count(*) filter (where head is null and completed_idx is not null),"
            "       count(*) filter (where failure_count > 0 or failed_at is not null)"
            "  from a2_cursors where consumer = %s and session_id like %s",
            (a.consumer, like)).fetchone()
        end = now_us()
        done, failed = row
        if done >= a.count or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    print(f"{end} {len(handled)} {done} {failed}")
    return 0 if done >= a.count and len(handled) >= a.count else 1


def read_pairs(path, prefix):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0].startswith(prefix) and parts[0] not in out:
                    out[parts[0]] = int(parts[1])
    except FileNotFoundError:
        pass
    return out


def cmd_stats(a) -> int:
    prefix = a.prefix + "-" if a.prefix else ""
    acks = read_pairs(a.acks, prefix)
    starts = read_pairs(a.records, prefix)
    lat = sorted(max(starts[i] - t, 0) for i, t in acks.items() if i in starts)
    missing = len(acks) - len(lat)
    if not lat:
        print(f"0 {missing} - - -")
        return 1
    n = len(lat)

    def q(p):  # nearest rank, as a2-bench-e2e
        return lat[int((n - 1) * p + 0.5)]
    print(f"{n} {missing} {q(0.50)} {q(0.99)} {lat[-1]}")
    return 0


def cmd_startup(a) -> int:
    code = "import time; print(time.time_ns() // 1000)"
    runs = []
    for _ in range(a.runs):
        t0 = now_us()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=30, check=True)
        runs.append(int(r.stdout.strip()) - t0)
    runs.sort()
    print(runs[len(runs) // 2])
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("paced", "fill", "wait"):
        s = sub.add_parser(name)
        s.add_argument("--db", required=True)
        s.add_argument("--consumer", required=True)
        s.add_argument("--prefix", required=True)
        s.add_argument("--count", type=int, required=True)
        if name == "paced":
            s.add_argument("--rate", type=float, required=True)
            s.add_argument("--acks")
        if name == "wait":
            s.add_argument("--records", required=True)
            s.add_argument("--timeout", type=float, default=120)
    s = sub.add_parser("stats")
    s.add_argument("--acks", required=True)
    s.add_argument("--records", required=True)
    s.add_argument("--prefix", default="")
    s = sub.add_parser("startup")
    s.add_argument("--runs", type=int, default=10)
    a = p.parse_args()
    if getattr(a, "count", 1) < 1 or getattr(a, "rate", 1) <= 0:
        p.error("--count and --rate must be positive")
    return {"paced": cmd_paced, "fill": cmd_fill, "wait": cmd_wait, "stats": cmd_stats,
            "startup": cmd_startup}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
