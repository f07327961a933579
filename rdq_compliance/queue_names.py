"""Queue names for the tests of queues a backend stores side by side (rule
``queue-isolation``).

A store that shards or buckets queues keeps two queues of one bucket apart only if its
code checks the queue there; a test that uses a queue or two lands them in different
buckets. The suite's isolation test (``rdq_compliance.suite.test_neighbours``) and the
stateful machine take their queues from here: the backend's own neighbour queues
(``Backend.neighbour_queues``) when it names them, else names drawn from a seeded pool
-- not numbered: CRC-based bucketings (Redis Cluster's CRC16, a CRC32 shard key) are
linear and spread names that differ only in a counter's digits over distinct buckets.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rdq_core import validation
from rdq_core.errors import InvalidArgument

#: The pool's alphabet and the suite's seed.
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
SEED = 22


class BadNeighbourQueues(ValueError):
    """``Backend.neighbour_queues`` gave names the kit cannot use."""


def spread_names(count: int, seed: int = SEED) -> list[str]:
    """``count`` distinct queue names drawn from ``seed`` (the same names for one seed)."""
    rng = random.Random(seed)
    names: dict[str, None] = {}
    while len(names) < count:
        names["nb-" + "".join(rng.choice(_ALPHABET) for _ in range(10))] = None
    return list(names)


def named_neighbours(backend: object, count: int) -> list[str] | None:
    """The backend's neighbour queues (at least ``count`` asked, at least 2 distinct
    given), or ``None`` when it names none; :class:`BadNeighbourQueues` when a name is
    one the SPI refuses or fewer than 2 are given."""
    hook = getattr(backend, "neighbour_queues", None)
    named: Sequence[str] | None = hook(count) if callable(hook) else None
    if named is None:
        return None
    names = list(dict.fromkeys(named))
    try:
        for name in names:
            validation.queue_name(name)
    except InvalidArgument as exc:
        raise BadNeighbourQueues(
            f"Backend.neighbour_queues gave a name the SPI refuses: {exc}"
        ) from None
    if len(names) < 2:
        raise BadNeighbourQueues(
            f"Backend.neighbour_queues({count}) gave {names!r}: at least 2 distinct names"
        )
    return names


def queue_pair(backend: object, seed: int) -> tuple[str, str]:
    """Two queues for the stateful machine: the first two of the backend's neighbour
    queues, else two names drawn from ``seed`` (a new pair for each seed, so runs with
    fresh seeds try many pairs; the same pair when a seed is replayed)."""
    named = named_neighbours(backend, 2)
    if named is not None:
        return named[0], named[1]
    first, second = spread_names(2, seed)
    return first, second
