"""The ``sqlite`` backend plugin (entry point ``rdq.backends: sqlite``).

The "server" is a directory; a namespace is one database file ``<dir>/<namespace>.sqlite3``
in it (plus its ``-wal`` and ``-shm`` files). The DSN is the directory's path:
``--rdq-dsn=/some/dir`` uses (and creates if missing) that directory and never deletes
anything in it on close; without a DSN the kit's private ``workdir`` is used and the
namespaces created there are removed on close. No fault injection: there is no server
process to kill (worker processes are SIGKILLed by the harness itself).

Plugin half: may import :mod:`rdq_compliance.provision` (it needs only the ``Backend`` and
``Server`` interfaces) and the storage half; the storage half (``storage``,
``connection``, ``schema``) never imports this module nor the kit.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from pathlib import Path

from rdq_compliance.provision.backend import Backend, ProvisionRequest, Server, UnsupportedFault
from rdq_compliance.provision.options import RungOptions
from rdq_core.errors import InvalidArgument
from rdq_sqlite.storage import SqliteStorage

#: Suffix of a namespace's database file.
DB_SUFFIX = ".sqlite3"
#: Files SQLite may keep beside a database (WAL mode, or a leftover rollback journal).
_COMPANION_SUFFIXES = ("", "-wal", "-shm", "-journal")
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")


def namespace_name(namespace: object) -> str:
    """Validate a namespace name (it becomes a file name)."""
    if not isinstance(namespace, str) or not NAMESPACE_RE.fullmatch(namespace):
        raise InvalidArgument(
            f"invalid sqlite namespace {namespace!r}: use 1 to 200 characters from "
            "[A-Za-z0-9._-], not starting with '.'"
        )
    return namespace


def database_path(directory: Path, namespace: str) -> Path:
    """The database file of ``namespace`` in ``directory``."""
    return directory / f"{namespace_name(namespace)}{DB_SUFFIX}"


def _directory(dsn: object, *, create: bool) -> Path:
    """The directory a DSN names (absolute), created if asked; else a clear error."""
    if not isinstance(dsn, (str, Path)) or not str(dsn).strip():
        raise InvalidArgument(
            f"sqlite DSN must be a directory path, got {dsn!r} (e.g. --rdq-dsn=/tmp/rdq-sqlite)"
        )
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", str(dsn)):
        raise InvalidArgument(
            f"sqlite DSN {str(dsn)!r} is a URL (another backend's DSN?); the sqlite backend's "
            "DSN is a directory path, e.g. --rdq-dsn=/tmp/rdq-sqlite"
        )
    directory = Path(dsn).expanduser().absolute()
    if create and not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgument(
                f"sqlite DSN {str(dsn)!r}: cannot create directory {str(directory)!r}: {exc}"
            ) from exc
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        raise InvalidArgument(
            f"sqlite DSN {str(dsn)!r}: {str(directory)!r} {what}; the sqlite backend's DSN is "
            "a directory holding one database file per namespace"
        )
    return directory


class SqliteServer(Server):
    """A directory of namespace databases. ``owned``: remove what we created on close."""

    faults: frozenset[str] = frozenset()

    def network_address(self) -> tuple[str, int]:
        raise UnsupportedFault(
            "SQLite is embedded (every process opens the database files itself): there "
            "is no network between the workers and the store, so a partition does not apply"
        )

    def __init__(self, directory: Path, *, owned: bool) -> None:
        self.directory = directory
        self.dsn = str(directory)
        self.origin = f"embedded (directory {directory})"
        self.version = f"SQLite {sqlite3.sqlite_version} (the Python process's sqlite3)"
        self._owned = owned
        self._created: set[str] = set()
        self._lock = threading.Lock()

    def create_namespace(self) -> str:
        namespace = uuid.uuid4().hex
        SqliteStorage(database_path(self.directory, namespace), create=True).close()
        with self._lock:
            self._created.add(namespace)
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        path = database_path(self.directory, namespace)
        for suffix in _COMPANION_SUFFIXES:
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        with self._lock:
            self._created.discard(namespace)

    def close(self) -> None:
        """Remove the namespaces created in the kit's workdir; leave a given DSN alone."""
        with self._lock:
            created, self._created = sorted(self._created), set()
        if self._owned:
            for namespace in created:
                self.drop_namespace(namespace)


class SqliteBackend(Backend):
    """``--rdq-backend=sqlite``: one SQLite file per namespace, shared across processes."""

    name = "sqlite"

    def options(self) -> tuple[RungOptions, ...]:
        """None: an embedded store, a file path is all it takes."""
        return ()

    def provision(self, request: ProvisionRequest) -> Server:
        if request.dsn:
            return SqliteServer(_directory(request.dsn, create=True), owned=False)
        return SqliteServer(_directory(request.workdir, create=True), owned=True)

    def open(self, dsn: str, namespace: str) -> SqliteStorage:
        directory = _directory(dsn, create=False)
        path = database_path(directory, namespace)
        if not path.is_file():
            raise InvalidArgument(
                f"sqlite namespace {namespace!r} does not exist in {str(directory)!r} "
                f"(no file {path.name}); create it with Server.create_namespace()"
            )
        return SqliteStorage(path)


backend = SqliteBackend()
