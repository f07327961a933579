"""A small, deterministic chaos run in one thread, for the checker's own tests.

A :class:`Sim` drives a real store (the reference :class:`~rdq_core.memory.MemoryStore`,
or one of the deliberately broken stores of ``tests/broken/memory.py``) on a
manual clock, and journals every step exactly as the fleet does
(:mod:`rdq_compliance.chaos.journal_observer`): workers write claim / run / heartbeat /
outcome / lease_lost events, the harness enqueue / redrive / fault events. Faults are
steps too: a reply lost after the storage acted (``info``), a call that never reached
the storage (``info``), a worker killed with an operation in flight (an open invoke),
a worker paused past its lease (it simply does not act while the clock moves).

Workers behave like :class:`rdq_core.worker.Worker`: they report only a claim they
still hold, drop it (``lease_lost``) when a heartbeat or report is refused as stale,
and give up a claim whose report was left unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance.chaos.checker import FinalState, read_final_state
from rdq_compliance.chaos.events import FAIL, INFO, INVOKE, OK, Event
from rdq_core.errors import StaleClaim
from rdq_core.memory import MemoryStore
from rdq_core.model import (
    ByIds,
    Claim,
    ErrorInfo,
    NewTask,
    Outcome,
    micros_from_utc,
    utc_from_micros,
)

Q = "chaos"
T0_US = 1_700_000_000_000_000
LEASE_US = 10_000_000
LEASE = timedelta(microseconds=LEASE_US)


def claim_entry(c: Claim) -> dict[str, Any]:
    return {
        "task": c.task.id,
        "token": c.token,
        "claimed_at": micros_from_utc(c.claimed_at),
        "lease_expires_at": micros_from_utc(c.lease_expires_at),
        "reclaimed": c.reclaimed,
        "attempt_count": c.task.attempt_count,
        "attempt_no": c.task.next_attempt_no,
    }


@dataclass
class Held:
    claim: Claim
    ran: bool = False  # the handler was started


@dataclass
class SimWorker:
    name: str
    alive: bool = True
    held: dict[str, Held] = field(default_factory=dict)  # by token, in claim order


class Sim:
    """One run: a store on a manual clock, workers, the harness, their journals."""

    def __init__(self, store_cls: type[MemoryStore] = MemoryStore, *, tick_us: int = 1) -> None:
        self.now_us = T0_US
        self.tick_us = tick_us  # how far the clock moves per storage call (0: frozen)
        self.store = store_cls(clock=self._clock)
        self.journals: dict[str, list[Event]] = {"harness": []}
        self.workers: list[SimWorker] = []
        self.enqueued: list[str] = []
        self._next_worker = 0
        self._next_task = 0
        self.drained: bool | None = None

    # ---- plumbing -------------------------------------------------------------------------

    def _clock(self) -> datetime:
        self.now_us += self.tick_us
        return utc_from_micros(self.now_us)

    def emit(self, proc: str, type_: str, op: str, **fields: Any) -> Event:
        journal = self.journals.setdefault(proc, [])
        ev: Event = {
            "seq": len(journal),
            "proc": proc,
            "pid": 1000 + sorted(self.journals).index(proc),
            "t": self.now_us / 1e6,
            "type": type_,
            "op": op,
        }
        ev.update(fields)
        journal.append(ev)
        return ev

    def advance(self, us: int) -> None:
        self.now_us += us

    def spawn(self) -> SimWorker:
        w = SimWorker(f"w{self._next_worker}")
        self._next_worker += 1
        self.journals.setdefault(w.name, [])
        self.workers.append(w)
        return w

    def alive(self) -> list[SimWorker]:
        return [w for w in self.workers if w.alive]

    @property
    def events(self) -> list[Event]:
        """The history, as :func:`read_history` gives it (journals by name)."""
        out: list[Event] = []
        for proc in sorted(self.journals):
            out.extend(self.journals[proc])
        return out

    # ---- harness --------------------------------------------------------------------------

    def enqueue(self, n: int = 1, delay_us: int = 0) -> list[str]:
        ids = []
        for _ in range(n):
            task_id = f"t{self._next_task:03d}"
            self._next_task += 1
            self.store.enqueue(NewTask(task_id, Q, "h", delay=timedelta(microseconds=delay_us)))
            self.emit("harness", OK, "enqueue", task=task_id, handler="h", created=True)
            self.enqueued.append(task_id)
            ids.append(task_id)
        return ids

    def redrive_dead(self) -> list[str]:
        ids = [t.id for t in self._dlq()]
        if not ids:
            return []
        self.emit("harness", INVOKE, "redrive", tasks=ids)
        n = self.store.redrive(Q, ByIds(ids))
        self.emit("harness", OK, "redrive", tasks=ids, count=n)
        return ids

    def _dlq(self) -> list[Any]:
        out = []
        cursor = None
        while True:
            page = self.store.dlq_list(Q, None, cursor, 100)
            out.extend(page.tasks)
            cursor = page.next_cursor
            if cursor is None:
                return out

    def kill(self, w: SimWorker, in_flight: str | None = None) -> SimWorker:
        """SIGKILL ``w`` (a replacement worker is spawned). ``in_flight`` leaves an open
        invoke in its journal: ``"claim+"`` (the claim happened), ``"claim-"`` (it did
        not), ``"complete+"``/``"complete-"`` (on its first held claim), ``"run"``."""
        self.emit("harness", INFO, "fault", kind="kill", target=w.name)
        first = next(iter(w.held.values()), None)
        if in_flight in ("claim+", "claim-"):
            self.emit(w.name, INVOKE, "claim", limit=1)
            if in_flight == "claim+":
                self._try_claim(1)
        elif in_flight in ("complete+", "complete-") and first is not None:
            self._start_run(w, first)
            self.emit(w.name, OK, "run", task=first.claim.task_id, token=first.claim.token)
            self.emit(w.name, INVOKE, "complete", task=first.claim.task_id, token=first.claim.token)
            if in_flight == "complete+":
                try:
                    self.store.complete(first.claim.task_id, first.claim.token)
                except StaleClaim:
                    pass
        elif in_flight == "run" and first is not None:
            self._start_run(w, first)
        w.alive = False
        w.held.clear()
        return self.spawn()

    # ---- workers --------------------------------------------------------------------------

    def _try_claim(self, limit: int) -> list[Claim] | BaseException:
        try:
            return self.store.claim_due(Q, limit, LEASE)
        except Exception as exc:  # e.g. a broken store's unique violation
            return exc

    def claim(self, w: SimWorker, limit: int = 1, reply: str = "ok") -> list[Claim]:
        """``reply``: ``ok``; ``lost`` (it happened, the worker never learns it);
        ``failed`` (the call never reached the storage)."""
        self.emit(w.name, INVOKE, "claim", limit=limit)
        if reply == "failed":
            self.emit(w.name, INFO, "claim", error="BackendUnavailable: connection refused")
            return []
        got = self._try_claim(limit)
        if isinstance(got, BaseException):
            self.emit(w.name, INFO, "claim", error=f"{type(got).__name__}: {got}")
            return []
        if reply == "lost":
            self.emit(w.name, INFO, "claim", error="BackendUnavailable: connection lost")
            return []
        self.emit(w.name, OK, "claim", claims=[claim_entry(c) for c in got])
        for c in got:
            w.held[c.token] = Held(c)
        return got

    def _start_run(self, w: SimWorker, h: Held) -> None:
        if not h.ran:
            h.ran = True
            self.emit(
                w.name,
                INVOKE,
                "run",
                task=h.claim.task_id,
                token=h.claim.token,
                attempt_no=h.claim.task.next_attempt_no,
                handler="h",
            )

    def start(self, w: SimWorker, h: Held) -> None:
        self._start_run(w, h)

    def _lost(self, w: SimWorker, h: Held) -> None:
        w.held.pop(h.claim.token, None)
        self.emit(w.name, INFO, "lease_lost", task=h.claim.task_id, token=h.claim.token)

    def heartbeat(self, w: SimWorker, h: Held, reply: str = "ok") -> None:
        task_id, token = h.claim.task_id, h.claim.token
        self.emit(w.name, INVOKE, "heartbeat", task=task_id, token=token)
        if reply == "failed":
            self.emit(w.name, INFO, "heartbeat", task=task_id, token=token, error="unavailable")
            return
        try:
            expiry = self.store.extend_lease(task_id, token, LEASE)
        except StaleClaim:
            if reply == "lost":
                self.emit(w.name, INFO, "heartbeat", task=task_id, token=token, error="lost")
                return
            self.emit(w.name, FAIL, "heartbeat", task=task_id, token=token, error="stale")
            self._lost(w, h)
            return
        if reply == "lost":
            self.emit(w.name, INFO, "heartbeat", task=task_id, token=token, error="lost")
            return
        self.emit(
            w.name,
            OK,
            "heartbeat",
            task=task_id,
            token=token,
            lease_expires_at=micros_from_utc(expiry),
        )

    def report(
        self,
        w: SimWorker,
        h: Held,
        kind: str = "complete",
        reply: str = "ok",
        *,
        delay_us: int = 0,
        outcome: Outcome = Outcome.PERMANENT_FAILURE,
    ) -> str:
        """Finish the handler and report ``kind``; ``reply`` as for :meth:`claim`.
        Returns ``ok``, ``stale`` or ``unknown``."""
        task_id, token = h.claim.task_id, h.claim.token
        self._start_run(w, h)
        if kind == "complete":
            self.emit(w.name, OK, "run", task=task_id, token=token)
        else:
            self.emit(w.name, FAIL, "run", task=task_id, token=token, error="RuntimeError: boom")
        self.emit(w.name, INVOKE, kind, task=task_id, token=token)
        if reply == "failed":
            self.emit(w.name, INFO, kind, task=task_id, token=token, error="unavailable")
            w.held.pop(token, None)
            return "unknown"
        try:
            if kind == "complete":
                self.store.complete(task_id, token)
            elif kind == "reschedule":
                self.store.reschedule(
                    task_id, token, timedelta(microseconds=delay_us), ErrorInfo("E", "boom")
                )
            else:
                self.store.dead_letter(task_id, token, ErrorInfo("E", "boom"), outcome)
        except StaleClaim:
            if reply == "lost":
                self.emit(w.name, INFO, kind, task=task_id, token=token, error="unavailable")
                w.held.pop(token, None)
                return "unknown"
            self.emit(w.name, FAIL, kind, task=task_id, token=token, error="stale")
            self._lost(w, h)
            return "stale"
        if reply == "lost":
            self.emit(w.name, INFO, kind, task=task_id, token=token, error="unavailable")
            w.held.pop(token, None)
            return "unknown"
        self.emit(w.name, OK, kind, task=task_id, token=token)
        w.held.pop(token, None)
        return "ok"

    # ---- the end of a run -----------------------------------------------------------------

    def drain(self, rounds: int = 60) -> bool:
        """A fresh worker claims and completes everything; True if the queue emptied."""
        d = self.spawn()
        for _ in range(rounds):
            stats = self.store.stats(Q)
            if stats.pending == 0 and stats.in_flight == 0:
                self.drained = True
                return True
            self.advance(LEASE_US + 1)
            for c in self.claim(d, 50):
                self.report(d, d.held[c.token], "complete")
        stats = self.store.stats(Q)
        self.drained = stats.pending == 0 and stats.in_flight == 0
        return self.drained

    def wake_stale(self) -> None:
        """Workers paused through the drain wake up and report what they still hold."""
        for w in self.alive():
            for h in list(w.held.values()):
                self.report(w, h, "complete")

    def final(self) -> FinalState:
        return read_final_state(self.store, Q, self.enqueued, drained=bool(self.drained))


# ---- random runs ------------------------------------------------------------------------------

REPLIES = ("ok", "ok", "ok", "lost", "failed")
KINDS = ("complete", "complete", "reschedule", "dead_letter")
KILLS = (None, "claim+", "claim-", "complete+", "complete-", "run")


def play(sim: Sim, steps: list[tuple[int, ...]], n_workers: int = 3) -> None:
    """Apply random steps (tuples of small ints, resolved against the current state)."""
    for _ in range(n_workers):
        sim.spawn()
    for step in steps:
        kind, a, b, c = (*step, 0, 0, 0, 0)[:4]
        workers = sim.alive()
        w = workers[a % len(workers)]
        held = list(w.held.values())
        h = held[b % len(held)] if held else None
        op = kind % 9
        if op == 0:
            sim.enqueue(1 + b % 3, delay_us=(c % 3) * 1_000_000)
        elif op == 1:
            sim.claim(w, 1 + b % 3, REPLIES[c % len(REPLIES)])
        elif op == 2 and h is not None:
            sim.start(w, h)
        elif op == 3 and h is not None:
            sim.heartbeat(w, h, REPLIES[c % len(REPLIES)])
        elif op == 4 and h is not None:
            sim.report(
                w,
                h,
                KINDS[c % len(KINDS)],
                REPLIES[(c // len(KINDS)) % len(REPLIES)],
                delay_us=(c % 2) * 2_000_000,
                outcome=(Outcome.RETRYABLE_FAILURE if c % 2 else Outcome.PERMANENT_FAILURE),
            )
        elif op == 5:
            sim.advance((1 + b) * 1_000_000 + c)  # up to several leases: pauses, expiries
        elif op == 6:
            sim.kill(w, KILLS[c % len(KILLS)])
        elif op == 7:
            sim.redrive_dead()
        elif op == 8:
            sim.advance(c)  # a small step


def run(
    steps: list[tuple[int, ...]],
    store_cls: type[MemoryStore] = MemoryStore,
    *,
    tick_us: int = 1,
    wake: bool = True,
) -> tuple[Sim, list[Event], FinalState]:
    """Play ``steps``, drain, let stale workers wake, read the final state."""
    sim = Sim(store_cls, tick_us=tick_us)
    if not any(s and s[0] % 9 == 0 for s in steps):
        sim.enqueue(2)
    play(sim, steps)
    sim.drain()
    if wake:
        sim.wake_stale()
    return sim, sim.events, sim.final()
