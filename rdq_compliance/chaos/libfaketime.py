"""Clock skew for worker processes: libfaketime found, one skew per slot, its environment.

A skewed worker runs with ``LD_PRELOAD=<libfaketime.so.1>`` and ``FAKETIME="+4.5 x1.1"``
(libfaketime's relative-offset format: a sign, seconds, then ``x<rate>``: the faked wall
clock starts ``offset`` seconds off the true one and runs ``rate`` times as fast; see
``faketime(1)``, "advanced time specification"). ``FAKETIME_DONT_FAKE_MONOTONIC=1`` keeps
``CLOCK_MONOTONIC`` true, so the worker's timers (heartbeats, polls, timeouts, all on
``time.monotonic()``) keep real time: only what the worker reads as *the time of day*
(``time.time()``, ``datetime.now()``) is skewed — exactly what a backend that takes time
from the client would send to the store.

Two things the harness relies on stay true in a skewed worker:

- its **journal times**: the ``t`` of every event orders events of different processes in
  real time, so a skewed worker journals ``time.monotonic() + base`` where ``base`` is the
  harness's ``time.time() - time.monotonic()`` (``CLOCK_MONOTONIC`` is system-wide and not
  faked), see :func:`true_time`;
- its **sleeps**: libfaketime 0.9.10 (Debian 12) breaks ``clock_nanosleep(CLOCK_MONOTONIC,
  TIMER_ABSTIME)`` when the monotonic clock is not faked (it passes a negative time to the
  kernel: ``time.sleep`` raises ``OSError: [Errno 22]`` on Python >= 3.11;
  ``wolfcw/libfaketime#426``), so a skewed worker replaces ``time.sleep`` with a timed
  wait on a lock (``sem_clockwait`` on the real monotonic clock), see :func:`patch_sleep`.

:func:`plan_skews` draws each skewed slot's offset and drift from the scenario's seed (a
pure function); a worker respawned in a skewed slot keeps the slot's skew.
"""

from __future__ import annotations

import glob
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Where Debian-style systems keep libfaketime (multiarch), and the older layouts.
_SEARCH = (
    "/usr/lib/*-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/libfaketime.so.1",
)

#: How to get libfaketime where it is missing (the note of a skipped skew says so).
INSTALL_HINT = "install it (Debian/Ubuntu: apt-get install faketime libfaketime)"

#: The environment variable that points the search at a given library instead.
LIBRARY_ENV = "RDQ_LIBFAKETIME"

#: The kit's ``sitecustomize`` folder (``faketime_site/sitecustomize.py``): first on a
#: Python process's ``PYTHONPATH`` with :data:`PATCH_SLEEP_ENV` set, it applies
#: :func:`patch_sleep` before the process's own code runs (a queue library's worker).
SITE = Path(__file__).with_name("faketime_site")
PATCH_SLEEP_ENV = "RDQ_PATCH_SLEEP"


def find_libfaketime() -> Path | None:
    """The libfaketime preload library of this machine (``$RDQ_LIBFAKETIME`` if set),
    or ``None``."""
    named = os.environ.get(LIBRARY_ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    for pattern in _SEARCH:
        for hit in sorted(glob.glob(pattern)):
            if os.path.isfile(hit):
                return Path(hit)
    return None


@dataclass(frozen=True)
class Skew:
    """One slot's clock: ``offset`` seconds off true time at the worker's start, running
    at ``drift`` times the true rate."""

    slot: int
    offset: float
    drift: float

    @property
    def faketime(self) -> str:
        """The ``FAKETIME`` value (libfaketime's ``"[+-]seconds x<rate>"``)."""
        return f"{self.offset:+.3f} x{self.drift:.4f}"

    def describe(self) -> str:
        return f"slot {self.slot}: {self.offset:+.3f}s, rate x{self.drift:.4f}"


def plan_skews(
    seed: int,
    slots: int,
    count: int,
    offset: tuple[float, float],
    drift: tuple[float, float],
) -> tuple[Skew, ...]:
    """The skews of ``count`` of the fleet's ``slots`` slots (which slots, offsets and
    drifts all drawn from ``seed``: the same seed, the same skews)."""
    rng = random.Random(f"rdq-clock-skew:{seed}")
    chosen = sorted(rng.sample(range(slots), min(count, slots)))
    return tuple(
        Skew(slot, round(rng.uniform(*offset), 3), round(rng.uniform(*drift), 4)) for slot in chosen
    )


def skew_env(skew: Skew, library: Path) -> dict[str, str]:
    """The variables that run a process under ``skew`` (added to its environment)."""
    return {
        "LD_PRELOAD": os.fspath(library),
        "FAKETIME": skew.faketime,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def offset_spec(offset: float) -> str:
    """libfaketime's spec of a clock ``offset`` seconds off true time, at the true rate
    (a clock file's text, :func:`follow_env`)."""
    return f"{offset:+.3f}\n"


def follow_env(
    clock_file: str, library: str, site: str, pythonpath: str | None = None
) -> dict[str, str]:
    """The variables that run a process under the spec in ``clock_file`` (an
    :func:`offset_spec`), read again at every clock call (``FAKETIME_NO_CACHE``): writing
    the file moves the process's time of day at once, without restarting it. Its monotonic
    clock stays true; a Python process gets the kit's ``sitecustomize`` from ``site``
    (:data:`SITE` on its host) first on its path (then ``pythonpath``), which keeps its
    ``time.sleep`` working (:func:`patch_sleep`)."""
    return {
        "LD_PRELOAD": library,
        "FAKETIME_TIMESTAMP_FILE": clock_file,
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        PATCH_SLEEP_ENV: "1",
        "PYTHONPATH": site + (os.pathsep + pythonpath if pythonpath else ""),
    }


def time_base() -> float:
    """``time.time() - time.monotonic()`` of this (unskewed) process: what a skewed one
    adds to its monotonic clock to read true time."""
    return time.time() - time.monotonic()


def true_time(base: float) -> Callable[[], float]:
    """A clock of true wall time for a process whose wall clock is faked."""

    def now() -> float:
        return time.monotonic() + base

    return now


def _lock_sleep(seconds: float) -> None:
    """``time.sleep`` on the real monotonic clock (a timed lock wait)."""
    if seconds != seconds or seconds < 0:
        raise ValueError("sleep length must be non-negative")
    if seconds == 0:
        os.sched_yield()
        return
    gate = threading.Lock()
    gate.acquire()
    end = time.monotonic() + seconds
    while True:  # a signal may end the wait early: wait out the rest
        left = end - time.monotonic()
        if left <= 0:
            return
        gate.acquire(timeout=left)


def patch_sleep() -> None:
    """Replace ``time.sleep`` in this process (see the module docstring: libfaketime's
    ``clock_nanosleep`` bug). Modules that call ``time.sleep(...)`` get the patched one."""
    time.sleep = _lock_sleep
