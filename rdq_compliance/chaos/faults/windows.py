"""What a fault family declares for coverage: the **windows** its faults open, and what
its faults must **exercise** in them (:class:`Requirement`).

A window is data, read from the harness's journaled ``fault`` events by their kind; the
shapes:

- :class:`Span`: run-wide, from a fault of an opening kind to the next of a closing kind
  (or the end of the run); a call that begins or is answered inside it falls in it (the
  server frozen: ``pause_server`` to ``resume_server``);
- :class:`WorkerSpan`: per worker, from an opening kind aimed at the worker to a closing
  kind aimed at it; a call made by any worker while some worker is in one falls in it,
  and, with a ``late`` name, a worker's call about a claim it made before one of its
  spans, answered after that span ended, falls in the late window (a paused worker's
  late report);
- :class:`Instant`: a moment a call can straddle (connections cut while it was in
  flight);
- :class:`Marked`: per worker, for the whole run: every call of a worker a fault of
  that kind aimed at (a worker whose clock is skewed).

:mod:`rdq_compliance.chaos.coverage` counts the calls of a campaign in the windows of
its fault families (ordered by ``rank``), and names no fault kind itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rdq_compliance.chaos.events import Event
from rdq_compliance.rule import OPS, Counted, Need, needs_of
from rdq_compliance.rules import DECLARED

__all__ = [
    "NEEDS",
    "Call",
    "Instant",
    "Marked",
    "Requirement",
    "Span",
    "Window",
    "WorkerSpan",
]

#: Rule id -> the calls that exercise it (from every rule's declaration).
NEEDS: dict[str, Need] = needs_of(DECLARED.values())


# ---- the windows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A call as coverage sees it: by ``proc``, about claim ``token``, begun at ``begun``
    and answered at ``t`` (journal seconds); ``claimed``: when ``proc`` made that claim
    (``None``: unknown)."""

    proc: str
    token: Any
    begun: float
    t: float
    claimed: float | None


#: The window names a call falls in (a name once for each of its spans the call is in).
Tracker = Callable[[Call], list[str]]


class Window(Protocol):
    """A declared window: its ``names``, ordered among every family's windows by ``rank``
    (the built-in ones use 10, 20, ...), the fault kinds it reads, and how it places
    calls once it has read a run's faults."""

    rank: int

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def kinds(self) -> tuple[str, ...]: ...

    def track(self, faults: Sequence[Event], end: float) -> Tracker:
        """Read the run's ``fault`` events (in time order; a window left open ends at
        ``end``), and say which of its names a call falls in."""
        ...


def _targets(ev: Event) -> list[Any]:
    return ev.get("targets") or [ev.get("target")]


@dataclass(frozen=True)
class _Between:
    """A window ``name`` opened by the faults of the kinds of ``opens`` and closed by
    those of ``closes``."""

    name: str
    opens: tuple[str, ...]
    closes: tuple[str, ...]
    rank: int

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def kinds(self) -> tuple[str, ...]:
        return (*self.opens, *self.closes)


@dataclass(frozen=True)
class _At:
    """A window ``name`` read from the faults of one ``kind``."""

    name: str
    kind: str
    rank: int

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.kind,)


@dataclass(frozen=True)
class Span(_Between):
    """A run-wide window ``name``: from a fault of a kind of ``opens`` to the next of a
    kind of ``closes`` (or the end of the run); a call that begins or is answered inside
    one such span falls in it (once for each span)."""

    def track(self, faults: Sequence[Event], end: float) -> Tracker:
        spans: list[tuple[float, float]] = []
        opened: float | None = None
        for ev in faults:
            kind = ev.get("kind")
            if kind in self.opens:
                opened = ev["t"] if opened is None else opened
            elif kind in self.closes and opened is not None:
                spans.append((opened, ev["t"]))
                opened = None
        if opened is not None:
            spans.append((opened, end))

        def tracker(call: Call) -> list[str]:
            return [self.name for a, b in spans if a <= call.begun <= b or a <= call.t <= b]

        return tracker


@dataclass(frozen=True)
class WorkerSpan(_Between):
    """A per-worker window ``name``: from a fault of a kind of ``opens`` aimed at a
    worker (its ``target``, or each of its ``targets``) to the next of a kind of
    ``closes`` aimed at it (or the end of the run). A call begun while some worker is in
    one falls in ``name``; with ``late``, a call of a worker about a claim it made before
    one of its own spans began, answered after that span ended, falls in ``late``."""

    late: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,) if self.late is None else (self.name, self.late)

    def track(self, faults: Sequence[Event], end: float) -> Tracker:
        spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        since: dict[Any, float] = {}
        for ev in faults:
            kind = ev.get("kind")
            for w in _targets(ev):
                if kind in self.opens:
                    since[w] = ev["t"]
                elif kind in self.closes and w in since:
                    spans[w].append((since.pop(w), ev["t"]))
        for w, t in since.items():
            spans[w].append((t, end))
        every = [s for worker_spans in spans.values() for s in worker_spans]

        def tracker(call: Call) -> list[str]:
            out = [self.name] if any(a <= call.begun <= b for a, b in every) else []
            start = call.claimed
            if (
                self.late is not None
                and start is not None
                and any(a >= start and b <= call.t for a, b in spans.get(call.proc, ()))
            ):
                out.append(self.late)
            return out

        return tracker


@dataclass(frozen=True)
class Instant(_At):
    """A window ``name`` at each fault of kind ``kind``: a call begun no later and
    answered no earlier than one falls in it."""

    def track(self, faults: Sequence[Event], end: float) -> Tracker:
        moments = [ev["t"] for ev in faults if ev.get("kind") == self.kind]

        def tracker(call: Call) -> list[str]:
            return [self.name] if any(call.begun <= c <= call.t for c in moments) else []

        return tracker


@dataclass(frozen=True)
class Marked(_At):
    """A window ``name`` for the whole run of each worker a fault of kind ``kind`` aimed
    at (its ``target``): every call of that worker falls in it."""

    def track(self, faults: Sequence[Event], end: float) -> Tracker:
        marked = {ev.get("target") for ev in faults if ev.get("kind") == self.kind}

        def tracker(call: Call) -> list[str]:
            return [self.name] if call.proc in marked else []

        return tracker


def ordered(windows: Iterable[Window]) -> list[Window]:
    """``windows`` by rank (declaration order among equal ranks)."""
    return sorted(windows, key=lambda w: w.rank)


# ---- what a fault must exercise -------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """A fault's promise: ``rule`` is exercised in ``window`` (a window's name, ``"calm"``
    or ``"all"``), by a call of ``ops`` (default: what :data:`NEEDS` says of the rule).
    The window is checked against the windows of the families composed with the fault's
    (:class:`~rdq_compliance.chaos.faults.combined.Families`)."""

    rule: str
    window: str
    ops: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.rule not in NEEDS:
            raise ValueError(
                f"no calls are known to exercise rule {self.rule!r}: its declaration gives no Need"
            )
        unknown = set(self.ops or ()) - set(OPS)
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}: use those of {OPS}")

    @property
    def need(self) -> Need:
        base = NEEDS[self.rule]
        return base if self.ops is None else Need(self.ops, " or ".join(self.ops))

    def met(self, cov: Counted) -> bool:
        return self.need.met(cov, None if self.window == "all" else self.window)

    def describe(self) -> str:
        where = "anywhere" if self.window == "all" else f"in the {self.window!r} window"
        return f"{self.need.what} call (ok or refused) {where}"
