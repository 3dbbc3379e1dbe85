"""The chaos run's long-lived handler (a2-worker --serve): the same record
and the same outcomes as handler.sh, one event per stdin line.

Each event is recorded as one line (a single O_APPEND write) in $CHAOS_INV
before it is answered, then failed or completed as its payload says: "lf"
(lane consumer) and "cf" (concurrent consumer) are the number of first
attempts that fail (99: always); the log consumer never fails. A completion
returns one "done" event.
    line: consumer session index attempt outcome pid epoch-ms
The lane consumer's events are answered at once, so that its worker's
slot runs the sessions woken meanwhile together; one in eight of the log
consumer's takes 50 ms, to widen the window in which a fault hits a
running handler.
"""
import json
import os
import sys
import time

consumer = os.environ["A2_CONSUMER"]
key = {"chaos_lane": "lf", "chaos_conc": "cf"}.get(consumer)
inv = os.open(os.environ["CHAOS_INV"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
pid = os.getpid()
n = 0
for line in sys.stdin:
    ev = json.loads(line)
    fails = 0
    if key and isinstance(ev.get("payload"), dict):
        fails = int(ev["payload"].get(key) or 0)
    ok = ev["attempt"] > fails
    os.write(inv, ("%s %s %d %d %s %d %d\n" % (
        consumer, ev["session"], ev["index"], ev["attempt"], "ok" if ok else "fail",
        pid, int(time.time() * 1000))).encode())
    n += 1
    if consumer == "chaos_log" and n % 8 == 0:
        time.sleep(0.05)
    if ok:
        answer = {"ok": True, "events": [{"type": "done", "payload": None}]}
    else:
        answer = {"ok": False, "error": "chaos: planned failure of attempt %d" % ev["attempt"]}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
