"""Every server backend under the clock-skew campaign.

- the backend (every time is its server's: ``now()``, ``TIME``, ``$$NOW``,
  ``NOW(6)``) passes it;
- its ``client_clock`` variant (:mod:`tests.broken`: the time taken from the worker's
  clock instead; listed in ``tests/broken/catalogue.py``, read here) is caught under the
  catalogue's rule (``storage-clock``), naming a task and the two workers whose clocks
  disagree — and the same campaign without the skew passes it: on one host the client's
  clock is the server's. A backend whose store has no such variant (the MariaDB example)
  has those two cases skipped, naming why.

The server: the driver's shared one (Redis at ``RDQ_REDIS_DSN``; MongoDB at
``RDQ_MONGO_DSN``, else the local rung — SecantusDB here, a MongoDB wire-protocol
stand-in, not MongoDB; the MariaDB at ``RDQ_MYSQL_DSN``) or, for PostgreSQL, a private
server the kit starts from the local binaries. ``benchmarks/clock_skew_bugs.py`` runs
this module and tabulates the figures each case records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.provision.backend import Server
from tests._proof import AttemptResult, prove
from tests._skew_support import assert_caught, assert_clean, clock_scenario, skew_case
from tests.broken import catalogue
from tests.server_contract.driver import ServerDriver
from tests.server_contract.drivers import each

pytestmark = [pytest.mark.chaos]


def variant(driver: ServerDriver) -> tuple[catalogue.Variant, catalogue.Campaign] | None:
    """The driver's store's variant the skew campaign must catch, and that catch (the
    catalogue's); None where the store has none."""
    if driver.store is None:
        return None
    ((found, skew),) = catalogue.cases(
        catalogue.Campaign, driver.store, by=catalogue.relative(__file__)
    )
    return found, skew


def _cases(driver: ServerDriver) -> Iterator[tuple[str, tuple[bool, bool]]]:
    """``(id, (the variant?, skewed?))``."""
    yield "passes", (False, True)
    yield "client-clock-caught", (True, True)
    yield "client-clock-passes-unskewed", (True, False)


@pytest.fixture
def dsn(driver: ServerDriver, request: pytest.FixtureRequest) -> str | None:
    """The shared server's DSN (its fixture started only when the campaign runs there)."""
    assert driver.skew is not None
    if not driver.skew.on_shared:
        return None
    server: Server = request.getfixturevalue("shared")
    return server.dsn


@each("skew", cases=_cases)
def test_the_skew_campaign(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    driver: ServerDriver,
    case: tuple[bool, bool],
    dsn: str | None,
    record_property: Callable[[str, object], None],
) -> None:
    is_variant, skewed = case
    backend = driver.backend_ref if driver.pythonpath else driver.name
    rules: tuple[str, ...] = ()
    if is_variant:
        found = variant(driver)
        if found is None:
            pytest.skip(f"tests/broken/catalogue.py lists no client_clock variant of {driver}")
        backend, rules = found[0].dotted, found[1].rules
    for folder in driver.pythonpath:  # the worker processes import the backend too
        current = os.environ.get("PYTHONPATH")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [folder, current])))
    if is_variant and skewed:
        # a proof: the skewed workers' storage times must disagree within the run (one
        # seed, the scenario's; every attempt reported)

        def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
            result = skew_case(
                monkeypatch, backend, tmp_path, skewed=True, dsn=dsn, record=record_property,
                seed=seed,
            )  # fmt: skip
            assert result.checked, f"{result.checker_error}; report folder {result.outdir}"
            named = sorted({v.rule for v in result.violations})
            caught = any(v.rule in rules for v in result.violations)
            facts = {"rules fired": named, "skews": result.counters.clock_skews}
            return AttemptResult(caught, result, facts)

        wanted = f"{backend} caught under {' or '.join(rules)} under clock skew"
        result = prove(wanted, (clock_scenario().seed,), attempt).value
    else:
        result = skew_case(
            monkeypatch, backend, tmp_path, skewed=skewed, dsn=dsn, record=record_property
        )
    if dsn is None:  # the kit started the server from the local binaries
        assert "local" in result.server_origin or "binar" in result.server_origin, (
            result.server_origin
        )
    if is_variant and skewed:
        assert_caught(result, rules=rules)
    else:
        assert_clean(result)
