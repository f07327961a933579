"""Connection cuts: the server terminates the campaign namespace's sessions.

``[faults.cut_connections]``: ``count`` cuts spread over the fault window, each one
``Server.cut_connections(namespace)`` (journaled with how many sessions it ended). The
workers' calls in flight fail with a connection error and must be retried safely.
Planned only when the server supports ``cut_connections`` (``Server.faults``); held
back while the server is frozen.
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
from rdq_compliance.chaos.faults.windows import Instant
from rdq_compliance.chaos.journal_observer import error_text
from rdq_compliance.provision.backend import CUT_CONNECTIONS


@dataclass(frozen=True)
class ConnectionSettings:
    connection_cuts: int = 0


@dataclass
class ConnectionCounts(Counts):
    cuts: int = 0
    connections_cut: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"connection_cuts": self.cuts, "connections_cut": self.connections_cut}


class ConnectionFaults(FaultFamily[ConnectionSettings, ConnectionCounts]):
    name = "connections"
    tables = ("cut_connections",)
    kinds = (Kind("cut_connections", 40, talks_to_server=True),)
    rows = (Row(60, "connection_cuts", label="connection cuts", summary="connection cuts"),)
    marks = ("cut_connections",)
    windows = (Instant("connections cut", "cut_connections", 60),)
    styles = (Style("cut", "rule", "#2980b9"),)
    legend = (Legend(30, "connections cut", "background:#2980b9"),)

    def parse(self, faults: Table) -> ConnectionSettings:
        ct = faults.table("cut_connections")
        cuts = ct.count(100_000)
        ct.done(("count",))
        return ConnectionSettings(cuts)

    def in_window(self, settings: ConnectionSettings) -> bool:
        return bool(settings.connection_cuts)

    def plan(self, settings: ConnectionSettings, ctx: PlanContext) -> list[PlannedFault]:
        cuts = settings.connection_cuts
        if not cuts:
            return []
        if CUT_CONNECTIONS not in ctx.supported:
            ctx.skipped.append(
                f"cut_connections x{cuts}: skipped, {ctx.server_name} does not support "
                "cut_connections"
            )
            return []
        return [PlannedFault(ctx.when(ctx.window * 0.95), "cut_connections") for _ in range(cuts)]

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        try:
            n = ctx.server.cut_connections(ctx.namespace)
        except Exception as exc:
            ctx.note(f"cut_connections failed: {error_text(exc)}")
            return True
        ctx.journal.write(INFO, "fault", kind="cut_connections", target="server", count=n)
        counts = ctx.counts(self)
        counts.cuts += 1
        counts.connections_cut += n
        return True

    def new_counts(self) -> ConnectionCounts:
        return ConnectionCounts()

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        label = f"connections cut ({event.get('count', '?')})"
        draft.marks.append(Mark(event.get("t", 0.0), "cut", "server", label))


FAMILY = ConnectionFaults()
