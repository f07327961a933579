"""The queue names the isolation test and the stateful machine use (rule ``queue-isolation``)."""

from __future__ import annotations

from typing import ClassVar

import hypothesis
import pytest
from rdq_memory.plugin import MemoryBackend

from rdq_compliance import stateful
from rdq_compliance.queue_names import BadNeighbourQueues, named_neighbours, queue_pair
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_core.memory import MemoryStore


class _Named:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def neighbour_queues(self, count: int) -> list[str]:
        return self.names


def test_the_machine_plays_on_the_backends_neighbour_queues() -> None:
    assert queue_pair(_Named(["n1", "n2", "n3"]), seed=7) == ("n1", "n2")


def test_without_neighbours_each_seed_draws_its_own_pair() -> None:
    pairs = {queue_pair(None, seed) for seed in range(50)}
    assert len(pairs) == 50
    assert all(a != b for a, b in pairs)
    assert queue_pair(None, 3) == queue_pair(None, 3)


@pytest.mark.parametrize(
    ("names", "says"),
    [(["only"], "at least 2 distinct names"), (["a", "a"], "at least 2"), (["a", ""], "refuses")],
)
def test_unusable_neighbours_are_refused_with_the_reason(names: list[str], says: str) -> None:
    with pytest.raises(BadNeighbourQueues, match=says):
        named_neighbours(_Named(names), 2)


class _Recording(MemoryStore):
    queues: ClassVar[set[str]] = set()

    def enqueue(self, task):  # type: ignore[no-untyped-def]
        _Recording.queues.add(task.queue)
        return super().enqueue(task)


def test_the_machine_stores_its_tasks_in_the_drawn_queues() -> None:
    backend = MemoryBackend(_Recording, "recording")
    session = Session(Settings(backend="recording"), backend=backend)
    session.start()
    _Recording.queues.clear()
    try:
        settings = hypothesis.settings(stateful.settings_for("ci"), max_examples=20, database=None)
        stateful.run(session, settings=settings, seed=5)
    finally:
        session.close()
    assert _Recording.queues == set(queue_pair(backend, 5))
