"""A chaos handler's work is counted in running time: a pause does no work.

A worker SIGSTOPped mid-task must resume with the rest of its task still to do, so that
its heartbeat thread beats (late) while the handler still runs: bug class ``stale-heartbeat``
shows at that moment. Counted in wall time, a pause past the handler's length ended the handler
at the resume and the late heartbeat raced the report.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rdq_compliance.chaos import worker_main


class _Clock:
    """A monotonic clock that a test moves; ``sleep`` advances it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []
        self.stop_at: float | None = None  # when the clock passes it, jump `stop_for`
        self.stop_for = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert len(self.slept) < 10_000, "work() does not end: it sleeps without end"
        self.slept.append(s)
        self.now += s
        if self.stop_at is not None and self.now >= self.stop_at:
            self.now += self.stop_for  # the process was stopped here
            self.stop_at = None


class _Switch:
    def __init__(self) -> None:
        self.fired = 0

    def fire(self, point: str, task: str | None = None, token: str | None = None) -> None:
        assert point == "in_handler"
        self.fired += 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(worker_main, "time", c)
    return c


def _handler() -> worker_main.ChaosHandler:
    blocked = worker_main.Blocked()
    return worker_main.ChaosHandler(_Switch(), blocked, worker_main.Blocked())  # type: ignore[arg-type]


CTX = SimpleNamespace(task=SimpleNamespace(id="t-1"), token="tok")


def test_work_without_a_pause_takes_its_length(clock: _Clock) -> None:
    start = clock.now
    _handler().work(CTX, 1.0)  # type: ignore[arg-type]
    assert clock.now - start == pytest.approx(1.0, abs=1e-9)
    assert max(clock.slept) <= worker_main._STEP


def test_a_pause_past_the_work_leaves_the_rest_to_do(clock: _Clock) -> None:
    start = clock.now
    clock.stop_at, clock.stop_for = start + 0.3, 4.0  # stopped 4 s, 0.3 s into 1 s of work
    _handler().work(CTX, 1.0)  # type: ignore[arg-type]
    ran = sum(clock.slept)
    # about 0.7 s of work after the resume (the stopped gap counts as one step at most)
    assert ran >= 1.0 - worker_main._CREDIT
    assert clock.now - start == pytest.approx(4.0 + ran)
    assert clock.now - start > 4.7

