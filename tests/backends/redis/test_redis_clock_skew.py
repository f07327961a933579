"""Redis under the clock-skew campaign (issue 14, item 2), on the test server.

- the ``redis`` backend (every script reads ``TIME`` on the server) passes it;
- the ``client_clock`` variant (:mod:`tests.broken.redis`: every script takes ``now`` from
  an ``ARGV`` the client sends) is caught by it under the rule ``storage-clock``, naming a
  task and the two workers whose clocks disagree — and the same campaign without the skew
  passes it (as does the conformance suite, ``test_redis_variants.py``): only skewed
  client clocks tell ``now`` in ``ARGV`` from ``TIME``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests._skew_support import assert_caught, assert_clean, skew_case
from tests.broken import catalogue

pytestmark = [pytest.mark.chaos]

#: The variant and what must catch it: the catalogue's (the skew campaign).
((VARIANT, SKEW),) = catalogue.cases(
    catalogue.Campaign, "redis", by=catalogue.relative(__file__)
)


@pytest.mark.parametrize(
    ("backend", "skewed"),
    [
        ("redis", True),
        (VARIANT.dotted, True),
        (VARIANT.dotted, False),
    ],
    ids=["redis-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    dsn: str,
    backend: str,
    skewed: bool,
    record_property: Callable[[str, object], None],
) -> None:
    result = skew_case(
        monkeypatch, backend, tmp_path, skewed=skewed, dsn=dsn, record=record_property
    )
    if backend == "redis" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result, rules=SKEW.rules)
