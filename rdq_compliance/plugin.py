"""The pytest plugin (registered through the ``pytest11`` entry point).

``pytest --rdq-backend=NAME`` resolves NAME through the ``rdq.backends`` entry
points, provisions a server for it once per session, gives every test its own
namespace, and adds the kit's suites (shipped in :mod:`rdq_compliance.suite`) to
whatever else pytest collected. Without a backend the plugin stays out of the way.

Fixtures for suites and for a backend author's own tests:

``rdq_session``      the :class:`~rdq_compliance.session.Session` (session scope): settings,
                   backend and provisioned server; every fixture below comes from it
``rdq_backend``      the :class:`~rdq_compliance.provision.backend.Backend` under test (session)
``rdq_server``       the provisioned :class:`~rdq_compliance.provision.backend.Server` (session)
``rdq_capabilities`` what the backend declares (session)
``rdq_spec``         a fresh, isolated namespace as a picklable ``StorageSpec``
``rdq_storage``      a ``Storage`` opened on that namespace
``rdq_connect``      a factory opening more ``Storage`` handles on the same namespace
``rdq_known_upstream`` the known-upstream entries that may cover this test's failures, for
                   a test that judges them one by one (the chaos campaign's violations)

Markers: ``rdq_requires(*capabilities)`` skips a test (saying why) when the backend
does not declare a capability; ``rdq_requires_fault(*faults)`` does the same for
server faults (a name the kit does not know is a usage error, see
:mod:`rdq_compliance.requirements`); ``chaos`` and ``stateful`` tag the long-running
suites.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from rdq_compliance import option_check, pytest_report, registry, requirements, rules, settings
from rdq_compliance.known_upstream import Scope
from rdq_compliance.ledger import TestRef
from rdq_compliance.provision.backend import (
    Backend,
    ProvisionUnavailable,
    Server,
    ServerStartFailed,
    StorageSpec,
)
from rdq_compliance.session import Session
from rdq_core.errors import InvalidArgument, NotFound, RdqError
from rdq_core.model import Capabilities
from rdq_core.spi import Storage

SUITE_DIR = Path(__file__).parent / "suite"
_SETTINGS = pytest.StashKey[settings.Settings]()
_OPTIONS = pytest.StashKey[option_check.OptionReport]()
#: The session provisioned at the start of the run (not under xdist), and the reasons
#: the ladder offered no server, for the session fixture.
_EARLY = pytest.StashKey[Session]()
_UNAVAILABLE = pytest.StashKey[ProvisionUnavailable]()
#: what the sweep of the server given by DSN did, for the header
_SWEPT = pytest.StashKey[str]()
#: ``--rdq-chaos-fleet``'s hosts, described (the file checked in ``pytest_configure``).
_FLEET = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rdq", "rdq compliance kit")
    group.addoption(
        "--rdq-backend",
        metavar="NAME",
        help="run the rdq kit against this backend (an rdq.backends entry point name, "
        "or module.path:attribute); also RDQ_BACKEND or [tool.rdq] backend",
    )
    group.addoption(
        "--rdq-dsn",
        metavar="DSN",
        help="use this server instead of starting one (also RDQ_<BACKEND>_DSN, RDQ_DSN)",
    )
    group.addoption(
        "--rdq-require-backend",
        action="store_true",
        default=False,
        help="fail, instead of skipping, when no server can be provisioned",
    )
    group.addoption(
        "--rdq-no-docker",
        action="store_true",
        default=False,
        help="never try containers when provisioning",
    )
    group.addoption(
        "--rdq-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend-specific setting (repeatable)",
    )
    group.addoption(
        "--rdq-chaos-scenario",
        default=None,
        metavar="FILE|NAME",
        help="the chaos scenario the chaos suite runs (default: the one the provisioned "
        "server names, the built-in 'standard' unless it is too slow for it)",
    )
    group.addoption(
        "--rdq-chaos-fleet",
        default=None,
        metavar="HOSTS_FILE",
        help="run the chaos suite's workers on the hosts of this file over SSH (the ssh "
        "extra; see the docs' 'Workers on other hosts')",
    )
    group.addoption(
        "--rdq-chaos-seed",
        type=int,
        default=None,
        metavar="N",
        help="replay a chaos run with this seed",
    )
    group.addoption(
        "--rdq-hypothesis-profile",
        choices=("ci", "deep"),
        default="ci",
        help="how hard the stateful machine (-m stateful) searches: 'ci' (default: bounded, "
        "fixed seed) or 'deep' (many more, longer programs; a fresh seed each run)",
    )
    group.addoption(
        "--rdq-hypothesis-seed",
        type=int,
        default=None,
        metavar="N",
        help="run the stateful machine with this seed (a failure prints the one it used)",
    )
    group.addoption(
        "--rdq-no-suite",
        action="store_true",
        default=False,
        help="provide the fixtures but do not add the kit's own suites",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "rdq_requires(*capabilities): skip unless the backend declares these capabilities",
        "rdq_requires_fault(*faults): skip unless the provisioned server supports these faults",
        "rdq_conformance: a test of the rdq conformance suite",
        "chaos: an rdq chaos suite (real worker processes, injected faults)",
        "stateful: an rdq property-based state machine",
    ):
        config.addinivalue_line("markers", line)
    try:
        resolved = settings.resolve(
            cli_backend=config.getoption("rdq_backend"),
            cli_dsn=config.getoption("rdq_dsn"),
            cli_require=config.getoption("rdq_require_backend"),
            cli_no_docker=config.getoption("rdq_no_docker"),
            cli_options=config.getoption("rdq_option"),
            rootpath=config.rootpath,
        )
    except InvalidArgument as exc:
        raise pytest.UsageError(f"rdq: {exc}") from None
    if resolved.backend is not None:
        try:
            backend = registry.load_backend(resolved.backend)
        except registry.UnknownBackend as exc:
            raise pytest.UsageError(f"rdq: {exc}") from None
        try:  # a misspelt option ends the run here, before any test
            config.stash[_OPTIONS] = option_check.check_options(resolved, backend)
        except option_check.UnknownOption as exc:
            raise pytest.UsageError(f"rdq: {exc}") from None
        reporter = pytest_report.Reporting.for_run(config, resolved, backend)
        config.stash[pytest_report.KEY] = reporter
        config.pluginmanager.register(reporter, "rdq-reporting")
    config.stash[_SETTINGS] = resolved
    fleet = config.getoption("rdq_chaos_fleet")
    if fleet:
        config.stash[_FLEET] = _load_fleet(fleet)


def _load_fleet(path: str) -> str:
    """``--rdq-chaos-fleet``'s hosts file, checked before any test; its hosts, described."""
    try:
        from rdq_compliance.chaos.fleet_hosts import FleetConfigError, load_fleet
        from rdq_compliance.chaos.ssh_launcher import FleetError  # noqa: F401 (needs asyncssh)
    except ImportError as exc:
        raise pytest.UsageError(
            f"rdq: --rdq-chaos-fleet needs the ssh extra (pip install 'rdq[ssh]'): {exc}"
        ) from None
    try:
        return load_fleet(Path(path)).describe()
    except FleetConfigError as exc:
        raise pytest.UsageError(f"rdq: --rdq-chaos-fleet: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str | None:
    s = config.stash.get(_SETTINGS, None)
    if s is None or s.backend is None:
        return None
    report = config.stash.get(_OPTIONS, None)
    notes = report.header_lines() if report is not None else []
    swept = config.stash.get(_SWEPT, None)
    if swept:
        notes.append(f"server given by DSN: {swept}")
    fleet = config.stash.get(_FLEET, None)
    if fleet:
        notes.append(f"the chaos suite's workers run over SSH on: {fleet}")
    return "\n".join([f"rdq: {settings.describe(s)}", *(f"rdq: {n}" for n in notes)])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The server is asked for once, before any test, so that a server that cannot be
    had ends the run with one error (exit 4), not one error per test: a server the user
    named (a DSN) must answer; a server the kit starts itself (local binaries, a
    container) must start. A ladder with no rung to offer (no binaries, no Docker) is
    not an error: the tests are skipped with its reasons, as before."""
    config = session.config
    s = config.stash[_SETTINGS]
    if s.backend is None or config.option.collectonly:
        return
    if hasattr(config, "workerinput"):  # the xdist controller checked already
        return
    if s.dsn:
        swept = _probe_dsn(s)
        if swept:
            config.stash[_SWEPT] = swept
            reporter = config.stash.get(pytest_report.KEY, None)
            if reporter is not None:
                reporter.swept(swept)
    else:
        _start_early(config, s)


def _probe_dsn(s: settings.Settings) -> str | None:
    """Ask the server named by DSN once (and sweep the namespaces dead runs left on it,
    :mod:`rdq_compliance.provision.owners`); what the sweep did, for the header."""
    assert s.dsn is not None
    probe = Session(s)
    try:
        probe.start()
    except RdqError as exc:
        source = s.sources.get("dsn", "settings")
        raise pytest.UsageError(
            f"rdq: the {probe.name} server named by the DSN {settings.mask_dsn(s.dsn)} "
            f"(from {source}) does not answer, so no test ran: {exc}\n"
            "Start that server, correct the address, or remove the DSN to let the kit "
            "provision a server of its own."
        ) from None
    else:
        return probe.swept.summary() if probe.swept is not None else None
    finally:
        probe.close()


def _start_early(config: pytest.Config, s: settings.Settings) -> None:
    """Provision the server now; the session fixture then uses it (under xdist each
    worker starts its own, and this one only proves that one can start)."""
    early = Session(s)
    try:
        early.start()
    except ServerStartFailed as exc:
        early.close()
        raise pytest.UsageError(
            f"rdq: the {early.name} server could not be started, so no test ran: {exc}\n"
            "Correct what the error names (the server's binaries, options or data folder), "
            "or name a running server with --rdq-dsn."
        ) from None
    except ProvisionUnavailable as exc:
        early.close()
        config.stash[_UNAVAILABLE] = exc
        return
    except RdqError as exc:
        early.close()
        raise pytest.UsageError(
            f"rdq: the {early.name} server could not be started, so no test ran: {exc}\n"
            "Correct what the error names (the server's options, its binaries or image, "
            "its data folder), or name a running server with --rdq-dsn."
        ) from None
    if config.pluginmanager.has_plugin("dsession"):
        early.close()
    else:
        config.stash[_EARLY] = early


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a server started early that no test used (idempotent for one a test used)."""
    early = session.config.stash.get(_EARLY, None)
    if early is not None:
        early.close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the kit's suites when a backend is selected and they were not collected already;
    then tag the tests with their rules and apply the expected-failure ledger."""
    s = config.stash[_SETTINGS]
    if s.backend is None:
        return
    suite = SUITE_DIR.resolve()
    if not config.getoption("rdq_no_suite") and not any(
        suite in Path(str(item.path)).resolve().parents for item in items
    ):
        for path in sorted(suite.glob("test_*.py")):
            # An explicit node id: the files live outside the user's rootdir, where pytest
            # would otherwise derive an empty, ambiguous one.
            nodeid = f"rdq_compliance/suite/{path.name}"
            module = pytest.Module.from_parent(session, path=path, nodeid=nodeid)
            items.extend(session.genitems(module))
    config.stash[pytest_report.KEY].annotate(items)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """An unknown capability or fault name in ``rdq_requires``/``rdq_requires_fault`` is a
    collection error of the module (or class) holding the test, with or without a
    backend and whatever ``-k``/``-m`` select; the message lists the known names."""
    report = yield
    problem = requirements.check(
        (item.nodeid, mark.name, mark.args)
        for item in report.result or ()
        if isinstance(item, pytest.Item)
        for mark in item.iter_markers()
    )
    if problem is None:
        return report
    return pytest.CollectReport(collector.nodeid, "failed", problem, [], report.sections)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[object]:
    """In the kit's suites, an SPI error that escapes a test is reported under a rule when it
    names one: an error whose ``rule`` is a known rule id (the backend knows the failure is a
    contract bug, e.g. a Redis script touching an undeclared key: ``cluster-keys``) under
    that rule, its message kept; a ``NotFound`` nobody expected means the backend lost a
    task the test made (a task is never deleted but by purge, which the test would expect):
    rule ``no-loss``, naming the task, instead of a bare driver-level error."""
    try:
        return (yield)
    except RdqError as exc:
        if SUITE_DIR.resolve() not in Path(str(pyfuncitem.path)).resolve().parents:
            raise
        if exc.rule in rules.RULES:
            raise AssertionError(
                rules.message(
                    exc.rule,
                    f"{type(exc).__name__} escaped {pyfuncitem.name}, and the backend says it "
                    f"breaks this rule: {exc}",
                )
            ) from exc
        if not isinstance(exc, NotFound):
            raise
        raise AssertionError(
            rules.message(
                "no-loss",
                f"{exc}: a task this test enqueued is gone, and nothing the test did deletes "
                f"it (NotFound escaped {pyfuncitem.name})",
            )
        ) from exc


# ---- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def rdq_settings(pytestconfig: pytest.Config) -> settings.Settings:
    return pytestconfig.stash[_SETTINGS]


@pytest.fixture(scope="session")
def rdq_session(rdq_settings: settings.Settings, pytestconfig: pytest.Config) -> Iterator[Session]:
    """The kit's :class:`~rdq_compliance.session.Session`: the backend and its server,
    provisioned once for the whole test session."""
    if rdq_settings.backend is None:
        pytest.skip("no rdq backend selected: pass --rdq-backend=NAME (or set RDQ_BACKEND)")
    session = pytestconfig.stash.get(_EARLY, None) or Session(rdq_settings)
    name = session.backend.name
    try:
        unavailable = pytestconfig.stash.get(_UNAVAILABLE, None)
        if unavailable is not None:
            raise unavailable
        session.start()
    except ServerStartFailed as exc:  # a worker's own start (the controller's passed)
        pytest.fail(f"rdq backend {name!r}: {exc}", pytrace=False)
    except ProvisionUnavailable as exc:
        message = f"rdq backend {name!r} unavailable: {exc}"
        if rdq_settings.require_backend:
            pytest.fail(message + " (failing because --rdq-require-backend is set)")
        pytest.skip(message)
    except RdqError as exc:
        # A server the user named but that does not answer is an error, never a skip.
        pytest.fail(f"rdq backend {name!r}: {exc}", pytrace=False)
    pytestconfig.stash[pytest_report.KEY].server_ready(session)
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(scope="session")
def rdq_backend(rdq_session: Session) -> Backend:
    return rdq_session.backend


@pytest.fixture(scope="session")
def rdq_server(rdq_session: Session) -> Server:
    return rdq_session.server


@pytest.fixture
def rdq_spec(rdq_session: Session) -> Iterator[StorageSpec]:
    with rdq_session.namespace() as spec:
        yield spec


@pytest.fixture
def rdq_connect(rdq_session: Session, rdq_spec: StorageSpec) -> Iterator[Callable[[], Storage]]:
    opened: list[Storage] = []

    def connect() -> Storage:
        storage = rdq_session.open(rdq_spec)
        opened.append(storage)
        return storage

    try:
        yield connect
    finally:
        for storage in reversed(opened):
            storage.close()


@pytest.fixture
def rdq_storage(rdq_connect: Callable[[], Storage]) -> Storage:
    return rdq_connect()


@pytest.fixture
def rdq_known_upstream(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Scope:
    """The known-upstream entries whose scope holds this test
    (:class:`~rdq_compliance.known_upstream.Scope`). A test that asks for it judges its
    failures itself (:meth:`Scope.judge <rdq_compliance.known_upstream.Scope.judge>`),
    records the judgement (``rdq.known-upstream``), fails on what no entry covers and
    reports the rest as known upstream (``pytest.xfail``), never as a pass."""
    reporter = pytestconfig.stash.get(pytest_report.KEY, None)
    if reporter is None:
        name = request.node.name
        return Scope(TestRef(request.node.nodeid, name, name.partition("[")[0]))
    return reporter.scope_for(request.node)


@pytest.fixture(scope="session")
def rdq_capabilities(rdq_session: Session) -> Capabilities:
    return rdq_session.capabilities()


@pytest.fixture(autouse=True)
def _rdq_requirements(request: pytest.FixtureRequest) -> None:
    caps_marks = list(request.node.iter_markers("rdq_requires"))
    fault_marks = list(request.node.iter_markers("rdq_requires_fault"))
    if not caps_marks and not fault_marks:
        return
    backend: Backend = request.getfixturevalue("rdq_backend")
    if caps_marks:
        caps: Capabilities = request.getfixturevalue("rdq_capabilities")
        for mark in caps_marks:
            for name in mark.args:
                if not caps.has(name):
                    pytest.skip(f"backend {backend.name!r} does not declare capability {name!r}")
    if fault_marks:
        server: Server = request.getfixturevalue("rdq_server")
        for mark in fault_marks:
            for name in mark.args:
                if name not in server.faults:
                    pytest.skip(
                        f"the {backend.name!r} server ({server.origin}) cannot inject {name!r}"
                    )
