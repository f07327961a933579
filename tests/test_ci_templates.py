"""The CI templates of ``ci/`` pass their offline linters, and each linter fails a broken copy.

``ci/github-actions.yml`` is checked by actionlint and by check-jsonschema with its
vendored GitHub-workflow schema, ``ci/gitlab-ci.yml`` by check-jsonschema with its
vendored GitLab-CI schema — the same commands ``.ci/run`` runs. Each linter is shown to
fail on a copy of the real template with one deliberate mistake, and its output must name
that mistake; each mutation must change the template (its text occurs exactly once), so
no case passes by linting an unchanged file. With the network cut off (``unshare -n``)
the linters still pass: nothing is fetched. A linter that is not installed is a skip with
the reason — a failure under ``CI=true``, where ``pip install -e '.[dev]'`` brings both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GITHUB = REPO / "ci" / "github-actions.yml"
GITLAB = REPO / "ci" / "gitlab-ci.yml"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_or_fail(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip)")
    pytest.skip(reason)


def _tool(name: str) -> str:
    """The linter's executable, beside this Python (a venv's ``bin``) or on ``PATH``."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which(name, path=search)
    if found is None:
        _skip_or_fail(f"{name} is not installed: pip install -e '.[dev]' brings it")
    assert found is not None
    return found


def _command(linter: str, path: Path) -> list[str]:
    if linter == "actionlint":
        # shellcheck and pyflakes integration off: the same result on every machine
        return [_tool("actionlint"), "-no-color", "-shellcheck=", "-pyflakes=", str(path)]
    schema = {"github-workflows": "vendor.github-workflows", "gitlab-ci": "vendor.gitlab-ci"}
    return [_tool("check-jsonschema"), "--builtin-schema", schema[linter], str(path)]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


PASSING = [
    pytest.param("actionlint", GITHUB, id="actionlint-github"),
    pytest.param("github-workflows", GITHUB, id="jsonschema-github-workflows"),
    pytest.param("gitlab-ci", GITLAB, id="jsonschema-gitlab-ci"),
]


@pytest.mark.parametrize(("linter", "template"), PASSING)
def test_template_passes_its_linter(linter: str, template: Path) -> None:
    result = _run(_command(linter, template))
    assert result.returncode == 0, (
        f"{linter} fails {template.relative_to(REPO)}:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize(("linter", "template"), PASSING)
def test_linter_runs_with_the_network_cut_off(linter: str, template: Path) -> None:
    """Inside a fresh network namespace (no interface but a loopback that is down), so a
    linter that fetched a schema, a ``$ref`` or an action's metadata would fail here."""
    command = _command(linter, template)
    probe = _run(["unshare", "-n", "true"]) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        _skip_or_fail("cannot cut the network off here: `unshare -n` needs root (or userns)")
    offline = _run(
        ["unshare", "-n", sys.executable, "-c", _CONNECT_PROBE],
    )
    assert offline.returncode == 0, f"the network is not cut off: {offline.stderr}"
    result = _run(["unshare", "-n", *command])
    assert result.returncode == 0, (
        f"{linter} fails {template.relative_to(REPO)} offline:\n{result.stdout}{result.stderr}"
    )


# exits 0 only when a TCP connection to a public address cannot even be attempted
_CONNECT_PROBE = """
import socket, sys
try:
    socket.create_connection(("192.0.2.1", 443), timeout=2)
except OSError as exc:
    sys.exit(0 if exc.errno == 101 else f"unexpected: {exc!r}")
sys.exit("connected")
"""


@dataclass(frozen=True)
class Broken:
    """One deliberate mistake: ``old`` (which occurs exactly once) becomes ``new``."""

    linter: str
    template: Path
    old: str
    new: str
    expected: str


BROKEN = {
    "actionlint-unknown-key": Broken(
        "actionlint",
        GITHUB,
        "    timeout-minutes: 45\n",
        "    timeout-minute: 45\n",
        'unexpected key "timeout-minute" for "job" section',
    ),
    "actionlint-runs-on-type": Broken(
        "actionlint",
        GITHUB,
        "    runs-on: ubuntu-24.04\n",
        "    runs-on: {labels: {os: linux}}\n",
        '"labels" section must be sequence node but got mapping node',
    ),
    "actionlint-undefined-needs": Broken(
        "actionlint",
        GITHUB,
        "    timeout-minutes: 45\n",
        "    timeout-minutes: 45\n    needs: [build]\n",
        'job "rdq" needs job "build" which does not exist in this workflow',
    ),
    "actionlint-undefined-matrix-property": Broken(
        "actionlint",
        GITHUB,
        "SUITE_MARKS: ${{ matrix.marks }}",
        "SUITE_MARKS: ${{ matrix.mark }}",
        'property "mark" is not defined in object type',
    ),
    "jsonschema-github-timeout-type": Broken(
        "github-workflows",
        GITHUB,
        "    timeout-minutes: 45\n",
        "    timeout-minutes: soon\n",
        "$.jobs.rdq['timeout-minutes']: 'soon' is not of type 'number'",
    ),
    "jsonschema-github-no-jobs": Broken(
        "github-workflows",
        GITHUB,
        "\njobs:\n",
        "\njob:\n",
        "'jobs' is a required property",
    ),
    "jsonschema-gitlab-artifacts-when": Broken(
        "gitlab-ci",
        GITLAB,
        "  artifacts:\n    when: always\n",
        "  artifacts:\n    when: sometimes\n",
        "artifacts.when: 'sometimes' is not one of ['on_success', 'on_failure', 'always']",
    ),
    "jsonschema-gitlab-unknown-report": Broken(
        "gitlab-ci",
        GITLAB,
        "      junit: rdq-reports/",
        "      junitxml: rdq-reports/",
        "artifacts.reports: Additional properties are not allowed ('junitxml' was unexpected)",
    ),
    "jsonschema-gitlab-stages-type": Broken(
        "gitlab-ci",
        GITLAB,
        "\nstages: [test]\n",
        "\nstages: test\n",
        "$.stages: 'test' is not of type 'array'",
    ),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
def test_linter_fails_a_broken_copy_naming_the_mistake(case: Broken, tmp_path: Path) -> None:
    text = case.template.read_text()
    assert text.count(case.old) == 1, (
        f"the mutation's text {case.old!r} occurs {text.count(case.old)} times in "
        f"{case.template.relative_to(REPO)}, not once: update this case"
    )
    broken = tmp_path / case.template.name
    broken.write_text(text.replace(case.old, case.new))
    result = _run(_command(case.linter, broken))
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case.linter} passed the broken copy:\n{output}"
    assert case.expected in output, (
        f"{case.linter} failed, but its output does not name the mistake "
        f"({case.expected!r}):\n{output}"
    )
