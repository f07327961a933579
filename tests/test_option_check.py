"""Every backend option is checked before any test or campaign runs.

A key no installed backend declares ends the run as a usage error (pytest's exit 4,
``rdq-chaos``'s exit 2) naming where it came from and the closest known keys, for each
built-in server backend, the SQLite one and the MariaDB example, from each settings
source; a key of another installed backend is named in the header as unused. And a test
that errors in its set-up is never counted as a violation of its rule.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rdq_memory.plugin import MemoryBackend

from rdq_compliance.chaos import cli
from rdq_compliance.option_check import OptionReport, UnknownOption, check_options
from rdq_compliance.provision.backend import Backend
from rdq_compliance.provision.options import RungOptions, option
from rdq_compliance.settings import resolve
from rdq_core.errors import BackendUnavailable
from rdq_core.spi import Storage
from tests._paths import ROOT, pythonpath

EXAMPLE = "rdq_mysql.plugin:backend"
#: backend -> (a misspelt key, the key it should have been)
MISSPELT = {
    "sqlite": ("redis_clustr", "redis_cluster"),
    "postgres": ("pg_bin_dr", "pg_bin_dir"),
    "redis": ("redis_clustr", "redis_cluster"),
    "mongo": ("mongo_sync_on_comit", "mongo_sync_on_commit"),
    EXAMPLE: ("mysql_bin_dr", "mysql_bin_dir"),
}


class _Declares(Backend):
    """A backend that declares the options it is given (or ``None``)."""

    def __init__(self, name: str, keys: list[str] | None) -> None:
        self.name = name
        self._keys = keys

    def options(self) -> tuple[RungOptions, ...] | None:
        if self._keys is None:
            return None
        return (RungOptions(self.name, [option(k, str, None, k) for k in self._keys]),)

    def open(self, dsn: str, namespace: str) -> Storage:  # pragma: no cover - never opened
        raise NotImplementedError


def _check(keys: dict[str, str], mine: list[str] | None, env: dict[str, str] | None = None):
    settings = resolve(
        cli_backend="mine",
        cli_options=[f"{k}={v}" for k, v in keys.items()],
        rootpath=ROOT / "tests",  # no pyproject.toml there
        environ=env or {},
    )
    others = [("theirs", _Declares("theirs", ["their_timeout", "shared_key"]))]
    return check_options(settings, _Declares("mine", mine), others=lambda _skip: others)


def test_keys_are_used_unused_or_refused_with_the_closest_known_keys() -> None:
    assert _check({}, []) == OptionReport()
    report = _check({"my_size": "3", "their_timeout": "2"}, ["my_size", "my_sync"])
    assert report.used == ["my_size"] and report.unused == {"their_timeout": ["theirs"]}
    assert report.header_lines() == [
        "options not used by this backend: their_timeout (an option of theirs)"
    ]
    with pytest.raises(UnknownOption) as caught:
        _check({"my_sise": "3", "my_size": "4"}, ["my_size", "my_sync"])
    text = str(caught.value)
    assert text.startswith(
        "unknown option 'my_sise' (from --rdq-option): no installed backend declares it, so "
        "nothing would read it. Did you mean my_size?"
    ), text
    assert "The mine backend's options: my_size, my_sync." in text, text
    with pytest.raises(UnknownOption, match=r"'my_sise' \(from RDQ_OPTION_MY_SISE\)"):
        _check({}, ["my_size"], env={"RDQ_OPTION_MY_SISE": "3"})


def test_a_backend_that_does_not_declare_its_options_gets_them_named_as_not_checked() -> None:
    report = _check({"anything": "1", "their_timeout": "2"}, None)
    assert report.unchecked == ["anything"] and report.unused == {"their_timeout": ["theirs"]}
    assert report.header_lines()[1] == (
        "options not checked (the backend does not declare its options): anything"
    )


def test_every_built_in_backend_declares_its_options() -> None:
    from rdq_compliance import registry

    for name in ("memory", "sqlite", "postgres", "redis", "mongo"):
        assert registry.load_backend(name).options() is not None, name
    from rdq_mysql.plugin import backend

    assert {o.name for rung in backend.options() for o in rung} >= {"mysql_bin_dir"}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONPATH"] = pythonpath(str(ROOT / "examples" / "rdq-mysql"))
    return {**env, **(extra or {})}


def _pytest(cwd: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd, env=_env(env), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _sources(backend: str) -> list[str]:
    # a module:attr backend has no [tool.rdq.<backend>] table
    return ["cli", "env"] if ":" in backend else ["cli", "env", "pyproject"]


@pytest.fixture
def no_rdq_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in [n for n in os.environ if n.startswith("RDQ_")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize(
    ("backend", "source"), [(b, s) for b in MISSPELT for s in _sources(b)]
)
def test_a_misspelt_option_ends_the_run_before_any_test(
    pytester: pytest.Pytester, no_rdq_env: pytest.MonkeyPatch, backend: str, source: str
) -> None:
    """Run in this process (the plugin is installed here): the refusal happens while
    pytest configures, before it collects anything."""
    key, meant = MISSPELT[backend]
    pytester.makepyprojecttoml(
        "[tool.pytest.ini_options]\n"
        + (f'[tool.rdq.{backend}]\n{key} = "3"\n' if source == "pyproject" else "")
    )
    args = [f"--rdq-backend={backend}", "-p", "no:cacheprovider"]
    if source == "cli":
        args.append(f"--rdq-option={key}=3")
    elif source == "env":
        no_rdq_env.setenv(f"RDQ_OPTION_{key.upper()}", "3")
    result = pytester.runpytest_inprocess(*args)
    out = "\n".join(result.outlines + result.errlines)
    assert result.ret == 4, out[-2000:]
    where = {
        "cli": "--rdq-option",
        "env": f"RDQ_OPTION_{key.upper()}",
        "pyproject": f"[tool.rdq.{backend}] in {pytester.path / 'pyproject.toml'}",
    }[source]
    assert f"unknown option {key!r} (from {where}): no installed backend" in out, out[-2000:]
    assert f"Did you mean {meant}" in out, out[-2000:]
    assert "passed" not in out and "collected" not in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


@pytest.mark.parametrize("backend", list(MISSPELT))
def test_rdq_chaos_refuses_a_misspelt_option(
    tmp_path: Path, backend: str, capsys: pytest.CaptureFixture[str], no_rdq_env: object
) -> None:
    key, meant = MISSPELT[backend]
    code = cli.main(["run", "standard", f"--backend={backend}", "--option", f"{key}=3",
                     "--out", str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"unknown option {key!r} (from --option): no installed backend" in err, err
    assert f"Did you mean {meant}" in err, err
    assert not (tmp_path / "r").exists()


def test_an_option_of_another_backend_is_named_in_the_header_as_unused(tmp_path: Path) -> None:
    proc = _pytest(
        tmp_path, "--rdq-backend=sqlite", "--rdq-option=pg_bin_dir=/nowhere",
        "-k", "test_stats_are_per_queue",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "rdq: options not used by this backend: pg_bin_dir (an option of" in proc.stdout


class _OpenFails(MemoryBackend):
    """Every storage fails to open: each test errors in its set-up."""

    def open(self, dsn: str, namespace: str) -> Storage:
        raise BackendUnavailable("the store cannot be opened (the set-up fails on purpose)")


open_fails = _OpenFails(name="open-fails")


def test_a_test_that_errors_in_setup_is_no_violation_of_its_rule(tmp_path: Path) -> None:
    xml = tmp_path / "out.xml"
    proc = _pytest(
        tmp_path, f"--rdq-backend={__name__}:open_fails", "-k", "test_stats_are_per_queue",
        f"--junitxml={xml}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "  violations by rule: none" in proc.stdout, proc.stdout[-3000:]
    assert "  not judged: 1 tests errored in set-up or tear-down, no rule checked" in proc.stdout
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    assert len(cases) == 1 and cases[0].find("error") is not None
    assert not [p for p in cases[0].iter("property") if p.get("name") == "rdq.rule"]
