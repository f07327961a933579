"""Deployed campaigns in a row: how many stay clean, what each cost, how long a killed
worker's job waited.

Runs ``rdq-chaos deployed run SYSTEM --campaigns N`` once (the kit's own command, its
exit status recorded), then reads every campaign's ``results.json`` and prints, per
campaign: its seed, wall time, the faults done against those planned (by kind), the jobs
accepted, the findings, known-upstream findings and gaps, how the drain ended, and the
**recovery** of each job a SIGKILL interrupted: seconds from the kill to the job's next
execution on any worker, in true time (a skewed worker's journal times taken back by its
skew, as the checker takes them; the system's ``recovery_after`` says how long its
recovery takes with a worker free; a job waits longer when every worker is busy or other
jobs are due first). Then
the totals, and for campaigns with findings the seconds from the fault window's opening
to the first finding's first execution (time to first violation).

    python benchmarks/deployed_campaigns.py rdq-core-sqlite --campaigns 20 --seed 1
    python benchmarks/deployed_campaigns.py rdq-core-postgres --campaigns 20 --seed 1 \\
        --dsn postgresql://postgres@127.0.0.1:5432/test

(``--profile`` defaults to ``defaults``, ``--scenario`` to ``standard``.)

Exit status: the command's (0 when no campaign has an uncovered finding).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _figures import LoadWatch, command, header, history_rows

from rdq_compliance.deployed.faults import Fault, true_time


def _faults(result: dict[str, Any]) -> list[Fault]:
    """The faults the checker judged with, as ``results.json`` holds them (times in seconds
    after the window opened): the nemesis's, then each lost host's worker killed."""
    out = [
        Fault(
            f["kind"], f["start"], f["end"], targets=tuple(f["targets"]), part=f["part"],
            pids=None if f["pids"] is None else frozenset(f["pids"]), offset=f["offset"],
        )
        for f in result["faults_done"]
    ]  # fmt: skip
    out += [
        Fault("kill", h["start"], h["end"], targets=(h["worker"],))
        for h in result.get("host_losses", [])
    ]
    return out


def recoveries(result: dict[str, Any]) -> list[float]:
    """Seconds from each kill to the next execution of every job it interrupted, in true
    time: an execution's times, read from its worker's clock, are taken back by the skew
    of that clock in effect then (:func:`~rdq_compliance.deployed.faults.true_time`, as
    the checker does), and a kill interrupts an execution of a process it stopped
    (:meth:`~rdq_compliance.deployed.faults.Fault.stops`) that had started and not ended
    by then, unless an earlier kill had already ended it."""
    faults = _faults(result)
    kills = sorted((f for f in faults if f.kind == "kill"), key=lambda f: f.start)
    runs = []
    for x in result["executions"]:
        ended = None if x["ended"] is None else true_time(x["worker"], x["ended"], faults)
        runs.append((x, true_time(x["worker"], x["started"], faults), ended))
    out = []
    for kill in kills:
        at = kill.start
        for x, started, ended in runs:
            if not kill.stops(x["worker"], x["pid"]) or started > at:
                continue
            if ended is not None and ended <= at:
                continue
            if ended is None and any(  # an earlier kill of its process ended it
                k.stops(x["worker"], x["pid"]) and started <= k.start < at for k in kills
            ):
                continue
            later = [s for y, s, _ in runs if y["job"] == x["job"] and s > at]
            if later:
                out.append(min(later) - at)
    return out


def _first_finding(result: dict[str, Any]) -> float | None:
    """Seconds from the window's opening to the first finding's first execution, in true
    time (``results.json`` gives a skewed worker's execution its ``true_started``)."""
    starts = [
        x.get("true_started", x["started"])
        for v in result["verdicts"]
        if v["kind"] == "finding"
        for x in v["executions"]
    ]
    return min(starts) if starts else None


def _row(folder: Path, result: dict[str, Any]) -> dict[str, Any]:
    planned = Counter(f["kind"] for f in result["plan"].get("faults", []))
    done = Counter(f["kind"] for f in result["faults_done"])
    verdicts = result["counts"]["verdicts"]
    return {
        "campaign": folder.name,
        "seconds": result["timings"].get("total"),
        "faults": {k: f"{done.get(k, 0)}/{n}" for k, n in sorted(planned.items())},
        "fault_errors": len(result["fault_errors"]),
        "accepted": len(result["accepted"]),
        "findings": verdicts["findings"],
        "known_upstream": verdicts["known upstream"],
        "gaps": verdicts["gaps"],
        "drain": result["drain"]["ended_by"],
        "recoveries": [round(r, 1) for r in recoveries(result)],
        "first_finding": _first_finding(result),
        "recovery_after": result["profile"]["recovery_after"],
        "error": result["error"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system")
    parser.add_argument("--profile", default="defaults")
    parser.add_argument("--scenario", default="standard")
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dsn")
    parser.add_argument("--fleet", help="a hosts file: the workers on those SSH hosts")
    parser.add_argument("--out", type=Path, help="report folder (default: a temporary one)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"rdq-deployed-{args.system}-"))
    run = [
        str(Path(sys.executable).parent / "rdq-chaos"), "deployed", "run", args.system,
        "--profile", args.profile, "--scenario", args.scenario,
        "--campaigns", str(args.campaigns), "--seed", str(args.seed), "--out", str(out),
        *(["--dsn", args.dsn] if args.dsn else []),
        *(["--fleet", args.fleet] if args.fleet else []),
    ]  # fmt: skip
    print(header(), flush=True)
    started = time.monotonic()
    with LoadWatch() as watch:
        proc = subprocess.run(
            run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    wall = time.monotonic() - started
    rows = []
    # one campaign writes its report into the folder itself, several into seed<N>/
    found = [*out.glob("results.json"), *out.glob("*/results.json")]
    for path in sorted(found, key=lambda p: p.stat().st_mtime):
        rows.append(_row(path.parent, json.loads(path.read_text())))
    print(f"rdq-chaos deployed run {args.system} --profile {args.profile} --scenario "
          f"{args.scenario} --campaigns {args.campaigns} --seed {args.seed}: exit "
          f"{proc.returncode}, {wall:.0f} s; reports in {out}")  # fmt: skip
    if proc.returncode not in (0, 1):
        print(proc.stdout[-3000:])
    for r in rows:
        print(json.dumps(r))
    if not rows:
        print("no campaign wrote a results.json")
        return proc.returncode or 1
    recov = [x for r in rows for x in r["recoveries"]]
    seconds = [r["seconds"] for r in rows if r["seconds"] is not None]
    clean = sum(1 for r in rows if r["findings"] == 0 and r["error"] is None)
    print(f"campaigns: {len(rows)}; without an uncovered finding or an error: {clean}; "
          f"findings {sum(r['findings'] for r in rows)}, known upstream "
          f"{sum(r['known_upstream'] for r in rows)}, gaps {sum(r['gaps'] for r in rows)}; "
          f"fault errors {sum(r['fault_errors'] for r in rows)}")  # fmt: skip
    if seconds:
        print(f"seconds per campaign: min {min(seconds):.0f}, median "
              f"{statistics.median(seconds):.0f}, max {max(seconds):.0f}")  # fmt: skip
    if recov:
        bound = rows[0]["recovery_after"]
        print(f"from a kill to the next run of each job it interrupted ({len(recov)} jobs): "
              f"min {min(recov):.1f} s, median {statistics.median(recov):.1f} s, max "
              f"{max(recov):.1f} s; within the system's recovery_after ({bound} s): "
              f"{sum(1 for x in recov if x <= bound)}, later: "
              f"{sum(1 for x in recov if x > bound)} (a later run waited for a worker to be "
              f"free, or for jobs due before it)")  # fmt: skip
    firsts = [r["first_finding"] for r in rows if r["first_finding"] is not None]
    if firsts:
        print(f"time to first finding (s after the window opened), {len(firsts)} campaigns: "
              f"min {min(firsts):.1f}, median {statistics.median(firsts):.1f}, "
              f"max {max(firsts):.1f}")  # fmt: skip
    figure = (
        f"{args.system} `{args.profile}`, `{args.scenario}`, seeds {args.seed}-"
        f"{args.seed + len(rows) - 1}: {clean} of {len(rows)} campaigns without a finding; "
        f"{sum(r['gaps'] for r in rows)} gaps; {wall:.0f} s"
        + (f"; kill to the interrupted job's next run min {min(recov):.1f} s, median "
           f"{statistics.median(recov):.1f} s, max {max(recov):.1f} s ({len(recov)} jobs)"
           if recov else "")
    )  # fmt: skip
    print(history_rows([(figure, watch.span, command())]))
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
