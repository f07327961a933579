"""A server another backend's plugin provisioned, with a namespace made ready for a
different storage: what an adapter (``adapters/``) builds on when it reuses a built-in
backend's server half.

An adapter to a queue library runs on the server a built-in backend's ladder gives (a
DSN, local binaries, a container): :class:`WrappedServer` takes that :class:`Server`
and forwards everything to it — the DSN (read each time: a failover moves it), the
origin and version, the faults and their verbs, the network address of a partition —
while each namespace it creates is then handed to ``prepare`` (the library's own schema
installed in it, for instance). It knows no backend: the adapter says what to prepare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rdq_compliance.provision.backend import Server

__all__ = ["WrappedServer"]


class WrappedServer(Server):
    """``inner`` as it is, but every namespace it creates goes through ``prepare(dsn,
    namespace)`` before it is handed out (a failure drops it again and is raised)."""

    def __init__(
        self,
        inner: Server,
        prepare: Callable[[str, str], None],
        *,
        version: str | None = None,
    ) -> None:
        self.inner = inner
        self._prepare = prepare
        self._version = version

    # ---- what the inner server says -----------------------------------------------------

    @property  # type: ignore[override]
    def dsn(self) -> str:
        return self.inner.dsn

    @property  # type: ignore[override]
    def origin(self) -> str:
        return self.inner.origin

    @property  # type: ignore[override]
    def version(self) -> str | None:
        """The server's version, and the library's beside it when the adapter gives one."""
        server = self.inner.version
        if self._version is None:
            return server
        return f"{server}; {self._version}" if server else self._version

    @property  # type: ignore[override]
    def faults(self) -> frozenset[str]:
        return self.inner.faults

    @property  # type: ignore[override]
    def chaos_scenario(self) -> str:
        return self.inner.chaos_scenario

    @property  # type: ignore[override]
    def race_time_factor(self) -> float:
        return self.inner.race_time_factor

    @property  # type: ignore[override]
    def race_size(self) -> float:
        return self.inner.race_size

    # ---- namespaces ------------------------------------------------------------------------

    def create_namespace(self) -> str:
        namespace = self.inner.create_namespace()
        try:
            self._prepare(self.inner.dsn, namespace)
        except BaseException:
            self.inner.drop_namespace(namespace)
            raise
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        self.inner.drop_namespace(namespace)

    def discard_namespace(self, namespace: str) -> None:
        self.inner.discard_namespace(namespace)

    def recorded_namespaces(self) -> Mapping[str, str | None]:
        return self.inner.recorded_namespaces()

    # ---- the rest: the inner server's --------------------------------------------------------

    def close(self) -> None:
        self.inner.close()

    def kill(self) -> None:
        self.inner.kill()

    def restart(self) -> None:
        self.inner.restart()

    def pause(self) -> None:
        self.inner.pause()

    def resume(self) -> None:
        self.inner.resume()

    def cut_connections(self, namespace: str) -> int:
        return self.inner.cut_connections(namespace)

    def failover(self, replica_lag: float = 0.0) -> str:
        return self.inner.failover(replica_lag)

    def pids(self) -> list[int]:
        return self.inner.pids()

    def forget_connections(self) -> None:
        self.inner.forget_connections()

    def network_address(self) -> tuple[str, int]:
        return self.inner.network_address()

    def dsn_via(self, host: str, port: int) -> str:
        return self.inner.dsn_via(host, port)

    def __getattr__(self, name: str) -> Any:
        # what a particular server adds (read by its own plugin's tests, say)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
