"""Benchmark of the clock-skew fault as a bug finder.

For each server backend, runs the kit's proof, the server contract's clock-skew body
(``pytest tests/server_contract/test_clock_skew.py -k <b>``):
``chaos/clock.toml`` (4 worker processes, 3 of them under libfaketime with offsets of up
to ±4.5 s and drifts of ±10 %, 120 tasks, 8 s of faults, then the drain) against its
``client_clock`` variant (the time taken from the client: ``tests.broken.redis:client_clock``,
``tests.broken.postgres:client_clock``, ``tests.broken.mongo:client_clock``) and against the
correct backend, and prints a table of what each campaign records: the rule the checker
named, how many violations, how long after the campaign's start the history first showed
the bug, and the whole run's time::

    python benchmarks/clock_skew_bugs.py                 # redis, postgres, mongo
    python benchmarks/clock_skew_bugs.py --only redis

Servers: Redis at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``); PostgreSQL
from the local binaries (a private server the kit starts); MongoDB at ``RDQ_MONGO_DSN``,
else the local rung (SecantusDB here: a MongoDB wire-protocol stand-in, not MongoDB).

**found after**: seconds from the campaign's start (``result.started_at``) to the answer
of the first call whose storage time ran backwards (``tests._skew_support.first_reversal``):
from then on the history holds the evidence; the checker names it after the drain (**run
time**). Exit status 1 if a variant was not caught or a correct backend did not pass.
Each row carries the machine's load while its campaign ran; the rows follow as history
rows for ``BENCHMARKS.md``, each with the command that reproduces it (one backend).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _figures import command, header, history_rows
from _proof_runs import CaseRun, run

#: backend -> its variant that takes the time from the client (the catalogue lists them)
VARIANTS = {
    "redis": "tests.broken.redis:client_clock",
    "postgres": "tests.broken.postgres:client_clock",
    "mongo": "tests.broken.mongo:client_clock",
}
#: the proof's case ids (after ``<backend>-``), in the order the table shows them:
#: (id, the variant?, skewed?)
PLAN = (
    ("client-clock-caught", True, True),
    ("passes", False, True),
    ("client-clock-passes-unskewed", True, False),
)
#: the proof: one body, its cases ``test_the_skew_campaign[<backend>-<id>]``
PROOF = "tests/server_contract/test_clock_skew.py"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(VARIANTS))
    ap.add_argument("--no-control", action="store_true", help="skip the unskewed variant runs")
    args = ap.parse_args(argv)
    print(header(), file=sys.stderr, flush=True)
    rows: list[dict[str, str]] = []
    history: list[tuple[str, str, str]] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="rdq-skew-bench-") as tmp:
        for name in args.only or sorted(VARIANTS):
            select = name + (" and not unskewed" if args.no_control else "")
            cases: dict[str, CaseRun] = {
                c.name.rpartition("[")[2].rstrip("]").removeprefix(f"{name}-"): c
                for c in run(PROOF, "-k", select, junit=Path(tmp) / f"{name}.xml")
                if c.name.rpartition("[")[2].startswith(f"{name}-")
            }
            for case_id, is_variant, skewed in PLAN:
                case = cases.get(case_id)
                if case is None:
                    continue  # --no-control
                if "row" not in case.properties:
                    ok = False
                    print(f"{name} {case_id}: {case.outcome}: {case.message[:500]}",
                          file=sys.stderr)  # fmt: skip
                    continue
                row = json.loads(case.properties["row"])
                if is_variant and row["backend"] != VARIANTS[name]:
                    raise SystemExit(f"{PROOF} ran {row['backend']}, not {VARIANTS[name]}")
                caught = "storage-clock" in row["rules"]
                ok &= caught if is_variant and skewed else row["rules"] == "pass"
                ok &= case.outcome == "passed"
                row["load"] = case.load
                rows.append(row)
                print(row, file=sys.stderr, flush=True)
                history.append(
                    (
                        f"clock skew, {name} {case_id}: "
                        + ", ".join(f"{k} {v}" for k, v in row.items() if k != "load"),
                        case.load,
                        command("--only", name),
                    )
                )
    if rows:
        cols = list(rows[0])
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in rows:
            print("| " + " | ".join(str(row[c]) for c in cols) + " |")
        print()
        print(history_rows(history))
    return 0 if ok and rows else 1


if __name__ == "__main__":
    sys.exit(main())
