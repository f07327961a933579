"""Clock skew: worker slots whose processes run under libfaketime.

``[faults.clock_skew]``: ``workers`` slots (at most ``workers.count``; which ones, and
each one's offset and drift, drawn from the seed) run every worker they hold under
libfaketime (``FAKETIME="<offset> x<drift>"``, see
:mod:`rdq_compliance.chaos.libfaketime`): the worker's time of day is off by
``offset`` at its start and runs ``drift`` times as fast; its timers (the monotonic
clock) and its journal stay true. ``offset`` is a signed duration or ``[min, max]`` of
them (default ``["-3s", "3s"]``); ``drift`` a rate in (0, 10] or ``[min, max]``
(default ``1``: no drift). A correct backend judges leases by the storage's clock and is
unaffected; one that takes the time from its client is caught by the ``storage-clock``
rule.

The skew is no event of the fault window: it is set up before the workers start
(:meth:`ClockSkewFaults.setup`: :func:`skews_for` draws the skews, the launcher places
them, a slot's own on this machine, a whole host's on other hosts), the fleet starts the
slots' workers skewed (a respawned worker keeps its slot's), and each such worker is
journaled (``clock_skew``) just before it starts (:func:`skew_journal`). Skipped, with
a note, where libfaketime is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rdq_compliance.chaos.events import INFO
from rdq_compliance.chaos.faults.family import (
    Counts,
    FaultFamily,
    Legend,
    Mark,
    Row,
    SetupContext,
    Style,
    TimelineDraft,
)
from rdq_compliance.chaos.faults.tables import ScenarioError, Table
from rdq_compliance.chaos.faults.windows import Marked, Requirement
from rdq_compliance.chaos.libfaketime import (
    INSTALL_HINT,
    Skew,
    find_libfaketime,
    plan_skews,
)

if TYPE_CHECKING:
    from rdq_compliance.chaos.journal_observer import LockedJournal


@dataclass(frozen=True)
class ClockSkewSettings:
    #: Worker slots run under libfaketime (``[faults.clock_skew] workers``).
    skewed_workers: int = 0
    #: A skewed slot's offset from true time (seconds), drawn from this range.
    skew_offset: tuple[float, float] = (-3.0, 3.0)
    #: A skewed slot's clock rate, drawn from this range (1.0: true rate).
    skew_drift: tuple[float, float] = (1.0, 1.0)


@dataclass
class ClockSkewCounts(Counts):
    #: Workers started under a skewed clock (a respawn in a skewed slot counts again).
    clock_skews: int = 0
    #: The skew of each skewed slot (``"+4.213s, rate x1.0420"``), by slot.
    skewed_slots: dict[int, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "clock_skews": self.clock_skews,
            "skewed_slots": {str(k): v for k, v in sorted(self.skewed_slots.items())},
        }


def _live(c: ClockSkewCounts) -> str:
    if not c.skewed_slots:
        return "-"
    return f"{c.clock_skews} workers ({len(c.skewed_slots)} skewed slots)"


class ClockSkewFaults(FaultFamily[ClockSkewSettings, ClockSkewCounts]):
    name = "clock_skew"
    tables = ("clock_skew",)
    rows = (
        Row(
            80,
            "clock_skews",
            label="clock skews",
            summary="clock-skewed workers",
            live=_live,
            said=lambda c: f"{c.clock_skews} skewed workers",
        ),
    )
    marks = ("clock_skew",)
    windows = (Marked("skewed worker", "clock_skew", 70),)
    exercises: ClassVar[Mapping[str, tuple[Requirement, ...]]] = {
        # a skewed worker's heartbeats and reports are judged by the storage's clock
        "clock_skew": (
            Requirement("storage-clock", "skewed worker", ("extend",)),
            Requirement("fencing", "skewed worker", ("complete", "reschedule", "dead_letter")),
        ),
    }
    styles = (Style("skew", "strip", "#9b59b6", "0.8"),)
    legend = (Legend(100, "clock skewed (libfaketime)", "background:#9b59b6"),)

    def parse(self, faults: Table) -> ClockSkewSettings:
        kt = faults.table("clock_skew")
        skewed = kt.integer("workers", 0, low=0, high=256)
        offset = kt.offset_range("offset", ClockSkewSettings.skew_offset)
        drift = kt.number_range("drift", ClockSkewSettings.skew_drift, low=0.0)
        if drift[0] <= 0 or drift[1] > 10:
            raise ScenarioError(
                f"{kt.key('drift')}: a clock rate must be in (0, 10] (1 = true rate), got {drift}"
            )
        kt.done(("workers", "offset", "drift"))
        return ClockSkewSettings(skewed, offset, (float(drift[0]), float(drift[1])))

    def check(self, settings: ClockSkewSettings, *, workers: int) -> None:
        if settings.skewed_workers > workers:
            raise ScenarioError(
                f"faults.clock_skew.workers: {settings.skewed_workers} skewed slots, but the "
                f"fleet has {workers} (workers.count); give at most {workers}"
            )

    def setup(self, ctx: SetupContext) -> None:
        """The skewed slots' clocks, placed by the launcher (``ctx.skews``), and the
        fleet's hook that journals each worker started skewed (``ctx.on_skew``)."""
        counts = ctx.counts(self)
        notes: list[str] = []
        skews, library = skews_for(ctx.settings(self), ctx.seed, ctx.slots, counts, notes)
        for note in notes:
            ctx.note(note)
        if library is None:
            return
        placed = ctx.launcher.place_skews(skews, library)
        counts.skewed_slots = {s.slot: _described(s, host) for s, host in placed}
        ctx.skews = {s.slot: s for s, _ in placed}
        ctx.on_skew = skew_journal(ctx.journal, counts)

    def new_counts(self) -> ClockSkewCounts:
        return ClockSkewCounts()

    def details(self, counts: ClockSkewCounts) -> list[str]:
        if not counts.skewed_slots:
            return []
        skews = "; ".join(f"slot {k} {v}" for k, v in sorted(counts.skewed_slots.items()))
        return [f"  clocks skewed (libfaketime): {skews}"]

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        target = str(event.get("target", ""))
        offset, drift = event.get("offset"), event.get("drift")
        off = f"{offset:+.3f}s" if isinstance(offset, (int, float)) else "?"
        rate = f"x{drift:.4f}" if isinstance(drift, (int, float)) else "x?"
        label = (
            f"{target} clock skewed {off}, rate {rate} (libfaketime, slot {event.get('slot', '?')})"
        )
        draft.marks.append(Mark(event.get("t", 0.0), "skew", target, label, tag=off))


FAMILY = ClockSkewFaults()


def skews_for(
    settings: ClockSkewSettings, seed: int, slots: int, counts: ClockSkewCounts, notes: list[str]
) -> tuple[tuple[Skew, ...], Path | None]:
    """The skewed slots of a fleet of ``slots`` and the libfaketime library; none (and
    a note in ``notes`` saying why) where libfaketime is not installed."""
    if not settings.skewed_workers:
        return (), None
    library = find_libfaketime()
    if library is None:
        notes.append(
            f"clock_skew x{settings.skewed_workers}: skipped, libfaketime is not installed "
            f"({INSTALL_HINT})"
        )
        return (), None
    skews = plan_skews(
        seed, slots, settings.skewed_workers, settings.skew_offset, settings.skew_drift
    )
    for skew in skews:
        counts.skewed_slots[skew.slot] = _described(skew)
    return skews, library


def _described(skew: Skew, host: str | None = None) -> str:
    """A skewed slot's clock as the counters say it (and whose it is: a host's)."""
    text = f"{skew.offset:+.3f}s, rate x{skew.drift:.4f}"
    return f"{text} (host {host})" if host is not None else text


def skew_journal(journal: LockedJournal, counts: ClockSkewCounts) -> Callable[[str, Skew], None]:
    """The fleet's ``on_skew``: journal (and count) each worker started skewed."""

    def journal_skew(name: str, skew: Skew) -> None:
        journal.write(
            INFO,
            "fault",
            kind="clock_skew",
            target=name,
            slot=skew.slot,
            offset=skew.offset,
            drift=skew.drift,
            faketime=skew.faketime,
        )
        counts.clock_skews += 1

    return journal_skew
