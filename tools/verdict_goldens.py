"""Verdict goldens: what the chaos harness decides, recorded on one tree and compared on
another, from the same seeds.

    python tools/verdict_goldens.py record OUT_DIR [--backends sqlite,postgres,redis] [--quick]
    python tools/verdict_goldens.py compare OUT_DIR [--rerun]

``record`` writes, under ``OUT_DIR``:

- ``plans.json``: the seeded fault plan
  (:func:`rdq_compliance.chaos.nemesis.plan_faults`) of every shipped scenario file
  (:data:`SCENARIO_GLOBS`), for the seeds :data:`SEEDS`, in each plan context of
  :data:`PLAN_CONTEXTS` (what the server supports, whether the backend is durable,
  whether the runner built a network for partitions): each fault as
  ``PlannedFault.describe()`` and with its exact fields, and the skipped-fault notes;
- ``campaigns/<name>/``, for each campaign of :data:`CAMPAIGNS` (a real campaign through
  :func:`rdq_compliance.chaos.runner.run_campaign` on a server the kit provisions, with a
  fixed seed; a correct backend or a broken variant of ``tests/broken/catalogue.py``):

  - ``history/*.jsonl``: the campaign's journals, byte for byte;
  - ``final.json``: its :class:`~rdq_compliance.chaos.checker.FinalState`, read back from
    the storage just before the runner drops the campaign's namespace (every task's
    fields, the whole DLQ in order, the enqueued ids, ``drained``, ``fixed_lease_us``),
    in a JSON form :func:`final_from_json` loads back;
  - ``results.json``: the report's own summary, for reading;
  - ``verdicts.json``: ``campaign`` (what was run), ``verdicts`` (what the checker and
    the coverage say of the saved history and final state: each violation's rule, task,
    workers, tokens and the first line of its message, sorted; the coverage table; the
    rules not exercised; the requirements unmet) and ``run`` (the campaign's own result:
    the rules its violations named, not exercised, unmet, task counts, fault counters,
    the fault kinds the harness journaled, the notes, the duration);
- ``manifest.json``: the tree recorded (commit), the campaigns recorded and those that
  could not be, with why.

``compare`` recomputes, on the tree it runs in, the plans (same scenario files, seeds
and contexts) and the verdicts of each saved history and final state: the same input, so
they must be identical. It prints a diff per item that differs and ``N same, M differ``,
and exits 1 on any difference. With ``--rerun`` it also runs each recorded campaign
again (same scenario, backend, seed) and compares what should not depend on timing: the
rules its violations name, the rules of its unmet requirements, the fault kinds the
harness journaled, a checker error. A rerun's difference is counted apart and reported as
such: a race a fault opens may be won in one run and lost in the next.

The kit is used through its own entry points only: ``plan_faults``, ``load_scenario``,
``Session``, ``Settings``, ``run_campaign``, ``read_history``, ``read_final_state``,
``FinalState``, ``check``, ``RULES``, ``coverage``, ``unexercised`` and the runner's
``measure_coverage`` (what a campaign reports as not exercised and unmet), and the data
model of ``rdq_core.model``. Broken variants are named ``tests.broken.<store>:<bug>``;
the tool runs itself again with the checkout on ``PYTHONPATH`` so that it and the
campaign's worker processes import them.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rdq_compliance.chaos import runner
from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.checker import RULES, FinalState, Violation, check, read_final_state
from rdq_compliance.chaos.coverage import coverage, unexercised
from rdq_compliance.chaos.events import Event, read_history
from rdq_compliance.chaos.nemesis import plan_faults
from rdq_compliance.chaos.scenario import Scenario, load_scenario
from rdq_compliance.provision.backend import FAULTS, StorageSpec
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_core.model import (
    Attempt,
    ErrorInfo,
    Outcome,
    Status,
    Task,
    micros_from_utc,
    utc_from_micros,
)

#: The checkout this tool belongs to: scenario files and ``tests.broken`` are found here.
ROOT = Path(__file__).resolve().parent.parent
#: The shipped scenario files whose plans are recorded (relative to the checkout).
SCENARIO_GLOBS = ("rdq_compliance/chaos/scenarios/*.toml", "chaos/*.toml", "tests/chaos/*.toml")
#: The seeds every scenario file is planned with.
SEEDS = tuple(range(1, 21))
#: The page size the final DLQ listing is read with (the runner's).
DLQ_PAGE = 100
#: Lines of diff shown per item that differs.
DIFF_LINES = 80
#: A ``tests.broken`` variant records the tasks it mishandled in the file these name, when
#: set; the tool leaves them unset, so a run is the same whoever starts it.
VICTIMS_ENVS = (
    "RDQ_FREEZE_VICTIMS",
    "RDQ_PARTITION_VICTIMS",
    "RDQ_POSTGRES_VICTIMS",
    "RDQ_REDIS_VICTIMS",
    "RDQ_SQLITE_VICTIMS",
)


# ---- what is recorded ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanContext:
    """What :func:`plan_faults` is told of the server and the run: the server's faults
    (``Server.faults``), the backend's durability, and why worker partitions cannot be
    made (``None``: the runner built their network)."""

    supported: tuple[str, ...]
    durable: bool
    durability: str
    no_network: str | None


#: The plan contexts every scenario file is planned in:
#:
#: - ``embedded``: a server with no fault of its own (SQLite), not declared durable, no
#:   network for partitions: every server fault and partition is skipped with its note;
#: - ``server``: a server the kit started (PostgreSQL, Redis from local binaries): kill,
#:   restart, freeze and connection cuts; durable; the network built;
#: - ``replicated-volatile``: a replicated server (every fault, failover included) that
#:   does not declare durability (so no kill/restart is planned); the network built.
PLAN_CONTEXTS: dict[str, PlanContext] = {
    "embedded": PlanContext((), False, "not declared", "the store is embedded"),
    "server": PlanContext(
        ("cut_connections", "kill_server", "pause_server", "restart_server"),
        True,
        "every commit is flushed to disk",
        None,
    ),
    "replicated-volatile": PlanContext(
        ("cut_connections", "failover", "kill_server", "pause_server", "restart_server"),
        False,
        "asynchronous replication, no persistence",
        None,
    ),
}


@dataclass(frozen=True)
class CampaignSpec:
    """One recorded campaign: ``scenario`` is a built-in scenario's name or a file of the
    checkout; ``backend`` a registered backend or ``tests.broken.<store>:<bug>``."""

    name: str
    scenario: str
    backend: str
    seed: int
    store: str
    quick: bool
    covers: str


#: The campaigns. ``quick`` ones are the small scenarios (``--quick`` records only them);
#: the others run the standard scenario (2,000 tasks, 40 s of faults) on the SQLite
#: variants the standard chaos suite must catch (``tests/chaos/test_chaos_finds_bugs.py``).
CAMPAIGNS: tuple[CampaignSpec, ...] = (
    CampaignSpec(
        "smoke-sqlite", "tests/chaos/smoke.toml", "sqlite", 7, "sqlite", True,
        "correct backend: worker kills at every point, a pause, redrives "
        "(server faults skipped: embedded)",
    ),
    CampaignSpec(
        "smoke-postgres", "tests/chaos/smoke.toml", "postgres", 7, "postgres", True,
        "correct backend: kills, a pause, a server restart, a server freeze, a connection cut",
    ),
    CampaignSpec(
        "smoke-redis", "tests/chaos/smoke.toml", "redis", 7, "redis", True,
        "correct backend: kills, a pause, a server restart, a server freeze, a connection cut",
    ),
    CampaignSpec(
        "clock-postgres", "clock", "postgres", 14, "postgres", True,
        "correct backend under clock skew (libfaketime) and kills",
    ),
    CampaignSpec(
        "partition-postgres", "partition", "postgres", 20261201, "postgres", True,
        "correct backend under network partitions (root, ip, nft)",
    ),
    CampaignSpec(
        "tiny-dead-letter-deletes", "tests/chaos/tiny.toml",
        "tests.broken.sqlite:dead_letter_deletes", 3, "sqlite", True,
        "a dead-letter that deletes the task: no-loss",
    ),
    CampaignSpec(
        "clock-client-clock-postgres", "clock", "tests.broken.postgres:client_clock", 14,
        "postgres", True, "time from the worker's clock, exposed by clock skew: storage-clock",
    ),
    CampaignSpec(
        "freeze-acks-postgres", "tests/chaos/freeze.toml",
        "tests.broken.postgres:acks_timed_out_reports", 5, "postgres", True,
        "an unanswered report taken as applied, exposed by a server freeze: "
        "fencing / outcome-recorded",
    ),
    CampaignSpec(
        "partition-hb-postgres", "partition",
        "tests.broken.postgres:hb_timeout_taken_as_extended", 20261201, "postgres", True,
        "an unanswered heartbeat taken as applied, exposed by a partition: "
        "lease-respected / one-claim / fencing",
    ),
    CampaignSpec(
        "freeze-acks-redis", "tests/chaos/freeze.toml",
        "tests.broken.redis:acks_timed_out_reports", 5, "redis", True,
        "an unanswered report taken as applied, exposed by a server freeze (Redis)",
    ),
    CampaignSpec(
        "standard-check-then-act-claim", "standard", "tests.broken.sqlite:check_then_act_claim",
        20250101, "sqlite", False, "double-claim: two workers get one task: one-claim",
    ),
    CampaignSpec(
        "standard-reclaim-ignores-lease", "standard",
        "tests.broken.sqlite:reclaim_ignores_lease", 20250101, "sqlite", False,
        "live-lease-stolen: lease-respected",
    ),
    CampaignSpec(
        "standard-outcome-ignores-token", "standard",
        "tests.broken.sqlite:outcome_ignores_token", 20250101, "sqlite", False,
        "unfenced-outcome: a stale outcome accepted: fencing",
    ),
    CampaignSpec(
        "standard-reclaim-drops-task", "standard", "tests.broken.sqlite:reclaim_drops_task",
        20250101, "sqlite", False, "lost-task: a reclaim that loses the task: no-loss",
    ),
)  # fmt: skip


# ---- small helpers ------------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _scenario_path(ref: str) -> str | Path:
    """What :func:`load_scenario` takes for a campaign's ``scenario``."""
    return ROOT / ref if "/" in ref else ref


def _load(ref: str, seed: int, lease: float | None = None) -> Scenario:
    scenario = load_scenario(_scenario_path(ref)).with_seed(seed)
    if lease is not None and lease != scenario.workers.lease:
        scenario = scenario.with_lease(lease)
    return scenario


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


# ---- the fault plans ----------------------------------------------------------------------------


def scenario_files() -> list[str]:
    """Every shipped scenario file, relative to the checkout, sorted."""
    found = {p.relative_to(ROOT).as_posix() for g in SCENARIO_GLOBS for p in ROOT.glob(g)}
    return sorted(found)


def plan_item(scenario_file: str, context: PlanContext, seed: int) -> dict[str, Any]:
    """One seeded plan as text: each fault's ``describe()``, its exact fields, the notes of
    the faults left out; or the error the planning raised."""
    try:
        scenario = load_scenario(ROOT / scenario_file).with_seed(seed)
        plan = plan_faults(
            scenario,
            frozenset(context.supported),
            "the server",
            durable=context.durable,
            durability=context.durability,
            no_network=context.no_network,
        )
    except Exception as exc:
        return {"error": _error(exc)}
    fields = ("at", "kind", "slot", "point", "duration", "width")
    return {
        "faults": [f.describe() for f in plan.faults],
        "exact": [
            " ".join(f"{name}={getattr(f, name, None)!r}" for name in fields) for f in plan.faults
        ],
        "skipped": list(plan.skipped),
    }


def plan_key(scenario_file: str, context: str, seed: int) -> str:
    return f"{scenario_file} [{context}] seed {seed}"


def record_plans() -> dict[str, Any]:
    unknown = {f for c in PLAN_CONTEXTS.values() for f in c.supported} - set(FAULTS)
    if unknown:
        raise SystemExit(f"plan contexts name faults the kit does not know: {sorted(unknown)}")
    items: dict[str, Any] = {}
    for path in scenario_files():
        for name, context in PLAN_CONTEXTS.items():
            for seed in SEEDS:
                items[plan_key(path, name, seed)] = {
                    "scenario": path,
                    "context": name,
                    "seed": seed,
                    "plan": plan_item(path, context, seed),
                }
    return {
        "contexts": {k: dataclasses.asdict(v) for k, v in PLAN_CONTEXTS.items()},
        "items": items,
    }


# ---- the final state as JSON --------------------------------------------------------------------


def _us(value: Any) -> int | None:
    return None if value is None else micros_from_utc(value)


def _at(value: int | None) -> Any:
    return None if value is None else utc_from_micros(value)


def task_to_json(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "queue": task.queue,
        "handler": task.handler,
        "payload": base64.b64encode(task.payload).decode(),
        "headers": dict(task.headers),
        "status": task.status.value,
        "attempt_count": task.attempt_count,
        "redrive_count": task.redrive_count,
        "next_attempt_at": _us(task.next_attempt_at),
        "lease_expires_at": _us(task.lease_expires_at),
        "created_at": _us(task.created_at),
        "attempts": [
            {
                "attempt_no": a.attempt_no,
                "started_at": _us(a.started_at),
                "finished_at": _us(a.finished_at),
                "outcome": a.outcome.value,
                "error": None if a.error is None else dataclasses.asdict(a.error),
            }
            for a in task.attempts
        ],
    }


def task_from_json(data: Mapping[str, Any]) -> Task:
    return Task(
        id=data["id"],
        queue=data["queue"],
        handler=data["handler"],
        payload=base64.b64decode(data["payload"]),
        headers=dict(data["headers"]),
        status=Status(data["status"]),
        attempt_count=data["attempt_count"],
        redrive_count=data["redrive_count"],
        next_attempt_at=_at(data["next_attempt_at"]),
        lease_expires_at=_at(data["lease_expires_at"]),
        created_at=_at(data["created_at"]),
        attempts=tuple(
            Attempt(
                attempt_no=a["attempt_no"],
                started_at=_at(a["started_at"]),
                finished_at=_at(a["finished_at"]),
                outcome=Outcome(a["outcome"]),
                error=None if a["error"] is None else ErrorInfo(**a["error"]),
            )
            for a in data["attempts"]
        ),
    )


def final_to_json(final: FinalState) -> dict[str, Any]:
    return {
        "enqueued": sorted(final.enqueued),
        "drained": final.drained,
        "fixed_lease_us": final.fixed_lease_us,
        "tasks": [task_to_json(t) for t in final.tasks.values()],
        "dlq": [task_to_json(t) for t in final.dlq],
    }


def final_from_json(data: Mapping[str, Any]) -> FinalState:
    return FinalState(
        tasks={t["id"]: task_from_json(t) for t in data["tasks"]},
        dlq=[task_from_json(t) for t in data["dlq"]],
        enqueued=frozenset(data["enqueued"]),
        drained=data["drained"],
        fixed_lease_us=data["fixed_lease_us"],
    )


def same_final(a: FinalState, b: FinalState) -> bool:
    return (
        list(a.tasks.items()) == list(b.tasks.items())
        and a.dlq == b.dlq
        and a.enqueued == b.enqueued
        and a.drained == b.drained
        and a.fixed_lease_us == b.fixed_lease_us
    )


class KeepingSession(Session):
    """A session that reads a campaign's final state back (:func:`read_final_state`, as
    the runner does) just before the runner drops the campaign's namespace: the namespace
    whose history, under ``history``, journals enqueued tasks."""

    def __init__(self, settings: Settings, *, history: Path, queue: str) -> None:
        super().__init__(settings)
        self.history = history
        self.queue = queue
        self.final: FinalState | None = None
        self.why_not: str | None = None

    def drop_namespace(self, spec: StorageSpec) -> None:
        try:
            ids = _enqueued(self.history)
            if ids and self.final is None:
                fixed = self.capabilities().fixed_lease
                lease_us = None if fixed is None else fixed // timedelta(microseconds=1)
                storage = self.open(spec)
                try:
                    self.final = read_final_state(
                        storage,
                        self.queue,
                        ids,
                        drained=False,  # the runner's verdict is set once it has returned
                        page=DLQ_PAGE,
                        fixed_lease_us=lease_us,
                    )
                finally:
                    storage.close()
        except Exception as exc:
            self.why_not = f"the final state could not be read back: {_error(exc)}"
        finally:
            super().drop_namespace(spec)


def _enqueued(history: Path) -> list[str]:
    if not history.is_dir():
        return []
    events = read_history(history.glob("*.jsonl"))
    return [
        str(e["task"])
        for e in events
        if e.get("op") == "enqueue" and e.get("type") == "ok" and "task" in e
    ]


# ---- the verdicts -------------------------------------------------------------------------------


def violation_line(v: Violation) -> str:
    """rule | task | workers | tokens | the message's first line."""
    first = v.message.splitlines()[0] if v.message else ""
    return " | ".join([v.rule, str(v.task), ",".join(v.workers), ",".join(v.tokens), first])


def requirement_json(r: Any) -> dict[str, Any]:
    ops = getattr(r, "ops", None)
    return {
        "rule": r.rule,
        "window": r.window,
        "ops": None if ops is None else list(ops),
        "describe": r.describe(),
    }


def fault_kinds(events: Iterable[Event]) -> list[str]:
    return sorted({str(e.get("kind")) for e in events if e.get("op") == "fault"})


def measure(scenario: Scenario, events: list[Event]) -> tuple[Any, list[str], list[Any]]:
    """``(coverage, rules not exercised, requirements unmet)`` as the runner measures them
    for a campaign of ``scenario`` (``runner.measure_coverage``, given the scenario)."""
    measure_coverage: Callable[[Any, list[Event]], None] | None = getattr(
        runner, "measure_coverage", None
    )
    if measure_coverage is not None:
        holder = SimpleNamespace(scenario=scenario, coverage=None, not_exercised=[], unmet=[])
        measure_coverage(holder, events)
        return holder.coverage, list(holder.not_exercised), list(holder.unmet)
    cov = coverage(events)
    required = scenario.faults.families.requirements(fault_kinds(events))
    idle, unmet = unexercised(cov, RULES, required)
    return cov, idle, unmet


def verdicts(scenario: Scenario, events: list[Event], final: FinalState) -> dict[str, Any]:
    """What the checker and the coverage say of a saved history and final state."""
    out: dict[str, Any] = {}
    try:
        found = check(events, final)
        out["violations"] = sorted(violation_line(v) for v in found)
        out["rules_named"] = sorted({v.rule for v in found})
    except Exception as exc:
        out["checker_error"] = _error(exc)
    try:
        cov, idle, unmet = measure(scenario, events)
        out["coverage"] = cov.table()
        out["not_exercised"] = list(idle)
        out["unmet"] = [requirement_json(r) for r in unmet]
    except Exception as exc:
        out["coverage_error"] = _error(exc)
    return out


def run_summary(result: CampaignResult, events: list[Event]) -> dict[str, Any]:
    """The campaign's own result (what it reported when it ran)."""
    counters = result.counters.as_dict()
    return {
        "rules": sorted({v.rule for v in result.violations}),
        "violations": sorted(violation_line(v) for v in result.violations),
        "checked": result.checked,
        "checker_error": result.checker_error,
        "not_exercised": list(result.not_exercised),
        "unmet": [requirement_json(r) for r in result.unmet],
        "unmet_rules": sorted({r.rule for r in result.unmet}),
        "drained": result.drained,
        "tasks": dict(result.tasks),
        "counters": counters,
        "counter_kinds": counter_kinds(counters),
        "fault_kinds": fault_kinds(events),
        "notes": list(result.counters.notes),
        "duration_s": round(result.duration, 1),
        "server": result.server_origin,
    }


def counter_kinds(counters: Mapping[str, object]) -> list[str]:
    """The fault counters that moved (the loop's own counts left out), for reading."""
    own = {"unexpected_exits", "workers_spawned"}
    return sorted(k for k, v in counters.items() if k not in own and v)


#: What a rerun is compared on: the rules its violations and its unmet requirements name,
#: the fault kinds the harness journaled, a checker error. (Which counters moved depends on
#: timing: a kill point not reached in time, a DLQ empty at a redrive.)
RERUN_KEYS = ("rules", "unmet_rules", "fault_kinds", "checker_error")


def rerun_view(run: Mapping[str, Any]) -> dict[str, Any]:
    return {k: run.get(k) for k in RERUN_KEYS}


# ---- running a campaign -------------------------------------------------------------------------


@dataclass
class Ran:
    result: CampaignResult
    events: list[Event]
    final: FinalState | None
    why_not: str | None
    wall: float


def run_one(spec: Mapping[str, Any], outdir: Path) -> Ran:
    """Run a campaign (``CampaignSpec`` as a mapping) on a server the kit provisions from
    its local resources; its report goes to ``outdir``."""
    scenario = _load(spec["scenario"], spec["seed"], spec.get("lease"))
    settings = Settings(backend=spec["backend"], docker=False)
    t0 = time.monotonic()
    session = KeepingSession(settings, history=outdir / "history", queue=scenario.workload.queue)
    with session:
        result = runner.run_campaign(scenario, session=session, outdir=outdir)
    events = read_history((outdir / "history").glob("*.jsonl"))
    final = session.final
    if final is not None:
        final = dataclasses.replace(final, drained=result.drained)
    return Ran(result, events, final, session.why_not, time.monotonic() - t0)


def record_campaign(spec: CampaignSpec, folder: Path) -> dict[str, Any]:
    """Run ``spec``, save its history, final state and verdicts in ``folder``; a line of
    the manifest."""
    if folder.exists():
        shutil.rmtree(folder)
    with tempfile.TemporaryDirectory(prefix=f"goldens-{spec.name}-") as tmp:
        report = Path(tmp) / "report"
        ran = run_one(dataclasses.asdict(spec), report)
        if ran.final is None:
            raise RuntimeError(ran.why_not or "the runner dropped no namespace with enqueued tasks")
        folder.mkdir(parents=True)
        shutil.copytree(report / "history", folder / "history")
        shutil.copy2(report / "results.json", folder / "results.json")
    _write_json(folder / "final.json", final_to_json(ran.final))
    saved_events = read_history((folder / "history").glob("*.jsonl"))
    saved_final = final_from_json(_read_json(folder / "final.json"))
    scenario = ran.result.scenario
    now = verdicts(scenario, saved_events, saved_final)
    run = run_summary(ran.result, ran.events)
    faithful = {
        "history": saved_events == ran.events,
        "final_state": same_final(saved_final, ran.final),
        "violations": now.get("violations") == run["violations"],
    }
    campaign = {
        **dataclasses.asdict(spec),
        "lease": scenario.workers.lease,
        "wall_s": round(ran.wall, 1),
    }
    _write_json(
        folder / "verdicts.json",
        {"campaign": campaign, "verdicts": now, "run": run, "saved_as_run": faithful},
    )
    return {
        "name": spec.name,
        "backend": spec.backend,
        "scenario": spec.scenario,
        "seed": spec.seed,
        "rules": run["rules"],
        "unmet_rules": run["unmet_rules"],
        "fault_kinds": run["fault_kinds"],
        "violations": len(run["violations"]),
        "duration_s": run["duration_s"],
        "wall_s": campaign["wall_s"],
        "saved_as_run": faithful,
    }


# ---- comparing ----------------------------------------------------------------------------------


def flatten(data: Any, path: str = "") -> Iterator[str]:
    """``path = value`` lines of JSON data (a mapping's keys sorted, a list's items under
    ``path[]`` in order), for a diff that names what changed."""
    if isinstance(data, dict):
        if not data:
            yield f"{path} = {{}}"
        for key in sorted(data):
            yield from flatten(data[key], f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        if not data:
            yield f"{path} = []"
        for item in data:
            if isinstance(item, (dict, list)):
                yield from flatten(item, f"{path}[]")
            else:
                yield f"{path}[] = {json.dumps(item)}"
    else:
        yield f"{path} = {json.dumps(data)}"


def diff(golden: Any, now: Any, label: str) -> list[str]:
    """A unified diff of ``golden`` and ``now`` (empty when they are the same)."""
    if golden == now:
        return []
    head: list[str] = []
    if isinstance(golden, dict) and isinstance(now, dict):
        keys = sorted(k for k in {*golden, *now} if golden.get(k) != now.get(k))
        head = [f"differs in: {', '.join(keys)}"]
    lines = list(
        difflib.unified_diff(
            list(flatten(golden)),
            list(flatten(now)),
            f"{label} (golden)",
            f"{label} (this tree)",
            n=1,
            lineterm="",
        )
    )
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"... {len(lines) - DIFF_LINES} more diff lines"]
    return head + lines


@dataclass
class Tally:
    same: int = 0
    differ: int = 0

    def add(self, label: str, lines: list[str], kind: str = "") -> None:
        if lines:
            self.differ += 1
            print(f"DIFFER{kind} {label}")
            for line in lines:
                print(f"    {line}")
        else:
            self.same += 1


def compare_plans(out: Path, tally: Tally) -> None:
    golden = _read_json(out / "plans.json")
    contexts = {k: PlanContext(**{**v, "supported": tuple(v["supported"])})
                for k, v in golden["contexts"].items()}  # fmt: skip
    for key, item in golden["items"].items():
        now = plan_item(item["scenario"], contexts[item["context"]], item["seed"])
        tally.add(f"plan {key}", diff(item["plan"], now, f"plan {key}"))
    recorded = {item["scenario"] for item in golden["items"].values()}
    extra = [p for p in scenario_files() if p not in recorded]
    if extra:
        print(f"note: scenario files not in the goldens (not compared): {', '.join(extra)}")


def compare_campaign(folder: Path, tally: Tally) -> None:
    """Recompute the verdicts of a saved history and final state; compare."""
    saved = _read_json(folder / "verdicts.json")
    spec = saved["campaign"]
    label = f"campaign {spec['name']}"
    try:
        scenario = _load(spec["scenario"], spec["seed"], spec.get("lease"))
        events = read_history((folder / "history").glob("*.jsonl"))
        final = final_from_json(_read_json(folder / "final.json"))
        now = verdicts(scenario, events, final)
    except Exception as exc:
        now = {"error": _error(exc)}
    tally.add(f"{label}: verdicts of the saved history", diff(saved["verdicts"], now, label))


def compare_rerun(folder: Path, tally: Tally) -> None:
    """Run the saved campaign again (same scenario, backend, seed); compare what does not
    depend on timing (:data:`RERUN_KEYS`)."""
    saved = _read_json(folder / "verdicts.json")
    spec = saved["campaign"]
    label = f"campaign {spec['name']}"
    with tempfile.TemporaryDirectory(prefix=f"goldens-rerun-{spec['name']}-") as tmp:
        try:
            ran = run_one(spec, Path(tmp) / "report")
            again = rerun_view(run_summary(ran.result, ran.events))
            took = f" ({ran.result.duration:.0f} s)"
        except Exception as exc:
            again, took = {"error": _error(exc)}, ""
    print(
        f"rerun {spec['name']}{took}: rules {again.get('rules')}, "
        f"faults {again.get('fault_kinds')}",
        flush=True,
    )
    tally.add(
        f"{label}: rerun with seed {spec['seed']}",
        diff(rerun_view(saved["run"]), again, f"{label} rerun"),
        kind=" (rerun)",
    )


def campaign_folders(out: Path, only: set[str] | None) -> list[Path]:
    folders = sorted(p.parent for p in (out / "campaigns").glob("*/verdicts.json"))
    return [f for f in folders if only is None or f.name in only]


# ---- the commands -------------------------------------------------------------------------------


def cmd_record(args: argparse.Namespace) -> int:
    out: Path = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    stores = set(args.backends.split(","))
    only = set(args.only.split(",")) if args.only else None
    chosen = [
        c
        for c in CAMPAIGNS
        if c.store in stores and (c.quick or not args.quick) and (only is None or c.name in only)
    ]
    if not args.no_plans:
        t0 = time.monotonic()
        plans = record_plans()
        _write_json(out / "plans.json", plans)
        print(f"plans: {len(plans['items'])} items ({time.monotonic() - t0:.1f} s)", flush=True)
    manifest_path = out / "manifest.json"
    manifest: dict[str, Any] = (
        _read_json(manifest_path) if manifest_path.is_file() else {"campaigns": {}, "failed": {}}
    )
    manifest.update(commit=_commit(), tree=str(ROOT), seeds=list(SEEDS))
    for spec in chosen:
        print(f"campaign {spec.name}: {spec.scenario} on {spec.backend}, seed {spec.seed} ...",
              flush=True)  # fmt: skip
        t0 = time.monotonic()
        try:
            line = record_campaign(spec, out / "campaigns" / spec.name)
        except Exception as exc:
            manifest["campaigns"].pop(spec.name, None)
            manifest["failed"][spec.name] = _error(exc)
            print(f"  NOT RECORDED: {_error(exc)}", flush=True)
            traceback.print_exc()
            continue
        manifest["failed"].pop(spec.name, None)
        manifest["campaigns"][spec.name] = line
        faithful = line["saved_as_run"]
        flags = "" if all(faithful.values()) else f" SAVED != RUN {faithful}"
        print(
            f"  rules {line['rules']} ({line['violations']} violations), unmet "
            f"{line['unmet_rules']}, faults {line['fault_kinds']}; campaign "
            f"{line['duration_s']} s, {time.monotonic() - t0:.0f} s in all{flags}",
            flush=True,
        )
        _write_json(manifest_path, manifest)
    _write_json(manifest_path, manifest)
    return 1 if any(n in manifest["failed"] for n in (c.name for c in chosen)) else 0


def cmd_compare(args: argparse.Namespace) -> int:
    out: Path = args.out_dir.resolve()
    only = set(args.only.split(",")) if args.only else None
    tally, reruns = Tally(), Tally()
    if only is None:
        compare_plans(out, tally)
    folders = campaign_folders(out, only)
    for folder in folders:
        compare_campaign(folder, tally)
    if args.rerun:
        for folder in folders:
            compare_rerun(folder, reruns)
    print(f"{tally.same} same, {tally.differ} differ")
    if args.rerun:
        print(f"reruns (rules, fault kinds): {reruns.same} same, {reruns.differ} differ")
    return 1 if tally.differ or reruns.differ else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the goldens of this tree into OUT_DIR")
    rec.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    rec.add_argument(
        "--backends",
        default="sqlite,postgres,redis",
        help="the stores whose campaigns run (comma-separated; default: %(default)s)",
    )
    rec.add_argument("--quick", action="store_true", help="only the small-scenario campaigns")
    rec.add_argument("--only", help="only these campaigns (comma-separated names)")
    rec.add_argument("--no-plans", action="store_true", help="keep plans.json as it is")
    rec.set_defaults(run=cmd_record)
    cmp_ = sub.add_parser("compare", help="compare this tree's verdicts with OUT_DIR's")
    cmp_.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    cmp_.add_argument(
        "--rerun", action="store_true", help="also run the campaigns again (same seeds)"
    )
    cmp_.add_argument("--only", help="only these campaigns (comma-separated names; no plans)")
    cmp_.set_defaults(run=cmd_compare)
    return p


def _with_checkout_on_pythonpath(argv: list[str]) -> None:
    """Run this script again with the checkout first on ``PYTHONPATH`` (its own imports of
    ``tests.broken`` and the worker processes' need it), and the victims files unset."""
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if current[:1] == [str(ROOT)]:
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *(p for p in current if p != str(ROOT))])
    for name in VICTIMS_ENVS:
        env.pop(name, None)
    os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    _with_checkout_on_pythonpath(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
