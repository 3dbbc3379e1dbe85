# bench/handlers/serve_handler.py: the --serve handler of bench/handlers/run,
# one interpreter per slot. For each event line: records "event_id
# start_epoch_us" (the time the line was read) in $BENCH_RECORDS, answers
# {"ok":true} at once.
import json
import os
import sys
import time

fd = os.open(os.environ["BENCH_RECORDS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
out = sys.stdout
while True:
    line = sys.stdin.readline()
    if not line:  # end of stdin: a2-worker is stopping
        break
    t = time.time_ns() // 1000
    ev = json.loads(line)
    os.write(fd, f"{ev['id']} {t}\n".encode())
    out.write('{"ok":true}\n')
    out.flush()
