"""What every figure a benchmark prints carries: the command that reproduces it, the
machine's load when it was measured, and the date and commit it was measured on.

Every script in ``benchmarks/`` prints, first, a :func:`header` (date, commit, machine,
the command line that reproduces the whole run, the load now), and beside each figure (a
table row, a cell, a result line) the load while it was measured (:class:`LoadWatch`, or
:func:`load_now` at the time of a cell) and, where the figure has a narrower command
than the whole run (one class, one backend), that command (:func:`command`). At the end,
:func:`history_rows` prints the figures as rows ready for ``BENCHMARKS.md``'s history
(date, commit, figure, load, command), which keeps old figures instead of overwriting them.

The load is the load average (1, 5, 15 min: runnable processes, the benchmark's own
included) with the number of cores beside it: on a shared machine it says how much of
the machine the figure had. Secrets never reach the output: a password in a URL of the
command line is masked.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent
#: ``scheme://user:password@`` in a command line: the password is masked.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/:@\s]*:)[^@\s]*(?P<at>@)", re.I)


def cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Load:
    """The load average (1, 5, 15 min) and the cores it is shared by."""

    one: float
    five: float
    fifteen: float
    cores: int

    def __str__(self) -> str:
        return f"load {self.one:.1f} / {self.five:.1f} / {self.fifteen:.1f} on {self.cores} cores"

    @property
    def short(self) -> str:
        return f"load {self.one:.1f} on {self.cores} cores"


def load_now() -> Load:
    one, five, fifteen = os.getloadavg()
    return Load(one, five, fifteen, cores())


def load_range(low: float, high: float, cores: int | str) -> str:
    """``"load 2.1-4.3 on 2 cores"`` (one figure when both round to the same)."""
    span = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
    return f"load {span} on {cores} cores"


def load_span(loads: Sequence[Load]) -> str:
    """:func:`load_range` of the lowest and highest 1-minute load of ``loads``."""
    if not loads:
        return "load ?"
    ones = [ld.one for ld in loads]
    return load_range(min(ones), max(ones), loads[0].cores)


class LoadWatch:
    """Samples the load every ``interval`` seconds while in its ``with`` block (and at
    its start and end): :attr:`span` is what a figure measured inside it had."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.loads: list[Load] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LoadWatch:
        self.loads.append(load_now())
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.loads.append(load_now())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.loads.append(load_now())

    @property
    def span(self) -> str:
        return load_span(self.loads)


def mask(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` masked."""
    return _URL_PASSWORD.sub(r"\g<head>***\g<at>", text)


def command(*args: str, script: str | None = None) -> str:
    """The shell command that runs ``script`` (default: the running one, as
    ``python benchmarks/<name>.py``) with ``args`` (default: this run's own arguments),
    from the repository root; passwords masked."""
    if script is None:
        path = Path(sys.argv[0]).resolve()
        script = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else sys.argv[0]
    argv = list(args) if args else sys.argv[1:]
    return mask(shlex.join(["python", script, *argv]))


def commit() -> str:
    """The checkout's commit (short), ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


def today() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def header() -> str:
    """Printed first by every benchmark: when, on what, how to reproduce, the load now."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            f"date: {now}; commit {commit()}",
            f"machine: {cores()} cores, {platform.machine()}, "
            f"{platform.python_implementation()} {platform.python_version()}",
            f"command: {command()}  (from the repository root)",
            f"at start: {load_now()}",
        ]
    )


def figure(text: str, load: str, cmd: str | None = None) -> str:
    """One result line: ``text  [load …; command …]``."""
    return f"{text}  [{load}; {cmd or command()}]"


def history_rows(rows: Sequence[tuple[str, str, str]], sha: str | None = None) -> str:
    """``(figure, load, command)`` rows as the history table's rows of ``BENCHMARKS.md``
    (``| date | commit | figure | load | command |``), under a title line; ``sha`` is the
    commit measured (default: the checkout's, as it is when this is called)."""
    date, sha = today(), sha or commit()
    lines = ["history rows (BENCHMARKS.md): | date | commit | figure | load | command |"]
    lines += [f"| {date} | {sha} | {fig} | {load} | `{cmd}` |" for fig, load, cmd in rows]
    return "\n".join(lines)
