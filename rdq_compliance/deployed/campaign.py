"""One deployed campaign, from the server's provisioning to the verdicts and the report.

1. The system's server is provisioned through the kit's ladder
   (``registry.load_backend(system.server).provision(...)``: the DSN given, else local
   binaries, else a container), and a namespace is made on it.
2. The places the workers run in are readied: this machine
   (:class:`~rdq_compliance.deployed.local_places.LocalPlaces`, with network namespaces
   when the scenario partitions and libfaketime when it skews clocks), or the hosts of an
   SSH fleet (``fleet``, :class:`~rdq_compliance.deployed.remote_places.RemotePlaces`).
   The plan is drawn (:func:`~rdq_compliance.deployed.plan.make_plan`, with what those
   places can do) and printed.
3. ``system.bind(dsn, namespace, workdir, profile)``; the workers are started
   (:class:`~rdq_compliance.deployed.fleet.Fleet`); every job is enqueued with
   ``system.enqueue``, one call per job: those the client acknowledged are
   :class:`~rdq_compliance.deployed.verdicts.Accepted` at the time the call returned.
4. The fault window opens: the nemesis runs the plan, then heals everything.
5. The drain: ``system.final_states`` every 0.5 s until every accepted job is finished,
   failed for good or held, or until the drain bound (``recovery_after`` + the longest
   job + the scenario's margin); the result says which ended it. The workers alive then
   are the drain's :class:`~rdq_compliance.deployed.verdicts.Drain`.
6. The workers are stopped (SIGTERM, SIGKILL after a grace), skewed clocks are set right,
   the journals and logs brought here, every probe journal is read (torn lines
   reported), and the checker judges (:func:`~rdq_compliance.deployed.verdicts.judge`,
   with the profile's ``execution_limit`` and the places' clock uncertainty:
   :data:`~rdq_compliance.deployed.places.LOCAL_UNCERTAINTY` on one machine, from the
   measured host clocks on a fleet).
7. The places are closed, the namespace dropped, the client closed, the server released;
   the report folder is written (:mod:`rdq_compliance.deployed.report`).

Bad input (an unknown system or profile, a declaration with problems, a scenario that
cannot be planned) is :class:`CampaignError` before anything starts; a campaign that
cannot run (no server, a worker that cannot start) is a :class:`CampaignError` too,
after everything started was stopped. A campaign that ran but could not judge the
library says why in its result's ``error``: a worker that never ran a job and kept
exiting on its own, a probe journal that breaks the format, or no execution journalled
at all while the library accepted jobs (:func:`nothing_ran`: the jobs it settled unseen,
by state and by name, and the workers' logs to read).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rdq_compliance import registry
from rdq_compliance.chaos.fleet_hosts import FleetHosts
from rdq_compliance.deployed import report, upstream, verdicts
from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.fleet import Fleet, WorkerFailed
from rdq_compliance.deployed.local_places import LocalPlaces
from rdq_compliance.deployed.nemesis import Nemesis
from rdq_compliance.deployed.places import LOCAL_UNCERTAINTY, Places
from rdq_compliance.deployed.plan import Plan, make_plan, worker_names
from rdq_compliance.deployed.probe import ProbeFormatError, read_probe
from rdq_compliance.deployed.result import CampaignResult
from rdq_compliance.deployed.scenario import Scenario, ScenarioError
from rdq_compliance.deployed.system import (
    DeployedSystem,
    JobSpec,
    JobState,
    Profile,
    UnknownSystem,
    declaration_problems,
    load_system,
    takes_dsn,
)
from rdq_compliance.provision.backend import (
    FAULTS,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
)
from rdq_core.errors import RdqError
from rdq_core.masking import mask_dsn

__all__ = [
    "LOCAL_UNCERTAINTY",
    "CampaignError",
    "load",
    "nothing_ran",
    "run_campaign",
]

#: The deployed checker's rule ids.
_RULE_IDS = tuple(r.id for r in verdicts.RULES)
#: The states a job ends in.
SETTLED = verdicts.SETTLED
#: Seconds between two reads of the final states during the drain.
POLL = 0.5
#: Seconds a worker must survive its start before the jobs are enqueued.
SETTLE = 1.0


class CampaignError(RdqError):
    """A campaign that cannot start or run; the message says what and what to do."""


def load(system_name: str, profile_name: str) -> tuple[DeployedSystem, Profile]:
    """The system registered as ``system_name`` and its profile ``profile_name``, or one
    :class:`CampaignError` saying what is wrong."""
    try:
        system = load_system(system_name)
    except UnknownSystem as exc:
        raise CampaignError(str(exc)) from None
    problems = declaration_problems(system, _RULE_IDS) + upstream.problems(system, _RULE_IDS)
    if problems:
        raise CampaignError(
            f"system {system_name!r} declares itself incompletely: " + "; ".join(problems)
        )
    profile = system.profiles.get(profile_name)
    if profile is None:
        raise CampaignError(
            f"system {system_name!r} has no profile {profile_name!r} "
            f"(its profiles: {', '.join(sorted(system.profiles))})"
        )
    return system, profile


def _enqueue(system: DeployedSystem, jobs: Sequence[JobSpec], result: CampaignResult) -> None:
    for spec in jobs:
        try:
            ids = system.enqueue([spec])
        except Exception as exc:
            result.refused[spec.key] = f"{type(exc).__name__}: {exc}"
            continue
        at = time.time()
        job = ids.get(spec.key)
        if job is None:
            result.refused[spec.key] = "not acknowledged by the client"
            continue
        result.keys[job] = spec.key
        result.accepted.append(verdicts.Accepted(job, at, spec.retries))


def _drain(system: DeployedSystem, result: CampaignResult, fleet: Fleet) -> None:
    """Poll the final states until every accepted job settled or the bound passed."""
    plan, profile = result.plan, result.profile
    result.drain_bound = round(
        (profile.recovery_after or 0.0) + plan.longest_job + plan.scenario.drain_margin, 3
    )
    deadline = time.time() + result.drain_bound
    ids = [a.job for a in result.accepted]
    while True:
        try:
            result.final = dict(system.final_states(ids))
        except Exception as exc:
            when = time.time() - result.t0
            result.drain_errors.append(f"+{when:.3f} s: {type(exc).__name__}: {exc}")
        if all(result.final.get(j, JobState("unknown", "")).state in SETTLED for j in ids):
            result.drain_ended_by = "every accepted job was finished, failed for good or held"
            break
        if time.time() >= deadline:
            result.drain_ended_by = f"the drain bound ({result.drain_bound:g} s) passed"
            break
        time.sleep(min(POLL, max(0.0, deadline - time.time())))
    result.drain = verdicts.Drain(time.time(), fleet.live())


def _never_started(result: CampaignResult, fleet: Fleet) -> str | None:
    """A worker that exited on its own and never ran a job: it could not start (a broken
    install, a bad setting), and the campaign judged nothing of the library's."""
    ran = {x.worker for x in result.executions}
    for name in result.plan.workers:
        own = [e for e in result.exits if e.worker == name and e.cause == "on its own"]
        if own and name not in ran:
            return (
                f"worker {name} never ran a job and exited on its own {len(own)} time(s) "
                f"(last status {own[-1].code}): it does not start; see {fleet.log_path(name)}"
            )
    return None


def _named(result: CampaignResult, job: str) -> str:
    """A job by the harness's key, with the library's id when it differs."""
    key = result.keys.get(job, job)
    return key if key == job else f"{key} ({job})"


def nothing_ran(result: CampaignResult, logs: Sequence[str]) -> str | None:
    """Why the campaign judged nothing of the library, when the probe journalled no
    execution at all of the jobs the library accepted: how many of them the library
    settled unseen (finished, failed for good or held, by state), which ones, and what
    to check (``logs``: the workers' log files). ``None`` when some execution was
    journalled, or no job was accepted."""
    if not result.accepted or result.executions:
        return None
    unseen = verdicts.settled_unseen(result.executions, result.accepted, result.final)
    states = Counter(result.final[a.job].state for a in unseen)
    where = ", ".join(logs) or "the workers' logs"
    check = (
        f"the workers never ran the probe's handler: see their logs ({where}) and check "
        "that the handler the system names is importable where they run"
    )
    n = len(result.accepted)
    if not unseen:
        return f"the probe journalled no execution of any of the {n} accepted jobs: {check}"
    by_state = ", ".join(f"{state} {count}" for state, count in sorted(states.items()))
    jobs = ", ".join(_named(result, a.job) for a in unseen)
    return (
        f"the library settled {len(unseen)} of the {n} accepted jobs ({by_state}) without "
        f"the probe ever seeing them run, and the probe journalled no execution at all: "
        f"{check}; jobs settled unseen: {jobs}"
    )


def _judge(system: DeployedSystem, result: CampaignResult, fleet: Fleet) -> None:
    log = read_probe(fleet.probe_paths())
    result.torn = list(log.torn)
    result.executions = log.executions()
    result.error = _never_started(result, fleet) or nothing_ran(
        result, [str(fleet.log_path(name)) for name in result.plan.workers]
    )
    assert result.drain is not None
    result.uncertainty, result.uncertainty_note = fleet.places.uncertainty()
    result.known_upstream = upstream.known_upstream_of(system, _RULE_IDS)
    judged = verdicts.judge(
        result.executions,
        result.faults,
        result.accepted,
        result.final,
        system.promises,
        result.drain,
        execution_limit=result.profile.execution_limit,
        uncertainty=result.uncertainty,
    )
    result.verdicts = verdicts.mark_known(judged, result.known_upstream)


def _skewed(plan: Plan) -> list[str]:
    return [f.worker for f in plan.faults if f.kind == "clock-skew" and f.worker is not None]


def _run(
    system: DeployedSystem,
    server: Server,
    places: Places,
    result: CampaignResult,
    say: Callable[[str], None],
    stop: threading.Event,
) -> None:
    fleet = Fleet(
        system, result.profile.name, result.plan.workers, result.outdir,
        restart_after=result.plan.scenario.restart_after, places=places,
    )  # fmt: skip
    nemesis: Nemesis | None = None
    try:
        say(f"starting {len(result.plan.workers)} workers")
        places.prepare_skews(_skewed(result.plan))
        fleet.start()
        fleet.check_started(SETTLE)
        say(f"enqueueing {len(result.plan.jobs)} jobs")
        started = time.time()
        _enqueue(system, result.plan.jobs, result)
        if not result.accepted:
            first = next(iter(result.refused.values()), "none planned")
            raise CampaignError(f"the library's client acknowledged no job (first: {first})")
        result.t0 = time.time()
        result.timings["enqueue"] = round(result.t0 - started, 3)
        say(f"fault window: {result.plan.window:g} s, {len(result.plan.faults)} faults")
        nemesis = Nemesis(
            result.plan.faults, fleet, server, result.namespace, system.parts, stop=stop
        )
        result.nemesis = nemesis.run(result.t0, result.plan.window)
        healed = time.time()
        result.timings["window"] = round(healed - result.t0, 3)
        say("drain")
        _drain(system, result, fleet)
        assert result.drain is not None
        result.timings["drain"] = round(result.drain.ended - healed, 3)
    finally:
        fleet.stop()
        stopped = time.time()
        places.unskew()
        if nemesis is not None:
            nemesis.settle_skews(stopped)
        places.collect()
        result.exits = list(fleet.exits)
        result.host_losses = [
            Fault("kill", e.at, e.restarted, targets=(e.worker,))
            for e in result.exits
            if e.cause.startswith("its host ")
        ]
        result.launches = fleet.launches
        result.hosts = places.hosts()
        result.notes = places.notes()
    try:
        _judge(system, result, fleet)
    except ProbeFormatError as exc:
        result.error = f"a probe journal breaks the format (the worker's probe is wrong): {exc}"


@contextlib.contextmanager
def _harness_log(path: Path) -> Iterator[None]:
    """The harness process's own log (its client's warnings during faults) in ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def _places(
    system: DeployedSystem,
    server: Server,
    scenario: Scenario,
    out: Path,
    fleet: FleetHosts | None,
) -> Places:
    """Where the workers run: the hosts of ``fleet``, else this machine, readied for the
    partitions and clock skews ``scenario`` asks for (or saying why they cannot run)."""
    workers = worker_names(scenario)
    if fleet is None:
        local = LocalPlaces(out, workers, takes_dsn=takes_dsn(system))
        if scenario.partition:
            local.open_partitions(server, system.server)
        if scenario.clock_skew:
            local.open_skews()
        return local
    try:
        from rdq_compliance.chaos.ssh_launcher import FleetError
        from rdq_compliance.deployed.remote_places import RemotePlaces
    except ImportError as exc:
        raise CampaignError(
            f"a fleet needs the ssh extra ({exc}): pip install 'rdq[ssh]'"
        ) from None
    try:
        return RemotePlaces(fleet, server, system.server, out, workers, takes_dsn=takes_dsn(system))
    except FleetError as exc:
        raise CampaignError(f"the fleet {fleet.source}: {exc}") from None


def run_campaign(
    system: DeployedSystem,
    profile: Profile,
    scenario: Scenario,
    seed: int,
    *,
    out: Path,
    dsn: str | None = None,
    say: Callable[[str], None] = lambda line: None,
    stop: threading.Event | None = None,
    fleet: FleetHosts | None = None,
) -> CampaignResult:
    """Run one campaign of ``scenario`` with ``seed`` on ``system`` under ``profile``,
    write its report folder ``out`` and return what it found. ``say`` is told each
    phase and the plan's lines. With ``fleet`` the workers run on its hosts over SSH
    (``docs/fleet.md``); the server stays where the kit provisions it."""
    problems = declaration_problems(system, _RULE_IDS) + upstream.problems(system, _RULE_IDS)
    if problems:
        raise CampaignError(f"{system.name} declares itself incompletely: " + "; ".join(problems))
    try:  # a scenario that cannot be planned even on a server that takes every fault
        make_plan(scenario, seed, system=system, profile=profile, server_faults=FAULTS)
    except ScenarioError as exc:
        raise CampaignError(str(exc)) from None
    stop = stop or threading.Event()
    out = Path(out).absolute()  # the workers may run in folders of their own
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with (
        _harness_log(out / "logs" / "harness.log"),
        tempfile.TemporaryDirectory(prefix="rdq-deployed-") as tmp,
    ):
        try:
            backend = registry.load_backend(system.server)
            server = backend.provision(ProvisionRequest(workdir=Path(tmp) / "server", dsn=dsn))
        except (RdqError, OSError) as exc:
            raise CampaignError(f"no {system.server} server for {system.name}: {exc}") from None
        try:
            places = _places(system, server, scenario, out, fleet)
            try:
                plan = make_plan(
                    scenario, seed, system=system, profile=profile,
                    server_faults=server.faults, reach=places.reach(),
                )  # fmt: skip
            except ScenarioError as exc:
                places.close()
                raise CampaignError(str(exc)) from None
            for line in plan.lines():
                say(line)
            try:
                namespace = server.create_namespace()
                result = CampaignResult(
                    system.name, system.server, server.origin, server.version,
                    mask_dsn(server.dsn), namespace, profile, plan, out,
                )  # fmt: skip
                try:
                    workdir = Path(tmp) / "system"
                    workdir.mkdir()
                    system.bind(server.dsn, namespace, str(workdir), profile.name)
                    _run(system, server, places, result, say, stop)
                except WorkerFailed as exc:
                    raise CampaignError(str(exc)) from None
                finally:
                    system.close()
                    server.drop_namespace(namespace)
            finally:
                places.close()
        except ProvisionUnavailable as exc:
            raise CampaignError(str(exc)) from None
        finally:
            server.close()
    result.timings["total"] = round(time.time() - started, 3)
    report.write(result, secrets=[d for d in (dsn, server.dsn) if d])
    return result
