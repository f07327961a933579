"""Failover of a replicated server: the primary SIGKILLed, its replica promoted.

``[faults.failover]``: ``count`` failovers, planned while tasks are still becoming due
(so that the kill lands under write load), and ``replica_lag`` (a positive duration;
leave it out for none). Each one journals ``failover``, holds the replication link for
``replica_lag`` seconds first (the replica lags while the primary goes on acknowledging
writes: with asynchronous replication what it acknowledged meanwhile is lost at the
failover; with synchronous replication the writes wait, or fail, instead), SIGKILLs the
primary, promotes the replica and moves the server's address to it
(:meth:`~rdq_compliance.provision.backend.Server.failover`; the nemesis loop waits for
it, a few seconds at most), then journals ``promoted``. A fresh replica of the new
primary is started for the next one.

Planned only on a replicated server (``Server.faults`` has ``failover``: e.g.
``--rdq-option pg_replica=async`` or ``redis_replica=async``); otherwise left out with a
note. Not gated on ``durable``: the old primary's data is discarded either way, and what
survives is what replication carried — which is what the fault measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    Style,
    TimelineDraft,
)
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.faults.windows import Span
from rdq_compliance.chaos.journal_observer import error_text
from rdq_compliance.provision.backend import FAILOVER


@dataclass(frozen=True)
class FailoverSettings:
    #: Failovers of a replicated server: primary SIGKILLed, replica promoted.
    failovers: int = 0
    #: Seconds the replication link is held (the replica lags) before each failover's kill.
    failover_lag: float = 0.0


@dataclass
class FailoverCounts(Counts):
    failovers: int = 0



class FailoverFaults(FaultFamily[FailoverSettings, FailoverCounts]):
    name = "failover"
    tables = ("failover",)
    kinds = (Kind("failover", 10, talks_to_server=True),)
    rows = (Row(50, "failovers", label="failovers", summary="failovers"),)
    marks = ("failover", "promoted")
    windows = (Span("failover", ("failover",), ("promoted",), 50),)
    styles = (Style("failover", "band", "#9b59b6", "0.25"),)
    legend = (Legend(70, "failover", "background:#9b59b6;opacity:.45"),)

    def parse(self, faults: Table) -> FailoverSettings:
        ft = faults.table("failover")
        count = ft.count(100)
        lag = ft.duration("replica_lag", 0.0)
        ft.done(("count", "replica_lag"))
        assert lag is not None
        return FailoverSettings(count, lag)

    def in_window(self, settings: FailoverSettings) -> bool:
        return bool(settings.failovers)

    def plan(self, settings: FailoverSettings, ctx: PlanContext) -> list[PlannedFault]:
        n = settings.failovers
        if not n:
            return []
        if FAILOVER not in ctx.supported:
            ctx.skipped.append(
                f"failover x{n}: skipped, {ctx.server_name} does not support failover (it "
                "has no replica: start a replicated server, e.g. --rdq-option pg_replica=async "
                "or redis_replica=async)"
            )
            return []
        return [
            PlannedFault(ctx.when(ctx.busy * 0.8), "failover", None, None, settings.failover_lag)
            for _ in range(n)
        ]

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        if ctx.server_down:
            return False
        lag = fault.duration or 0.0
        ctx.journal.write(INFO, "fault", kind="failover", target="server", replica_lag=lag)
        try:
            promoted = ctx.server.failover(lag)
        except Exception as exc:
            ctx.note(f"failover failed: {error_text(exc)}")
            return True
        ctx.journal.write(INFO, "fault", kind="promoted", target="server", promoted=promoted)
        ctx.counts(self).failovers += 1
        return True

    def new_counts(self) -> FailoverCounts:
        return FailoverCounts()

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        t, kind = event.get("t", 0.0), event.get("kind")
        opened = draft.opened(self)
        if kind == "failover":
            lag = event.get("replica_lag") or 0
            opened["failing"] = Mark(
                t,
                "failover",
                "server",
                "failover: primary SIGKILLed"
                + (f" after its replica lagged {lag}s" if lag else ""),
            )
            draft.marks.append(opened["failing"])
        elif kind == "promoted" and "failing" in opened:
            mark = opened.pop("failing")
            mark.end = t
            mark.label += f", replica promoted ({event.get('promoted', '?')})"


FAMILY = FailoverFaults()
