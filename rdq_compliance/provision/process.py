"""A server binary run as a managed local process, tied to the lifetime of the kit.

:class:`ManagedProcess` is what every server backend's "local binaries" rung (through a
:class:`~rdq_compliance.provision.local_server.ProcessSlot`) and the chaos harness's
worker fleet start processes with:
a process started in its own session (so its process group is its own), optionally as
another user when we are root (:mod:`rdq_compliance.provision.users`), output to a log
file, with :meth:`~ManagedProcess.wait_ready` (a real readiness probe, no blind sleeps),
:meth:`~ManagedProcess.kill` (SIGKILL to the whole tree), :meth:`~ManagedProcess.stop`
(stop signal, grace period, SIGKILL), :meth:`~ManagedProcess.pause` /
:meth:`~ManagedProcess.resume` (SIGSTOP / SIGCONT to the whole tree) and
:meth:`~ManagedProcess.pids` (the live processes of the tree, listed with psutil).
:func:`run_to_completion` runs a one-shot command (``initdb``) the same way;
:func:`remove_tree` deletes what a server left.

**The server dies with the kit.** A ManagedProcess is launched by a small watchdog
process (the script ``_watchdog.py`` beside this module, run as ``python -I -S``, never
imported) that holds the read end of a pipe whose only writer is the process that called
:meth:`~ManagedProcess.start`. When that process dies — however, SIGKILL included — the
kernel closes the pipe, the watchdog reads end of file, stops the server's whole process
tree and removes the paths it was told to clean up. This survives the switch to another
user (which clears ``PR_SET_PDEATHSIG``) and covers the server's own children (the tree
is killed, not one pid). Processes forked from the kit (e.g. multiprocessing workers)
close their copy of the pipe at fork, so the server's lifetime is tied to the kit
process alone. The kit's end of that pipe is a
:class:`~rdq_compliance.provision.reaper_pipe.ReaperPipe`, as for the reapers of
containers and network namespaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from rdq_compliance.provision.reaper_pipe import READY_TIMEOUT, ReaperPipe
from rdq_compliance.provision.users import RunAs, chown_tree

__all__ = [
    "ManagedProcess",
    "ProcessFailed",
    "descendants",
    "remove_tree",
    "run_to_completion",
]

#: The watchdog script (stdlib only; run as ``python -I -S``, never imported).
WATCHDOG_SCRIPT = Path(__file__).with_name("_watchdog.py")
#: psutil statuses of a process that is no longer running (exited, not yet reaped).
_DEAD = frozenset({psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})
#: How long :meth:`ManagedProcess.pause` waits to see every process stopped.
_PAUSE_TIMEOUT = 5.0


def _is_stopped(pid: int) -> bool:
    """Stopped by a signal, or gone (a process that died needs no stopping)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, *_DEAD)
    except psutil.NoSuchProcess:
        return True


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of process ``root``, sorted; ``[]`` if it is gone."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if child.status() not in _DEAD:
                out.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return sorted(out)


# ---- the managed process ----------------------------------------------------------------


class ProcessFailed(RuntimeError):
    """A managed process could not start, exited, or never became ready."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        if log_tail:
            message = f"{message}\n--- last lines of the log ---\n{log_tail}"
        super().__init__(message)


class ManagedProcess:
    """A server process started through a watchdog, tied to the lifetime of this process.

    ``argv`` runs in a new session, with stdin from ``/dev/null`` and stdout/stderr
    appended to ``log_path``. ``user`` (a :class:`RunAs`) makes it run as that user — only
    possible when we are root; ``own_paths`` are then given to that user before the start.
    ``stop_signal`` is what :meth:`stop` sends the leader first (``SIGTERM``; a PostgreSQL
    postmaster prefers ``SIGINT``, a fast shutdown); ``grace`` is how long it may take
    before every process of the tree is SIGKILLed. ``cleanup_paths`` are removed by the
    watchdog **only** if this process dies without stopping the server (after a normal
    :meth:`stop` they are the caller's business).

    "The server's processes" are the whole tree under the watchdog — the leader and
    everything it started, even in sessions of their own (see the watchdog script,
    ``_watchdog.py`` beside this module).
    """

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        user: RunAs | None = None,
        own_paths: Iterable[Path] = (),
        stop_signal: int = signal.SIGTERM,
        grace: float = 5.0,
        cleanup_paths: Iterable[Path] = (),
    ) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.user = user
        self.own_paths = list(own_paths)
        self.stop_signal = int(stop_signal)
        self.grace = grace
        self.cleanup_paths = [Path(p) for p in cleanup_paths]
        self._watchdog: ReaperPipe | None = None
        self._pid: int | None = None
        self._returncode: int | None = None
        self._exited = threading.Event()
        self._launched = threading.Event()
        self._launch_error: str | None = None
        self._replies: queue.Queue[dict[str, object]] = queue.Queue()
        self._released = False
        self._paused = False
        self._lock = threading.Lock()

    # ---- identity ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The leader's pid (also its process group and session id)."""
        if self._pid is None:
            raise ProcessFailed(f"{self.argv[0]} has not been started")
        return self._pid

    @property
    def watchdog_pid(self) -> int | None:
        """The pid of the watchdog that ends the process when the kit dies (``None``
        when it has none)."""
        return self._watchdog.pid if self._watchdog is not None else None

    @property
    def returncode(self) -> int | None:
        """The leader's exit status once it has exited (negative: killed by a signal)."""
        return self._returncode

    @property
    def running(self) -> bool:
        """Whether the leader is still running."""
        return self._pid is not None and not self._exited.is_set()

    def pids(self) -> list[int]:
        """Live processes of the server: the leader and all its descendants."""
        watchdog = self._watchdog
        if watchdog is None or self._released:
            return []
        return descendants(watchdog.pid)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the process's log (for error messages)."""
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - 64 * 1024))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ---- starting ------------------------------------------------------------------

    def start(self) -> ManagedProcess:
        """Launch the process (through the watchdog); returns once it has been forked."""
        if self._watchdog is not None:
            raise ProcessFailed(f"{self.argv[0]} was started already")
        config: dict[str, object] = {
            "argv": self.argv,
            "cwd": os.fspath(self.cwd) if self.cwd is not None else None,
            "env": self.env,
            "log": os.fspath(self.log_path),
            "stop_signal": self.stop_signal,
            "grace": self.grace,
            "cleanup": [os.fspath(p) for p in self.cleanup_paths],
        }
        if self.user is not None and self.user.uid != os.geteuid():
            if os.geteuid() != 0:
                raise ProcessFailed(
                    f"cannot run {self.argv[0]} as user {self.user.name!r}: "
                    "only root can switch users"
                )
            for path in self.own_paths:
                chown_tree(path, self.user)
            config.update(uid=self.user.uid, gid=self.user.gid, groups=list(self.user.groups))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._watchdog = ReaperPipe(
                WATCHDOG_SCRIPT, config, stderr=log, on_line=self._on_status, on_eof=self._on_eof
            )
        if not self._launched.wait(READY_TIMEOUT):
            self._release()
            raise ProcessFailed(
                f"the watchdog did not report launching {self.argv[0]} within {READY_TIMEOUT:.0f}s",
                self.log_tail(),
            )
        if self._launch_error is not None:
            self._release()
            raise ProcessFailed(
                f"could not start {' '.join(self.argv)}: {self._launch_error}", self.log_tail()
            )
        return self

    def _on_status(self, raw: bytes) -> None:
        """One line the watchdog wrote (the protocol of ``_watchdog.py``)."""
        try:
            message = json.loads(raw)
        except ValueError:
            return
        if "started" in message:
            self._pid = int(message["started"])
            self._launched.set()
        elif "error" in message:
            self._launch_error = str(message["error"])
            self._launched.set()
        elif "exited" in message:
            self._returncode = int(message["exited"])
            self._exited.set()
        elif "done" in message:
            self._replies.put(message)

    def _on_eof(self) -> None:
        """The watchdog is gone: no more news."""
        if not self._launched.is_set():
            self._launch_error = self._launch_error or "the watchdog exited"
            self._launched.set()
        self._exited.set()
        self._replies.put({"done": None, "survivors": []})

    def _command(self, command: str, timeout: float) -> list[int]:
        """Ask the watchdog to ``kill`` or ``stop``; the pids that survived (normally none)."""
        while not self._replies.empty():  # drop stale replies
            self._replies.get_nowait()
        if self._watchdog is None or not self._watchdog.send(command):
            return []
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise ProcessFailed(
                f"the watchdog did not carry out {command!r} within {timeout:.0f}s"
            ) from None
        survivors = reply.get("survivors") or []
        return [int(p) for p in survivors]  # type: ignore[union-attr]

    # ---- waiting -------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the leader to exit; its exit status, or ``None`` on timeout."""
        self._exited.wait(timeout)
        return self._returncode if self._exited.is_set() else None

    def wait_ready(
        self,
        probe: Callable[[], object],
        timeout: float = 30.0,
        *,
        what: str | None = None,
    ) -> None:
        """Poll ``probe`` until it returns a true value (exceptions mean "not yet").

        Polls quickly at first (every 10 ms, backing off to 200 ms) and wakes at once if
        the process exits. Raises :class:`ProcessFailed` with the last lines of the log
        if the process exits first or ``timeout`` passes.
        """
        what = what or os.path.basename(self.argv[0])
        deadline = time.monotonic() + timeout
        delay = 0.01
        last_error: BaseException | None = None
        while True:
            if not self.running:
                raise ProcessFailed(
                    f"{what} exited with status {self._returncode} before it was ready",
                    self.log_tail(),
                )
            try:
                if probe():
                    return
                last_error = None
            except Exception as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                because = f" (last probe: {type(last_error).__name__}: {last_error})"
                raise ProcessFailed(
                    f"{what} was not ready within {timeout:.0f}s" + (because if last_error else ""),
                    self.log_tail(),
                )
            self._exited.wait(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.2)

    # ---- stopping ------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL every process of the server now; returns when they are all gone.

        The watchdog stays (and still guards the cleanup paths) until :meth:`stop`.
        """
        with self._lock:
            if self._watchdog is None or self._released:
                return
            survivors = self._command("kill", timeout=20.0)
            self._exited.wait(5.0)
            self._paused = False
        if survivors:
            raise ProcessFailed(f"processes survived SIGKILL: {survivors}")

    def pause(self) -> list[int]:
        """SIGSTOP every process of the server (the whole tree, not one pid): it stops
        answering until :meth:`resume`, while its sockets stay open (a client's connect
        succeeds, its requests wait). Returns the pids stopped.

        The tree is listed and signalled again until a listing shows no process that was
        not signalled, so a child forked meanwhile is stopped too; it returns once every
        one of them is seen stopped (a signal is delivered asynchronously), or after
        :data:`_PAUSE_TIMEOUT` seconds. :meth:`kill` and :meth:`stop` work on a paused
        server (the watchdog continues the tree after the stop signal).
        """
        with self._lock:
            stopped: set[int] = set()
            for _ in range(50):
                todo = [p for p in self.pids() if p not in stopped]
                if not todo:
                    break
                for pid in todo:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
            deadline = time.monotonic() + _PAUSE_TIMEOUT
            while time.monotonic() < deadline and not all(_is_stopped(p) for p in stopped):
                time.sleep(0.002)
            self._paused = bool(stopped)
            return sorted(stopped)

    def resume(self) -> list[int]:
        """SIGCONT every process of the server (after :meth:`pause`); the pids continued."""
        with self._lock:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self._paused = False
            return pids

    @property
    def paused(self) -> bool:
        """Whether :meth:`pause` stopped the server and nothing continued it since."""
        return self._paused and self.running

    def stop(self, grace: float | None = None) -> None:
        """Stop signal to the leader, SIGKILL to the whole tree after ``grace`` seconds,
        then release the watchdog. Idempotent; fine after :meth:`kill` or an exit, and
        on a paused server (the watchdog continues it after the stop signal)."""
        grace = self.grace if grace is None else grace
        with self._lock:
            if self._watchdog is None or self._released:
                return
            try:
                self._command(f"stop {grace}", timeout=grace + 20.0)
                self._exited.wait(5.0)
            finally:
                self._paused = False
                self._release()

    close = stop

    def _release(self) -> None:
        """Tell the watchdog we are done, close our end of the pipe, reap it."""
        self._released = True
        if self._watchdog is not None:
            self._watchdog.release()

    def __enter__(self) -> ManagedProcess:
        return self.start() if self._watchdog is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited {self._returncode}"
        return f"<ManagedProcess {os.path.basename(self.argv[0])} pid={self._pid} {state}>"


def run_to_completion(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_path: Path,
    timeout: float = 120.0,
    **kwargs: Any,
) -> None:
    """Run a one-shot command (e.g. ``initdb``) as a :class:`ManagedProcess`, to its end.

    Tied to our lifetime like a server; raises :class:`ProcessFailed` with the log's
    tail if it exits non-zero or runs past ``timeout``.
    """
    process = ManagedProcess(argv, log_path=log_path, **kwargs)
    process.start()
    try:
        code = process.wait(timeout)
        if code is None:
            raise ProcessFailed(
                f"{os.path.basename(process.argv[0])} did not finish within {timeout:.0f}s",
                process.log_tail(),
            )
        if code != 0:
            raise ProcessFailed(
                f"{' '.join(process.argv)} failed with status {code}", process.log_tail()
            )
    finally:
        process.stop(grace=0.0)  # kills whatever is left and releases the watchdog


def remove_tree(path: Path) -> None:
    """Remove a file or folder if it exists (idempotent)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
