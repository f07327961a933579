"""Multi-process backends with one deliberate bug, for the chaos harness's own tests.

Named to the harness as ``_broken_chaos_backends:<attribute>`` (this folder must be
importable, in the worker processes too: put it on ``PYTHONPATH``).

- ``dead_letter_deletes``: the SQLite backend whose ``dead_letter`` deletes the task
  (SPEC §5.7, a task lost: deleted on failure, missing from the DLQ);
- ``reschedule_completes``: the SQLite backend whose ``reschedule`` stores a SUCCESS
  (the worker's report is recorded as something else).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from rdq_sqlite.plugin import SqliteBackend, database_path
from rdq_sqlite.storage import SqliteStorage

from rdq_core.model import ByIds, ErrorInfo, Outcome


class DeadLetterDeletes(SqliteStorage):
    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        super()._dead_letter(task_id, token, error, outcome)
        self._purge(self._get(task_id).queue, ByIds([task_id]))


class RescheduleCompletes(SqliteStorage):
    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._complete(task_id, token)


class _Backend(SqliteBackend):
    def __init__(self, cls: type[SqliteStorage], name: str) -> None:
        self.cls = cls
        self.name = name

    def open(self, dsn: str, namespace: str) -> SqliteStorage:
        return self.cls(database_path(Path(dsn), namespace))


dead_letter_deletes = _Backend(DeadLetterDeletes, "dead-letter-deletes")
reschedule_completes = _Backend(RescheduleCompletes, "reschedule-completes")
