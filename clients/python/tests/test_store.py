"""The producer API: each store operation against the real schema, the
A2xxx error classes, and calls that leave the transaction to the caller."""
from __future__ import annotations

import unittest

import psycopg

import a2
from a2 import store

import support


class ErrorMapping(unittest.TestCase):
    def setUp(self) -> None:
        self.conn = support.connect()

    def tearDown(self) -> None:
        self.conn.close()

    def test_empty_session_is_invalid_argument(self) -> None:
        with self.assertRaises(a2.InvalidArgument) as cm:
            a2.append(self.conn, "", [{"type": "x"}])
        e = cm.exception
        self.assertIsInstance(e, a2.Error)
        self.assertEqual(e.sqlstate, "A2001")
        self.assertEqual(e.name, "INVALID_ARGUMENT")
        self.assertEqual(e.message, "INVALID_ARGUMENT: session must not be empty")
        self.assertEqual(str(e), e.message)
        self.assertIsInstance(e.__cause__, psycopg.Error)

    def test_bad_arguments(self) -> None:
        with self.assertRaises(a2.InvalidArgument):
            a2.append(self.conn, "em-1", [{"payload": 1}])  # no type
        with self.assertRaises(a2.InvalidArgument):
            a2.claim(self.conn, "em-1", "h", ttl_ms=-5)
        with self.assertRaises(a2.InvalidArgument):
            a2.read(self.conn, "em-1", after=-1)

    def test_partial_duplicate_batch(self) -> None:
        r = a2.append(self.conn, "em-dup", [{"type": "x", "id": "a"}])
        self.assertEqual(r["outcome"], "appended")
        again = a2.append(self.conn, "em-dup", [{"type": "x", "id": "a"}])
        self.assertEqual(again["outcome"], "replayed")
        with self.assertRaises(a2.PartialDuplicateBatch) as cm:
            a2.append(self.conn, "em-dup", [{"type": "x", "id": "a"}, {"type": "x", "id": "b"}])
        self.assertEqual(cm.exception.sqlstate, "A2004")
        self.assertTrue(cm.exception.message.startswith("PARTIAL_DUPLICATE_BATCH: "))

    def test_superseded_attempt(self) -> None:
        cause = {"consumer": "nobody", "lane": None, "index": 1, "attempt": 1}
        with self.assertRaises(a2.SupersededAttempt) as cm:
            a2.append(self.conn, "em-sup", [{"type": "x", "cause": cause}])
        self.assertEqual(cm.exception.sqlstate, "A2005")

    def test_session_cleared(self) -> None:
        a2.append(self.conn, "em-clr", [{"type": "x"}, {"type": "x"}])
        self.assertTrue(a2.clear(self.conn, "em-clr")["cleared"])
        with self.assertRaises(a2.SessionCleared) as cm:
            a2.append(self.conn, "em-clr", [{"type": "later"}], origin=1)
        self.assertEqual(cm.exception.sqlstate, "A2006")

    def test_no_such_event(self) -> None:
        with self.assertRaises(a2.NoSuchEvent) as cm:
            a2.complete(self.conn, "em-none", "c", None, 99, 1)
        self.assertEqual(cm.exception.sqlstate, "A2007")

    def test_every_code_has_its_class(self) -> None:
        # a2__fail is how every a2 function raises: each code, as the server sends it.
        for code, cls in (("INVALID_ARGUMENT", a2.InvalidArgument),
                          ("STORE_UNAVAILABLE", a2.StoreUnavailable),
                          ("SCHEMA_MISSING", a2.SchemaMissing),
                          ("PARTIAL_DUPLICATE_BATCH", a2.PartialDuplicateBatch),
                          ("SUPERSEDED_ATTEMPT", a2.SupersededAttempt),
                          ("SESSION_CLEARED", a2.SessionCleared),
                          ("NO_SUCH_EVENT", a2.NoSuchEvent),
                          ("STORE_FAILED", a2.StoreFailed)):
            with self.subTest(code=code):
                with self.assertRaises(cls) as cm:
                    store._call(self.conn, "a2__fail",
                                [("code", code, "text"), ("message", "raised", "text")])
                self.assertEqual(cm.exception.name, code)
                self.assertEqual(cm.exception.message, f"{code}: raised")

    def test_other_errors_stay_psycopg_errors(self) -> None:
        with self.assertRaises(psycopg.errors.NumericValueOutOfRange):
            a2.claim(self.conn, "em-1", "h", ttl_ms=10 ** 30)
        with self.assertRaises(TypeError):
            a2.pending_sessions(self.conn, "billing")


class CallersTransaction(unittest.TestCase):
    """The calls neither begin nor commit: the caller's transaction decides."""

    def test_no_commit_of_its_own(self) -> None:
        with support.connect(autocommit=False) as conn:
            r = a2.append(conn, "tx-1", [{"type": "x", "id": "tx-1-a"}])
            self.assertEqual(r["outcome"], "appended")
            self.assertEqual(conn.info.transaction_status, psycopg.pq.TransactionStatus.INTRANS)
            # Not visible elsewhere before the commit ...
            self.assertEqual(support.value("select count(*) from a2_events "
                                           "where session_id = 'tx-1'"), 0)
            conn.rollback()
        # ... and gone with the rollback.
        self.assertEqual(support.value("select count(*) from a2_events "
                                       "where session_id = 'tx-1'"), 0)

    def test_commits_with_the_callers_work(self) -> None:
        with support.connect() as conn:
            conn.execute("create table if not exists py_orders (id text primary key)")
            with conn.transaction():
                conn.execute("insert into py_orders values ('order-tx-2')")
                a2.append(conn, "tx-2", [{"type": "order.placed", "id": "order-tx-2"}])
        self.assertEqual(support.value("select count(*) from a2_events "
                                       "where session_id = 'tx-2'"), 1)
        self.assertEqual(support.value("select count(*) from py_orders "
                                       "where id = 'order-tx-2'"), 1)

    def test_an_error_rolls_back_the_transaction(self) -> None:
        with support.connect() as conn:
            with self.assertRaises(a2.PartialDuplicateBatch):
                with conn.transaction():
                    a2.append(conn, "tx-3", [{"type": "x", "id": "a"}])
                    a2.append(conn, "tx-3", [{"type": "x", "id": "a"}, {"type": "x", "id": "b"}])
        self.assertEqual(support.value("select count(*) from a2_events "
                                       "where session_id = 'tx-3'"), 0)

    def test_savepoint_carries_on(self) -> None:
        with support.connect() as conn:
            with conn.transaction():
                a2.append(conn, "tx-4", [{"type": "x", "id": "a"}])
                try:
                    with conn.transaction():  # a savepoint
                        a2.append(conn, "", [{"type": "x"}])
                except a2.InvalidArgument:
                    pass
                a2.append(conn, "tx-4", [{"type": "x", "id": "b"}])
            self.assertEqual([r["id"] for r in a2.read(conn, "tx-4")], ["a", "b"])

    def test_refuses_repeatable_read(self) -> None:
        with support.connect(autocommit=False) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with self.assertRaises(a2.InvalidArgument):
                a2.append(conn, "tx-5", [{"type": "x"}])
            conn.rollback()


class Cycle(unittest.TestCase):
    """docs/sql.md's worked cycle, through the Python calls, on the
    caller's clock (now_ms) so no call waits."""

    def test_cycle(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        s = "cy-shop-1"
        t0 = 1_700_000_000_000
        r = a2.append(conn, s, [{"type": "order.placed", "id": "order-1", "payload": {"n": 1},
                                 "targets": [{"consumer": "billing"}]}], now_ms=t0)
        self.assertEqual(r, {"events": [{"id": "order-1", "index": 1}], "outcome": "appended",
                             "has_pending": True})
        self.assertIn(s, a2.pending_sessions(conn, ["billing"], after="cy-shop-0", now_ms=t0))

        cl = a2.claim(conn, s, "w1", ttl_ms=30000, consumers=["billing"], now_ms=t0)
        self.assertEqual(cl["outcome"], "claimed")
        (head,) = cl["heads"]
        self.assertEqual((head["index"], head["attempt"], head["payload"], head["lane"]),
                         (1, 1, {"n": 1}, None))
        rn = a2.renew(conn, s, "w1", [{"consumer": "billing", "lane": None, "index": 1,
                                       "attempt": 1}], ttl_ms=30000, now_ms=t0 + 10)
        self.assertEqual(len(rn["renewed"]), 1)
        self.assertEqual(rn["superseded"], [])
        busy = a2.claim(conn, s, "w2", ttl_ms=30000, consumers=["billing"], now_ms=t0 + 20)
        self.assertEqual(busy["outcome"], "busy")

        done = a2.complete(conn, s, "billing", None, 1, 1,
                           [{"type": "invoice.sent", "id": "invoice-1",
                             "targets": [{"consumer": "mail", "lane": "eu"}]}], now_ms=t0 + 30)
        self.assertEqual(done, {"events": [{"id": "invoice-1", "index": 2}],
                                "outcome": "completed"})
        stale = a2.complete(conn, s, "billing", None, 1, 2, now_ms=t0 + 31)
        self.assertEqual(stale["outcome"], "superseded")

        cl = a2.claim(conn, s, "m1", ttl_ms=30000, now_ms=t0 + 40)
        (head,) = cl["heads"]
        self.assertEqual((head["consumer"], head["lane"], head["index"]), ("mail", "eu", 2))
        f = a2.fail(conn, s, "mail", "eu", 2, 1, "smtp down", max_failures=2,
                    retry_after_ms=1000, now_ms=t0 + 50)
        self.assertEqual(f, {"outcome": "failed", "failure_count": 1})
        held = a2.claim(conn, s, "m1", ttl_ms=30000, now_ms=t0 + 60)
        self.assertEqual((held["outcome"], held["retry_at"]), ("busy", t0 + 1050))
        cl = a2.claim(conn, s, "m1", ttl_ms=30000, now_ms=t0 + 1100)
        self.assertEqual(cl["heads"][0]["attempt"], 2)
        f = a2.fail(conn, s, "mail", "eu", 2, 2, "smtp down", max_failures=2, now_ms=t0 + 1200)
        self.assertEqual(f, {"outcome": "dead_lettered", "failure_count": 2})
        (dead,) = a2.dead_letters(conn, s)
        self.assertEqual((dead["index"], dead["consumer"], dead["lane"], dead["failure_count"],
                          dead["last_error"]), (2, "mail", "eu", 2, "smtp down"))
        self.assertNotIn(s, a2.pending_sessions(conn, ["mail"], now_ms=t0 + 1300))

        self.assertTrue(a2.redrive(conn, s, "mail", 2, "skip")["redriven"])
        self.assertEqual(a2.dead_letters(conn, s), [])
        self.assertFalse(a2.redrive(conn, s, "mail", 2, "retry")["redriven"])
        self.assertEqual(a2.claim(conn, s, "m1", ttl_ms=30000, now_ms=t0 + 1400)["outcome"],
                         "settled")

        curs = {(c["consumer"], c["lane"]): c for c in a2.cursors(conn, s)}
        self.assertIsNone(curs[("mail", "eu")]["head"])
        self.assertEqual(curs[("mail", "eu")]["position"], 2)
        evs = a2.read(conn, s)
        self.assertEqual([(e["index"], e["type"], e["id"]) for e in evs],
                         [(1, "order.placed", "order-1"), (2, "invoice.sent", "invoice-1")])
        self.assertEqual(evs[1]["cause"], {"consumer": "billing", "lane": None, "index": 1,
                                           "attempt": 1})
        self.assertEqual([e["index"] for e in a2.read(conn, s, after=1)], [2])
        self.assertEqual([e["index"] for e in a2.read(conn, s, types=["order.placed"])], [1])
        self.assertEqual(len(a2.read(conn, s, max_events=1)), 1)
        text = a2.read(conn, s, types=["order.placed"])
        self.assertEqual(text[0]["payload"], {"n": 1})

        c = a2.clear(conn, s, if_last=2, now_ms=t0 + 1500)
        self.assertEqual(c, {"cleared": True, "index": 3, "clear_index": 3})
        self.assertEqual([e["type"] for e in a2.read(conn, s)], ["a2.cleared"])
        for _ in range(100):
            if a2.reclaim(conn, s)["done"]:
                break
        else:
            self.fail("a2_reclaim never reported done")
        self.assertEqual(support.value("select count(*) from a2_events where session_id = %s "
                                       "and idx < 3", (s,)), 0)

    def test_text_payloads_and_big_numbers(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        big = 2 ** 62 + 1
        a2.append(conn, "cy-num", [{"type": "n", "payload": {"big": big, "f": 0.1},
                                    "targets": [{"consumer": "c"}]}])
        (ev,) = a2.read(conn, "cy-num")
        self.assertEqual(ev["payload"], {"big": big, "f": 0.1})
        cl = a2.claim(conn, "cy-num", "h", ttl_ms=1000, text_payloads=True)
        self.assertIsInstance(cl["heads"][0]["payload"], str)
        self.assertIn(str(big), cl["heads"][0]["payload"])

    def test_log_consumer_and_wake_log(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        s = "cy-log"
        auditor = a2.LogConsumer("cy-auditor", types=["order.placed"])
        r = a2.append(conn, s, [{"type": "order.placed"}], consumers=[auditor])
        self.assertTrue(r["has_pending"])
        a2.append(conn, s, [{"type": "order.ignored"}, {"type": "order.placed"}])
        w = a2.wake_log(conn, s, "cy-auditor", "log", types=["order.placed"])
        self.assertEqual(w["head"], 3)
        self.assertEqual(w["cursor"]["cursor_key"], "lane:log")
        seen = []
        for n in range(10):
            cl = a2.claim(conn, s, "h", ttl_ms=1000, consumers=[auditor])
            if cl["outcome"] != "claimed":
                break
            for h in cl["heads"]:
                seen.append((h["index"], h["type"], h["kind"]))
                a2.complete(conn, s, h["consumer"], h["lane"], h["index"], h["attempt"],
                            consumers=[auditor])
        self.assertEqual(seen, [(1, "order.placed", "log"), (3, "order.placed", "log")])

    def test_claim_wake_logs(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        s = "cy-log-claim"
        auditor = a2.LogConsumer("cy-auditor2", types=["order.placed"], backfill=True)
        a2.append(conn, s, [{"type": "order.ignored"}, {"type": "order.placed"}])
        # without wake_logs no cursor is started: nothing to claim
        cl = a2.claim(conn, s, "h", ttl_ms=1000, consumers=[auditor])
        self.assertEqual(cl["outcome"], "settled")
        cl = a2.claim(conn, s, "h", ttl_ms=1000, consumers=[auditor], wake_logs=True)
        self.assertEqual(cl["outcome"], "claimed")
        self.assertEqual([(h["index"], h["kind"]) for h in cl["heads"]], [(2, "log")])

    def test_lane_claim_next(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        s = "cy-lane-next"
        a2.append(conn, s, [support.lane_event("cy-ship", lane="q"),
                            support.lane_event("cy-ship", lane="q"),
                            {"type": "other", "targets": [{"consumer": "cy-bill"}]}])
        cl = a2.claim(conn, s, "h", ttl_ms=30000, lanes=[{"consumer": "cy-ship", "lane": "q"}])
        self.assertEqual([h["index"] for h in cl["heads"]], [1])
        done, nxt = a2.complete_claim_next(conn, s, "cy-ship", "q", 1, 1, holder="h",
                                           ttl_ms=30000)
        self.assertEqual(done["outcome"], "completed")
        self.assertEqual([(h["index"], h["lane"], h["holder"]) for h in nxt["heads"]],
                         [(2, "q", "h")])
        done, nxt = a2.complete_claim_next(conn, s, "cy-ship", "q", 2, 1, holder="h",
                                           ttl_ms=30000)
        self.assertEqual((done["outcome"], nxt["outcome"]), ("completed", "settled"))
        # cy-bill's head was never taken by the lane claims
        cl = a2.claim(conn, s, "h", ttl_ms=30000)
        self.assertEqual([h["consumer"] for h in cl["heads"]], ["cy-bill"])
        with self.assertRaises(a2.InvalidArgument):
            a2.claim(conn, s, "h", ttl_ms=30000, lanes=[{"consumer": "cy-ship"}])

    def test_batch_state_and_presence(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        res = a2.batch(conn, [{"op": "append", "session": "cy-b1", "events": [{"type": "x"}]},
                              {"op": "append", "session": "cy-b2", "events": [{"type": "y"}]},
                              {"op": "read", "session": "cy-b1"}])
        self.assertEqual([r.get("outcome") for r in res[:2]], ["appended", "appended"])
        self.assertEqual([e["type"] for e in res[2]], ["x"])
        self.assertIsNone(a2.read_state(conn, "cy-b1", "totals"))
        w = a2.write_state(conn, "cy-b1", "totals", [{"up_to_index": 1, "state": {"sum": 3}}])
        self.assertTrue(w["replaced_latest"])
        st = a2.read_state(conn, "cy-b1", "totals")
        assert st is not None
        self.assertEqual((st["up_to_index"], st["state"]), (1, {"sum": 3}))
        now = support.value("select (extract(epoch from clock_timestamp()) * 1000)::bigint")
        pw = a2.presence_write(conn, "cy-room", "alice", [{"field": "status", "value": "here"}],
                               ttl_ms=60000, at=now)
        self.assertEqual(len(pw["written"]), 1)
        pr = a2.presence_read(conn, "cy-room")
        self.assertEqual([(e["participant"], e["field"], e["value"]) for e in pr["entries"]],
                         [("alice", "status", "here")])
        self.assertIn("reaped", a2.presence_reap(conn, "cy-room"))
        with self.assertRaises(a2.InvalidArgument):
            a2.batch(conn, [{"op": "no-such-op"}])

    def test_warm_leaves_nothing(self) -> None:
        conn = support.connect()
        self.addCleanup(conn.close)
        self.assertEqual(a2.warm(conn), {"warmed": True})
        self.assertEqual(support.value("select count(*) from a2_events"
                                       " where session_id like 'a2.warm.%%'"), 0)
        conn.execute("set default_transaction_read_only = on")
        res = a2.warm(conn)
        self.assertFalse(res["warmed"])
        self.assertIn("read-only", res["reason"])


if __name__ == "__main__":
    unittest.main()
