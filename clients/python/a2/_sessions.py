"""The Worker's session table: the sessions with work to do, shared between
the run thread (which schedules them on wake-ups, resyncs, sweeps and
timers) and the slot threads (which take one, work it and hand it back).

A session is worked by one slot at a time; a wake-up for a session being
worked makes it run once more afterwards. A slot that frees up while no
other waits for work takes as many of the ready sessions as its handlers
run in about 5 ms (32 at most) and runs them together. After a run the
table decides what follows: another run at once (named again meanwhile,
or one claim round of a run meant to go to the end), a timer (a store
error, a busy claim's hold, a recheck after a wake-up that found nothing)
or nothing.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, Iterable, List, Optional, Tuple

from ._clock import mono_ms, real_ms

STORE_RETRY_MS = 1000   # a session whose run hit a store error runs again after this
WAKE_RECHECKS = 3       # a woken run that claimed nothing looks again after
WAKE_RECHECK_MS = 20    # 20, 40 and 80 ms
MAX_TOGETHER = 32       # sessions a slot takes at once
TOGETHER_S = 0.005      # ... about this much handler time among them


def take_count(session_s: float) -> int:
    """How many ready sessions a slot takes when no other slot waits: those
    its handlers run in about TOGETHER_S, by the handler time a session of
    its last run (0: unknown)."""
    if session_s <= 0:
        return MAX_TOGETHER
    return max(1, min(MAX_TOGETHER, int(TOGETHER_S / session_s)))


def earliest(a: int, b: int) -> int:
    """The earlier of two event indexes (0: none)."""
    return b if a == 0 or (b != 0 and b < a) else a


@dataclass
class Job:
    session: str
    wake_log: bool = False   # bring log cursors up to date first
    queued: bool = False     # in the ready queue
    running: bool = False    # a slot works it
    again: bool = False      # woken while running: run once more
    at: int = 0              # timer (monotonic ms); 0: none
    hinted: bool = False     # a wake-up named work here
    rechecks: int = 0        # runs that found nothing after a wake-up
    xid: int = 0             # the latest wake-up's commit, for the next run to wait for
    log_from: int = 0        # the earliest index log wake-ups named (a new log cursor starts there)


@dataclass
class Ran:
    claimed: int = 0
    retry_at: int = 0
    waited: bool = False     # the run waited for its wake-up's commit
    error: Optional[str] = None
    partial: bool = False    # one claim round of a run meant to go to the end
    handler_s: float = 0.0   # time in its handlers


@dataclass
class Turn:
    """A session a slot took from the table, with what its run needs."""

    job: Job
    wake_log: bool
    woken: bool   # woken by a2-consumer, which announces every claimable head
    xid: int
    log_from: int = 0


class SessionTable:
    def __init__(self) -> None:
        self._mu = threading.Condition()
        self._jobs: Dict[str, Job] = {}
        self._ready: Deque[Job] = deque()
        self._timers: List[Tuple[int, int, Job]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._nrunning = 0
        self._idle = 0          # slots waiting in take()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> int:
        """Takes no more sessions and wakes the waiting slots; the number of
        sessions being worked."""
        with self._mu:
            self._stopping = True
            self._mu.notify_all()
            return self._nrunning

    def _schedule_locked(self, session: str, wake_log: bool, hinted: bool,
                         xid: int = 0, log_from: int = 0) -> None:
        if self._stopping:
            return
        job = self._jobs.get(session)
        if job is None:
            job = self._jobs[session] = Job(session)
        job.wake_log |= wake_log
        if xid:
            job.xid = xid
        job.log_from = earliest(job.log_from, log_from)
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

    def schedule(self, session: str, wake_log: bool, hinted: bool, xid: int = 0,
                 log_from: int = 0) -> None:
        with self._mu:
            self._schedule_locked(session, wake_log, hinted, xid, log_from)

    def schedule_all(self, sessions: Iterable[str], wake_log: bool) -> None:
        """Schedules sessions found pending (not named by a wake-up)."""
        with self._mu:
            for session in sessions:
                self._schedule_locked(session, wake_log, False)

    def _set_timer_locked(self, job: Job, delay_ms: int) -> None:
        job.at = mono_ms() + delay_ms
        heapq.heappush(self._timers, (job.at, next(self._seq), job))

    def fire_timers(self) -> Optional[int]:
        """Queues the sessions whose timer is due; ms to the next timer."""
        now = mono_ms()
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

    def take(self, more: int = 1) -> Optional[List[Turn]]:
        """The next ready session for a slot, waiting for one, and up to
        ``more`` in all while no other slot waits for work; None once the
        table stops."""
        with self._mu:
            while not self._stopping and not self._ready:
                self._idle += 1
                self._mu.wait()
                self._idle -= 1
            if self._stopping:
                return None
            n = more if self._idle == 0 else 1
            turns = []
            while self._ready and len(turns) < n:
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
                log_from = job.log_from
                job.log_from = 0
                self._nrunning += 1
                turns.append(Turn(job, wake_log, woken, xid, log_from))
            return turns

    def done(self, turn: Turn, ran: Ran) -> None:
        """A slot finished its run of turn's session."""
        with self._mu:
            self._nrunning -= 1
            self._after_run_locked(turn.job, ran, turn.wake_log, turn.log_from)

    def _after_run_locked(self, job: Job, ran: Ran, wake_log: bool, log_from: int) -> None:
        """What to do with a session after a run. A wake-up can outrun the
        visibility of its commit to new snapshots: a run given the wake-up's
        xid had the store wait for that commit; one without (from a consumer
        that sends none) that claimed nothing looks again after 20, 40 and
        80 ms. A log wake-up (and the index it named) is kept for every run
        scheduled after it until one ends with nothing left to do (starting a
        log cursor's run is idempotent)."""
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
            self._set_timer_locked(job, max(ran.retry_at - real_ms(), 0) + 5)
        elif ran.partial and ran.claimed > 0:
            job.queued = True
            self._ready.append(job)
            self._mu.notify()
        elif (job.hinted and ran.claimed == 0 and not ran.waited
              and job.rechecks < WAKE_RECHECKS):
            self._set_timer_locked(job, WAKE_RECHECK_MS << job.rechecks)
            job.rechecks += 1
        else:
            del self._jobs[job.session]
            return
        job.wake_log |= wake_log
        if wake_log:
            job.log_from = earliest(job.log_from, log_from)
