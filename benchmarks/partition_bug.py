"""Benchmark of the partition fault as a bug finder: the variant only a partition exposes.

For PostgreSQL and Redis (servers the kit starts from local binaries), runs the kit's proof
``pytest tests/chaos/test_chaos_partition.py -k test_only_a_partition_exposes...``: the
storage ``tests.broken.postgres:hb_timeout_taken_as_extended`` /
``tests.broken.redis:hb_timeout_taken_as_extended`` (a heartbeat unanswered within 0.4 s,
sent with more than half the lease left, taken as applied) through ``chaos/partition.toml``
twice — without its partitions (it must pass) and with them (it must fail, rule
``lease-respected``) — and prints the figures the proof records for both runs: the rule,
the violations, how long after the campaign's start the history first showed the bug and
the run times::

    sudo python benchmarks/partition_bug.py             # postgres, then redis
    sudo python benchmarks/partition_bug.py --server redis

"Found after": see ``tests/chaos/_bug_hunt.py`` (the second of the overlapping claims).
Exit status 1 if the variant passed the partitions or failed without them. Each row
carries the machine's load while the proof ran; the command that reproduces it (one
server) and the rows as history rows for ``BENCHMARKS.md`` follow the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _figures import command, header, history_rows
from _proof_runs import run

PROOF = "tests/chaos/test_chaos_partition.py"
TEST = "test_only_a_partition_exposes_a_timed_out_heartbeat_taken_as_applied"
#: The variant the proof runs on each server (tests/broken/catalogue.py lists them).
VARIANTS = {
    "postgres": "tests.broken.postgres:hb_timeout_taken_as_extended",
    "redis": "tests.broken.redis:hb_timeout_taken_as_extended",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--server", action="append", choices=sorted(VARIANTS))
    args = ap.parse_args(argv)
    print(header(), file=sys.stderr, flush=True)
    failed = False
    lines = []
    history: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rdq-partition-bench-") as tmp:
        for server in args.server or ["postgres", "redis"]:
            print(f"{VARIANTS[server]} ...", file=sys.stderr, flush=True)
            (case,) = run(f"{PROOF}::{TEST}[{server}]", junit=Path(tmp) / f"{server}.xml")
            for label, key in (("none", "calm"), ("5 x 2 workers", "faulted")):
                if key not in case.properties:
                    failed = True
                    lines.append(f"| {server} | {label} | NO FIGURES ({case.outcome}) | | | | |")
                    continue
                r = json.loads(case.properties[key])
                lines.append(
                    f"| {server} | {label} | {r['rule fired']} | {r['violations']} | "
                    f"{r['found after']} | {r['run time']} | {case.load} |"
                )
                history.append(
                    (
                        f"partition, {server}, partitions {label}: {r['rule fired']}, "
                        f"{r['violations']}, found after {r['found after']}, run {r['run time']}",
                        case.load,
                        command("--server", server),
                    )
                )
                failed |= (label == "none") != (r["rule fired"] == "none (pass)")
            failed |= case.outcome != "passed"
            if case.outcome != "passed":
                print(f"{server}: the proof {case.outcome}: {case.message[:500]}", file=sys.stderr)
    print("| server | partitions | rule fired | violations | found after | run time | load |")
    print("|--------|------------|------------|------------|-------------|----------|------|")
    print("\n".join(lines))
    print()
    print(history_rows(history))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
