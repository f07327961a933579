"""The reaper pipe: the kit's end of a helper process that cleans up when the kit dies.

Three things the kit starts must not outlive it, however it dies: a server process (a
:class:`~rdq_compliance.provision.process.ManagedProcess`, launched by ``_watchdog.py``),
a server container (``_container_reaper.py``) and the network namespaces of a partition
(``_netns_reaper.py``). Each is guarded the same way, by a *reaper*: a script beside this
module (stdlib only, run as ``python -I -S``, never imported) whose stdin is the read end
of a pipe whose only writer is the process that started it. The reaper reads a first
line (a JSON object: what to guard), answers a first line on its stdout (its *greeting*:
``ready``, or the watchdog's ``{"started": pid}``), then reads commands. ``quit`` (the kit
cleaned up itself) or end of file (the kit is gone: the kernel closes a dead process's
descriptors, SIGKILL included) make it clean up what it guards and exit.

:class:`ReaperPipe` is that write end, once for all three reapers:

- **no leaked descriptor**: the write end is non-inheritable (PEP 446), is registered
  *before* the reaper starts for closing in every child forked from this process
  (``os.register_at_fork``; so a forked worker does not keep a server alive), and is
  closed again when the reaper cannot be started at all;
- **a ready timeout**: :meth:`ReaperPipe.greeting` waits for the greeting at most
  :data:`READY_TIMEOUT` seconds, and :func:`start_reaper` fails with
  :class:`ReaperNotReady` saying why (no answer, an exit, another answer);
- **one wait**: :meth:`ReaperPipe.release` says ``quit``, closes the write end and waits at
  most :data:`RELEASE_TIMEOUT` seconds for the reaper to finish its clean-up, then
  SIGKILLs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

__all__ = [
    "READY_TIMEOUT",
    "RELEASE_TIMEOUT",
    "ReaperNotReady",
    "ReaperPipe",
    "start_reaper",
]

#: Seconds a reaper may take to greet: a ``python -I -S`` start (and, for the watchdog,
#: the fork of the server) takes well under a second; this leaves room for a machine
#: under heavy load.
READY_TIMEOUT = 15.0
#: Seconds a released reaper may take to clean up and exit before it is SIGKILLed: the
#: slowest clean-up, removing a container and its volume through the Docker API (calls
#: retried, each up to 30 s), can take tens of seconds on a loaded engine; a watchdog or
#: namespace reaper exits at once.
RELEASE_TIMEOUT = 60.0
#: How long :meth:`ReaperPipe.release` waits for the reading thread to see end of file.
_READER_JOIN = 5.0

#: The write ends of this process's reaper pipes; closed in forked children, so that only
#: the process that started a reaper keeps what it guards alive.
_WRITE_ENDS: set[int] = set()


def _close_write_ends_in_child() -> None:
    for fd in list(_WRITE_ENDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _WRITE_ENDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_write_ends_in_child)


class ReaperNotReady(RuntimeError):
    """A reaper did not greet with ``ready`` (the message says what it did instead)."""


class ReaperPipe:
    """The kit's end of one reaper process (see the module docstring).

    ``config`` is sent as the first line. ``stderr`` is where the reaper's own messages
    go (inherited when ``None``). ``on_line`` gets every line the reaper writes on its
    stdout, the greeting included, and ``on_eof`` is called once it writes no more (it
    exited); both run on a reading thread of this object.
    """

    def __init__(
        self,
        script: Path,
        config: Mapping[str, object],
        *,
        stderr: IO[bytes] | None = None,
        on_line: Callable[[bytes], None] | None = None,
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        self.script = Path(script)
        self._on_line = on_line
        self._on_eof = on_eof
        self._greeting: bytes | None = None
        self._greeted = threading.Event()
        read_end, write_end = os.pipe()  # both non-inheritable (PEP 446)
        _WRITE_ENDS.add(write_end)  # before the start: no window for a fork to copy it
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.fspath(self.script)],
                stdin=read_end,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,  # no terminal signals; outlives us to clean up
                close_fds=True,
            )
        except BaseException:
            _WRITE_ENDS.discard(write_end)
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._control: int | None = write_end
        self._reader = threading.Thread(
            target=self._read, name=f"rdq-reaper-{self.process.pid}", daemon=True
        )
        self._reader.start()
        self.send(json.dumps(dict(config)))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def released(self) -> bool:
        return self._control is None

    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        with contextlib.suppress(OSError, ValueError):  # closed under us by release()
            for raw in stdout:
                if self._on_line is not None:
                    self._on_line(raw)
                if not self._greeted.is_set():
                    self._greeting = raw.strip()
                    self._greeted.set()
        if self._on_eof is not None:
            self._on_eof()
        self._greeted.set()  # it exited without a greeting: ``greeting()`` says b""

    def greeting(self, timeout: float | None = None) -> bytes | None:
        """The reaper's first line (stripped); ``b""`` if it exited without one, ``None``
        if it said nothing within ``timeout`` seconds (:data:`READY_TIMEOUT`)."""
        if not self._greeted.wait(READY_TIMEOUT if timeout is None else timeout):
            return None
        return self._greeting if self._greeting is not None else b""

    def send(self, line: str) -> bool:
        """Write ``line`` (and a newline) to the reaper; ``False`` once released or gone."""
        control = self._control
        if control is None:
            return False
        try:
            os.write(control, (line + "\n").encode())
        except OSError:
            return False
        return True

    def release(self) -> None:
        """Tell the reaper we are done (``quit``: it cleans up what it guards *now*), close
        our end and wait for it to exit (:data:`RELEASE_TIMEOUT`). Idempotent."""
        control, self._control = self._control, None
        if control is None:
            return
        with contextlib.suppress(OSError):
            os.write(control, b"quit\n")
        _WRITE_ENDS.discard(control)  # before the close: the number may be reused at once
        with contextlib.suppress(OSError):
            os.close(control)
        try:
            self.process.wait(RELEASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(_READER_JOIN)
        if self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()


def start_reaper(script: Path, config: Mapping[str, object], *, what: str) -> ReaperPipe:
    """Start the reaper ``script`` guarding ``config``; return once it greets ``ready``.

    Raises :class:`ReaperNotReady` (``"the <what> did not start: ..."``, saying why) after
    releasing it when it does not greet so within :data:`READY_TIMEOUT` seconds.
    """
    pipe = ReaperPipe(script, config)
    timeout = READY_TIMEOUT
    greeting = pipe.greeting(timeout)
    if greeting == b"ready":
        return pipe
    pipe.release()
    if greeting is None:
        why = f"it did not answer within {timeout:g}s"
    elif greeting == b"":
        why = f"it exited with status {pipe.process.returncode}"
    else:
        why = f"it answered {greeting[:200]!r} instead of b'ready'"
    raise ReaperNotReady(f"the {what} did not start: {why}")
