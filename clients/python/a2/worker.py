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

This module holds the Worker itself (its settings, life, counters, the run
thread's loop, the wake-ups and the paging of pending sessions); the
connection is in :mod:`a2._link`, the session table in :mod:`a2._sessions`,
the slots and the lease thread in :mod:`a2._slots`, the Event in
:mod:`a2.event`.
"""
from __future__ import annotations

import logging
import os
import select
import socket
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Union

import psycopg

from . import errors, store
from ._clock import mono_ms, real_ms
from ._link import Link
from ._sessions import STORE_RETRY_MS, SessionTable
from ._slots import LeaseKeeper, Slot, close, is_broken
from .event import Event, Handler
from .store import LogConsumer

# The limits of the parts, importable from here as well.
from ._link import HANDSHAKE_TIMEOUT_MS, READ_CHUNK  # noqa: F401
from ._sessions import WAKE_RECHECK_MS, WAKE_RECHECKS  # noqa: F401
from ._slots import MAX_ERROR_TEXT  # noqa: F401

__all__ = ["Worker", "Event", "WorkerStats", "Handler"]

PENDING_PAGE = 1000
MAX_CONCURRENCY = 256


@dataclass
class WorkerStats:
    """Counters of a Worker since it started."""

    connects: int = 0        # welcomes from a2-consumer
    disconnects: int = 0     # connections lost after a welcome
    wakes: int = 0           # wake and log messages
    resyncs: int = 0         # pages through the pending sessions (connect, resync)
    sweeps: int = 0          # degraded sweeps
    runs: int = 0            # session runs by the slots
    together_runs: int = 0   # of those, made with other sessions: one claim call for all
    claimed: int = 0         # heads claimed
    claimed_next: int = 0    # of those, by the completion of their lane's previous head
    completed: int = 0
    settled_together: int = 0  # heads completed or failed with others in one call
    failed: int = 0          # failed attempts that will be retried
    dead_lettered: int = 0
    superseded: int = 0      # completions or failures of attempts that lost their head
    renewals: int = 0        # leases renewed
    leases_lost: int = 0     # leases a renewal found superseded while the handler ran
    store_errors: int = 0    # runs that ended on a store error


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

    The outcomes of a claim's handlers that end within ``settle_hold_ms``
    (5) of the first one waiting are completed or failed together, in one
    call and one commit (500 at most); after a handler that took that long,
    what waits is settled before the next handler runs.

    On stop the worker claims nothing more, lets every running handler finish
    (heads already claimed in the same claim too) and completes or fails it.
    """

    def __init__(self, db: str, consumers: Union[store.Consumer, Sequence[store.Consumer]],
                 handler: Handler, *, connect: Union[str, Sequence[str], None] = None,
                 token: Optional[str] = None, name: Optional[str] = None,
                 concurrency: int = 1, ttl_ms: int = 30000, max_failures: int = 5,
                 retry_after_ms: int = 1000, degraded_sweep_ms: int = 30000,
                 reconnect_min_ms: int = 100, reconnect_max_ms: int = 5000,
                 ping_ms: int = 15000, settle_hold_ms: int = 5,
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
                                ("ping_ms", ping_ms, 10, 86_400_000),
                                ("settle_hold_ms", settle_hold_ms, 0, 60_000)):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{what} must be an integer in {lo}..{hi}, not {v!r}")
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
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
        self.settle_hold_ms = settle_hold_ms
        self._on_message = on_message
        self._log = logger or logging.getLogger("a2.worker")
        self.holders = [f"{self.name}/{i + 1}" for i in range(concurrency)]
        # The connection to a2-consumer (the run() thread only).
        specs = [connect] if isinstance(connect, str) else list(connect or [])
        self._link = Link(self, specs, token)

        # The session table, shared with the slots.
        self._sessions = SessionTable()

        self._stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._stop_requested = False
        self._started = False
        self._started_lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._finished = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._slots: List[Slot] = []
        self._keeper: Optional[LeaseKeeper] = None
        self._main_conn: Optional[psycopg.Connection[Any]] = None

        # The degraded sweep and the resyncs to retry (the run() thread only).
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
        with self._started_lock:
            if self._started:
                raise RuntimeError("a Worker runs once")
            self._started = True
        try:
            self._main_conn = self._connect_store()
            self._keeper = LeaseKeeper(self)
            self._keeper.start()
            for i, holder in enumerate(self.holders):
                slot = Slot(self, self._keeper, i + 1, holder)
                self._slots.append(slot)
                slot.thread.start()
            self._log.info("serving %s with %d slot%s, ttl %d ms, %s", ", ".join(self._names),
                           self.concurrency, "" if self.concurrency == 1 else "s", self.ttl_ms,
                           self._link.address or "no a2-consumer (degraded sweep only)")
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
        return self._link.connected.wait(timeout)

    @property
    def connected(self) -> bool:
        return self._link.connected.is_set()

    @property
    def last_error(self) -> str:
        """Why the connection to a2-consumer went down last ("" when up)."""
        return self._link.last_error

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
        running = self._sessions.stop()
        if running:
            self._log.info("stopping: letting %d running session%s finish", running,
                           "" if running == 1 else "s")
        for slot in self._slots:
            slot.thread.join()
        if self._keeper is not None:
            self._keeper.stop()
        self._link.close()
        close(self._main_conn)
        self._main_conn = None
        st = self.stats
        self._log.info("stopped after %d handler runs",
                       st.completed + st.failed + st.dead_lettered)

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
                                          now_ms=real_ms())
            self._sessions.schedule_all(page, wake_log)
            total += len(page)
            if len(page) < PENDING_PAGE:
                return total
            after = page[-1]

    def _store_failed(self, exc: BaseException) -> None:
        if is_broken(self._main_conn, exc):
            close(self._main_conn)
            self._main_conn = None

    def _resync(self, names: List[str]) -> None:
        self._count(resyncs=1)
        try:
            total = self._page_pending(names, False)
        except (psycopg.Error, errors.Error) as exc:
            self._store_failed(exc)
            self._resync_names.update(names)
            self._resync_at = mono_ms() + STORE_RETRY_MS
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
        if self._link.address is None:
            self._log.info("swept %d pending session%s, next sweep in %d ms", total, plural,
                           self.degraded_sweep_ms)
        else:
            self._log.warning("degraded: a2-consumer unreachable (%s); swept %d pending "
                              "session%s, next sweep in %d ms", self._link.last_error,
                              total, plural, self.degraded_sweep_ms)

    # ── the run thread's loop and the wake-ups ───────────────────────────

    def _welcomed(self) -> None:
        """a2-consumer welcomed the worker: no degraded sweep, a resync."""
        self._next_sweep_at = 0
        # Wake-ups may have been missed while away: resync every consumer.
        self._resync(list(self._names))

    def _link_down(self, now: int) -> None:
        """The connection went down: arms the degraded sweep."""
        if not self._next_sweep_at:
            # Never connected: sweep now; after an outage the reconnect's
            # resync covers the gap, so the first sweep waits one interval.
            connects = self.stats.connects
            self._next_sweep_at = now if connects == 0 else now + self.degraded_sweep_ms

    def _on_frame(self, msg: Dict[str, Any]) -> None:
        """A wake-up from a2-consumer: wake, log, resync or cleared."""
        t = msg["t"]
        if t in ("wake", "log"):
            if msg["consumer"] not in self._names:
                return
            self._count(wakes=1)
            if t == "wake":
                self._log.debug("wake %s %s head %d", msg["session"], msg["cursor"], msg["head"])
            else:
                self._log.debug("log %s #%d %s", msg["session"], msg["idx"], msg["type"])
            # a log wake-up's event (an int: wire.py checks) is where a new
            # log cursor starts
            self._sessions.schedule(msg["session"], t == "log", True, msg.get("xid") or 0,
                                    max(msg["idx"], 0) if t == "log" else 0)
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
                self._sessions.schedule_all(sessions, consumer in self._log_names)
        elif t == "cleared":
            self._log.debug("cleared %s at #%d", msg["session"], msg["clear_index"])

    def _timers_step(self, now: int) -> None:
        """Connects, times out, pings and sweeps when due."""
        self._link.step(now)
        if not self._link.ready and self._next_sweep_at and now >= self._next_sweep_at:
            self._next_sweep_at = now + self.degraded_sweep_ms
            self._sweep()
        if self._resync_names and now >= self._resync_at:
            names = sorted(self._resync_names)
            self._resync_names.clear()
            self._resync(names)

    def _timeout(self, now: int, timer_ms: Optional[int]) -> int:
        deadlines = self._link.deadlines()
        if not self._link.ready and self._next_sweep_at:
            deadlines.append(self._next_sweep_at)
        if self._resync_names:
            deadlines.append(self._resync_at)
        if timer_ms is not None:
            deadlines.append(now + timer_ms)
        if not deadlines:
            return -1
        return max(0, min(min(deadlines) - now, 86_400_000))

    def _loop(self) -> None:
        if self._link.address is None:
            self._next_sweep_at = mono_ms()
        while not self._stop_requested:
            self._timers_step(mono_ms())
            timer_ms = self._sessions.fire_timers()
            if self._stop_requested:
                break
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            sock = self._link.sock
            if sock is not None:
                poller.register(sock, self._link.poll_events())
            ready = poller.poll(self._timeout(mono_ms(), timer_ms))
            for fd, revents in ready:
                if fd == self._wake_r.fileno():
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                elif sock is not None and sock is self._link.sock:
                    self._link.on_socket(revents)
