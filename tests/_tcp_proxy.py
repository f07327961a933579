"""A loopback TCP proxy that loses replies on demand: backend-neutral (it knows bytes, not
protocols), shared by the backends' own tests.

The server acts on a request, the caller never hears back: the case that makes an
outcome *unknown*. ``drop_next_reply()`` forwards the next request as usual but closes
the client's connection instead of passing the reply on; ``drop_next_reply(when=...)``
does so only for a request whose bytes satisfy the predicate (so a driver's background
traffic — heartbeats on other connections, say — is not what gets dropped), and
``count=N`` drops that many replies in a row. ``hold_replies(seconds)`` holds every
reply for ``seconds`` or until ``hold_replies(0)`` lets them pass (a caller with a shorter
timeout gives up while the server has acted).
``rewrite`` (bytes -> bytes), when set, is applied to every request chunk before it is
forwarded (a test may make the server see something else than the caller sent).
``refuse()`` closes new connections at once (the server looks down from the caller).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

__all__ = ["ReplyLosingProxy"]

Predicate = Callable[[bytes], bool]


class ReplyLosingProxy:
    """A loopback TCP proxy to ``host:port``, listening on ``127.0.0.1:self.port``."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._to_drop = 0
        self._when: Predicate | None = None
        self.hold = 0.0
        self._passing = threading.Event()  # cleared while replies are held
        self._passing.set()
        self.rewrite: Callable[[bytes], bytes] | None = None
        #: replies dropped so far, and the requests whose replies they were
        self.dropped = 0
        self.dropped_requests: list[bytes] = []
        self._refusing = False
        self._closed = False
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name="rdq-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop_next_reply(self, *, when: Predicate | None = None, count: int = 1) -> None:
        """Lose the reply to the next ``count`` requests (those ``when`` accepts)."""
        with self._lock:
            self._to_drop, self._when = count, when

    def hold_replies(self, seconds: float) -> None:
        """Hold every reply for up to ``seconds`` (0: let every reply pass, the held ones
        included)."""
        self.hold = seconds
        if seconds:
            self._passing.clear()
        else:
            self._passing.set()

    def refuse(self, refusing: bool = True) -> None:
        """Close new connections at once (``False``: accept them again)."""
        self._refusing = refusing

    def cut_all(self) -> None:
        """Close every connection open through the proxy now."""
        with self._lock:
            open_, self._sockets = list(self._sockets), set()
        for s in open_:
            _close(s)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            last: list[bytes] = [b""]  # the last request on this connection
            for src, dst, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(src, dst, replies, last), daemon=True
                ).start()

    def _take_drop(self, request: bytes) -> bool:
        with self._lock:
            if self._to_drop <= 0 or (self._when is not None and not self._when(request)):
                return False
            self._to_drop -= 1
            self.dropped += 1
            self.dropped_requests.append(request)
            return True

    def _pump(
        self, src: socket.socket, dst: socket.socket, replies: bool, last: list[bytes]
    ) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not replies:
                    if self.rewrite is not None:
                        data = self.rewrite(data)
                    last[0] = data
                elif self._take_drop(last[0]):
                    break
                elif self.hold:
                    self._passing.wait(self.hold)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
            with self._lock:
                self._sockets.difference_update((src, dst))

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.cut_all()


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
