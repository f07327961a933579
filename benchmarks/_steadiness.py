"""What ``ci_steadiness.py`` reads and prints, with no process, clone or clock in it: the
environment a CI run gets, where its JUnit file lands, pytest's closing line, the JUnit
file (failed tests and the proofs' attempts), and the Markdown tables.

Attempts are the lines the proof helper of the kit's tests prints (``tests/_proof.py``:
``<wanted>: attempt i of at most n, seed S: shown|not shown in ...`` for each attempt,
then ``<wanted>: shown on seed S, attempt i of at most n`` or ``<wanted>: not shown on any
of seeds ... (k attempt(s))``), read from the JUnit file's ``system-out`` (pytest writes a
test's captured output there with ``-o junit_logging=system-out``). A proof whose last
attempt is numbered above 1 retried inside its test.
"""

from __future__ import annotations

import os
import re
import shlex
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Names of variables a CI run does not get from the shell that starts it: anything that
#: looks like a credential.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|AUTH", re.I
)
#: Variables of the shell's own Python environment, which ``.ci/run`` must not inherit
#: (with ``VIRTUAL_ENV`` set it would use that venv instead of making its own).
PYTHON_ENV = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "CONDA_PREFIX")
#: The environment variable xdist sets in its workers and therefore in every pytest a test
#: starts in a subprocess; the outermost pytest (the xdist controller) has none.
XDIST_WORKER = "PYTEST_XDIST_WORKER"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CLOSING = re.compile(
    r"^=*\s*(?P<counts>\d+ [a-z]+(?:, \d+ [a-z]+)*|no tests ran) "
    r"in (?P<seconds>\d+(?:\.\d+)?)s(?: \(\d+:\d\d:\d\d\))?\s*=*$"
)
_COUNT = re.compile(r"(\d+) ([a-z]+)")
#: ``.ci/run``'s heading before it prints a rung's log of the MariaDB example.
EXAMPLE_HEADING = re.compile(r"^\.ci/run: --- examples/rdq-mysql, (?P<rung>\S+) rung ---$", re.M)

_ATTEMPT = re.compile(
    r"^\s*(?:(?P<wanted>.+?): )?attempt (?P<number>\d+) of at most (?P<of>\d+), "
    r"seed -?\d+: (?P<shown>shown|not shown) in "
)
_SHOWN = re.compile(
    r"^(?P<wanted>.+): shown on seed -?\d+, attempt (?P<number>\d+) of at most (?P<of>\d+)\s*$"
)
_NOT_SHOWN = re.compile(
    r"^(?P<wanted>.+): not shown on any of seeds (?P<seeds>[-\d, ]+) "
    r"\((?P<number>\d+) attempt\(s\)\)\s*$"
)


# ---- the child's environment and its JUnit file ---------------------------------------------


def ci_environment(
    environ: Mapping[str, str], venv: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """The environment a CI run gets from this one, and the names left out: no variable
    whose name looks like a credential (:data:`SECRET_NAME`), none of this shell's Python
    environment (:data:`PYTHON_ENV`, ``venv``'s ``bin`` off ``PATH``: ``venv`` is the
    running interpreter's venv, if any), no pytest option (``PYTEST_*``); ``CI=true``."""
    dropped = sorted(
        name
        for name in environ
        if SECRET_NAME.search(name) or name in PYTHON_ENV or name.startswith("PYTEST_")
    )
    env = {k: v for k, v in environ.items() if k not in dropped}
    if venv:
        own = os.path.join(venv, "bin")
        parts = env.get("PATH", "").split(os.pathsep)
        env["PATH"] = os.pathsep.join(p for p in parts if p and os.path.normpath(p) != own)
    env["CI"] = "true"
    return env, dropped


def junit_addopts(junit_dir: Path, clone: Path) -> tuple[str, Path]:
    """``PYTEST_ADDOPTS`` that make the run's outermost pytest write its JUnit file (with
    each test's captured output), and the path it writes to.

    Every pytest a test starts in a subprocess inherits ``PYTEST_ADDOPTS``; the path keeps
    theirs apart from the outermost one's: pytest expands environment variables in it,
    and ``$PYTEST_XDIST_WORKER`` is set in xdist's workers (so in any pytest they start)
    but not in the controller, where it stays as written, and ``$PWD`` is the folder the
    shell started pytest from (the clone's root for ``.ci/run``'s test command, the
    example's folder for its runs beside it)."""
    pattern = f"{junit_dir}/${XDIST_WORKER}/$PWD/junit.xml"
    path = Path(os.path.normpath(f"{junit_dir}/${XDIST_WORKER}/{clone}/junit.xml"))
    opts = shlex.join([f"--junitxml={pattern}", "-o", "junit_logging=system-out"])
    return opts, path


# ---- pytest's closing line ------------------------------------------------------------------


@dataclass(frozen=True)
class Closing:
    """pytest's closing line (``3 failed, 1200 passed, 11 skipped in 1135.21s (0:18:55)``):
    the line without its ``=`` rule, its counts by word and its own time (s)."""

    text: str
    counts: Mapping[str, int]
    seconds: float

    def count(self, word: str) -> int:
        return self.counts.get(word, 0)


def _singular(word: str) -> str:
    return {"errors": "error", "warnings": "warning", "reruns": "rerun"}.get(word, word)


def parse_closing(line: str) -> Closing | None:
    """The closing line ``line`` is, or ``None``."""
    found = _CLOSING.match(_ANSI.sub("", line).strip())
    if found is None:
        return None
    counts = {_singular(w): int(n) for n, w in _COUNT.findall(found["counts"])}
    text = _ANSI.sub("", line).strip().strip("=").strip()
    return Closing(text, counts, float(found["seconds"]))


def last_closing(output: str) -> Closing | None:
    """The last closing line in ``output``."""
    found = [c for c in map(parse_closing, output.splitlines()) if c is not None]
    return found[-1] if found else None


def ci_closings(output: str) -> tuple[Closing | None, dict[str, Closing | None]]:
    """In ``.ci/run``'s output: its test command's closing line (the last one before it
    prints the example's logs), and each example rung's (the last in that rung's log)."""
    heads = list(EXAMPLE_HEADING.finditer(output))
    own = last_closing(output[: heads[0].start()] if heads else output)
    rungs: dict[str, Closing | None] = {}
    for n, head in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(output)
        rungs[head["rung"]] = last_closing(output[head.end() : end])
    return own, rungs


#: the heading ``tests/_cpu.py`` gives its table in pytest's closing summary
CPU_HEADING = re.compile(r"^=+ CPU seconds per test \(tests/_cpu\.py\) =+$", re.M)


def cpu_table(output: str) -> list[str]:
    """The lines of the test command's table of CPU seconds per test (``tests/_cpu.py``),
    from ``.ci/run``'s output: the last table before the example's logs; ``[]`` if none."""
    heads = list(EXAMPLE_HEADING.finditer(output))
    own = output[: heads[0].start()] if heads else output
    found = list(CPU_HEADING.finditer(own))
    if not found:
        return []
    lines: list[str] = []
    for line in own[found[-1].end() :].splitlines():
        if line.startswith("=") or (lines and not line.strip()):
            break
        if line.strip():
            lines.append(line.rstrip())
    return lines


# ---- the JUnit file -------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A test that failed (``failure``) or errored (``error``), and its message's first line."""

    test: str
    kind: str
    message: str


@dataclass(frozen=True)
class ProofAttempts:
    """One proof inside a test: what it wanted, the attempts it made, of at most how many,
    and whether its last attempt showed it."""

    test: str
    wanted: str
    attempts: int
    of: int
    shown: bool

    @property
    def retried(self) -> bool:
        return self.attempts > 1

    def cell(self) -> str:
        return f"{self.attempts} of at most {self.of}" + ("" if self.shown else ", not shown")


@dataclass(frozen=True)
class Junit:
    """What one JUnit file says: the tests it ran, the failed ones, the skipped count,
    pytest's own time, and every proof's attempts."""

    tests: int
    skipped: int
    seconds: float
    failures: tuple[Failure, ...] = ()
    proofs: tuple[ProofAttempts, ...] = ()

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def passed(self) -> int:
        return self.tests - self.failed - self.skipped

    @property
    def retried(self) -> tuple[ProofAttempts, ...]:
        return tuple(p for p in self.proofs if p.retried)


def node_id(classname: str, name: str, root: Path | None = None) -> str:
    """pytest's node id of a JUnit test case (``tests/chaos/test_x.py::TestGroup::test_y[a]``):
    the module is the longest prefix of ``classname`` naming a ``.py`` file under ``root``
    (without ``root``, or none found: the last part is taken for a module when it starts with
    ``test_``, else the classname stays dotted). A case with no classname (a collection
    error) is its name."""
    if not classname:
        return name
    parts = classname.split(".")
    cut = None
    if root is not None:
        cut = next(
            (
                n
                for n in range(len(parts), 0, -1)
                if (root / Path(*parts[:n])).with_suffix(".py").is_file()
            ),
            None,
        )
    if cut is None:
        cut = len(parts) if parts[-1].startswith("test") else len(parts) - 1
        if cut == 0:
            return f"{classname}::{name}"
    return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])


def _name(prefix: str, known: Sequence[str]) -> str:
    """What a proof line's ``prefix`` (the text before ``: shown on seed`` ...) names: the
    longest proof already named by a line of its own that ends it (a test may print a
    proof's verdict after text of its own, ``...; <verdict>``), else the prefix after its
    last ``"; "``."""
    return next((w for w in known if prefix.endswith(w)), prefix.rpartition("; ")[2])


def proof_attempts(test: str, output: str) -> list[ProofAttempts]:
    """The proofs whose lines ``output`` (a test's captured output) holds, in the order first
    seen: for each, the highest attempt number printed (a line repeated, as when a test
    prints a proof's report or verdict after the helper printed its lines, counts once)."""
    lines = output.splitlines()
    own = {m["wanted"] for m in map(_ATTEMPT.match, lines) if m is not None and m["wanted"]}
    known = sorted(own, key=len, reverse=True)
    seen: dict[str, tuple[int, int, bool]] = {}
    last = ""
    for line in lines:
        for pattern in (_SHOWN, _NOT_SHOWN, _ATTEMPT):
            found = pattern.match(line)
            if found is None:
                continue
            wanted = _name(found["wanted"], known) if found["wanted"] else last
            last = wanted
            number = int(found["number"])
            if pattern is _NOT_SHOWN:
                of, shown = len([s for s in found["seeds"].split(",") if s.strip()]), False
            else:
                of = int(found["of"])
                shown = pattern is _SHOWN or found["shown"] == "shown"
            old = seen.get(wanted)
            if old is None or number > old[0] or (number == old[0] and shown):
                seen[wanted] = (number, of, shown)
            break
    return [ProofAttempts(test, w, n, of, shown) for w, (n, of, shown) in seen.items()]


def _first_line(text: str | None) -> str:
    return next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")


def read_junit(source: Path | str, root: Path | None = None) -> Junit:
    """The JUnit file at ``source`` (a path, or the XML itself as a string); node ids
    relative to ``root`` (the checkout the run ran in). A test reported twice (a failed
    teardown after its call) is one test, failed if either report failed."""
    tree = ET.parse(source) if isinstance(source, Path) else ET.ElementTree(ET.fromstring(source))
    top = tree.getroot()
    suites = [top] if top.tag == "testsuite" else list(top.iter("testsuite"))
    outcome: dict[str, str] = {}
    failures: dict[str, Failure] = {}
    outputs: dict[str, list[str]] = {}
    for case in top.iter("testcase"):
        test = node_id(case.get("classname", ""), case.get("name", ""), root)
        problems = [el for el in case if el.tag in ("failure", "error")]
        if problems and test not in failures:
            el = problems[0]
            failures[test] = Failure(test, el.tag, _first_line(el.get("message") or el.text))
        if problems:
            outcome[test] = "failed"
        elif case.find("skipped") is not None:
            outcome.setdefault(test, "skipped")
        else:
            outcome[test] = outcome.get(test) or "passed"
        outputs.setdefault(test, []).extend(el.text or "" for el in case.iter("system-out"))
    proofs = [p for test, texts in outputs.items() for p in proof_attempts(test, "\n".join(texts))]
    return Junit(
        tests=len(outcome),
        skipped=sum(1 for o in outcome.values() if o == "skipped"),
        seconds=sum(float(s.get("time", 0) or 0) for s in suites),
        failures=tuple(failures.values()),
        proofs=tuple(proofs),
    )


# ---- the tables -----------------------------------------------------------------------------


@dataclass
class Run:
    """One run: its number (from 1), exit status (``None``: it did not end by itself),
    wall time (s), the closing lines, the JUnit file read (``None``: none written), the
    load while it ran, the busy loops beside it, and notes to print under the tables."""

    number: int
    rc: int | None
    seconds: float
    closing: Closing | None = None
    junit: Junit | None = None
    load: str = "load ?"
    busy: int = 0
    examples: dict[str, Closing | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cpu: list[str] = field(default_factory=list)

    @property
    def green(self) -> bool:
        return self.rc == 0


def wall(seconds: float) -> str:
    """``1,164 s (19.4 min)``; under two minutes ``74.2 s``."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    rule = [(":--" if a == "l" else "--:") for a in align.ljust(len(head), "l")]
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(rule) + "|",
        *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows),
    ]


def runs_table(runs: Sequence[Run]) -> str:
    """One row per run: exit status, wall time, pytest's closing line, failed tests, proofs
    that retried, the load while it ran, the busy loops beside it."""
    rows = []
    for r in runs:
        closing = r.closing.text if r.closing else "(no closing line)"
        failed = "?" if r.junit is None else str(r.junit.failed)
        retried = "?" if r.junit is None else str(len(r.junit.retried))
        rc = "did not end" if r.rc is None else str(r.rc)
        rows.append(
            [f"#{r.number}", rc, wall(r.seconds), closing, failed, retried, r.load, str(r.busy)]
        )
    head = ["run", "rc", "wall", "pytest's closing line", "failed", "retried", "load", "busy"]
    return "\n".join(_table(head, rows, "lrrlrrlr"))


def failures_table(runs: Sequence[Run]) -> str:
    """Per test that failed in any run: in how many of the runs that wrote a JUnit file,
    and which; or a line saying none failed."""
    read = [r for r in runs if r.junit is not None]
    if not read:
        return "no run wrote a JUnit file: failures per test unknown"
    where: dict[str, list[int]] = {}
    for r in read:
        assert r.junit is not None
        for f in r.junit.failures:
            where.setdefault(f.test, []).append(r.number)
    if not where:
        return f"no test failed in any of the {len(read)} runs read"
    order = sorted(where, key=lambda t: (-len(where[t]), t))
    rows = [
        [f"`{t}`", f"{len(where[t])} of {len(read)}", ", ".join(f"#{n}" for n in where[t])]
        for t in order
    ]
    return "\n".join(_table(["test", "failed", "in runs"], rows, "lrl"))


def retries_table(runs: Sequence[Run]) -> str:
    """Per proof that made more than one attempt in any run: its attempts in each run
    (``-``: no line of that proof in that run's output); or a line saying none retried."""
    read = [r for r in runs if r.junit is not None]
    cells: dict[tuple[str, str], dict[int, str]] = {}
    retried: set[tuple[str, str]] = set()
    for r in read:
        assert r.junit is not None
        for p in r.junit.proofs:
            cells.setdefault((p.test, p.wanted), {})[r.number] = p.cell()
            if p.retried:
                retried.add((p.test, p.wanted))
    if not retried:
        seen = f"{len(cells)} distinct proofs seen over {len(read)} runs"
        return f"no proof made more than one attempt ({seen})"
    rows = [
        [f"`{test}`", wanted, *(cells[(test, wanted)].get(r.number, "-") for r in read)]
        for test, wanted in sorted(retried)
    ]
    head = ["test", "proof", *(f"run #{r.number}" for r in read)]
    return "\n".join(_table(head, rows, "ll" + "l" * len(read)))
