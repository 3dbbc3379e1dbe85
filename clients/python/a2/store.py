"""The store's operations: one call of one a2 SQL function each.

Every function takes a psycopg 3 connection and runs in the caller's
transaction: it neither opens nor commits one. On a connection in
autocommit mode a call is its own transaction; otherwise it commits or rolls
back with the rest of the caller's work (``with conn.transaction(): ...``).
Arguments go by name; an optional argument left at ``None`` is not passed,
so the SQL function's default applies. Results are the functions' JSON
results as Python objects (docs/sql.md describes every key), and the rows of
the table functions as dicts. SQLSTATEs ``A2xxx`` are raised as the classes
of :mod:`a2.errors`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import errors

__all__ = [
    "LogConsumer",
    "Consumer",
    "consumers_json",
    "append",
    "read",
    "cursors",
    "dead_letters",
    "wake_log",
    "claim",
    "renew",
    "complete",
    "fail",
    "redrive",
    "clear",
    "reclaim",
    "pending_sessions",
    "write_state",
    "read_state",
    "presence_write",
    "presence_read",
    "presence_reap",
    "batch",
]


@dataclass(frozen=True)
class LogConsumer:
    """A log consumer: its cursor ``lane:<lane>`` follows the session's
    events of ``types`` (None: every type); ``backfill`` starts a new cursor
    at the beginning of the log instead of its head."""

    name: str
    types: Optional[Sequence[str]] = None
    lane: str = "log"
    backfill: bool = False

    def as_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "log": {
                "lane": self.lane,
                "types": None if self.types is None else list(self.types),
                "backfill": self.backfill,
            },
        }


#: A served consumer: a name, a :class:`LogConsumer`, or its JSON form.
Consumer = Union[str, LogConsumer, Mapping[str, Any]]


def consumers_json(consumers: Optional[Iterable[Consumer]]) -> Optional[List[Any]]:
    """The ``consumers`` argument of the SQL functions (None: every consumer)."""
    if consumers is None:
        return None
    if isinstance(consumers, (str, LogConsumer)):
        raise TypeError("consumers must be a list of consumers, not one consumer")
    out: List[Any] = []
    for c in consumers:
        if isinstance(c, LogConsumer):
            out.append(c.as_json())
        elif isinstance(c, (str, Mapping)):
            out.append(c if isinstance(c, str) else dict(c))
        else:
            raise TypeError("a consumer is a name, a LogConsumer or a dict, "
                            f"not {type(c).__name__}")
    return out


# ── the calls ─────────────────────────────────────────────────────────────

_Arg = Tuple[str, Any, str]  # (name, value, SQL type)


def _json(v: Any) -> Optional[Jsonb]:
    return None if v is None else Jsonb(v)


def _sql(fn: str, args: Sequence[_Arg], rows: bool) -> Tuple[str, List[Any]]:
    named = ", ".join(f"{name} => %s::{sqltype}" for name, _, sqltype in args)
    head = "select * from" if rows else "select"
    return f"{head} {fn}({named})", [v for _, v, _ in args]


def _args(required: Sequence[_Arg], optional: Sequence[_Arg]) -> List[_Arg]:
    """Required arguments (passed even when None: SQL null) and the optional
    ones that were given."""
    return list(required) + [a for a in optional if a[1] is not None]


def _execute(conn: psycopg.Connection[Any], sql: str, params: List[Any], rows: bool) -> Any:
    try:
        if rows:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        with conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
            return row[0] if row else None
    except psycopg.Error as exc:
        mapped = errors.from_psycopg(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _call(conn: psycopg.Connection[Any], fn: str, required: Sequence[_Arg],
          optional: Sequence[_Arg] = (), rows: bool = False) -> Any:
    sql, params = _sql(fn, _args(required, optional), rows)
    return _execute(conn, sql, params, rows)


def append(conn: psycopg.Connection[Any], session: str, events: Sequence[Mapping[str, Any]], *,
           consumers: Optional[Iterable[Consumer]] = None, origin: Optional[int] = None,
           now_ms: Optional[int] = None, text_payloads: bool = False) -> Dict[str, Any]:
    """Appends ``events`` to the session's log (``a2_append``).

    An event is a dict: ``type`` (required), ``payload``, ``id``, ``cause``,
    ``targets`` (``[{"consumer", "lane", "not_before"}]``), ``not_before``
    (epoch ms: its heads are not claimable, nor woken, before then; a
    target's own ``not_before`` is for that target). Returns
    ``{"outcome": "appended" | "replayed", "events", "has_pending"}``.
    The wake-up follows the caller's commit; a rollback leaves nothing.
    """
    return _call(conn, "a2_append",
                 [("session", session, "text"), ("events", Jsonb(list(events)), "jsonb")],
                 [("consumers", _json(consumers_json(consumers)), "jsonb"),
                  ("origin", origin, "bigint"), ("now_ms", now_ms, "bigint"),
                  ("text_payloads", text_payloads or None, "boolean")])


def read(conn: psycopg.Connection[Any], session: str, *, after: Optional[int] = None,
         max_events: Optional[int] = None,
         types: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """The session's events after index ``after`` (``a2_read``): dicts with
    ``index``, ``type``, ``payload``, ``id``, ``created_at``, ``cause``."""
    return _call(conn, "a2_read", [("session", session, "text")],
                 [("after", after, "bigint"), ("max_events", max_events, "bigint"),
                  ("types", _json(None if types is None else list(types)), "jsonb")],
                 rows=True)


def cursors(conn: psycopg.Connection[Any], session: str) -> List[Dict[str, Any]]:
    """The session's current cursor runs (``a2_cursors``)."""
    return _call(conn, "a2_cursors", [("session", session, "text")], rows=True)


def dead_letters(conn: psycopg.Connection[Any], session: str) -> List[Dict[str, Any]]:
    """The session's dead-lettered heads (``a2_dead_letters``)."""
    return _call(conn, "a2_dead_letters", [("session", session, "text")], rows=True)


def wake_log(conn: psycopg.Connection[Any], session: str, consumer: str, lane: str, *,
             types: Optional[Sequence[str]] = None,
             backfill: Optional[bool] = None, after_xid: Optional[int] = None,
             wait_ms: Optional[int] = None, log_from: Optional[int] = None) -> Dict[str, Any]:
    """Brings a log consumer's cursor up to date (``a2_wake_log``):
    ``{"cursor", "head"}``. ``after_xid``: the log message's ``xid``, whose
    commit is waited for first (at most ``wait_ms``, default 1000).
    ``log_from``: the message's ``idx`` (the earliest of several), where a
    new cursor starts (without ``backfill``; else after the head)."""
    return _call(conn, "a2_wake_log",
                 [("session", session, "text"), ("consumer", consumer, "text"),
                  ("lane", lane, "text")],
                 [("types", _json(None if types is None else list(types)), "jsonb"),
                  ("backfill", backfill, "boolean"), ("after_xid", after_xid, "bigint"),
                  ("wait_ms", wait_ms, "bigint"), ("log_from", log_from, "bigint")])


def claim(conn: psycopg.Connection[Any], session: str, holder: str, *,
          ttl_ms: Optional[int] = None, expires_at: Optional[int] = None,
          consumers: Optional[Iterable[Consumer]] = None,
          exclude: Optional[Sequence[Mapping[str, Any]]] = None,
          max_failures: Optional[int] = None, through: Optional[int] = None,
          now_ms: Optional[int] = None, text_payloads: bool = False,
          after_xid: Optional[int] = None, wait_ms: Optional[int] = None,
          wake_logs: bool = False,
          lanes: Optional[Sequence[Mapping[str, Any]]] = None,
          log_from: Optional[int] = None) -> Dict[str, Any]:
    """Claims the session's eligible heads for ``holder`` (``a2_claim``):
    ``{"outcome": "claimed" | "busy" | "settled", "heads", "retry_at",
    "dead_lettered", ...}``. ``after_xid``: the wake-up's ``xid``; the claim
    first waits (at most ``wait_ms``, default 1000) for that commit to be
    visible, and answers ``busy`` with ``"waiting_for"`` when it still is
    not: claim again with the same ``after_xid``. ``wake_logs``: first bring
    the cursors of the log consumers among ``consumers`` up to date, as
    :func:`wake_log` does (``log_from`` as there), in the claim's call and
    commit. ``lanes``: only the heads of these lanes (``[{"consumer",
    "lane"}]``)."""
    return _call(conn, "a2_claim",
                 [("session", session, "text"), ("holder", holder, "text")],
                 [("ttl_ms", ttl_ms, "bigint"), ("expires_at", expires_at, "bigint"),
                  ("consumers", _json(consumers_json(consumers)), "jsonb"),
                  ("exclude", _json(None if exclude is None else list(exclude)), "jsonb"),
                  ("max_failures", max_failures, "integer"), ("through", through, "bigint"),
                  ("now_ms", now_ms, "bigint"),
                  ("text_payloads", text_payloads or None, "boolean"),
                  ("after_xid", after_xid, "bigint"), ("wait_ms", wait_ms, "bigint"),
                  ("wake_logs", wake_logs or None, "boolean"),
                  ("lanes", _json(None if lanes is None else list(lanes)), "jsonb"),
                  ("log_from", log_from, "bigint")])


def renew(conn: psycopg.Connection[Any], session: str, holder: str,
          claims: Sequence[Mapping[str, Any]], *, ttl_ms: Optional[int] = None,
          expires_at: Optional[int] = None, now_ms: Optional[int] = None) -> Dict[str, Any]:
    """Extends ``holder``'s live claims ``[{"consumer", "lane", "index",
    "attempt"}]`` (``a2_renew``): ``{"renewed", "superseded"}``."""
    return _call(conn, "a2_renew",
                 [("session", session, "text"), ("holder", holder, "text"),
                  ("claims", Jsonb(list(claims)), "jsonb")],
                 [("ttl_ms", ttl_ms, "bigint"), ("expires_at", expires_at, "bigint"),
                  ("now_ms", now_ms, "bigint")])


def complete(conn: psycopg.Connection[Any], session: str, consumer: str, lane: Optional[str],
             index: int, attempt: int, events: Optional[Sequence[Mapping[str, Any]]] = None,
             *, consumers: Optional[Iterable[Consumer]] = None, now_ms: Optional[int] = None,
             text_payloads: bool = False) -> Dict[str, Any]:
    """Completes an attempt, appending its returned ``events`` (each with an
    ``id``) (``a2_complete``): ``{"outcome": "completed" | "superseded", ...}``.
    ``lane`` is None for a concurrent cursor."""
    return _call(conn, "a2_complete",
                 [("session", session, "text"), ("consumer", consumer, "text"),
                  ("lane", lane, "text"), ("index", index, "bigint"),
                  ("attempt", attempt, "integer")],
                 [("events", _json(None if events is None else list(events)), "jsonb"),
                  ("consumers", _json(consumers_json(consumers)), "jsonb"),
                  ("now_ms", now_ms, "bigint"),
                  ("text_payloads", text_payloads or None, "boolean")])


def complete_claim_next(conn: psycopg.Connection[Any], session: str, consumer: str,
                        lane: str, index: int, attempt: int,
                        events: Optional[Sequence[Mapping[str, Any]]] = None, *,
                        holder: str, ttl_ms: int,
                        consumers: Optional[Iterable[Consumer]] = None,
                        max_failures: Optional[int] = None,
                        now_ms: Optional[int] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Completes a lane's head as :func:`complete` does and claims the
    lane's next head for ``holder`` in the same call and commit (one
    ``a2_batch``): a FIFO lane worked through with one commit a head.
    Returns (the completion's result, the claim's result)."""
    op: Dict[str, Any] = {"op": "complete", "session": session, "consumer": consumer,
                          "lane": lane, "index": index, "attempt": attempt,
                          "events": list(events or []),
                          "consumers": consumers_json(consumers), "now_ms": now_ms}
    nxt = claim_op(session, holder, ttl_ms=ttl_ms, consumers=consumers,
                   max_failures=max_failures, now_ms=now_ms,
                   lanes=[{"consumer": consumer, "lane": lane}])
    done, claimed = batch(conn, [op, nxt])
    return done, claimed


def claim_op(session: str, holder: str, *, ttl_ms: Optional[int] = None,
             consumers: Optional[Iterable[Consumer]] = None,
             max_failures: Optional[int] = None, now_ms: Optional[int] = None,
             after_xid: Optional[int] = None, wake_logs: bool = False,
             lanes: Optional[Sequence[Mapping[str, Any]]] = None,
             log_from: Optional[int] = None) -> Dict[str, Any]:
    """A claim as a :func:`batch` operation (the arguments of :func:`claim`):
    several sessions' claims in one call, or after a lane's completion the
    claim of that lane's next head (``lanes``), as
    :func:`complete_claim_next` does."""
    op: Dict[str, Any] = {"op": "claim", "session": session, "holder": holder,
                          "ttl_ms": ttl_ms, "consumers": consumers_json(consumers),
                          "max_failures": max_failures, "now_ms": now_ms}
    if after_xid is not None:
        op["after_xid"] = after_xid
    if wake_logs:
        op["wake_logs"] = True
    if log_from is not None:
        op["log_from"] = log_from
    if lanes is not None:
        op["lanes"] = list(lanes)
    return op


def fail(conn: psycopg.Connection[Any], session: str, consumer: str, lane: Optional[str],
         index: int, attempt: int, error: Optional[str] = None, *,
         max_failures: Optional[int] = None, retry_after_ms: Optional[int] = None,
         now_ms: Optional[int] = None) -> Dict[str, Any]:
    """Records a failed attempt (``a2_fail``): ``{"outcome": "failed" |
    "dead_lettered" | "superseded", "failure_count"}``. The
    ``max_failures``-th failure (SQL default 1) dead-letters the head."""
    return _call(conn, "a2_fail",
                 [("session", session, "text"), ("consumer", consumer, "text"),
                  ("lane", lane, "text"), ("index", index, "bigint"),
                  ("attempt", attempt, "integer")],
                 [("error", error, "text"), ("max_failures", max_failures, "integer"),
                  ("retry_after_ms", retry_after_ms, "bigint"), ("now_ms", now_ms, "bigint")])


def redrive(conn: psycopg.Connection[Any], session: str, consumer: str, index: int, action: str,
            *, consumers: Optional[Iterable[Consumer]] = None) -> Dict[str, Any]:
    """Runs a dead letter again (``action="retry"``) or passes it
    (``"skip"``) (``a2_redrive``): ``{"redriven", "has_pending"}``."""
    return _call(conn, "a2_redrive",
                 [("session", session, "text"), ("consumer", consumer, "text"),
                  ("index", index, "bigint"), ("action", action, "text")],
                 [("consumers", _json(consumers_json(consumers)), "jsonb")])


def clear(conn: psycopg.Connection[Any], session: str, *, if_last: Optional[int] = None,
          cause: Optional[Mapping[str, Any]] = None, marker_id: Optional[str] = None,
          now_ms: Optional[int] = None) -> Dict[str, Any]:
    """Appends a clear marker (``a2_clear``): ``{"cleared", "index",
    "clear_index"}``."""
    return _call(conn, "a2_clear", [("session", session, "text")],
                 [("if_last", if_last, "bigint"),
                  ("cause", _json(None if cause is None else dict(cause)), "jsonb"),
                  ("marker_id", marker_id, "text"), ("now_ms", now_ms, "bigint")])


def reclaim(conn: psycopg.Connection[Any], session: str) -> Dict[str, Any]:
    """Deletes one batch below the clear marker (``a2_reclaim``):
    ``{"deleted", "done"}``; call it until ``done``."""
    return _call(conn, "a2_reclaim", [("session", session, "text")])


def pending_sessions(conn: psycopg.Connection[Any], consumers: Sequence[str], *,
                     after: Optional[str] = None, max_sessions: Optional[int] = None,
                     now_ms: Optional[int] = None) -> List[str]:
    """The sessions after ``after``, by id, where one of ``consumers`` has a
    head claimable now or held by a claim (``a2_pending_sessions``)."""
    if isinstance(consumers, str):
        raise TypeError("consumers must be a list of names, not one name")
    rows = _call(conn, "a2_pending_sessions", [("consumers", Jsonb(list(consumers)), "jsonb")],
                 [("after", after, "text"), ("max_sessions", max_sessions, "integer"),
                  ("now_ms", now_ms, "bigint")], rows=True)
    return [r["session"] for r in rows]


def write_state(conn: psycopg.Connection[Any], session: str, reducer: str,
                writes: Sequence[Mapping[str, Any]], *,
                now_ms: Optional[int] = None) -> Dict[str, Any]:
    """Writes reducer snapshots (``a2_write_state``)."""
    return _call(conn, "a2_write_state",
                 [("session", session, "text"), ("reducer", reducer, "text"),
                  ("writes", Jsonb(list(writes)), "jsonb")],
                 [("now_ms", now_ms, "bigint")])


def read_state(conn: psycopg.Connection[Any], session: str, reducer: str, *,
               at_index: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """The latest snapshot (or the newest at or below ``at_index``):
    ``{"up_to_index", "state", "written_at"}``, or None (``a2_read_state``)."""
    rows = _call(conn, "a2_read_state",
                 [("session", session, "text"), ("reducer", reducer, "text")],
                 [("at_index", at_index, "bigint")], rows=True)
    return rows[0] if rows else None


def presence_write(conn: psycopg.Connection[Any], ns: str, participant: str,
                   fields: Sequence[Mapping[str, Any]], ttl_ms: int, at: int, *,
                   seen: Optional[int] = None, now_ms: Optional[int] = None,
                   text_payloads: bool = False) -> Dict[str, Any]:
    """Writes presence fields ``[{"field", "value"}]`` (``a2_presence_write``)."""
    return _call(conn, "a2_presence_write",
                 [("ns", ns, "text"), ("participant", participant, "text"),
                  ("fields", Jsonb(list(fields)), "jsonb"), ("ttl_ms", ttl_ms, "bigint"),
                  ("at", at, "bigint")],
                 [("seen", seen, "bigint"), ("now_ms", now_ms, "bigint"),
                  ("text_payloads", text_payloads or None, "boolean")])


def presence_read(conn: psycopg.Connection[Any], ns: str, *, now_ms: Optional[int] = None,
                  text_payloads: bool = False) -> Dict[str, Any]:
    """A namespace's live presence registers (``a2_presence_read``):
    ``{"entries", "lsn"}``."""
    return _call(conn, "a2_presence_read", [("ns", ns, "text")],
                 [("now_ms", now_ms, "bigint"),
                  ("text_payloads", text_payloads or None, "boolean")])


def presence_reap(conn: psycopg.Connection[Any], ns: Optional[str] = None, *,
                  max_rows: Optional[int] = None,
                  now_ms: Optional[int] = None) -> Dict[str, Any]:
    """Deletes expired presence rows (``a2_presence_reap``): ``{"reaped"}``."""
    return _call(conn, "a2_presence_reap", [],
                 [("ns", ns, "text"), ("max_rows", max_rows, "integer"),
                  ("now_ms", now_ms, "bigint")])


def batch(conn: psycopg.Connection[Any], ops: Sequence[Mapping[str, Any]]) -> List[Any]:
    """Runs a list of operations ``[{"op": "append", <named arguments>}, ...]``
    all or nothing (``a2_batch``); one result per operation."""
    return _call(conn, "a2_batch", [("ops", Jsonb(list(ops)), "jsonb")])


def warm(conn: psycopg.Connection[Any]) -> Dict[str, Any]:
    """Readies the connection for its first operations (``a2_warm``): the
    server plans the functions a worker calls, in a cycle it rolls back.
    ``{"warmed": true}``, or ``{"warmed": false, "reason"}`` when the cycle
    stopped part way (a read-only standby). Call it in a transaction that is
    rolled back (``conn.transaction(force_rollback=True)``) and nothing
    commits."""
    return _call(conn, "a2_warm", [])
