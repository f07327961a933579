"""The history: what every process of a chaos run did, as append-only journals.

One journal per process (each worker, and the harness itself), one JSON object per
line. Operations follow Jepsen's shape: an ``invoke`` event, then ``ok`` (it took
effect), ``fail`` (it certainly did not) or ``info`` (unknown: a timeout, a lost
connection). An operation still open when its process died is read as ``info``.

Fields of every event:

=========== ===================================================================
``seq``     position in its journal (0, 1, 2, ...)
``proc``    the process: ``"w0"``, ``"w1"``, ... or ``"harness"``
``pid``     its OS process id
``t``       wall-clock time of the event (float seconds; for humans and timelines)
``type``    ``invoke`` | ``ok`` | ``fail`` | ``info``
``op``      see below
``task``    the task id, where one is concerned
``token``   the claim token, where one is concerned
=========== ===================================================================

Operations and their extra fields (storage times are integer microseconds since the
epoch, read from the storage's clock, never the worker's):

``claim``        ok: ``claims`` = list of ``{task, token, claimed_at, lease_expires_at,
                 reclaimed, attempt_count, attempt_no}``
``run``          a handler execution: invoke when it starts, ok/fail when it returns
``heartbeat``    ok: ``lease_expires_at``; fail: ``error`` (``"stale"``); info: unknown
``complete`` / ``reschedule`` / ``dead_letter``
                 an outcome report: ok accepted, fail refused as stale, info unknown
``lease_lost``   the worker gave up a claim (single ``info`` event)
``enqueue``      harness: ok with ``task``
``redrive``      harness: ok with ``tasks`` (ids redriven)
``fault``        harness: ``kind`` (``kill``, ``pause``, ``resume``, ``kill_server``,
                 ``restart_server``, ``cut_connections``), ``target`` (a proc name or
                 ``"server"``), ``point`` for kills at a chosen moment
``self_kill``    a worker about to SIGKILL itself at a chosen ``point`` (info)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = frozenset({INVOKE, OK, FAIL, INFO})

Event = dict[str, Any]


class Journal:
    """An append-only journal: one ``write(2)`` per event, so a SIGKILL loses at most
    the event being written (a torn last line is dropped by the reader)."""

    def __init__(self, path: Path, proc: str) -> None:
        self.path = Path(path)
        self.proc = proc
        self.pid = os.getpid()
        self._seq = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, type_: str, op: str, **fields: Any) -> Event:
        event: Event = {
            "seq": self._seq,
            "proc": self.proc,
            "pid": self.pid,
            "t": time.time(),
            "type": type_,
            "op": op,
        }
        event.update(fields)
        line = json.dumps(event, separators=(",", ":"), default=str) + "\n"
        os.write(self._fd, line.encode())
        self._seq += 1
        return event

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_journal(path: Path) -> Iterator[Event]:
    """The events of one journal, in order; a torn (partial) last line is skipped."""
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            try:
                yield json.loads(raw)
            except ValueError:
                return


def read_history(paths: Iterable[Path]) -> list[Event]:
    """All events of all journals (each journal's order kept, journals concatenated)."""
    events: list[Event] = []
    for path in sorted(paths):
        events.extend(read_journal(path))
    return events
