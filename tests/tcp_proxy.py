"""A TCP proxy on 127.0.0.1 that can lose what passes through it: network faults at the socket level.

Every client connection gets its own upstream connection and two pump
threads, one per direction. The proxy can drop the bytes of a direction (the
connection stays open and TCP still acknowledges: a black hole, as a network
cut looks to both ends until a timeout), and delay every chunk:

- :meth:`TcpProxy.cut_replies` drops what the server sends: requests reach
  it and run, their replies are lost (a one-way cut). With ``nbytes`` only
  the next ``nbytes`` (``:1\\r\\n``, a Redis integer reply, is 4 bytes).
- :meth:`TcpProxy.cut` drops both directions; :meth:`TcpProxy.restore` ends
  every cut.
- :attr:`TcpProxy.latency` delays every chunk in both directions.

A proxied connection whose bytes were dropped is out of step for good (its
next reply may be an old one); Redis clients drop a connection after a
timeout, so they never read past a cut.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from typing import Any

#: The two directions.
REQUESTS, REPLIES = "requests", "replies"


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` until :meth:`close` (or the end of a ``with`` block)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.latency = 0.0
        #: Bytes dropped so far, by direction.
        self.dropped = {REQUESTS: 0, REPLIES: 0}
        self._to_drop: dict[str, float] = {REQUESTS: 0, REPLIES: 0}
        self._changed = threading.Condition()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # accept() is not woken by a close from another thread
        self.port: int = self._listener.getsockname()[1]
        self._start(self._accept)

    # -- faults -----------------------------------------------------------

    def cut_replies(self, nbytes: int | None = None) -> None:
        """Drop what the server sends: the next ``nbytes`` bytes, or everything until :meth:`restore`."""
        self._cut(REPLIES, nbytes)

    def cut_requests(self, nbytes: int | None = None) -> None:
        """Drop what the client sends: the next ``nbytes`` bytes, or everything until :meth:`restore`."""
        self._cut(REQUESTS, nbytes)

    def cut(self) -> None:
        """Drop both directions until :meth:`restore`."""
        self._cut(REQUESTS, None)
        self._cut(REPLIES, None)

    def restore(self) -> None:
        """End every cut (latency stays)."""
        with self._changed:
            self._to_drop = {REQUESTS: 0, REPLIES: 0}

    def wait_dropped(self, direction: str, nbytes: int, timeout: float = 10.0) -> bool:
        """Wait until at least ``nbytes`` of ``direction`` have been dropped in all; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.dropped[direction] >= nbytes, timeout)

    def _cut(self, direction: str, nbytes: int | None) -> None:
        with self._changed:
            self._to_drop[direction] = math.inf if nbytes is None else nbytes

    # -- forwarding -------------------------------------------------------

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"tcp-proxy-{self.port}")
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)
            with self._changed:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._sockets.update((client, server))
            self._start(self._pump, client, server, REQUESTS)
            self._start(self._pump, server, client, REPLIES)

    def _pump(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        try:
            while data := source.recv(65536):
                with self._changed:
                    drop = int(min(self._to_drop[direction], len(data)))
                    if drop:
                        self._to_drop[direction] -= drop
                        self.dropped[direction] += drop
                        self._changed.notify_all()
                    latency = self.latency
                if latency:
                    time.sleep(latency)
                if drop < len(data):
                    sink.sendall(data[drop:])
        except OSError:
            pass
        finally:  # one side is gone: end the connection both ways, so the other pump stops too
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._changed:
                self._sockets.discard(source)
            source.close()

    # -- lifetime ---------------------------------------------------------

    def close(self) -> None:
        """Stop accepting, end every connection and wait for every thread. Closing twice is harmless."""
        with self._changed:
            self._closed = True
            sockets, self._sockets = list(self._sockets), set()
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
