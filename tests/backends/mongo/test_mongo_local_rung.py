"""The local rung would start a real ``mongod`` as a single-node replica set: its
command line and readiness check (``hello`` → ``replSetInitiate`` → writable primary)
exercised against a STAND-IN ``mongod`` (:mod:`_standin_mongod`, a wire-protocol test
double, NOT MongoDB), since no real ``mongod`` can be installed here. And the rung's
choice and errors: ``mongod`` before SecantusDB, a clear error naming the remedies.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rdq_mongo import local
from rdq_mongo.plugin import backend

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_compliance.provision.options import Paths
from rdq_core.errors import InvalidArgument

HERE = Path(__file__).resolve().parent


@pytest.fixture
def standin_bin(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A folder holding a stand-in ``mongod`` (and nothing else), and its record file."""
    folder = tmp_path / "standin-bin"
    folder.mkdir()
    script = folder / "mongod"
    script.write_text(f"#!{sys.executable}\n" + (HERE / "_standin_mongod.py").read_text())
    script.chmod(0o755)
    record = tmp_path / "standin-record.jsonl"
    monkeypatch.setenv("RDQ_STANDIN_RECORD", str(record))
    return folder, record


def test_local_rung_starts_mongod_as_a_single_node_replica_set(standin_bin, tmp_path):
    folder, record = standin_bin
    request = ProvisionRequest(workdir=tmp_path / "work", options={"mongo_bin_dir": str(folder)})
    server = backend.start_local_server(request)
    try:
        events = [json.loads(line) for line in record.read_text().splitlines()]
        argv = events[0]["argv"]
        port = server.node.port
        assert argv[argv.index("--replSet") + 1] == local.REPLICA_SET
        assert argv[argv.index("--bind_ip") + 1] == "127.0.0.1"
        assert argv[argv.index("--port") + 1] == str(port)
        assert Path(argv[argv.index("--dbpath") + 1]) == server.node.datadir
        # readiness: replSetInitiate with this one member, then a writable primary
        assert {"replSetInitiate": {
            "_id": local.REPLICA_SET, "members": [{"_id": 0, "host": f"127.0.0.1:{port}"}]
        }} in events  # fmt: skip
        assert server.dsn == f"mongodb://127.0.0.1:{port}/?directConnection=true"
        assert server.node.kind == local.MONGOD
        assert "0.0.0-standin" in server.origin and "SecantusDB" not in server.origin
        assert {"kill_server", "restart_server", "pause_server"} <= server.faults
    finally:
        server.close()
    assert not server.pids()


def test_auto_prefers_mongod_to_secantus(standin_bin, tmp_path):
    folder, _ = standin_bin
    (folder / "secantusd-py").write_text("#!/bin/sh\nexit 1\n")
    (folder / "secantusd-py").chmod(0o755)
    assert local.find_server("auto", Paths([str(folder)]))[0] == local.MONGOD
    assert local.find_server("secantus", Paths([str(folder)]))[0] == local.SECANTUS


def test_no_server_binary_names_the_remedies(tmp_path):
    with pytest.raises(ProvisionUnavailable, match=r"mongod not found.*secantusd-py not found"):
        local.find_server("auto", Paths([str(tmp_path)]))
    with pytest.raises(ProvisionUnavailable, match="pip install SecantusDB"):
        local.find_server("mongod", Paths([]))


def test_bad_rung_option_is_a_clear_error(tmp_path):
    request = ProvisionRequest(workdir=tmp_path, options={"mongo_server": "postgres"})
    with pytest.raises(InvalidArgument, match=r"mongo_server='postgres': expected one of auto"):
        backend.start_local_server(request)


def test_secantus_is_started_with_a_short_oplog():
    argv = local.secantus_argv(Path("/x/secantusd-py"), 1234, Path("/d"), sync_on_commit=True)
    assert argv[argv.index("--oplog-max-entries") + 1] == str(local.SECANTUS_OPLOG_ENTRIES)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--sync-on-commit" in argv
    assert os.path.basename(argv[0]) == "secantusd-py"
