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


_CAPABILITY_TYPO = """
import pytest

@pytest.mark.rdq_requires("multi_proces")
def test_capability_typo():
    pass

def test_unmarked():
    pass
"""

_FAULT_TYPO = """
import pytest

class TestFaults:
    @pytest.mark.rdq_requires_fault("kill_server", "kil_server")
    def test_fault_typo(self):
        pass
"""


def test_unknown_capability_is_a_collection_error_listing_the_known(
    pytester: pytest.Pytester,
) -> None:
    """No backend selected, the typo'd test deselected: still an error, never a skip."""
    pytester.makepyfile(test_typo=_CAPABILITY_TYPO)
    for args in ((), ("-k", "unmarked"), ("-p", "xdist", "-n", "2")):
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
        assert result.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.TESTS_FAILED), args
        assert "passed" not in result.parseoutcomes() and "skipped" not in result.parseoutcomes()
        result.stdout.fnmatch_lines(
            [
                "*ERROR collecting test_typo.py*",
                "rdq: rdq_requires: unknown capability 'multi_proces'; known capability "
                "names: durable, multi_process, notify "
                "(used by test_typo.py::test_capability_typo)",
            ]
        )


def test_unknown_fault_is_a_collection_error_listing_the_known(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_typo=_FAULT_TYPO)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "--rdq-no-suite"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting test_typo.py*",
            "rdq: rdq_requires_fault: unknown fault 'kil_server'; known fault names: "
            "cut_connections, failover, kill_server, pause_server, restart_server "
            "(used by test_typo.py::TestFaults::test_fault_typo)",
        ]
    )


def test_known_requirement_the_backend_lacks_still_skips_with_the_reason(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_known="""
        import pytest

        @pytest.mark.rdq_requires("multi_process")
        def test_needs_processes():
            pass

        @pytest.mark.rdq_requires_fault("kill_server")
        def test_needs_a_killable_server():
            pass

        @pytest.mark.rdq_requires("notify", "multi_process")
        @pytest.mark.rdq_requires_fault("cut_connections", "restart_server")
        def test_collects_without_a_backend():
            pass
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "--rdq-no-suite", "-rs",
        "-k", "needs",
    )  # fmt: skip
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]1[]] test_known.py:3: backend 'memory' does not declare capability "
            "'multi_process'",
            "SKIPPED [[]1[]] test_known.py:7: the 'memory' server (in-process) cannot inject "
            "'kill_server'",
        ]
    )
    without = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    without.assert_outcomes(skipped=3)
    without.stdout.fnmatch_lines(["*no rdq backend selected*"])


def test_known_names_are_the_capability_flags_and_the_declared_faults() -> None:
    from rdq_compliance import requirements
    from rdq_compliance.provision import FAULTS, KILL_SERVER

    assert requirements.CAPABILITIES == {"durable", "multi_process", "notify"}
    assert requirements.MARKERS["rdq_requires_fault"] == ("fault", FAULTS)
    assert requirements.unknown("rdq_requires_fault", (KILL_SERVER,)) is None
    assert requirements.unknown("rdq_requires", ("clock",)) is not None  # not a flag
    assert requirements.unknown("rdq_requires", (1,)) is not None
    assert requirements.unknown("skipif", ("anything",)) is None


_REFUSING = """
from rdq_core.errors import BackendUnavailable
from rdq_core.memory import MemoryStore
from rdq_memory.plugin import MemoryBackend


class Refusing(MemoryStore):
    def _enqueue(self, task):
        raise BackendUnavailable(f"enqueue of task {{task.id!r}}: refused", rule={rule!r})


backend = MemoryBackend(Refusing, "refusing")
"""


@pytest.mark.parametrize("rule", ["cluster-keys", "no-such-rule"])
def test_an_spi_error_naming_a_rule_is_reported_under_it(
    pytester: pytest.Pytester, rule: str
) -> None:
    """An SPI error that escapes a suite test and names a known rule (``RdqError.rule``) is
    reported as that rule's failure, its message kept; a name the kit does not know leaves
    the error as it was (never a made-up rule)."""
    pytester.makepyfile(refusing=_REFUSING.format(rule=rule))
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "--rdq-backend=refusing:backend", "-k", "test_payload_bytes_round_trip", "--tb=short"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    if rule == "cluster-keys":
        result.stdout.fnmatch_lines(
            ["*AssertionError: [[]cluster-keys[]] *BackendUnavailable escaped*"
             "enqueue of task 'payload': refused*"]
        )  # fmt: skip
    else:
        assert "[no-such-rule]" not in out
        result.stdout.fnmatch_lines(["*BackendUnavailable: enqueue of task 'payload': refused*"])
