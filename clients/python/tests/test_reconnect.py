"""a2.Worker when a2-consumer is away: the degraded sweep, reconnects with
backoff and the resync that follows, and TCP with a token. Each test runs
an a2-consumer of its own (its own slot), started and stopped here."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import unittest
from typing import Optional

import a2

import support


class Away(unittest.TestCase):
    def setUp(self) -> None:
        self.conn = support.connect()
        self.addCleanup(self.conn.close)
        self.runs = support.Runs()
        self.msgs = support.Messages()

    def handler(self, ev: a2.Event) -> None:
        self.runs.add(ev.session, ev.index)

    def ran(self, session: str) -> bool:
        return any(s == session for s, _ in self.runs.snapshot())

    def start(self, worker: a2.Worker) -> a2.Worker:
        return support.start_worker(self, worker)

    def consumer(self, suffix: str, *listen: str,
                 token: Optional[str] = None) -> support.Consumer:
        c = support.Consumer(suffix, listen, token=token)
        self.addCleanup(c.drop_slot)
        self.addCleanup(c.stop)
        return c

    def test_sweep_reconnect_resync(self) -> None:
        sock = os.path.join(support.TMP, "away.sock")
        consumer = self.consumer("away", "unix:" + sock)
        w = self.start(a2.Worker(support.DB, ["pyd"], self.handler, connect="unix:" + sock,
                                 name="pyd-1", degraded_sweep_ms=300, reconnect_max_ms=500,
                                 on_message=self.msgs))
        # No a2-consumer yet: the worker sweeps the store's pending sessions.
        a2.append(self.conn, "dg-1", [support.lane_event("pyd")])
        support.wait_until(lambda: self.ran("dg-1"), "dg-1's run by a sweep")
        st = w.stats
        self.assertEqual(st.connects, 0)
        self.assertGreaterEqual(st.sweeps, 1)
        self.assertFalse(w.connected)
        self.assertIn("could not connect to unix:" + sock, w.last_error)

        # a2-consumer comes up: the worker connects (backoff at most 500 ms
        # plus jitter), wake-ups drive it and the sweep stops.
        consumer.start()
        self.assertTrue(w.wait_connected(support.WAIT_S), w.last_error)
        a2.append(self.conn, "dg-2", [support.lane_event("pyd")])
        # The run may come first (the resync after the connect, or a sweep
        # in flight) and its wake-up just after: wait for both.
        support.wait_until(lambda: self.msgs.wakes("dg-2") and self.ran("dg-2"),
                           "dg-2's wake-up and run")
        sweeps = w.stats.sweeps
        time.sleep(1.0)  # three sweep intervals
        self.assertEqual(w.stats.sweeps, sweeps, "the worker swept while connected")

        # a2-consumer stops: the worker notices and sweeps again.
        consumer.stop()
        support.wait_until(lambda: not w.connected, "the worker to notice")
        a2.append(self.conn, "dg-3", [support.lane_event("pyd")])
        support.wait_until(lambda: self.ran("dg-3"), "dg-3's run by a sweep")
        st = w.stats
        self.assertGreater(st.sweeps, sweeps)
        self.assertEqual((st.connects, st.disconnects), (1, 1))
        self.assertFalse(self.msgs.wakes("dg-3"))
        self.assertTrue(w.last_error)  # why it is down: closed, then connects refused

        # Back again: a reconnect, its resync, and wake-ups.
        resyncs = st.resyncs
        consumer.start()
        support.wait_until(lambda: w.stats.resyncs > resyncs, "the reconnect's resync")
        self.assertEqual(w.stats.connects, 2)
        a2.append(self.conn, "dg-4", [support.lane_event("pyd")])
        support.wait_until(lambda: self.msgs.wakes("dg-4") and self.ran("dg-4"), "dg-4's wake")
        self.assertEqual(sorted(self.runs.snapshot()),
                         [("dg-1", 1), ("dg-2", 1), ("dg-3", 1), ("dg-4", 1)])

    def test_active_and_standby(self) -> None:
        # Two a2-consumers of one slot: the second is a standby, refusing
        # workers with a "standby" error. A worker given both addresses,
        # the standby's first, serves through the active one, and follows
        # the standby when it takes over from the killed active one.
        a_sock = os.path.join(support.TMP, "sb-a.sock")
        b_sock = os.path.join(support.TMP, "sb-b.sock")
        active = self.consumer("sb", "unix:" + a_sock)
        active.start()
        standby = support.Consumer("sb", ["unix:" + b_sock])
        standby.name = "consumer-sb-b"
        standby.log_path = os.path.join(support.TMP, "consumer-sb-b.log")
        with open(standby.log_path, "ab") as log:
            standby.proc = subprocess.Popen(standby.args, stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(standby.stop)

        def logged(what: bytes) -> bool:
            with open(standby.log_path, "rb") as f:
                return what in f.read()

        support.wait_until(lambda: logged(b"standby: "), "the second consumer to be a standby")
        w = self.start(a2.Worker(support.DB, ["pysb"], self.handler,
                                 connect=["unix:" + b_sock, "unix:" + a_sock], name="pysb-1",
                                 reconnect_max_ms=500, on_message=self.msgs))
        self.assertTrue(w.wait_connected(support.WAIT_S), w.last_error)
        a2.append(self.conn, "sb-1", [support.lane_event("pysb")])
        support.wait_until(lambda: self.msgs.wakes("sb-1") and self.ran("sb-1"),
                           "sb-1's wake-up and run")

        assert active.proc is not None
        active.proc.send_signal(signal.SIGKILL)
        active.proc.wait()
        active.proc = None
        support.wait_until(lambda: logged(b"ready"), "the standby to take over")
        support.wait_until(lambda: w.stats.connects >= 2, "the worker to follow it")
        a2.append(self.conn, "sb-2", [support.lane_event("pysb")])
        support.wait_until(lambda: self.ran("sb-2") and self.msgs.wakes("sb-2"),
                           "sb-2's wake from the new active consumer")
        self.assertEqual(sorted(self.runs.snapshot()), [("sb-1", 1), ("sb-2", 1)])

    def test_sweep_only(self) -> None:
        # No a2-consumer at all: the store's pending sessions, swept.
        w = self.start(a2.Worker(support.DB, ["pyo"], self.handler, name="pyo-1",
                                 degraded_sweep_ms=200))
        a2.append(self.conn, "so-1", [support.lane_event("pyo"), support.lane_event("pyo")])
        support.wait_until(lambda: len(self.runs.snapshot()) == 2, "so-1's two runs")
        self.assertEqual(self.runs.snapshot(), [("so-1", 1), ("so-1", 2)])
        self.assertEqual(w.stats.connects, 0)
        self.assertGreaterEqual(w.stats.sweeps, 1)

    def test_tcp_with_a_token(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        addr = f"tcp:127.0.0.1:{port}"
        self.consumer("tcp", addr, token="s3cret-token").start()
        bad_runs = support.Runs()
        good = self.start(a2.Worker(support.DB, ["pyt"], self.handler, connect=addr,
                                    token="s3cret-token", name="pyt-ok", on_message=self.msgs))
        bad = self.start(a2.Worker(support.DB, ["pyt"], lambda ev: bad_runs.add(ev.session),
                                   connect=addr, token="wrong-token", name="pyt-bad",
                                   degraded_sweep_ms=600000))
        self.assertTrue(good.wait_connected(support.WAIT_S), good.last_error)
        support.wait_until(lambda: "(auth)" in bad.last_error, "the refusal of the wrong token")
        self.assertIn("a2-consumer refused the worker", bad.last_error)
        # Its one sweep (it never connected) is done before the append.
        support.wait_until(lambda: bad.stats.sweeps >= 1, "the refused worker's first sweep")
        a2.append(self.conn, "tcp-1", [support.lane_event("pyt")])
        support.wait_until(lambda: self.msgs.wakes("tcp-1") and self.ran("tcp-1"),
                           "tcp-1's wake-up and run")
        self.assertFalse(bad.connected)
        self.assertEqual(bad.stats.connects, 0)
        self.assertEqual(bad_runs.snapshot(), [])


if __name__ == "__main__":
    unittest.main()
