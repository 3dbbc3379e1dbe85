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

    def __init_subclass__(cls, *, sqlstate: str, name: str, **kwargs: object) -> None:
        """Give a subclass its code and name, and file it under that code."""
        super().__init_subclass__(**kwargs)
        cls.sqlstate = sqlstate
        cls.name = name
        _BY_SQLSTATE[sqlstate] = cls


_BY_SQLSTATE: Dict[str, Type[Error]] = {}


class InvalidArgument(Error, sqlstate="A2001", name="INVALID_ARGUMENT"):
    """A2001: a bad argument, or a write outside READ COMMITTED."""


class StoreUnavailable(Error, sqlstate="A2002", name="STORE_UNAVAILABLE"):
    """A2002: an id below the clear marker is still held by a reclaim: retry later."""


class SchemaMissing(Error, sqlstate="A2003", name="SCHEMA_MISSING"):
    """A2003: the schema is missing or of another version."""


class PartialDuplicateBatch(Error, sqlstate="A2004", name="PARTIAL_DUPLICATE_BATCH"):
    """A2004: a batch mixes stored and fresh ids, or repeats one."""


class SupersededAttempt(Error, sqlstate="A2005", name="SUPERSEDED_ATTEMPT"):
    """A2005: a cause no longer holds its head."""


class SessionCleared(Error, sqlstate="A2006", name="SESSION_CLEARED"):
    """A2006: an append's origin is at or below the session's clear marker."""


class NoSuchEvent(Error, sqlstate="A2007", name="NO_SUCH_EVENT"):
    """A2007: a completion or failure names an index where no event is."""


class StoreFailed(Error, sqlstate="A2008", name="STORE_FAILED"):
    """A2008 (or an A2 code this version does not know): anything else."""


def from_psycopg(exc: psycopg.Error) -> Optional[Error]:
    """The a2 error a psycopg error carries, or None when it is not one."""
    code = getattr(exc, "sqlstate", None)
    if not code or not code.startswith("A2"):
        return None
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(exc)
    cls = _BY_SQLSTATE.get(code, StoreFailed)
    return cls(message, sqlstate=code)
