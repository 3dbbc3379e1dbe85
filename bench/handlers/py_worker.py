# bench/handlers/py_worker.py: the a2.Worker of bench/handlers/run (run with
# PYTHONPATH=clients/python). Its handler records "event_id start_epoch_us"
# in $BENCH_RECORDS and returns None (completes at once). Runs until SIGTERM
# or SIGINT.
#   py_worker.py --db CONNINFO --connect unix:PATH --consumer NAME [--concurrency N]
import argparse
import logging
import os
import signal
import time

import a2

p = argparse.ArgumentParser()
p.add_argument("--db", required=True)
p.add_argument("--connect", required=True)
p.add_argument("--consumer", required=True)
p.add_argument("--concurrency", type=int, default=4)
args = p.parse_args()
logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

fd = os.open(os.environ["BENCH_RECORDS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def handle(ev: a2.Event):
    t = time.time_ns() // 1000
    os.write(fd, f"{ev.id} {t}\n".encode())
    return None


with a2.Worker(args.db, [args.consumer], handle, connect=args.connect,
               concurrency=args.concurrency, name=f"bench-{args.consumer}") as w:
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    signal.signal(signal.SIGINT, lambda *_: w.stop())
    w.run()
