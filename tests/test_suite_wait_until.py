"""``wait_until``: waits out a lease of any length on a storage clock that moves, and names
a stuck clock ``storage-clock`` once it is ``timeout`` past where it should have been."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from rdq_compliance.suite import helpers

T0 = datetime(2026, 12, 2, tzinfo=timezone.utc)


class Clock:
    """A storage whose ``now()`` is a fake clock that moves with the fake ``sleep``."""

    def __init__(self, moves: bool = True) -> None:
        self.t = T0
        self.moves = moves

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        if self.moves:
            self.t += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(helpers.time, "sleep", c.sleep)
    real = [0.0]

    def monotonic() -> float:  # real time follows the fake clock's moves
        real[0] = (c.t - T0).total_seconds() if c.moves else real[0] + 0.05
        return real[0]

    monkeypatch.setattr(helpers.time, "monotonic", monotonic)
    return c


def test_a_lease_longer_than_the_timeout_is_waited_out(clock: Clock) -> None:
    helpers.wait_until(clock, T0 + timedelta(seconds=61), timeout=30.0)  # RQ's shortest
    assert clock.t > T0 + timedelta(seconds=61)


def test_a_clock_that_does_not_move_is_named_stuck(clock: Clock) -> None:
    clock.moves = False
    with pytest.raises(AssertionError, match=r"^\[storage-clock\] .*storage clock stuck at"):
        helpers.wait_until(clock, T0 + timedelta(seconds=1), timeout=2.0)
