"""MongoDB under the clock-skew campaign (issue 14, item 2), on the mongo tests' server:
``RDQ_MONGO_DSN``, else the local rung — here SecantusDB, a MongoDB wire-protocol
stand-in, not MongoDB (the result's server label says which).

- the ``mongo`` backend (every time is the server's ``$$NOW``) passes it;
- the ``client_clock`` variant (:mod:`tests.broken.mongo`: the claim's filter and stamps use
  the client's datetime instead of ``$$NOW``) is caught under ``storage-clock``, naming a
  task and the two workers whose clocks disagree — and the same campaign without the
  skew passes it: on one host the client's clock is the server's.
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
    catalogue.Campaign, "mongo", by=catalogue.relative(__file__)
)


@pytest.mark.parametrize(
    ("backend", "skewed"),
    [
        ("mongo", True),
        (VARIANT.dotted, True),
        (VARIANT.dotted, False),
    ],
    ids=["mongo-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mongo_server: object,
    backend: str,
    skewed: bool,
    record_property: Callable[[str, object], None],
) -> None:
    dsn = mongo_server.dsn  # type: ignore[attr-defined]
    result = skew_case(
        monkeypatch, backend, tmp_path, skewed=skewed, dsn=dsn, record=record_property
    )
    if backend == "mongo" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result, rules=SKEW.rules)
