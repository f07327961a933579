"""Benchmark of the stateful machine as a bug finder: every bug class, from scratch.

For each broken backend of ``tests/broken/memory.py`` that the machine hunts (the
catalogue's, ``tests/broken/catalogue.py``; e.g. ``tests.broken.memory:limit_ignored``),
runs the kit's proof ``pytest tests/test_stateful_finds_bugs.py`` once per seed
(``--rdq-hypothesis-seed``): the machine from scratch (no ``@example``, no example
database; the ``ci`` profile's programs of up to 30 steps, up to 3,000 of them). It prints
a Markdown table of what each hunt records: the rule the violation named, how many
examples and seconds it took to the first failure, how many steps the shrunk program has,
and the whole run's time (finding and shrinking)::

    python benchmarks/stateful_bugs.py                     # seeds 0 1 2, every class
    python benchmarks/stateful_bugs.py --seeds 0 --only lease_expired_numbered_from_count
    python benchmarks/stateful_bugs.py --write              # also update BENCHMARKS.md

``--write`` replaces the section "Stateful machine: bug classes found" of BENCHMARKS.md
(re-read just before writing; every other section is kept as it is), or appends it.
Exit status 1 if a class was not found, named the wrong rule, or shrank to more than
``tests.stateful_hunt.MAX_SHRUNK_STEPS`` steps. Each row carries the machine's load
while its hunts ran; the rows follow as history rows for ``BENCHMARKS.md``, each with the
command that reproduces it (that variant alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _figures import command, header, history_rows, load_range
from _proof_runs import ROOT, CaseRun, run

PROOF = "tests/test_stateful_finds_bugs.py"
SECTION = "## Stateful machine: bug classes found"
BENCHMARKS = ROOT / "BENCHMARKS.md"


@dataclass
class Hunt:
    """One hunt, as the proof recorded it."""

    variant: str
    bug_class: str
    rules: list[str]
    seed: int
    found: bool
    rule: str | None
    examples_to_find: int | None
    seconds_to_find: float | None
    shrunk_steps: int | None
    seconds_total: float
    program: list[str]
    budget: int
    max_shrunk_steps: int
    loads: tuple[float, float, str] | None

    @classmethod
    def of(cls, case: CaseRun) -> Hunt:
        p = case.properties

        def num(name: str, kind: type) -> object:
            return None if p.get(name) in (None, "", "None") else kind(p[name])

        return cls(
            variant=p["variant"],
            bug_class=p["bug_class"],
            rules=json.loads(p["rules"]),
            seed=int(p["seed"]),
            found=p["found"] == "True",
            rule=None if p["rule"] in ("", "None") else p["rule"],
            examples_to_find=num("examples_to_find", int),  # type: ignore[arg-type]
            seconds_to_find=num("seconds_to_find", float),  # type: ignore[arg-type]
            shrunk_steps=num("shrunk_steps", int),  # type: ignore[arg-type]
            seconds_total=float(p["seconds_total"]),
            program=json.loads(p["program"]),
            budget=int(p["hunt_examples"]),
            max_shrunk_steps=int(p["max_shrunk_steps"]),
            loads=case.loads,
        )


def hunts(seed: int, only: list[str], tmp: Path) -> tuple[list[Hunt], dict[str, str]]:
    """Every hunt of the proof for ``seed`` (of ``only``'s variants), and the variants it
    does not hunt with why."""
    select = "test_every_broken_backend_is_hunted_or_excused or (test_machine_finds_and"
    select += f"_shrinks_the_bug and ({' or '.join(only)}))" if only else "_shrinks_the_bug)"
    cases = run(PROOF, "-k", select, f"--rdq-hypothesis-seed={seed}", junit=tmp / f"{seed}.xml")
    excused: dict[str, str] = {}
    found = []
    for case in cases:
        if "not_hunted" in case.properties:
            excused = json.loads(case.properties["not_hunted"])
        elif "variant" in case.properties:
            if not only or case.properties["variant"] in only:  # -k matches substrings
                found.append(Hunt.of(case))
        else:
            raise SystemExit(f"{case.name} recorded nothing ({case.outcome}): {case.message}")
    return found, excused


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _loads(hunted: list[Hunt]) -> str:
    """The load while the hunts ran (lowest-highest over all of them)."""
    got = [h.loads for h in hunted if h.loads is not None]
    if not got:
        return "load ?"
    return load_range(min(g[0] for g in got), max(g[1] for g in got), got[0][2])


def run_hunts(
    seeds: list[int], only: list[str]
) -> tuple[list[str], list[str], bool, dict[str, str], int, list[tuple[str, str, str]]]:
    by_variant: dict[str, list[Hunt]] = {}
    excused: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rdq-stateful-bugs-") as tmp:
        for seed in seeds:
            found, excused = hunts(seed, only, Path(tmp))
            for h in found:
                by_variant.setdefault(h.variant, []).append(h)
    rows = []
    history: list[tuple[str, str, str]] = []
    programs: list[str] = []
    ok = bool(by_variant)
    budget = 0
    for variant, hunted in by_variant.items():
        for h in hunted:
            budget = h.budget
            good = (
                h.found
                and h.rule in h.rules
                and h.shrunk_steps is not None
                and h.shrunk_steps <= h.max_shrunk_steps
            )
            ok = ok and good
            print(
                f"{variant} seed {h.seed}: found={h.found} rule={h.rule} "
                f"examples={h.examples_to_find} seconds={h.seconds_to_find} "
                f"shrunk={h.shrunk_steps} total={h.seconds_total:.1f}s{'' if good else '  FAIL'}",
                file=sys.stderr,
                flush=True,
            )
        examples = [h.examples_to_find for h in hunted if h.examples_to_find is not None]
        seconds = [h.seconds_to_find for h in hunted if h.seconds_to_find is not None]
        steps = [h.shrunk_steps for h in hunted if h.shrunk_steps is not None]
        totals = [h.seconds_total for h in hunted]
        rules = sorted({h.rule or "NOT FOUND" for h in hunted})
        first = hunted[0]
        rows.append(
            f"| {first.bug_class} | `{variant}` | {', '.join(f'`{r}`' for r in rules)} "
            f"| {first.examples_to_find} / {_median(examples):g} / {max(examples, default=0)} "
            f"| {first.seconds_to_find} / {_median(seconds):.2f} / {max(seconds, default=0):.2f} "
            f"| {first.shrunk_steps} / {max(steps, default=0)} "
            f"| {_median(totals):.1f} | {_loads(hunted)} |"
        )
        history.append(
            (
                f"stateful, `{variant}` seeds {' '.join(str(h.seed) for h in hunted)}: "
                f"{', '.join(rules)}, examples {first.examples_to_find} / "
                f"{_median(examples):g} / {max(examples, default=0)}, shrunk "
                f"{first.shrunk_steps} / {max(steps, default=0)}",
                _loads(hunted),
                command("--seeds", *(str(s) for s in seeds), "--only", variant),
            )
        )
        if variant == "lease_expired_numbered_from_count":
            programs = first.program
    return rows, programs, ok, excused, budget, history


def section(
    rows: list[str],
    program: list[str],
    seeds: list[int],
    seconds: float,
    excused: dict[str, str],
    budget: int,
) -> str:
    seeds_s = " ".join(str(s) for s in seeds)
    head = f"""{SECTION}

What is measured: the stateful machine (`rdq_compliance/stateful/`) hunting each
deliberately broken backend of `tests/broken/memory.py` (the reference store with
one piece done the way a real queue once got it wrong) **from scratch**: no `@example`,
no example database, the `ci` profile's programs (up to 30 steps) with a budget of
{budget:,} programs, seeds {seeds_s}. "Examples" counts the programs hypothesis ran
up to and including the first failing one; "seconds" is the time to that failure;
"shrunk" is the number of steps (the `start_with_tasks` initial step included) of the
program hypothesis shrank it to; "whole run" adds the shrinking. Each cell with three
figures is seed 0 / median / max over the seeds; "shrunk" is seed 0 / max.

Command (from the repository root, in the project's venv; it runs the kit's own test
`tests/test_stateful_finds_bugs.py` once per seed, which asserts the same, and tabulates
what each hunt records):

```
python benchmarks/stateful_bugs.py --seeds {seeds_s} --write
```

Machine: 2 vCPU, {platform.python_implementation()} {platform.python_version()}, shared with
other engineers' runs while measuring (times vary with the load; the example counts do
not: each seed is deterministic). Whole benchmark: {seconds / 60:.1f} min.

| class | broken backend | rule named | examples to find | seconds to find | shrunk (steps) | whole run (s, median) | load |
|---|---|---|---|---|---|---|---|
"""  # noqa: E501
    tail = ""
    if program:
        tail = (
            "\nThe original incident (`numbering-from-counter`: LEASE_EXPIRED numbered from "
            "`attempt_count`, so the "
            "reclaim of a redriven task hits `UNIQUE(task_id, attempt_no)`), found from scratch "
            "and shrunk (seed 0), as hypothesis prints it:\n\n```\n"
            + "\n".join(program)
            + "\n```\n"
        )
    excused_lines = "".join(f"\n- `{k}`: {v}" for k, v in excused.items())
    return head + "\n".join(rows) + "\n" + tail + "\nNot hunted:" + excused_lines + "\n"


def write(text: str) -> None:
    current = BENCHMARKS.read_text() if BENCHMARKS.exists() else "# Benchmarks\n"
    start = current.find(SECTION + "\n")
    if start < 0:
        updated = current.rstrip("\n") + "\n\n" + text
    else:
        end = current.find("\n## ", start + len(SECTION))
        rest = "" if end < 0 else current[end + 1 :]
        updated = current[:start] + text + ("\n" + rest if rest else "")
    tmp = BENCHMARKS.with_suffix(f".md.{os.getpid()}.tmp")
    tmp.write_text(updated)
    tmp.replace(BENCHMARKS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--only", nargs="*", default=[], help="variants to run (default: all)")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args(argv)
    print(header(), file=sys.stderr, flush=True)
    started = time.perf_counter()
    rows, program, ok, excused, budget, history = run_hunts(args.seeds, args.only)
    text = section(rows, program, args.seeds, time.perf_counter() - started, excused, budget)
    print(text)
    print(history_rows(history))
    if args.write:
        write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
