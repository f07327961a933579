"""Redis under the clock-skew campaign (issue 14, item 2), on the test server.

- the ``redis`` backend (every script reads ``TIME`` on the server) passes it;
- the ``client_clock`` variant (:mod:`rdq_broken_redis`: every script takes ``now`` from
  an ``ARGV`` the client sends) is caught by it under the rule ``storage-clock``, naming a
  task and the two workers whose clocks disagree — and the same campaign without the skew
  passes it (as does the conformance suite, ``test_redis_variants.py``): only skewed
  client clocks tell ``now`` in ``ARGV`` from ``TIME``.
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
        ("redis", True),
        ("rdq_broken_redis:client_clock", True),
        ("rdq_broken_redis:client_clock", False),
    ],
    ids=["redis-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dsn: str, backend: str, skewed: bool
) -> None:
    session = variant_session(monkeypatch, backend, tmp_path / "srv", dsn=dsn, module_dir=HERE)
    try:
        result, _ = skew_campaign(session, tmp_path / "out", skewed=skewed)
    finally:
        session.close()
    if backend == "redis" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result)
