"""Benchmark of the chaos suite as a bug finder: each bug class it must catch, once.

For each broken multi-process backend the standard chaos suite must catch
(``tests.broken.sqlite:<bug>``, one per bug class of ``docs/contract.md`` it must catch:
the catalogue's, ``tests/broken/catalogue.py``), runs the kit's proof of it,
``pytest tests/chaos/test_chaos_finds_bugs.py``, one case at a time: the standard chaos
scenario (unchanged: 8 worker processes, 2,000 tasks, 40 s of faults, then the drain)
against a fresh SQLite server. It prints a table of the figures each case records: the
rule the checker named, how many violations, how long after the campaign's start the
history first showed the bug, and the whole run's time; then the same campaign against
the correct SQLite backend, for reference (``rdq-chaos run SCENARIO --backend sqlite``: it
must pass)::

    python benchmarks/chaos_bugs.py                    # every class, one after the other
    python benchmarks/chaos_bugs.py --class double-claim --class numbering-from-counter
    python benchmarks/chaos_bugs.py --scenario tests/chaos/smoke.toml

How "found after" is measured: see ``tests/chaos/_bug_hunt.py``. Exit status 1 if a
class was not found (or the reference run did not pass). Each row carries the machine's
load while it ran; below the table, the command that reproduces each row, then the rows
as history rows for ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _figures import LoadWatch, command, header, history_rows
from _proof_runs import ROOT, collect, environment, run, table

PROOF = "tests/chaos/test_chaos_finds_bugs.py"
#: A case's parameter: ``<bug class id>-<variant>`` (the id has hyphens, the variant none).
CASE = re.compile(r"\[([a-z0-9]+(?:-[a-z0-9]+)*)-(\w+)\]$")


def cases() -> dict[str, str]:
    """Bug class id -> the proof's node id for it (from its collection)."""
    out = {}
    for node in collect(PROOF):
        found = CASE.search(node)
        if found:
            out[found[1]] = node
    return out


def reference(scenario: str, outdir: Path) -> dict[str, str]:
    """``rdq-chaos run SCENARIO --backend sqlite``: the correct backend, as a user runs it."""
    cmd = [sys.executable, "-m", "rdq_compliance.chaos.cli", "run", scenario,
           "--backend", "sqlite", "--no-docker", "--quiet", "--out", str(outdir)]  # fmt: skip
    with LoadWatch() as watch:
        done = subprocess.run(cmd, cwd=ROOT, env=environment(), capture_output=True, text=True)
    results = outdir / "results.json"
    if not results.is_file():
        raise SystemExit(f"rdq-chaos wrote no results.json:\n{done.stdout}{done.stderr}")
    r = json.loads(results.read_text())
    ok = r["verdict"] == "pass" and r["drained"]
    return {
        "class": "-",
        "variant": "sqlite (correct)",
        "rule fired": "none (pass)" if ok else "UNEXPECTED",
        "violations": str(len(r["violations"])),
        "found after": "-",
        "run time": f"{r['duration_s']:.1f} s",
        "load": watch.span,
    }


def _label(row: dict[str, str]) -> str:
    cls = row["class"]
    return f"`{row['variant']}`" if cls == "-" else f"`{cls}` `{row['variant']}`"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    known = cases()
    ap.add_argument(
        "--class",
        dest="classes",
        action="append",
        choices=sorted(known),
        help="a bug class id to run (repeatable; default: all)",
    )
    ap.add_argument("--scenario", default="standard", help="scenario file or built-in name")
    ap.add_argument(
        "--keep", help="keep the proof's folders (reports) under this directory (emptied first)"
    )
    ap.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip the reference run against the correct SQLite backend",
    )
    args = ap.parse_args(argv)
    given = Path(args.scenario)
    scenario = str(given.resolve()) if given.exists() else args.scenario  # the proof runs in ROOT
    print(header(), flush=True)
    print(f"scenario {args.scenario!r}; the proof: {PROOF}", flush=True)
    scenario_args = [] if args.scenario == "standard" else ["--scenario", args.scenario]
    rows = []
    commands: list[str] = []
    missed = 0
    total = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rdq-chaos-bugs-") as tmp:
        base = Path(tmp)
        for bug_class in args.classes or sorted(known):
            node = known[bug_class]
            print(f"{bug_class}: {node} ...", flush=True)
            keep = Path(args.keep).resolve() / bug_class if args.keep else None
            extra = [f"--basetemp={keep}"] if keep else []
            (case,) = run(node, f"--rdq-chaos-scenario={scenario}", *extra,
                          junit=base / f"{bug_class}.xml")  # fmt: skip
            if "row" not in case.properties:
                missed += 1
                print(f"  NO FIGURES ({case.outcome}): {case.message[:500]}")
                continue
            row = json.loads(case.properties["row"])
            row["load"] = case.load
            rows.append(row)
            commands.append(command("--class", bug_class, "--no-baseline", *scenario_args))
            if row["rule fired"] == "NOT FOUND" or case.outcome != "passed":
                missed += 1
                print(f"  {row['rule fired']} ({case.outcome}): rules reported {row['violations']}")
            else:
                print(f"  {case.properties['backend']}: {row['rule fired']} after "
                      f"{row['found after']}: {case.properties['first']}")  # fmt: skip
        if not args.no_baseline:
            print("reference: the correct sqlite backend ...", flush=True)
            row = reference(scenario, base / "reference")
            rows.append(row)
            commands.append(f"rdq-chaos run {args.scenario} --backend sqlite --no-docker")
            missed += 0 if row["rule fired"] == "none (pass)" else 1
    print()
    print(table(rows))
    print("\ncommands (from the repository root), row by row:")
    print(
        "\n".join(
            f"  {r['class']} {r['variant']}: {c}" for r, c in zip(rows, commands, strict=True)
        )
    )
    print(f"\ntotal: {time.monotonic() - total:.0f} s")
    print()
    print(
        history_rows(
            [
                (
                    f"chaos {args.scenario}, {_label(r)}: {r['rule fired']}, "
                    f"{r['violations']}, found after {r['found after']}, run {r['run time']}",
                    r["load"],
                    c,
                )
                for r, c in zip(rows, commands, strict=True)
            ]
        )
    )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
