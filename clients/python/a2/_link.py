"""The Worker's connection to a2-consumer, driven by the run thread's poll
loop: dialing ``unix:`` and ``tcp:`` addresses without blocking, hello
(with the token on tcp:) and subscriptions, msgpack framing both ways,
the welcome, pings and pongs, an error frame's refusal (a standby's too),
and reconnects with backoff through the list of addresses.

The Link handles the frames about the connection itself and reaches the
Worker it serves for its settings, counters and log: every frame goes to
the Worker's ``on_message`` first, and the wake-ups (``wake``, ``log``,
``resync``, ``cleared``) go on to its ``_on_frame``; ``_welcomed`` runs once
a2-consumer welcomed the worker, ``_link_down`` each time the connection
went down.
"""
from __future__ import annotations

import errno
import os
import random
import select
import socket
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from . import wire
from ._clock import mono_ms
from .store import LogConsumer

if TYPE_CHECKING:
    from .worker import Worker

HANDSHAKE_TIMEOUT_MS = 5000
READ_CHUNK = 65536

_IDLE, _CONNECTING, _HANDSHAKE, _READY = range(4)


class Link:
    """The connection to a2-consumer (the run thread only)."""

    def __init__(self, worker: "Worker", specs: Sequence[str], token: Optional[str]) -> None:
        self._w = worker
        self._addresses = [wire.parse_address(a) for a in specs if a]
        if any(not a.is_unix for a in self._addresses) and not token:
            raise ValueError("a tcp: connection needs a token")
        # The address connected to (or tried next): the first, then on each
        # failure or standby's refusal the next; a full round that found no
        # active a2-consumer backs off.
        self._addr_i = 0
        self._round_failures = 0
        self.address = self._addresses[0] if self._addresses else None
        # hello (a token on tcp: only), then the subscriptions
        self._hello_unix = wire.encode_hello(worker.name, None)
        self._hello_tcp = wire.encode_hello(worker.name, token) if token else self._hello_unix
        subscriptions = b""
        for c in worker.consumers:
            if isinstance(c, LogConsumer):
                types = None if c.types is None else list(c.types)
                subscriptions += wire.encode_subscribe(c.name, types)
            else:
                subscriptions += wire.encode_subscribe(c)
        self._subscriptions = subscriptions

        #: Set while a2-consumer has welcomed the worker.
        self.connected = threading.Event()
        #: Why the connection went down last ("" when up).
        self.last_error = ""
        self._state = _IDLE
        self.sock: Optional[socket.socket] = None
        self._reader: Optional[wire.FrameReader] = None
        self._out = bytearray()
        self._next_connect_at = 0
        self._backoff_ms = worker.reconnect_min_ms
        self._handshake_deadline = 0
        self._next_ping_at = 0
        self._pong_deadline = 0
        self._ping_id = 0
        self._failing = 0

    @property
    def ready(self) -> bool:
        return self._state == _READY

    def close(self) -> None:
        self._close_sock()
        self._state = _IDLE
        self.connected.clear()

    def _close_sock(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None
        self._reader = None
        self._out = bytearray()
        self._pong_deadline = 0

    def _went_down(self, why: str) -> None:
        """The connection is down: say so (once per outage), schedule a
        reconnect with backoff, let the Worker arm the degraded sweep."""
        was_up = self._state in (_HANDSHAKE, _READY)
        was_ready = self._state == _READY
        self._close_sock()
        self._state = _IDLE
        self.connected.clear()
        self.last_error = why
        now = mono_ms()
        self._round_failures += 1
        if len(self._addresses) > 1:
            self._addr_i = (self._addr_i + 1) % len(self._addresses)
            self.address = self._addresses[self._addr_i]
        if self._round_failures < len(self._addresses):
            delay = 0  # the next address at once
        else:
            self._round_failures = 0
            jitter = random.randint(0, self._backoff_ms // 4) if self._backoff_ms >= 4 else 0
            delay = self._backoff_ms + jitter
            self._backoff_ms = min(self._backoff_ms * 2, self._w.reconnect_max_ms)
        self._next_connect_at = now + delay
        first = self._failing == 0
        self._failing += 1
        if was_ready:
            self._w._count(disconnects=1)
        if first or was_up:
            self._w._log.warning("%s; reconnecting in %d ms", why, delay)
        self._w._link_down(now)

    def _start_connect(self) -> None:
        addr = self.address
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
        self.sock = sock
        self._state = _CONNECTING
        self._reader = wire.FrameReader()
        self._out = bytearray((self._hello_unix if addr.is_unix else self._hello_tcp)
                              + self._subscriptions)
        self._handshake_deadline = mono_ms() + HANDSHAKE_TIMEOUT_MS

    def _do_write(self) -> None:
        while self._out and self.sock is not None:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._went_down(f"could not write to a2-consumer at {self.address}: "
                                f"{exc.strerror or exc}")
                return
            del self._out[:n]

    def _do_read(self) -> None:
        for _ in range(16):
            if self.sock is None or self._reader is None:
                return
            try:
                data = self.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._went_down(f"could not read from a2-consumer at {self.address}: "
                                f"{exc.strerror or exc}")
                return
            if not data:
                self._went_down(f"a2-consumer at {self.address} closed the connection")
                return
            try:
                messages = self._reader.feed(data)
            except wire.ProtocolError as exc:
                self._went_down(f"bad frame from a2-consumer: {exc}")
                return
            for msg in messages:
                self._on_frame(msg)
                if self.sock is None:
                    return  # an error frame closed the connection

    def _on_frame(self, msg: Dict[str, Any]) -> None:
        w = self._w
        if w._on_message is not None:
            try:
                w._on_message(dict(msg))
            except Exception:
                w._log.exception("on_message failed")
        t = msg["t"]
        if t == "welcome":
            if self._state == _READY:
                return
            if msg["v"] != wire.VERSION:
                self._went_down(f"a2-consumer speaks wire protocol {msg['v']}, "
                                f"not {wire.VERSION}")
                return
            now = mono_ms()
            self._state = _READY
            w._count(connects=1)
            self._failing = 0
            self._round_failures = 0
            self._backoff_ms = w.reconnect_min_ms
            self._next_ping_at = now + w.ping_ms
            self._pong_deadline = 0
            self.last_error = ""
            self.connected.set()
            lsn = msg["lsn"]
            w._log.info("connected to a2-consumer at %s (lsn %X/%X)", self.address,
                        lsn >> 32, lsn & 0xFFFFFFFF)
            w._welcomed()
        elif t == "pong":
            if msg["id"] == self._ping_id:
                self._pong_deadline = 0
        elif t == "error":
            if msg["code"] == "standby":
                self._went_down(f"a2-consumer at {self.address} is a standby: {msg['message']}")
            else:
                self._went_down(f"a2-consumer refused the worker: {msg['message']} ({msg['code']})")
        else:
            w._on_frame(msg)

    def step(self, now: int) -> None:
        """Connects, times out and pings when due."""
        if self.address is not None and self._state == _IDLE and now >= self._next_connect_at:
            self._start_connect()
        if self._state in (_CONNECTING, _HANDSHAKE) and now >= self._handshake_deadline:
            self._went_down(f"a2-consumer at {self.address} sent no welcome in "
                            f"{HANDSHAKE_TIMEOUT_MS} ms")
        if self._state == _READY:
            if self._pong_deadline and now >= self._pong_deadline:
                self._went_down(f"a2-consumer at {self.address} did not answer a ping in "
                                f"{self._w.ping_ms} ms")
            elif not self._pong_deadline and now >= self._next_ping_at:
                self._ping_id += 1
                self._out += wire.encode_ping(self._ping_id)
                self._pong_deadline = now + self._w.ping_ms
                self._next_ping_at = now + self._w.ping_ms
                self._do_write()

    def deadlines(self) -> List[int]:
        """When :meth:`step` has something to do next (monotonic ms)."""
        deadlines = []
        if self.address is not None and self._state == _IDLE:
            deadlines.append(self._next_connect_at)
        if self._state in (_CONNECTING, _HANDSHAKE):
            deadlines.append(self._handshake_deadline)
        if self._state == _READY:
            deadlines.append(self._pong_deadline or self._next_ping_at)
        return deadlines

    def poll_events(self) -> int:
        """The poll events to wait for on :attr:`sock`."""
        events = select.POLLIN
        if self._out or self._state == _CONNECTING:
            events |= select.POLLOUT
        return events

    def on_socket(self, revents: int) -> None:
        assert self.sock is not None
        if self._state == _CONNECTING and revents & (select.POLLOUT | select.POLLERR
                                                    | select.POLLHUP):
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._went_down(f"could not connect to {self.address}: {os.strerror(err)}")
                return
            self._state = _HANDSHAKE
        if self.sock is not None and self._state != _CONNECTING and revents & select.POLLOUT:
            self._do_write()
        if (self.sock is not None and self._state != _CONNECTING
                and revents & (select.POLLIN | select.POLLHUP | select.POLLERR)):
            self._do_read()
