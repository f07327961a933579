"""Benchmark of the clock-skew fault as a bug finder (issue 14, item 2).

For each server backend, runs ``chaos/clock.toml`` (4 worker processes, 3 of them under
libfaketime with offsets of up to ±4.5 s and drifts of ±10 %, 120 tasks, 8 s of faults,
then the drain) against its ``client_clock`` variant (the time taken from the client) and
against the correct backend, and prints a table: the rule the checker named, how many
violations, how long after the campaign's start the history first showed the bug, and
the whole run's time::

    python benchmarks/clock_skew_bugs.py                 # redis, postgres, mongo
    python benchmarks/clock_skew_bugs.py --only redis

Servers: Redis at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``); PostgreSQL
from the local binaries (a private server the kit starts); MongoDB at ``RDQ_MONGO_DSN``,
else the local rung (SecantusDB here: a MongoDB wire-protocol stand-in, not MongoDB).

**found after**: seconds from the campaign's start (``result.started_at``) to the answer
of the first call whose storage time ran backwards (the earliest pair of
:func:`rdq_compliance.chaos.checker.storage_clock.reversals`): from then on the history holds
the evidence; the checker names it after the drain (**run time**). Exit status 1 if a
variant was not caught or a correct backend did not pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "backends"

from rdq_compliance.chaos.checker.final_state import FinalState  # noqa: E402
from rdq_compliance.chaos.checker.index import index_history  # noqa: E402
from rdq_compliance.chaos.checker.storage_clock import reversals  # noqa: E402
from rdq_compliance.chaos.checker.view import Context  # noqa: E402
from rdq_compliance.chaos.events import read_history  # noqa: E402
from rdq_compliance.chaos.runner import run_campaign  # noqa: E402
from rdq_compliance.chaos.scenario import load_scenario  # noqa: E402
from rdq_compliance.session import Session  # noqa: E402
from rdq_compliance.settings import Settings  # noqa: E402

CASES = {
    "redis": (
        "redis",
        "rdq_broken_redis:client_clock",
        TESTS / "redis",
        os.environ.get("RDQ_REDIS_DSN", "redis://127.0.0.1:6379/0"),
    ),
    "postgres": ("postgres", "rdq_broken_postgres:client_clock", TESTS / "postgres", None),
    "mongo": (
        "mongo",
        "_mongo_variants:client_clock",
        TESTS / "mongo",
        os.environ.get("RDQ_MONGO_DSN"),
    ),
}


def first_reversal(outdir: Path) -> float | None:
    events = read_history((outdir / "history").glob("*.jsonl"))
    ctx = Context(index_history(events), FinalState(tasks={}, dlq=[]))
    return min((b.answered for _, b in reversals(ctx)), default=None)


def run(backend: str, dsn: str | None, module_dir: Path, workdir: Path, skewed: bool) -> dict:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(module_dir), os.environ.get("PYTHONPATH")) if p
    )
    sys.path.insert(0, str(module_dir))
    scenario = load_scenario("clock")
    if not skewed:
        scenario = replace(scenario, faults=scenario.faults.replace(skewed_workers=0))
    t0 = time.monotonic()
    with Session(Settings(backend=backend, dsn=dsn, docker=False), workdir=workdir) as s:
        result = run_campaign(scenario, session=s, outdir=workdir / "out")
        origin = s.server.origin
    wall = time.monotonic() - t0
    rules: dict[str, int] = {}
    for v in result.violations:
        rules[v.rule] = rules.get(v.rule, 0) + 1
    first = first_reversal(workdir / "out")
    return {
        "backend": backend,
        "server": origin,
        "skew": "yes" if skewed else "no",
        "rules": ", ".join(f"{k} x{n}" for k, n in sorted(rules.items())) or "pass",
        "found after": "-" if first is None else f"{first - result.started_at:.1f} s",
        "run time": f"{result.duration:.1f} s",
        "wall (with provisioning)": f"{wall:.1f} s",
        "_caught": "storage-clock" in rules,
        "_clean": not result.violations and result.checked and result.drained,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(CASES))
    ap.add_argument("--no-control", action="store_true", help="skip the unskewed variant runs")
    args = ap.parse_args(argv)
    rows: list[dict] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="rdq-skew-bench-") as tmp:
        for name in args.only or sorted(CASES):
            correct, variant, module_dir, dsn = CASES[name]
            plan = [(variant, True), (correct, True)]
            if not args.no_control:
                plan.append((variant, False))
            for i, (backend, skewed) in enumerate(plan):
                row = run(backend, dsn, module_dir, Path(tmp) / f"{name}-{i}", skewed)
                want_caught = backend == variant and skewed
                ok &= row["_caught"] if want_caught else row["_clean"]
                rows.append(row)
                print(row, file=sys.stderr, flush=True)
    cols = [k for k in rows[0] if not k.startswith("_")]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
