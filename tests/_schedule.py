"""The order the kit's own tests run in: the long ones first, longest first, so that
``pytest -n 4`` does not end with one worker running a four-minute test while the other
idles.

``tests/durations.json`` holds the seconds each of the slowest tests took in a CI run
(setup + call + teardown). Every run of the kit's own tests keeps its seconds in pytest's
cache (``.pytest_cache``, key :data:`CACHE_KEY`; each run's figures merged into the
last ones); refresh the file after a CI run with
``python -m tests._schedule --from-cache`` (or from a JUnit file of ``pytest
--junitxml``: ``python -m tests._schedule JUNIT.xml``); it keeps the :data:`KEEP`
slowest. The tests recorded at :data:`LONG_S` or more go first, longest first; every
other test keeps pytest's own order (which groups a module's tests, so its module-scoped
servers start once per worker). A stale or missing entry only changes the order, never
what runs.

xdist hands tests out in chunks (by default a quarter of each worker's share up front,
which would give one worker every long test): :func:`hand_out_few` makes it keep only a
couple pending per worker, so the long tests spread over all of them.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests._paths import ROOT

DURATIONS = Path(__file__).with_name("durations.json")
#: a test recorded at this many seconds or more is moved to the front
LONG_S = 20.0
#: tests xdist sends a worker at a time (``--maxschedchunk``), unless given
CHUNK = 2
#: how many of the slowest tests the file keeps
KEEP = 120
#: where a run keeps its seconds in pytest's cache
CACHE_KEY = "rdq/durations"
_seen: dict[str, float] = {}
_skipped: set[str] = set()


def load(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds by node id (``tests/x.py::test_y[param]``); empty if none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"{path}: cannot read the recorded durations: {exc}") from None
    return {str(k): float(v) for k, v in data.items()}


def longest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Move the tests recorded at :data:`LONG_S` or more to the front of ``items``,
    longest first; the others keep their order."""
    long = [item for item in items if seconds.get(item.nodeid, 0.0) >= LONG_S]
    long.sort(key=lambda item: -seconds[item.nodeid])
    moved = {id(item) for item in long}
    items[:] = long + [item for item in items if id(item) not in moved]


def hand_out_few(config: pytest.Config) -> None:
    """Under xdist, send each worker :data:`CHUNK` tests at a time unless
    ``--maxschedchunk`` was given."""
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = CHUNK


def record(report: pytest.TestReport) -> None:
    """Add one phase's seconds to its test's (a skipped test is not recorded)."""
    if report.skipped:
        _skipped.add(report.nodeid)
    _seen[report.nodeid] = _seen.get(report.nodeid, 0.0) + report.duration


def save(config: pytest.Config) -> None:
    """Merge the seconds recorded in this process into pytest's cache (the xdist
    controller sees every worker's reports; a worker writes nothing): a test run again
    gets its new figure, the others keep theirs, so a run of a few tests after a CI run
    does not lose the CI run's figures."""
    cache = getattr(config, "cache", None)
    if cache is None or hasattr(config, "workerinput") or not _seen:
        return
    kept = cache.get(CACHE_KEY, {})
    merged = dict(kept) if isinstance(kept, dict) else {}
    for nodeid in _skipped:
        merged.pop(nodeid, None)
    merged.update({k: round(v, 1) for k, v in _seen.items() if k not in _skipped})
    cache.set(CACHE_KEY, merged)


def slowest(times: dict[str, float], keep: int = KEEP) -> dict[str, float]:
    """The ``keep`` slowest of ``times``."""
    return dict(sorted(times.items(), key=lambda kv: -kv[1])[:keep])


def from_junit(junit: Path, keep: int = KEEP, root: Path = ROOT) -> dict[str, float]:
    """The ``keep`` slowest tests of a JUnit file, by node id, in seconds (1 decimal);
    ``root`` is the checkout the node ids are relative to."""
    times: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        parts = case.get("classname", "").split(".")
        # "tests.chaos.test_x.TestGroup": the module is the longest prefix naming a file
        cut = next(
            (n for n in range(len(parts), 0, -1)
             if (root / Path(*parts[:n])).with_suffix(".py").is_file()),
            len(parts),
        )
        node = ["/".join(parts[:cut]) + ".py", *parts[cut:], str(case.get("name"))]
        times["::".join(node)] = round(float(case.get("time", 0.0)), 1)
    return slowest(times, keep)


def from_cache(root: Path = ROOT) -> dict[str, float]:
    """The :data:`KEEP` slowest tests of the last run kept in ``root``'s pytest cache."""
    path = root / ".pytest_cache" / "v" / CACHE_KEY
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: no recorded run to read ({exc}); run the tests first") from None
    return slowest({str(k): float(v) for k, v in data.items()})


def main(argv: list[str]) -> int:
    if argv == ["--from-cache"]:
        times = from_cache()
    elif len(argv) == 1 and Path(argv[0]).is_file():
        times = from_junit(Path(argv[0]))
    else:
        print("usage: python -m tests._schedule --from-cache | JUNIT.xml "
              "(a file from pytest --junitxml)", file=sys.stderr)
        return 2
    DURATIONS.write_text(json.dumps(times, indent=1) + "\n")
    print(f"{DURATIONS}: {len(times)} tests, {sum(times.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
