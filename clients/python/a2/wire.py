"""Wire protocol v1 between a2-consumer and workers (docs/protocol.md).

Each direction is a stream of msgpack maps with string keys, back to back.
This module encodes the worker's frames, splits and checks the consumer's,
and parses the ``unix:PATH`` / ``tcp:HOST:PORT`` addresses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import msgpack

__all__ = [
    "VERSION",
    "MAX_WORKER_FRAME",
    "MAX_CONSUMER_FRAME",
    "MAX_STRING",
    "MAX_ARRAY",
    "ProtocolError",
    "Address",
    "parse_address",
    "encode_hello",
    "encode_subscribe",
    "encode_presence",
    "encode_ping",
    "FrameReader",
]

VERSION = 1
MAX_WORKER_FRAME = 64 * 1024
MAX_CONSUMER_FRAME = 1024 * 1024
MAX_STRING = 4096
MAX_ARRAY = 4096


class ProtocolError(Exception):
    """A frame that breaks the protocol (either direction)."""


@dataclass(frozen=True)
class Address:
    """Where a2-consumer listens: a Unix socket ``path``, or ``host`` and ``port``."""

    spec: str
    path: Optional[str] = None
    host: Optional[str] = None
    port: Optional[int] = None

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    def __str__(self) -> str:
        return self.spec


def parse_address(spec: str) -> Address:
    """``unix:PATH``, ``tcp:HOST:PORT`` or ``tcp:[IPV6]:PORT``."""
    if spec.startswith("unix:"):
        path = spec[5:]
        if not path or len(path.encode()) >= 108:
            raise ValueError(f"bad socket path in {spec!r}")
        return Address(spec, path=path)
    if spec.startswith("tcp:"):
        hostport = spec[4:]
        host, sep, port = hostport.rpartition(":")
        if not sep or not host or not port:
            raise ValueError(f"bad address {spec!r} (tcp:HOST:PORT)")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"bad port in {spec!r}")
        return Address(spec, host=host, port=int(port))
    raise ValueError(f"bad address {spec!r} (unix:PATH or tcp:HOST:PORT)")


# ── the worker's frames ───────────────────────────────────────────────────

def _check_str(what: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{what} must be a non-empty string")
    if "\0" in v:
        raise ValueError(f"{what} must not hold a NUL byte")
    if len(v.encode()) > MAX_STRING:
        raise ValueError(f"{what} is over {MAX_STRING} bytes")
    return v


def _frame(msg: Dict[str, Any]) -> bytes:
    data = msgpack.packb(msg, use_bin_type=True)
    if len(data) > MAX_WORKER_FRAME:
        raise ValueError(f"a {msg['t']} frame of {len(data)} bytes is over {MAX_WORKER_FRAME}")
    return data


def encode_hello(name: str, token: Optional[str] = None) -> bytes:
    msg: Dict[str, Any] = {"t": "hello", "v": VERSION,
                           "name": _check_str("the worker's name", name)}
    if token is not None:
        msg["token"] = _check_str("the token", token)
    return _frame(msg)


#: ``log_types`` of :func:`encode_subscribe` for a consumer that is no log consumer.
NOT_LOG: Any = object()


def encode_subscribe(consumer: str, log_types: Any = NOT_LOG) -> bytes:
    """A ``subscribe``; ``log_types`` None for a log consumer of every type,
    a list of types for a log consumer of those, absent for a lane consumer."""
    msg: Dict[str, Any] = {"t": "subscribe", "consumer": _check_str("a consumer", consumer)}
    if log_types is not NOT_LOG:
        if log_types is None:
            msg["log_types"] = None
        else:
            types = [_check_str("a log type", t) for t in log_types]
            if not types or len(types) > MAX_ARRAY:
                raise ValueError(f"log types must be 1 to {MAX_ARRAY} names, "
                                 "or None for every type")
            msg["log_types"] = types
    return _frame(msg)


def encode_presence(ns: str) -> bytes:
    return _frame({"t": "presence", "ns": _check_str("a presence namespace", ns)})


def encode_ping(ping_id: int) -> bytes:
    return _frame({"t": "ping", "id": ping_id})


# ── the consumer's frames ─────────────────────────────────────────────────

def _pairs(pairs: List[Tuple[Any, Any]]) -> Dict[Any, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ProtocolError("a map gives a key twice")
    return d


_STR, _INT, _UINT, _STRS_OR_NIL, _MAP = "str", "int", "uint", "strs", "map"

# The keys each message needs, and their types; other keys are ignored.
_SHAPES: Dict[str, Sequence[Tuple[str, str]]] = {
    "welcome": (("v", _UINT), ("lsn", _UINT)),
    "wake": (("consumer", _STR), ("session", _STR), ("cursor", _STR), ("head", _INT),
             ("lsn", _UINT)),
    "log": (("consumer", _STR), ("session", _STR), ("idx", _INT), ("type", _STR),
            ("lsn", _UINT)),
    "cleared": (("session", _STR), ("clear_index", _INT), ("lsn", _UINT)),
    "resync": (("consumer", _STR), ("sessions", _STRS_OR_NIL)),
    "presence": (("ns", _STR), ("participant", _STR), ("fields", _MAP)),
    "pong": (("id", _UINT),),
    "error": (("code", _STR), ("message", _STR)),
}


def _typed(kind: str, v: Any) -> bool:
    if kind == _STR:
        return isinstance(v, str)
    if kind in (_INT, _UINT):
        return isinstance(v, int) and not isinstance(v, bool) and (kind == _INT or v >= 0)
    if kind == _STRS_OR_NIL:
        return v is None or (isinstance(v, list) and all(isinstance(s, str) for s in v))
    return isinstance(v, dict)


def check_message(msg: Any) -> Dict[str, Any]:
    """The message if it has the keys and types its ``t`` needs; a ``t``
    this version does not know passes as it is."""
    if not isinstance(msg, dict):
        raise ProtocolError(f"a frame is a map, not {type(msg).__name__}")
    t = msg.get("t")
    if not isinstance(t, str):
        raise ProtocolError("a frame has no string 't'")
    for key, kind in _SHAPES.get(t, ()):
        if key not in msg or not _typed(kind, msg[key]):
            raise ProtocolError(f"a {t} frame needs {key!r} of type {kind}")
    if t == "presence" and not _typed(_UINT, msg.setdefault("lsn", 0)):
        raise ProtocolError("a presence frame's 'lsn' must be an unsigned integer")
    # xid: the commit's transaction, absent from a timer's wake-up
    if t in ("wake", "log") and not _typed(_UINT, msg.setdefault("xid", 0)):
        raise ProtocolError(f"a {t} frame's 'xid' must be an unsigned integer")
    return msg


class FrameReader:
    """Splits the byte stream from a2-consumer into checked messages."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, object_pairs_hook=_pairs,
                                          max_buffer_size=2 * MAX_CONSUMER_FRAME)
        self._pos = 0

    def feed(self, data: bytes) -> List[Dict[str, Any]]:
        """The messages ``data`` completes (a partial frame waits for more)."""
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise ProtocolError(f"a frame over {MAX_CONSUMER_FRAME} bytes") from None
        out = []
        while True:
            try:
                msg = next(self._unpacker)
            except StopIteration:
                break
            except ProtocolError:
                raise
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                raise ProtocolError(f"malformed msgpack: {exc}") from None
            end = self._unpacker.tell()
            if end - self._pos > MAX_CONSUMER_FRAME:
                raise ProtocolError(f"a frame of {end - self._pos} bytes is over "
                                    f"{MAX_CONSUMER_FRAME}")
            self._pos = end
            out.append(check_message(msg))
        return out
