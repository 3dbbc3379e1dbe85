"""What the tests share: the database, the a2-consumer that
tests/integration/test_python.sh started, bounded waits, a lane event to
append, Workers started for one test, and a2-consumer processes a test runs
itself.

The environment comes from test_python.sh: A2_TEST_DB (the database, schema
applied), A2_BIN (a2-consumer), A2_PY_TMP (a scratch folder), A2_PY_SOCK
(the socket of the running a2-consumer), A2_PY_AUDIT (its audit trail),
A2_PY_SLOT (its slot; a test's own slots start with it).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
import unittest
from typing import Any, Callable, List, Optional, Sequence, TypeVar

import psycopg

import a2

DB = os.environ["A2_TEST_DB"]
BIN = os.environ["A2_BIN"]
TMP = os.environ["A2_PY_TMP"]
SOCK = os.environ["A2_PY_SOCK"]
AUDIT = os.environ["A2_PY_AUDIT"]
SLOT = os.environ["A2_PY_SLOT"]

#: Every wait of the tests ends by this many seconds.
WAIT_S = 60.0

logging.basicConfig(filename=os.path.join(TMP, "python-tests.log"), level=logging.DEBUG,
                    format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")

T = TypeVar("T")


def connect(autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(DB, autocommit=autocommit)


def rows(query: str, params: Sequence[Any] = ()) -> List[tuple]:
    """The rows of one query, on a connection of its own."""
    with connect() as conn:
        return conn.execute(query, params).fetchall()


def value(query: str, params: Sequence[Any] = ()) -> Any:
    r = rows(query, params)
    return r[0][0] if r else None


def wait_until(check: Callable[[], T], what: str, timeout: float = WAIT_S,
               interval: float = 0.05) -> T:
    """check()'s first true result, polled until timeout seconds passed."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} "
                                 f"(last: {last!r})")
        time.sleep(interval)


def lane_event(consumer: str, payload: Any = None, lane: str = "main", **extra: Any) -> dict:
    return dict(type="job", payload=payload, targets=[{"consumer": consumer, "lane": lane}],
                **extra)


def start_worker(test: unittest.TestCase, worker: a2.Worker,
                 connected: bool = False) -> a2.Worker:
    """Starts worker in a thread of its own, stopped and closed when test
    cleans up; with connected, waits until a2-consumer welcomed it."""
    worker.start()

    def stop() -> None:
        worker.stop()
        test.assertTrue(worker.join(WAIT_S), "the worker did not stop")
        worker.close()

    test.addCleanup(stop)
    if connected:
        test.assertTrue(worker.wait_connected(WAIT_S), f"not connected: {worker.last_error}")
    return worker


def audit(consumer: str) -> List[dict]:
    """The audit lines of the running a2-consumer about consumer's cursors."""
    out = []
    try:
        with open(AUDIT) as f:
            for line in f:
                if line.endswith("\n"):
                    entry = json.loads(line)
                    if entry.get("consumer") == consumer:
                        out.append(entry)
    except FileNotFoundError:
        pass
    return out


def write_pid(name: str, pid: int) -> None:
    """Records a child process, for test_python.sh to kill if a test dies."""
    with open(os.path.join(TMP, f"{name}.pid"), "w") as f:
        f.write(str(pid))


def forget_pid(name: str) -> None:
    try:
        os.unlink(os.path.join(TMP, f"{name}.pid"))
    except FileNotFoundError:
        pass


class Consumer:
    """An a2-consumer process of a test's own, on slot SLOT_<suffix>."""

    def __init__(self, suffix: str, listen: Sequence[str], token: Optional[str] = None) -> None:
        self.slot = f"{SLOT}_{suffix}"
        self.name = f"consumer-{suffix}"
        self.log_path = os.path.join(TMP, f"{self.name}.log")
        self.args = [os.path.join(BIN, "a2-consumer"), "--db", DB, "--slot", self.slot,
                     "--status-interval", "200"]
        for spec in listen:
            self.args += ["--listen", spec]
        if token is not None:
            token_file = os.path.join(TMP, f"{self.name}.token")
            # only the owner may read a token file: a2-consumer refuses others
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            self.args += ["--token-file", token_file]
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            offset = log.tell()
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        write_pid(self.name, self.proc.pid)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"a2-consumer exited {self.proc.returncode}: {self.tail()}")
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return b"ready" in f.read()

        wait_until(ready, f"{self.name} to be ready")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        forget_pid(self.name)

    def drop_slot(self) -> None:
        rows("select pg_drop_replication_slot(slot_name) from pg_replication_slots "
             "where slot_name = %s and not active", (self.slot,))

    def tail(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read()[-1500:].decode(errors="replace")


class Runs:
    """What a handler saw, thread-safe: one tuple per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: List[tuple] = []

    def add(self, *item: Any) -> None:
        with self._lock:
            self.items.append(item)

    def snapshot(self) -> List[tuple]:
        with self._lock:
            return list(self.items)


class Messages:
    """The messages a Worker received from a2-consumer (its on_message)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: List[dict] = []

    def __call__(self, msg: dict) -> None:
        with self._lock:
            self.items.append(msg)

    def snapshot(self) -> List[dict]:
        with self._lock:
            return list(self.items)

    def wakes(self, session: str) -> List[dict]:
        return [m for m in self.snapshot()
                if m.get("t") in ("wake", "log") and m.get("session") == session]
