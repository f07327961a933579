"""The conformance suite's claim races sized by ``Server.race_size`` (a slow server races
fewer tasks with the same workers), never below the floor per worker."""

from __future__ import annotations

from types import SimpleNamespace

from rdq_compliance.provision.backend import Server
from rdq_compliance.suite.concurrency import MIN_TASKS_PER_WORKER, race_tasks


def test_a_server_races_the_full_count_unless_it_says_it_is_slow() -> None:
    assert Server.race_size == 1.0
    assert race_tasks(SimpleNamespace(race_size=1.0), 4, 300) == 1200
    assert race_tasks(SimpleNamespace(), 8, 25) == 200  # a server without the attribute


def test_a_slow_server_races_its_share_but_never_below_the_floor() -> None:
    slow = SimpleNamespace(race_size=1 / 3)
    assert race_tasks(slow, 4, 300) == 400
    assert race_tasks(slow, 8, 25) == 8 * MIN_TASKS_PER_WORKER
    assert race_tasks(SimpleNamespace(race_size=0.0), 4, 300) == 4 * MIN_TASKS_PER_WORKER
    assert race_tasks(SimpleNamespace(race_size=5.0), 4, 300) == 1200  # never more
