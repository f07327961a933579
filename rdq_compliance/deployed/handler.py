"""The probe handler's body, for a deployed system written in Python: journal the start,
do what the job asks, journal the end, then return or raise as the library expects.

A system's job function (an rq job, a dramatiq actor, a procrastinate task, ...) calls
:func:`perform` with the job's id as the library names it, the behaviour and seconds the
harness put in the job's arguments, the attempt number if the library gives one, and
the library's own ways to ask for a retry or a hold: a callable that raises the
library's request (``raise Retry(...)``), or one that returns it, which ``perform`` then
returns for the job function to return (rq's ``return Retry(...)``). ``perform`` never
swallows what is raised: the library sees exactly what its handler would.

================ ===========================================================================
behaviour        what the handler does (the end line's outcome)
================ ===========================================================================
``succeed``      works ``seconds`` (a sleep; 0 by default), returns (``succeeded``)
``sleep``        sleeps ``seconds``, past the library's stall threshold (the library
                 heartbeats meanwhile), returns (``succeeded``)
``fail``         raises :class:`ProbeFailure` (``failed``)
``retry``        calls ``retry()``: raises or returns the library's retry request (``retry-asked``)
``hold``         calls ``hold()``: raises or returns the library's hold request (``held``)
================ ===========================================================================

An exception the library raises into the handler while it works (a time limit's
exception interrupting a sleep) is journaled as ``failed`` with its type in the detail,
then raised on.

The end line is written before the handler returns or raises, so a worker killed after
it and before the library records the outcome leaves an end line for an outcome the
library never saw: the checker reads the final state from the library, not from the probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rdq_compliance.deployed.probe import ProbeWriter

__all__ = ["ProbeFailure", "perform", "writer"]

_WRITER: ProbeWriter | None = None


class ProbeFailure(RuntimeError):
    """What the probe handler raises for a job told to fail."""


def writer() -> ProbeWriter:
    """This process's probe writer, opened from the environment the harness set
    (``RDQ_PROBE_PATH``, ``RDQ_PROBE_WORKER``) on first use."""
    global _WRITER
    if _WRITER is None:
        _WRITER = ProbeWriter.from_env()
    return _WRITER


def perform(
    job: str,
    behaviour: str,
    seconds: float = 0.0,
    *,
    attempt: int | None = None,
    retry: Callable[[], object] | None = None,
    hold: Callable[[], object] | None = None,
    probe: ProbeWriter | None = None,
) -> object:
    """Run one execution of the probe handler for ``job`` (see the module's table);
    ``None``, or what ``retry()``/``hold()`` returned."""
    w = probe or writer()
    if behaviour in ("retry", "hold") and (retry if behaviour == "retry" else hold) is None:
        raise ValueError(f"behaviour {behaviour!r} needs the library's way to ask for it")
    if behaviour not in ("succeed", "sleep", "fail", "retry", "hold"):
        raise ValueError(f"unknown probe behaviour {behaviour!r}")
    exec_id = w.started(job, attempt)
    if behaviour in ("succeed", "sleep") and seconds > 0:
        try:
            time.sleep(seconds)
        except BaseException as exc:
            w.ended(exec_id, "failed", f"interrupted by {type(exc).__name__}: {exc}")
            raise
    if behaviour in ("succeed", "sleep"):
        w.ended(exec_id, "succeeded")
        return None
    if behaviour == "fail":
        w.ended(exec_id, "failed", "told to fail")
        raise ProbeFailure(f"probe: job {job} told to fail")
    ask = retry if behaviour == "retry" else hold
    assert ask is not None
    w.ended(exec_id, "retry-asked" if behaviour == "retry" else "held")
    return ask()
