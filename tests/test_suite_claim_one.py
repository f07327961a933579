"""``claim_one``'s failure names the rule the evidence points to: a task the queue still
counts but did not hand out is ``claim-complete``; a task that is gone is ``no-loss``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq_compliance.suite import helpers
from rdq_core.errors import NotFound
from rdq_core.model import QueueStats


class EmptyClaims:
    """A storage whose claim hands out nothing, whose ``stats`` is given, and that knows
    no task by id."""

    def __init__(self, stats: QueueStats) -> None:
        self._stats = stats

    def claim_due(self, queue: str, limit: int, lease: timedelta) -> list:
        return []

    def stats(self, queue: str) -> QueueStats:
        return self._stats

    def get(self, task_id: str):
        raise NotFound(task_id)


@pytest.mark.parametrize(
    ("stats", "rule"),
    [
        (QueueStats(in_flight=1), "claim-complete"),
        (QueueStats(pending=1, due=1), "claim-complete"),
        (QueueStats(), "no-loss"),
    ],
)
def test_with_no_task_known_the_queues_stats_decide_the_rule(stats: QueueStats, rule: str):
    with pytest.raises(AssertionError) as failed:
        helpers.claim_one(EmptyClaims(stats), "q-unknown")  # type: ignore[arg-type]
    text = str(failed.value)
    assert text.startswith(f"[{rule}] "), text
    assert "stats('q-unknown')" in text, text


def test_a_known_task_that_is_gone_is_no_loss_whatever_the_stats_say():
    with pytest.raises(AssertionError) as failed:
        helpers.claim_one(EmptyClaims(QueueStats(in_flight=3)), "q", expect="t-gone")  # type: ignore[arg-type]
    text = str(failed.value)
    assert text.startswith("[no-loss] ") and "'t-gone' is gone" in text, text
