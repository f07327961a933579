"""The MariaDB example's driver for the server contract (:mod:`tests.server_contract`):
``examples/rdq-mysql`` as a third party would get it — its public names only, imported
from its source folder (pytest's ``pythonpath``; the example is not installed in the dev
venv, so its entry point is read from its ``pyproject.toml``). Its server is the MariaDB
at ``RDQ_MYSQL_DSN`` (default ``mysql://root@127.0.0.1:3306/test``), its local rung a
private ``mariadbd``. What only the example has (its public-surface check, its DSN
parsing, its tmpdir) stays in ``tests/test_example_mysql.py``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib.metadata import EntryPoint

import pymysql
import pytest
from rdq_mysql.dsn import mask_dsn
from rdq_mysql.local import SEARCH_DIRS, SERVERS
from rdq_mysql.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_mysql.plugin import MySqlBackend
from rdq_mysql.server import MySqlServer
from rdq_mysql.storage import CLOCK_DESCRIPTION, MAX_PAYLOAD_BYTES, MySqlStorage

from rdq_compliance.provision import CUT_CONNECTIONS, BinaryNotFound, Server, find_binary
from rdq_core.errors import BackendUnavailable
from tests._paths import ROOT
from tests.server_contract import driver as contract
from tests.server_contract.driver import ServerDriver, slots

EXAMPLE = ROOT / "examples" / "rdq-mysql"
DSN = os.environ.get("RDQ_MYSQL_DSN", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


def shared_dsn() -> str:
    """The DSN of the MariaDB the example's tests use, or a skip (a failure under CI)."""
    try:
        MySqlServer(DSN).close()
    except BackendUnavailable as exc:
        why = f"no MariaDB answers at {DSN}: {exc}"
        if IN_CI:
            pytest.fail(f"{why} (CI=true: a failure, not a skip)", pytrace=False)
        pytest.skip(why)
    return DSN


def _silent(server: Server) -> None:
    try:
        pymysql.connect(
            host="127.0.0.1",
            port=slots(server)[0].port,
            user="root",
            connect_timeout=1,
            read_timeout=1,
        ).close()
    except pymysql.err.OperationalError:
        return
    raise AssertionError("a paused server answered")


def _connections(server: Server, namespace: str) -> int:
    conn = pymysql.connect(host="127.0.0.1", port=slots(server)[0].port, user="root")
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s", (namespace,)
            )
            (count,) = cur.fetchone()
    finally:
        conn.close()
    return int(count)


def _missing(options: Mapping[str, str]) -> str | None:
    for name in SERVERS:
        try:
            find_binary(name, SEARCH_DIRS, use_path=True)
            return None
        except BinaryNotFound as exc:
            why = str(exc)
    return why


def _entry_point() -> EntryPoint:
    """The ``rdq.backends`` entry point the example's ``pyproject.toml`` declares."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    (name, value), *more = project["entry-points"]["rdq.backends"].items()
    assert not more, project["entry-points"]
    return EntryPoint(name, value, "rdq.backends")


CLOSED = "mysql://root:s3cret@127.0.0.1:{port}/test"

DRIVER = ServerDriver(
    name="mysql",
    backend_ref="rdq_mysql.plugin:backend",
    store=None,
    shared_dsn=shared_dsn,
    pythonpath=(str(EXAMPLE),),
    ladder=contract.Ladder(
        bin_dir_option="mysql_bin_dir",
        local_dsn=lambda port: f"mysql://root@127.0.0.1:{port}/rdq",
        datadir=lambda workdir: workdir / "data",
        given_type=MySqlServer,
        given_origin=lambda local, dsn: f"given DSN {mask_dsn(dsn)}",
        given_faults=frozenset({CUT_CONNECTIONS}),
        missing_binaries="MariaDB/MySQL server binaries: mariadbd or mysqld not found",
        partial_binaries=(("mariadbd",), ("mariadb-install-db or mysql_install_db",), {}),
        local_options=LOCAL_OPTIONS,
        local_defaults={
            "mysql_bin_dir": None,
            "mysql_user": "mysql",
            "mysql_max_connections": 300,
            "mysql_start_timeout": 60.0,
        },
        container_options=CONTAINER_OPTIONS,
        container_defaults={
            "mysql_image": "mariadb:10.11",
            "mysql_network": "auto",
            "mysql_max_connections": 300,
            "mysql_start_timeout": 60.0,
        },
        bad_options=(
            ("mysql_start_timeout", "soon", "a positive number ("),
            ("mysql_max_connections", "2.5", "a positive whole number ("),
        ),
        ladder_bad_option=(
            "mysql_start_timeout",
            "-1",
            "mysql_start_timeout='-1': expected a positive",
        ),
        server_user="mysql",
        durability=lambda server: re.escape(
            "innodb_flush_log_at_trx_commit=2, innodb_doublewrite=1: a commit returns after its "
            "redo log is written (flushed once a second: an OS crash is not covered)"
        ),
        clean_stop_log="Shutdown complete",
        assert_silent=_silent,
        connections=_connections,
        missing_for=_missing,
    ),
    outage=contract.Outage(
        open_down=lambda server, ns: MySqlStorage(server.dsn, ns),
        down_text=r"no MySQL/MariaDB server answers|outcome is unknown|nothing was done",
        native_errors=(pymysql.err.MySQLError,),
        closed_port_storage=lambda port: MySqlStorage(CLOSED.format(port=port), "rdq_nowhere"),
        closed_port_dsn=lambda port: CLOSED.format(port=port),
        closed_port_text=r"no MySQL/MariaDB server answers at mysql://root@127\.0\.0\.1:\d+",
        server_down_text=(
            r"no MySQL/MariaDB server answers at mysql://root@127\.0\.0\.1:{port} .*"
            r"start one, or fix the host and port"
        ),
        masked="mysql://root@127.0.0.1",
        unchained=True,
    ),
    packaging=contract.Packaging(
        storage_modules=(
            "rdq_mysql",
            "rdq_mysql.storage",
            "rdq_mysql.connection",
            "rdq_mysql.dsn",
            "rdq_mysql.errors",
            "rdq_mysql.schema",
        ),
        plugin_modules=(
            "rdq_mysql.plugin",
            "rdq_mysql.server",
            "rdq_mysql.local",
            "rdq_mysql.container",
            "rdq_mysql.options",
        ),
        unreachable_dsn="mysql://root@127.0.0.1:1/test",
        entry_point=_entry_point,
        backend_class=MySqlBackend,
        storage_class=MySqlStorage,
        max_payload_bytes=MAX_PAYLOAD_BYTES,
        clock=CLOCK_DESCRIPTION,
        clock_marker="NOW(6)",
    ),
    skew=contract.Skew(on_shared=True),
    why_not={
        "reply_loss": "no reply-losing proxy case for the MariaDB example",
    },
)
