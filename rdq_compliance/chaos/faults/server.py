"""Server process faults: a kill and restart, a freeze past the lease.

``[faults.server_restart]``: ``count`` kills of the server, each restarted ``down``
seconds later (default ``1s``); ``[faults.server_pause]``: ``count`` freezes, each
``lease * factor`` long (``factor`` > 1, default ``[1.5, 2.5]``).

- ``kill_server`` then, ``down`` seconds later, ``restart_server``. Planned only when the
  server supports both (``Server.faults``) and the backend declares ``durable``
  (:class:`rdq_core.model.Capabilities`): restarting a server that keeps nothing would
  lose acknowledged work by design, which the checker would report as lost tasks — not
  the bug a campaign looks for. The note then says so, with how durability was decided;
- ``pause_server`` (the whole server frozen: SIGSTOP of its process group, or
  ``docker pause``) for ``lease * factor``, then ``resume_server``: calls in flight hang
  (no reset, no error), leases run out by the storage clock while nobody can act, and
  after the resume the expired ones are reclaimed while the late reports of their old
  holders must be refused. While the server is frozen, faults that talk to it (a
  restart, connection cuts, redrives, a failover) and the progress poll wait for the
  resume; the worker faults go on. The server is always resumed: at its time, or at
  the drain (a failed resume is retried at every tick).
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
from rdq_compliance.provision.backend import KILL_SERVER, PAUSE_SERVER, RESTART_SERVER


@dataclass(frozen=True)
class ServerSettings:
    server_restarts: int = 0
    #: Seconds the server stays down before it is restarted.
    server_down: float = 1.0
    #: Freezes of the whole server (SIGSTOP of its process group, or ``docker pause``).
    server_pauses: int = 0
    #: A server freeze lasts ``lease * factor`` with factor drawn from this range (> 1).
    server_pause_factor: tuple[float, float] = (1.5, 2.5)


@dataclass
class ServerCounts(Counts):
    server_kills: int = 0
    server_restarts: int = 0
    server_pauses: int = 0
    server_resumes: int = 0



class ServerFaults(FaultFamily[ServerSettings, ServerCounts]):
    name = "server"
    tables = ("server_restart", "server_pause")
    kinds = (
        Kind("server_restart", 20, talks_to_server=True),
        Kind("server_pause", 30, talks_to_server=True),
    )
    rows = (
        Row(25, "server_kills", summary="server kills"),
        Row(30, "server_restarts", label="server restarts", summary="server restarts"),
        Row(40, "server_pauses", label="server freezes", summary="server freezes"),
    )
    marks = ("kill_server", "restart_server", "pause_server", "resume_server")
    windows = (
        Span("server frozen", ("pause_server",), ("resume_server",), 30),
        Span("server down", ("kill_server",), ("restart_server",), 40),
    )
    styles = (
        Style("server", "band", "#000", "0.12"),
        Style("freeze", "band", "#5dade2", "0.22"),
    )
    legend = (
        Legend(50, "server down", "background:#000;opacity:.2"),
        Legend(60, "server frozen", "background:#5dade2;opacity:.4"),
    )

    def parse(self, faults: Table) -> ServerSettings:
        st = faults.table("server_restart")
        restarts = st.count(1000)
        down = st.duration("down", ServerSettings.server_down)
        st.done(("count", "down"))
        zt = faults.table("server_pause")
        pauses = zt.count(1000)
        factor = zt.lease_factor(ServerSettings.server_pause_factor, "a server freeze")
        zt.done(("count", "factor"))
        assert down is not None
        return ServerSettings(restarts, down, pauses, factor)

    def in_window(self, settings: ServerSettings) -> bool:
        return bool(settings.server_restarts or settings.server_pauses)

    def plan(self, settings: ServerSettings, ctx: PlanContext) -> list[PlannedFault]:
        out = []
        restarts, pauses = settings.server_restarts, settings.server_pauses
        if restarts:
            missing = {KILL_SERVER, RESTART_SERVER} - set(ctx.supported)
            if missing:
                ctx.skipped.append(
                    f"server_restart x{restarts}: skipped, {ctx.server_name} does not support "
                    + " and ".join(sorted(missing))
                )
            elif not ctx.durable:
                why = f" ({ctx.durability})" if ctx.durability else ""
                ctx.skipped.append(
                    f"server_restart x{restarts}: skipped, the backend does not declare "
                    f"durable{why}: a kill and restart of {ctx.server_name} would lose "
                    "acknowledged work by design"
                )
            else:
                down = settings.server_down
                for _ in range(restarts):
                    at = ctx.when(max(ctx.start, ctx.window - down - 2 * ctx.lease))
                    out.append(PlannedFault(at, "server_restart", None, None, down))
        if pauses:
            if PAUSE_SERVER not in ctx.supported:
                ctx.skipped.append(
                    f"server_pause x{pauses}: skipped, {ctx.server_name} does not support "
                    "pause_server"
                )
            else:
                for _ in range(pauses):
                    length = round(ctx.lease * ctx.rng.uniform(*settings.server_pause_factor), 6)
                    at = ctx.when(max(ctx.start, ctx.window - length - 2 * ctx.lease))
                    out.append(PlannedFault(at, "server_pause", None, None, length))
        return out

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        if fault.kind == "server_pause":
            return self._pause(fault, ctx)
        return self._kill(fault, ctx)

    def _kill(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        if ctx.server_down:
            return False
        counts = ctx.counts(self)
        ctx.journal.write(INFO, "fault", kind="kill_server", target="server")
        try:
            ctx.server.kill()
        except Exception as exc:
            ctx.note(f"kill_server failed: {error_text(exc)}")
            return True
        counts.server_kills += 1
        ctx.server_down = True
        attempts = [0]

        def restart() -> bool:
            if not ctx.server_down:
                return True
            try:
                ctx.server.restart()
            except Exception as exc:
                attempts[0] += 1
                ctx.note(f"restart_server failed: {error_text(exc)}")
                return attempts[0] >= 5
            ctx.server_down = False
            ctx.journal.write(INFO, "fault", kind="restart_server", target="server")
            counts.server_restarts += 1
            return True

        ctx.later(fault.duration or 1.0, restart, "restart server")
        return True

    def _pause(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        if ctx.server_down:
            return False
        assert fault.duration is not None
        counts = ctx.counts(self)
        ctx.journal.write(
            INFO, "fault", kind="pause_server", target="server", duration=fault.duration
        )
        try:
            ctx.server.pause()
        except Exception as exc:
            ctx.note(f"pause_server failed: {error_text(exc)}")
            return True
        counts.server_pauses += 1
        ctx.server_frozen = True

        def resume() -> bool:
            if not ctx.server_frozen:
                return True
            try:
                ctx.server.resume()
            except Exception as exc:
                ctx.note(f"resume_server failed: {error_text(exc)}")
                return False  # never leave the server frozen: retried at the next tick
            ctx.server_frozen = False
            ctx.journal.write(INFO, "fault", kind="resume_server", target="server")
            counts.server_resumes += 1
            return True

        ctx.later(fault.duration, resume, "resume server")
        return True

    def new_counts(self) -> ServerCounts:
        return ServerCounts()

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        t, kind = event.get("t", 0.0), event.get("kind")
        opened = draft.opened(self)
        if kind == "kill_server":
            opened["down"] = Mark(t, "server", "server", "server killed")
            draft.marks.append(opened["down"])
        elif kind == "restart_server" and "down" in opened:
            mark = opened.pop("down")
            mark.end = t
            mark.label = "server killed, then restarted"
        elif kind == "pause_server":
            opened["frozen"] = Mark(
                t, "freeze", "server", f"server frozen for {event.get('duration', '?')}s"
            )
            draft.marks.append(opened["frozen"])
        elif kind == "resume_server" and "frozen" in opened:
            mark = opened.pop("frozen")
            mark.end = t
            mark.label += ", then resumed"


FAMILY = ServerFaults()
