"""Benchmark of the chaos suite as a bug finder: each SPEC §5 class it must catch, once.

For each broken multi-process backend of ``tests/chaos/_broken_chaos_backends.py``
(classes 1, 2, 3, 4, 7, 8), runs the standard chaos scenario (unchanged: 8 worker
processes, 2,000 tasks, 40 s of faults, then the drain) against a fresh SQLite server
and prints a table: the rule the checker named, how many violations, how long after
the campaign's start the history first showed the bug, and the whole run's time; then
the same run against the correct SQLite backend, for reference (it must pass)::

    python benchmarks/chaos_bugs.py                    # every class, one after the other
    python benchmarks/chaos_bugs.py --class 1 --class 4
    python benchmarks/chaos_bugs.py --scenario tests/chaos/smoke.toml

How "found after" is measured: see ``tests/chaos/_bug_hunt.py``. Exit status 1 if a
class was not found (or the reference run did not pass).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAOS_TESTS = ROOT / "tests" / "chaos"
sys.path.insert(0, str(CHAOS_TESTS))

import _bug_hunt as bugs  # noqa: E402

from rdq_compliance.chaos.scenario import load_scenario  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--class",
        dest="classes",
        type=int,
        action="append",
        choices=[c.spec_class for c in bugs.CASES],
        help="a SPEC §5 class to run (repeatable; default: all)",
    )
    ap.add_argument("--scenario", default="standard", help="scenario file or built-in name")
    ap.add_argument("--keep", help="keep the report folders under this directory")
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the reference run against the correct SQLite backend",
    )
    args = ap.parse_args(argv)

    os.environ["PYTHONPATH"] = bugs.pythonpath_with_here(os.environ.get("PYTHONPATH"))
    scenario = load_scenario(args.scenario)
    chosen = [c for c in bugs.CASES if not args.classes or c.spec_class in args.classes]
    print(
        f"scenario {scenario.name!r} (seed {scenario.seed}): {scenario.workers.count} workers, "
        f"{scenario.workload.tasks} tasks, lease {scenario.workers.lease:g} s, "
        f"{scenario.duration:g} s of faults, drain timeout {scenario.limits.drain_timeout:g} s"
    )
    rows = []
    missed = 0
    total = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rdq-chaos-bugs-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        for bug in chosen:
            print(f"§5.{bug.spec_class} {bug.attr}: {bug.breaks} ...", flush=True)
            h = bugs.hunt(bug, base / f"class{bug.spec_class}", scenario)
            rows.append(h.row())
            first = h.first
            if first is None:
                missed += 1
                print(f"  NOT FOUND: rules reported {dict(h.by_rule)}")
            else:
                v = first.violation
                print(f"  {first.rule} after {first.after:.1f} s: {v.message[:300]}")
        if not args.no_baseline:
            print("reference: the correct sqlite backend ...", flush=True)
            r = bugs.baseline(base / "reference", scenario)
            rows.append(
                {
                    "class": "-",
                    "variant": "sqlite (correct)",
                    "rule fired": "none (pass)" if r.ok else "UNEXPECTED",
                    "violations": str(len(r.violations)),
                    "found after": "-",
                    "run time": f"{r.duration:.1f} s",
                }
            )
            missed += 0 if r.ok and r.drained else 1
    print()
    print(bugs.table(rows))
    print(f"\ntotal: {time.monotonic() - total:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
