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
``t``       true wall-clock time of the event (float seconds): orders the events of
            different processes in real time (a worker whose clock the harness skews
            journals its monotonic clock plus the harness's offset instead, see
            :mod:`rdq_compliance.chaos.libfaketime`)
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
                 ``restart_server``, ``pause_server``, ``resume_server``,
                 ``cut_connections``, ``failover`` with ``replica_lag``,
                 then ``promoted`` naming the new primary, ``clock_skew``), ``target``
                 (a proc name or ``"server"``), ``point`` for kills at a chosen moment; a
                 ``clock_skew`` (journaled when a skewed worker is spawned) has
                 ``slot``, ``offset`` (seconds) and ``drift`` (rate)
``self_kill``    a worker about to SIGKILL itself at a chosen ``point`` (info)
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = frozenset({INVOKE, OK, FAIL, INFO})

Event = dict[str, Any]


class Journal:
    """An append-only journal: one ``write(2)`` per event, so a SIGKILL loses at most
    the event being written (a torn last line is dropped by the reader)."""

    def __init__(self, path: Path, proc: str, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.proc = proc
        self.clock = clock
        self.pid = os.getpid()
        self._seq = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, type_: str, op: str, **fields: Any) -> Event:
        event: Event = {
            "seq": self._seq,
            "proc": self.proc,
            "pid": self.pid,
            "t": self.clock(),
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


#: Bytes of journal parsed at once (whole lines): one JSON array per chunk, so the
#: decoder shares each key string across the chunk's events.
CHUNK_BYTES = 1 << 20

#: String values repeated across events (and, for ``task``/``token``, across journals),
#: stored once per history: ``proc``, ``type`` and ``op`` come from a handful of names,
#: and a task id or a claim token recurs in every event about it.
_SHARED_VALUES = ("proc", "type", "op", "task", "token")


def _share(events: list[Any], memo: dict[Any, Any]) -> None:
    """Replace repeated values of ``events`` by one shared object each (in place)."""
    shared = memo.setdefault
    for ev in events:
        if ev.__class__ is not dict:
            continue
        for key in _SHARED_VALUES:
            value = ev.get(key)
            if value.__class__ is str:
                ev[key] = shared(value, value)
        pid = ev.get("pid")
        if pid.__class__ is int:
            ev["pid"] = shared(pid, pid)
        claims = ev.get("claims")
        if claims.__class__ is list:
            for entry in claims:
                if entry.__class__ is dict:
                    for key in ("task", "token"):
                        value = entry.get(key)
                        if value.__class__ is str:
                            entry[key] = shared(value, value)


def _loads_lines(lines: list[bytes]) -> tuple[list[Any], bool]:
    """The events of whole ``lines``, up to the first that is not valid JSON; and
    whether every line was."""
    try:
        events: list[Any] = json.loads(b"[" + b",".join(lines) + b"]")
    except ValueError:
        pass
    else:
        if len(events) == len(lines):  # one value per line, as the journal writes them
            return events, True
    events = []
    for raw in lines:  # find the bad line the slow way
        try:
            events.append(json.loads(raw))
        except ValueError:
            return events, False
    return events, True


def read_journal(path: Path, *, memo: dict[Any, Any] | None = None) -> Iterator[Event]:
    """The events of one journal, in order; a torn (partial) last line is skipped, and
    so is everything from a line that is not valid JSON on.

    Lean for large histories: keys are shared within each chunk of lines, and repeated
    values (process names, types, ops, task ids, tokens, pids) are shared through
    ``memo`` (pass one dict for several journals to share across them; the events are
    the same plain dicts either way).
    """
    if memo is None:
        memo = {}
    with open(path, "rb") as fh:
        while True:
            lines = fh.readlines(CHUNK_BYTES)
            if not lines:
                return
            whole = lines[-1].endswith(b"\n")
            if not whole:
                lines.pop()
            events, ok = _loads_lines(lines) if lines else ([], True)
            _share(events, memo)
            yield from events
            if not (ok and whole):
                return


def read_history(paths: Iterable[Path]) -> list[Event]:
    """All events of all journals (each journal's order kept, journals concatenated),
    repeated strings shared across all of them (see :func:`read_journal`).

    The cyclic garbage collector is paused while reading: events make no cycles, and
    its rescans of a growing history of a million dicts would cost more than the read.
    """
    events: list[Event] = []
    memo: dict[Any, Any] = {}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for path in sorted(paths):
            events.extend(read_journal(path, memo=memo))
    finally:
        if enabled:
            gc.enable()
    return events
