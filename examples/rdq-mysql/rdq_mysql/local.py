"""The "local binaries" rung: a private MariaDB (or MySQL) server from installed binaries.

:func:`start_local_server` finds the server (``mariadbd``, else ``mysqld``) on ``PATH`` or
in the usual folders (:data:`SEARCH_DIRS`), creates a data directory in the kit's work
folder — ``mariadb-install-db`` (or ``mysql_install_db``) for MariaDB, ``mysqld
--initialize-insecure`` for MySQL — and starts the server with ``--no-defaults`` (no
``my.cnf`` of the machine applies) on a free port bound to **127.0.0.1** only, with an
``--init-file`` that lets ``root`` in from 127.0.0.1 without a password and creates the
database :data:`DATABASE`. It waits until the server answers, then hands out
``mysql://root@127.0.0.1:PORT/rdq``. Namespaces are databases, as on a given server.

The server refuses to run as root: when we are root it runs as the ``mysql`` system user
(option ``mysql_user``), and lives in a folder that user can reach
(``rdq_compliance.provision.server_base``).

The server process is a :class:`LocalMySqlNode`, a
:class:`~rdq_compliance.provision.ProcessSlot` (what it runs, how it is probed; started as a
``ManagedProcess``: a watchdog kills it and deletes its data if the kit process dies, even
by SIGKILL). Its faults and close come from :class:`~rdq_compliance.provision.LocalFaults`:
``kill_server`` (SIGKILL of the whole process tree), ``restart_server`` (a start on the
same port and data: InnoDB crash recovery), ``pause_server`` (SIGSTOP/SIGCONT), and
``cut_connections`` from the server itself.

Durability: ``innodb_flush_log_at_trx_commit=2`` — each commit *writes* its redo log
before it returns (only the flush to the disk is once a second), so a SIGKILL of the
server loses no commit (the write is in the kernel's page cache); doublewrite stays on
(a page torn by the kill is repaired from it). The storage reads both and declares
``durable``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from rdq_compliance.provision import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    BinaryNotFound,
    LocalFaults,
    ManagedProcess,
    Paths,
    ProcessFailed,
    ProcessSlot,
    ProvisionRequest,
    ProvisionUnavailable,
    RunAs,
    find_binary,
    remove_tree,
    run_to_completion,
    server_base,
    server_user,
    start_rung,
)
from rdq_mysql.dsn import make_dsn
from rdq_mysql.options import (
    LOCAL_OPTIONS,
    MYSQL_BIN_DIR,
    MYSQL_MAX_CONNECTIONS,
    MYSQL_START_TIMEOUT,
    MYSQL_USER,
)
from rdq_mysql.server import MySqlServer

#: Where servers are usually installed, after ``PATH``.
SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin", "/opt/mysql/bin")
SERVERS = ("mariadbd", "mysqld")
INSTALLERS = ("mariadb-install-db", "mysql_install_db")
DATABASE = "rdq"
_INIT_SQL = f"""\
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS `{DATABASE}`;
"""


def _search(names: tuple[str, ...], bin_dirs: Paths | None) -> Path:
    dirs, use_path = (list(bin_dirs), False) if bin_dirs is not None else (SEARCH_DIRS, True)
    missing: BinaryNotFound | None = None
    for name in names:
        try:
            return find_binary(name, dirs, use_path=use_path)
        except BinaryNotFound as exc:
            missing = missing or exc
    assert missing is not None
    hint = (
        "as given by --rdq-option mysql_bin_dir"
        if bin_dirs is not None
        else "PATH, then the usual install folders"
    )
    raise ProvisionUnavailable(
        f"MariaDB/MySQL server binaries: {' or '.join(names)} not found; searched: "
        f"{', '.join(str(d) for d in missing.searched) or 'no folder'} [{hint}]; install "
        "MariaDB (apt install mariadb-server) or MySQL, or point --rdq-option "
        "mysql_bin_dir=FOLDER at the folders holding the server and its installer"
    )


def _server_version(binary: Path) -> str:
    try:
        done = subprocess.run(
            [os.fspath(binary), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProvisionUnavailable(f"{binary} --version failed: {exc}") from None
    return (done.stdout or done.stderr).strip()


@dataclass
class LocalMySqlNode(ProcessSlot):
    """One data directory and the server process running on it (if any)."""

    server: Path
    installer: Path | None
    mariadb: bool
    base: Path
    port: int
    user: RunAs | None
    max_connections: int = 300
    start_timeout: float = 60.0
    private_base: bool = False
    process: ManagedProcess | None = field(default=None, repr=False)

    stop_grace = 20.0

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def log_path(self) -> Path:
        return self.base / "mysqld.log"

    @property
    def init_file(self) -> Path:
        return self.base / "init.sql"

    @property
    def socket(self) -> Path:
        return self.base / "mysqld.sock"

    @property
    def pid_file(self) -> Path:
        return self.base / "mysqld.pid"

    @property
    def tmpdir(self) -> Path:
        """The server's own folder for temporary tables. Never the shared ``/tmp``: at
        startup a server deletes every ``#sql*`` file in its tmpdir, which would pull the
        temporary tables from under any other MariaDB/MySQL server using ``/tmp``."""
        return self.base / "tmp"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MYSQL")}
        env["TMPDIR"] = str(self.tmpdir)  # the installer's bootstrap server reads it too
        if self.user is not None:
            env.update(HOME=self.user.home or "/", USER=self.user.name, LOGNAME=self.user.name)
        return env

    def initialize(self) -> None:
        """Create the data directory (as the server user)."""
        self.init_file.write_text(_INIT_SQL)
        self.tmpdir.mkdir(mode=0o700, exist_ok=True)
        if self.user is not None:
            os.chown(self.init_file, self.user.uid, self.user.gid)
            os.chown(self.tmpdir, self.user.uid, self.user.gid)
        if self.mariadb and self.installer is not None:
            argv: list[str | os.PathLike[str]] = [
                self.installer,
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ]
            basedir = self.server.parent.parent  # /usr/sbin/mariadbd -> /usr
            argv.append(f"--basedir={basedir}")
        else:
            argv = [
                self.server,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={self.datadir}",
            ]
        run_to_completion(
            argv,
            log_path=self.base / "install.log",
            cwd=self.base,
            env=self._env(),
            user=self.user,
            cleanup_paths=[self.datadir, *([self.base] if self.private_base else [])],
            timeout=180.0,
        )

    def argv(self) -> list[str | os.PathLike[str]]:
        return [
            self.server,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket}",
            f"--pid-file={self.pid_file}",
            f"--tmpdir={self.tmpdir}",
            f"--init-file={self.init_file}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--character-set-server=utf8mb4",
            f"--max-connections={self.max_connections}",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-doublewrite=1",
            "--innodb-buffer-pool-size=128M",
            "--innodb-use-native-aio=0",
            "--max-allowed-packet=64M",
        ]

    def probe(self) -> bool:
        # every wait bounded: whoever holds the port (a listener that never speaks, a
        # server still starting) gets two seconds to answer, then the start loop looks again
        conn = pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            database=DATABASE,
            connect_timeout=2,
            read_timeout=2,
            write_timeout=2,
        )
        conn.close()
        return True

    def launch_options(self) -> dict[str, Any]:
        return {
            "cwd": self.base,
            "env": self._env(),
            "user": self.user,
            "cleanup_paths": [self.datadir, *([self.base] if self.private_base else [])],
        }

    def prepare(self) -> None:
        """Nothing: :meth:`initialize` made the folders."""

    def remove(self) -> None:
        super().remove()
        # what the server leaves beside its data (a SIGKILLed one keeps its pid file)
        for path in (
            self.init_file,
            self.base / "install.log",
            self.socket,
            self.pid_file,
            self.tmpdir,
        ):
            remove_tree(path)
        if self.private_base:
            remove_tree(self.base)


class LocalMySqlServer(LocalFaults, MySqlServer):
    """A private server the kit started from local binaries (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})
    start_errors = (ProcessFailed, OSError)

    def __init__(self, node: LocalMySqlNode) -> None:
        self.node = node
        self.hold_processes()
        super().__init__(
            make_dsn("127.0.0.1", node.port, "root", DATABASE),
            origin=f"local binary {node.server} on 127.0.0.1:{node.port}",
        )

    def process_slots(self) -> Sequence[LocalMySqlNode]:
        return [self.node]


def start_local_server(request: ProvisionRequest) -> LocalMySqlServer:
    """Rung 2 of the ladder: find the binaries, create the data directory, start the
    server on a free port (see the module docstring)."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    bin_dirs = options[MYSQL_BIN_DIR]
    server = _search(SERVERS, bin_dirs)
    version = _server_version(server)
    mariadb = "mariadb" in version.lower() or server.name == "mariadbd"
    installer = _search(INSTALLERS, bin_dirs) if mariadb else None
    user = server_user(options[MYSQL_USER], server=server.name, option="mysql_user")
    base, private = server_base(Path(request.workdir), user, prefix="rdq-mysql-")
    node = LocalMySqlNode(
        server=server,
        installer=installer,
        mariadb=mariadb,
        base=base,
        port=0,
        user=user,
        max_connections=options[MYSQL_MAX_CONNECTIONS],
        start_timeout=options[MYSQL_START_TIMEOUT],
        private_base=private,
    )

    def start() -> None:
        try:
            node.initialize()
        except ProcessFailed as exc:
            raise ProvisionUnavailable(
                f"creating the data directory {node.datadir} failed: {exc}"
            ) from exc
        node.start_on_free_port()

    return start_rung(
        node,
        start,
        LocalMySqlServer,
        failure=f"the local server ({server}) did not start",
    )
