"""Where a deployed campaign's workers run, in pieces: the hosts a fleet's faults take,
the command a host runs, the places' reasons for a fault they cannot do, and the clock a
skew moves (libfaketime reading a file: a running process's time of day jumps when the
file changes, its ``time.sleep`` keeps working, its monotonic clock stays true)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdq_compliance.chaos.libfaketime import SITE, find_libfaketime, follow_env, offset_spec
from rdq_compliance.deployed.local_places import LocalPlaces
from rdq_compliance.deployed.places import Reach
from tests._ci import missing
from tests._paths import ROOT


def test_a_fleets_host_groups_its_workers_and_a_worker_alone_is_its_own() -> None:
    reach = Reach({"w1": "h0", "w2": "h1", "w3": "h0"})
    assert reach.together("w1") == ("w1", "w3") and reach.together("w2") == ("w2",)
    assert Reach().together("w2") == ("w2",) and Reach().host("w2") == "w2"


def test_a_host_runs_the_runners_interpreter_and_its_scripts_from_its_own_venv() -> None:
    pytest.importorskip("asyncssh", reason="the ssh extra (asyncssh) is not installed")
    from rdq_compliance.deployed.remote_places import host_argv

    here = Path(sys.executable).parent
    assert host_argv([sys.executable, "-m", "x"], "/opt/v/bin/python") == (
        "/opt/v/bin/python", "-m", "x"
    )  # fmt: skip
    assert host_argv([str(here / "rq"), "worker"], "/opt/v/bin/python") == (
        "/opt/v/bin/rq", "worker"
    )  # fmt: skip
    assert host_argv(["/usr/bin/env", "a"], "/opt/v/bin/python") == ("/usr/bin/env", "a")


def test_local_places_say_why_they_cannot_partition_or_skew(tmp_path: Path) -> None:
    places = LocalPlaces(tmp_path, ("w1", "w2"), takes_dsn=False)
    reasons = places.reach().cannot
    assert "built no network namespaces" in reasons["partition"]
    assert "did not look for libfaketime" in reasons["clock-skew"]
    places.open_partitions(server=None, backend="x")  # type: ignore[arg-type]
    assert "worker() takes no dsn" in places.reach().cannot["partition"]


_CLOCK = r"""
import json, sys, time
print(json.dumps([time.time(), time.monotonic()]), flush=True)
sys.stdin.readline()          # the test moves the clock file
t0 = time.monotonic()
time.sleep(0.2)               # breaks under libfaketime without the kit's sitecustomize
slept = time.monotonic() - t0
print(json.dumps([time.time(), time.monotonic(), slept, time.sleep.__name__]), flush=True)
"""


def test_a_clock_file_moves_a_running_process_ahead_and_its_sleeps_still_work(
    tmp_path: Path,
) -> None:
    library = find_libfaketime()
    if library is None:
        missing("no libfaketime here (apt-get install libfaketime)")
    clock = tmp_path / "clock.faketime"
    clock.write_text(offset_spec(0.0))
    env = follow_env(str(clock), str(library), str(SITE), str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLOCK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        wall0, mono0 = json.loads(proc.stdout.readline())
        assert abs(wall0 - time.time()) < 60  # "+0.000": true time
        tmp = clock.with_suffix(".tmp")
        tmp.write_text(offset_spec(3600.0))
        tmp.replace(clock)
        proc.stdin.write("\n")
        proc.stdin.flush()
        wall1, mono1, slept, name = json.loads(proc.stdout.readline())
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert name == "_lock_sleep" and slept >= 0.2
    assert wall1 - wall0 > 3600 - 60  # the time of day jumped an hour ahead
    assert 0 < mono1 - mono0 < 60  # the monotonic clock did not
