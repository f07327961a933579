"""The PostgreSQL backend's driver for the server contract (:mod:`tests.server_contract`):
what its provisioning, outage, packaging and clock-skew bodies need to know of it."""

from __future__ import annotations

import glob
import re
import time
from pathlib import Path

import psycopg
from rdq_postgres.errors import mask_dsn
from rdq_postgres.local import find_postgres
from rdq_postgres.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import CLOCK_DESCRIPTION, PostgresStorage

from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server
from rdq_core.spi import Storage
from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import require_server
from tests.server_contract import driver as contract
from tests.server_contract.driver import ServerDriver, why_missing


def _silent(server: Server) -> None:
    try:
        psycopg.connect(server.dsn, connect_timeout=1).close()
    except psycopg.OperationalError:
        return
    raise AssertionError("a paused server answered")


def _connections(server: Server, namespace: str) -> int:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"rdq:{namespace}",),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _pool_refilled(storage: Storage) -> None:
    """The pool itself comes back: calls are served by pooled connections again (the pool's
    worker reconnects on its own back-off, 1, 2, 4 ... s after the outage: the wait ends
    when it has; :data:`HANG_S` is its hang guard)."""
    assert isinstance(storage, PostgresStorage)
    deadline = time.monotonic() + HANG_S
    while storage._source.degraded:
        assert time.monotonic() < deadline, "the pool never got a live connection back"
        storage.stats("q")
        time.sleep(0.05)


CLOSED = "postgresql://postgres:s3cret@127.0.0.1:{port}/test"

DRIVER = ServerDriver(
    name="postgres",
    backend_ref="rdq_postgres.plugin:backend",
    store="postgres",
    shared_dsn=require_server,
    ladder=contract.Ladder(
        bin_dir_option="pg_bin_dir",
        local_dsn=lambda port: f"postgresql://postgres@127.0.0.1:{port}/rdq",
        datadir=lambda workdir: workdir / "pgdata",
        given_type=PostgresServer,
        given_origin=lambda local, dsn: f"given DSN {mask_dsn(dsn)}",
        given_faults=frozenset({CUT_CONNECTIONS}),
        missing_binaries="PostgreSQL server binaries: initdb and postgres not found",
        partial_binaries=(("initdb",), ("postgres",), {}),
        found_off_path=lambda: find_postgres({}),
        usual_dirs=lambda: [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"))],
        local_options=LOCAL_OPTIONS,
        local_defaults={
            "pg_bin_dir": None,
            "pg_user": "postgres",
            "pg_max_connections": 200,
            "pg_replica": "none",
            "pg_start_timeout": 60.0,
        },
        container_options=CONTAINER_OPTIONS,
        container_defaults={
            "pg_image": "postgres:16-alpine",
            "pg_network": "auto",
            "pg_max_connections": 200,
            "pg_start_timeout": 60.0,
        },
        bad_options=(
            ("pg_start_timeout", "soon", "a positive number ("),
            ("pg_max_connections", "2.5", "a positive whole number ("),
        ),
        ladder_bad_option=("pg_start_timeout", "-1", "pg_start_timeout='-1': expected a positive"),
        server_user="postgres",
        durability=lambda server: (
            re.escape(
                "synchronous_commit=on, full_page_writes=on, fsync=off: a commit returns after "
                "its WAL is written (not flushed to the disk"
            )
            + ".*"
        ),
        clean_stop_log="database system is shut down",
        assert_silent=_silent,
        connections=_connections,
        missing_for=lambda options: why_missing(lambda: find_postgres({})),
    ),
    outage=contract.Outage(
        open_down=lambda server, ns: PostgresStorage(server.dsn, ns, min_size=2, max_size=4),
        down_text=r"(?i)connect",
        recover_s=3.0,
        native_errors=(psycopg.Error,),
        closed_port_storage=lambda port: PostgresStorage(
            CLOSED.format(port=port) + "?connect_timeout=2", "rdq_nowhere"
        ),
        closed_port_dsn=lambda port: CLOSED.format(port=port),
        closed_port_text=r"(?i)refused|connect",
        server_down_within=6.0,
        masked="postgresql://postgres:***@127.0.0.1",
        pooled=lambda storage: storage._source.pool().get_stats()["pool_size"] >= 1,  # type: ignore[attr-defined]
        settles=_pool_refilled,
    ),
    packaging=contract.Packaging(
        storage_modules=(
            "rdq_postgres",
            "rdq_postgres.storage",
            "rdq_postgres.connection",
            "rdq_postgres.errors",
            "rdq_postgres.queries",
            "rdq_postgres.rows",
            "rdq_postgres.schema",
            "rdq_postgres.stock",
        ),
        plugin_modules=(
            "rdq_postgres.plugin",
            "rdq_postgres.server",
            "rdq_postgres.local",
            "rdq_postgres.container",
            "rdq_postgres.replica",
            "rdq_postgres.options",
        ),
        unreachable_dsn="postgresql://postgres@127.0.0.1:1/test?connect_timeout=1",
        backend_class=PostgresBackend,
        storage_class=PostgresStorage,
        clock=CLOCK_DESCRIPTION,
        clock_marker="now()",
    ),
    skew=contract.Skew(on_shared=False),
    why_not={
        "reply_loss": "no reply-losing proxy case for PostgreSQL (its lost sessions are "
        "the pg_terminate_backend cases of test_postgres_unavailable.py)",
    },
)
