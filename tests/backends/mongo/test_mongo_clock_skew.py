"""MongoDB under the clock-skew campaign (issue 14, item 2), on the mongo tests' server:
``RDQ_MONGO_DSN``, else the local rung — here SecantusDB, a MongoDB wire-protocol
stand-in, not MongoDB (the result's server label says which).

- the ``mongo`` backend (every time is the server's ``$$NOW``) passes it;
- the ``client_clock`` variant (:mod:`_mongo_variants`: the claim's filter and stamps use
  the client's datetime instead of ``$$NOW``) is caught under ``storage-clock``, naming a
  task and the two workers whose clocks disagree — and the same campaign without the
  skew passes it: on one host the client's clock is the server's.
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
        ("mongo", True),
        ("_mongo_variants:client_clock", True),
        ("_mongo_variants:client_clock", False),
    ],
    ids=["mongo-passes", "client-clock-caught", "client-clock-passes-unskewed"],
)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    mongo_server: object,
    backend: str,
    skewed: bool,
) -> None:
    dsn = mongo_server.dsn  # type: ignore[attr-defined]
    session = variant_session(monkeypatch, backend, tmp_path / "srv", dsn=dsn, module_dir=HERE)
    try:
        result, _ = skew_campaign(session, tmp_path / "out", skewed=skewed)
    finally:
        session.close()
    if backend == "mongo" or not skewed:
        assert_clean(result)
    else:
        assert_caught(result)
