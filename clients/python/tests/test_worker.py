"""a2.Worker in this process against the real a2-consumer: wake-ups after
commits only, retries and dead letters, returned events, log consumers,
slots, lease renewals and a draining stop."""
from __future__ import annotations

import threading
import time
import unittest
from typing import Any, List

import psycopg

import a2

import support

CONNECT = "unix:" + support.SOCK



class WorkerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.conn = support.connect()
        self.addCleanup(self.conn.close)

    def start(self, worker: a2.Worker, connected: bool = True) -> a2.Worker:
        return support.start_worker(self, worker, connected)

    def dead(self, session: str) -> List[dict]:
        return a2.dead_letters(self.conn, session)


class Delayed(WorkerTest):
    def test_delayed_event_runs_at_its_time_with_no_query_before(self) -> None:
        msgs, runs = support.Messages(), support.Runs()
        ran_at: List[int] = []

        def handler(ev: a2.Event) -> None:
            ran_at.append(int(time.time() * 1000))
            runs.add(ev.session, ev.index)

        w = self.start(a2.Worker(support.DB, ["pyd2"], handler, connect=CONNECT,
                                 name="pyd2-1", on_message=msgs))
        # its connect's resync (pyd2 has nothing pending: no run)
        support.wait_until(lambda: any(m.get("t") == "resync" for m in msgs.snapshot()),
                           "the resync")
        runs_before = w.stats.runs
        due = int(time.time() * 1000) + 1500
        r = a2.append(self.conn, "dly-1", [dict(type="job", not_before=due,
                                                targets=[{"consumer": "pyd2"}])])
        self.assertEqual(r["outcome"], "appended")
        # A later event of the same consumer runs at once.
        a2.append(self.conn, "dly-2", [dict(type="job", targets=[{"consumer": "pyd2"}])])
        support.wait_until(lambda: ("dly-2", 1) in runs.snapshot(), "the undelayed run")
        self.assertNotIn(("dly-1", 1), runs.snapshot())
        # No wake-up and no store call for the delayed one until its time:
        # the only run so far is dly-2's.
        self.assertEqual(msgs.wakes("dly-1"), [])
        self.assertEqual(w.stats.runs, runs_before + 1)
        support.wait_until(lambda: ("dly-1", 1) in runs.snapshot(), "the delayed run")
        self.assertGreaterEqual(ran_at[-1], due)
        self.assertEqual(len(msgs.wakes("dly-1")), 1)

    def test_bad_not_before_is_refused(self) -> None:
        for bad in ("soon", 1.5, -1, 10 ** 15):
            with self.assertRaises(a2.InvalidArgument) as cm:
                a2.append(self.conn, "dly-bad", [dict(type="job", not_before=bad)])
            self.assertIn("not_before of event 1 must be whole epoch milliseconds",
                          str(cm.exception))
        self.assertEqual(support.value("select count(*) from a2_events "
                                       "where session_id = 'dly-bad'"), 0)


class Wakeups(WorkerTest):
    def test_rolled_back_append_wakes_nobody(self) -> None:
        msgs, runs = support.Messages(), support.Runs()

        def handler(ev: a2.Event) -> None:
            runs.add(ev.session, ev.index)

        self.start(a2.Worker(support.DB, ["pyb"], handler, connect=CONNECT, name="pyb-1",
                             on_message=msgs))
        self.conn.execute("create table if not exists py_orders (id text primary key)")
        with self.conn.transaction():
            self.conn.execute("insert into py_orders values ('rb-order')")
            r = a2.append(self.conn, "rb-1", [support.lane_event("pyb", {"order": "rb-order"})])
            self.assertEqual(r["outcome"], "appended")
            raise psycopg.Rollback()
        # Committed after the rollback: wake-ups follow commit order, so the
        # marker's wake comes after any wake of rb-1 there could be.
        a2.append(self.conn, "rb-marker", [support.lane_event("pyb")])
        support.wait_until(lambda: msgs.wakes("rb-marker"), "the marker's wake")
        support.wait_until(lambda: ("rb-marker", 1) in runs.snapshot(), "the marker's run")
        self.assertEqual(msgs.wakes("rb-1"), [])
        self.assertNotIn("rb-1", [s for s, _ in runs.snapshot()])
        for table in ("a2_events", "a2_cursors", "a2_lane_events"):
            self.assertEqual(support.value(f"select count(*) from {table} "
                                           "where session_id = 'rb-1'"), 0, table)
        self.assertEqual(support.value("select count(*) from py_orders where id = 'rb-order'"), 0)

        # The same, committed: the order and its event, and the worker is woken.
        with self.conn.transaction():
            self.conn.execute("insert into py_orders values ('ok-order')")
            a2.append(self.conn, "ok-1", [support.lane_event("pyb", {"order": "ok-order"})])
        support.wait_until(lambda: msgs.wakes("ok-1"), "the committed append's wake")
        support.wait_until(lambda: ("ok-1", 1) in runs.snapshot(), "the committed append's run")
        support.wait_until(lambda: support.value(
            "select bool_and(done) from a2_lane_events where session_id = 'ok-1'"),
            "the completion of ok-1")
        self.assertEqual(support.value("select count(*) from py_orders where id = 'ok-order'"), 1)
        self.assertEqual(msgs.wakes("rb-1"), [])
        wakes = [m for m in msgs.snapshot() if m["t"] == "wake"]
        self.assertTrue(all(isinstance(m["lsn"], int) and m["lsn"] > 0 for m in wakes))

    def test_log_consumer(self) -> None:
        msgs, runs = support.Messages(), support.Runs()
        auditor = a2.LogConsumer("pylog", types=["order.placed"])

        def handler(ev: a2.Event) -> None:
            runs.add(ev.session, ev.index, ev.type, ev.lane, ev.cursor)

        self.start(a2.Worker(support.DB, [auditor], handler, connect=CONNECT, name="pylog-1",
                             on_message=msgs))
        # An append naming the log consumer starts its cursor ...
        a2.append(self.conn, "lg-1", [{"type": "order.placed"}], consumers=[auditor])
        support.wait_until(lambda: len(runs.snapshot()) == 1, "the first log run")
        # ... later ones of its types reach it through `log` wake-ups.
        a2.append(self.conn, "lg-1", [{"type": "order.ignored"}, {"type": "order.placed"}])
        support.wait_until(lambda: len(runs.snapshot()) == 2, "the second log run")
        self.assertEqual(runs.snapshot(), [("lg-1", 1, "order.placed", "log", "lane:log"),
                                           ("lg-1", 3, "order.placed", "log", "lane:log")])
        self.assertIn("log", [m["t"] for m in msgs.wakes("lg-1")])
        support.wait_until(lambda: support.value(
            "select count(*) from a2_cursors where session_id = 'lg-1' and consumer = 'pylog' "
            "and head is null") == 1, "the log cursor to go idle")

    def test_log_consumer_no_append_names(self) -> None:
        # The `log` wake-up of a session's first event of its types starts
        # the cursor at that event: the event that woke the consumer runs.
        runs = support.Runs()
        tracker = a2.LogConsumer("pytrack", types=["order.placed"])

        def handler(ev: a2.Event) -> None:
            runs.add(ev.session, ev.index, ev.type)

        self.start(a2.Worker(support.DB, [tracker], handler, connect=CONNECT, name="pytrack-1"))
        a2.append(self.conn, "tk-1", [{"type": "order.placed"}])
        a2.append(self.conn, "tk-2", [{"type": "order.noted"}])
        a2.append(self.conn, "tk-2", [{"type": "order.placed"}])
        support.wait_until(lambda: len(runs.snapshot()) == 2, "two log runs")
        self.assertEqual(sorted(runs.snapshot()), [("tk-1", 1, "order.placed"),
                                                   ("tk-2", 2, "order.placed")])


class Failures(WorkerTest):
    def test_retry_after_then_dead_letter_then_redrive(self) -> None:
        runs = support.Runs()
        fixed = threading.Event()

        def handler(ev: a2.Event) -> list:
            runs.add(ev.index, ev.attempt, time.monotonic())
            if ev.payload.get("fail") and not fixed.is_set():
                raise RuntimeError("card declined")
            return [{"type": "charged", "payload": {"index": ev.index}}]

        w = self.start(a2.Worker(support.DB, ["pyf"], handler, connect=CONNECT, name="pyf-1",
                                 max_failures=3, retry_after_ms=300))
        a2.append(self.conn, "df-1", [support.lane_event("pyf", {"fail": True}),
                                      support.lane_event("pyf", {"fail": False})])
        support.wait_until(lambda: self.dead("df-1"), "the dead letter")
        (d,) = self.dead("df-1")
        self.assertEqual((d["index"], d["failure_count"], d["last_error"]),
                         (1, 3, "RuntimeError: card declined"))
        first = runs.snapshot()
        self.assertEqual([(i, a) for i, a, _ in first], [(1, 1), (1, 2), (1, 3)])
        # Each retry waited out the hold (a lower bound: a slow host only adds).
        for (_, _, t1), (_, _, t2) in zip(first, first[1:]):
            self.assertGreaterEqual(t2 - t1, 0.25)
        st = w.stats
        self.assertEqual((st.failed, st.dead_lettered, st.completed), (2, 1, 0))

        # The lane waits behind its dead letter; a redrive runs it again.
        fixed.set()
        self.assertTrue(a2.redrive(self.conn, "df-1", "pyf", 1, "retry")["redriven"])
        support.wait_until(lambda: [r for r in runs.snapshot() if r[0] == 2], "index 2's run")
        order = [(i, a) for i, a, _ in runs.snapshot()]
        self.assertEqual([i for i, _ in order], [1, 1, 1, 1, 2])
        self.assertGreater(order[3][1], 3)
        support.wait_until(lambda: support.value(
            "select count(*) from a2_events where session_id = 'df-1' and event_type = 'charged'")
            == 2, "both completions")
        charged = support.rows("select event_id, (cause->>'index')::int from a2_events "
                               "where session_id = 'df-1' and event_type = 'charged' order by idx")
        self.assertEqual(charged, [("ret-pyf-1-1", 1), ("ret-pyf-2-1", 2)])
        self.assertEqual(self.dead("df-1"), [])

    def test_returned_events_checked(self) -> None:
        def handler(ev: a2.Event) -> Any:
            kind = ev.payload["kind"]
            if kind == "no-type":
                return [{"payload": 1}]
            if kind == "dict":
                return {"type": "x"}
            if kind == "taken-id":
                return [{"type": "x", "id": "taken"}]
            if kind == "not-json":
                return [{"type": "x", "payload": object()}]
            return [{"type": "ok"}, {"type": "ok", "id": "mine"}]

        self.start(a2.Worker(support.DB, ["pyr"], handler, connect=CONNECT, name="pyr-1",
                             max_failures=1, retry_after_ms=0))
        for kind in ("no-type", "dict", "taken-id", "not-json", "fine"):
            events = [{"type": "job", "payload": {"kind": kind}, "targets": [{"consumer": "pyr"}]}]
            if kind == "taken-id":
                events.insert(0, {"type": "other", "id": "taken"})
            a2.append(self.conn, f"rv-{kind}", events)
        expect = {"no-type": "returned event 1 is invalid: it needs a non-empty string 'type'",
                  "dict": "the handler returned a dict; return a list of events (dicts) or None",
                  "taken-id": "returned events refused: PARTIAL_DUPLICATE_BATCH: ",
                  "not-json": "returned events are not JSON: "}
        for kind, text in expect.items():
            with self.subTest(kind=kind):
                (d,) = support.wait_until(lambda: self.dead(f"rv-{kind}"), f"rv-{kind} dead")
                self.assertTrue(d["last_error"].startswith(text), d["last_error"])
        support.wait_until(lambda: support.value(
            "select count(*) from a2_events where session_id = 'rv-fine' and event_type = 'ok'")
            == 2, "the returned events of rv-fine")
        self.assertEqual(support.rows("select event_id from a2_events where session_id = 'rv-fine'"
                                      " and event_type = 'ok' order by idx"),
                         [("ret-pyr-1-1",), ("mine",)])


class SettleTogether(WorkerTest):
    """The outcomes of a claim's handlers go to the store in one call; a
    call the store refuses goes again head by head. settle_hold_ms 60000:
    every outcome of a claim waits for its last handler, whatever the
    host's speed."""

    def test_one_call_for_a_claims_outcomes(self) -> None:
        runs = support.Runs()

        def handler(ev: a2.Event) -> list:
            runs.add(ev.session, ev.lane, ev.index, ev.attempt)
            if ev.payload.get("n") == 3 and ev.attempt == 1:
                raise RuntimeError("later")
            return [{"type": "done", "payload": {"index": ev.index}}]

        w = self.start(a2.Worker(support.DB, ["pyb"], handler, connect=CONNECT, name="pyb-1",
                                 max_failures=2, retry_after_ms=100, settle_hold_ms=60000))
        # ten concurrent heads in one claim; two lanes of three heads
        a2.append(self.conn, "sb-1", [{"type": "job", "payload": {"n": n},
                                       "targets": [{"consumer": "pyb"}]} for n in range(10)])
        a2.append(self.conn, "sb-3", [support.lane_event("pyb", {"n": 10 + n}, lane=lane)
                                      for n in range(3) for lane in ("a", "b")])
        support.wait_until(lambda: w.stats.completed == 16, "16 completions")
        st = w.stats
        # sb-1's first claim: 9 completions and a failure in one call (its
        # retry alone); sb-3: each lane's completion with the claim of its
        # next head, both lanes in one call, three times
        self.assertEqual((st.failed, st.dead_lettered, st.superseded), (1, 0, 0))
        self.assertEqual(st.settled_together, 16)
        self.assertEqual(st.claimed_next, 4)
        lanes = [(lane, i) for s, lane, i, _ in runs.snapshot() if s == "sb-3"]
        for lane in ("a", "b"):
            self.assertEqual([i for ln, i in lanes if ln == lane],
                             sorted(i for ln, i in lanes if ln == lane))
        self.assertEqual(support.value(
            "select count(*) from a2_events where session_id in ('sb-1', 'sb-3')"
            " and event_type = 'done'"), 16)
        self.assertEqual(self.dead("sb-1"), [])

    def test_refused_call_settles_one_by_one(self) -> None:
        def handler(ev: a2.Event) -> Any:
            kind = ev.payload["kind"]
            if kind == "taken-id":
                return [{"type": "x", "id": "taken"}]
            if kind == "not-json":
                return [{"type": "x", "payload": object()}]
            return [{"type": "ok"}]

        w = self.start(a2.Worker(support.DB, ["pyc"], handler, connect=CONNECT, name="pyc-1",
                                 max_failures=1, retry_after_ms=0, settle_hold_ms=60000))
        kinds = ["fine", "taken-id", "not-json", "fine"]
        a2.append(self.conn, "sr-1", [{"type": "other", "id": "taken"}] + [
            {"type": "job", "payload": {"kind": k}, "targets": [{"consumer": "pyc"}]}
            for k in kinds])
        dead = support.wait_until(lambda: len(self.dead("sr-1")) == 2 and self.dead("sr-1"),
                                  "two dead letters")
        support.wait_until(lambda: w.stats.completed == 2, "two completions")
        errs = {d["index"]: d["last_error"] for d in dead}
        self.assertTrue(errs[3].startswith("returned events refused: PARTIAL_DUPLICATE_BATCH: "),
                        errs[3])
        self.assertTrue(errs[4].startswith("returned events are not JSON: "), errs[4])
        self.assertEqual(w.stats.settled_together, 0)
        self.assertEqual(support.value("select count(*) from a2_events where session_id = 'sr-1'"
                                       " and event_type = 'ok'"), 2)


class Together(WorkerTest):
    """A slot that frees up while sessions wait takes several and runs them
    with one claim call: woken ones for one claim round, swept ones to
    their end."""

    def test_woken_sessions_run_together_in_wake_order(self) -> None:
        gate = threading.Event()
        lock = threading.Lock()
        order: List[str] = []

        def handler(ev: a2.Event) -> None:
            with lock:
                order.append(ev.session)
            if ev.session == "tw-gate":
                gate.wait(support.WAIT_S)

        w = self.start(a2.Worker(support.DB, ["pyt"], handler, connect=CONNECT, name="pyt-1",
                                 concurrency=1))
        job = {"type": "job", "targets": [{"consumer": "pyt"}]}
        a2.append(self.conn, "tw-gate", [job])
        support.wait_until(lambda: order == ["tw-gate"], "the gate's handler")
        for k in range(5):
            a2.append(self.conn, f"tw-{k}", [job])
        support.wait_until(lambda: w.stats.wakes >= 6, "six wake-ups")
        gate.set()
        support.wait_until(lambda: w.stats.completed == 6, "six completions")
        self.assertEqual(order, ["tw-gate"] + [f"tw-{k}" for k in range(5)])
        # after the gate's slow run the slot takes one session, then, its
        # handler quick, the other four together (fewer should a handler be
        # descheduled for 5 ms)
        st = w.stats
        self.assertTrue(2 <= st.together_runs <= 4, st)
        self.assertEqual(st.runs, 6)

    def test_log_wakes_run_together(self) -> None:
        # the same with a log consumer: each session's log cursor is started
        # in the claim call of the sessions run together
        gate = threading.Event()
        lock = threading.Lock()
        order: List[str] = []
        auditor = a2.LogConsumer("pytl", types=["tick"], backfill=True)

        def handler(ev: a2.Event) -> None:
            with lock:
                order.append(ev.session)
            if ev.session == "tl-gate":
                gate.wait(support.WAIT_S)

        w = self.start(a2.Worker(support.DB, [auditor], handler, connect=CONNECT,
                                 name="pytl-1", concurrency=1))
        a2.append(self.conn, "tl-gate", [{"type": "tick"}])
        support.wait_until(lambda: order == ["tl-gate"], "the gate's handler")
        for k in range(5):
            a2.append(self.conn, f"tl-{k}", [{"type": "tick"}])
        support.wait_until(lambda: w.stats.wakes >= 6, "six log wake-ups")
        gate.set()
        support.wait_until(lambda: w.stats.completed == 6, "six completions")
        self.assertEqual(order, ["tl-gate"] + [f"tl-{k}" for k in range(5)])
        self.assertTrue(2 <= w.stats.together_runs <= 4, w.stats)

    def test_swept_sessions_run_together_to_their_end(self) -> None:
        seen: dict = {}
        lock = threading.Lock()

        def handler(ev: a2.Event) -> None:
            with lock:
                seen.setdefault(ev.session, []).append(ev.index)

        # ten lanes of 20 heads, found by the one sweep of a worker that has
        # no a2-consumer: 17 heads of each in the first run (its claim and
        # 16 claims of the next head), the rest only because a swept session
        # that claimed is run again
        for k in range(10):
            a2.append(self.conn, f"tz-{k}", [support.lane_event("pyz", {"n": n})
                                             for n in range(20)])
        w = self.start(a2.Worker(support.DB, ["pyz"], handler, name="pyz-1", concurrency=1,
                                 degraded_sweep_ms=86_400_000), connected=False)
        support.wait_until(lambda: w.stats.completed == 200, "200 completions")
        self.assertEqual(seen, {f"tz-{k}": list(range(1, 21)) for k in range(10)})
        st = w.stats
        self.assertEqual(st.sweeps, 1)
        self.assertGreaterEqual(st.together_runs, 10)


class Visibility(WorkerTest):
    """A wake-up that reaches the worker before its commit is visible to new
    snapshots: with synchronous_standby_names naming a standby that never
    connects, an append's commit is flushed and decoded (a2-consumer pushes
    its wake-up) but stays invisible until the setting is cleared. Every
    other commit of the test's database is local."""

    def setUp(self) -> None:
        super().setUp()
        db = support.value("select current_database()")
        self.conn.execute(f'alter database "{db}" set synchronous_commit = local')
        self.addCleanup(self.execute, f'alter database "{db}" reset synchronous_commit')

    @staticmethod
    def execute(statement: str) -> None:
        with support.connect() as conn:
            conn.execute(statement)

    def hold(self) -> None:
        self.addCleanup(self.release)
        self.conn.execute("alter system set synchronous_standby_names = 'a2_never'")
        self.conn.execute("select pg_reload_conf()")
        support.wait_until(lambda: support.value("show synchronous_standby_names") == "a2_never",
                           "synchronous_standby_names to take")

    def release(self) -> None:
        self.conn.execute("alter system reset synchronous_standby_names")
        self.conn.execute("select pg_reload_conf()")

    def test_invisible_session_of_a_together_run(self) -> None:
        # A slot takes a visible session and an invisible one together:
        # the visible one runs at once; the invisible one's claim answers
        # "still invisible", and it runs on its own, once, when it is visible.
        runs = support.Runs()

        def handler(ev: a2.Event) -> None:
            runs.add(ev.session, ev.index)

        job = {"type": "job", "targets": [{"consumer": "pyvis"}]}
        producer = support.connect()
        self.addCleanup(producer.close)
        a2.append(producer, "tv-gate", [job])
        # The gate's cursor row locked: the worker's first claim (its resync
        # of tv-gate) waits on it with its one slot.
        lock = support.connect(autocommit=False)
        self.addCleanup(lock.close)
        lock.execute("select 1 from a2_cursors where session_id = 'tv-gate' and consumer = 'pyvis' "
                     "for update")
        w = self.start(a2.Worker(support.DB, ["pyvis"], handler, connect=CONNECT, name="pyvis-1",
                                 concurrency=1))
        support.wait_until(lambda: support.value(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
            "and query like %s", ("%a2_claim%",)), "the gate's claim to wait")
        self.hold()
        a2.append(producer, "tv-1", [job])
        held = support.connect()
        self.addCleanup(held.close)
        held.execute("set synchronous_commit = on")
        appended = threading.Thread(target=a2.append, args=(held, "tv-2", [job]))
        appended.start()
        self.addCleanup(appended.join, support.WAIT_S)
        support.wait_until(lambda: w.stats.wakes >= 2, "the wake-ups of tv-1 and tv-2")
        self.assertEqual(support.value("select count(*) from a2_events where session_id = 'tv-2'"),
                         0, "tv-2's append was visible before its commit came back")
        # The test takes the gate's head itself in the transaction that locked
        # it: the worker's claim finds it taken, and its run ends with no
        # handler run, so the slot takes both sessions in one claim call;
        # tv-1 runs while tv-2 is still invisible.
        self.assertEqual(a2.claim(lock, "tv-gate", "test", ttl_ms=600000,
                                  consumers=["pyvis"])["outcome"], "claimed")
        lock.commit()
        support.wait_until(lambda: ("tv-1", 1) in runs.snapshot(), "tv-1's run")
        self.assertNotIn(("tv-2", 1), runs.snapshot())
        self.assertEqual(w.stats.together_runs, 2, w.stats)
        self.release()
        appended.join(support.WAIT_S)
        self.assertFalse(appended.is_alive(), "the held append did not come back")
        support.wait_until(lambda: ("tv-2", 1) in runs.snapshot(), "tv-2's run once visible")
        support.wait_until(lambda: w.stats.completed == 2, "two completions")
        self.assertEqual(sorted(runs.snapshot()), [("tv-1", 1), ("tv-2", 1)])


class Slots(WorkerTest):
    def test_sessions_one_slot_at_a_time_lanes_in_order(self) -> None:
        lock = threading.Lock()
        active: set = set()
        overlaps: list = []
        seen: dict = {}

        def handler(ev: a2.Event) -> None:
            with lock:
                if ev.session in active:
                    overlaps.append(ev.session)
                active.add(ev.session)
                seen.setdefault(ev.session, []).append(ev.index)
            time.sleep(0.002)
            with lock:
                active.discard(ev.session)

        with a2.Worker(support.DB, ["pys"], handler, connect=CONNECT, name="pys-1",
                       concurrency=4) as w:
            w.start()
            self.assertTrue(w.wait_connected(support.WAIT_S))
            for s in range(20):
                a2.append(self.conn, f"sl-{s}",
                          [support.lane_event("pys", {"n": n}) for n in range(5)])
            support.wait_until(lambda: support.value(
                "select count(*) from a2_lane_events where consumer = 'pys' and done") == 100,
                "100 completions")
            # each lane's first head claimed, the next four by the completion
            # before them, in its call
            self.assertEqual(w.stats.claimed_next, 80)
            threads = {t.name for t in threading.enumerate() if t.name.startswith("a2-slot-pys-1")}
            self.assertEqual(len(threads), 4)
        # Leaving the block stopped the worker and its threads.
        self.assertFalse([t for t in threading.enumerate() if "pys-1" in t.name])
        self.assertEqual(overlaps, [])
        self.assertEqual(seen, {f"sl-{s}": [1, 2, 3, 4, 5] for s in range(20)})

    def test_renewed_lease_and_draining_stop(self) -> None:
        runs = support.Runs()
        started = threading.Event()

        def slow(ev: a2.Event) -> None:
            runs.add(ev.session, ev.index, ev.attempt)
            started.set()
            time.sleep(7)

        # A 7 s handler on a 3 s lease (renewed every second), with a second
        # worker of the consumer waiting: the lease is renewed, never taken
        # over. A renewal may come late by up to 2 s on a busy host.
        w1 = a2.Worker(support.DB, ["pyl"], slow, connect=CONNECT, name="pyl-1", ttl_ms=3000)
        w1.start()
        self.addCleanup(w1.close)
        self.addCleanup(w1.join, support.WAIT_S)
        self.addCleanup(w1.stop)
        self.assertTrue(w1.wait_connected(support.WAIT_S))
        w2 = self.start(a2.Worker(support.DB, ["pyl"], slow, connect=CONNECT, name="pyl-2",
                                  ttl_ms=3000))
        a2.append(self.conn, "ls-1", [support.lane_event("pyl")])
        self.assertTrue(started.wait(support.WAIT_S))
        (holder,) = support.rows("select holder from a2_cursors('ls-1')")[0]
        runner = w1 if holder.startswith("pyl-1/") else w2
        # Stop it while the handler runs: the run finishes and completes.
        runner.stop()
        self.assertTrue(runner.join(support.WAIT_S))
        self.assertIs(support.value("select done from a2_lane_events "
                                    "where session_id = 'ls-1'"), True)
        self.assertEqual(runs.snapshot(), [("ls-1", 1, 1)])
        st = runner.stats
        self.assertGreaterEqual(st.renewals, 2)
        self.assertEqual((st.completed, st.leases_lost, st.superseded), (1, 0, 0))


class Options(unittest.TestCase):
    def test_clear_errors(self) -> None:
        def h(ev: a2.Event) -> None:
            return None

        db = support.DB
        with self.assertRaisesRegex(ValueError, "a tcp: connection needs a token"):
            a2.Worker(db, ["c"], h, connect="tcp:127.0.0.1:7070")
        with self.assertRaisesRegex(ValueError, "unix:PATH or tcp:HOST:PORT"):
            a2.Worker(db, ["c"], h, connect="http://127.0.0.1")
        with self.assertRaisesRegex(ValueError, "concurrency must be an integer in 1..256"):
            a2.Worker(db, ["c"], h, concurrency=0)
        with self.assertRaisesRegex(ValueError, "ttl_ms"):
            a2.Worker(db, ["c"], h, ttl_ms=5)
        with self.assertRaisesRegex(ValueError, "settle_hold_ms must be an integer in 0..60000"):
            a2.Worker(db, ["c"], h, settle_hold_ms=-1)
        with self.assertRaisesRegex(ValueError, "one or more consumers"):
            a2.Worker(db, [], h)
        with self.assertRaisesRegex(ValueError, "each named once"):
            a2.Worker(db, ["c", a2.LogConsumer("c")], h)
        with self.assertRaisesRegex(TypeError, "handler must be callable"):
            a2.Worker(db, ["c"], None)  # type: ignore[arg-type]
        w = a2.Worker("host=127.0.0.1 port=1 dbname=none connect_timeout=5", "c", h)
        with self.assertRaises(psycopg.OperationalError):
            w.run()
        with self.assertRaisesRegex(RuntimeError, "runs once"):
            w.run()
        w.close()


if __name__ == "__main__":
    unittest.main()
