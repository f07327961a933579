"""A TCP forwarder whose upstream can be switched: the "virtual IP" of a failover.

Real deployments give clients one stable address for "the primary" (a virtual IP that
moves, a proxy, a DNS name) and move it when a replica is promoted. A replicated server
the kit starts does the same with a :class:`Forwarder`: clients connect to
``127.0.0.1:forwarder.port``; every connection is relayed byte for byte to the current
upstream; :meth:`Forwarder.switch` points new connections at another upstream and closes
every connection open to the old one (as a moved address does: the client sees its
connection end and reconnects — to the new primary).

By default it listens on a free port of 127.0.0.1; ``listen=(host, port)`` binds another
address and a chosen port instead (the SSH test hosts of
:mod:`rdq_compliance.provision.ssh_hosts` give each host's workers the server on the
machine's end of that host's veth pair).

It knows bytes, not protocols (no backend is named here). It runs as threads of the
process that created it, so it **dies with that process** (however it dies: the kernel
closes its sockets); there is no child process to reap. While the upstream does not
accept (the primary was killed, nothing promoted yet) a new client connection is closed
at once: the client sees a reset and retries.

:meth:`Forwarder.hold` stops relaying (in both directions: what arrives stays with the
forwarder, as on a congested or partitioned link) until :meth:`Forwarder.release`; what
is held when the forwarder is switched or closed is discarded with its connections. A
replicated server puts one between its primary and its replica (the replication link)
to make the replica lag for a chosen time: bytes the kernel already accepted for a
process cannot be taken back, so freezing the replica (SIGSTOP) would not do — its
socket buffer would still deliver them after the resume.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Forwarder"]

#: Seconds to wait for the upstream to accept a connection.
CONNECT_TIMEOUT = 2.0


class Forwarder:
    """Listens on ``127.0.0.1:self.port`` (or on ``listen``, a ``(host, port)``; port 0: a
    free one), relays every connection to ``upstream``."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        name: str = "rdq-forwarder",
        listen: tuple[str, int] = ("127.0.0.1", 0),
    ) -> None:
        self._upstream = upstream
        self._name = name
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._closed = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(listen)
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self.host: str = listen[0]
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True, name=name)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def upstream(self) -> tuple[str, int]:
        return self._upstream

    @property
    def connections(self) -> int:
        """Client connections relayed right now."""
        with self._lock:
            return len(self._sockets) // 2

    @property
    def holding(self) -> bool:
        return not self._flowing.is_set()

    def hold(self) -> None:
        """Stop relaying: nothing read from either side is passed on until :meth:`release`."""
        self._flowing.clear()

    def release(self) -> None:
        """Relay again (what was held is passed on now)."""
        self._flowing.set()

    def switch(self, upstream: tuple[str, int]) -> int:
        """Relay new connections to ``upstream``; close every open one (discarding what
        was held) and relay again; returns how many connections were closed."""
        with self._lock:
            self._upstream = upstream
            open_, self._sockets = list(self._sockets), set()
        for s in open_:
            _close(s)
        self._flowing.set()
        return len(open_) // 2

    def close(self) -> None:
        """Stop listening and close every connection; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_, self._sockets = list(self._sockets), set()
        _close(self._listener)
        for s in open_:
            _close(s)
        self._flowing.set()  # held pumps wake up, find their sockets closed, and end

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    _close(client)
                    return
                upstream = self._upstream
            try:
                server = socket.create_connection(upstream, timeout=CONNECT_TIMEOUT)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed or self._upstream != upstream:
                    stale = True  # switched while we connected: this one goes to the old
                else:
                    stale = False
                    self._sockets.update((client, server))
            if stale:
                _close(client)
                _close(server)
                continue
            for src, dst in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), daemon=True, name=f"{self._name}-pump"
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if dst.fileno() < 0:
                    break  # closed while held: what was held is discarded
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.difference_update((src, dst))
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
