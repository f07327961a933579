"""The conventions a Python library user expects of the package."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rdq_compliance.chaos import cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_rdq_chaos_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rdq-chaos {version}"


@pytest.mark.parametrize("package", ["rdq_core", "rdq_compliance"])
def test_the_typed_packages_ship_their_marker(package: str) -> None:
    assert (ROOT / package / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"][package]


def test_the_changelog_starts_with_this_release() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert releases and releases[0] == version, releases


def test_the_metadata_names_the_pytest_framework() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "Framework :: Pytest" in project["classifiers"]
    assert project["keywords"]
