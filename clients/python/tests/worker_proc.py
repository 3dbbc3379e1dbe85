"""A worker process of test_fleet: an a2.Worker whose handler records every
run in a file and checks, in the store, that every earlier head of its lane
is done. With --stick-after N, every handler call after the N-th run hangs
(the process is meant to be killed then)."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Any, List

import psycopg

import a2

# The heads of the lane before this one that are not done yet: none, when
# the lane runs in index order.
ORDER_SQL = """
select count(*) from a2_lane_events
 where session_id = %(s)s and consumer = %(c)s and lane = %(l)s and idx < %(i)s and not done
"""


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--connect", required=True)
    p.add_argument("--consumer", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--records", required=True)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--ttl", type=int, default=2000)
    p.add_argument("--stick-after", type=int, default=0)
    args = p.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(levelname)s %(message)s")

    lock = threading.Lock()
    records = open(args.records, "a", buffering=1)
    local = threading.local()
    ran = [0]

    def rec(*fields: Any) -> None:
        with lock:
            records.write(" ".join(str(f) for f in fields) + "\n")
            records.flush()

    def handler(ev: a2.Event) -> List[dict]:
        rec("start", ev.session, ev.index, ev.attempt)
        if args.stick_after:
            with lock:
                stick = ran[0] >= args.stick_after
            if stick:
                rec("stuck", ev.session, ev.index, ev.attempt)
                time.sleep(120)
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(args.db, autocommit=True)
        row = conn.execute(ORDER_SQL, {"i": ev.index, "s": ev.session, "c": ev.consumer,
                                       "l": ev.lane}).fetchone()
        assert row is not None
        if row[0]:
            rec("violation", ev.session, ev.index, ev.attempt, row[0])
        with lock:
            ran[0] += 1
        rec("end", ev.session, ev.index, ev.attempt)
        return [{"type": "done", "payload": {"index": ev.index, "by": args.name}}]

    worker = a2.Worker(args.db, [args.consumer], handler, connect=args.connect, name=args.name,
                       concurrency=args.concurrency, ttl_ms=args.ttl)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    with worker:
        worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
