"""A pytest plugin the proof runs load (``-p _load_plugin``, see ``_proof_runs``): each
test records, as the JUnit property ``bench_load``, the machine's 1-minute load average
sampled while it ran (lowest, highest) and the cores, so every figure a benchmark reads
back from a proof has its own load beside it."""

from __future__ import annotations

from collections.abc import Generator

import pytest
from _figures import LoadWatch

PROPERTY = "bench_load"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with LoadWatch(interval=2.0) as watch:
        yield
    ones = [ld.one for ld in watch.loads]
    item.user_properties.append(
        (PROPERTY, f"{min(ones):.2f} {max(ones):.2f} {watch.loads[0].cores}")
    )
