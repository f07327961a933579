"""The "local binaries" rung: a private PostgreSQL server started from installed binaries.

:func:`start_local_server` finds ``initdb`` and ``postgres`` (from one folder, so one
version) on ``PATH`` or in the usual install folders (:data:`PG_SEARCH_DIRS`), runs
``initdb`` into ``<workdir>/pgdata``, starts ``postgres`` on a free port listening on
127.0.0.1 only, waits until it accepts connections, and creates the database
:data:`DATABASE`. Namespaces are schemas in it, created and dropped exactly as on a server
given by DSN.

PostgreSQL refuses to run as root. When we are root, ``initdb`` and the server run as the
``postgres`` system user (option ``pg_user``) and the folders they need are given to it;
if that user does not exist the rung is unavailable and says so.

Durability settings — ``fsync=off`` (for speed), ``synchronous_commit=on`` and
``full_page_writes=on`` (the defaults, stated explicitly):

* ``fsync=off`` only skips *flushing* the kernel's page cache to the disk. A commit still
  ``write()``\\ s its WAL record into the kernel before it returns (that is what
  ``synchronous_commit=on`` guarantees), so when the *server process* dies — the
  ``kill_server`` fault SIGKILLs the whole process group — the committed WAL is in the page
  cache, the next start replays it (crash recovery), and **no committed task is lost**.
  Only a crash of the operating system or a power cut could lose data, which does not
  matter for a throw-away test server.
* ``synchronous_commit=off`` would be unsafe even for a process kill (commits return before
  their WAL is written), so it is forced on. ``full_page_writes`` stays on: a SIGKILL can
  interrupt an 8 kB page write between its 4 kB halves, and the full-page images in the WAL
  are what repairs such a torn page.

Options (``--rdq-option KEY=VALUE``, declared in :mod:`rdq_postgres.options` and parsed
by the kit's shared parser, all checked before anything is started):

``pg_bin_dir``         folders (``os.pathsep``-separated) holding ``initdb`` and ``postgres``;
                       searched *instead of* ``PATH`` and the usual folders (empty: none)
``pg_user``            the system user to run the server as when we are root (``postgres``)
``pg_max_connections`` ``max_connections`` of the server (200)
``pg_start_timeout``   seconds to wait for the server to accept connections (60)

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_postgres.server.PostgresServer`: the server process is a
:class:`LocalPostgresNode` (a ``ProcessSlot``: what it runs, how it is probed), its faults
and close come from ``LocalFaults``; what only PostgreSQL needs is here (``initdb``, the
database, the shared memory a SIGKILLed postmaster leaves behind).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.binaries import BinaryNotFound, find_binaries
from rdq_compliance.provision.local_server import LocalFaults, ProcessSlot, start_rung
from rdq_compliance.provision.options import OptionValues, Paths
from rdq_compliance.provision.ports import free_port
from rdq_compliance.provision.process import (
    ManagedProcess,
    ProcessFailed,
    remove_tree,
    run_to_completion,
)
from rdq_compliance.provision.users import RunAs, server_base, server_user
from rdq_postgres.options import (
    DEFAULT_OS_USER,
    LOCAL_OPTIONS,
    PG_BIN_DIR,
    PG_MAX_CONNECTIONS,
    PG_START_TIMEOUT,
    PG_USER,
)
from rdq_postgres.server import PostgresServer

__all__ = [
    "DATABASE",
    "PG_SEARCH_DIRS",
    "SUPERUSER",
    "LocalPostgresNode",
    "LocalPostgresServer",
    "dsn_for",
    "find_postgres",
    "new_node",
    "postgres_binaries",
    "postgres_env",
    "start_local_server",
]

#: Where PostgreSQL is usually installed, searched after ``PATH`` (globs: newest first).
PG_SEARCH_DIRS: tuple[str, ...] = (
    "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
    "/usr/pgsql-*/bin",  # RHEL, Fedora, Rocky (PGDG packages)
    "/usr/local/pgsql/bin",  # built from source
    "/opt/homebrew/opt/postgresql@*/bin",  # Homebrew (Apple silicon), versioned formulae
    "/opt/homebrew/bin",
    "/usr/local/opt/postgresql@*/bin",  # Homebrew (Intel)
    "/usr/local/bin",
    "/Applications/Postgres.app/Contents/Versions/*/bin",
    "/opt/local/lib/postgresql*/bin",  # MacPorts
)
#: The binaries the rung needs, found together in one folder.
REQUIRED_BINARIES = ("initdb", "postgres")
#: The database superuser ``initdb`` creates (trust authentication, no password).
SUPERUSER = "postgres"
#: The database the namespaces (schemas) live in.
DATABASE = "rdq"
#: ``<socket dir>/.s.PGSQL.<port>`` must fit in ``sun_path`` (108 bytes on Linux).
_MAX_SOCKET_DIR = 90


def find_postgres(options: Mapping[str, str]) -> dict[str, Path]:
    """``{"initdb": path, "postgres": path}`` from one folder, or ``ProvisionUnavailable``.

    Searches the folders of ``pg_bin_dir`` if given, else ``PATH`` and the usual folders.
    """
    return postgres_binaries(PG_BIN_DIR.read(options))


def postgres_binaries(bin_dirs: Paths | None) -> dict[str, Path]:
    """:func:`find_postgres` for a parsed ``pg_bin_dir`` (``None``: not given)."""
    if bin_dirs is not None:
        dirs, use_path = list(bin_dirs), False
        hint = "as given by --rdq-option pg_bin_dir"
    else:
        dirs, use_path = list(PG_SEARCH_DIRS), True
        hint = "PATH, then the usual install folders"
    try:
        return find_binaries(REQUIRED_BINARIES, dirs, use_path=use_path)
    except BinaryNotFound as exc:
        raise ProvisionUnavailable(
            f"PostgreSQL server binaries: {exc} [{hint}]; install PostgreSQL (e.g. apt "
            "install postgresql, brew install postgresql) or point --rdq-option "
            "pg_bin_dir=FOLDER at the folder holding initdb and postgres"
        ) from None


def _server_user(name: str = DEFAULT_OS_USER) -> RunAs | None:
    """The user to run as (``pg_user``): ``None`` (ourselves) unless we are root."""
    return server_user(name, server="PostgreSQL", option="pg_user")


def postgres_env(user: RunAs | None) -> dict[str, str]:
    """Our environment without ``PG*`` variables (they would redirect the tools)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.setdefault("LC_ALL", "C")
    if user is not None:
        env.update(HOME=user.home or "/", USER=user.name, LOGNAME=user.name)
    return env


@dataclass
class LocalPostgresNode(ProcessSlot):
    """One PostgreSQL data directory and the server process running on it (if any)."""

    binaries: Mapping[str, Path]
    base: Path
    port: int
    user: RunAs | None
    max_connections: int = 200
    start_timeout: float = 60.0
    #: a folder we created ourselves (``base`` was not reachable by ``user``); removed on close
    private_base: bool = False
    #: further ``-c NAME=VALUE`` settings, after (so over) the defaults (replication)
    settings: tuple[str, ...] = ()
    #: further paths the watchdog removes if the kit dies (a replicated pair's folder)
    watchdog_cleanup: tuple[Path, ...] = ()
    process: ManagedProcess | None = field(default=None, repr=False)

    stop_signal = signal.SIGINT  # "fast" shutdown: disconnect clients, checkpoint

    @property
    def datadir(self) -> Path:
        return self.base / "pgdata"

    @property
    def socket_dir(self) -> Path | None:
        """Where the Unix socket goes; ``None`` (TCP only) when the path would be too long."""
        folder = self.base / "run"
        return folder if len(os.fspath(folder)) <= _MAX_SOCKET_DIR else None

    @property
    def log_path(self) -> Path:
        return self.base / "postgres.log"

    @property
    def bindir(self) -> Path:
        return self.binaries["postgres"].parent

    def _cleanup_paths(self) -> list[Path]:
        paths = [self.datadir]
        if self.socket_dir is not None:
            paths.append(self.socket_dir)
        if self.private_base:
            paths.append(self.base)
        return paths

    def initdb(self) -> None:
        """Create the data directory (as the server user)."""
        argv = [
            self.binaries["initdb"],
            "-D",
            self.datadir,
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        run_to_completion(
            argv,
            log_path=self.base / "initdb.log",
            cwd=self.base,
            env=postgres_env(self.user),
            user=self.user,
            cleanup_paths=self._cleanup_paths(),
            timeout=120.0,
        )

    def argv(self) -> list[str | os.PathLike[str]]:
        socket_dir = self.socket_dir
        return [
            self.binaries["postgres"],
            "-D",
            self.datadir,
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={os.fspath(socket_dir) if socket_dir else ''}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=on",
            "-c",
            "full_page_writes=on",
            "-c",
            f"max_connections={self.max_connections}",
            "-c",
            "logging_collector=off",
            *(arg for setting in self.settings for arg in ("-c", setting)),
        ]

    def probe(self) -> bool:
        """Readiness: the server accepts a connection (not "starting up", not recovering)."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", connect_timeout=2
        ):
            return True

    def launch_options(self) -> dict[str, Any]:
        return {
            "cwd": self.base,
            "env": postgres_env(self.user),
            "user": self.user,
            "cleanup_paths": [*self._cleanup_paths(), *self.watchdog_cleanup],
        }

    def prepare(self) -> None:
        if self.socket_dir is not None:
            self.socket_dir.mkdir(mode=0o700, exist_ok=True)
            if self.user is not None:
                os.chown(self.socket_dir, self.user.uid, self.user.gid)

    def free_shared_memory(self) -> None:
        """Stop a SIGKILLed postmaster and free what it left: its shared memory (a SysV
        segment and files in ``/dev/shm``), which only PostgreSQL knows to be its own. A
        start on the same data directory (on a spare free port) reclaims it and a fast
        shutdown frees it. Best effort: the data directory is deleted anyway."""
        self.stop()
        port = self.port
        try:
            self.port = free_port()
            self.start()
        except (ProcessFailed, OSError):
            pass
        finally:
            self.port = port
        self.stop()

    def remove(self) -> None:
        """Delete the data directory and everything else we created under ``base``."""
        for path in (*self._cleanup_paths(), self.log_path, self.base / "initdb.log"):
            remove_tree(path)


def new_node(
    options: OptionValues, binaries: Mapping[str, Path], workdir: Path
) -> LocalPostgresNode:
    """A node (not started) for the rung's parsed ``options``: run as ``pg_user`` when we
    are root, in a folder under ``workdir`` that user can reach (or one of its own,
    ``private_base``, removed with it)."""
    user = _server_user(options[PG_USER])
    base, private = server_base(workdir, user, prefix="rdq-pg-")
    return LocalPostgresNode(
        binaries=binaries,
        base=base,
        port=0,
        user=user,
        max_connections=options[PG_MAX_CONNECTIONS],
        start_timeout=options[PG_START_TIMEOUT],
        private_base=private,
    )


def create_database(port: int) -> None:
    """``CREATE DATABASE`` :data:`DATABASE` on the fresh server at ``port``."""
    with psycopg.connect(
        host="127.0.0.1",
        port=port,
        user=SUPERUSER,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    ) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


def dsn_for(port: int) -> str:
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"


# ---- the server -------------------------------------------------------------------------


class LocalPostgresServer(LocalFaults, PostgresServer):
    """A private PostgreSQL server the kit started from local binaries.

    Namespaces, ``cut_connections`` and the DSN work as on a given server; in addition the
    kit owns the process: :meth:`kill` SIGKILLs the postmaster's process group,
    :meth:`restart` starts it again on the same port and data directory (crash recovery),
    :meth:`pause` / :meth:`resume` SIGSTOP / SIGCONT every process of it (postmaster and
    backends), :meth:`close` stops it and deletes the data directory — idempotently, also
    after a kill or a pause — and if the kit process dies, the watchdog stops it and
    deletes the data.
    """

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})
    start_errors = (ProcessFailed, psycopg.Error, OSError)

    def __init__(self, node: LocalPostgresNode) -> None:
        binary = node.binaries["postgres"]
        real = Path(os.path.realpath(binary))
        shown = f"{binary} (-> {real})" if real != binary else str(binary)
        origin = f"local binary {shown} on 127.0.0.1:{node.port}"
        super().__init__(dsn_for(node.port), origin=origin)
        #: the server process (of a replicated pair: the current primary)
        self.node = node
        self.hold_processes()

    def process_slots(self) -> Sequence[LocalPostgresNode]:
        return [self.node]

    def tidy_after_kill(self) -> None:
        self.node.free_shared_memory()


def start_local_server(request: ProvisionRequest) -> LocalPostgresServer:
    """Rung 2 of the ladder: find the binaries, ``initdb``, start the server on a free
    port, create the database (see the module docstring)."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    binaries = postgres_binaries(options[PG_BIN_DIR])
    node = new_node(options, binaries, Path(request.workdir))

    def start() -> None:
        try:
            node.initdb()
        except ProcessFailed as exc:
            raise ProvisionUnavailable(
                f"initdb ({binaries['initdb']}) failed in {node.datadir}: {exc}"
            ) from exc
        node.start_on_free_port()
        create_database(node.port)

    return start_rung(
        node,
        start,
        LocalPostgresServer,
        failure=f"the local PostgreSQL server ({node.bindir}) did not start",
    )
