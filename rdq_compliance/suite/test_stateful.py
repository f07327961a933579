"""The stateful machine through the plugin: ``pytest --rdq-backend=NAME -m stateful``.

Several logical workers (each with its own connection) and an operator drive the backend
and the in-memory reference store side by side with hypothesis-generated programs that
cover the whole SPI; after every step invariant H, the one rule and "the backend's
observable state equals the model's" must hold (see :mod:`rdq_compliance.stateful` for
the rules and how time is handled). A failure shows the shrunk program and the seed.

``--rdq-hypothesis-profile=ci`` (default: 100 programs of up to 30 steps, a fixed seed)
or ``deep`` (2000 programs of up to 60 steps, a fresh seed each run);
``--rdq-hypothesis-seed=N`` replays a seed. Failing programs are kept in
``<rootdir>/.hypothesis/rdq-stateful/<backend>/`` (cache it in CI) and replay first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rdq_compliance import stateful

pytestmark = pytest.mark.stateful

#: Where a finished run's seconds are kept, per backend and profile (pytest's cache).
LAST_RUN_KEY = "rdq/stateful-seconds"


def _progress(config: pytest.Config) -> Callable[[str], None] | None:
    """Progress lines on the terminal while the machine runs: not from an xdist worker
    (it has no terminal), nor under ``-qq``."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or hasattr(config, "workerinput"):
        return None
    if config.get_verbosity() < -1:
        return None

    def write(line: str) -> None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return write


def test_backend_behaves_like_the_reference_model(rdq_session, rdq_settings, pytestconfig):
    """Rule model-equivalence: every rule the machine checks holds step by step over generated
    interleavings, and the backend's observable state equals the reference store's."""
    name = rdq_session.name
    profile = pytestconfig.getoption("rdq_hypothesis_profile")
    rerun = (
        f"pytest --rdq-backend={name} -m stateful --rdq-hypothesis-profile={profile} "
        "--rdq-hypothesis-seed={seed}" + (" --rdq-dsn=..." if rdq_settings.dsn else "")
    )
    cache = getattr(pytestconfig, "cache", None)  # None with -p no:cacheprovider
    last = cache.get(LAST_RUN_KEY, {}) if cache is not None else {}
    key = f"{name}/{profile}"
    expected = f"{last[key]:.0f} s (the last run here)" if key in last else None
    t0 = time.perf_counter()
    stateful.run(
        rdq_session,
        profile=profile,
        seed=pytestconfig.getoption("rdq_hypothesis_seed"),
        database=stateful.database_for(pytestconfig.rootpath, name),
        rerun=rerun,
        progress=_progress(pytestconfig),
        expected=expected,
    )
    if cache is not None:
        cache.set(LAST_RUN_KEY, {**last, key: round(time.perf_counter() - t0, 1)})
