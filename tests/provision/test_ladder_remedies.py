"""The remedies a skip prints fit the rungs the backend has: a
DSN-only backend is told to pass a DSN, never to install binaries or start Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdq_compliance.provision import Backend, ProvisionRequest, ProvisionUnavailable, Server
from rdq_core.spi import Storage


class _DsnOnly(Backend):
    name = "dsn-only"

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        raise NotImplementedError

    def open(self, dsn: str, namespace: str) -> Storage:
        raise NotImplementedError


class _LocalOnly(_DsnOnly):
    name = "local-only"

    def start_local_server(self, request: ProvisionRequest) -> Server:
        raise ProvisionUnavailable("no binaries here")


def test_a_dsn_only_backend_is_told_only_to_pass_a_dsn(tmp_path: Path) -> None:
    assert _DsnOnly().rungs() == (False, False)
    with pytest.raises(ProvisionUnavailable) as info:
        _DsnOnly().provision(ProvisionRequest(workdir=tmp_path, allow_docker=False))
    text = str(info.value)
    assert "Remedy: (1) pass a server address with --rdq-dsn or RDQ_DSN_ONLY_DSN." in text
    assert "binaries" not in text and "Docker" not in text and "--rdq-no-docker" not in text
    assert "takes only a server address (a DSN)" in text


def test_a_backend_without_a_container_rung_is_not_told_to_start_docker(tmp_path: Path) -> None:
    assert _LocalOnly().rungs() == (True, False)
    with pytest.raises(ProvisionUnavailable) as info:
        _LocalOnly().provision(ProvisionRequest(workdir=tmp_path))
    text = str(info.value)
    assert "(2) install the local-only server binaries on PATH" in text
    assert "Docker" not in text and "local binaries: no binaries here" in text
