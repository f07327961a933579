"""The postgres backend's provisioning ladder: given DSN → local binaries → container.

Most tests share one local server (a start costs a second or two); the tests of
``close()`` and of the runner being SIGKILLed start their own.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

pytest.importorskip("psycopg")

import psycopg
from rdq_postgres.container import start_container
from rdq_postgres.local import LocalPostgresServer, find_postgres
from rdq_postgres.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_postgres.plugin import PostgresBackend, backend
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage, durability_of

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
)
from rdq_compliance.provision.containers import docker_unavailable_reason
from rdq_compliance.provision.ports import port_open
from rdq_compliance.suite.durability import run_durability_check
from rdq_core.errors import BackendUnavailable, InvalidArgument, NotFound
from rdq_core.model import NewTask

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


def watchdogs() -> list[int]:
    """Our live watchdog child processes."""
    return [
        c.pid
        for c in psutil.Process().children()
        if c.status() != psutil.STATUS_ZOMBIE and "_watchdog.py" in " ".join(c.cmdline())
    ]


def processes_using(datadir: Path) -> list[int]:
    """Any process whose command line names the data directory (a leak check)."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if str(datadir) in " ".join(proc.info["cmdline"] or []):
            out.append(proc.info["pid"])
    return out


def _local_or_skip(request: ProvisionRequest) -> Server:
    try:
        return backend.provision(request)
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local PostgreSQL: {exc}")


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rdq-test-pg-"))  # as the kit's rdq_server does
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server(workdir: Path) -> Iterator[LocalPostgresServer]:
    """One local server for the module, provisioned through the ladder with no DSN."""
    provisioned = _local_or_skip(ProvisionRequest(workdir=workdir, allow_docker=False))
    try:
        assert isinstance(provisioned, LocalPostgresServer)
        yield provisioned
    finally:
        provisioned.close()


# ---- the ladder ------------------------------------------------------------------------


def test_without_a_dsn_the_ladder_starts_local_binaries(
    server: LocalPostgresServer, workdir: Path
) -> None:
    assert server.origin.startswith("local binary ")
    assert f"on 127.0.0.1:{server.node.port}" in server.origin
    assert server.dsn == f"postgresql://postgres@127.0.0.1:{server.node.port}/rdq"
    assert server.faults == {KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS}
    assert server.node.datadir == workdir / "pgdata"


def test_a_dsn_beats_the_local_rung(
    server: LocalPostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(request: ProvisionRequest) -> Server:
        raise AssertionError("the local rung ran although a DSN was given")

    ladder = PostgresBackend()
    monkeypatch.setattr(ladder, "start_local_server", must_not_run)
    monkeypatch.setattr(ladder, "start_container", must_not_run)
    given = ladder.provision(ProvisionRequest(workdir=tmp_path, dsn=server.dsn))
    try:
        assert type(given) is PostgresServer
        assert given.origin.startswith("given DSN")
    finally:
        given.close()
    assert port_open(server.node.port), "closing a given server must leave it running"


def test_without_binaries_nor_docker_the_error_names_all_three_remedies(
    tmp_path: Path,
    no_docker: None,
) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"pg_bin_dir": ""}, allow_docker=True)
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable) as info:
        PostgresBackend().provision(request)
    assert time.monotonic() - began < 3
    message = str(info.value)
    for remedy in ("--rdq-dsn", "RDQ_POSTGRES_DSN", "server binaries", "start Docker"):
        assert remedy in message, message
    assert "local binaries: PostgreSQL server binaries: initdb and postgres not found" in message
    assert "container: Docker is not reachable" in message
    assert list(tmp_path.iterdir()) == [], "a failed rung must leave nothing behind"


def test_with_docker_disabled_the_container_rung_is_not_tried(tmp_path: Path) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"pg_bin_dir": ""}, allow_docker=False)
    with pytest.raises(ProvisionUnavailable, match=r"container: not tried \(--rdq-no-docker\)"):
        PostgresBackend().provision(request)


def test_a_missing_binary_is_named_with_the_folders_searched(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    initdb = folder / "initdb"
    initdb.write_text("#!/bin/sh\n")
    initdb.chmod(initdb.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ProvisionUnavailable) as info:
        find_postgres({"pg_bin_dir": str(folder)})
    assert f"postgres not found; searched: {folder}" in str(info.value)
    assert "pg_bin_dir" in str(info.value)


def test_the_binaries_are_found_off_path_in_the_usual_folders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not installed:
        pytest.skip("no /usr/lib/postgresql/*/bin here")
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_postgres({})
    assert found["postgres"].parent.parent.parent == Path("/usr/lib/postgresql")
    assert found["initdb"].parent == found["postgres"].parent


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root")
def test_as_root_without_the_server_user_the_rung_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProvisionUnavailable, match="no system user 'rdq-no-such-user'"):
        backend.start_local_server(
            ProvisionRequest(workdir=tmp_path, options={"pg_user": "rdq-no-such-user"})
        )


def test_the_container_rung_without_docker_fails_fast_and_clearly(
    tmp_path: Path, no_docker: None
) -> None:
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable, match=r"^Docker is not reachable: "):
        start_container(ProvisionRequest(workdir=tmp_path))
    assert time.monotonic() - began < 2


def test_the_rungs_options_keep_their_names_and_defaults() -> None:
    assert LOCAL_OPTIONS.parse({}).as_dict() == {
        "pg_bin_dir": None,
        "pg_user": "postgres",
        "pg_max_connections": 200,
        "pg_replica": "none",
        "pg_start_timeout": 60.0,
    }
    assert CONTAINER_OPTIONS.parse({}).as_dict() == {
        "pg_image": "postgres:16-alpine",
        "pg_network": "auto",
        "pg_max_connections": 200,
        "pg_start_timeout": 60.0,
    }


@pytest.mark.parametrize("rung", ["start_local_server", "start_container"])
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("pg_start_timeout", "soon", "a positive number"),
        ("pg_max_connections", "2.5", "a positive whole number"),
    ],
)
def test_both_rungs_refuse_a_bad_option_before_starting_anything(
    tmp_path: Path, rung: str, key: str, value: str, expected: str
) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={key: value})
    began = time.monotonic()
    with pytest.raises(InvalidArgument) as info:
        getattr(backend, rung)(request)
    assert str(info.value).startswith(f"--rdq-option {key}={value!r}: expected {expected} (")
    assert time.monotonic() - began < 1, "the options must be checked before any work"
    assert list(tmp_path.iterdir()) == []


def test_a_bad_option_is_an_error_of_the_ladder_not_a_missing_server(tmp_path: Path) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"pg_start_timeout": "-1"})
    with pytest.raises(InvalidArgument, match="pg_start_timeout='-1': expected a positive"):
        PostgresBackend().provision(request)


def test_the_docker_check_gives_up_on_a_silent_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{silent.getsockname()[1]}")
        began = time.monotonic()
        reason = docker_unavailable_reason(timeout=1.0)
        elapsed = time.monotonic() - began
    assert reason is not None and reason.startswith("Docker is not reachable")
    assert elapsed < 2.5


# ---- the local server ------------------------------------------------------------------


def test_the_local_server_runs_as_postgres_and_listens_on_loopback_only(
    server: LocalPostgresServer,
) -> None:
    pids = server.pids()
    assert pids
    if os.geteuid() == 0:
        assert {psutil.Process(pid).username() for pid in pids} == {"postgres"}
    listening = [
        c
        for c in psutil.net_connections(kind="inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]
    assert listening
    assert {(c.laddr.ip, c.laddr.port) for c in listening} == {("127.0.0.1", server.node.port)}


def test_kill_makes_the_storage_unavailable_and_restart_loses_no_committed_task(
    server: LocalPostgresServer,
) -> None:
    namespace = server.create_namespace()
    storage = backend.open(server.dsn, namespace)
    try:
        assert storage.enqueue(NewTask("before-kill", "q", "h", payload=b"\x00committed"))
        pids = server.pids()
        server.kill()
        assert alive(pids) == [], "kill() must SIGKILL the postmaster and every backend"
        assert server.pids() == []
        assert not port_open(server.node.port)
        # (A storage opened before the kill also raises BackendUnavailable, but only after
        # its pool's timeout; a fresh one is refused at once.)
        fresh = backend.open(server.dsn, namespace)
        try:
            with pytest.raises(BackendUnavailable):
                fresh.get("before-kill")
        finally:
            fresh.close()

        server.restart()  # same port, same data: crash recovery
        assert server.pids() and port_open(server.node.port)
        after = backend.open(server.dsn, namespace)
        try:
            task = after.get("before-kill")
            assert (task.id, task.queue, task.payload) == ("before-kill", "q", b"\x00committed")
        finally:
            after.close()
        # The storage opened before the kill recovers too (its pool replaces dead sessions).
        deadline = time.monotonic() + 15
        while True:
            try:
                assert storage.get("before-kill").payload == b"\x00committed"
                break
            except BackendUnavailable:
                if time.monotonic() > deadline:
                    raise
        # Admin calls work again after the restart.
        server.drop_namespace(server.create_namespace())
    finally:
        storage.close()
        server.drop_namespace(namespace)


def test_restart_of_a_running_server_is_a_clean_stop_and_start(
    server: LocalPostgresServer,
) -> None:
    namespace = server.create_namespace()
    storage = backend.open(server.dsn, namespace)
    try:
        storage.enqueue(NewTask("across-restart", "q", "h"))
        old = server.pids()
        server.restart()
        assert alive(old) == []
        after = backend.open(server.dsn, namespace)
        try:
            assert after.get("across-restart").id == "across-restart"
        finally:
            after.close()
    finally:
        storage.close()
        server.drop_namespace(namespace)


def test_pause_stops_every_server_process_until_resume(server: LocalPostgresServer) -> None:
    namespace = server.create_namespace()
    storage = PostgresStorage(server.dsn, namespace)
    try:
        storage.enqueue(NewTask("across-pause", "q", "h"))
        pids = server.pids()
        server.pause()
        try:
            assert {psutil.Process(p).status() for p in pids} == {psutil.STATUS_STOPPED}
            with pytest.raises(psycopg.OperationalError):  # nothing answers meanwhile
                psycopg.connect(server.dsn, connect_timeout=1).close()
        finally:
            server.resume()
        assert psutil.STATUS_STOPPED not in {psutil.Process(p).status() for p in pids}
        assert storage.get("across-pause").id == "across-pause"
    finally:
        storage.close()
        server.drop_namespace(namespace)


def test_the_local_server_is_declared_durable(server: LocalPostgresServer) -> None:
    """fsync=off, synchronous_commit=on, full_page_writes=on: a commit's WAL is written
    before it returns, so a SIGKILL of the server loses none (SPEC §5.13)."""
    namespace = server.create_namespace()
    storage = PostgresStorage(server.dsn, namespace)
    try:
        caps = storage.capabilities()
        assert caps.durable is True
        assert caps.durability.startswith(
            "synchronous_commit=on, full_page_writes=on, fsync=off: a commit returns after "
            "its WAL is written (not flushed to the disk"
        )
    finally:
        storage.close()
        server.drop_namespace(namespace)


def test_acknowledged_work_survives_a_kill_of_the_local_server(
    server: LocalPostgresServer,
) -> None:
    """The conformance suite's durability check (rule durability, SPEC §5.13) on the
    shared local server: SIGKILLed mid-load, restarted, nothing acknowledged lost."""
    namespace = server.create_namespace()
    opened: list[PostgresStorage] = []

    def connect() -> PostgresStorage:
        storage = PostgresStorage(server.dsn, namespace)
        opened.append(storage)
        return storage

    try:
        report = run_durability_check(server, connect)
        assert report.ok, f"{report.message}\n({report.summary()})"
        assert min(report.ledger.before_kill()) >= 100, report.summary()
    finally:
        for storage in opened:
            storage.close()
        server.drop_namespace(namespace)


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


def test_cut_connections_terminates_the_namespace_sessions(server: LocalPostgresServer) -> None:
    namespace = server.create_namespace()
    storage = backend.open(server.dsn, namespace)
    try:
        with pytest.raises(NotFound):
            storage.get("nothing")  # opens the pool
        assert server.cut_connections(namespace) >= 1
    finally:
        storage.close()
        server.drop_namespace(namespace)


@pytest.mark.parametrize("state", ["running", "killed"])
def test_close_stops_everything_and_removes_the_data(state: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="rdq-test-pg-close-"))
    watchdogs_before = watchdogs()
    try:
        own = _local_or_skip(ProvisionRequest(workdir=workdir, allow_docker=False))
        assert isinstance(own, LocalPostgresServer)
        datadir = own.node.datadir
        assert own.node.process is not None
        watchdog = own.node.process.watchdog_pid
        assert watchdog is not None
        pids = [*own.pids(), watchdog]
        own.create_namespace()
        if state == "killed":
            own.kill()
        own.close()
        assert wait_gone(pids, 5) == []
        assert own.pids() == []
        assert processes_using(datadir) == []
        assert not datadir.exists()
        assert list(workdir.iterdir()) == [], "close() must remove everything it created"
        assert watchdogs() == watchdogs_before, "initdb's or the server's watchdog was left"
        own.close()  # idempotent
        with pytest.raises(ProvisionUnavailable, match="closed"):
            own.restart()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


RUNNER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from rdq_compliance.provision.backend import ProvisionRequest
    from rdq_postgres.plugin import backend
    server = backend.provision(ProvisionRequest(workdir=Path(sys.argv[1]), allow_docker=False))
    print(json.dumps({
        "pids": server.pids(),
        "watchdog": server.node.process.watchdog_pid,
        "base": str(server.node.base),
        "private": server.node.private_base,
        "port": server.node.port,
    }), flush=True)
    time.sleep(600)
    """
)


def test_a_sigkilled_test_runner_leaves_no_server_behind(tmp_path: Path) -> None:
    """pytest's tmp_path sits below a 0700 folder of root's: the server user cannot enter
    it, so the rung also falls back to a private folder of its own here — which must go too."""
    try:
        find_postgres({})
    except ProvisionUnavailable as exc:
        pytest.skip(str(exc))
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = runner.stdout.readline() if runner.stdout else ""
        if not line:
            runner.wait(10)
            err = runner.stderr.read() if runner.stderr else ""
            pytest.fail(f"the runner could not provision a server:\n{err[-3000:]}")
        report = json.loads(line)
        pids, base, port = report["pids"], Path(report["base"]), report["port"]
        assert alive(pids) == pids and port_open(port)
        assert (base / "pgdata").is_dir()

        runner.send_signal(signal.SIGKILL)
        runner.wait(5)
        began = time.monotonic()
        assert wait_gone([*pids, report["watchdog"]], 10) == []
        assert time.monotonic() - began < 5, "the server outlived the runner too long"
        assert not port_open(port)
        assert processes_using(base / "pgdata") == []
        assert not (base / "pgdata").exists(), "the watchdog must remove the data directory"
        if report["private"]:
            assert not base.exists()
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for stream in (runner.stdout, runner.stderr):
            if stream:
                stream.close()
