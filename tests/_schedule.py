"""The order the kit's own tests run in: the long ones first, longest first, so that
``pytest -n 3`` does not end with one worker running a four-minute test while the other
idles.

``tests/durations.json`` holds the seconds each of the slowest tests took in a CI run
(setup + call + teardown, from the JUnit file of ``pytest --junitxml``). Refresh it after
a CI run with ``python -m tests._schedule JUNIT.xml`` (it keeps the :data:`KEEP`
slowest). The tests recorded at :data:`LONG_S` or more go first, longest first; every
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
    slowest = sorted(times.items(), key=lambda kv: -kv[1])[:keep]
    return dict(slowest)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python -m tests._schedule JUNIT.xml  (a file from pytest --junitxml)",
              file=sys.stderr)
        return 2
    slowest = from_junit(Path(argv[0]))
    DURATIONS.write_text(json.dumps(slowest, indent=1) + "\n")
    print(f"{DURATIONS}: {len(slowest)} tests, {sum(slowest.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
