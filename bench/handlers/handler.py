# bench/handlers/handler.py: the --exec handler of bench/handlers/run, one
# interpreter per event. Records "event_id start_epoch_us" in $BENCH_RECORDS
# at its first statement (after the interpreter's start-up, which the pickup
# latency thus includes) and completes at once (exit 0, no output).
import time

t = time.time_ns() // 1000
import os  # noqa: E402
import sys  # noqa: E402

sys.stdin.buffer.read()  # the event line, then end of file
fd = os.open(os.environ["BENCH_RECORDS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.environ['A2_EVENT_ID']} {t}\n".encode())
os.close(fd)
