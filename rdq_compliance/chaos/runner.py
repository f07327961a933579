"""Run one chaos campaign: enqueue, unleash the fleet and the nemesis, drain, check.

:func:`run_campaign` is the whole run against a provisioned server:

0. the launcher opened (where the workers run) and each fault family of the scenario
   set up (:mod:`rdq_compliance.chaos.campaign_setup`: the network partitions cut, the
   skewed slots' clocks); the seeded fault plan drawn;
1. a fresh namespace; the tasks of the scenario's workload enqueued (journaled as
   ``enqueue ok`` in the harness journal), their due times spread over the window;
2. the fleet of worker processes started; the nemesis applies the seeded fault plan
   until it is done (or the deadline passes);
3. the **drain**: no more faults or redrives; paused workers resumed, armed ones
   disarmed, a killed server restarted; the workers run until no task is PENDING or
   IN_FLIGHT (or the drain timeout passes);
4. the fleet stopped; the final state read
   (:func:`~rdq_compliance.chaos.checker.read_final_state`: every enqueued task with
   ``get``, the DLQ paged fully); the fault families torn down (in reverse order, on
   an error too) and the launcher closed; the history read; the checker
   (:func:`rdq_compliance.chaos.checker.check`) run on them: if it raises, the run
   fails with a *checker error*;
5. the report folder written (:mod:`rdq_compliance.chaos.report`).

The result (:class:`~rdq_compliance.chaos.campaign_result.CampaignResult`) and the progress
snapshots are defined in :mod:`rdq_compliance.chaos.campaign_result`, shared with the report
and the CLI.

:func:`provision_and_run` provisions the server the settings name through a
:class:`~rdq_compliance.session.Session` first (what ``rdq-chaos run`` does).
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdq_compliance.chaos.campaign_result import CampaignResult, Progress, ProgressFn
from rdq_compliance.chaos.campaign_setup import CampaignSetup, open_launcher
from rdq_compliance.chaos.checker import RULES as CHECKER_RULES
from rdq_compliance.chaos.checker import FinalState, Violation, check, read_final_state
from rdq_compliance.chaos.coverage import coverage, unexercised
from rdq_compliance.chaos.events import INFO, OK, Event, Journal, read_history
from rdq_compliance.chaos.fleet import Fleet
from rdq_compliance.chaos.journal_observer import LockedJournal, error_text
from rdq_compliance.chaos.launcher import journal_clocks
from rdq_compliance.chaos.nemesis import Counters, Nemesis, plan_faults
from rdq_compliance.chaos.report import write_report
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.chaos.worker_main import WorkerConfig
from rdq_compliance.known_upstream import Failure, Scope
from rdq_compliance.provision.backend import Server, StorageSpec
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_core.errors import BackendUnavailable
from rdq_core.model import Capabilities, NewTask, QueueStats
from rdq_core.spi import Storage

if TYPE_CHECKING:
    from rdq_compliance.chaos.fleet_hosts import FleetHosts

HARNESS = "harness"


# ---- the workload -------------------------------------------------------------------------


def make_tasks(scenario: Scenario) -> list[NewTask]:
    """The scenario's tasks (deterministic for its seed)."""
    rng = random.Random(f"rdq-workload:{scenario.seed}")
    wl = scenario.workload
    mixes = list(wl.handlers)
    weights = [h.weight for h in mixes]
    lease = scenario.workers.lease
    width = max(5, len(str(wl.tasks)))
    out = []
    for i in range(wl.tasks):
        mix = rng.choices(mixes, weights)[0]
        kind = mix.kind
        payload: dict[str, object] = {"kind": kind}
        if kind == "overrun":
            payload.update(s=round(lease * mix.factor, 4), times=mix.times, after=0.02)
            if mix.abandon:
                payload["abandon"] = True
        else:
            payload["s"] = round(rng.uniform(*mix.duration), 4)
        if kind == "flaky":
            payload["failures"] = rng.randint(*mix.failures)
        spread = scenario.spread if mix.spread is None else mix.spread
        delay = timedelta(seconds=round(rng.uniform(0, spread), 3))
        out.append(
            NewTask(
                id=f"t{i:0{width}d}",
                queue=wl.queue,
                handler=f"chaos.{kind}",
                payload=json.dumps(payload, separators=(",", ":")).encode(),
                delay=delay,
            )
        )
    return out


def _retrying(fn: Callable[[], Any], what: str, attempts: int = 20) -> Any:
    for i in range(attempts):
        try:
            return fn()
        except BackendUnavailable:
            if i == attempts - 1:
                raise
            time.sleep(min(0.05 * 2**i, 1.0))
    raise AssertionError(what)  # pragma: no cover


def enqueue_all(storage: Storage, tasks: Sequence[NewTask], journal: LockedJournal) -> None:
    for task in tasks:
        created = _retrying(lambda t=task: storage.enqueue(t), f"enqueue {task.id}")
        journal.write(OK, "enqueue", task=task.id, handler=task.handler, created=created)


# ---- the final state and the checker -------------------------------------------------------


#: The page size the final DLQ listing is read with.
DLQ_PAGE = 100


def run_checker(events: list[Event], final: FinalState) -> tuple[list[Violation], str | None]:
    """``(violations, None)``, or ``([], why)`` if the checker raised: a checker error,
    which fails the run (the history was not checked)."""
    try:
        return check(events, final), None
    except Exception as exc:
        return [], f"the checker failed: {error_text(exc)}"


# ---- the campaign -------------------------------------------------------------------------


def measure_coverage(result: CampaignResult, events: list[Event]) -> None:
    """Count the campaign's calls (``result.coverage``), the checker rules they did not
    exercise, and what the faults that happened promised to exercise and did not."""
    families = result.scenario.faults.families
    cov = coverage(events, families.windows())
    happened = {e.get("kind") for e in events if e.get("op") == "fault"}
    required = families.requirements(sorted(k for k in happened if k))
    result.coverage = cov
    result.not_exercised, result.unmet = unexercised(cov, CHECKER_RULES, required)


def worker_template(scenario: Scenario, spec: StorageSpec) -> WorkerConfig:
    w = scenario.workers
    return WorkerConfig(
        proc="w?",
        spec=spec,
        queue=scenario.workload.queue,
        journal="",
        control="",
        lease=w.lease,
        batch=w.batch,
        concurrency=w.concurrency,
        heartbeat_fraction=w.heartbeat_fraction,
        poll_interval=w.poll_interval,
        max_poll_interval=w.max_poll_interval,
        max_attempts=w.max_attempts,
        retry_base=w.retry_base,
        retry_cap=w.retry_cap,
        seed=scenario.seed,
    )


def fit_lease(scenario: Scenario, capabilities: Capabilities) -> tuple[Scenario, str | None]:
    """The scenario run on a backend whose lease model gives every claim its own lease
    (``Capabilities.fixed_lease``) longer than the scenario's: with that lease
    (:meth:`Scenario.with_lease`), and a note saying so; else as it is."""
    fixed = capabilities.fixed_lease
    asked = scenario.workers.lease
    if fixed is None or fixed.total_seconds() <= asked:
        return scenario, None
    lease = fixed.total_seconds()
    fitted = scenario.with_lease(lease)
    return fitted, (
        f"lease {asked:g}s asked by the scenario; the backend's lease model "
        f"{capabilities.lease_model!r} gives every claim {lease:g}s, so the campaign ran "
        f"with that lease (faults sized in leases and the drain's bounds scaled with it: "
        f"deadline {fitted.limits.deadline:g}s, drain timeout {fitted.limits.drain_timeout:g}s)"
    )


def run_campaign(
    scenario: Scenario,
    *,
    session: Session,
    outdir: Path,
    progress: ProgressFn | None = None,
    command: str | None = None,
    fleet_hosts: FleetHosts | None = None,
    upstream: Scope | None = None,
) -> CampaignResult:
    """Run ``scenario`` on the started ``session``'s server (in a fresh namespace); write
    the report to ``outdir``; the result. With ``fleet_hosts`` the workers run on those
    hosts over SSH (:mod:`rdq_compliance.chaos.remote_fleet`), else on this machine
    (:func:`~rdq_compliance.chaos.campaign_setup.open_launcher`). With ``upstream`` (the
    known-upstream entries that cover the campaign's test) each violation is judged, and
    the report marks those an entry covers."""
    outdir = Path(outdir)
    history_dir = outdir / "history"
    history_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    server = session.server
    backend_name = session.name
    capabilities = session.capabilities()
    scenario, lease_note = fit_lease(scenario, capabilities)
    counters = Counters(scenario.faults.families)
    slots = scenario.workers.count
    launcher = open_launcher(fleet_hosts, server, backend_name, outdir, slots)
    try:
        journal = LockedJournal(Journal(history_dir / f"{HARNESS}.jsonl", HARNESS))
        journal_clocks(journal, launcher.clocks())
        setup = CampaignSetup(
            scenario.faults, server, backend_name, launcher, scenario.seed, slots, journal, counters
        )
        with setup:  # each fault family set up; torn down once the workers stopped
            plan = plan_faults(
                scenario,
                server.faults,
                f"the {backend_name} server ({server.origin})",
                durable=capabilities.durable,
                durability=capabilities.durability,
                no_network=setup.no_network,
            )
            counters.notes.extend(plan.skipped)
            if lease_note:
                counters.notes.append(lease_note)
            swept = session.swept.summary() if session.swept is not None else None
            if swept:
                counters.notes.append(f"before the run, on the server given by DSN: {swept}")
            counters.notes.extend(launcher.notes())
            result = CampaignResult(
                scenario=scenario,
                seed=scenario.seed,
                backend=backend_name,
                server_origin=server.origin,
                outdir=outdir,
                plan=plan,
                counters=counters,
                started_at=time.time(),
            )
            spec = session.create_namespace()
            storage = setup.harness_storage(
                lambda dsn: session.open(spec if dsn is None else replace(spec, dsn=dsn))
            )
            try:
                tasks, final, stats, d0 = _run_fleet(
                    result, setup, storage, spec, capabilities.fixed_lease, t0, progress
                )
            finally:
                storage.close()
    finally:
        launcher.close()
    journal.close()
    events = read_history(history_dir.glob("*.jsonl"))
    result.violations, result.checker_error = run_checker(events, final)
    result.checked = result.checker_error is None
    if upstream:
        result.upstream = upstream.judge([Failure((v.rule,), v.message) for v in result.violations])
    measure_coverage(result, events)
    result.check_time = time.monotonic() - d0 - result.drain_time
    result.tasks = {
        "enqueued": len(tasks),
        "succeeded": stats.succeeded,
        "dead": stats.dead,
        "pending": stats.pending,
        "in_flight": stats.in_flight,
        "missing": len(final.missing),
    }
    result.duration = time.monotonic() - t0
    result.files = write_report(result, events, final, command=command)
    with contextlib.suppress(Exception):
        session.drop_namespace(spec)
    if progress is not None:
        progress(
            Progress("done", result.duration, len(tasks), stats, counters, len(result.violations))
        )
    return result


def _run_fleet(
    result: CampaignResult,
    setup: CampaignSetup,
    storage: Storage,
    spec: StorageSpec,
    fixed_lease: timedelta | None,
    t0: float,
    progress: ProgressFn | None,
) -> tuple[list[NewTask], FinalState, QueueStats, float]:
    """Enqueue, start the fleet, apply the faults, drain, stop the fleet, read the final
    state: ``(tasks, final state, queue stats, when the drain began)``."""
    scenario, counters, journal = result.scenario, result.counters, setup.journal
    queue = scenario.workload.queue
    tasks = make_tasks(scenario)
    last_stats = [QueueStats(pending=len(tasks))]
    last_poll = [0.0]

    def report_progress(phase: str, force: bool = False) -> None:
        now = time.monotonic()
        if progress is None or (not force and now - last_poll[0] < 0.25):
            return
        last_poll[0] = now
        with contextlib.suppress(Exception):
            last_stats[0] = storage.stats(queue)
        progress(Progress(phase, now - t0, len(tasks), last_stats[0], counters))

    fleet = Fleet(
        worker_template(scenario, spec),
        scenario.workers.count,
        history_dir=result.outdir / "history",
        control_dir=result.outdir / "control",
        log_dir=result.outdir / "logs",
        skews=setup.skews,
        on_skew=setup.on_skew,
        on_spawn=lambda w: journal.write(INFO, "host", kind="placed", target=w.name, host=w.host),
        launcher=setup.launcher,
    )
    try:
        report_progress("enqueue", force=True)
        enqueue_all(storage, tasks, journal)
        result.enqueue_time = time.monotonic() - t0
        fleet.start()
        nemesis = Nemesis(
            result.plan, scenario, fleet, setup.server, storage, spec.namespace, journal,
            counters, network=setup.network,
        )  # fmt: skip
        nemesis.start()
        stop_at = t0 + scenario.limits.deadline
        if not nemesis.run(stop_at, on_tick=lambda: report_progress("faults")):
            counters.notes.append(
                f"the deadline ({scenario.limits.deadline:.0f}s) passed before every fault "
                "was applied"
            )
        result.fault_phase = time.monotonic() - t0
        nemesis.stop_faults()
        drain_end = min(
            time.monotonic() + scenario.limits.drain_timeout, max(stop_at, time.monotonic() + 5.0)
        )
        d0 = time.monotonic()
        result.drained, stalled = _drain(
            storage, queue, nemesis, drain_end, scenario.stall, lambda: report_progress("drain")
        )
        result.drain_time = time.monotonic() - d0
        if stalled:
            counters.notes.append(
                f"the drain stalled: no task changed status for {scenario.stall:.0f}s "
                f"(after {result.drain_time:.0f}s of draining) while tasks were still "
                "PENDING or IN_FLIGHT"
            )
        elif not result.drained:
            counters.notes.append(
                f"the drain did not quiesce within {scenario.limits.drain_timeout:.0f}s: "
                "tasks were still PENDING or IN_FLIGHT"
            )
    finally:
        fleet.stop(grace=scenario.workers.lease * 2 + 1.0)
    launcher = setup.launcher
    result.workers_left = [*fleet.pids(), *launcher.leftovers()]
    counters.notes.extend(launcher.notes())
    report_progress("check", force=True)
    final = read_final_state(
        storage,
        queue,
        [t.id for t in tasks],
        drained=result.drained,
        page=DLQ_PAGE,
        fixed_lease_us=None if fixed_lease is None else fixed_lease // timedelta(microseconds=1),
    )
    stats = storage.stats(queue)
    journal_clocks(journal, launcher.clocks(), final=True)
    result.hosts = launcher.hosts()
    return tasks, final, stats, d0


def _drain(
    storage: Storage,
    queue: str,
    nemesis: Nemesis,
    end: float,
    stall: float,
    tick: Callable[[], None],
) -> tuple[bool, bool]:
    """Let the workers finish: ``(drained, stalled)``. Drained once no task is PENDING
    or IN_FLIGHT; stalled when the queue's counts by status have not moved for ``stall``
    seconds while some task still is (a wedged task: every reclaim of it fails)."""
    quiet_since: float | None = None
    last: tuple[int, ...] | None = None
    moved = time.monotonic()
    while time.monotonic() < end:
        nemesis.tick()  # replaces dead workers; retries a resume that failed at stop_faults
        tick()
        try:
            stats = storage.stats(queue)
        except Exception:
            stats = None
        now = time.monotonic()
        if stats is None:
            moved = now  # no answer is no evidence of a stall: the timeout decides
        else:
            counts = (stats.pending, stats.due, stats.in_flight, stats.succeeded, stats.dead)
            if counts != last:
                last, moved = counts, now
            elif now - moved >= stall and (stats.pending or stats.in_flight):
                return False, True
        if stats is not None and stats.pending == 0 and stats.in_flight == 0:
            # Two looks a little apart: a report in flight cannot revive a terminal task,
            # but be sure no worker is mid-claim of something we have not seen.
            if quiet_since is not None and now - quiet_since >= 0.2:
                return True, False
            quiet_since = quiet_since or now
        else:
            quiet_since = None
        time.sleep(0.05)
    return False, False


# ---- provisioning -------------------------------------------------------------------------


def provision_and_run(
    scenario: Scenario,
    *,
    settings: Settings,
    outdir: Path,
    progress: ProgressFn | None = None,
    on_server: Callable[[Server], None] | None = None,
    command: str | None = None,
    fleet_hosts: FleetHosts | None = None,
) -> CampaignResult:
    """Provision the server ``settings`` name through the session (the ladder), run, and
    close what was started.

    Raises ``NoBackendSelected`` / ``registry.UnknownBackend`` / ``ProvisionUnavailable`` /
    ``BackendUnavailable`` when there is no server to run against.
    """
    with Session(settings) as session:
        if on_server is not None:
            on_server(session.server)
        return run_campaign(
            scenario,
            session=session,
            outdir=outdir,
            progress=progress,
            command=command,
            fleet_hosts=fleet_hosts,
        )


__all__ = [
    "make_tasks",
    "provision_and_run",
    "run_campaign",
    "run_checker",
]
