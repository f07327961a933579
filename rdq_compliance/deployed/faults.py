"""The nemesis's faults as the deployed checker reads them: what was done, to which
workers, over which span of time.

Times are the harness's wall clock (seconds since the epoch), the time base the checker
compares everything in; a probe line's time is read from its worker's clock, which a
``clock-skew`` fault sets ahead of true time by ``offset`` (:func:`true_time` takes it
back).

================= ============================================ =====================
kind              what                                         ``end``
================= ============================================ =====================
``kill``          SIGKILL of a worker (all its processes, or   when it was started
                  the ``part``/``pids`` named)                 again
``pause``         SIGSTOP of a worker (or of one part)         SIGCONT
``cut``           the worker's connections to the server cut   —  (an instant)
``partition``     the worker cannot reach the server           healed
``server-kill``   the server SIGKILLed (every worker touched)  restarted
``server-freeze`` the server SIGSTOPped (every worker touched) SIGCONT
``clock-skew``    the worker's clock reads ``offset`` s ahead  set right
================= ============================================ =====================

``end`` ``None``: not undone before the checker ran (a kill never followed by a restart).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["FAULT_KINDS", "SERVER_KINDS", "Fault", "FaultKind", "true_time"]

FaultKind = Literal[
    "kill", "pause", "cut", "partition", "server-kill", "server-freeze", "clock-skew"
]  # fmt: skip
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
#: The kinds that hit the server, hence every worker.
SERVER_KINDS = frozenset({"server-kill", "server-freeze"})


@dataclass(frozen=True)
class Fault:
    """One fault: its ``kind``, its span (``start``, ``end``), the worker names it
    ``targets`` (none for a server fault: it touches every worker), for a kill or pause of
    one part of a worker that ``part`` and the ``pids`` it hit (``None``: every process of
    the targets), for a clock skew the ``offset`` in seconds."""

    kind: FaultKind
    start: float
    end: float | None = None
    targets: tuple[str, ...] = ()
    part: str | None = None
    pids: frozenset[int] | None = None
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {list(FAULT_KINDS)}")
        if self.kind in SERVER_KINDS and self.targets:
            raise ValueError(f"a {self.kind} fault touches every worker: it names no target")
        if self.kind not in SERVER_KINDS and not self.targets:
            raise ValueError(f"a {self.kind} fault names the workers it targets")
        if self.end is not None and self.end < self.start:
            raise ValueError(f"a fault ends ({self.end}) before it starts ({self.start})")
        if (self.part is not None or self.pids is not None) and self.kind not in ("kill", "pause"):
            raise ValueError("only a kill or a pause hits one part of a worker")
        if not math.isfinite(self.offset) or (self.offset and self.kind != "clock-skew"):
            raise ValueError("only a clock-skew fault has an offset")

    @property
    def until(self) -> float:
        """The span's end, ``inf`` when it was never undone."""
        return math.inf if self.end is None else self.end

    def touches(self, worker: str) -> bool:
        """Whether the fault hit ``worker`` (a server fault hits them all)."""
        return self.kind in SERVER_KINDS or worker in self.targets

    def during(self, a: float, b: float) -> bool:
        """Whether the fault's span meets ``[a, b]`` (an instant fault at its start)."""
        return self.start <= b and self.until >= a

    def stops(self, worker: str, pid: int) -> bool:
        """Whether this is a kill that ended process ``pid`` of ``worker``."""
        return (
            self.kind == "kill"
            and worker in self.targets
            and (self.pids is None or pid in self.pids)
        )

    def describe(self) -> str:
        who = ", ".join(self.targets) or "the server"
        if self.part:
            who += f" ({self.part})"
        end = "never undone" if self.end is None else f"to {self.end:.3f}"
        return f"{self.kind} of {who} from {self.start:.3f} {end}"


def true_time(worker: str, t: float, faults: Iterable[Fault]) -> float:
    """A time ``t`` read from ``worker``'s clock, in true time: less the offset of each
    clock skew of that worker in effect then."""
    out = t
    for f in faults:
        if f.kind == "clock-skew" and worker in f.targets and f.start <= t - f.offset < f.until:
            out -= f.offset
    return out
