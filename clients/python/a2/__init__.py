"""a2 for Python: the store's operations on psycopg 3, and a worker.

Producer side: the functions of :mod:`a2.store` (re-exported here) call the
a2 SQL functions in the caller's own transaction::

    with conn.transaction():
        conn.execute("insert into orders (id) values (%s)", ("order-7",))
        a2.append(conn, "shop-1", [{"type": "order.placed", "id": "order-7",
                                    "targets": [{"consumer": "billing"}]}])

Worker side: :class:`a2.Worker` takes wake-ups from a2-consumer, claims,
runs a handler per event and completes or fails it.
"""
from .errors import (Error, InvalidArgument, NoSuchEvent, PartialDuplicateBatch, SchemaMissing,
                     SessionCleared, StoreFailed, StoreUnavailable, SupersededAttempt)
from .store import (Consumer, LogConsumer, append, batch, claim, clear, complete,
                    complete_claim_next, cursors, dead_letters, fail, pending_sessions, presence_reap, presence_read,
                    presence_write, read, read_state, reclaim, redrive, renew, wake_log,
                    warm, write_state)
from .worker import Event, Handler, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "Error", "InvalidArgument", "StoreUnavailable", "SchemaMissing", "PartialDuplicateBatch",
    "SupersededAttempt", "SessionCleared", "NoSuchEvent", "StoreFailed",
    "Consumer", "LogConsumer",
    "append", "read", "cursors", "dead_letters", "wake_log", "claim", "renew", "complete",
    "complete_claim_next", "fail", "redrive", "clear", "reclaim", "pending_sessions", "write_state", "read_state",
    "presence_write", "presence_read", "presence_reap", "batch", "warm",
    "Worker", "Event", "Handler", "WorkerStats",
]
