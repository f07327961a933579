"""Process and timing helpers of the kit's own tests (the server contract's bodies, the
backends' and the provisioning tests): which processes are alive, waiting for them to
go, the kit's watchdogs, a call timed, a call retried while it is BackendUnavailable."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from rdq_core.errors import BackendUnavailable
from tests._waiting import HANG_S

T = TypeVar("T")


def alive(pids: list[int]) -> list[int]:
    """The ``pids`` still running (a zombie is not)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` s for ``pids`` to end; those still alive."""
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


def processes_using(path: Path) -> list[int]:
    """Any process whose command line names ``path`` (a leak check)."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if str(path) in " ".join(proc.info["cmdline"] or []):
            out.append(proc.info["pid"])
    return out


def timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    """How long ``call`` took, and what it raised (None: it returned)."""
    began = time.monotonic()
    try:
        call()
    except BaseException as exc:
        return time.monotonic() - began, exc
    return time.monotonic() - began, None


def until_works(call: Callable[[], T], within: float = HANG_S) -> T:
    """``call()``, retried while it is ``BackendUnavailable``, for up to ``within`` s (by
    default a hang guard: the wait ends when the call works)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
