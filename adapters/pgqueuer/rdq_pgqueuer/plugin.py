"""The ``pgqueuer`` backend plugin (entry point ``rdq.backends: pgqueuer``).

:class:`PgqueuerBackend` climbs the postgres backend's provisioning ladder (a server given
by DSN, local binaries, a container: :class:`rdq_postgres.plugin.PostgresBackend`'s rungs,
whose namespace is a PostgreSQL schema) and wraps each server it gets in a
:class:`~rdq_compliance.provision.wrapped.WrappedServer` whose ``prepare`` installs
pgqueuer's own schema in every namespace — the DDL ``pgq install`` runs — beside the
adapter's id map (:mod:`rdq_pgqueuer.schema`). Storage is
:class:`rdq_pgqueuer.storage.PgqueuerStorage`.

**The heartbeat timeout** (the lease: ``Capabilities.fixed_lease``) is 2 s unless
``--rdq-option pgqueuer_heartbeat_timeout=<seconds>`` (or the same query option on the
DSN) says otherwise; pgqueuer's own default is 30 s. The server the plugin hands out
carries the value in its DSN (:mod:`rdq_pgqueuer.dsn`), so a storage opened in any
process deploys the same one, as pgqueuer's docs ask of every worker.

**Known gaps** (:attr:`PgqueuerBackend.expected_failures`): behaviour pgqueuer documents
as its design, each with the link to the 1.6.0 docs or code; see
``findings/pgqueuer/README.md`` for the findings (never ledger entries).

Plugin half: imports :mod:`rdq_compliance.provision`, the postgres backend's plugin by
its public name, and the storage half.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta
from types import MappingProxyType

import psycopg
from pgqueuer._version import version as PGQUEUER_VERSION
from rdq_postgres.plugin import PostgresBackend

from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions, option
from rdq_compliance.provision.wrapped import WrappedServer
from rdq_core.errors import BackendUnavailable
from rdq_pgqueuer import dsn as dsns
from rdq_pgqueuer.gaps import EXPECTED_FAILURES
from rdq_pgqueuer.schema import install
from rdq_pgqueuer.storage import PgqueuerStorage

__all__ = ["PgqueuerBackend", "PgqueuerServer", "backend"]

VERSION = f"pgqueuer {PGQUEUER_VERSION}"


class _Installer:
    """``prepare`` for :class:`WrappedServer`: pgqueuer's schema in a fresh namespace,
    over one admin connection kept for the server's life (checked before each use and
    made again when it died: a server kill, restart or failover ends it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._dsn: str | None = None

    def __call__(self, dsn: str, namespace: str) -> None:
        with self._lock:
            try:
                conn = self._connection(dsn)
                install(conn, namespace)
            except psycopg.Error as exc:
                self._drop()
                raise BackendUnavailable(
                    f"installing pgqueuer's schema in {namespace} at {dsns.mask(dsn)} failed: "
                    f"{str(exc).strip() or type(exc).__name__}"
                ) from None

    def _connection(self, dsn: str) -> psycopg.Connection:
        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken) and self._dsn == dsn:
            try:
                conn.execute("SELECT 1")
                return conn
            except psycopg.Error:
                pass
        self._drop()
        conn = psycopg.connect(
            dsn, autocommit=True, connect_timeout=10, application_name="rdq:pgqueuer-install"
        )
        self._conn, self._dsn = conn, dsn
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:  # pragma: no cover - closing a dead one
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


class PgqueuerServer(WrappedServer):
    """A postgres backend's server, each namespace with pgqueuer installed; its DSN
    carries the heartbeat timeout the adapter deploys (when one was set)."""

    def __init__(self, inner: Server, heartbeat_timeout: timedelta | None) -> None:
        self._installer = _Installer()
        super().__init__(inner, self._installer, version=VERSION)
        self.heartbeat_timeout = heartbeat_timeout

    @property  # type: ignore[override]
    def dsn(self) -> str:
        return dsns.with_timeout(self.inner.dsn, self.heartbeat_timeout)

    def dsn_via(self, host: str, port: int) -> str:
        return dsns.with_timeout(self.inner.dsn_via(host, port), self.heartbeat_timeout)

    def forget_connections(self) -> None:
        self._installer.close()
        super().forget_connections()

    def close(self) -> None:
        try:
            self._installer.close()
        finally:
            super().close()


#: The adapter's one option, declared for the kit's check of given keys (it is parsed by
#: :func:`rdq_pgqueuer.dsn.parse_timeout`, which also reads it from the DSN).
OPTIONS = RungOptions(
    "pgqueuer adapter",
    [option(dsns.OPTION, str, None, "seconds of pgqueuer's heartbeat timeout (default 2)")],
)


class PgqueuerBackend(PostgresBackend):
    """``--rdq-backend=pgqueuer``: pgqueuer 1.6.0 in one schema per namespace."""

    name = "pgqueuer"

    def options(self) -> tuple[RungOptions, ...]:
        """The postgres rungs' options and the adapter's own."""
        return (*super().options(), OPTIONS)
    expected_failures = MappingProxyType(dict(EXPECTED_FAILURES))

    @staticmethod
    def _timeout(request: ProvisionRequest, from_dsn: timedelta | None) -> timedelta | None:
        given = request.options.get(dsns.OPTION)
        if given is not None and str(given).strip():
            return dsns.parse_timeout(given, f"--rdq-option {dsns.OPTION}")
        return from_dsn

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        clean, from_dsn = dsns.split(dsn)
        timeout = self._timeout(request, from_dsn)
        inner = super().server_from_dsn(clean, dataclasses.replace(request, dsn=clean))
        return PgqueuerServer(inner, timeout)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        timeout = self._timeout(request, None)
        return PgqueuerServer(super().start_local_server(request), timeout)

    def start_container(self, request: ProvisionRequest) -> Server:
        timeout = self._timeout(request, None)
        return PgqueuerServer(super().start_container(request), timeout)

    def open(self, dsn: str, namespace: str) -> PgqueuerStorage:  # type: ignore[override]
        return PgqueuerStorage(dsn, namespace)


backend = PgqueuerBackend()
