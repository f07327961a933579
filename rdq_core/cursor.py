"""Opaque, queue-bound keyset cursors for DLQ paging.

A cursor names the last task of a page by its position in the DLQ order
``(dead_at, id)``; the next page starts strictly after it. A cursor that does not
decode, or was issued for another queue, raises :class:`StaleCursor`.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from rdq_core.errors import StaleCursor

_VERSION = 1


@dataclass(frozen=True)
class DlqPosition:
    """Where a DLQ page ended: the dead-letter time (µs since epoch) and the task id."""

    dead_at_us: int
    task_id: str


def encode(queue: str, pos: DlqPosition) -> str:
    """The opaque cursor of ``pos`` in ``queue``'s DLQ (a URL-safe string, bound to the queue)."""
    raw = json.dumps([_VERSION, queue, pos.dead_at_us, pos.task_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(queue: str, cursor: str) -> DlqPosition:
    """The position ``cursor`` holds; ``StaleCursor`` for a malformed cursor or one of
    another queue."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, cursor_queue, dead_at_us, task_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise StaleCursor(
            f"malformed DLQ cursor {cursor[:60]!r}: pass DlqPage.next_cursor unchanged"
        ) from None
    if version != _VERSION or not isinstance(dead_at_us, int) or not isinstance(task_id, str):
        raise StaleCursor(f"DLQ cursor {cursor[:60]!r} is not one this version issued")
    if cursor_queue != queue:
        raise StaleCursor(
            f"DLQ cursor was issued for queue {cursor_queue!r}, not {queue!r}: "
            "start again without a cursor"
        )
    return DlqPosition(dead_at_us, task_id)
