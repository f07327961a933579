"""The Redis backend's driver for the server contract (:mod:`tests.server_contract`):
what its provisioning, outage, reply-loss, packaging and clock-skew bodies need to know
of it. The cluster rung's own cases (slots, the container's refusal) stay in
``test_redis_cluster.py`` and ``test_redis_provisioning.py``; the contract's runner test
also starts a 3-master cluster."""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis
from rdq_redis import keys
from rdq_redis.local import REDIS_SEARCH_DIRS, find_redis
from rdq_redis.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_redis.plugin import RedisBackend
from rdq_redis.server import RedisServer
from rdq_redis.storage import CLOCK_DESCRIPTION, RedisStorage

from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server
from rdq_core.spi import Storage
from tests.backends.redis._redis_support import require_server, warm
from tests.server_contract import driver as contract
from tests.server_contract.driver import ServerDriver, slots, why_missing


def _silent(server: Server) -> None:
    probe = slots(server)[0].client(timeout=0.5)
    try:
        probe.ping()
    except redis.TimeoutError:
        return
    finally:
        probe.close()
    raise AssertionError("a paused server answered")


def _connections(server: Server, namespace: str) -> int:
    admin = redis.Redis.from_url(server.dsn)
    try:
        return sum(c.get("name") == keys.client_name(namespace) for c in admin.client_list())
    finally:
        admin.close()


def _missing(options: Mapping[str, str]) -> str | None:
    return why_missing(lambda: find_redis(None, cluster=bool(options.get("redis_cluster"))))


def _usual_dirs() -> list[Path]:
    installed = shutil.which("redis-server")
    if installed is None or str(Path(installed).parent) not in REDIS_SEARCH_DIRS:
        return []
    return [Path(installed).parent]


def _through(proxy: Any, server: Server, namespace: str, mode: str) -> Storage:
    storage = RedisStorage(f"redis://127.0.0.1:{proxy.port}/0", namespace)
    warm(storage, "q")
    return storage


CLOSED = "redis://u:s3cret@127.0.0.1:{port}/0"

DRIVER = ServerDriver(
    name="redis",
    backend_ref="rdq_redis.plugin:backend",
    store="redis",
    shared_dsn=require_server,
    ladder=contract.Ladder(
        bin_dir_option="redis_bin_dir",
        local_dsn=lambda port: f"redis://127.0.0.1:{port}/0",
        datadir=lambda workdir: workdir / "redis-0",
        origin_details=lambda server: (
            f"on 127.0.0.1:{slots(server)[0].port} (persistence aof: --appendonly yes "
            "--appendfsync always ",
        ),
        given_type=RedisServer,
        given_origin=lambda local, dsn: f"given DSN {dsn} (server)",
        given_faults=frozenset({CUT_CONNECTIONS}),
        missing_binaries="Redis server binaries: redis-server not found",
        partial_binaries=(("redis-server",), ("redis-cli",), {"redis_cluster": "3"}),
        found_off_path=lambda: find_redis(None, cluster=True),
        usual_dirs=_usual_dirs,
        local_options=LOCAL_OPTIONS,
        local_defaults={
            "redis_bin_dir": None,
            "redis_persistence": "aof",
            "redis_cluster": None,
            "redis_replica": "none",
            "redis_start_timeout": 30.0,
        },
        container_options=CONTAINER_OPTIONS,
        container_defaults={
            "redis_image": "redis:7-alpine",
            "redis_network": "auto",
            "redis_persistence": "aof",
            "redis_cluster": None,
            "redis_start_timeout": 30.0,
        },
        bad_options=(
            ("redis_start_timeout", "soon", "a positive number ("),
            ("redis_cluster", "2.5", "a positive whole number ("),
            ("redis_cluster", "2", "at least 3 masters (", "2"),
            ("redis_persistence", "always", "one of aof, everysec, rdb, none ("),
        ),
        ladder_bad_option=(
            "redis_persistence",
            "sometimes",
            "redis_persistence='sometimes': expected one of",
        ),
        durability=lambda server: re.escape(
            f"appendonly yes, appendfsync always on 127.0.0.1:{slots(server)[0].port}: a reply "
            "leaves only after its AOF record is written to the file"
        ),
        clean_stop_log="Redis is now ready to exit",  # SIGTERM
        assert_silent=_silent,
        connections=_connections,
        cut_reconnects_first=True,
        runner_cases=(("server", {}), ("cluster", {"redis_cluster": "3"})),
        missing_for=_missing,
    ),
    outage=contract.Outage(
        open_down=lambda server, ns: RedisStorage(server.dsn, ns),
        down_text=r"nothing was done|outcome is unknown",
        native_errors=(redis.RedisError,),
        closed_port_storage=lambda port: RedisStorage(
            CLOSED.format(port=port), "rdq_nowhere", connect_timeout=1
        ),
        closed_port_dsn=lambda port: CLOSED.format(port=port),
        closed_port_text=r"cannot connect.*nothing was done",
        masked="redis://u:***@127.0.0.1",
    ),
    reply_loss=contract.ReplyLoss(
        modes=("server",),
        open=_through,
        complete_request=None,
        complete_tries=1,
        unknown_text=r"mid-call.*outcome is unknown",
    ),
    packaging=contract.Packaging(
        storage_modules=(
            "rdq_redis",
            "rdq_redis.storage",
            "rdq_redis.admin",
            "rdq_redis.keys",
            "rdq_redis.scripts",
            "rdq_redis.codec",
            "rdq_redis.connection",
            "rdq_redis.errors",
            "rdq_redis.persistence",
        ),
        plugin_modules=(
            "rdq_redis.plugin",
            "rdq_redis.server",
            "rdq_redis.local",
            "rdq_redis.container",
            "rdq_redis.replica",
            "rdq_redis.options",
        ),
        unreachable_dsn="redis://127.0.0.1:1/0",
        backend_class=RedisBackend,
        storage_class=RedisStorage,
        clock=CLOCK_DESCRIPTION,
        clock_marker="redis TIME",
    ),
    skew=contract.Skew(on_shared=True),
)
