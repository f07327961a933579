"""rdq_compliance.provision.reaper_pipe: the kit's end of a reaper process.

The rules: the write end never leaks (it is closed when the reaper cannot start, and in
every child forked from the kit), a reaper that does not greet ``ready`` in time is a
clear error naming why, and closing the pipe — a ``quit`` or the kit's death — makes the
reaper clean up. (That the servers, containers and namespaces go when the kit is
SIGKILLed is held by the tests of each: ``test_process.py``, ``test_container_backends.py``,
``tests/chaos/test_chaos_partition.py``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rdq_compliance.provision import reaper_pipe
from rdq_compliance.provision.reaper_pipe import ReaperNotReady, ReaperPipe, start_reaper
from tests._waiting import HANG_S

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX pipes and fork")

#: A toy reaper: reads its config, greets, and on quit or end of file writes the config's
#: ``mark`` file saying which it was.
REAPER = textwrap.dedent(
    """
    import json, sys
    config = json.loads(sys.stdin.readline())
    print(config.get("greeting", "ready"), flush=True)
    why = "eof"
    for line in sys.stdin:
        if line.strip() == "quit":
            why = "quit"
            break
    with open(config["mark"], "w") as fh:
        fh.write(why)
    """
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "_toy_reaper.py"
    path.write_text(REAPER)
    return path


def _open_fds() -> set[int]:
    return (
        {int(fd) for fd in os.listdir("/proc/self/fd")} if Path("/proc/self/fd").is_dir() else set()
    )


def test_a_reaper_greets_and_cleans_up_on_release(script: Path, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    pipe = start_reaper(script, {"mark": str(mark)}, what="toy reaper")
    assert not pipe.released and pipe.pid > 0
    pipe.release()
    assert pipe.released and pipe.process.returncode == 0
    assert mark.read_text() == "quit"
    pipe.release()  # idempotent


def test_a_reaper_cleans_up_when_its_owner_dies(script: Path, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    owner = textwrap.dedent(
        f"""
        import os, signal, sys
        from rdq_compliance.provision.reaper_pipe import start_reaper
        pipe = start_reaper({str(script)!r}, {{"mark": {str(mark)!r}}}, what="toy reaper")
        print(pipe.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", owner], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    deadline = time.monotonic() + HANG_S  # the wait ends when the reaper has cleaned up
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.read_text() == "eof"


def test_a_forked_child_does_not_hold_the_write_end(script: Path, tmp_path: Path) -> None:
    """A worker forked by the kit closes its copy, so only the kit keeps the reaper
    waiting: the child's exit changes nothing, the kit's release still works."""
    mark = tmp_path / "mark"
    pipe = start_reaper(script, {"mark": str(mark)}, what="toy reaper")
    try:
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            os.close(read_end)
            held = [fd for fd in (pipe._control,) if fd is not None and _is_open(fd)]
            leaked = held + sorted(reaper_pipe._WRITE_ENDS)
            os.write(write_end, repr(leaked).encode())
            os._exit(0)
        os.close(write_end)
        report = os.read(read_end, 4096).decode()
        os.close(read_end)
        os.waitpid(child, 0)
        assert report == "[]", f"the forked child still held {report}"
        assert not mark.exists(), "the child's exit must not release the reaper"
    finally:
        pipe.release()
    assert mark.read_text() == "quit"


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_reaper_that_cannot_start_leaks_no_descriptor(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_popen(*args: object, **kwargs: object) -> None:
        raise OSError("no more processes")

    monkeypatch.setattr(subprocess, "Popen", no_popen)
    before, registered = _open_fds(), set(reaper_pipe._WRITE_ENDS)
    with pytest.raises(OSError, match="no more processes"):
        ReaperPipe(script, {})
    assert _open_fds() == before
    assert reaper_pipe._WRITE_ENDS == registered


def test_a_reaper_that_says_something_else_is_not_ready(script: Path, tmp_path: Path) -> None:
    config = {"mark": str(tmp_path / "mark"), "greeting": "busy"}
    with pytest.raises(ReaperNotReady, match=r"the toy reaper did not start: it answered b'busy'"):
        start_reaper(script, config, what="toy reaper")


def test_a_reaper_that_exits_is_not_ready(tmp_path: Path) -> None:
    script = tmp_path / "_exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ReaperNotReady, match="did not start: it exited with status 3"):
        start_reaper(script, {}, what="toy reaper")


def test_a_silent_reaper_is_not_ready_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "_silent.py"
    script.write_text("import sys\nfor line in sys.stdin:\n    pass\n")
    monkeypatch.setattr(reaper_pipe, "READY_TIMEOUT", 0.5)
    began = time.monotonic()
    with pytest.raises(ReaperNotReady, match=r"did not start: it did not answer within 0.5s"):
        start_reaper(script, {}, what="toy reaper")
    assert time.monotonic() - began < 10
