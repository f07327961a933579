"""A :class:`~rdq_core.worker.WorkerObserver` that writes the worker's history.

Every hook of the worker loop becomes an event of :mod:`rdq_compliance.chaos.events`,
written (one ``write(2)`` each) *before* the worker acts on what it learnt, so a SIGKILL
loses at most the event in flight, and an operation whose ``invoke`` has no completion
in a dead process's journal was in flight (the checker reads it as ``info``):

============================ ==================================================
hook                         event
============================ ==================================================
``on_claim_begin``           ``invoke claim`` (``limit``)
``on_claim_end``             ``ok claim`` with ``claims`` (storage times in µs)
``on_claim_error``           ``info claim`` (``error``; the claim may have happened)
``on_start``                 ``invoke run`` (``attempt_no``, ``handler``)
``on_handler_end``           ``ok run`` or ``fail run`` (``error``)
``on_heartbeat_begin``       ``invoke heartbeat``
``on_heartbeat``             ``ok`` (``lease_expires_at``), ``fail`` (``"stale"``), ``info``
``on_report_begin``          ``invoke complete|reschedule|dead_letter``
``on_report_end``            ``ok``, ``fail`` (``"stale"``) or ``info`` (unknown)
``on_lease_lost``            ``info lease_lost``
============================ ==================================================

Thread-safe: the worker calls hooks from its claim loop, handler threads and heartbeat
thread; one lock serialises the writes (and so the ``seq`` numbers).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rdq_compliance.chaos.events import FAIL, INFO, INVOKE, OK, Event, Journal
from rdq_core.errors import BackendUnavailable, StaleClaim
from rdq_core.model import Claim, micros_from_utc
from rdq_core.worker import ReportKind, ReportResult, TaskContext, WorkerObserver


def claim_detail(claim: Claim) -> dict[str, Any]:
    """The ``claims`` entry of a claim event (storage times as integer µs)."""
    task = claim.task
    return {
        "task": task.id,
        "token": claim.token,
        "claimed_at": micros_from_utc(claim.claimed_at),
        "lease_expires_at": micros_from_utc(claim.lease_expires_at),
        "reclaimed": claim.reclaimed,
        "attempt_count": task.attempt_count,
        "attempt_no": task.next_attempt_no,
    }


def error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}"[:500] if text else name


class LockedJournal:
    """A :class:`Journal` shared by threads: one lock around each write."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.proc = journal.proc
        self._lock = threading.Lock()

    def write(self, type_: str, op: str, **fields: Any) -> Event:
        with self._lock:
            return self.journal.write(type_, op, **fields)

    def close(self) -> None:
        with self._lock:
            self.journal.close()


class JournalObserver(WorkerObserver):
    """Writes every worker hook to ``journal`` as an event (see the module table)."""

    def __init__(self, journal: Journal | LockedJournal) -> None:
        self.journal = journal if isinstance(journal, LockedJournal) else LockedJournal(journal)

    def write(self, type_: str, op: str, **fields: Any) -> Event:
        return self.journal.write(type_, op, **fields)

    # ---- claims -----------------------------------------------------------------------

    def on_claim_begin(self, limit: int) -> None:
        self.write(INVOKE, "claim", limit=limit)

    def on_claim_end(self, claims: Sequence[Claim]) -> None:
        self.write(OK, "claim", claims=[claim_detail(c) for c in claims])

    def on_claim_error(self, exc: BaseException) -> None:
        self.write(INFO, "claim", error=error_text(exc))

    # ---- runs -------------------------------------------------------------------------

    def on_start(self, ctx: TaskContext) -> None:
        self.write(
            INVOKE,
            "run",
            task=ctx.task.id,
            token=ctx.token,
            attempt_no=ctx.attempt_no,
            handler=ctx.task.handler,
        )

    def on_handler_end(self, ctx: TaskContext, error: BaseException | None) -> None:
        if error is None:
            self.write(OK, "run", task=ctx.task.id, token=ctx.token)
        else:
            self.write(FAIL, "run", task=ctx.task.id, token=ctx.token, error=error_text(error))

    # ---- heartbeats -------------------------------------------------------------------

    def on_heartbeat_begin(self, task_id: str, token: str) -> None:
        self.write(INVOKE, "heartbeat", task=task_id, token=token)

    def on_heartbeat(self, task_id: str, token: str, result: datetime | BaseException) -> None:
        if isinstance(result, datetime):
            self.write(
                OK,
                "heartbeat",
                task=task_id,
                token=token,
                lease_expires_at=micros_from_utc(result),
            )
        elif isinstance(result, StaleClaim):
            self.write(FAIL, "heartbeat", task=task_id, token=token, error="stale")
        else:
            self.write(INFO, "heartbeat", task=task_id, token=token, error=error_text(result))

    # ---- outcome reports --------------------------------------------------------------

    def on_report_begin(self, kind: ReportKind, task_id: str, token: str) -> None:
        self.write(INVOKE, kind, task=task_id, token=token)

    def on_report_end(
        self, kind: ReportKind, task_id: str, token: str, result: ReportResult
    ) -> None:
        if result == "ok":
            self.write(OK, kind, task=task_id, token=token)
        elif result == "stale":
            self.write(FAIL, kind, task=task_id, token=token, error="stale")
        elif result == "unavailable":
            self.write(INFO, kind, task=task_id, token=token, error="unavailable")
        else:
            assert isinstance(result, BaseException)
            unknown = isinstance(result, BackendUnavailable)
            self.write(
                INFO,
                kind,
                task=task_id,
                token=token,
                error=("unavailable: " if unknown else "") + error_text(result),
            )

    def on_lease_lost(self, task_id: str, token: str) -> None:
        self.write(INFO, "lease_lost", task=task_id, token=token)
