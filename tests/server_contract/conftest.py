"""Fixtures of the contract bodies, for the ``driver`` that ``@each`` parametrizes:

- ``workdir`` and ``local``: one server of the driver's local rung per module (provisioned
  through the ladder with no DSN and no Docker; a skip naming why where the binaries are
  missing), in a ``mkdtemp`` folder the server's user can reach, as the kit's own;
- ``shared``: the driver's shared server (its given DSN; for a backend without one, a
  server of its local rung — a failure under ``CI=true`` when there is none);
- ``on_local`` / ``on_shared``: a fresh namespace there and the storages a test opens on
  it, all closed afterwards (the local server restarted or resumed first if a test left
  it down).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable, Server
from rdq_core.errors import BackendUnavailable
from rdq_core.spi import Storage
from tests.server_contract.driver import ServerDriver, slots


class Opened:
    """A namespace of ``server`` and the storages a test opens on it."""

    def __init__(self, driver: ServerDriver, server: Server) -> None:
        self.driver, self.server = driver, server
        self.namespace = server.create_namespace()
        self.storages: list[Storage] = []

    def open(self, dsn: str | None = None) -> Storage:
        storage = self.driver.open(dsn or self.server.dsn, self.namespace)
        self.storages.append(storage)
        return storage

    def close(self) -> None:
        for storage in self.storages:
            storage.close()
        local = hasattr(self.server, "process_slots")
        if local and any(slot.paused for slot in slots(self.server)):
            self.server.resume()
        if local and not self.server.pids():  # type: ignore[attr-defined]
            self.server.restart()
        self.server.drop_namespace(self.namespace)


@pytest.fixture(scope="module")
def workdir(driver: ServerDriver) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"rdq-test-{driver.name}-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def local(driver: ServerDriver, workdir: Path) -> Iterator[Server]:
    """One local server of the driver's backend for the module, through the ladder."""
    try:
        server = driver.backend.provision(ProvisionRequest(workdir=workdir, allow_docker=False))
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local {driver.name} server: {exc}")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def shared(driver: ServerDriver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The driver's shared server: its given DSN, else a local rung's server."""
    workdir = tmp_path_factory.mktemp(f"{driver.name}-shared")
    dsn = driver.shared_dsn() if driver.shared_dsn is not None else None
    try:
        if dsn is not None:
            server = driver.backend.server_from_dsn(dsn, ProvisionRequest(workdir=workdir, dsn=dsn))
        else:
            server = driver.backend.start_local_server(ProvisionRequest(workdir=workdir))
    except (ProvisionUnavailable, BackendUnavailable) as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no {driver.name} server for the contract tests (CI is set): {exc}")
        pytest.skip(f"no {driver.name} server for the contract tests: {exc}")
    yield server
    server.close()


@pytest.fixture
def on_local(driver: ServerDriver, local: Server) -> Iterator[Opened]:
    opened = Opened(driver, local)
    yield opened
    opened.close()


@pytest.fixture
def on_shared(driver: ServerDriver, shared: Server) -> Iterator[Opened]:
    opened = Opened(driver, shared)
    yield opened
    opened.close()
