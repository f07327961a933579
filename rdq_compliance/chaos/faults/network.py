"""Network faults: worker slots partitioned from the server, or losing packets.

``[faults.partition]``: ``count`` partitions, each of ``workers`` consecutive worker
slots (default 1) for ``lease * factor`` (``factor`` > 1, default ``[2, 3]``);
``[faults.loss]``: ``count`` losses of ``percent`` % of those slots' packets (default
20) for ``lease * factor`` (``factor`` > 0). Both land while tasks are still becoming
due.

- ``partition``, then ``heal``: every packet between those slots' namespaces and the
  server is dropped both ways (see :mod:`rdq_compliance.chaos.faults.worker_network`),
  so their calls hang — no reset, no error — while the rest of the fleet goes on and
  reclaims their expired leases; after the heal their late heartbeats and outcomes must
  be refused. The first slot is the planned one or, if its worker runs no handler now,
  the next one that does; a slot still cut off by an earlier fault waits;
- ``loss``, the milder variant: the same, but only ``percent`` % of those slots' packets
  are dropped (TCP retransmits: calls slow down, some past the lease), then ``heal``.

The network is set up before the workers start (:meth:`NetworkFaults.setup`) by the
launcher, which knows where they run: on this machine, a network namespace per slot
(:mod:`~rdq_compliance.chaos.faults.worker_network`: root, ``ip``, ``nft``, a server
reached at one TCP address); on other hosts, cuts of whole hosts
(:mod:`~rdq_compliance.chaos.faults.host_network`). Without one, the faults are left out
of the plan with a note saying why. A slot is never left cut off: a failed heal is
retried at every tick, and at the drain, and the network is taken down once the workers
stopped (:meth:`NetworkFaults.teardown`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rdq_compliance.chaos.events import INFO
from rdq_compliance.chaos.faults.family import (
    Counts,
    FaultFamily,
    Kind,
    Legend,
    Mark,
    NemesisContext,
    PlanContext,
    PlannedFault,
    Row,
    SetupContext,
    Style,
    TimelineDraft,
)
from rdq_compliance.chaos.faults.tables import ScenarioError, Table
from rdq_compliance.chaos.faults.windows import Requirement, WorkerSpan
from rdq_compliance.chaos.journal_observer import error_text

#: Why partitions are left out when the runner built no network for them.
NO_NETWORK = "the campaign built no network namespaces for its workers"


@dataclass(frozen=True)
class NetworkSettings:
    #: Network partitions: ``partition_workers`` worker slots cut off from the server (every
    #: packet dropped both ways: their calls hang) for ``lease * factor``, then healed.
    partitions: int = 0
    partition_workers: int = 1
    partition_factor: tuple[float, float] = (2.0, 3.0)
    #: Packet loss, the milder variant: ``loss_workers`` slots lose ``loss_percent`` % of
    #: their packets (both ways) for ``lease * factor``. (A delay needs ``tc netem``.)
    losses: int = 0
    loss_workers: int = 1
    loss_percent: int = 20
    loss_factor: tuple[float, float] = (2.0, 3.0)


@dataclass
class NetworkCounts(Counts):
    partitions: int = 0
    partitioned_workers: int = 0
    losses: int = 0
    heals: int = 0


class NetworkFaults(FaultFamily[NetworkSettings, NetworkCounts]):
    name = "network"
    tables = ("partition", "loss")
    kinds = (Kind("partition", 50), Kind("loss", 60))
    rows = (
        Row(
            70,
            "partitions",
            label="partitions",
            summary="partitions",
            live=lambda c: f"{c.partitions} ({c.partitioned_workers} workers, {c.heals} healed)",
            said=lambda c: f"{c.partitions} partitions ({c.partitioned_workers} workers cut off)",
        ),
        Row(75, "losses", said=lambda c: f"{c.losses} packet losses"),
    )
    marks = ("partition", "loss", "heal")
    windows = (WorkerSpan("partitioned", ("partition", "loss"), ("heal",), 20, late="after a cut"),)
    exercises: ClassVar[Mapping[str, tuple[Requirement, ...]]] = {
        # the cut worker's tasks are reclaimed while it is cut off, and its late report
        # after the heal is refused
        "partition": (
            Requirement("lease-respected", "partitioned"),
            Requirement("fencing", "after a cut"),
        ),
    }
    styles = (
        Style("partition", "lanes", "#e67e22", "0.30"),
        Style("loss", "lanes", "#d35400", "0.15"),
    )
    legend = (
        Legend(80, "partitioned", "background:#e67e22;opacity:.5"),
        Legend(90, "losing packets", "background:#d35400;opacity:.25"),
    )

    # ---- the scenario ---------------------------------------------------------------------

    def parse(self, faults: Table) -> NetworkSettings:
        d = NetworkSettings()
        nt = faults.table("partition")
        partitions = nt.count(10_000)
        partition_workers = nt.integer("workers", d.partition_workers, low=1, high=256)
        partition_factor = nt.lease_factor(d.partition_factor, "a partition")
        nt.done(("count", "workers", "factor"))
        lt = faults.table("loss")
        losses = lt.count(10_000)
        loss_workers = lt.integer("workers", d.loss_workers, low=1, high=256)
        loss_percent = lt.integer("percent", d.loss_percent, low=1, high=99)
        lfactor = lt.number_range("factor", d.loss_factor, low=0.0)
        if lfactor[0] <= 0:
            raise ScenarioError(f"{lt.key('factor')}: factor(s) > 0, got {lfactor}")
        lt.done(("count", "workers", "percent", "factor"))
        return NetworkSettings(
            partitions=partitions,
            partition_workers=partition_workers,
            partition_factor=partition_factor,
            losses=losses,
            loss_workers=loss_workers,
            loss_percent=loss_percent,
            loss_factor=(float(lfactor[0]), float(lfactor[1])),
        )

    def check(self, settings: NetworkSettings, *, workers: int) -> None:
        if settings.partitions and settings.partition_workers > workers:
            raise ScenarioError(
                f"faults.partition.workers ({settings.partition_workers}) must be at most "
                f"workers.count ({workers})"
            )
        if settings.losses and settings.loss_workers > workers:
            raise ScenarioError(
                f"faults.loss.workers ({settings.loss_workers}) must be at most "
                f"workers.count ({workers})"
            )

    def in_window(self, settings: NetworkSettings) -> bool:
        return bool(settings.partitions or settings.losses)

    # ---- setting up -----------------------------------------------------------------------

    def setup(self, ctx: SetupContext) -> None:
        """The launcher's network when the scenario partitions (``ctx.network``), or why
        there is none (``ctx.no_network``)."""
        settings = ctx.settings(self)
        if not settings.partitions and not settings.losses:
            return
        loss = settings.loss_percent if settings.losses else 0
        network, why = ctx.launcher.partitioner(
            ctx.server, ctx.backend, ctx.slots, loss_percent=loss
        )
        ctx.network, ctx.no_network = network, None if network is not None else why

    def teardown(self, ctx: SetupContext) -> None:
        network, ctx.network = ctx.network, None
        if network is not None:
            network.close()

    # ---- planning -------------------------------------------------------------------------

    def plan(self, settings: NetworkSettings, ctx: PlanContext) -> list[PlannedFault]:
        out: list[PlannedFault] = []
        for kind, n, width, factor in (
            ("partition", settings.partitions, settings.partition_workers,
             settings.partition_factor),
            ("loss", settings.losses, settings.loss_workers, settings.loss_factor),
        ):  # fmt: skip
            if not n:
                continue
            if ctx.no_network is not None:
                ctx.skipped.append(f"{kind} x{n}: skipped, {ctx.no_network}")
                continue
            for _ in range(n):
                length = round(ctx.lease * ctx.rng.uniform(*factor), 6)
                at = ctx.when(min(ctx.busy, ctx.window - length))
                slot = ctx.rng.randrange(ctx.slots)
                out.append(PlannedFault(at, kind, slot, None, length, width))
        return out

    # ---- applying -------------------------------------------------------------------------

    def new_state(self) -> set[int]:
        """The slots cut off right now (by a partition or a loss not healed yet)."""
        return set()

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        """Cut ``fault.width`` slots off the server (``partition``) or make them lose
        packets (``loss``), the first running a handler if one does; heal them
        ``fault.duration`` seconds later (or at the drain)."""
        kind = fault.kind
        network = ctx.network
        if network is None:
            ctx.note(f"{kind}: skipped, no network to partition")
            return True
        cut_off: set[int] = ctx.state(self)
        busy = ctx.busy_target(fault.slot)
        first = busy.slot if busy is not None else (fault.slot or 0)
        n = ctx.fleet.size
        slots = network.span(sorted({(first + i) % n for i in range(min(fault.width or 1, n))}))
        if cut_off & set(slots):
            return False  # still cut off by an earlier partition: try again later
        assert fault.duration is not None
        names = [w.name for s in slots if (w := ctx.fleet.in_slot(s)) is not None]
        extra: dict[str, object] = {}
        if kind == "loss":
            extra["percent"] = ctx.settings(self).loss_percent
        ctx.journal.write(
            INFO, "fault", kind=kind, target=",".join(names), targets=names,
            slots=slots, duration=fault.duration, **extra,
        )  # fmt: skip
        try:
            if kind == "loss":
                network.lose(slots)
            else:
                network.partition(slots)
        except Exception as exc:
            ctx.note(f"{kind} of slots {slots} failed: {error_text(exc)}")
            return True
        cut_off |= set(slots)
        counts = ctx.counts(self)
        if kind == "loss":
            counts.losses += 1
        else:
            counts.partitions += 1
            counts.partitioned_workers += len(slots)

        def heal() -> bool:
            try:
                network.heal(slots)
            except Exception as exc:
                ctx.note(f"heal of slots {slots} failed: {error_text(exc)}")
                return False  # never leave a slot cut off: retried at the next tick
            cut_off.difference_update(slots)
            now = [w.name for s in slots if (w := ctx.fleet.in_slot(s)) is not None]
            ctx.journal.write(
                INFO, "fault", kind="heal", target=",".join(now), targets=now, slots=slots
            )
            counts.heals += 1
            return True

        ctx.later(fault.duration, heal, f"heal {slots}")
        return True

    def new_counts(self) -> NetworkCounts:
        return NetworkCounts()

    # ---- the timeline ---------------------------------------------------------------------

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        t, kind = event.get("t", 0.0), event.get("kind")
        target = str(event.get("target", ""))
        cut_off = draft.opened(self)  # marks not healed yet, by their slots
        key = str(event.get("slots"))
        duration = event.get("duration", "?")
        if kind == "partition":
            label = f"{target} partitioned from the server for {duration}s"
            cut_off[key] = Mark(t, "partition", target, label)
            draft.marks.append(cut_off[key])
        elif kind == "loss":
            label = f"{target} losing {event.get('percent', '?')}% of their packets for {duration}s"
            cut_off[key] = Mark(t, "loss", target, label)
            draft.marks.append(cut_off[key])
        elif kind == "heal" and key in cut_off:
            mark = cut_off.pop(key)
            mark.end = t
            mark.label += ", then healed"


FAMILY = NetworkFaults()
