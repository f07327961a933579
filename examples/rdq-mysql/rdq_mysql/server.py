"""``MySqlServer``: a MariaDB/MySQL server the kit provisions namespaces on (plugin half).

A namespace is a database ``rdq_<32 hex>`` holding the tables of :mod:`rdq_mysql.schema`.
This is rung 1 of the provisioning ladder as it is: a server given by DSN. It must answer
(else ``BackendUnavailable`` saying why: nothing listening, wrong credentials, ...) and
support ``SKIP LOCKED`` (MariaDB 10.6+, MySQL 8.0+); it is never stopped by the kit. The
one fault it can inject is ``cut_connections``: ``KILL CONNECTION`` every session whose
current database is the namespace (what storages of that namespace use). The kit's own
rungs (:mod:`rdq_mysql.local`, :mod:`rdq_mysql.container`) subclass it with the faults of
a server the kit owns.
"""

from __future__ import annotations

import re
import secrets

import pymysql

from rdq_compliance.provision import CUT_CONNECTIONS, AdminHandle, Server, owner_record
from rdq_core.errors import BackendUnavailable
from rdq_mysql import schema
from rdq_mysql.connection import connect
from rdq_mysql.dsn import Address, mask_dsn, parse_dsn
from rdq_mysql.errors import map_error

#: Oldest servers supported: ``SKIP LOCKED`` arrived in MariaDB 10.6 and MySQL 8.0.
MIN_MARIADB = (10, 6)
MIN_MYSQL = (8, 0)


def new_namespace_name() -> str:
    return "rdq_" + secrets.token_hex(16)


def flavour_of(version: str) -> tuple[str, tuple[int, int]]:
    """``("MariaDB" | "MySQL", (major, minor))`` from ``SELECT VERSION()``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    numbers = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    return ("MariaDB" if "mariadb" in version.lower() else "MySQL"), numbers


class MySqlServer(Server):
    """A MariaDB/MySQL server at ``dsn``; ``close()`` drops the namespaces it created that
    are still there and leaves the server running."""

    faults: frozenset[str] = frozenset({CUT_CONNECTIONS})

    def __init__(self, dsn: str, *, origin: str | None = None) -> None:
        self.address: Address = parse_dsn(dsn)
        self.dsn = dsn
        self.admin: AdminHandle[pymysql.Connection] = AdminHandle(
            connect=lambda: connect(self.address),
            disconnect=lambda conn: conn.close(),
            errors=(pymysql.err.MySQLError, OSError),
            map_error=lambda exc, action: map_error(exc, action, self.address.where),
            usable=lambda conn: bool(conn.open),
            lost=_lost,
            retries=1,  # a connection that had died (e.g. a server restart): once more
        )
        #: what ``SELECT VERSION()`` says, e.g. ``10.11.19-MariaDB-0+deb12u1``
        self.server_version = str(self.admin.call("version", _version))
        self.flavour, numbers = flavour_of(self.server_version)
        #: the software and version, for humans (``Server.version``)
        self.version = f"{self.flavour} {self.server_version}"
        minimum = MIN_MARIADB if self.flavour == "MariaDB" else MIN_MYSQL
        if numbers < minimum:
            raise BackendUnavailable(
                f"the server at {mask_dsn(dsn)} is {self.version}; rdq_mysql "
                "needs FOR UPDATE SKIP LOCKED: MariaDB 10.6+ or MySQL 8.0+"
            )
        self.origin = origin or f"given DSN {mask_dsn(dsn)}"  # the kit shows the version beside

    def forget_connections(self) -> None:
        self.admin.forget()

    def create_namespace(self) -> str:
        namespace = new_namespace_name()
        self.admin.call(
            "create_namespace",
            lambda conn: schema.create_namespace(conn, namespace, owner_record()),
        )
        self.admin.created(namespace)
        return namespace

    def recorded_namespaces(self) -> dict[str, str | None]:
        """The databases named as :meth:`create_namespace` names them, each with the
        owner record of its ``rdq_owner`` table."""
        return self.admin.call("recorded_namespaces", schema.made_namespaces)

    def drop_namespace(self, namespace: str) -> None:
        schema.namespace_name(namespace)
        # Sessions of the namespace may hold locks that would make the drop wait: end them.
        self.cut_connections(namespace)
        self.admin.call("drop_namespace", lambda conn: schema.drop_namespace(conn, namespace))
        self.admin.dropped(namespace)

    def cut_connections(self, namespace: str) -> int:
        """``KILL CONNECTION`` every session whose current database is ``namespace``."""
        schema.namespace_name(namespace)

        def cut(conn: pymysql.Connection) -> int:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT ID FROM information_schema.PROCESSLIST "
                    "WHERE DB = %s AND ID <> CONNECTION_ID()",
                    (namespace,),
                )
                ids = [int(r[0]) for r in cur.fetchall()]
                done = 0
                for session in ids:
                    try:
                        cur.execute(f"KILL CONNECTION {session}")
                        done += 1
                    except pymysql.err.OperationalError:
                        pass  # it ended by itself meanwhile (unknown thread id)
                return done

        return self.admin.call("cut_connections", cut)

    def close(self) -> None:
        """Drop the namespaces this object created that are still there; close the admin
        connection; the server keeps running."""
        self.admin.close(self.drop_namespace)


def _lost(conn: pymysql.Connection, exc: BaseException) -> bool:
    """Whether ``exc`` left the admin connection unusable (then it is opened again)."""
    return not conn.open or isinstance(exc, (pymysql.err.InterfaceError, OSError))


def _version(conn: pymysql.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    return str(row[0]) if row else "unknown"
