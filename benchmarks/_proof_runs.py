"""Run one of the kit's proofs the way a user runs pytest, and read what it recorded.

The bug-hunting benchmarks (``chaos_bugs.py``, ``partition_bug.py``, ``stateful_bugs.py``,
``clock_skew_bugs.py``) do not import the kit's tests: each runs the proof that hunts its
bugs (``pytest tests/...``, in a subprocess, from the checkout root, with the checkout
root on ``PYTHONPATH`` so the worker processes import the broken backends by their
dotted names, ``tests.broken.<store>:<bug>``) and tabulates the figures the proof
records for each case (``record_property``, read back from its JUnit XML). One
measurement, made by the proof; the benchmark only repeats it and prints it. Each case
also records the machine's load while it ran (``_load_plugin``, loaded with ``-p``):
:attr:`CaseRun.load`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from _figures import load_range
from _load_plugin import PROPERTY

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass
class CaseRun:
    """One test case of a proof run: its id, how it ended, what it recorded."""

    name: str
    outcome: str  # passed | failed | skipped
    properties: dict[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def loads(self) -> tuple[float, float, str] | None:
        """The lowest and highest 1-minute load while the case ran, and the cores."""
        raw = self.properties.get(PROPERTY, "").split()
        return (float(raw[0]), float(raw[1]), raw[2]) if len(raw) == 3 else None

    @property
    def load(self) -> str:
        """``"load 2.1-4.3 on 2 cores"``: the 1-minute load while the case ran."""
        return "load ?" if self.loads is None else load_range(*self.loads)


def environment() -> dict[str, str]:
    """This environment, the checkout root first on ``PYTHONPATH`` (then this folder, for
    ``-p _load_plugin``), no pytest options inherited (``PYTEST_ADDOPTS``, xdist's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    ours = (str(ROOT), str(HERE))
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ours]
    env["PYTHONPATH"] = os.pathsep.join([*ours, *parts])
    return env


def pytest_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def collect(target: str) -> list[str]:
    """The node ids of ``target`` (a test file of the checkout)."""
    done = subprocess.run(
        pytest_command("--collect-only", "-q", target),
        cwd=ROOT, env=environment(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit(f"collecting {target} found no test:\n{done.stdout}{done.stderr}")
    return ids


def run(*args: str, junit: Path) -> list[CaseRun]:
    """``pytest ARGS --junitxml JUNIT`` from the checkout root (its output goes to this
    process's stderr as it runs); every case it reported."""
    subprocess.run(
        pytest_command("-q", "-rfEs", "-p", "_load_plugin", f"--junitxml={junit}", *args),
        cwd=ROOT, env=environment(), stdout=sys.stderr, check=False,
    )  # fmt: skip
    if not junit.is_file():
        raise SystemExit(f"pytest {' '.join(args)} wrote no JUnit report")
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        problems = [el for el in case if el.tag in ("failure", "error")]
        skipped = [el for el in case if el.tag == "skipped"]
        outcome = "failed" if problems else "skipped" if skipped else "passed"
        message = " ".join(el.get("message", "") for el in problems or skipped)
        cases.append(CaseRun(str(case.get("name")), outcome, props, message))
    return cases


def table(rows: list[dict[str, str]]) -> str:
    """A Markdown table, columns padded."""
    if not rows:
        return ""
    heads = list(rows[0])
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in heads]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(r[h].ljust(w) for h, w in zip(heads, widths, strict=True)) + " |"
        for r in rows
    ]
    return "\n".join([line, sep, *body])
