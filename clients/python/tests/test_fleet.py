"""Four worker processes share 1,000 events of 50 sessions; one is killed
-9 while it runs handlers. Nothing is lost: its leases lapse, the others
take its heads over, every event is completed once, every lane in order."""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import unittest
from typing import Dict, List, Set, Tuple

import a2

import support

CONSUMER = "fleet"
SESSIONS = 50
PER_SESSION = 20
HERE = os.path.dirname(os.path.abspath(__file__))

Key = Tuple[str, int]          # (session, index)
Run = Tuple[str, int, int]     # (session, index, attempt)


def session(n: int) -> str:
    return f"fleet-{n:02d}"


class Worker:
    def __init__(self, name: str, *extra: str) -> None:
        self.name = name
        self.records = os.path.join(support.TMP, f"{name}.records")
        self.log = os.path.join(support.TMP, f"{name}.log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "worker_proc.py"), "--db", support.DB,
                 "--connect", "unix:" + support.SOCK, "--consumer", CONSUMER, "--name", name,
                 "--records", self.records, "--concurrency", "2", "--ttl", "2000", *extra],
                stdout=log, stderr=subprocess.STDOUT)
        support.write_pid(name, self.proc.pid)

    def lines(self) -> List[List[str]]:
        try:
            with open(self.records) as f:
                return [line.split() for line in f if line.endswith("\n")]
        except FileNotFoundError:
            return []

    def runs(self, kind: str) -> List[Run]:
        return [(l[1], int(l[2]), int(l[3])) for l in self.lines() if l[0] == kind]

    def connected(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode}: {self.tail()}")
        with open(self.log, "rb") as f:
            return b"connected to a2-consumer" in f.read()

    def tail(self) -> str:
        with open(self.log, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def end(self, sig: int) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(support.WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        support.forget_pid(self.name)
        return rc


class Fleet(unittest.TestCase):
    def test_kill_one_of_four(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)

        def append(n: int) -> None:
            a2.append(conn, session(n), [
                {"type": "job", "id": f"job-{i}", "payload": {"i": i},
                 "targets": [{"consumer": CONSUMER, "lane": "main"}]}
                for i in range(1, PER_SESSION + 1)])

        # Half the sessions wait before the workers start (found by the
        # pending-session paging of their connect), half come after (wake-ups).
        for n in range(SESSIONS // 2):
            append(n)
        workers = [Worker(f"fw{i}") for i in (1, 2, 3)]
        victim = Worker("fw4", "--stick-after", "3")
        everyone = workers + [victim]
        self.addCleanup(lambda: [w.end(signal.SIGKILL) for w in everyone])
        for w in everyone:
            support.wait_until(w.connected, f"{w.name} to connect")
        for n in range(SESSIONS // 2, SESSIONS):
            append(n)

        # The victim runs 3 handlers, then hangs in its next ones, its
        # leases renewed: kill -9 it there.
        support.wait_until(lambda: victim.runs("stuck"), "the victim to hang in a handler")
        victim.proc.kill()
        self.assertEqual(victim.proc.wait(support.WAIT_S), -signal.SIGKILL)
        support.forget_pid(victim.name)
        ended = set(victim.runs("end"))
        in_flight = [r for r in victim.runs("start") if r not in ended]
        self.assertTrue(in_flight)
        self.assertGreaterEqual(len(ended), 3)

        total = SESSIONS * PER_SESSION
        support.wait_until(lambda: support.value(
            "select count(*) from a2_lane_events where consumer = %s and done", (CONSUMER,))
            == total, f"{total} completions")
        for w in workers:
            self.assertEqual(w.end(signal.SIGTERM), 0, w.tail())
            self.assertIn("stopped after", w.tail())

        # The store: every lane entry done, every lane cursor idle past its
        # last event, no dead letter.
        completed: Dict[Key, int] = {
            (s, i): a for s, i, a in support.rows(
                "select session_id, idx, completed_attempt from a2_lane_events "
                "where consumer = %s and done", (CONSUMER,))}
        self.assertEqual(set(completed), {(session(n), i) for n in range(SESSIONS)
                                          for i in range(1, PER_SESSION + 1)})
        cursors = support.rows(
            "select session_id, position, head, failed_at from a2_cursors "
            "where consumer = %s and kind = 'lane'", (CONSUMER,))
        self.assertEqual(sorted(cursors), [(session(n), PER_SESSION, None, None)
                                           for n in range(SESSIONS)])
        self.assertEqual(support.value("select count(*) from a2_cursors where consumer = %s "
                                       "and failed_at is not null", (CONSUMER,)), 0)

        # The returned events: one per event, with the stable id, caused by
        # the completing attempt, appended in lane order.
        done = support.rows(
            "select session_id, idx, event_id, (cause->>'index')::int, "
            "(cause->>'attempt')::int, payload->>'by' from a2_events "
            "where session_id like 'fleet-%%' and event_type = 'done' order by session_id, idx")
        self.assertEqual(len(done), total)
        by_session: Dict[str, List[int]] = collections.defaultdict(list)
        completed_by: Dict[Key, str] = {}
        for s, _, eid, ci, ca, by in done:
            self.assertEqual(eid, f"ret-{CONSUMER}-{ci}-1")
            self.assertEqual(ca, completed[(s, ci)])
            by_session[s].append(ci)
            completed_by[(s, ci)] = by
        self.assertEqual(dict(by_session), {session(n): list(range(1, PER_SESSION + 1))
                                            for n in range(SESSIONS)})

        # What the handlers recorded: every attempt ran once; the completing
        # one ran to its end in the worker that completed it; no handler
        # found an earlier head of its lane undone.
        starts: List[Run] = []
        ends: Dict[str, Set[Run]] = {}
        for w in everyone:
            starts += w.runs("start")
            ends[w.name] = set(w.runs("end"))
            self.assertEqual([l for l in w.lines() if l[0] == "violation"], [], w.name)
        counts = collections.Counter(starts)
        self.assertEqual([r for r, c in counts.items() if c > 1], [])
        self.assertEqual({(s, i) for s, i, _ in starts}, set(completed))
        for key, attempt in completed.items():
            by = completed_by[key]
            self.assertIn((*key, attempt), ends[by], f"{key} completed by {by}")
        for s, i, a in starts:
            self.assertLessEqual(a, completed[(s, i)])

        # The heads the victim held when it died were taken over by others.
        for s, i, a in in_flight:
            self.assertGreater(completed[(s, i)], a)
            self.assertNotEqual(completed_by[(s, i)], victim.name)

        # a2-consumer's audit trail, in commit order: each head completed
        # once, by the attempt the store recorded, lane by lane in index
        # order (the last head's completion is the lane going idle); the
        # victim's heads taken over.
        def completions() -> List[dict]:
            return [e for e in support.audit(CONSUMER)
                    if e["transition"] in ("completed", "went_idle")]

        support.wait_until(lambda: len(completions()) >= total, "the audit of every completion")
        heads: Dict[str, List[int]] = collections.defaultdict(list)
        for e in completions():
            key = (e["session"], e["before"]["head"])
            self.assertEqual(e["before"]["attempt"], completed[key], key)
            heads[e["session"]].append(e["before"]["head"])
        self.assertEqual(dict(heads), {session(n): list(range(1, PER_SESSION + 1))
                                       for n in range(SESSIONS)})
        taken = {(e["session"], e["before"]["head"]) for e in support.audit(CONSUMER)
                 if e["transition"] == "taken_over"
                 and e["before"]["holder"].startswith(victim.name + "/")}
        self.assertTrue({(s, i) for s, i, _ in in_flight} <= taken, taken)


if __name__ == "__main__":
    unittest.main()
