#!/usr/bin/env python3
"""A TCP relay the chaos run controls: listens on 127.0.0.1:LISTEN and
forwards every connection to 127.0.0.1:TARGET. SIGUSR1 cuts every relayed
connection at once (both sides see a reset), as a network fault would;
the listener stays up so the worker can reconnect. Prints the number of
connections it cut to stderr on each SIGUSR1.

usage: relay.py LISTEN_PORT TARGET_PORT
"""
import selectors
import signal
import socket
import struct
import sys


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: relay.py LISTEN_PORT TARGET_PORT\n")
        return 2
    lport, tport = int(sys.argv[1]), int(sys.argv[2])
    sel = selectors.DefaultSelector()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", lport))
    ls.listen(64)
    ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    peers = {}
    cut = [False]

    def on_usr1(signum, frame):
        cut[0] = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(0))
    # From here SIGUSR1 cuts instead of killing: the run waits for this line.
    sys.stderr.write("relay ready\n")
    sys.stderr.flush()

    def close_pair(s):
        o = peers.pop(s, None)
        for x in (s, o):
            if x is None:
                continue
            peers.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            try:
                # RST instead of FIN: the peer sees the connection reset.
                x.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
            except OSError:
                pass
            x.close()

    while True:
        if cut[0]:
            cut[0] = False
            n = len(peers) // 2
            for s in list(peers):
                if s in peers:
                    close_pair(s)
            sys.stderr.write("relay: cut %d connection(s)\n" % n)
            sys.stderr.flush()
        try:
            events = sel.select(timeout=0.2)
        except InterruptedError:
            continue
        for key, _ in events:
            s = key.fileobj
            if s is ls:
                try:
                    c, _ = ls.accept()
                except OSError:
                    continue
                u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    u.connect(("127.0.0.1", tport))
                except OSError:
                    c.close()
                    u.close()
                    continue
                c.setblocking(False)
                u.setblocking(False)
                peers[c] = u
                peers[u] = c
                sel.register(c, selectors.EVENT_READ, None)
                sel.register(u, selectors.EVENT_READ, None)
                continue
            if s not in peers:
                continue
            try:
                data = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                close_pair(s)
                continue
            o = peers[s]
            try:
                o.setblocking(True)
                o.sendall(data)
                o.setblocking(False)
            except OSError:
                close_pair(s)


if __name__ == "__main__":
    sys.exit(main())
