"""``benchmarks/mutation_score.py``: how it tells a killed mutant from a broken run.

cosmic-ray runs the test command through ``shlex.split``, with no shell: the script's
first version chained its three pytest stages with ``&&``, which reached pytest as an
argument; pytest's usage error then "killed" every mutant (20 of 20 on each module, 2 s
each) while the baseline, run through a shell, passed. These tests keep that from coming
back.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "mutation_score", ROOT / "benchmarks" / "mutation_score.py"
)
assert _spec is not None and _spec.loader is not None
ms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ms)


def test_the_command_cosmic_ray_runs_is_one_program_without_a_shell() -> None:
    argv = shlex.split(ms.test_command("sqlite", ["--rdq-dsn=x y"]))
    assert "&&" not in argv
    assert argv[1:4] == [str(ROOT / "benchmarks" / "mutation_score.py"), "stages", "--backend"]
    assert argv[-1] == "--pytest-arg=--rdq-dsn=x y"


@pytest.mark.parametrize(
    ("output", "want"),
    [
        ("...\n\nrdq-mutation: survived\n", ("survived", "", "")),
        (
            "F\nrdq-mutation: killed conformance rdq_compliance/suite/test_claim.py::test_x\n",
            ("killed", "conformance", "rdq_compliance/suite/test_claim.py::test_x"),
        ),
        ("rdq-mutation: error stateful 4\n", ("error", "stateful", "4")),
        ("timeout", ("timeout", "", "")),
        (
            "ERROR: file or directory not found: &&\n",
            ("unknown", "", "ERROR: file or directory not found: &&\n"),
        ),
        (None, ("unknown", "", "")),
    ],
)
def test_only_a_stage_whose_tests_failed_counts_as_a_kill(output, want) -> None:
    assert ms.verdict(output) == want


def test_a_run_pytest_cannot_start_is_an_error_not_a_kill(tmp_path: Path) -> None:
    """A backend no one installed: pytest's usage error (exit 4) ends the first stage."""
    proc = subprocess.run(
        shlex.split(ms.test_command("no-such-backend", [])),
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert ms.verdict(proc.stdout)[:2] == ("error", "conformance")


def test_mutations_inside_type_annotations_are_left_out(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from __future__ import annotations\n"
        "def f(a: int | None, *, b: str = 'x') -> list[int] | None:\n"
        "    c: int | None = a | 1\n"
        "    return None\n"
    )
    spans = ms.annotation_spans(module)
    assert ms._inside((2, 15), spans)  # the | of int | None
    assert ms._inside((2, 51), spans)  # the | of the return annotation
    assert ms._inside((3, 11), spans)  # the | of c's annotation
    assert not ms._inside((3, 22), spans)  # a | 1 is evaluated
    module.write_text(module.read_text().replace("from __future__ import annotations\n", ""))
    assert ms.annotation_spans(module) == []  # evaluated annotations are code
