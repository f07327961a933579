"""What only the postgres backend's provisioning has: a server run as another user when
we are root, and the durability verdict per setting. The ladder, the local server's
faults and close, and the runner being SIGKILLed are the server contract's
(``tests/server_contract/test_provisioning.py``), run for every server backend."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from rdq_postgres.plugin import backend
from rdq_postgres.storage import PostgresStorage, durability_of

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root")
def test_as_root_without_the_server_user_the_rung_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProvisionUnavailable, match="no system user 'rdq-no-such-user'"):
        backend.start_local_server(
            ProvisionRequest(workdir=tmp_path, options={"pg_user": "rdq-no-such-user"})
        )


@pytest.mark.parametrize(
    ("settings", "durable", "why"),
    [
        (("on", "on", "on"), True, "a commit returns after its WAL is written"),
        (("local", "on", "off"), True, "not flushed to the disk"),
        (("remote_write", "on", "on"), True, "after its WAL is written"),
        (("off", "on", "on"), False, "returns before its WAL is written"),
        (("on", "off", "on"), False, "torn by a kill"),
    ],
)
def test_durability_is_decided_per_setting(
    settings: tuple[str, str, str], durable: bool, why: str
) -> None:
    decided, text = durability_of(*settings)
    assert decided is durable and why in text
    # fsync on: no caveat (the mutation score found a flipped test here survived)
    assert ("not flushed" in text) is (settings[2] != "on")


def test_settings_that_cannot_be_read_are_not_taken_as_durable() -> None:
    """A server that does not answer is not durable, and says why (never raises).
    Found by the kit's mutation score: ``_capabilities(True, ...)`` there survived the
    kit, which only ever runs on a server that answers."""
    storage = PostgresStorage("postgresql://root@127.0.0.1:1/test?connect_timeout=2", "rdq_x")
    try:
        caps = storage.capabilities()
    finally:
        storage.close()
    assert caps.durable is False
    assert caps.durability.startswith("unknown: the settings could not be read")
