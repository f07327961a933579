"""PostgreSQL under the clock-skew campaign (issue 14, item 2), on a private server the
kit starts from the local binaries.

- the ``postgres`` backend (every time is the server's ``now()``) passes it;
- the ``client_clock`` variant (:mod:`tests.broken.postgres`: the claim, heartbeat and
  outcome SQL bind the worker's ``datetime.now(UTC)`` instead of calling ``now()``) is
  caught under ``storage-clock``, naming a task and the two workers whose clocks
  disagree — and the same campaign without the skew passes it: on one host the client's
  clock is the server's.
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
    catalogue.Campaign, "postgres", by=catalogue.relative(__file__)
)


@pytest.mark.parametrize(
    ("backend", "skewed"),
    [
        ("postgres", True),
        (VARIANT.dotted, True),
        (VARIANT.dotted, False),
    ],
    ids=["postgres-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    backend: str,
    skewed: bool,
    record_property: Callable[[str, object], None],
) -> None:
    result = skew_case(monkeypatch, backend, tmp_path, skewed=skewed, record=record_property)
    assert "local" in result.server_origin or "binar" in result.server_origin, (
        result.server_origin
    )
    if backend == "postgres" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result, rules=SKEW.rules)
