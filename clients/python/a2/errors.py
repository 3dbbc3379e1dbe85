"""The store's errors: one exception class per SQLSTATE of class A2.

Every a2 SQL function raises its errors as SQLSTATE ``A2001`` .. ``A2008``
with the spec's name first in the message (``INVALID_ARGUMENT: session must
not be empty``). The calls of :mod:`a2.store` turn those into the classes
below; every other database error (a broken connection, a deadlock, a
statement timeout) stays the :mod:`psycopg` exception it is.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

import psycopg

__all__ = [
    "Error",
    "InvalidArgument",
    "StoreUnavailable",
    "SchemaMissing",
    "PartialDuplicateBatch",
    "SupersededAttempt",
    "SessionCleared",
    "NoSuchEvent",
    "StoreFailed",
    "from_psycopg",
]


class Error(Exception):
    """An error the a2 store raised (SQLSTATE class ``A2``).

    ``sqlstate`` is the code (``"A2001"``), ``name`` the spec's name
    (``"INVALID_ARGUMENT"``) and ``message`` the server's message, which
    starts with that name. Like any SQL error it aborted the caller's
    transaction (use a savepoint to carry on after one).
    """

    sqlstate: str = ""
    name: str = ""

    def __init__(self, message: str, *, sqlstate: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate


class InvalidArgument(Error):
    """A2001: a bad argument, or a write outside READ COMMITTED."""

    sqlstate = "A2001"
    name = "INVALID_ARGUMENT"


class StoreUnavailable(Error):
    """A2002: an id below the clear marker is still held by a reclaim: retry later."""

    sqlstate = "A2002"
    name = "STORE_UNAVAILABLE"


class SchemaMissing(Error):
    """A2003: the schema is missing or of another version."""

    sqlstate = "A2003"
    name = "SCHEMA_MISSING"


class PartialDuplicateBatch(Error):
    """A2004: a batch mixes stored and fresh ids, or repeats one."""

    sqlstate = "A2004"
    name = "PARTIAL_DUPLICATE_BATCH"


class SupersededAttempt(Error):
    """A2005: a cause no longer holds its head."""

    sqlstate = "A2005"
    name = "SUPERSEDED_ATTEMPT"


class SessionCleared(Error):
    """A2006: an append's origin is at or below the session's clear marker."""

    sqlstate = "A2006"
    name = "SESSION_CLEARED"


class NoSuchEvent(Error):
    """A2007: a completion or failure names an index where no event is."""

    sqlstate = "A2007"
    name = "NO_SUCH_EVENT"


class StoreFailed(Error):
    """A2008 (or an A2 code this version does not know): anything else."""

    sqlstate = "A2008"
    name = "STORE_FAILED"


_BY_SQLSTATE: Dict[str, Type[Error]] = {
    cls.sqlstate: cls
    for cls in (
        InvalidArgument,
        StoreUnavailable,
        SchemaMissing,
        PartialDuplicateBatch,
        SupersededAttempt,
        SessionCleared,
        NoSuchEvent,
        StoreFailed,
    )
}


def from_psycopg(exc: psycopg.Error) -> Optional[Error]:
    """The a2 error a psycopg error carries, or None when it is not one."""
    code = getattr(exc, "sqlstate", None)
    if not code or not code.startswith("A2"):
        return None
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(exc)
    cls = _BY_SQLSTATE.get(code, StoreFailed)
    return cls(message, sqlstate=code)
