"""The provisioning ladder of every server backend — given DSN → local binaries →
container — and the faults and close of the server its local rung starts.

Most tests share one local server per backend (``local``, module scope: a start costs a
second or more); the tests of a taken port, of ``close()`` and of the runner being
SIGKILLed start their own. What only one backend has (PostgreSQL's run-as-another-user
cases, Redis's persistence modes and cluster rung, the stand-in ``mongod``) is in that
backend's folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from rdq_compliance.provision import container_server
from rdq_compliance.provision import ports as provision_ports
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
)
from rdq_compliance.provision.containers import DOCKER_CHECK_TIMEOUT, docker_unavailable_reason
from rdq_compliance.provision.ports import port_open
from rdq_compliance.suite.durability import run_durability_check
from rdq_core.errors import BackendUnavailable, InvalidArgument, NotFound
from rdq_core.model import NewTask, Status
from rdq_core.spi import Storage
from tests._paths import pythonpath
from tests._processes import (
    alive,
    processes_using,
    until_works,
    wait_gone,
    watchdogs,
)
from tests._waiting import HANG_S
from tests.server_contract.conftest import Opened
from tests.server_contract.driver import Ladder, ServerDriver, ports, slots
from tests.server_contract.drivers import each

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")

#: "Fails fast" without Docker: within a few of the kit's bounded Docker checks, far below
#: the 60 s docker-py would wait by itself (the check fails at once when Docker is hidden).
NO_DOCKER_WITHIN_S = 5 * DOCKER_CHECK_TIMEOUT


def ladder(driver: ServerDriver) -> Ladder:
    assert driver.ladder is not None
    return driver.ladder


def _declares(fault: str):
    def needs(driver: ServerDriver) -> str | None:
        faults = ladder(driver).local_faults
        return None if fault in faults else f"its local server does not declare {fault}"

    return needs


# ---- the ladder ------------------------------------------------------------------------


@each("ladder")
def test_without_a_dsn_the_ladder_starts_local_binaries(
    driver: ServerDriver, local: Server, workdir: Path
) -> None:
    facts = ladder(driver)
    (port, *_) = ports(local)
    assert local.origin.startswith("local binary ")
    assert f"on 127.0.0.1:{port}" in local.origin
    for detail in facts.origin_details(local):
        assert detail in local.origin, (detail, local.origin)
    assert local.dsn == facts.local_dsn(port)
    assert local.faults == facts.local_faults
    datadir = slots(local)[0].datadir
    assert datadir == facts.datadir(workdir) and datadir.is_dir()


@each("ladder")
def test_a_dsn_beats_the_local_rung(
    driver: ServerDriver, local: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = ladder(driver)

    def must_not_run(request: ProvisionRequest) -> Server:
        raise AssertionError("the local rung ran although a DSN was given")

    fresh = type(driver.backend)()
    monkeypatch.setattr(fresh, "start_local_server", must_not_run)
    monkeypatch.setattr(fresh, "start_container", must_not_run)
    given = fresh.provision(ProvisionRequest(workdir=tmp_path, dsn=local.dsn))
    try:
        assert type(given) is facts.given_type
        assert given.origin.startswith("given ")
        assert given.origin == facts.given_origin(local, local.dsn)
        assert given.faults == facts.given_faults
    finally:
        given.close()
    assert all(port_open(p) for p in ports(local)), "closing a given server must leave it running"


@each("ladder")
def test_without_binaries_nor_docker_the_error_names_all_three_remedies(
    driver: ServerDriver, tmp_path: Path, no_docker: None
) -> None:
    facts = ladder(driver)
    options = {facts.bin_dir_option: ""}
    request = ProvisionRequest(workdir=tmp_path, options=options, allow_docker=True)
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable) as info:
        type(driver.backend)().provision(request)
    assert time.monotonic() - began < NO_DOCKER_WITHIN_S
    message = str(info.value)
    assert message.startswith(f"no {driver.name} server could be provisioned. Remedies: ")
    dsn_env = f"RDQ_{driver.name.upper()}_DSN"
    for remedy in ("--rdq-dsn", dsn_env, "server binaries on PATH", "start Docker"):
        assert remedy in message, message
    assert f"local binaries: {facts.missing_binaries}" in message, message
    assert "container: Docker is not reachable" in message
    assert list(tmp_path.iterdir()) == [], "a failed rung must leave nothing behind"


@each("ladder")
def test_with_docker_disabled_the_container_rung_is_not_tried(
    driver: ServerDriver, tmp_path: Path
) -> None:
    options = {ladder(driver).bin_dir_option: ""}
    request = ProvisionRequest(workdir=tmp_path, options=options, allow_docker=False)
    with pytest.raises(ProvisionUnavailable, match=r"container: not tried \(--rdq-no-docker\)"):
        type(driver.backend)().provision(request)


@each("ladder")
def test_a_missing_binary_is_named_with_the_folders_searched(
    driver: ServerDriver, tmp_path: Path
) -> None:
    facts = ladder(driver)
    present, missing, options = facts.partial_binaries
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in present:
        binary = folder / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    request = ProvisionRequest(
        workdir=tmp_path / "work",
        options={facts.bin_dir_option: str(folder), **options},
        allow_docker=False,
    )
    with pytest.raises(ProvisionUnavailable) as info:
        driver.backend.start_local_server(request)
    for name in missing:
        assert f"{name} not found; searched: {folder}" in str(info.value), str(info.value)
    assert facts.bin_dir_option in str(info.value)


@each("ladder", needs=lambda d: None if ladder(d).found_off_path else "no public binary search")
def test_the_binaries_are_found_off_path_in_the_usual_folders(
    driver: ServerDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = ladder(driver)
    usual = list(facts.usual_dirs())
    if not usual:
        pytest.skip(f"no {driver.name} server binaries in one of the usual folders here")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert facts.found_off_path is not None
    found = facts.found_off_path()
    assert found
    (folder,) = {path.parent for path in found.values()}  # one folder holds them all
    assert folder in usual, (folder, usual)


@each("ladder")
def test_the_container_rung_without_docker_fails_fast_and_clearly(
    driver: ServerDriver, tmp_path: Path, no_docker: None
) -> None:
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable, match=r"^Docker is not reachable: "):
        driver.backend.start_container(ProvisionRequest(workdir=tmp_path))
    assert time.monotonic() - began < NO_DOCKER_WITHIN_S


@each("ladder")
def test_the_rungs_options_keep_their_names_and_defaults(driver: ServerDriver) -> None:
    facts = ladder(driver)
    assert facts.local_options.parse({}).as_dict() == facts.local_defaults
    assert facts.container_options.parse({}).as_dict() == facts.container_defaults


def _bad_options(driver: ServerDriver):
    for rung in ("start_local_server", "start_container"):
        for bad in ladder(driver).bad_options:
            yield f"{rung}-{bad[0]}={bad[1]}", (rung, *bad)


@each("ladder", cases=_bad_options)
def test_both_rungs_refuse_a_bad_option_before_starting_anything(
    driver: ServerDriver, case: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rung, key, value, expected, *shown = case
    request = ProvisionRequest(workdir=tmp_path, options={key: value})

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("a container was started before the options were checked")

    monkeypatch.setattr(container_server, "start_kit_container", must_not_start)
    with pytest.raises(InvalidArgument) as info:
        getattr(driver.backend, rung)(request)
    named = shown[0] if shown else repr(value)
    assert str(info.value).startswith(f"--rdq-option {key}={named}: expected {expected}"), str(
        info.value
    )
    assert list(tmp_path.iterdir()) == [], "the options must be checked before any work"


@each("ladder")
def test_a_bad_option_is_an_error_of_the_ladder_not_a_missing_server(
    driver: ServerDriver, tmp_path: Path
) -> None:
    key, value, match = ladder(driver).ladder_bad_option
    request = ProvisionRequest(workdir=tmp_path, options={key: value})
    with pytest.raises(InvalidArgument, match=match):
        type(driver.backend)().provision(request)


@each("ladder", needs=lambda d: d.why_not.get("port_taken"))
def test_a_port_taken_meanwhile_is_retried_on_a_fresh_one(
    driver: ServerDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        drawn = iter([taken])
        real = provision_ports.free_port  # where the free-port start draws its ports
        monkeypatch.setattr(provision_ports, "free_port", lambda: next(drawn, None) or real())
        try:
            own = driver.backend.start_local_server(ProvisionRequest(workdir=tmp_path))
        except ProvisionUnavailable as exc:
            if "not found" in str(exc):
                pytest.skip(f"no local {driver.name} server binaries: {exc}")
            raise
        try:
            (node, *_) = slots(own)
            assert node.port != taken
            assert ladder(driver).port_taken_log in node.log_path.read_text()
            assert port_open(node.port)
        finally:
            own.close()


# ---- the local server ------------------------------------------------------------------


@each("ladder")
def test_the_local_server_listens_on_loopback_only_as_its_user(
    driver: ServerDriver, local: Server
) -> None:
    pids = local.pids()  # type: ignore[attr-defined]
    assert pids
    user = ladder(driver).server_user
    if user is not None and os.geteuid() == 0:
        assert {psutil.Process(pid).username() for pid in pids} == {user}
    listening = [
        c
        for c in psutil.net_connections(kind="inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]
    assert listening
    assert {(c.laddr.ip, c.laddr.port) for c in listening} == {
        ("127.0.0.1", port) for port in ports(local)
    }


@each("ladder")
def test_kill_makes_the_storage_unavailable_and_restart_loses_no_committed_task(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    storage = on_local.open()
    assert storage.enqueue(NewTask("before-kill", "q", "h", payload=b"\x00committed"))
    claim = storage.claim_due("q", 1, timedelta(minutes=5))[0]
    pids = local.pids()  # type: ignore[attr-defined]
    local.kill()
    assert alive(pids) == [], "kill() must SIGKILL every process of the server"
    assert local.pids() == []  # type: ignore[attr-defined]
    assert not any(port_open(p) for p in ports(local))
    with pytest.raises(BackendUnavailable):
        storage.get("before-kill")  # the storage opened before the kill
    fresh = driver.open(local.dsn, on_local.namespace)
    try:
        with pytest.raises(BackendUnavailable):
            fresh.get("before-kill")
    finally:
        fresh.close()
    if ladder(driver).admin_fails_while_down:
        with pytest.raises(BackendUnavailable):
            local.create_namespace()

    local.restart()  # same ports, same data: crash recovery
    assert local.pids() and all(port_open(p) for p in ports(local))  # type: ignore[attr-defined]
    after = on_local.open()
    task = until_works(lambda: after.get("before-kill"))
    assert (task.id, task.queue, task.payload) == ("before-kill", "q", b"\x00committed")
    # The storage opened before the kill recovers too, and the claim survived.
    task = until_works(lambda: storage.get("before-kill"))
    assert (task.payload, task.status) == (b"\x00committed", Status.IN_FLIGHT)
    assert task.lease_expires_at == claim.lease_expires_at
    storage.complete(claim.task_id, claim.token)
    local.drop_namespace(local.create_namespace())  # admin calls work again


@each("ladder")
def test_restart_of_a_running_server_is_a_clean_stop_and_start(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    storage = on_local.open()
    storage.enqueue(NewTask("across-restart", "q", "h"))
    old = local.pids()  # type: ignore[attr-defined]
    logged = [slot.log_path.read_text() for slot in slots(local)]
    local.restart()
    assert alive(old) == []
    assert until_works(lambda: storage.get("across-restart")).id == "across-restart"
    after = on_local.open()
    assert until_works(lambda: after.get("across-restart")).id == "across-restart"
    said = ladder(driver).clean_stop_log
    for slot, before in zip(slots(local), logged, strict=True):  # a clean stop, not a kill
        stopped = slot.log_path.read_text()[len(before) :]
        assert said is None or said in stopped, stopped[-2000:]


@each("ladder")
def test_pause_stops_every_server_process_until_resume(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    storage = on_local.open()
    storage.enqueue(NewTask("across-pause", "q", "h"))
    pids = local.pids()  # type: ignore[attr-defined]
    local.pause()
    try:
        assert {psutil.Process(p).status() for p in pids} == {psutil.STATUS_STOPPED}
        assert all(port_open(p) for p in ports(local)), "a paused server keeps its socket"
        ladder(driver).assert_silent(local)  # connected, but nobody answers
    finally:
        local.resume()
    assert psutil.STATUS_STOPPED not in {psutil.Process(p).status() for p in pids}
    assert until_works(lambda: storage.get("across-pause")).id == "across-pause"


@each("ladder")
def test_the_local_server_is_declared_durable(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    """The local rung's settings make a kill of the server lose no acknowledged write
    (rule ``durability``), and the storage says so, naming them."""
    caps = on_local.open().capabilities()
    assert caps.durable is True, caps.durability
    pattern = ladder(driver).durability(local)
    assert re.fullmatch(pattern, caps.durability, re.DOTALL), (pattern, caps.durability)


@each("ladder")
def test_acknowledged_work_survives_a_kill_of_the_local_server(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    """The conformance suite's durability check (rule ``durability``) on the
    shared local server: SIGKILLed mid-load, restarted, nothing acknowledged lost."""
    report = run_durability_check(local, on_local.open)
    assert report.ok, f"{report.message}\n({report.summary()})"
    assert min(report.ledger.before_kill()) >= ladder(driver).durability_load, report.summary()


@each("ladder", needs=_declares(CUT_CONNECTIONS))
def test_cut_connections_closes_the_namespace_connections_and_the_storage_recovers(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    handles: list[Storage] = [on_local.open() for _ in range(3)]
    for handle in handles:
        with pytest.raises(NotFound):
            handle.get("nothing")  # connects
    count = ladder(driver).connections
    if count is not None:
        assert count(local, on_local.namespace) == 3
    assert local.cut_connections(on_local.namespace) == 3
    if count is not None:
        assert count(local, on_local.namespace) == 0
    for handle in handles:
        with pytest.raises(NotFound):  # it carries on (reconnected first, or on a retry)
            if ladder(driver).cut_reconnects_first:
                handle.get("nothing")
            else:
                until_works(lambda handle=handle: handle.get("nothing"))
    assert local.cut_connections(local.create_namespace()) == 0  # nobody connected there


@each("ladder", bug="close_leftovers")
@pytest.mark.parametrize("state", ["running", "killed", "paused"])
def test_close_stops_everything_and_removes_the_data(driver: ServerDriver, state: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix=f"rdq-test-{driver.name}-close-"))
    before = watchdogs()
    try:
        try:
            own = driver.backend.provision(ProvisionRequest(workdir=workdir, allow_docker=False))
        except ProvisionUnavailable as exc:
            pytest.skip(f"no local {driver.name} server: {exc}")
        nodes = list(slots(own))
        assert all(n.process is not None and n.process.watchdog_pid for n in nodes)
        pids = [*own.pids(), *(n.process.watchdog_pid for n in nodes)]  # type: ignore[attr-defined]
        own.create_namespace()
        getattr(own, {"running": "pids", "killed": "kill", "paused": "pause"}[state])()
        began = time.monotonic()
        own.close()
        assert time.monotonic() - began < HANG_S
        assert wait_gone(pids, HANG_S) == []
        assert own.pids() == []  # type: ignore[attr-defined]
        for node in nodes:
            assert processes_using(node.datadir) == []
            assert not node.datadir.exists()
        assert list(workdir.iterdir()) == [], "close() must remove everything it created"
        assert watchdogs() == before, "a watchdog of the server was left"
        own.close()  # idempotent
        with pytest.raises(ProvisionUnavailable, match="closed"):
            own.restart()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


RUNNER = textwrap.dedent(
    """
    import importlib, json, sys, time
    from pathlib import Path
    from rdq_compliance.provision.backend import ProvisionRequest
    module, _, attr = sys.argv[2].partition(":")
    backend = getattr(importlib.import_module(module), attr)
    options = json.loads(sys.argv[3])
    server = backend.provision(
        ProvisionRequest(workdir=Path(sys.argv[1]), options=options, allow_docker=False)
    )
    nodes = server.process_slots()
    print(json.dumps({
        "pids": server.pids(),
        "watchdogs": [n.process.watchdog_pid for n in nodes],
        "dirs": [str(n.datadir) for n in nodes],
        "ports": [n.port for n in nodes],
        "private": [str(n.base) for n in nodes if getattr(n, "private_base", False)],
    }), flush=True)
    time.sleep(600)
    """
)


@each("ladder", cases=lambda d: ladder(d).runner_cases)
def test_a_sigkilled_test_runner_leaves_no_server_behind(
    driver: ServerDriver, case: dict[str, str], tmp_path: Path
) -> None:
    """pytest's tmp_path sits below a 0700 folder of root's: a server run as another user
    cannot enter it, so its rung falls back to a private folder of its own — which must
    go too."""
    missing = ladder(driver).missing_for(case)
    if missing:
        pytest.skip(missing)
    env = {**os.environ, "PYTHONPATH": pythonpath(os.pathsep.join(
        [*driver.pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])]
    ))}  # fmt: skip
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path), driver.backend_ref, json.dumps(case)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = runner.stdout.readline() if runner.stdout else ""
        if not line:
            runner.wait(HANG_S)
            err = runner.stderr.read() if runner.stderr else ""
            pytest.fail(f"the runner could not provision a server:\n{err[-3000:]}")
        report = json.loads(line)
        pids, dirs, used = report["pids"], [Path(d) for d in report["dirs"]], report["ports"]
        assert alive(pids) == pids and all(port_open(p) for p in used)
        assert all(d.is_dir() for d in dirs)

        runner.send_signal(signal.SIGKILL)
        runner.wait(HANG_S)
        left = wait_gone([*pids, *report["watchdogs"]], HANG_S)
        assert left == [], "the server outlived the runner"
        assert not any(port_open(p) for p in used)
        assert all(processes_using(d) == [] for d in dirs)
        assert not any(d.exists() for d in dirs), "the watchdog must remove the data"
        assert not any(Path(p).exists() for p in report["private"])
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for stream in (runner.stdout, runner.stderr):
            if stream:
                stream.close()


def test_the_docker_check_gives_up_on_a_silent_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every container rung asks this first: a daemon that accepts and never answers is
    "not reachable" within the timeout."""
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{silent.getsockname()[1]}")
        began = time.monotonic()
        reason = docker_unavailable_reason(timeout=1.0)
        elapsed = time.monotonic() - began
    assert reason is not None and reason.startswith("Docker is not reachable")
    assert elapsed < 5 * (1.0 + 0.5)  # its 1 s (+0.5 s join), far from docker-py's 60 s


@each("ladder")
def test_a_local_server_that_fails_to_start_ends_the_run_with_one_error(
    driver: ServerDriver,
) -> None:
    """Binaries that are there but fail (each prints a line to stderr and exits 1): the
    run ends before any test with one error, exit 4, naming the backend, the rung, the
    command and the server's last log lines, not one error (or skip) per test."""
    facts = ladder(driver)
    present, missing, _options = facts.partial_binaries
    names = {alt.strip() for name in (*present, *missing) for alt in name.split(" or ")}
    # a folder the server's user can read (PostgreSQL and MariaDB run as another user)
    folder = Path(tempfile.mkdtemp(prefix="rdq-failing-bin-"))
    try:
        folder.chmod(0o755)
        for name in names:
            binary = folder / name
            binary.write_text(f'#!/bin/sh\necho "FATAL: rdq test: {name} refuses to run" >&2\n'
                              "exit 1\n")  # fmt: skip
            binary.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
        env.pop("PYTEST_ADDOPTS", None)
        env["PYTHONPATH"] = pythonpath(os.pathsep.join(driver.pythonpath))
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
             f"--rdq-backend={driver.backend_ref}", "--rdq-no-docker",
             f"--rdq-option={facts.bin_dir_option}={folder}",
             "--pyargs", "rdq_compliance.suite", "-k", "test_stats or test_claim"],
            cwd=folder, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert out.count("server could not be started, so no test ran") == 1, out[-3000:]
    assert "local binaries: " in out and str(folder) in out, out[-3000:]
    assert "refuses to run" in out, out[-3000:]  # the server's own last lines
    assert " passed" not in out and " skipped" not in out, out[-3000:]
