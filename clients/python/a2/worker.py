"""a2.Worker: wake-ups from a2-consumer, claims through the store, a handler
per claimed event, completions and failures.

Threads:

- the thread that calls :meth:`Worker.run` holds the connection to
  a2-consumer (non-blocking, one ``poll`` loop): hello and subscriptions,
  pings, reconnects with backoff, the degraded sweep while a2-consumer is
  unreachable, the paging of pending sessions on (re)connect and resync, and
  the timers of the session table;
- ``concurrency`` slot threads take sessions from that table, one session
  per slot at a time, each with its own store connection: claim, run the
  handler for each claimed head in order, complete or fail, claim again;
- one lease thread, with its own store connection, renews the unfinished
  heads of every slot's claim every ttl/3 while their handlers run.

A session is worked by one slot at a time; a wake-up for a session being
worked makes it run once more afterwards. The store gives a lane one head
at a time, so lanes run in index order whatever the number of slots or of
workers.
"""
from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import random
import select
import socket
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from typing import (Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence,
                    Set, Tuple, Union)

import psycopg

from . import errors, store, wire
from .store import LogConsumer

__all__ = ["Worker", "Event", "WorkerStats", "Handler"]

HANDSHAKE_TIMEOUT_MS = 5000
READ_CHUNK = 65536
PENDING_PAGE = 1000
STORE_RETRY_MS = 1000   # a session whose run hit a store error runs again after this
WAKE_RECHECKS = 3       # a woken run that claimed nothing looks again after
WAKE_RECHECK_MS = 20    # 20, 40 and 80 ms
MAX_ERROR_TEXT = 4096   # bytes of a failure text kept (the tail)
MAX_CONCURRENCY = 256

_IDLE, _CONNECTING, _HANDSHAKE, _READY = range(4)


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _real_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Event:
    """A claimed event, as the handler sees it.

    ``consumer``, ``lane`` (None for a concurrent cursor), ``cursor`` and
    ``attempt`` name the attempt being run; ``head`` is the head as
    ``a2_claim`` returned it (every key of docs/sql.md).
    """

    session: str
    index: int
    type: str
    id: str
    payload: Any
    created_at: int
    cause: Optional[Dict[str, Any]]
    consumer: str
    lane: Optional[str]
    cursor: str
    attempt: int
    failure_count: int
    head: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_head(cls, session: str, head: Dict[str, Any]) -> "Event":
        return cls(session=session, index=head["index"], type=head["type"], id=head["id"],
                   payload=head.get("payload"), created_at=head.get("created_at") or 0,
                   cause=head.get("cause"), consumer=head["consumer"], lane=head.get("lane"),
                   cursor=head.get("cursor_key") or "", attempt=head["attempt"],
                   failure_count=head.get("failure_count") or 0, head=head)


#: The handler: the returned events (dicts with ``type`` and optionally
#: ``payload``, ``id``, ``targets``) or None; raising fails the attempt.
Handler = Callable[[Event], Optional[Iterable[Mapping[str, Any]]]]


@dataclass
class WorkerStats:
    """Counters of a Worker since it started."""

    connects: int = 0        # welcomes from a2-consumer
    disconnects: int = 0     # connections lost after a welcome
    wakes: int = 0           # wake and log messages
    resyncs: int = 0         # pages through the pending sessions (connect, resync)
    sweeps: int = 0          # degraded sweeps
    runs: int = 0            # session runs by the slots
    claimed: int = 0         # heads claimed
    completed: int = 0
    failed: int = 0          # failed attempts that will be retried
    dead_lettered: int = 0
    superseded: int = 0      # completions or failures of attempts that lost their head
    renewals: int = 0        # leases renewed
    leases_lost: int = 0     # leases a renewal found superseded while the handler ran
    store_errors: int = 0    # runs that ended on a store error


@dataclass
class _Job:
    session: str
    wake_log: bool = False   # bring log cursors up to date first
    queued: bool = False     # in the ready queue
    running: bool = False    # a slot works it
    again: bool = False      # woken while running: run once more
    at: int = 0              # timer (monotonic ms); 0: none
    hinted: bool = False     # a wake-up named work here
    rechecks: int = 0        # runs that found nothing after a wake-up
    xid: int = 0             # the latest wake-up's commit, for the next run to wait for


@dataclass
class _Ran:
    claimed: int = 0
    retry_at: int = 0
    waited: bool = False     # the run waited for its wake-up's commit
    error: Optional[str] = None


class _Claim:
    """The heads of one claim, shared with the lease thread. state per head:
    0 running, 1 being completed or failed, 2 done."""

    __slots__ = ("session", "holder", "refs", "state", "next_renew")

    def __init__(self, session: str, holder: str, refs: List[Dict[str, Any]]) -> None:
        self.session = session
        self.holder = holder
        self.refs = refs
        self.state = [0] * len(refs)
        self.next_renew = 0


class _Slot:
    def __init__(self, number: int, holder: str) -> None:
        self.number = number
        self.holder = holder
        self.conn: Optional[psycopg.Connection[Any]] = None
        self.thread: Optional[threading.Thread] = None


def _is_broken(conn: Optional[psycopg.Connection[Any]], exc: BaseException) -> bool:
    return (conn is None or conn.closed or conn.broken
            or isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)))


def _close(conn: Optional[psycopg.Connection[Any]]) -> None:
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


class _LeaseKeeper:
    """The lease thread: renews the unfinished heads of each published claim
    every ttl/3, on a store connection of its own."""

    def __init__(self, worker: "Worker") -> None:
        self._w = worker
        self._cv = threading.Condition()
        self._claims: Dict[int, _Claim] = {}
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
        _close(self._conn)
        self._conn = None

    def publish(self, slot: int, claim: _Claim) -> None:
        with self._cv:
            claim.next_renew = _mono_ms() + self._interval
            self._claims[slot] = claim
            self._cv.notify_all()

    def set_state(self, claim: _Claim, i: int, state: int) -> None:
        with self._cv:
            claim.state[i] = state

    def unpublish(self, slot: int) -> None:
        with self._cv:
            self._claims.pop(slot, None)

    def _main(self) -> None:
        with self._cv:
            while not self._quit:
                live = [c for c in self._claims.values() if any(s < 2 for s in c.state)]
                if not live:
                    self._cv.wait()
                    continue
                claim = min(live, key=lambda c: c.next_renew)
                now = _mono_ms()
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

    def _renew(self, claim: _Claim, refs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        try:
            if self._conn is None:
                self._conn = self._w._connect_store()
            return store.renew(self._conn, claim.session, claim.holder, refs,
                               ttl_ms=self._w.ttl_ms, now_ms=_real_ms())
        except (psycopg.Error, errors.Error) as exc:
            self._w._log.warning("could not renew leases in %s: %s", claim.session, exc)
            if _is_broken(self._conn, exc):
                _close(self._conn)
                self._conn = None
        except Exception:  # a bug must not end the renewals
            self._w._log.exception("could not renew leases in %s", claim.session)
        return None


class Worker:
    """A worker of one or more consumers.

    ``db`` is the store's libpq conninfo; ``consumers`` the consumers served
    (names, or :class:`a2.LogConsumer` for a log consumer); ``handler`` is
    called once per claimed event with an :class:`Event` and returns the
    events to append with the completion (a list of dicts, or None); an
    exception fails the attempt with its text. ``connect`` is a2-consumer's
    address, ``unix:PATH`` or ``tcp:HOST:PORT`` (with ``token``), or a list
    of them: the active consumer and its standbys, tried in turn (a standby
    refuses with a ``standby`` error); without it the worker relies on the
    degraded sweep alone.

    ``run()`` blocks until ``stop()`` (callable from any thread or a signal
    handler); ``start()`` runs it in a thread of its own, ``join()`` waits for
    it. As a context manager, leaving the block stops the worker and waits::

        with a2.Worker(db, ["billing"], charge, connect="unix:/run/a2/a2.sock") as w:
            signal.signal(signal.SIGTERM, lambda *_: w.stop())
            w.run()

    On stop the worker claims nothing more, lets every running handler finish
    (heads already claimed in the same claim too) and completes or fails it.
    """

    def __init__(self, db: str, consumers: Union[store.Consumer, Sequence[store.Consumer]],
                 handler: Handler, *, connect: Union[str, Sequence[str], None] = None,
                 token: Optional[str] = None, name: Optional[str] = None,
                 concurrency: int = 1, ttl_ms: int = 30000, max_failures: int = 5,
                 retry_after_ms: int = 1000, degraded_sweep_ms: int = 30000,
                 reconnect_min_ms: int = 100, reconnect_max_ms: int = 5000,
                 ping_ms: int = 15000,
                 on_message: Optional[Callable[[Dict[str, Any]], None]] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        if not callable(handler):
            raise TypeError("handler must be callable")
        if isinstance(consumers, (str, LogConsumer)):
            consumers = [consumers]
        self.consumers: List[Union[str, LogConsumer]] = []
        for c in consumers:
            if isinstance(c, Mapping):
                log = c.get("log")
                c = LogConsumer(c["name"], **log) if log else c["name"]
            if not isinstance(c, (str, LogConsumer)):
                raise TypeError(f"a consumer is a name or a LogConsumer, not {type(c).__name__}")
            self.consumers.append(c)
        names = [c if isinstance(c, str) else c.name for c in self.consumers]
        if not names or len(set(names)) != len(names) or not all(names):
            raise ValueError("a Worker needs one or more consumers, each named once")
        self._names = names
        self._log_consumers = [c for c in self.consumers if isinstance(c, LogConsumer)]
        self._log_names = {c.name for c in self._log_consumers}
        self._consumers_json = store.consumers_json(self.consumers)
        for what, v, lo, hi in (("concurrency", concurrency, 1, MAX_CONCURRENCY),
                                ("ttl_ms", ttl_ms, 10, 86_400_000),
                                ("max_failures", max_failures, 1, 1_000_000),
                                ("retry_after_ms", retry_after_ms, 0, 86_400_000),
                                ("degraded_sweep_ms", degraded_sweep_ms, 10, 86_400_000),
                                ("reconnect_min_ms", reconnect_min_ms, 1, 86_400_000),
                                ("reconnect_max_ms", reconnect_max_ms, 1, 86_400_000),
                                ("ping_ms", ping_ms, 10, 86_400_000)):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{what} must be an integer in {lo}..{hi}, not {v!r}")
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        specs = [connect] if isinstance(connect, str) else list(connect or [])
        self._addresses = [wire.parse_address(a) for a in specs if a]
        if any(not a.is_unix for a in self._addresses) and not token:
            raise ValueError("a tcp: connection needs a token")
        # The address connected to (or tried next): the first, then on each
        # failure or standby's refusal the next; a full round that found no
        # active a2-consumer backs off.
        self._addr_i = 0
        self._round_failures = 0
        self._address = self._addresses[0] if self._addresses else None
        # hello (a token on tcp: only), then the subscriptions
        self._hello_unix = wire.encode_hello(self.name, None)
        self._hello_tcp = wire.encode_hello(self.name, token) if token else self._hello_unix
        subscriptions = b""
        for c in self.consumers:
            if isinstance(c, LogConsumer):
                types = None if c.types is None else list(c.types)
                subscriptions += wire.encode_subscribe(c.name, types)
            else:
                subscriptions += wire.encode_subscribe(c)
        self._subscriptions = subscriptions
        self._db = db
        self.handler = handler
        self.concurrency = concurrency
        self.ttl_ms = ttl_ms
        self.max_failures = max_failures
        self.retry_after_ms = retry_after_ms
        self.degraded_sweep_ms = degraded_sweep_ms
        self.reconnect_min_ms = reconnect_min_ms
        self.reconnect_max_ms = max(reconnect_max_ms, reconnect_min_ms)
        self.ping_ms = ping_ms
        self._on_message = on_message
        self._log = logger or logging.getLogger("a2.worker")
        self.holders = [f"{self.name}/{i + 1}" for i in range(concurrency)]

        # The session table, shared with the slots under _mu.
        self._mu = threading.Condition()
        self._jobs: Dict[str, _Job] = {}
        self._ready: Deque[_Job] = deque()
        self._timers: List[Tuple[int, int, _Job]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._nrunning = 0

        self._stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._stop_requested = False
        self._started = False
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._finished = threading.Event()
        self._connected = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._slots: List[_Slot] = []
        self._keeper: Optional[_LeaseKeeper] = None
        self._main_conn: Optional[psycopg.Connection[Any]] = None

        # The connection to a2-consumer (the run() thread only).
        self._state = _IDLE
        self._sock: Optional[socket.socket] = None
        self._reader: Optional[wire.FrameReader] = None
        self._out = bytearray()
        self._next_connect_at = 0
        self._backoff_ms = reconnect_min_ms
        self._handshake_deadline = 0
        self._next_ping_at = 0
        self._pong_deadline = 0
        self._ping_id = 0
        self._failing = 0
        self._last_error = ""
        self._next_sweep_at = 0
        self._resync_names: Set[str] = set()
        self._resync_at = 0

    # ── life ──────────────────────────────────────────────────────────────

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self._thread is not None:
            self.join()
        self.close()

    def run(self) -> None:
        """Works until :meth:`stop`. Raises when the store cannot be reached
        at the start; later store and connection failures are logged and
        retried."""
        with self._mu:
            if self._started:
                raise RuntimeError("a Worker runs once")
            self._started = True
        try:
            self._main_conn = self._connect_store()
            self._keeper = _LeaseKeeper(self)
            self._keeper.start()
            for i, holder in enumerate(self.holders):
                slot = _Slot(i + 1, holder)
                slot.thread = threading.Thread(target=self._slot_main, args=(slot,),
                                               name=f"a2-slot-{holder}", daemon=True)
                self._slots.append(slot)
                slot.thread.start()
            self._log.info("serving %s with %d slot%s, ttl %d ms, %s", ", ".join(self._names),
                           self.concurrency, "" if self.concurrency == 1 else "s", self.ttl_ms,
                           self._address or "no a2-consumer (degraded sweep only)")
            self._loop()
        finally:
            self._shutdown()
            self._finished.set()

    def start(self) -> None:
        """Runs :meth:`run` in a thread of its own."""
        if self._thread is not None:
            raise RuntimeError("a Worker runs once")

        def main() -> None:
            try:
                self.run()
            except BaseException as exc:  # re-raised by join()
                self._error = exc
                self._log.error("the worker stopped: %s", exc)

        self._thread = threading.Thread(target=main, name=f"a2-worker-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Asks the worker to stop; returns at once (safe in a signal handler)."""
        self._stop_requested = True
        self._poke()

    def join(self, timeout: Optional[float] = None) -> bool:
        """Waits for the run started by :meth:`start` to end: False on a
        timeout; re-raises what stopped the run."""
        if self._thread is None:
            raise RuntimeError("the Worker was not started")
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        if self._error is not None:
            raise self._error
        return True

    def close(self) -> None:
        """Releases the wake-up socket pair (after the run ended)."""
        if self._started and not self._finished.is_set():
            raise RuntimeError("stop the Worker before closing it")
        self._wake_r.close()
        self._wake_w.close()

    def wait_connected(self, timeout: Optional[float] = None) -> bool:
        """Waits until a2-consumer welcomed the worker; False on a timeout."""
        return self._connected.wait(timeout)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def last_error(self) -> str:
        """Why the connection to a2-consumer went down last ("" when up)."""
        return self._last_error

    @property
    def stats(self) -> WorkerStats:
        """A copy of the counters."""
        with self._stats_lock:
            return replace(self._stats)

    def _count(self, **counts: int) -> None:
        with self._stats_lock:
            for k, v in counts.items():
                setattr(self._stats, k, getattr(self._stats, k) + v)

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _connect_store(self) -> psycopg.Connection[Any]:
        # Autocommit: every call is its own transaction. No server-side
        # prepared statements, so a pooler in transaction mode works too.
        return psycopg.connect(self._db, autocommit=True, prepare_threshold=None)

    def _shutdown(self) -> None:
        with self._mu:
            self._stopping = True
            running = self._nrunning
            self._mu.notify_all()
        if running:
            self._log.info("stopping: letting %d running session%s finish", running,
                           "" if running == 1 else "s")
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join()
        if self._keeper is not None:
            self._keeper.stop()
        self._close_link()
        self._state = _IDLE
        self._connected.clear()
        _close(self._main_conn)
        self._main_conn = None
        st = self.stats
        self._log.info("stopped after %d handler runs",
                       st.completed + st.failed + st.dead_lettered)

    # ── the session table ─────────────────────────────────────────────────

    def _schedule_locked(self, session: str, wake_log: bool, hinted: bool,
                         xid: int = 0) -> None:
        if self._stopping:
            return
        job = self._jobs.get(session)
        if job is None:
            job = self._jobs[session] = _Job(session)
        job.wake_log |= wake_log
        if xid:
            job.xid = xid
        if hinted and not job.hinted:
            job.hinted = True
            job.rechecks = 0
        job.at = 0  # cancels a timer
        if job.running:
            job.again = True
        elif not job.queued:
            job.queued = True
            self._ready.append(job)
            self._mu.notify()

    def _schedule(self, session: str, wake_log: bool, hinted: bool, xid: int = 0) -> None:
        with self._mu:
            self._schedule_locked(session, wake_log, hinted, xid)

    def _set_timer_locked(self, job: _Job, delay_ms: int) -> None:
        job.at = _mono_ms() + delay_ms
        heapq.heappush(self._timers, (job.at, next(self._seq), job))

    def _fire_timers(self) -> Optional[int]:
        """Queues the sessions whose timer is due; ms to the next timer."""
        now = _mono_ms()
        with self._mu:
            while self._timers and self._timers[0][0] <= now:
                at, _, job = heapq.heappop(self._timers)
                if (self._jobs.get(job.session) is job and job.at == at
                        and not job.running and not job.queued):
                    job.at = 0
                    job.queued = True
                    self._ready.append(job)
                    self._mu.notify()
            return self._timers[0][0] - now if self._timers else None

    def _after_run_locked(self, job: _Job, ran: _Ran, wake_log: bool) -> None:
        """What to do with a session after a run. A wake-up can outrun the
        visibility of its commit to new snapshots: a run given the wake-up's
        xid had the store wait for that commit; one without (from a consumer
        that sends none) that claimed nothing looks again after 20, 40 and
        80 ms. A log wake-up is kept
        for every run scheduled after it until one ends with nothing left to
        do (starting a log cursor's run is idempotent)."""
        job.running = False
        if self._jobs.get(job.session) is not job:
            return
        if self._stopping:
            del self._jobs[job.session]
            return
        if job.again:
            job.again = False
            job.queued = True
            self._ready.append(job)
            self._mu.notify()
        elif ran.error is not None:
            self._set_timer_locked(job, STORE_RETRY_MS)
        elif ran.retry_at > 0:
            self._set_timer_locked(job, max(ran.retry_at - _real_ms(), 0) + 5)
        elif (job.hinted and ran.claimed == 0 and not ran.waited
              and job.rechecks < WAKE_RECHECKS):
            self._set_timer_locked(job, WAKE_RECHECK_MS << job.rechecks)
            job.rechecks += 1
        else:
            del self._jobs[job.session]
            return
        job.wake_log |= wake_log

    # ── slots ─────────────────────────────────────────────────────────────

    def _slot_main(self, slot: _Slot) -> None:
        try:
            while True:
                with self._mu:
                    while not self._stopping and not self._ready:
                        self._mu.wait()
                    if self._stopping:
                        return
                    job = self._ready.popleft()
                    job.queued = False
                    job.running = True
                    job.again = False
                    wake_log = job.wake_log
                    job.wake_log = False
                    # Woken by a2-consumer, which announces every head that
                    # becomes claimable: one claim round is enough.
                    woken = job.hinted
                    xid = job.xid
                    job.xid = 0
                    self._nrunning += 1
                try:
                    ran = self._run_session(slot, job.session, wake_log, woken, xid)
                except Exception as exc:  # a bug must not cost the slot
                    self._log.exception("run of %s failed", job.session)
                    ran = _Ran(error=str(exc))
                if ran.error is not None:
                    self._count(store_errors=1)
                    self._log.warning("%s", ran.error)
                with self._mu:
                    self._nrunning -= 1
                    self._after_run_locked(job, ran, wake_log)
                self._poke()  # the main loop recomputes its timers
        finally:
            _close(slot.conn)
            slot.conn = None

    def _run_session(self, slot: _Slot, session: str, wake_log: bool, once: bool,
                     xid: int = 0) -> _Ran:
        """Works one session until it is settled or busy; with ``once``, ends
        after the first claim's heads when that claim dead-lettered nothing
        (it took every head eligible then; a2-consumer announces the rest).
        ``xid``: the wake-up's commit, which the store waits for before the
        first claim (claimed again while it is still not visible)."""
        ran = _Ran(waited=xid != 0)
        self._count(runs=1)
        what = "connect"
        try:
            if slot.conn is None:
                slot.conn = self._connect_store()
            conn = slot.conn
            if wake_log:
                what = "wake_log"
                self._wake_logs(conn, session, xid)
            while not self._stopping:
                what = "claim"
                cl = store.claim(conn, session, slot.holder, ttl_ms=self.ttl_ms,
                                 consumers=self._consumers_json, max_failures=self.max_failures,
                                 now_ms=_real_ms(), after_xid=xid or None)
                if cl.get("outcome") == "busy" and cl.get("waiting_for"):
                    # still not visible (a synchronous standby holds it, say)
                    if wake_log:
                        what = "wake_log"
                        self._wake_logs(conn, session, xid)
                    continue
                xid = 0  # visible: later claims need not wait
                dead = cl.get("dead_lettered") or []
                for d in dead:
                    self._count(dead_lettered=1)
                    self._log.warning("dead-lettered %s %s #%d: its lease lapsed at failure %d",
                                      session, d.get("consumer"), d.get("index"),
                                      d.get("failure_count") or 0)
                outcome = cl.get("outcome")
                if outcome == "busy":
                    ran.retry_at = cl.get("retry_at") or 0
                    break
                heads = cl.get("heads") or []
                if outcome != "claimed" or not heads:
                    ran.retry_at = 0
                    break
                ran.claimed += len(heads)
                self._count(claimed=len(heads))
                what = "complete or fail"
                self._run_heads(slot, conn, session, heads)
                if once and not dead:
                    break
        except (psycopg.Error, errors.Error) as exc:
            ran.error = f"{what} in {session} failed: {exc}"
            if _is_broken(slot.conn, exc):
                _close(slot.conn)
                slot.conn = None
        return ran

    def _wake_logs(self, conn: psycopg.Connection[Any], session: str, xid: int) -> None:
        for c in self._log_consumers:
            store.wake_log(conn, session, c.name, c.lane,
                           types=None if c.types is None else list(c.types),
                           backfill=c.backfill, after_xid=xid or None)

    def _run_heads(self, slot: _Slot, conn: psycopg.Connection[Any], session: str,
                   heads: List[Dict[str, Any]]) -> None:
        refs = [{"consumer": h["consumer"], "lane": h.get("lane"), "index": h["index"],
                 "attempt": h["attempt"]} for h in heads]
        claim = _Claim(session, slot.holder, refs)
        assert self._keeper is not None
        self._keeper.publish(slot.number, claim)
        try:
            for i, head in enumerate(heads):
                event = Event.from_head(session, head)
                returned, error = self._call_handler(event)
                self._keeper.set_state(claim, i, 1)
                try:
                    self._settle(conn, event, returned, error)
                finally:
                    self._keeper.set_state(claim, i, 2)
        finally:
            self._keeper.unpublish(slot.number)

    def _call_handler(self, event: Event) -> Tuple[List[Dict[str, Any]], Optional[str]]:
        self._log.debug("run %s #%d %s attempt %d%s", event.session, event.index, event.type,
                        event.attempt, f" lane {event.lane}" if event.lane is not None else "")
        try:
            result = self.handler(event)
        except BaseException as exc:  # the attempt fails, the slot goes on
            text = _exception_text(exc)
            self._log.warning("handler failed on %s #%d attempt %d: %s", event.session,
                              event.index, event.attempt, text)
            self._log.debug("handler traceback", exc_info=exc)
            return [], text
        try:
            return _returned_events(event, result), None
        except ValueError as exc:
            self._log.warning("handler of %s #%d: %s", event.session, event.index, exc)
            return [], str(exc)

    def _settle(self, conn: psycopg.Connection[Any], event: Event, returned: List[Dict[str, Any]],
                error: Optional[str]) -> None:
        """Completes or fails one head after its handler ran."""
        if error is None:
            try:
                res = store.complete(conn, event.session, event.consumer, event.lane,
                                     event.index, event.attempt, returned,
                                     consumers=self._consumers_json, now_ms=_real_ms())
            except (errors.PartialDuplicateBatch, errors.InvalidArgument,
                    errors.NoSuchEvent) as exc:
                # The returned events were refused: that is the attempt failing.
                error = f"returned events refused: {exc.message}"
            except (TypeError, ValueError) as exc:
                error = f"returned events are not JSON: {exc}"
            else:
                if res.get("outcome") == "completed":
                    self._count(completed=1)
                    self._log.debug("completed %s %s #%d attempt %d (%d returned)",
                                    event.session, event.consumer, event.index, event.attempt,
                                    len(res.get("events") or []))
                else:
                    self._count(superseded=1)
                    self._log.info("%s %s #%d attempt %d was superseded", event.session,
                                   event.consumer, event.index, event.attempt)
                return
            self._log.warning("%s #%d attempt %d fails: %s", event.session, event.index,
                              event.attempt, error)
        res = store.fail(conn, event.session, event.consumer, event.lane, event.index,
                         event.attempt, _tail(error), max_failures=self.max_failures,
                         retry_after_ms=self.retry_after_ms, now_ms=_real_ms())
        outcome = res.get("outcome")
        if outcome == "dead_lettered":
            self._count(dead_lettered=1)
            self._log.warning("dead-lettered %s %s #%d after %d failures", event.session,
                              event.consumer, event.index, res.get("failure_count") or 0)
        elif outcome == "superseded":
            self._count(superseded=1)
        else:
            self._count(failed=1)
            self._log.info("failed %s %s #%d attempt %d (failure %d of %d)", event.session,
                           event.consumer, event.index, event.attempt,
                           res.get("failure_count") or 0, self.max_failures)

    # ── pending sessions: resync and the degraded sweep ──────────────────

    def _main_store(self) -> psycopg.Connection[Any]:
        if self._main_conn is None or self._main_conn.closed:
            self._main_conn = self._connect_store()
        return self._main_conn

    def _page_pending(self, names: List[str], wake_log: bool) -> int:
        conn = self._main_store()
        after: Optional[str] = None
        total = 0
        while True:
            page = store.pending_sessions(conn, names, after=after, max_sessions=PENDING_PAGE,
                                          now_ms=_real_ms())
            with self._mu:
                for session in page:
                    self._schedule_locked(session, wake_log, False)
            total += len(page)
            if len(page) < PENDING_PAGE:
                return total
            after = page[-1]

    def _store_failed(self, exc: BaseException) -> None:
        if _is_broken(self._main_conn, exc):
            _close(self._main_conn)
            self._main_conn = None

    def _resync(self, names: List[str]) -> None:
        self._count(resyncs=1)
        try:
            total = self._page_pending(names, False)
        except (psycopg.Error, errors.Error) as exc:
            self._store_failed(exc)
            self._resync_names.update(names)
            self._resync_at = _mono_ms() + STORE_RETRY_MS
            self._log.warning("could not resync: %s; trying again in %d ms", exc, STORE_RETRY_MS)
            return
        self._log.info("resync: %d session%s with pending work", total, "" if total == 1 else "s")

    def _sweep(self) -> None:
        self._count(sweeps=1)
        try:
            total = self._page_pending(self._names, bool(self._log_consumers))
        except (psycopg.Error, errors.Error) as exc:
            self._store_failed(exc)
            self._log.warning("degraded: sweep of pending sessions failed: %s", exc)
            return
        plural = "" if total == 1 else "s"
        if self._address is None:
            self._log.info("swept %d pending session%s, next sweep in %d ms", total, plural,
                           self.degraded_sweep_ms)
        else:
            self._log.warning("degraded: a2-consumer unreachable (%s); swept %d pending "
                              "session%s, next sweep in %d ms", self._last_error,
                              total, plural, self.degraded_sweep_ms)

    # ── the connection to a2-consumer ────────────────────────────────────

    def _close_link(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._reader = None
        self._out = bytearray()
        self._pong_deadline = 0

    def _went_down(self, why: str) -> None:
        """The connection is down: say so (once per outage), schedule a
        reconnect with backoff, arm the degraded sweep."""
        was_up = self._state in (_HANDSHAKE, _READY)
        was_ready = self._state == _READY
        self._close_link()
        self._state = _IDLE
        self._connected.clear()
        self._last_error = why
        now = _mono_ms()
        self._round_failures += 1
        if len(self._addresses) > 1:
            self._addr_i = (self._addr_i + 1) % len(self._addresses)
            self._address = self._addresses[self._addr_i]
        if self._round_failures < len(self._addresses):
            delay = 0  # the next address at once
        else:
            self._round_failures = 0
            jitter = random.randint(0, self._backoff_ms // 4) if self._backoff_ms >= 4 else 0
            delay = self._backoff_ms + jitter
            self._backoff_ms = min(self._backoff_ms * 2, self.reconnect_max_ms)
        self._next_connect_at = now + delay
        first = self._failing == 0
        self._failing += 1
        if was_ready:
            self._count(disconnects=1)
        if first or was_up:
            self._log.warning("%s; reconnecting in %d ms", why, delay)
        if not self._next_sweep_at:
            # Never connected: sweep now; after an outage the reconnect's
            # resync covers the gap, so the first sweep waits one interval.
            connects = self.stats.connects
            self._next_sweep_at = now if connects == 0 else now + self.degraded_sweep_ms

    def _start_connect(self) -> None:
        addr = self._address
        assert addr is not None
        sock: Optional[socket.socket] = None
        try:
            if addr.path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setblocking(False)
                rc = sock.connect_ex(addr.path)
            else:
                rc = errno.EHOSTUNREACH
                for family, kind, proto, _, sa in socket.getaddrinfo(addr.host, addr.port,
                                                                     type=socket.SOCK_STREAM):
                    sock = socket.socket(family, kind, proto)
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    rc = sock.connect_ex(sa)
                    if rc in (0, errno.EINPROGRESS):
                        break
                    sock.close()
                    sock = None
        except socket.gaierror as exc:
            self._went_down(f"could not resolve {addr.host}: {exc.strerror or exc}")
            return
        except OSError as exc:
            if sock is not None:
                sock.close()
            self._went_down(f"could not connect to {addr}: {exc.strerror or exc}")
            return
        if sock is None or rc not in (0, errno.EINPROGRESS):
            if sock is not None:
                sock.close()
            self._went_down(f"could not connect to {addr}: {os.strerror(rc)}")
            return
        self._sock = sock
        self._state = _CONNECTING
        self._reader = wire.FrameReader()
        self._out = bytearray((self._hello_unix if addr.is_unix else self._hello_tcp)
                              + self._subscriptions)
        self._handshake_deadline = _mono_ms() + HANDSHAKE_TIMEOUT_MS

    def _do_write(self) -> None:
        while self._out and self._sock is not None:
            try:
                n = self._sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._went_down(f"could not write to a2-consumer at {self._address}: "
                                f"{exc.strerror or exc}")
                return
            del self._out[:n]

    def _do_read(self) -> None:
        for _ in range(16):
            if self._sock is None or self._reader is None:
                return
            try:
                data = self._sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._went_down(f"could not read from a2-consumer at {self._address}: "
                                f"{exc.strerror or exc}")
                return
            if not data:
                self._went_down(f"a2-consumer at {self._address} closed the connection")
                return
            try:
                messages = self._reader.feed(data)
            except wire.ProtocolError as exc:
                self._went_down(f"bad frame from a2-consumer: {exc}")
                return
            for msg in messages:
                self._on_frame(msg)
                if self._sock is None:
                    return  # an error frame closed the connection

    def _on_frame(self, msg: Dict[str, Any]) -> None:
        if self._on_message is not None:
            try:
                self._on_message(dict(msg))
            except Exception:
                self._log.exception("on_message failed")
        t = msg["t"]
        if t == "welcome":
            if self._state == _READY:
                return
            if msg["v"] != wire.VERSION:
                self._went_down(f"a2-consumer speaks wire protocol {msg['v']}, "
                                f"not {wire.VERSION}")
                return
            now = _mono_ms()
            self._state = _READY
            self._count(connects=1)
            self._failing = 0
            self._round_failures = 0
            self._backoff_ms = self.reconnect_min_ms
            self._next_sweep_at = 0
            self._next_ping_at = now + self.ping_ms
            self._pong_deadline = 0
            self._last_error = ""
            self._connected.set()
            lsn = msg["lsn"]
            self._log.info("connected to a2-consumer at %s (lsn %X/%X)", self._address,
                           lsn >> 32, lsn & 0xFFFFFFFF)
            # Wake-ups may have been missed while away: resync every consumer.
            self._resync(list(self._names))
        elif t in ("wake", "log"):
            if msg["consumer"] not in self._names:
                return
            self._count(wakes=1)
            if t == "wake":
                self._log.debug("wake %s %s head %d", msg["session"], msg["cursor"], msg["head"])
            else:
                self._log.debug("log %s #%d %s", msg["session"], msg["idx"], msg["type"])
            self._schedule(msg["session"], t == "log", True, msg.get("xid") or 0)
        elif t == "resync":
            consumer = msg["consumer"]
            if consumer not in self._names:
                return
            sessions = msg["sessions"]
            if sessions is None:
                self._resync([consumer])
            else:
                self._log.info("resync of %d session%s", len(sessions),
                               "" if len(sessions) == 1 else "s")
                with self._mu:
                    for s in sessions:
                        self._schedule_locked(s, consumer in self._log_names, False)
        elif t == "cleared":
            self._log.debug("cleared %s at #%d", msg["session"], msg["clear_index"])
        elif t == "pong":
            if msg["id"] == self._ping_id:
                self._pong_deadline = 0
        elif t == "error":
            if msg["code"] == "standby":
                self._went_down(f"a2-consumer at {self._address} is a standby: {msg['message']}")
            else:
                self._went_down(f"a2-consumer refused the worker: {msg['message']} ({msg['code']})")

    def _timers_step(self, now: int) -> None:
        """Connects, times out, pings and sweeps when due."""
        if self._address is not None and self._state == _IDLE and now >= self._next_connect_at:
            self._start_connect()
        if self._state in (_CONNECTING, _HANDSHAKE) and now >= self._handshake_deadline:
            self._went_down(f"a2-consumer at {self._address} sent no welcome in "
                            f"{HANDSHAKE_TIMEOUT_MS} ms")
        if self._state == _READY:
            if self._pong_deadline and now >= self._pong_deadline:
                self._went_down(f"a2-consumer at {self._address} did not answer a ping in "
                                f"{self.ping_ms} ms")
            elif not self._pong_deadline and now >= self._next_ping_at:
                self._ping_id += 1
                self._out += wire.encode_ping(self._ping_id)
                self._pong_deadline = now + self.ping_ms
                self._next_ping_at = now + self.ping_ms
                self._do_write()
        if self._state != _READY and self._next_sweep_at and now >= self._next_sweep_at:
            self._next_sweep_at = now + self.degraded_sweep_ms
            self._sweep()
        if self._resync_names and now >= self._resync_at:
            names = sorted(self._resync_names)
            self._resync_names.clear()
            self._resync(names)

    def _timeout(self, now: int, timer_ms: Optional[int]) -> int:
        deadlines = []
        if self._address is not None and self._state == _IDLE:
            deadlines.append(self._next_connect_at)
        if self._state in (_CONNECTING, _HANDSHAKE):
            deadlines.append(self._handshake_deadline)
        if self._state == _READY:
            deadlines.append(self._pong_deadline or self._next_ping_at)
        if self._state != _READY and self._next_sweep_at:
            deadlines.append(self._next_sweep_at)
        if self._resync_names:
            deadlines.append(self._resync_at)
        if timer_ms is not None:
            deadlines.append(now + timer_ms)
        if not deadlines:
            return -1
        return max(0, min(min(deadlines) - now, 86_400_000))

    def _loop(self) -> None:
        if self._address is None:
            self._next_sweep_at = _mono_ms()
        while not self._stop_requested:
            self._timers_step(_mono_ms())
            timer_ms = self._fire_timers()
            if self._stop_requested:
                break
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            sock = self._sock
            if sock is not None:
                events = select.POLLIN
                if self._out or self._state == _CONNECTING:
                    events |= select.POLLOUT
                poller.register(sock, events)
            ready = poller.poll(self._timeout(_mono_ms(), timer_ms))
            for fd, revents in ready:
                if fd == self._wake_r.fileno():
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                elif sock is not None and sock is self._sock:
                    self._on_socket(revents)

    def _on_socket(self, revents: int) -> None:
        assert self._sock is not None
        if self._state == _CONNECTING and revents & (select.POLLOUT | select.POLLERR
                                                     | select.POLLHUP):
            err = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._went_down(f"could not connect to {self._address}: {os.strerror(err)}")
                return
            self._state = _HANDSHAKE
        if self._sock is not None and self._state != _CONNECTING and revents & select.POLLOUT:
            self._do_write()
        if (self._sock is not None and self._state != _CONNECTING
                and revents & (select.POLLIN | select.POLLHUP | select.POLLERR)):
            self._do_read()
