"""The kit's own mutation score: how many small faults planted in a correct storage module
the kit, run as a user runs it, catches.

Tool: cosmic-ray (PyPI ``cosmic-ray``). It mutates the module's file *on disk*, one
mutant at a time, and runs a shell command against it; the kit's chaos suite and its
concurrency tests spawn worker **processes** that import the storage afresh, and they
see the mutant only because the file itself changed (mutmut 3 instead runs the tests on
an instrumented copy of the project, switched per mutant by an environment variable,
which a spawned worker would have to inherit and the copy would have to hold the
backends' separate packages). Run it in a scratch clone: the files are restored after
each mutant, but a killed run leaves one mutated.

For each module, ``cosmic-ray init`` lists every mutation; a sample of ``--sample`` of
them, drawn with ``--seed`` from those outside type annotations (never evaluated under
``from __future__ import annotations``: equivalent by construction, and 6 of the first
20 drawn on SQLite), stays pending and the rest are marked skipped (cosmic-ray's own
work database); ``cosmic-ray exec`` runs the sample. The test command is the kit in
the order a user would escalate (each stage only when the one before passed):

1. the conformance suite (``pytest --rdq-backend=B --pyargs rdq_compliance.suite``,
   without its stateful, chaos and durability modules, ``-x``);
2. the stateful machine (``test_stateful.py``);
3. the standard chaos campaign (``test_chaos.py``).

A mutant is *killed* when a stage's tests fail (pytest exit 1; the first failing test is
recorded), *survived* when all three pass; a mutant after which pytest cannot run (a
syntax or import error: exit 2-4) or that hangs past ``--timeout`` is counted apart, not
as killed. Prints each module's figures, every mutant's verdict and each survivor's
diff, and writes them as JSON (``--out``)::

    python benchmarks/mutation_score.py --backend sqlite \\
        --module backends/sqlite/rdq_sqlite/storage.py --sample 20 --seed 22
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STAGES = (
    "not test_stateful and not test_chaos and not test_durability",
    "test_stateful",
    "test_chaos",
)


def stage_commands(backend: str, extra: list[str]) -> list[list[str]]:
    """The three pytest runs, in the order a user escalates."""
    base = [
        sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
        "--rdq-require-backend", f"--rdq-backend={backend}", *extra,
        "--pyargs", "rdq_compliance.suite",
    ]  # fmt: skip
    return [[*base, "-k", stage] for stage in STAGES]


def test_command(backend: str, extra: list[str]) -> str:
    """The command cosmic-ray runs per mutant: this script's ``stages`` subcommand.
    cosmic-ray runs it through ``shlex.split``, without a shell, so a ``&&`` chain would
    reach pytest as an argument (pytest's usage error would count every mutant killed);
    one program that runs the stages itself and says how each ended avoids that."""
    return shlex.join(
        [sys.executable, str(Path(__file__).resolve()), "stages", "--backend", backend]
        + [f"--pytest-arg={a}" for a in extra]
    )


#: The line ``stages`` ends with: ``survived``, ``killed <stage> <test>`` or
#: ``error <stage> <pytest exit code>``.
MARK = "rdq-mutation:"


def run_stages(backend: str, extra: list[str]) -> int:
    """Run the stages; exit 0 when all pass, 1 when a stage's tests failed (the mutant is
    killed), 2 when pytest ended any other way (a collection or usage error, no tests:
    the mutant broke the import or the run, and is counted apart, not as killed)."""
    names = ("conformance", "stateful", "chaos")
    for stage, cmd in zip(names, stage_commands(backend, extra), strict=True):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        sys.stdout.write(proc.stdout[-6000:])
        sys.stdout.write(proc.stderr[-2000:])
        if proc.returncode == 1:
            failed = [
                line.split(" ", 1)[1].split(" - ")[0]
                for line in proc.stdout.splitlines()
                if line.startswith(("FAILED ", "ERROR "))
            ]
            print(f"\n{MARK} killed {stage} {failed[0] if failed else '(no FAILED line)'}")
            return 1
        if proc.returncode != 0:
            print(f"\n{MARK} error {stage} {proc.returncode}")
            return 2
    print(f"\n{MARK} survived")
    return 0


def verdict(output: str | None) -> tuple[str, str, str]:
    """``(outcome, stage, detail)`` from the output of :func:`run_stages` (``timeout`` when
    cosmic-ray stopped it)."""
    if output is None:
        return "unknown", "", ""
    if output.strip() == "timeout":
        return "timeout", "", ""
    marks = [line for line in output.splitlines() if line.startswith(MARK)]
    if not marks:
        return "unknown", "", output[-300:]
    word, *rest = marks[-1][len(MARK) :].strip().split(" ", 2)
    return word, (rest[0] if rest else ""), (rest[1] if len(rest) > 1 else "")


def _config(module: Path, command: str, timeout: float) -> str:
    return (
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(str(module))}\n"
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n'
    )


def annotation_spans(module: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's type annotations are, as ``((line, col), (end_line, end_col))``.
    With ``from __future__ import annotations`` they are never evaluated, so a mutation
    inside one is equivalent by construction (``int | None`` made ``int - None``)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    if not any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    ):
        return []
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            found += [x.annotation for x in every if x is not None and x.annotation]
            found += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [
        ((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0)) for n in found
    ]


def _inside(pos: tuple[int, int], spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    return any(start <= tuple(pos) < end for start, end in spans)


def _sample(session: Path, module: Path, size: int, seed: int) -> tuple[int, int, int]:
    """Mark all but ``size`` seeded-random pending mutations as skipped, drawn from those
    outside type annotations (see :func:`annotation_spans`). The draw is over the
    mutations sorted by (operator, occurrence), so a seed draws the same mutants every
    time (cosmic-ray's job ids are fresh UUIDs each ``init``). Returns (mutations, in
    annotations, sampled)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans = annotation_spans(module)
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(
            db.pending_work_items,
            key=lambda w: (w.mutations[0].operator_name, w.mutations[0].occurrence),
        )
        typed = [w for w in items if _inside(w.mutations[0].start_pos, spans)]
        pool = [w for w in items if not _inside(w.mutations[0].start_pos, spans)]
        keep = {w.job_id for w in random.Random(seed).sample(pool, min(size, len(pool)))}
        db.set_multiple_results(
            [w.job_id for w in items if w.job_id not in keep],
            WorkResult(worker_outcome=WorkerOutcome.SKIPPED),
        )
        return len(items), len(typed), len(keep)


def _results(session: Path) -> list[dict[str, object]]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    out = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            m = item.mutations[0]
            outcome, stage, detail = verdict(result.output)
            out.append(
                {
                    "job": item.job_id,
                    "operator": m.operator_name,
                    "occurrence": m.occurrence,
                    "line": m.start_pos[0],
                    "outcome": outcome,
                    "stage": stage,
                    "detail": detail,
                    "cosmic_ray": result.test_outcome.value if result.test_outcome else None,
                    "worker": result.worker_outcome.value,
                    "diff": result.diff,
                }
            )
    return out


def run(module: Path, backend: str, sample: int, seed: int, timeout: float, work: Path,
        extra: list[str]) -> dict[str, object]:  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / f"{module.stem}.toml"
    session = work / f"{module.stem}.sqlite"
    session.unlink(missing_ok=True)
    cfg.write_text(_config(module, test_command(backend, extra), timeout))
    subprocess.run(["cosmic-ray", "init", str(cfg), str(session)], check=True, cwd=ROOT)
    total, typed, kept = _sample(session, module, sample, seed)
    # the baseline: the unmutated module must survive the very command cosmic-ray runs
    # (split the same way), or every mutant would count as killed
    t0 = time.monotonic()
    base = subprocess.run(shlex.split(test_command(backend, extra)), cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    baseline = time.monotonic() - t0
    if base.returncode != 0 or verdict(base.stdout)[0] != "survived":
        raise SystemExit(
            f"the kit fails the unmutated {module} (exit {base.returncode}); no score:\n"
            + (base.stdout + base.stderr)[-3000:]
        )
    t0 = time.monotonic()
    subprocess.run(["cosmic-ray", "exec", str(cfg), str(session)], check=True, cwd=ROOT)
    seconds = time.monotonic() - t0
    results = _results(session)
    killed = [r for r in results if r["outcome"] == "killed"]
    survived = [r for r in results if r["outcome"] == "survived"]
    apart = [r for r in results if r["outcome"] not in ("killed", "survived")]
    judged = len(killed) + len(survived)
    by_stage = {
        st: sum(r["stage"] == st for r in killed) for st in ("conformance", "stateful", "chaos")
    }
    return {
        "module": str(module),
        "backend": backend,
        "mutations": total,
        "in_annotations": typed,
        "sampled": kept,
        "seed": seed,
        "ran": len(results),
        "killed": len(killed),
        "killed_by_stage": by_stage,
        "survived": len(survived),
        "counted_apart": {
            o: sum(r["outcome"] == o for r in apart)
            for o in sorted({str(r["outcome"]) for r in apart})
        },
        "score": round(len(killed) / judged, 3) if judged else None,
        "seconds": round(seconds),
        "baseline_seconds": round(baseline),
        "mutants": results,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["stages"]:
        sp = argparse.ArgumentParser(prog="mutation_score.py stages")
        sp.add_argument("--backend", required=True)
        sp.add_argument("--pytest-arg", action="append", default=[])
        sargs = sp.parse_args(argv[1:])
        return run_stages(sargs.backend, sargs.pytest_arg)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, help="the rdq backend the module belongs to")
    p.add_argument("--module", required=True, type=Path, help="the file to mutate")
    p.add_argument("--sample", type=int, default=20, help="mutants drawn (default 20)")
    p.add_argument("--seed", type=int, default=22)
    p.add_argument("--timeout", type=float, default=420.0, help="seconds per mutant")
    p.add_argument("--work", type=Path, default=Path("mutation-work"))
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument("--pytest-arg", action="append", default=[], help="e.g. --rdq-dsn=...")
    args = p.parse_args(argv)
    module = args.module.resolve()
    if not module.is_file():
        p.error(f"no such module: {args.module}")
    figures = run(
        module, args.backend, args.sample, args.seed, args.timeout, args.work, args.pytest_arg
    )
    print(
        f"{figures['module']} on {figures['backend']}: {figures['mutations']} mutations "
        f"({figures['in_annotations']} in type annotations, left out), "
        f"{figures['sampled']} sampled (seed {figures['seed']}); killed {figures['killed']} "
        f"(by stage: {figures['killed_by_stage']}), survived {figures['survived']}, "
        f"counted apart {figures['counted_apart'] or 'none'}; score {figures['score']}; "
        f"{figures['seconds']} s (the unmutated run: {figures['baseline_seconds']} s)"
    )
    for m in figures["mutants"]:  # type: ignore[union-attr]
        print(f"  job {m['job'][:8]} line {m['line']} {m['operator']}: {m['outcome']} "
              f"{m['stage']} {m['detail']}")  # fmt: skip
    for m in figures["mutants"]:  # type: ignore[union-attr]
        if m["outcome"] != "killed":
            print(f"\n{m['outcome']}: job {m['job']} ({m['operator']}, line {m['line']}):")
            print(m["diff"])
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
