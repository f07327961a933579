"""Benchmark of the partition fault as a bug finder: the variant only a partition exposes.

For PostgreSQL and Redis (servers the kit starts from local binaries), runs
``chaos/partition.toml`` against ``tests/chaos/_broken_partition_backends.py``'s
storage (a heartbeat unanswered within 0.4 s, sent with more than half the lease left,
taken as applied) twice: without its partitions (it must pass) and with them (it must
fail, rule ``lease-respected``); prints the rule, the violations, how long after the
campaign's start the history first showed the bug and the run times::

    sudo python benchmarks/partition_bug.py             # postgres, then redis
    sudo python benchmarks/partition_bug.py --server redis

"Found after": see ``tests/chaos/_bug_hunt.py`` (the second of the overlapping claims).
Exit status 1 if the variant passed the partitions or failed without them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAOS_TESTS = ROOT / "tests" / "chaos"
sys.path.insert(0, str(CHAOS_TESTS))

import _bug_hunt as bugs  # noqa: E402
from _chaos_support import start_session  # noqa: E402

from rdq_compliance.chaos.runner import run_campaign  # noqa: E402
from rdq_compliance.chaos.scenario import load_scenario  # noqa: E402

RULES = ("lease-respected", "one-claim", "fencing")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", action="append", choices=("postgres", "redis"))
    args = ap.parse_args(argv)
    os.environ["PYTHONPATH"] = bugs.pythonpath_with_here(os.environ.get("PYTHONPATH"))
    failed = False
    print("| server | partitions | rule fired | violations | found after | run time |")
    print("|--------|------------|------------|------------|-------------|----------|")
    for server in args.server or ["postgres", "redis"]:
        name = f"_broken_partition_backends:{server}_hb_timeout_taken_as_extended"
        with tempfile.TemporaryDirectory(prefix="rdq-partition-bench-") as tmp:
            session = start_session(name, Path(tmp) / "server")
            try:
                cut = load_scenario("partition")
                calm = replace(cut, faults=cut.faults.replace(partitions=0))
                for label, scenario in (("none", calm), ("5 x 2 workers", cut)):
                    r = run_campaign(scenario, session=session, outdir=Path(tmp) / label[:4])
                    found = bugs.first_found(r, RULES)
                    first = min(found.values(), key=lambda f: f.at, default=None)
                    counts = Counter(v.rule for v in r.violations)
                    shown = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
                    print(
                        f"| {server} | {label} | {first.rule if first else 'none (pass)'} | "
                        f"{len(r.violations)}{f' ({shown})' if shown else ''} | "
                        f"{f'{first.after:.1f} s' if first else '-'} | {r.duration:.1f} s |"
                    )
                    failed |= (label == "none") == bool(r.violations)
            finally:
                session.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
