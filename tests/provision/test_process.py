"""rdq_compliance.provision.process: managed server processes.

The rule these tests hold the module to above all: a server started by the kit dies with
the kit — when the process that started it is SIGKILLed, every process of the server's
tree (children in sessions of their own included) is gone within seconds and its data is
removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rdq_compliance.provision.ports import port_open
from rdq_compliance.provision.process import ManagedProcess, ProcessFailed, run_to_completion
from rdq_compliance.provision.users import resolve_user
from tests._ports import reserved_port
from tests._processes import alive, wait_gone
from tests._waiting import HANG_S

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX process management")

#: A toy server: starts a child in a session of its own (as a PostgreSQL backend does),
#: listens on 127.0.0.1:<port> after <delay> seconds, and ignores SIGTERM if asked.
SERVER = textwrap.dedent(
    """
    import signal, socket, subprocess, sys, time
    port, delay, ignore_term = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen(["sleep", "1000"], start_new_session=True)
    time.sleep(delay)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    print("listening", flush=True)
    while True:
        time.sleep(1)
    """
)


def server_argv(port: int, delay: float = 0.0, ignore_term: bool = False) -> list[str]:
    return [sys.executable, "-c", SERVER, str(port), str(delay), "1" if ignore_term else "0"]


@pytest.fixture
def started() -> Iterator[list[ManagedProcess]]:
    """Processes a test started; stopped whatever happens."""
    processes: list[ManagedProcess] = []
    yield processes
    for process in processes:
        process.stop(grace=0.5)


# ---- managed processes -----------------------------------------------------------------


def test_wait_ready_polls_a_real_probe_and_pids_cover_the_whole_tree(
    tmp_path: Path, started: list[ManagedProcess]
) -> None:
    port = reserved_port()
    process = ManagedProcess(server_argv(port, delay=0.3), log_path=tmp_path / "log").start()
    started.append(process)
    process.wait_ready(lambda: port_open(port), timeout=HANG_S)
    assert port_open(port)
    pids = process.pids()
    assert process.pid in pids
    assert len(pids) == 2, pids  # the server and its child in a session of its own
    assert os.getsid(process.pid) == process.pid  # the leader has a session of its own
    process.stop()
    assert wait_gone(pids, 0.1) == []  # stop() returns once the tree is gone: no wait
    assert process.pids() == []
    assert not process.running
    process.stop()  # idempotent


def test_wait_ready_fails_with_the_log_tail_when_the_process_exits(tmp_path: Path) -> None:
    process = ManagedProcess(
        ["sh", "-c", "echo 'FATAL: no can do' >&2; exit 3"], log_path=tmp_path / "log"
    ).start()
    try:
        with pytest.raises(ProcessFailed) as info:
            process.wait_ready(lambda: False, timeout=HANG_S)  # ends when it exits
    finally:
        process.stop()
    assert "status 3" in str(info.value)
    assert "FATAL: no can do" in str(info.value)


def test_wait_ready_times_out_naming_the_last_probe_error(
    tmp_path: Path, started: list[ManagedProcess]
) -> None:
    process = ManagedProcess(["sleep", "30"], log_path=tmp_path / "log").start()
    started.append(process)

    def probe() -> bool:
        raise ConnectionRefusedError("nobody home")

    began = time.monotonic()
    with pytest.raises(ProcessFailed, match=r"not ready within .*nobody home"):
        process.wait_ready(probe, timeout=0.3)
    # ended by its timeout, long before the ``sleep 30`` exits (what a wait that ignored
    # the timeout would end on)
    assert time.monotonic() - began < 15


def test_stop_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    port = reserved_port()
    process = ManagedProcess(
        server_argv(port, ignore_term=True), log_path=tmp_path / "log", grace=0.3
    ).start()
    process.wait_ready(lambda: port_open(port), timeout=HANG_S)
    pids = process.pids()
    began = time.monotonic()
    process.stop()
    assert time.monotonic() - began < HANG_S  # a hang guard; the SIGKILL shows the escalation
    assert process.returncode == -signal.SIGKILL
    assert alive(pids) == []


def test_kill_sigkills_every_process_of_the_tree_at_once(tmp_path: Path) -> None:
    port = reserved_port()
    process = ManagedProcess(server_argv(port), log_path=tmp_path / "log").start()
    try:
        process.wait_ready(lambda: port_open(port), timeout=HANG_S)
        pids = process.pids()
        process.kill()
        assert alive(pids) == []
        assert process.returncode == -signal.SIGKILL
        assert process.pids() == []
        assert not port_open(port)
    finally:
        process.stop()
    assert process.watchdog_pid is not None and alive([process.watchdog_pid]) == []


def _states(pids: list[int]) -> set[str]:
    return {psutil.Process(pid).status() for pid in pids}


def test_pause_stops_every_process_of_the_tree_and_resume_continues_them(
    tmp_path: Path, started: list[ManagedProcess]
) -> None:
    port = reserved_port()
    process = ManagedProcess(server_argv(port), log_path=tmp_path / "log").start()
    started.append(process)
    process.wait_ready(lambda: port_open(port), timeout=HANG_S)
    pids = process.pids()
    assert sorted(process.pause()) == pids  # the child in a session of its own too
    assert process.paused and _states(pids) == {psutil.STATUS_STOPPED}
    assert port_open(port), "a paused server keeps its listening socket"
    assert process.resume() == pids
    assert not process.paused
    assert psutil.STATUS_STOPPED not in _states(pids)


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_paused_server_stops_promptly(tmp_path: Path, how: str) -> None:
    """The watchdog continues a paused tree after the stop signal, so a paused server
    stops at once rather than after the grace period (and SIGKILL needs no SIGCONT)."""
    port = reserved_port()
    grace = 60.0
    process = ManagedProcess(server_argv(port), log_path=tmp_path / "log", grace=grace).start()
    try:
        process.wait_ready(lambda: port_open(port), timeout=HANG_S)
        pids = process.pids()
        process.pause()
        began = time.monotonic()
        getattr(process, how)()
        assert time.monotonic() - began < grace / 2  # not after the grace period
        assert wait_gone(pids, HANG_S) == []
        assert not process.paused
    finally:
        process.stop()


def test_a_binary_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProcessFailed, match=r"could not start .*rdq-no-such-binary"):
        ManagedProcess([str(tmp_path / "rdq-no-such-binary")], log_path=tmp_path / "log").start()


def watchdogs() -> list[int]:
    """Our watchdog child processes (live ones)."""
    return [
        c.pid
        for c in psutil.Process().children()
        if c.status() != psutil.STATUS_ZOMBIE and "_watchdog.py" in " ".join(c.cmdline())
    ]


def test_run_to_completion_raises_with_the_log_on_failure(tmp_path: Path) -> None:
    before = watchdogs()
    run_to_completion(["true"], log_path=tmp_path / "ok.log")
    assert watchdogs() == before, "a finished command must release its watchdog"
    with pytest.raises(ProcessFailed, match=r"status 2(.|\n)*bad flag"):
        run_to_completion(["sh", "-c", "echo bad flag; exit 2"], log_path=tmp_path / "bad.log")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root")
def test_runs_as_another_user_when_we_are_root(tmp_path: Path) -> None:
    try:
        user = resolve_user("postgres")
    except LookupError:
        pytest.skip("no 'postgres' system user")
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(tmp_path, 0o755)
    run_to_completion(
        ["sh", "-c", "id -un; touch data/written"],
        log_path=tmp_path / "log",
        cwd=tmp_path,
        user=user,
        own_paths=[data],
    )
    assert (tmp_path / "log").read_text().splitlines()[0] == "postgres"
    assert (data / "written").stat().st_uid == user.uid


# ---- the server dies with the kit ------------------------------------------------------

KIT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from rdq_compliance.provision.ports import free_port, port_open
    from rdq_compliance.provision.process import ManagedProcess
    work, fork = Path(sys.argv[1]), sys.argv[2] == "1"
    server = sys.argv[3:]
    port = int(server[3])
    (work / "data").mkdir()
    (work / "data" / "table").write_text("rows")
    process = ManagedProcess(
        server, log_path=work / "log", cleanup_paths=[work / "data"], grace=1.0
    ).start()
    process.wait_ready(lambda: port_open(port), timeout=120)  # a hang guard (HANG_S)
    forked = None
    if fork:  # a worker forked by the kit must not keep the server alive
        forked = os.fork()
        if forked == 0:
            time.sleep(120)
            os._exit(0)
    print(json.dumps({"pids": process.pids(), "watchdog": process.watchdog_pid,
                      "forked": forked}), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("fork", [False, True], ids=["plain", "with-forked-worker"])
def test_the_server_dies_when_the_kit_process_is_sigkilled(tmp_path: Path, fork: bool) -> None:
    port = reserved_port()
    kit = subprocess.Popen(
        [sys.executable, "-c", KIT, str(tmp_path), "1" if fork else "0", *server_argv(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    forked = None
    try:
        line = kit.stdout.readline() if kit.stdout else ""
        assert line, f"the kit process died early: {kit.wait(5)}"
        report = json.loads(line)
        forked = report["forked"]
        pids, watchdog = report["pids"], report["watchdog"]
        assert len(pids) == 2 and alive(pids) == pids and port_open(port)

        kit.send_signal(signal.SIGKILL)
        kit.wait(HANG_S)
        assert wait_gone([*pids, watchdog], timeout=HANG_S) == [], "the server outlived the kit"
        assert not port_open(port)
        assert not (tmp_path / "data").exists(), "the server's data was not removed"
        assert "the kit process is gone" in (tmp_path / "log").read_text()
        if forked:
            assert alive([forked]) == [forked], "the forked worker should still be running"
    finally:
        if kit.poll() is None:
            kit.kill()
            kit.wait()
        if kit.stdout:
            kit.stdout.close()
        if forked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(forked, signal.SIGKILL)
