"""One pass over a chaos history: what the checker needs, grouped by task and by token.

A history is the list of events of :mod:`rdq_compliance.chaos.events` (every journal
of a run, concatenated). :func:`index_history` reads it once, in ``O(events)`` time,
and keeps only counters, storage times and event positions; the events themselves are
not copied. The checker's rules (:mod:`rdq_compliance.chaos.checker`) work on this
index; nothing else uses it.

How operations are read (Jepsen's shape):

- a **claim** is known only from a claim ``ok`` event (one entry per claimed task); a
  claim ``info``/``fail``, or an invoke left open by a killed process, tells nothing
  about tokens, so such a claim is *unknown*: the checker never needs it, and never
  assumes it did not happen;
- an **outcome call** (``complete``/``reschedule``/``dead_letter``) *may have taken
  effect* if it was acknowledged (``ok``), left unknown (``info``), or left open (an
  ``invoke`` with no answer); only a ``fail`` is a certain no. The counts per token
  say which (see :meth:`TokenRecord.outcome_may_have_applied`);
- a **heartbeat** counts as extending the lease only when acknowledged (``ok``, with
  the new ``lease_expires_at``); unknown ones are counted, never assumed;
- a **run** is counted from its ``invoke`` (the handler started), or from its answer
  where a journal lost the invoke.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rdq_compliance.chaos.events import FAIL, INFO, INVOKE, OK, Event

CLAIM = "claim"
RUN = "run"
HEARTBEAT = "heartbeat"
COMPLETE = "complete"
RESCHEDULE = "reschedule"
DEAD_LETTER = "dead_letter"
LEASE_LOST = "lease_lost"
ENQUEUE = "enqueue"
REDRIVE = "redrive"
FAULT = "fault"
SELF_KILL = "self_kill"
OUTCOME_OPS = frozenset({COMPLETE, RESCHEDULE, DEAD_LETTER})


class JournalClaim:
    """One successful claim of one task, as its claim ``ok`` event reported it.

    Times are the storage's clock, integer microseconds since the epoch. ``attempt_no``
    is the number the claim announced for this attempt (``max(attempt_no) + 1`` of the
    history it returned), ``None`` if the event did not say.
    """

    __slots__ = (
        "attempt_count",
        "attempt_no",
        "claimed_at",
        "event",
        "lease_expires_at",
        "proc",
        "reclaimed",
        "task",
        "tok",
        "token",
    )

    def __init__(
        self,
        task: str,
        token: str,
        claimed_at: int,
        lease_expires_at: int,
        reclaimed: bool,
        attempt_count: int | None,
        attempt_no: int | None,
        proc: str,
        event: int,
        tok: TokenRecord,
    ) -> None:
        self.task = task
        self.token = token
        self.claimed_at = claimed_at
        self.lease_expires_at = lease_expires_at
        self.reclaimed = reclaimed
        self.attempt_count = attempt_count
        self.attempt_no = attempt_no
        self.proc = proc
        self.event = event
        self.tok = tok  # the record of its token (shared if a token was minted twice)

    @property
    def lease(self) -> int:
        """The lease asked for, in microseconds (``lease_expires_at - claimed_at``)."""
        return self.lease_expires_at - self.claimed_at

    def __repr__(self) -> str:
        return (
            f"JournalClaim(task={self.task!r}, token={self.token[:8]}…, proc={self.proc!r}, "
            f"claimed_at={self.claimed_at}, lease_expires_at={self.lease_expires_at}, "
            f"reclaimed={self.reclaimed}, attempt_no={self.attempt_no})"
        )


class TokenRecord:
    """Everything the history says about one claim token."""

    __slots__ = (
        "claims",
        "hb_events",
        "hb_expiries",
        "hb_unknown",
        "out_fail",
        "out_info",
        "out_invoke",
        "out_ok",
        "out_ok_events",
        "out_ops",
        "run_answers",
        "run_events",
        "run_invokes",
        "task",
    )

    def __init__(self, task: str | None) -> None:
        self.task = task
        self.claims = 0  # claim ok entries that carried this token
        self.hb_expiries: list[int] | None = None  # lease_expires_at of each heartbeat ok
        self.hb_events: list[int] | None = None  # ... and the position of that event
        self.hb_unknown = 0  # heartbeat info
        self.out_invoke = 0
        self.out_ok = 0
        self.out_fail = 0
        self.out_info = 0
        self.out_ok_events: list[int] | None = None
        self.out_ops: set[str] | None = None  # which outcome ops were called
        self.run_invokes = 0
        self.run_answers = 0
        self.run_events: list[int] | None = None

    def heartbeats(self) -> list[tuple[int, int]]:
        """``(lease_expires_at, event position)`` of every acknowledged heartbeat."""
        if self.hb_expiries is None or self.hb_events is None:
            return []
        return list(zip(self.hb_expiries, self.hb_events, strict=True))

    def outcome_may_have_applied(self) -> bool:
        """True if some outcome call with this token was acknowledged, is unknown, or
        was left open (its process died): only then can the storage hold its outcome."""
        answered = self.out_ok + self.out_fail + self.out_info
        return self.out_ok > 0 or self.out_info > 0 or self.out_invoke > answered

    @property
    def runs(self) -> int:
        """Handler executions under this token (invokes; answers if invokes were lost)."""
        return max(self.run_invokes, self.run_answers)


class TaskRecord:
    """Everything the history says about one task id."""

    __slots__ = ("claims", "enqueued", "redrive_answers", "redrive_invokes", "runs")

    def __init__(self) -> None:
        self.claims: list[JournalClaim] = []
        self.enqueued = False  # an enqueue ok names it
        self.redrive_invokes = 0
        self.redrive_answers = 0  # redrive ok/info events that name it
        self.runs = 0

    @property
    def redrives(self) -> int:
        """Redrives of this task that may have acted (ok, info, or left open)."""
        return max(self.redrive_invokes, self.redrive_answers)


class HistoryIndex:
    """The index of one history; build it with :func:`index_history`."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.tasks: dict[str, TaskRecord] = {}
        self.tokens: dict[str, TokenRecord] = {}
        self.enqueued: set[str] = set()
        self.faults: list[int] = []
        #: a redrive whose task list is unknown (an info without ``tasks``): any task
        #: may have been redriven by it.
        self.redrive_unknown = False
        #: events the index could not read (missing or ill-typed fields), by position.
        self.skipped: list[int] = []

    def task(self, task_id: str) -> TaskRecord:
        rec = self.tasks.get(task_id)
        if rec is None:
            rec = self.tasks[task_id] = TaskRecord()
        return rec


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def proc_of(ev: Event) -> str:
    """The process that wrote an event (``"?"`` if it does not say)."""
    proc = ev.get("proc")
    return proc if isinstance(proc, str) else "?"


def event_tasks(ev: Event) -> Iterable[str]:
    """The task ids an event concerns (``task``, a claim's entries, a redrive's ids)."""
    task = ev.get("task")
    if isinstance(task, str):
        yield task
    if ev.get("op") == CLAIM:
        for entry in ev.get("claims") or ():
            if isinstance(entry, dict) and isinstance(entry.get("task"), str):
                yield entry["task"]
    tasks = ev.get("tasks")
    if isinstance(tasks, list):
        for t in tasks:
            if isinstance(t, str):
                yield t


def index_history(events: Sequence[Event]) -> HistoryIndex:
    """Read a history once and group it by task and by claim token (linear time)."""
    ix = HistoryIndex(events)
    tasks = ix.tasks
    tokens = ix.tokens
    skipped = ix.skipped
    per_token = _PER_TOKEN
    for i, ev in enumerate(events):
        try:
            op = ev["op"]
            typ = ev["type"]
        except (KeyError, TypeError, IndexError):
            skipped.append(i)
            continue
        if op in per_token:
            try:
                token = ev["token"]
                task = ev["task"]
                rec = tokens.get(token)
            except (KeyError, TypeError):  # no token/task, or an unhashable one
                skipped.append(i)
                continue
            if type(token) is not str or type(task) is not str:
                skipped.append(i)
                continue
            if rec is None:
                rec = tokens[token] = TokenRecord(task)
            if op == HEARTBEAT:
                if typ == OK:
                    expiry = ev.get("lease_expires_at")
                    if type(expiry) is not int:
                        skipped.append(i)
                        continue
                    if rec.hb_expiries is None or rec.hb_events is None:
                        rec.hb_expiries, rec.hb_events = [expiry], [i]
                    else:
                        rec.hb_expiries.append(expiry)
                        rec.hb_events.append(i)
                elif typ == INFO:
                    rec.hb_unknown += 1
            elif op == RUN:
                trec = tasks.get(task)
                if trec is None:
                    trec = tasks[task] = TaskRecord()
                if typ == INVOKE:
                    rec.run_invokes += 1
                    trec.runs += 1
                    if rec.run_events is None:
                        rec.run_events = [i]
                    else:
                        rec.run_events.append(i)
                elif typ == OK or typ == FAIL or typ == INFO:
                    rec.run_answers += 1
                    if rec.run_answers > rec.run_invokes:  # its invoke was lost
                        trec.runs += 1
            else:
                if rec.out_ops is None:
                    rec.out_ops = {op}
                elif op not in rec.out_ops:
                    rec.out_ops.add(op)
                if typ == INVOKE:
                    rec.out_invoke += 1
                elif typ == OK:
                    rec.out_ok += 1
                    if rec.out_ok_events is None:
                        rec.out_ok_events = [i]
                    else:
                        rec.out_ok_events.append(i)
                elif typ == FAIL:
                    rec.out_fail += 1
                elif typ == INFO:
                    rec.out_info += 1
        elif op == CLAIM:
            if typ == OK:
                _claims(ix, i, ev)
        elif op == ENQUEUE:
            task = ev.get("task")
            if typ == OK and type(task) is str:
                ix.enqueued.add(task)
                ix.task(task).enqueued = True
        elif op == REDRIVE:
            # A redrive may have acted if acknowledged, unknown, or left open; count its
            # invoke, or its answer where the invoke is missing (lenient: never fewer).
            if typ == FAIL:
                continue
            ids = ev.get("tasks")
            if not isinstance(ids, list):
                if typ != INVOKE:
                    ix.redrive_unknown = True
                continue
            for t in ids:
                if type(t) is str:
                    trec = ix.task(t)
                    if typ == INVOKE:
                        trec.redrive_invokes += 1
                    else:
                        trec.redrive_answers += 1
        elif op == FAULT or op == SELF_KILL:
            ix.faults.append(i)
    return ix


_PER_TOKEN = frozenset({HEARTBEAT, RUN, COMPLETE, RESCHEDULE, DEAD_LETTER})


def _claims(ix: HistoryIndex, i: int, ev: Event) -> None:
    entries = ev.get("claims")
    if not isinstance(entries, list):
        ix.skipped.append(i)
        return
    proc = ev.get("proc")
    proc = proc if type(proc) is str else "?"
    tasks = ix.tasks
    tokens = ix.tokens
    for entry in entries:
        if not isinstance(entry, dict):
            ix.skipped.append(i)
            continue
        task = entry.get("task")
        token = entry.get("token")
        claimed_at = entry.get("claimed_at")
        expires = entry.get("lease_expires_at")
        if (
            type(task) is not str
            or type(token) is not str
            or type(claimed_at) is not int
            or type(expires) is not int
        ):
            ix.skipped.append(i)
            continue
        tok = tokens.get(token)
        if tok is None:
            tok = tokens[token] = TokenRecord(task)
        tok.claims += 1
        claim = JournalClaim(
            task,
            token,
            claimed_at,
            expires,
            entry.get("reclaimed") is True,
            _int(entry.get("attempt_count")),
            _int(entry.get("attempt_no")),
            proc,
            i,
            tok,
        )
        trec = tasks.get(task)
        if trec is None:
            trec = tasks[task] = TaskRecord()
        trec.claims.append(claim)
