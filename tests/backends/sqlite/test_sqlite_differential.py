"""Differential test: SqliteStorage and the reference MemoryStore, driven by the same
clock through the same operations, must answer identically, field by field.

Tokens are random, so each store's tokens are labelled in the order they were issued
and reports name a label; everything else (times included) must be equal.
"""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from rdq_sqlite.storage import SqliteStorage

from rdq_core.memory import MemoryStore
from rdq_core.model import (
    ByIds,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    utc_from_micros,
)

T0 = 1_700_000_000_000_000
SEC = 1_000_000
_HEX = re.compile(r"[0-9a-f]{8}…")


class Pair:
    """Runs each operation on both stores and asserts the same observable answer."""

    def __init__(self, tmp_path) -> None:
        self.us = T0
        self.mem = MemoryStore(clock=lambda: utc_from_micros(self.us))
        self.sql = SqliteStorage(tmp_path / "diff.sqlite3", create=True, clock=lambda: self.us)
        self.tokens: list[tuple[str, str]] = []  # label index -> (memory token, sqlite token)
        self.steps = 0

    def close(self) -> None:
        self.sql.close()

    @staticmethod
    def _untokened(claims: list[Claim]) -> list[tuple[object, ...]]:
        return [(c.task, c.claimed_at, c.lease_expires_at, c.reclaimed) for c in claims]

    @staticmethod
    def _run(fn) -> tuple[str, object]:
        try:
            return "ok", fn()
        except Exception as exc:  # compare the error type and message
            return type(exc).__name__, _HEX.sub("TOKEN…", str(exc))

    def do(self, what: str, fn) -> object:
        self.steps += 1
        m = self._run(lambda: fn(self.mem))
        s = self._run(lambda: fn(self.sql))
        if m[0] == s[0] == "ok" and isinstance(m[1], list) and m[1] and isinstance(m[1][0], Claim):
            assert self._untokened(m[1]) == self._untokened(s[1]), f"step {self.steps}: {what}"
            self.tokens += [(a.token, b.token) for a, b in zip(m[1], s[1], strict=True)]
            return m[1]
        assert m == s, f"step {self.steps}: {what} diverged:\n memory: {m}\n sqlite: {s}"
        return m[1]

    def fenced(self, what: str, label: int, call) -> None:
        mt, st = self.tokens[label] if label >= 0 else ("0" * 32, "0" * 32)
        self.steps += 1
        m = self._run(lambda: call(self.mem, mt))
        s = self._run(lambda: call(self.sql, st))
        assert m == s, f"step {self.steps}: {what} (token #{label}) diverged:\n {m}\n {s}"

    def everything(self, ids: list[str], queues: list[str]) -> None:
        for i in ids:
            self.do(f"get {i}", lambda st, i=i: st.get(i))
        for q in queues:
            self.do(f"stats {q}", lambda st, q=q: st.stats(q))
            self.do(f"dlq {q}", lambda st, q=q: all_pages(st, q, None))


def all_pages(store, queue: str, flt: DlqFilter | None, size: int = 2) -> list[DlqPage]:
    pages = [store.dlq_list(queue, flt, limit=size)]
    while pages[-1].next_cursor is not None:
        pages.append(store.dlq_list(queue, flt, pages[-1].next_cursor, size))
    return pages


@pytest.fixture
def pair(tmp_path):
    p = Pair(tmp_path)
    yield p
    p.close()


def test_scripted_life_cycle(pair):
    lease = timedelta(seconds=10)
    for i, (q, delay) in enumerate([("q", 0), ("q", -3), ("q", 2), ("r", 0), ("q", 0)]):
        pair.do(
            "enqueue",
            lambda st, i=i, q=q, d=delay: st.enqueue(
                NewTask(
                    f"t{i}",
                    q,
                    "h1" if i % 2 else "h2",
                    b"p%d" % i,
                    {"n": str(i)},
                    timedelta(seconds=d),
                )
            ),
        )
    pair.do("re-enqueue", lambda st: st.enqueue(NewTask("t0", "q", "other", b"changed")))
    pair.do("id conflict", lambda st: st.enqueue(NewTask("t0", "r", "h1")))
    pair.do("claim 2", lambda st: st.claim_due("q", 2, lease))  # tokens 0, 1
    pair.do("claim 5", lambda st: st.claim_due("q", 5, lease))  # token 2
    pair.fenced("complete", 0, lambda st, t: st.complete("t1", t))
    pair.fenced(
        "reschedule",
        1,
        lambda st, t: st.reschedule("t0", t, timedelta(seconds=1), ErrorInfo("Flaky", "retry me")),
    )
    pair.fenced("stale complete", 0, lambda st, t: st.complete("t1", t))
    pair.fenced("unknown token", -1, lambda st, t: st.complete("t4", t))
    pair.us += 3 * SEC
    pair.do("claim after delay", lambda st: st.claim_due("q", 5, lease))  # tokens 3.. (t0, t2)
    pair.fenced("extend", 2, lambda st, t: st.extend_lease("t4", t, timedelta(seconds=30)))
    pair.us += 10 * SEC
    pair.do("reclaim expired", lambda st: st.claim_due("q", 5, lease))
    for label in range(len(pair.tokens)):
        pair.fenced(
            "dead-letter",
            label,
            lambda st, t: st.dead_letter(
                "t0", t, ErrorInfo("Boom", "no", "detail"), Outcome.PERMANENT_FAILURE
            ),
        )
        pair.fenced(
            "dead-letter",
            label,
            lambda st, t: st.dead_letter(
                "t2", t, ErrorInfo("Other", "no"), Outcome.RETRYABLE_FAILURE
            ),
        )
    pair.everything([f"t{i}" for i in range(6)], ["q", "r"])
    pair.do("dlq filter", lambda st: all_pages(st, "q", DlqFilter(error_type="Boom")))
    pair.do("dlq empty filter", lambda st: all_pages(st, "q", DlqFilter()))
    pair.do("redrive", lambda st: st.redrive("q", DlqFilter(handler="h2")))
    pair.do("claim redriven", lambda st: st.claim_due("q", 5, timedelta(seconds=1)))
    pair.us += 2 * SEC
    pair.do("reclaim redriven", lambda st: st.claim_due("q", 5, lease))
    pair.do("purge by ids", lambda st: st.purge("q", ByIds(["t2", "t0", "zz"])))
    pair.do("purge succeeded", lambda st: st.purge_succeeded("q", timedelta(seconds=1)))
    pair.everything([f"t{i}" for i in range(6)], ["q", "r"])


@pytest.mark.parametrize("seed", range(6))
def test_random_programs(pair, seed):
    rng = random.Random(seed)
    ids = [f"id{i}" for i in range(8)]
    queues = ["q", "r"]
    handlers = ["h1", "h2"]
    errors = [None, ErrorInfo("E1", "m1"), ErrorInfo("E2", "m2", "d")]

    def selector():
        if rng.random() < 0.4:
            return ByIds(rng.sample(ids, rng.randint(0, 3)))
        return DlqFilter(
            handler=rng.choice([None, *handlers]),
            error_type=rng.choice([None, "E1", "E2", "rdq.LeaseExpired"]),
            everything=rng.random() < 0.3,
        )

    for _ in range(250):
        op = rng.randrange(12)
        q = rng.choice(queues)
        if op == 0:
            task = NewTask(
                rng.choice(ids),
                q,
                rng.choice(handlers),
                rng.randbytes(3),
                {"k": str(rng.random())},
                timedelta(seconds=rng.choice([-2, 0, 0, 3])),
            )
            pair.do("enqueue", lambda st, task=task: st.enqueue(task))
        elif op in (1, 2):
            n, lease = rng.randint(1, 3), timedelta(seconds=rng.choice([1, 2, 5]))
            pair.do("claim", lambda st, q=q, n=n, lease=lease: st.claim_due(q, n, lease))
        elif op in (3, 4, 5, 6) and pair.tokens:
            label = rng.randrange(-1, len(pair.tokens))
            tid = rng.choice(ids)
            err = rng.choice(errors)
            kind = rng.randrange(4)
            if kind == 0:
                call = lambda st, t, tid=tid: st.complete(tid, t)  # noqa: E731
            elif kind == 1:
                delay = timedelta(seconds=rng.choice([0, 1, 4]))
                call = lambda st, t, tid=tid, d=delay, e=err: st.reschedule(tid, t, d, e)  # noqa: E731
            elif kind == 2:
                out = rng.choice([Outcome.PERMANENT_FAILURE, Outcome.RETRYABLE_FAILURE])
                call = lambda st, t, tid=tid, e=err, o=out: st.dead_letter(tid, t, e, o)  # noqa: E731
            else:
                lease = timedelta(seconds=rng.choice([1, 3]))
                call = lambda st, t, tid=tid, lease=lease: st.extend_lease(tid, t, lease)  # noqa: E731
            pair.fenced("report", label, call)
        elif op == 7:
            pair.us += rng.choice([0, 1, 500_000, SEC, 3 * SEC])
        elif op == 8:
            sel = selector()
            pair.do("redrive", lambda st, q=q, s=sel: st.redrive(q, s))
        elif op == 9:
            sel = selector()
            pair.do("purge", lambda st, q=q, s=sel: st.purge(q, s))
        elif op == 10:
            flt = rng.choice([None, selector()])
            flt = flt if isinstance(flt, DlqFilter) else None
            size = rng.randint(1, 3)
            pair.do("dlq", lambda st, q=q, f=flt, n=size: all_pages(st, q, f, n))
        else:
            older = timedelta(seconds=rng.choice([0, 2]))
            pair.do("purge succeeded", lambda st, q=q, o=older: st.purge_succeeded(q, o))
        if rng.random() < 0.1:
            pair.everything(ids, queues)
    pair.everything(ids, queues)
    pair.do("now", lambda st: st.now())
