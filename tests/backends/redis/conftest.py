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

from tests._fixtures import Storages, closed_after, namespace_of, storages
from tests.backends.redis._redis_support import require_server


@pytest.fixture(scope="session")
def dsn() -> str:
    return require_server()


@pytest.fixture(scope="session")
def server(dsn: str) -> Iterator[RedisServer]:
    yield from closed_after(RedisServer(dsn))


@pytest.fixture
def namespace(server: RedisServer) -> Iterator[str]:
    yield from namespace_of(server)


@pytest.fixture
def connect(dsn: str, namespace: str) -> Iterator[Storages[RedisStorage]]:
    """Open storages on the test's namespace (another address of the server first,
    keyword arguments as for RedisStorage); all closed afterwards."""

    def open_(dsn_: str | None = None, **kwargs: object) -> RedisStorage:
        return RedisStorage(dsn_ or dsn, namespace, **kwargs)  # type: ignore[arg-type]

    yield from storages(open_)


@pytest.fixture
def storage(connect: Callable[..., RedisStorage]) -> RedisStorage:
    return connect()
