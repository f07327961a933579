"""Benchmark: the kit on one backend, as a user runs it — one pytest process per run.

For each round, each backend in turn (interleaved: sqlite, postgres, redis, sqlite, ...),
one ``pytest --pyargs rdq_compliance.suite --rdq-backend=NAME [--rdq-dsn=DSN]`` process
from a fresh temporary folder; its wall time, the machine's load average (1 min) when it
started, and the outcome. ``--kit conformance`` runs ``-m "not chaos and not stateful"``
(the conformance suite), ``--kit whole`` runs everything (conformance, the stateful
``ci`` profile, the standard chaos campaign) and splits the time by phase from the JUnit
XML (the stateful test, the chaos test, the rest) and the chaos campaign's
``results.json`` (enqueue, fault window, drain, check)::

    python benchmarks/kit_on_one_backend.py --kit conformance --rounds 2
    python benchmarks/kit_on_one_backend.py --kit whole --backends sqlite,postgres,redis

PostgreSQL and Redis are the shared servers, by DSN (``--pg-dsn``, ``--redis-dsn``);
``postgres:local`` in ``--backends`` is PostgreSQL through the local rung
(``--rdq-no-docker``, no DSN). ``--before DIR`` also runs, interleaved with the checkout's
own runs, the tree in DIR (e.g. ``git archive <commit> | tar -x -C DIR``), put first on
``PYTHONPATH``: before/after figures side by side in one run. Exit status 1 if a run
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_DSN = "redis://127.0.0.1:6379/0"
CONFORMANCE = "not chaos and not stateful"


def command(backend: str, kit: str, args: argparse.Namespace, junit: Path) -> list[str]:
    name, _, rung = backend.partition(":")
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
           f"--rdq-backend={name}", "-q", "-p", "no:cacheprovider",
           f"--junitxml={junit}"]  # fmt: skip
    if kit == "conformance":
        cmd += ["-m", CONFORMANCE]
    if name == "postgres" and rung != "local":
        cmd.append(f"--rdq-dsn={args.pg_dsn}")
    if name == "redis":
        cmd.append(f"--rdq-dsn={args.redis_dsn}")
    if rung == "local":
        cmd.append("--rdq-no-docker")
    return cmd


def shown(cmd: list[str]) -> str:
    """The command as a user types it (pytest, not the interpreter; no JUnit path)."""
    parts = ["pytest", *cmd[3:]]
    return shlex.join(p for p in parts if not p.startswith("--junitxml"))


def phases(junit: Path) -> dict[str, float]:
    """Seconds per phase from the JUnit XML (and the chaos campaign's results.json)."""
    out = {"conformance": 0.0, "stateful": 0.0, "chaos": 0.0}
    tests = failed = skipped = 0
    for case in ET.parse(junit).iter("testcase"):
        seconds = float(case.get("time", 0))
        name = f"{case.get('classname')}.{case.get('name')}"
        kind = "chaos" if "test_chaos." in name else "stateful" if "test_stateful." in name else (
            "conformance"
        )
        out[kind] += seconds
        tests += 1
        failed += any(child.tag in ("failure", "error") for child in case)
        skipped += any(child.tag == "skipped" for child in case)
        for prop in case.iter("property"):
            if prop.get("name") == "rdq.chaos-report":
                results = Path(prop.get("value", "")) / "results.json"
                if results.is_file():
                    r = json.loads(results.read_text())
                    out["chaos enqueue"] = r.get("enqueue_s", 0.0)
                    out["chaos faults"] = r["fault_phase_s"] - r.get("enqueue_s", 0.0)
                    out["chaos drain"] = r["drain_s"]
                    out["chaos check"] = r.get("check_s", 0.0)
                    out["chaos campaign"] = r["duration_s"]
    out["tests"], out["failed"], out["skipped"] = tests, failed, skipped
    return out


def environment(tree: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if tree is not None:
        roots = [tree, *sorted(p for p in (tree / "backends").iterdir() if p.is_dir())]
        env["PYTHONPATH"] = os.pathsep.join(
            [str(r) for r in roots] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
    return env


def run_one(name: str, tree: Path | None, args: argparse.Namespace) -> tuple[dict, bool]:
    """One pytest process from a fresh temporary folder: its figures, and whether it passed."""
    with tempfile.TemporaryDirectory(prefix="rdq-kit-bench-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = command(name, args.kit, args, junit)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=environment(tree))
        wall = time.monotonic() - t0
        row: dict = {"wall": wall, "load": load, "rc": done.returncode}
        row["last"] = (done.stdout.strip().splitlines() or [""])[-1]
        if junit.is_file():
            row.update(phases(junit))
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
        return row, done.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kit", choices=("conformance", "whole"), default="conformance")
    ap.add_argument("--backends", default="sqlite,postgres,redis",
                    help="comma-separated; postgres:local is the local rung")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pg-dsn", default=PG_DSN)
    ap.add_argument("--redis-dsn", default=REDIS_DSN)
    ap.add_argument("--before", type=Path, default=None,
                    help="a source tree to run side by side with this checkout")  # fmt: skip
    args = ap.parse_args()
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    trees = {"": None} if args.before is None else {"before ": args.before, "after ": None}
    backends = [f"{label}{b}" for b in names for label in trees]
    rows: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
    ok = True
    for rnd in range(args.rounds):
        for name in names:
            for label, tree in trees.items():
                backend = f"{label}{name}"
                row, passed = run_one(name, tree, args)
                rows[backend].append(row)
                print(f"round {rnd + 1} {backend}: {row['wall']:.1f} s, load {row['load']:.2f}, "
                      f"rc {row['rc']}: {row['last']}", flush=True)  # fmt: skip
                ok = ok and passed
    print("\nCommands (from a temporary folder):")
    for backend in backends:
        name = backend.split(" ")[-1]
        print(f"  {backend}: {shown(command(name, args.kit, args, Path('j.xml')))}")
    keys = ["conformance", "stateful", "chaos", "chaos enqueue", "chaos faults", "chaos drain",
            "chaos check"]  # fmt: skip
    print("\n| backend | wall per round (s) | load (1 min) at start | tests | "
          + ("" if args.kit == "conformance" else " | ".join(keys) + " |"))  # fmt: skip
    print("|---|---|---|---|" + ("" if args.kit == "conformance" else "---|" * len(keys)))
    for backend, runs in rows.items():
        walls = " / ".join(f"{r['wall']:.1f}" for r in runs)
        loads = " / ".join(f"{r['load']:.1f}" for r in runs)
        tests = runs[-1].get("tests", 0)
        line = f"| {backend} | {walls} | {loads} | {tests:.0f} |"
        if args.kit == "whole":
            for key in keys:
                vals = [r[key] for r in runs if key in r]
                line += f" {statistics.median(vals):.1f} |" if vals else " - |"
        print(line)
    for label in trees:
        base_rows = rows.get(f"{label}sqlite")
        if not base_rows:
            continue
        base = statistics.median(r["wall"] for r in base_rows)
        for name in names:
            if name != "sqlite":
                ratio = statistics.median(r["wall"] for r in rows[f"{label}{name}"]) / base
                print(f"{label}{name} / {label}sqlite (median walls): {ratio:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
