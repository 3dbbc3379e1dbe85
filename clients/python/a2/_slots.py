"""The Worker's slots and its lease thread: claiming, running the handler
and settling events through the store's functions.

- A :class:`Slot` is a thread with a store connection of its own: it takes
  a session from the session table, claims, runs the handler for each
  claimed head in order, completes or fails it, claims again until the
  session is settled or busy, and hands the session back.
- The :class:`LeaseKeeper` is one thread, with a store connection of its
  own, that renews the unfinished heads of every slot's claim every ttl/3
  while their handlers run.

Both reach the Worker they serve for its settings, counters and log.
"""
from __future__ import annotations

import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Tuple

import psycopg

from . import errors, store
from ._clock import mono_ms, real_ms
from ._sessions import Ran, Turn, take_count
from .event import Event

if TYPE_CHECKING:
    from .worker import Worker

MAX_ERROR_TEXT = 4096   # bytes of a failure text kept (the tail)
CLAIM_NEXT_RUNS = 16    # runs in a row whose lane completions claim the next head
SETTLE_MAX_HEADS = 500  # outcomes settled in one call (the store takes 1000 operations)

# A handled head waiting to be settled: its claim and place there, its
# event, the events its handler returned, and its failure's text (None:
# completed).
Outcome = Tuple["Claim", int, Event, List[Dict[str, Any]], Optional[str]]
# The heads a claim took in one session.
Heads = Tuple[str, List[Dict[str, Any]]]


def is_broken(conn: Optional[psycopg.Connection[Any]], exc: BaseException) -> bool:
    return (conn is None or conn.closed or conn.broken
            or isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)))


def close(conn: Optional[psycopg.Connection[Any]]) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # closing a broken connection may fail as well
            pass


def _exception_text(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in traceback.format_exception_only(type(exc), exc))
    return _tail(text.strip() or type(exc).__name__)


def _tail(text: str) -> str:
    data = text.encode()
    if len(data) <= MAX_ERROR_TEXT:
        return text
    return data[-MAX_ERROR_TEXT:].decode(errors="ignore")


def _returned_events(event: Event, result: Any) -> List[Dict[str, Any]]:
    """The events a handler returned, each with its id: given, or
    ``ret-<consumer>-<index>-<n>``, stable across attempts (a retried
    completion replays instead of appending twice)."""
    if result is None:
        return []
    if isinstance(result, (str, bytes, Mapping)) or not isinstance(result, Iterable):
        raise ValueError(f"the handler returned a {type(result).__name__}; "
                         "return a list of events (dicts) or None")
    out: List[Dict[str, Any]] = []
    for n, ev in enumerate(result, 1):
        if not isinstance(ev, Mapping):
            raise ValueError(f"returned event {n} is a {type(ev).__name__}, not a dict")
        t = ev.get("type")
        if not isinstance(t, str) or not t:
            raise ValueError(f"returned event {n} is invalid: it needs a non-empty string 'type'")
        e = dict(ev)
        e.pop("cause", None)  # a completion's events are caused by its attempt
        if e.get("id") is None:
            e["id"] = f"ret-{event.consumer}-{event.index}-{n}"
        elif not isinstance(e["id"], str) or not e["id"]:
            raise ValueError(f"returned event {n} is invalid: its 'id' must be a non-empty string")
        out.append(e)
    return out


class Claim:
    """The heads of one claim, shared with the lease thread. state per head:
    0 running, 1 being completed or failed, 2 done."""

    __slots__ = ("session", "holder", "refs", "state", "next_renew")

    def __init__(self, session: str, holder: str, refs: List[Dict[str, Any]]) -> None:
        self.session = session
        self.holder = holder
        self.refs = refs
        self.state = [0] * len(refs)
        self.next_renew = 0


class LeaseKeeper:
    """The lease thread: renews the unfinished heads of each published claim
    every ttl/3, on a store connection of its own."""

    def __init__(self, worker: "Worker") -> None:
        self._w = worker
        self._cv = threading.Condition()
        self._claims: Dict[int, List[Claim]] = {}
        self._quit = False
        self._conn: Optional[psycopg.Connection[Any]] = None
        self._interval = max(worker.ttl_ms // 3, 1)
        self._thread = threading.Thread(target=self._main, name=f"a2-leases-{worker.name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._quit = True
            self._cv.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        close(self._conn)
        self._conn = None

    def publish(self, slot: int, claims: List[Claim]) -> None:
        """The claims (one a session) whose handlers slot runs now."""
        with self._cv:
            due = mono_ms() + self._interval
            for claim in claims:
                claim.next_renew = due
            self._claims[slot] = claims
            self._cv.notify_all()

    def set_state(self, claim: Claim, i: int, state: int) -> None:
        with self._cv:
            claim.state[i] = state

    def unpublish(self, slot: int) -> None:
        with self._cv:
            self._claims.pop(slot, None)

    def _main(self) -> None:
        with self._cv:
            while not self._quit:
                live = [c for cs in self._claims.values() for c in cs
                        if any(s < 2 for s in c.state)]
                if not live:
                    self._cv.wait()
                    continue
                claim = min(live, key=lambda c: c.next_renew)
                now = mono_ms()
                if now < claim.next_renew:
                    self._cv.wait((claim.next_renew - now) / 1000)
                    continue
                idx = [i for i, s in enumerate(claim.state) if s < 2]
                claim.next_renew = now + self._interval
                self._cv.release()
                try:
                    result = self._renew(claim, [claim.refs[i] for i in idx])
                finally:
                    self._cv.acquire()
                if result is None:
                    continue
                self._w._count(renewals=len(result.get("renewed") or []))
                lost = {(r.get("consumer"), r.get("lane"), r.get("index"))
                        for r in result.get("superseded") or []}
                for i in idx:
                    ref = claim.refs[i]
                    key = (ref["consumer"], ref["lane"], ref["index"])
                    if key in lost and claim.state[i] == 0:
                        self._w._count(leases_lost=1)
                        self._w._log.warning(
                            "lease of %s %s #%d lost (taken over, done or cleared)",
                            claim.session, ref["consumer"], ref["index"])

    def _renew(self, claim: Claim, refs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        try:
            if self._conn is None:
                self._conn = self._w._connect_store()
            return store.renew(self._conn, claim.session, claim.holder, refs,
                               ttl_ms=self._w.ttl_ms, now_ms=real_ms())
        except (psycopg.Error, errors.Error) as exc:
            self._w._log.warning("could not renew leases in %s: %s", claim.session, exc)
            if is_broken(self._conn, exc):
                close(self._conn)
                self._conn = None
        except Exception:  # a bug must not end the renewals
            self._w._log.exception("could not renew leases in %s", claim.session)
        return None


class Slot:
    """One slot: a thread that works one session at a time from the
    worker's session table, on a store connection of its own."""

    def __init__(self, worker: "Worker", keeper: LeaseKeeper, number: int,
                 holder: str) -> None:
        self._w = worker
        self._keeper = keeper
        self.number = number
        self.holder = holder
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.thread = threading.Thread(target=self._main, name=f"a2-slot-{holder}",
                                       daemon=True)

    def _open(self) -> psycopg.Connection[Any]:
        """A store connection, warmed (``a2_warm``) so that the first claim
        on it is not slowed by the server planning the functions; a refused
        warm-up is logged."""
        conn = self._w._connect_store()
        try:
            # Rolled back: nothing commits, so nothing waits for a flush or
            # a synchronous standby.
            with conn.transaction(force_rollback=True):
                res = store.warm(conn)
            if not res.get("warmed"):
                self._w._log.warning("could not warm the store connection: %s",
                                     res.get("reason"))
        except (psycopg.Error, errors.Error) as exc:
            self._w._log.warning("could not warm the store connection: %s", exc)
        return conn

    def _main(self) -> None:
        w = self._w
        session_s = 0.0  # handler time a session in the last run
        try:
            try:
                self.conn = self._open()
            except psycopg.Error:
                self.conn = None  # the first session connects, and says why
            while True:
                turns = w._sessions.take(take_count(session_s))
                if turns is None:
                    return
                w._count(runs=len(turns))
                try:
                    if len(turns) == 1:
                        t = turns[0]
                        rans = [self._run_session(t.job.session, t.wake_log, t.woken, t.xid,
                                                  t.log_from)]
                    else:
                        rans = self._run_together(turns)
                except Exception as exc:  # a bug must not cost the slot
                    w._log.exception("run of %s failed",
                                     ", ".join(t.job.session for t in turns))
                    rans = [Ran(error=str(exc)) for _ in turns]
                session_s = sum(r.handler_s for r in rans) / len(rans)
                errs = {r.error for r in rans if r.error is not None}
                w._count(store_errors=sum(r.error is not None for r in rans))
                for e in errs:
                    w._log.warning("%s", e)
                for t, ran in zip(turns, rans):
                    w._sessions.done(t, ran)
                w._poke()  # the main loop recomputes its timers
        finally:
            close(self.conn)
            self.conn = None

    def _conn(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.conn = self._open()
        return self.conn

    def _failed(self, exc: BaseException) -> None:
        if is_broken(self.conn, exc):
            close(self.conn)
            self.conn = None

    def _claim_args(self, **extra: Any) -> Dict[str, Any]:
        """The keyword arguments of this slot's claims (:func:`store.claim`,
        :func:`store.claim_op`), with ``extra`` over them."""
        w = self._w
        args: Dict[str, Any] = {"ttl_ms": w.ttl_ms, "consumers": w._consumers_json,
                                "max_failures": w.max_failures, "now_ms": real_ms()}
        args.update(extra)
        return args

    def _run_session(self, session: str, wake_log: bool, once: bool, xid: int = 0,
                     log_from: int = 0) -> Ran:
        """Works one session until it is settled or busy; with ``once``, ends
        after the first claim's heads when that claim dead-lettered nothing
        (it took every head eligible then; a2-consumer announces the rest).
        ``xid``: the wake-up's commit, which the store waits for before the
        first claim (claimed again while it is still not visible);
        ``log_from``: where that claim starts a new log cursor (the index its
        log wake-ups named)."""
        w = self._w
        ran = Ran(waited=xid != 0)
        what = "connect"
        try:
            conn = self._conn()
            while not w._sessions.stopping:
                # the first claim (and one made again while the wake-up's
                # commit is not visible) brings the log cursors up to date
                what = "claim"
                cl = store.claim(conn, session, self.holder,
                                 **self._claim_args(after_xid=xid or None, wake_logs=wake_log,
                                                    log_from=log_from or None))
                if cl.get("outcome") == "busy" and cl.get("waiting_for"):
                    continue  # still not visible (a synchronous standby holds it, say)
                xid = 0  # visible: later claims need not wait
                wake_log = False
                log_from = 0
                heads = self._claimed(session, cl, ran)
                if heads is None:
                    break
                what = "complete or fail"
                dead = self._run_claims(conn, [(session, heads)], {session: ran})
                if once and not (dead or cl.get("dead_lettered")):
                    break
        except (psycopg.Error, errors.Error) as exc:
            ran.error = f"{what} in {session} failed: {exc}"
            self._failed(exc)
        return ran

    def _claimed(self, session: str, cl: Dict[str, Any], ran: Ran) -> Optional[List[Dict[str, Any]]]:
        """The heads of a claim's result, counted in ran; None when it took
        none (settled, or busy: ran.retry_at set). Counts its dead letters."""
        self._dead_lettered(session, cl)
        outcome = cl.get("outcome")
        if outcome == "busy":
            ran.retry_at = cl.get("retry_at") or 0
            return None
        heads = cl.get("heads") or []
        if outcome != "claimed" or not heads:
            ran.retry_at = 0
            return None
        ran.claimed += len(heads)
        self._w._count(claimed=len(heads))
        return heads

    def _run_together(self, turns: List[Turn]) -> List[Ran]:
        """Runs several sessions with one claim round each: one ``a2_batch``
        claims them all, their heads run in turn and are settled together.
        A session whose claim the store could not answer (still invisible,
        a dead letter taken along, the call refused as a whole) then runs on
        its own as a woken session does."""
        w = self._w
        rans = [Ran(waited=t.xid != 0, partial=not t.woken) for t in turns]
        w._count(together_runs=len(turns))
        again = [False] * len(turns)
        names = ", ".join(t.job.session for t in turns)
        what = "claim"
        try:
            conn = self._conn()
            try:
                results = store.batch(conn, [
                    store.claim_op(t.job.session, self.holder,
                                   **self._claim_args(after_xid=t.xid or None,
                                                      wake_logs=t.wake_log,
                                                      log_from=t.log_from or None))
                    for t in turns])
            except errors.StoreUnavailable:
                raise
            except (errors.Error, psycopg.errors.DeadlockDetected,
                    psycopg.errors.SerializationFailure) as exc:
                w._log.info("claiming %d sessions in one call was refused (%s): one by one",
                            len(turns), exc)
                results = None
                again = [True] * len(turns)
            work: List[Heads] = []
            for k, (t, cl) in enumerate(zip(turns, results or [])):
                if cl.get("outcome") == "busy" and cl.get("waiting_for"):
                    again[k] = True
                    continue
                heads = self._claimed(t.job.session, cl, rans[k])
                if heads is not None:
                    again[k] = bool(cl.get("dead_lettered"))
                    work.append((t.job.session, heads))
            what = "complete or fail"
            if work:
                by = {t.job.session: r for t, r in zip(turns, rans)}
                if self._run_claims(conn, work, by):
                    # a lane's claim along the way dead-lettered a head: each
                    # session that ran claims again on its own
                    worked = {s for s, _ in work}
                    again = [a or t.job.session in worked for a, t in zip(again, turns)]
        except (psycopg.Error, errors.Error) as exc:
            self._failed(exc)
            for r in rans:
                r.error = f"{what} in {names} failed: {exc}"
            return rans
        for k, t in enumerate(turns):
            if again[k] and not w._sessions.stopping:
                more = self._run_session(t.job.session, t.wake_log, True, t.xid,
                                         t.log_from)
                r = rans[k]
                r.claimed += more.claimed
                r.retry_at = more.retry_at
                r.error = more.error
                r.handler_s += more.handler_s
        return rans

    def _run_claims(self, conn: psycopg.Connection[Any], work: List[Heads],
                    rans: Dict[str, Ran]) -> bool:
        """Runs the claimed heads, and then those their lanes' completions
        claimed, CLAIM_NEXT_RUNS runs in a row at most (then the lanes come
        back by their wake-ups); counts them in rans (by session). Whether a
        lane's claim dead-lettered a head."""
        w = self._w
        runs = 0
        dead = False
        while work:
            runs += 1
            work, more_dead = self._run_heads(conn, work, runs <= CLAIM_NEXT_RUNS, rans)
            dead = dead or more_dead
            for session, heads in work:
                rans[session].claimed += len(heads)
                w._count(claimed=len(heads), claimed_next=len(heads))
        return dead

    def _run_heads(self, conn: psycopg.Connection[Any], work: List[Heads],
                   claim_next: bool, rans: Dict[str, Ran]) -> Tuple[List[Heads], bool]:
        """Runs the heads of claims (of one session or several) in order and
        settles them: the outcomes of handlers that end within
        ``settle_hold_ms`` of the first one waiting go together, in one call
        (after a handler that took that long, what waits is settled before
        the next handler runs). With ``claim_next``, the completion of a
        lane's head claims the lane's next head: returns those heads by
        session, and whether one of those claims dead-lettered a head."""
        claims = [Claim(session, self.holder,
                        [{"consumer": h["consumer"], "lane": h.get("lane"), "index": h["index"],
                          "attempt": h["attempt"]} for h in heads])
                  for session, heads in work]
        hold = self._w.settle_hold_ms
        nxt: Dict[str, List[Dict[str, Any]]] = {}
        dead = False
        pending: List[Outcome] = []
        held_at = 0    # when the first waiting outcome's handler ended
        slow = False   # the last handler took settle_hold_ms or more
        self._keeper.publish(self.number, claims)
        try:
            for claim, (session, heads) in zip(claims, work):
                ran = rans[session]
                for i, head in enumerate(heads):
                    if pending and (slow or len(pending) >= SETTLE_MAX_HEADS
                                    or mono_ms() - held_at >= hold):
                        dead = self._settle_all(conn, pending, claim_next, nxt) or dead
                        pending = []
                    event = Event.from_head(session, head)
                    began = time.monotonic()
                    returned, error = self._call_handler(event)
                    took = time.monotonic() - began
                    ran.handler_s += took
                    slow = took * 1000 >= hold
                    if not pending:
                        held_at = mono_ms()
                    self._keeper.set_state(claim, i, 1)
                    pending.append((claim, i, event, returned, error))
            if pending:
                dead = self._settle_all(conn, pending, claim_next, nxt) or dead
        finally:
            self._keeper.unpublish(self.number)
        return list(nxt.items()), dead

    def _settle_all(self, conn: psycopg.Connection[Any], pending: List[Outcome],
                    claim_next: bool, nxt: Dict[str, List[Dict[str, Any]]]) -> bool:
        """Settles the outcomes waiting: several in one call, or one by one
        (one alone, or several the store refused together: a returned event
        refused, a deadlock; nothing was settled then). The heads a lane's
        completion claimed go to ``nxt`` by session; returns whether such a
        claim dead-lettered a head."""
        claim_next = claim_next and not self._w._sessions.stopping
        claims = self._settle_together(conn, pending, claim_next) if len(pending) > 1 else None
        if claims is None:
            claims = []
            for claim, i, event, returned, error in pending:
                try:
                    claims.append(self._settle(conn, event, returned, error, claim_next))
                finally:
                    self._keeper.set_state(claim, i, 2)
        else:
            for claim, i, _, _, _ in pending:
                self._keeper.set_state(claim, i, 2)
        dead = False
        for (_, _, event, _, _), cl in zip(pending, claims):
            if cl is not None:
                dead = self._dead_lettered(event.session, cl) or dead
                if cl.get("outcome") == "claimed" and cl.get("heads"):
                    nxt.setdefault(event.session, []).extend(cl["heads"])
        return dead

    def _settle_together(self, conn: psycopg.Connection[Any], pending: List[Outcome],
                         claim_next: bool) -> Optional[List[Optional[Dict[str, Any]]]]:
        """Completes or fails every waiting outcome in one ``a2_batch`` (with
        ``claim_next``, a lane's completion with the claim of the lane's next
        head): each one's next claim (or None); None when the store refused
        the call as a whole."""
        w = self._w
        now = real_ms()
        ops: List[Dict[str, Any]] = []
        for _, _, event, returned, error in pending:
            head = {"session": event.session, "consumer": event.consumer, "lane": event.lane,
                    "index": event.index, "attempt": event.attempt, "now_ms": now}
            if error is not None:
                ops.append({"op": "fail", **head, "error": _tail(error),
                            "max_failures": w.max_failures, "retry_after_ms": w.retry_after_ms})
                continue
            ops.append({"op": "complete", **head, "events": returned,
                        "consumers": w._consumers_json})
            if claim_next and event.lane is not None:
                ops.append(store.claim_op(event.session, self.holder,
                                          **self._claim_args(now_ms=now, lanes=[
                                              {"consumer": event.consumer,
                                               "lane": event.lane}])))
        try:
            results = store.batch(conn, ops)
        except errors.StoreUnavailable:
            raise
        except (errors.Error, psycopg.errors.DeadlockDetected,
                psycopg.errors.SerializationFailure, TypeError, ValueError) as exc:
            w._log.info("settling %d heads in one call was refused (%s): one by one",
                        len(pending), exc)
            return None
        w._count(settled_together=len(pending))
        claims: List[Optional[Dict[str, Any]]] = []
        k = 0
        for _, _, event, _, error in pending:
            res = results[k]
            k += 1
            if error is not None:
                self._note_failed(event, res)
                claims.append(None)
                continue
            self._note_completed(event, res)
            if k < len(ops) and ops[k]["op"] == "claim":
                claims.append(results[k])
                k += 1
            else:
                claims.append(None)
        return claims

    def _dead_lettered(self, session: str, cl: Dict[str, Any]) -> bool:
        """Counts and logs the heads a claim dead-lettered; whether any."""
        dead = cl.get("dead_lettered") or []
        for d in dead:
            self._w._count(dead_lettered=1)
            self._w._log.warning("dead-lettered %s %s #%d: its lease lapsed at failure %d",
                                 session, d.get("consumer"), d.get("index"),
                                 d.get("failure_count") or 0)
        return bool(dead)

    def _call_handler(self, event: Event) -> Tuple[List[Dict[str, Any]], Optional[str]]:
        log = self._w._log
        log.debug("run %s #%d %s attempt %d%s", event.session, event.index, event.type,
                  event.attempt, f" lane {event.lane}" if event.lane is not None else "")
        try:
            result = self._w.handler(event)
        except BaseException as exc:  # the attempt fails, the slot goes on
            text = _exception_text(exc)
            log.warning("handler failed on %s #%d attempt %d: %s", event.session,
                        event.index, event.attempt, text)
            log.debug("handler traceback", exc_info=exc)
            return [], text
        try:
            return _returned_events(event, result), None
        except ValueError as exc:
            log.warning("handler of %s #%d: %s", event.session, event.index, exc)
            return [], str(exc)

    def _settle(self, conn: psycopg.Connection[Any], event: Event, returned: List[Dict[str, Any]],
                error: Optional[str], claim_next: bool = False) -> Optional[Dict[str, Any]]:
        """Completes or fails one head after its handler ran. With
        ``claim_next``, the completion of a lane's head claims the lane's next
        head in the same call: returns that claim's result (else None)."""
        w = self._w
        nxt: Optional[Dict[str, Any]] = None
        if error is None:
            try:
                if claim_next and event.lane is not None:
                    res, nxt = store.complete_claim_next(
                        conn, event.session, event.consumer, event.lane, event.index,
                        event.attempt, returned, holder=self.holder, ttl_ms=w.ttl_ms,
                        consumers=w._consumers_json, max_failures=w.max_failures,
                        now_ms=real_ms())
                else:
                    res = store.complete(conn, event.session, event.consumer, event.lane,
                                         event.index, event.attempt, returned,
                                         consumers=w._consumers_json, now_ms=real_ms())
            except (errors.PartialDuplicateBatch, errors.InvalidArgument,
                    errors.NoSuchEvent) as exc:
                # The returned events were refused: that is the attempt failing.
                error = f"returned events refused: {exc.message}"
            except (TypeError, ValueError) as exc:
                error = f"returned events are not JSON: {exc}"
            else:
                self._note_completed(event, res)
                return nxt
            w._log.warning("%s #%d attempt %d fails: %s", event.session, event.index,
                           event.attempt, error)
        res = store.fail(conn, event.session, event.consumer, event.lane, event.index,
                         event.attempt, _tail(error), max_failures=w.max_failures,
                         retry_after_ms=w.retry_after_ms, now_ms=real_ms())
        self._note_failed(event, res)
        return None

    def _note_completed(self, event: Event, res: Dict[str, Any]) -> None:
        """Counts (and logs) a completion's outcome."""
        w = self._w
        if res.get("outcome") == "completed":
            w._count(completed=1)
            w._log.debug("completed %s %s #%d attempt %d (%d returned)", event.session,
                         event.consumer, event.index, event.attempt,
                         len(res.get("events") or []))
        else:
            w._count(superseded=1)
            w._log.info("%s %s #%d attempt %d was superseded", event.session,
                        event.consumer, event.index, event.attempt)

    def _note_failed(self, event: Event, res: Dict[str, Any]) -> None:
        """Counts (and logs) a failure's outcome."""
        w = self._w
        outcome = res.get("outcome")
        if outcome == "dead_lettered":
            w._count(dead_lettered=1)
            w._log.warning("dead-lettered %s %s #%d after %d failures", event.session,
                           event.consumer, event.index, res.get("failure_count") or 0)
        elif outcome == "superseded":
            w._count(superseded=1)
        else:
            w._count(failed=1)
            w._log.info("failed %s %s #%d attempt %d (failure %d of %d)", event.session,
                        event.consumer, event.index, event.attempt,
                        res.get("failure_count") or 0, w.max_failures)
