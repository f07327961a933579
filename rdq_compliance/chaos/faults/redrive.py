"""Redrives of the DLQ during the fault window.

``redrive_interval`` (a key of ``[faults]``, a duration; leave it out for none): every
that many seconds of the window the DLQ's tasks, listed by id, are redriven by id (so
the journal names exactly the tasks redriven: ``redrive`` as invoke → ok/info). A
redrive talks to the server, so it waits while the server is frozen; it stops at the
drain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rdq_compliance.chaos.events import INFO, INVOKE, OK
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
from rdq_compliance.chaos.journal_observer import error_text
from rdq_core.model import ByIds, DlqFilter, Task
from rdq_core.spi import Storage


@dataclass(frozen=True)
class RedriveSettings:
    #: Seconds between redrives of the DLQ (``None``: no redrive).
    redrive_interval: float | None = None


@dataclass
class RedriveCounts(Counts):
    redrives: int = 0
    redriven_tasks: int = 0



class RedriveFaults(FaultFamily[RedriveSettings, RedriveCounts]):
    name = "redrive"
    tables = ("redrive_interval",)
    kinds = (Kind("redrive", 90, talks_to_server=True),)
    rows = (
        Row(
            90,
            "redrives",
            label="redrives",
            summary="redrives",
            live=lambda c: f"{c.redrives} ({c.redriven_tasks} tasks)",
            said=lambda c: f"{c.redrives} redrives ({c.redriven_tasks} tasks)",
        ),
    )
    ops = ("redrive",)
    styles = (Style("redrive", "flag", "#16a085"),)
    legend = (Legend(40, "redrive", "background:#16a085"),)

    def parse(self, faults: Table) -> RedriveSettings:
        return RedriveSettings(faults.duration("redrive_interval", None))

    def plan(self, settings: RedriveSettings, ctx: PlanContext) -> list[PlannedFault]:
        interval = settings.redrive_interval
        out = []
        if interval:
            k = 1
            while k * interval <= ctx.window:
                out.append(PlannedFault(round(k * interval, 6), "redrive"))
                k += 1
        return out

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        redrive(ctx, ctx.counts(self))
        return True

    def new_counts(self) -> RedriveCounts:
        return RedriveCounts()

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        if event.get("type") == "ok":
            label = f"redrive of {len(event.get('tasks') or [])} dead tasks"
            draft.marks.append(Mark(event.get("t", 0.0), "redrive", "harness", label))


FAMILY = RedriveFaults()


def redrive(ctx: NemesisContext, counts: RedriveCounts) -> int:
    """Redrive every task of the DLQ now (by id); journal it; how many were redriven."""
    try:
        ids = dlq_ids(ctx.storage, ctx.queue)
    except Exception as exc:
        ctx.note(f"redrive: listing the DLQ failed: {error_text(exc)}")
        return 0
    if not ids:
        return 0
    ctx.journal.write(INVOKE, "redrive", tasks=ids)
    try:
        n = ctx.storage.redrive(ctx.queue, ByIds(ids))
    except Exception as exc:
        ctx.journal.write(INFO, "redrive", tasks=ids, error=error_text(exc))
        return 0
    ctx.journal.write(OK, "redrive", tasks=ids, count=n)
    counts.redrives += 1
    counts.redriven_tasks += n
    if n != len(ids):
        ctx.note(f"redrive of {len(ids)} dead tasks redrove {n}")
    return n


def dlq_ids(storage: Storage, queue: str) -> list[str]:
    """Ids of every task in ``queue``'s DLQ (paging through it)."""
    return [t.id for t in dlq_tasks(storage, queue)]


def dlq_tasks(storage: Storage, queue: str, page: int = 100) -> list[Task]:
    """Every task of ``queue``'s DLQ, oldest dead-letter first (paging through it)."""
    out: list[Task] = []
    cursor: str | None = None
    while True:
        result = storage.dlq_list(queue, DlqFilter(everything=True), cursor, page)
        out.extend(result.tasks)
        cursor = result.next_cursor
        if cursor is None:
            return out
