"""PostgreSQL under the clock-skew campaign (issue 14, item 2), on a private server the
kit starts from the local binaries.

- the ``postgres`` backend (every time is the server's ``now()``) passes it;
- the ``client_clock`` variant (:mod:`rdq_broken_postgres`: the claim, heartbeat and
  outcome SQL bind the worker's ``datetime.now(UTC)`` instead of calling ``now()``) is
  caught under ``storage-clock``, naming a task and the two workers whose clocks
  disagree — and the same campaign without the skew passes it: on one host the client's
  clock is the server's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._skew_support import assert_caught, assert_clean, skew_campaign, variant_session

pytestmark = [pytest.mark.chaos]

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("backend", "skewed"),
    [
        ("postgres", True),
        ("rdq_broken_postgres:client_clock", True),
        ("rdq_broken_postgres:client_clock", False),
    ],
    ids=["postgres-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str, skewed: bool
) -> None:
    session = variant_session(monkeypatch, backend, tmp_path / "srv", module_dir=HERE)
    try:
        result, _ = skew_campaign(session, tmp_path / "out", skewed=skewed)
    finally:
        session.close()
    assert "local" in result.server_origin or "binar" in result.server_origin, (
        result.server_origin
    )
    if backend == "postgres" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result)
