"""``PostgresServer``: a PostgreSQL server the kit provisions namespaces on (plugin half).

A namespace is a schema ``rdq_<32 hex>`` holding the tables of :mod:`rdq_postgres.schema`.
This is rung 1 of the provisioning ladder as it is: a server given by DSN. It must answer
(else ``BackendUnavailable`` naming the DSN, password masked) and is never stopped by the
kit; it can keep a few namespaces created ahead and drop discarded ones in the
background (:mod:`rdq_postgres.stock`). The
one fault it can inject is ``cut_connections``: terminate every session whose
``application_name`` is ``rdq:<namespace>`` (what storages of that namespace use). The
kit's own rungs (:mod:`rdq_postgres.local`, :mod:`rdq_postgres.container`) subclass it
with the faults of a server the kit owns.

Plugin half: may import :mod:`rdq_compliance.provision`; the storage half never imports
this module.
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from rdq_compliance.provision.admin import AdminHandle
from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server
from rdq_compliance.provision.owners import owner_record
from rdq_core.errors import BackendUnavailable
from rdq_postgres import schema
from rdq_postgres.connection import (
    CONNECT_TIMEOUT_S,
    default_application_name,
    withdraw_connection,
)
from rdq_postgres.errors import map_error, mask_dsn
from rdq_postgres.stock import NamespaceStock, new_namespace_name

#: Oldest server supported (``gen_random_uuid()`` is built in from 13).
MIN_SERVER_VERSION = 130000
#: How long dropping a namespace waits for locks before cutting its connections.
DROP_LOCK_TIMEOUT = "5s"

_CUT = """
SELECT count(*) FROM (
    SELECT {terminate} AS done FROM pg_catalog.pg_stat_activity
    WHERE application_name = %s AND pid <> pg_backend_pid()
) cut WHERE done
"""


class PostgresServer(Server):
    """A PostgreSQL server at ``dsn``; ``close()`` drops the namespaces it created that
    are still there and leaves the server running."""

    faults: frozenset[str] = frozenset({CUT_CONNECTIONS})

    def __init__(
        self,
        dsn: str,
        *,
        origin: str | None = None,
        drop_lock_timeout: str = DROP_LOCK_TIMEOUT,
        prefetch: int = 0,
    ) -> None:
        """``prefetch``: how many namespaces to keep created ahead in a background thread,
        which also drops the namespaces given to :meth:`discard_namespace` (0: no thread;
        a subclass that can kill its server should leave it 0 or stop the stock in every
        path of its ``close``)."""
        self.dsn = dsn
        self.drop_lock_timeout = drop_lock_timeout
        self.origin = origin or f"given DSN {mask_dsn(dsn)}"
        self.admin: AdminHandle[psycopg.Connection] = AdminHandle(
            connect=self._connect,
            disconnect=lambda conn: conn.close(),
            errors=(psycopg.Error,),
            map_error=lambda exc, action: map_error(exc, action, f"postgres {self._where}"),
            usable=lambda conn: not conn.closed,
            lost=lambda conn, exc: conn.broken or conn.closed,
        )
        self.server_version = self.admin.connection().info.server_version
        major, minor = divmod(self.server_version, 10000)
        self.version = f"PostgreSQL {major}.{minor}"
        if self.server_version < MIN_SERVER_VERSION:
            raise BackendUnavailable(
                f"postgres server at {mask_dsn(dsn)} is version {self.server_version}; "
                f"rdq_postgres needs PostgreSQL >= 13"
            )
        self._stock = (
            NamespaceStock(
                dsn,
                prefetch,
                drop=self._drop_on,
                on_dropped=self.admin.dropped,
                record=owner_record,
            )
            if prefetch > 0
            else None
        )

    def _connect(self) -> psycopg.Connection:
        """A new autocommit admin connection that answered."""
        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="rdq:admin",
            )
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise BackendUnavailable(
                f"postgres server at {mask_dsn(self.dsn)} does not answer: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        return conn

    @property
    def _where(self) -> str:
        return repr(mask_dsn(self.dsn))  # the DSN as it is now (a replicated pair's moves)

    def forget_connections(self) -> None:
        self.admin.forget()

    def create_namespace(self) -> str:
        namespace = self._stock.take() if self._stock is not None else None
        if namespace is None:
            namespace = new_namespace_name()
            self.admin.call(
                "create_namespace",
                lambda conn: schema.create_new_namespace(conn, namespace, owner_record()),
            )
        self.admin.created(namespace)
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        schema.schema_name(namespace)
        withdraw_connection(self.dsn, namespace)  # made ahead by the stock, never taken
        self.admin.call("drop_namespace", lambda conn: self._drop_on(conn, namespace))
        self.admin.dropped(namespace)

    def recorded_namespaces(self) -> dict[str, str | None]:
        """The schemas named as :meth:`create_namespace` names them, each with its comment
        (the owner record written in the same transaction)."""
        return self.admin.call("recorded_namespaces", schema.made_namespaces)

    def discard_namespace(self, namespace: str) -> None:
        """Dropped by the stock's thread when there is one (``close()`` drops it at the
        latest), else now."""
        schema.schema_name(namespace)
        if self._stock is None or not self._stock.discard(namespace):
            self.drop_namespace(namespace)

    def _drop_on(self, conn: psycopg.Connection, namespace: str) -> None:
        """Drop ``namespace`` on ``conn``: wait for locks ``drop_lock_timeout``, then cut
        the namespace's sessions (e.g. a stuck transaction) and drop it."""
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (self.drop_lock_timeout,))
        try:
            schema.drop_namespace(conn, namespace)
        except pg_errors.LockNotAvailable:
            # A session of the namespace holds a lock (e.g. a stuck transaction).
            self._terminate(conn, namespace)
            schema.drop_namespace(conn, namespace)
        finally:
            conn.execute("RESET lock_timeout")

    def _terminate(self, conn: psycopg.Connection, namespace: str) -> int:
        terminate = sql.SQL(
            "pg_terminate_backend(pid, 5000)"  # waits until each session is gone
            if conn.info.server_version >= 140000
            else "pg_terminate_backend(pid)"
        )
        row = conn.execute(
            sql.SQL(_CUT).format(terminate=terminate), (default_application_name(namespace),)
        ).fetchone()
        return int(row[0]) if row else 0

    def cut_connections(self, namespace: str) -> int:
        schema.schema_name(namespace)
        return self.admin.call("cut_connections", lambda conn: self._terminate(conn, namespace))

    def close(self) -> None:
        """Drop the namespaces this object created (or prefetched, or was given to
        discard) that are still there; close the admin connection; the server keeps
        running."""
        unused = self._stock.close() if self._stock is not None else []
        self.admin.close(self.drop_namespace, also=unused)
