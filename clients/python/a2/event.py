"""a2.Event: a claimed event as a Worker's handler sees it, and the Handler
type (what a handler takes and returns)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Mapping, Optional

__all__ = ["Event", "Handler"]


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
