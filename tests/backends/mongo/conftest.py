"""Fixtures for the MongoDB backend's own tests.

The server is ``RDQ_MONGO_DSN`` when set, else a private server from the local rung
(``mongod`` if installed, else SecantusDB) started once for the session. When none can
be had, every test here is skipped with the reason (a failure under ``CI=true``).
``namespace`` is a fresh namespace of that server per test, ``connect`` opens storages on
it (closed afterwards).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from rdq_mongo.plugin import backend
from rdq_mongo.server import MongoServer
from rdq_mongo.storage import MongoStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_core.errors import BackendUnavailable
from tests._fixtures import Storages, closed_after, namespace_of, storages


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoServer]:
    dsn = os.environ.get("RDQ_MONGO_DSN")
    try:
        if dsn:
            server: MongoServer = MongoServer(dsn)
        else:
            request = ProvisionRequest(workdir=tmp_path_factory.mktemp("mongo-local"))
            server = backend.start_local_server(request)  # type: ignore[assignment]
    except (ProvisionUnavailable, BackendUnavailable) as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no MongoDB server for the mongo tests (CI is set): {exc}")
        pytest.skip(f"no MongoDB server for the mongo tests: {exc}")
    yield from closed_after(server)


@pytest.fixture
def namespace(mongo_server: MongoServer) -> Iterator[str]:
    yield from namespace_of(mongo_server)


@pytest.fixture
def connect(mongo_server: MongoServer, namespace: str) -> Iterator[Storages[MongoStorage]]:
    """Open storages on the test's namespace (another address or options of the server
    first; keyword arguments as for MongoStorage); all closed afterwards."""

    def open_(uri: str | None = None, **kwargs: Any) -> MongoStorage:
        return MongoStorage(uri or mongo_server.dsn, namespace, **kwargs)

    yield from storages(open_)
