"""Crafted histories for the checker's tests: a small builder of events as the fleet
writes them (:class:`H`), the final state's tasks and attempts, and the assertions
every rule family's tests share (a violation names its task, workers and tokens)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rdq_compliance.chaos.checker import FinalState, Violation, check
from rdq_compliance.rules import RULES
from rdq_core.model import Attempt, Outcome, Status, Task, utc_from_micros

# ---- a small builder for crafted histories ----------------------------------------------------

T0 = 1_700_000_000_000_000
SEC = 1_000_000
LEASE = 10  # seconds

SUCCESS = Outcome.SUCCESS
RETRY = Outcome.RETRYABLE_FAILURE
PERM = Outcome.PERMANENT_FAILURE
EXPIRED = Outcome.LEASE_EXPIRED

A, B, C = "a" * 32, "b" * 32, "c" * 32  # claim tokens


def at(s: float) -> int:
    """Storage time ``s`` seconds into the run (integer µs)."""
    return T0 + round(s * SEC)


class H:
    """A history under construction: events as the fleet writes them (times in seconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq: Counter[str] = Counter()
        self.ran: set[str] = set()

    def ev(self, s: float, proc: str, type_: str, op: str, **fields: Any) -> dict[str, Any]:
        e = {"seq": self.seq[proc], "proc": proc, "pid": 100, "t": at(s) / SEC}
        e.update(type=type_, op=op, **fields)
        self.seq[proc] += 1
        self.events.append(e)
        return e

    def enqueue(self, *tasks: str) -> H:
        for t in tasks:
            self.ev(0, "harness", "ok", "enqueue", task=t, handler="h", created=True)
        return self

    def claim(
        self,
        s: float,
        proc: str,
        task: str,
        token: str,
        *,
        reclaimed: bool = False,
        no: int = 1,
        count: int = 0,
        lease: float = LEASE,
    ) -> H:
        self.ev(s, proc, "invoke", "claim", limit=1)
        entry = {
            "task": task,
            "token": token,
            "claimed_at": at(s),
            "lease_expires_at": at(s + lease),
            "reclaimed": reclaimed,
            "attempt_count": count,
            "attempt_no": no,
        }
        self.ev(s, proc, "ok", "claim", claims=[entry])
        return self

    def lost_claim(self, s: float, proc: str) -> H:
        """A claim whose reply was lost: it may have happened, token unknown."""
        self.ev(s, proc, "invoke", "claim", limit=1)
        self.ev(s, proc, "info", "claim", error="BackendUnavailable: connection lost")
        return self

    def run(
        self,
        s: float,
        proc: str,
        task: str,
        token: str,
        *,
        end: float | None = None,
        again: bool = False,
    ) -> H:
        """The handler starts (once per token unless ``again``) and, with ``end``, returns."""
        if again or token not in self.ran:
            self.ran.add(token)
            self.ev(s, proc, "invoke", "run", task=task, token=token, attempt_no=1, handler="h")
        if end is not None:
            self.ev(end, proc, "ok", "run", task=task, token=token)
        return self

    def beat(
        self, s: float, proc: str, task: str, token: str, type_: str = "ok", lease: float = LEASE
    ) -> H:
        self.ev(s, proc, "invoke", "heartbeat", task=task, token=token)
        if type_ == "ok":
            self.ev(s, proc, "ok", "heartbeat", task=task, token=token,
                    lease_expires_at=at(s + lease))
        elif type_ == "fail":
            self.ev(s, proc, "fail", "heartbeat", task=task, token=token, error="stale")
        else:
            self.ev(s, proc, "info", "heartbeat", task=task, token=token, error="unavailable")
        return self

    def report(
        self, s: float, proc: str, task: str, token: str, op: str = "complete", type_: str = "ok"
    ) -> H:
        self.ev(s, proc, "invoke", op, task=task, token=token)
        if type_ != "open":
            extra = {"error": "stale"} if type_ == "fail" else {}
            self.ev(s, proc, type_, op, task=task, token=token, **extra)
        if type_ == "fail":
            self.ev(s, proc, "info", "lease_lost", task=task, token=token)
        return self

    def redrive(self, s: float, *tasks: str) -> H:
        self.ev(s, "harness", "invoke", "redrive", tasks=list(tasks))
        self.ev(s, "harness", "ok", "redrive", tasks=list(tasks), count=len(tasks))
        return self

    def kill(self, s: float, proc: str) -> H:
        self.ev(s, "harness", "info", "fault", kind="kill", target=proc)
        return self


def att(no: int, start: float, fin: float, outcome: Outcome) -> Attempt:
    return Attempt(no, utc_from_micros(at(start)), utc_from_micros(at(fin)), outcome)


def task(
    task_id: str, status: Status, *attempts: Attempt, redrives: int = 0, count: int | None = None
) -> Task:
    return Task(
        id=task_id,
        queue="q",
        handler="h",
        payload=b"",
        headers={},
        status=status,
        attempt_count=len(attempts) if count is None else count,
        redrive_count=redrives,
        next_attempt_at=None,
        lease_expires_at=None,
        created_at=utc_from_micros(T0),
        attempts=attempts,
    )


def final(
    *tasks: Task,
    dlq: list[Task] | None = None,
    enqueued: tuple[str, ...] = (),
    drained: bool = True,
) -> FinalState:
    dead = [t for t in tasks if t.status is Status.DEAD]
    return FinalState(
        tasks={t.id: t for t in tasks},
        dlq=dead if dlq is None else dlq,
        enqueued=frozenset(enqueued or [t.id for t in tasks]),
        drained=drained,
    )


def of(violations: list[Violation], rule: str) -> list[Violation]:
    assert rule in RULES
    return [v for v in violations if v.rule == rule]


def assert_names(
    v: Violation, task_id: str, workers: tuple[str, ...] = (), tokens: tuple[str, ...] = ()
) -> None:
    """The violation and its message name the task, workers and tokens."""
    assert v.task == task_id
    assert v.message.startswith(f"[{v.rule}] ")
    assert repr(task_id) in v.message
    for w in workers:
        assert w in v.workers, (w, v.workers)
        assert w in v.message
    for tok in tokens:
        assert tok in v.tokens, (tok, v.tokens)
        assert tok in v.message
    text = str(v)
    assert text.startswith(v.message)
    if v.excerpt:
        assert "timeline of task" in text


def clean(events: list[dict[str, Any]], state: FinalState) -> None:
    got = check(events, state)
    assert got == [], "\n\n".join(map(str, got))


def reclaimed_at(s: float, *, beat: str | None = None, beat_at: float = 8) -> tuple[H, FinalState]:
    """w0 claims t1 at 0 and may heartbeat at ``beat_at``; w1 reclaims it at ``s``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    if beat is not None:
        h.beat(beat_at, "w0", "t1", A, beat)
    h.kill(s - 0.5, "w0")
    h.claim(s, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(s, "w1", "t1", B, end=s + 1).report(s + 1, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, s, EXPIRED), att(2, s, s + 1, SUCCESS)))
    return h, state
