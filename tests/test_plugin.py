"""The pytest plugin: settings precedence, backend discovery, provisioning outcomes,
and a third-party backend registered through the ``rdq.backends`` entry point."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rdq_compliance import registry, settings
from rdq_core.errors import InvalidArgument

pytest_plugins = ["pytester"]


def _resolve(tmp_path: Path, environ: dict[str, str] | None = None, **cli: object):
    args = dict(
        cli_backend=None, cli_dsn=None, cli_require=False, cli_no_docker=False, cli_options=[]
    )
    args.update(cli)
    return settings.resolve(rootpath=tmp_path, environ=environ or {}, **args)


def test_settings_precedence_cli_over_env_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.rdq]
            backend = "sqlite"
            require-backend = true
            [tool.rdq.postgres]
            dsn = "postgresql://from-pyproject"
            pool = "4"
            """
        )
    )
    s = _resolve(tmp_path)
    assert (s.backend, s.require_backend) == ("sqlite", True)
    s = _resolve(tmp_path, {"RDQ_BACKEND": "postgres"})
    assert (s.backend, s.dsn, dict(s.options)) == (
        "postgres",
        "postgresql://from-pyproject",
        {"pool": "4"},
    )
    s = _resolve(tmp_path, {"RDQ_BACKEND": "postgres", "RDQ_POSTGRES_DSN": "postgresql://env"})
    assert s.dsn == "postgresql://env"
    s = _resolve(
        tmp_path,
        {"RDQ_BACKEND": "postgres", "RDQ_POSTGRES_DSN": "postgresql://env", "RDQ_OPTION_POOL": "8"},
        cli_backend="postgres",
        cli_dsn="postgresql://cli",
        cli_options=["pool=16"],
    )
    assert (s.dsn, s.options["pool"]) == ("postgresql://cli", "16")


def test_settings_reject_bad_values_clearly(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="expected KEY=VALUE"):
        _resolve(tmp_path, cli_options=["novalue"])
    with pytest.raises(InvalidArgument, match="expected true/false"):
        _resolve(tmp_path, {"RDQ_REQUIRE_BACKEND": "maybe"})
    (tmp_path / "pyproject.toml").write_text("[tool.rdq\n")
    with pytest.raises(InvalidArgument, match="not valid TOML"):
        _resolve(tmp_path)


def test_unknown_backend_lists_installed(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--rdq-backend=no-such-store")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*no rdq backend named 'no-such-store'*installed backends:*sqlite*"]
    )


def test_import_path_backend_must_be_a_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(notabackend="value = 3\n")
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("--rdq-backend=notabackend:value")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*notabackend:value is a int, not an rdq_compliance.provision.Backend*"]
    )


def test_registry_finds_builtin_backends_through_entry_points() -> None:
    names = set(registry.installed())
    assert {"memory", "sqlite"} <= names
    assert registry.load_backend("memory").name == "memory"


_UNAVAILABLE = """
from rdq_compliance.provision.backend import Backend
from rdq_compliance.provision.backend import ProvisionUnavailable

class Unavailable(Backend):
    name = "unavailable"
    def provision(self, request):
        raise ProvisionUnavailable(
            "no server: pass --rdq-dsn, install the binaries, or start Docker"
        )
    def open(self, dsn, namespace):
        raise AssertionError("never opened")

backend = Unavailable()
"""


def test_unprovisionable_backend_skips_with_remedies(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(unavailable=_UNAVAILABLE)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "--rdq-backend=unavailable:backend", "-rs", "-k", "enqueue"
    )
    assert result.ret == pytest.ExitCode.OK
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and "passed" not in outcomes
    result.stdout.fnmatch_lines(["*unavailable*no server: pass --rdq-dsn*"])


def test_require_backend_turns_the_skip_into_failures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(unavailable=_UNAVAILABLE)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "--rdq-backend=unavailable:backend", "--rdq-require-backend", "-k", "enqueue"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*failing because --rdq-require-backend is set*"])


def test_without_a_backend_the_plugin_adds_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own="def test_mine():\n    pass\n")
    result = pytester.runpytest_inprocess("-q")
    result.assert_outcomes(passed=1)


def test_suite_is_not_collected_twice(pytester: pytest.Pytester) -> None:
    injected = pytester.runpytest_inprocess("--rdq-backend=memory", "--collect-only", "-q")
    explicit = pytester.runpytest_inprocess(
        "--rdq-backend=memory", "--pyargs", "rdq_compliance.suite", "--collect-only", "-q"
    )
    count = _collected(injected)
    assert count > 20
    assert _collected(explicit) == count


def _collected(result: pytest.RunResult) -> int:
    return sum(1 for line in result.outlines if "::" in line)


def test_third_party_backend_via_entry_point(pytester: pytest.Pytester) -> None:
    """A package that only registers an entry point runs the same suite, unchanged."""
    pytester.makepyfile(
        rdq_thirdparty=(
            "from rdq_memory.plugin import MemoryBackend\n"
            "backend = MemoryBackend(name='thirdparty')\n"
        )
    )
    dist = pytester.mkdir("rdq_thirdparty-0.1.dist-info")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rdq-thirdparty\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rdq.backends]\nthirdparty = rdq_thirdparty:backend\n")
    pytester.makepyfile(test_own="def test_their_own_test():\n    pass\n")
    collected = pytester.runpytest_subprocess("--rdq-backend=thirdparty", "--collect-only", "-q")
    assert collected.ret == pytest.ExitCode.OK, collected.stderr.str()
    assert _collected(collected) > 20
    ran = pytester.runpytest_subprocess("--rdq-backend=thirdparty", "-q", "-k", "enqueue or own")
    assert ran.ret == pytest.ExitCode.OK, ran.stdout.str()
    assert ran.parseoutcomes()["passed"] > 1
