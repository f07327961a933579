"""Fixtures for the Redis backend's own tests.

The server is ``RDQ_REDIS_DSN`` (or ``RDQ_DSN``), else the local default
``redis://127.0.0.1:6379/0``. When it does not answer, every test here is skipped with
the reason (a failure under ``CI=true``). The cluster tests use ``RDQ_REDIS_CLUSTER_DSN``,
else start a private 3-master cluster from the local binaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from rdq_redis.plugin import RedisServer
from rdq_redis.storage import RedisStorage

from tests.backends.redis._redis_support import require_server


@pytest.fixture(scope="session")
def dsn() -> str:
    return require_server()


@pytest.fixture(scope="session")
def server(dsn: str) -> Iterator[RedisServer]:
    srv = RedisServer(dsn)
    yield srv
    srv.close()


@pytest.fixture
def namespace(server: RedisServer) -> Iterator[str]:
    ns = server.create_namespace()
    yield ns
    server.drop_namespace(ns)


@pytest.fixture
def connect(dsn: str, namespace: str) -> Iterator[Callable[..., RedisStorage]]:
    """Open storages on the test's namespace (``dsn=`` another address of the server,
    keyword arguments as for RedisStorage); all closed afterwards."""
    opened: list[RedisStorage] = []

    def open_(dsn_: str | None = None, **kwargs: object) -> RedisStorage:
        storage = RedisStorage(dsn_ or dsn, namespace, **kwargs)  # type: ignore[arg-type]
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


@pytest.fixture
def storage(connect: Callable[..., RedisStorage]) -> RedisStorage:
    return connect()
