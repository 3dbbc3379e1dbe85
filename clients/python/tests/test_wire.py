"""The wire codec on its own: the worker's frames, the consumer's frames
split across reads, and what the reader refuses."""
from __future__ import annotations

import unittest

import msgpack

from a2 import wire


def unpack(data: bytes) -> list:
    u = msgpack.Unpacker(raw=False)
    u.feed(data)
    return list(u)


class WorkerFrames(unittest.TestCase):
    def test_hello_and_subscribe(self) -> None:
        self.assertEqual(unpack(wire.encode_hello("w-1")), [{"t": "hello", "v": 1, "name": "w-1"}])
        self.assertEqual(unpack(wire.encode_hello("w-1", "tok")),
                         [{"t": "hello", "v": 1, "name": "w-1", "token": "tok"}])
        self.assertEqual(unpack(wire.encode_subscribe("billing")),
                         [{"t": "subscribe", "consumer": "billing"}])
        self.assertEqual(unpack(wire.encode_subscribe("audit", None)),
                         [{"t": "subscribe", "consumer": "audit", "log_types": None}])
        self.assertEqual(unpack(wire.encode_subscribe("audit", ["a", "b"])),
                         [{"t": "subscribe", "consumer": "audit", "log_types": ["a", "b"]}])
        self.assertEqual(unpack(wire.encode_ping(7)), [{"t": "ping", "id": 7}])

    def test_strings_are_str_not_bin(self) -> None:
        # msgpack str family (0xa0..0xbf fixstr), never bin (0xc4..0xc6).
        data = wire.encode_hello("w")
        self.assertNotIn(b"\xc4", data)
        self.assertEqual(data[0], 0x83)  # a map of three

    def test_limits(self) -> None:
        with self.assertRaises(ValueError):
            wire.encode_hello("")
        with self.assertRaises(ValueError):
            wire.encode_hello("x" * 4097)
        with self.assertRaises(ValueError):
            wire.encode_subscribe("a\0b")
        with self.assertRaises(ValueError):
            wire.encode_subscribe("audit", [])
        # 4096 types of 20 bytes: over a 64 KiB frame.
        with self.assertRaises(ValueError):
            wire.encode_subscribe("audit", [f"type-{i:015d}" for i in range(4096)])

    def test_addresses(self) -> None:
        a = wire.parse_address("unix:/run/a2/a2.sock")
        self.assertEqual((a.is_unix, a.path), (True, "/run/a2/a2.sock"))
        t = wire.parse_address("tcp:127.0.0.1:7070")
        self.assertEqual((t.is_unix, t.host, t.port), (False, "127.0.0.1", 7070))
        self.assertEqual(wire.parse_address("tcp:[::1]:7070").host, "::1")
        for bad in ("unix:", "tcp:host", "tcp::80", "tcp:h:0", "tcp:h:x", "http://h", "/a.sock"):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    wire.parse_address(bad)


class ConsumerFrames(unittest.TestCase):
    def frames(self) -> bytes:
        return b"".join(msgpack.packb(m) for m in [
            {"t": "welcome", "v": 1, "lsn": 2 ** 64 - 1},
            {"t": "wake", "consumer": "billing", "session": "shop-1", "cursor": "lane:orders",
             "head": 3, "lsn": 123, "later": "ignored"},
            {"t": "log", "consumer": "audit", "session": "shop-1", "idx": -1,
             "type": "order.placed", "lsn": 124},
            {"t": "resync", "consumer": "billing", "sessions": None},
            {"t": "resync", "consumer": "billing", "sessions": ["a", "b"]},
            {"t": "cleared", "session": "shop-1", "clear_index": 9, "lsn": 125},
            {"t": "presence", "ns": "room", "participant": "p", "fields": {"f": None}},
            {"t": "pong", "id": 1},
            {"t": "error", "code": "auth", "message": "bad token"},
            {"t": "from-the-future", "x": 1},
        ])

    def test_byte_at_a_time(self) -> None:
        data = self.frames()
        r = wire.FrameReader()
        got = []
        for i in range(len(data)):
            got += r.feed(data[i:i + 1])
        self.assertEqual([m["t"] for m in got],
                         ["welcome", "wake", "log", "resync", "resync", "cleared", "presence",
                          "pong", "error", "from-the-future"])
        self.assertEqual(got[0]["lsn"], 2 ** 64 - 1)
        self.assertEqual(got[1]["head"], 3)
        self.assertIsNone(got[3]["sessions"])
        self.assertEqual(got[6]["lsn"], 0)  # an older consumer's presence patch

    def test_refused(self) -> None:
        pk = msgpack.Packer()
        dup = b"\x82" + pk.pack("t") + pk.pack("pong") + pk.pack("t") + pk.pack("pong")
        for what, data in (
                ("a key twice", dup),
                ("not a map", msgpack.packb([1, 2])),
                ("no t", msgpack.packb({"x": 1})),
                ("a wake without head", msgpack.packb({"t": "wake", "consumer": "c",
                                                       "session": "s", "cursor": "#1",
                                                       "lsn": 1})),
                ("a negative lsn", msgpack.packb({"t": "welcome", "v": 1, "lsn": -1})),
                ("a string head", msgpack.packb({"t": "wake", "consumer": "c", "session": "s",
                                                 "cursor": "#1", "head": "3", "lsn": 1})),
                ("sessions of numbers", msgpack.packb({"t": "resync", "consumer": "c",
                                                       "sessions": [1]})),
                ("reserved byte", b"\xc1")):
            with self.subTest(what=what):
                with self.assertRaises(wire.ProtocolError):
                    wire.FrameReader().feed(data)

    def test_frame_over_a_mebibyte(self) -> None:
        big = msgpack.packb({"t": "presence", "ns": "n", "participant": "p",
                             "fields": {"f": "x" * (1024 * 1024)}, "lsn": 1})
        with self.assertRaises(wire.ProtocolError):
            wire.FrameReader().feed(big)


if __name__ == "__main__":
    unittest.main()
