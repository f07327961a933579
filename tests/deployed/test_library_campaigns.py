"""One deployed campaign for each library the kit judges (pgqueuer, procrastinate, rq,
dramatiq), through ``rdq-chaos deployed run`` at the ``fast`` profile: the library's own
workers, a SIGKILL of one whole worker and a SIGSTOP of the other while each runs a job,
the library's own recovery, then the checker.

Each campaign is small: two workers, 12 to 15 jobs (1 to 3 s of work each, the
behaviours the library has, three of them delayed), and two faults planned in the first
two seconds of the window, the stop first (the seed is chosen so). Both are ``mid_job``:
each waits from its planned time until its worker runs a job, and strikes it with the
job's handler running (the nemesis stops the tree and reads its journal again before it
goes on), however late a busy machine starts the workers or their next job. The stop
comes first because a fault can only wait for a job its worker will get: while one
worker is stopped the other is the only one running, and has a job for the kill to
catch; in the other order the worker left to stop could run out of jobs (dramatiq's and
pgqueuer's workers fetch several at once, and the killed worker's come back to its own
restart), as it once did under load with dramatiq. The window is long (60 s; rq's is
stretched to 70 s to fit its stop) so that a fault can wait for a worker slow to start
or a library slow to hand jobs back; it closes as soon as both faults are over, with
the stop. Then the drain waits until every accepted job is settled, within a bound of
the profile's ``recovery_after`` plus the longest job plus 15 s, so the killed worker's
job comes back before the campaign ends. The stop lasts 1.5 x ``recovery_after`` (past
the library's stall threshold, as the built-in scenarios have it), except for rq, whose
``recovery_after`` is 65 s in ``fast``: there it lasts 0.7 x (45.5 s, below rq's 61 s
heartbeat TTL, within the 65 s the kill's recovery takes anyway), and rq has no
``sleep`` jobs (each would sleep 97.5 s). pgqueuer's jobs ask no retry count (its
``fail`` job is retried by its entrypoint's executor, 5 times), and it has a ``hold``
job.

What each test holds, from the campaign's ``results.json``: the exit status (0: no
finding); every planned fault done (the plan's own list, no fault error), each on a
worker running a job (the jobs the nemesis says it caught, each an execution the probe
saw running at the fault's start); the killed worker's job run again (rq: failed as
abandoned, what rq says of a killed worker's job); every accepted job in the final state
its behaviour makes, as the probe saw it end; and every verdict a gap under a fault in
play, citing a promise that tolerates its rule under that fault; for rq, whose stop is
shorter than its heartbeat TTL, the stopped worker's job run nowhere else during the
stop. Each test prints its campaign's wall and CPU seconds.

dramatiq's stopped worker holds delayed messages in memory (a message's delay, a retry's
backoff); once continued it promotes its copies, though another worker promoted and ran
them meanwhile (Bogdanp/dramatiq#431): a message runs twice, on any worker, and a
``fail`` one may be dead-lettered twice, run again after its last retry on a worker that
was never stopped. The system declares it (``requeues_held_delayed``), so the checker
counts the stop of the worker that held the message: a gap within
``dramatiq-idempotent-actors``.

The servers are those of the libraries' other deployed tests: PostgreSQL and Redis by
DSN (``RDQ_POSTGRES_DSN``, ``RDQ_REDIS_DSN``), rq on a private ``redis-server`` the kit
starts.
"""

from __future__ import annotations

import json
import re
import resource
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rdq_compliance.chaos.cli import main
from rdq_compliance.deployed.system import load_system
from tests._ci import missing


@dataclass(frozen=True)
class Library:
    """One library's campaign: its system, the seed, what its scenario changes from
    :data:`SCENARIO`'s, and how its final words say a killed worker's job was failed as
    abandoned (``None``: the library runs it again)."""

    system: str
    seed: int
    sleep: int = 2
    fail: int = 1
    hold: int = 0
    pause_factor: float = 1.5
    abandoned: str | None = None

    @property
    def stop_outlasts_recovery(self) -> bool:
        return self.pause_factor > 1.0


#: The scenario, by library; a count not given is 0 (no part kill, no server fault).
SCENARIO = """\
name = "ci-{system}"
workers = 2
window = 60
drain_margin = 15

[jobs]
succeed = 10
succeed_seconds = [1.0, 3.0]
sleep = {sleep}
fail = {fail}
retry = 1
retries = 2
hold = {hold}
delayed = 3
max_delay = 3

[faults]
kill = 1
restart_after = 1
pause = 1
pause_factor = {pause_factor}
mid_job = true
"""

#: A seed whose stop and kill are planned on different workers, the stop first, at +0.95
#: to +1.46 s and +1.93 to +2.19 s of every library's window.
SEED = 2065
LIBRARIES = (
    Library("pgqueuer", SEED, hold=1),
    Library("procrastinate", SEED),
    Library("rq", SEED, sleep=0, pause_factor=0.7, abandoned=r"AbandonedJobError"),
    Library("dramatiq", SEED),
)

#: The final state each behaviour makes, and the probe's outcomes that make it.
MAKES = {"succeed": "finished", "sleep": "finished", "fail": "failed-for-good",
         "retry": "failed-for-good", "hold": "held"}  # fmt: skip
OUTCOMES = {"finished": {"succeeded"}, "failed-for-good": {"failed", "retry-asked"},
            "held": {"held"}}  # fmt: skip
ALL_SETTLED = "every accepted job was finished, failed for good or held"


def _cpu_seconds() -> float:
    """This process's CPU seconds and those of its reaped descendants (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _server_args(system: str) -> list[str]:
    """``--dsn`` of the shared server a library's other deployed tests use; none for rq,
    whose campaign runs on a private ``redis-server`` (or ``missing``)."""
    if system in ("pgqueuer", "procrastinate"):
        from tests.backends.postgres._pg_support import require_server as postgres

        return ["--dsn", postgres()]
    if system == "dramatiq":
        from tests.backends.redis._redis_support import require_server as redis

        return ["--dsn", redis()]
    from rdq_redis.local import find_redis

    from rdq_compliance.provision.backend import ProvisionUnavailable

    try:
        find_redis(None)
    except ProvisionUnavailable as exc:
        missing(f"no local redis-server for rq's private server: {exc}")
    return []


def _kind(cause: str) -> str:
    """The fault kind a verdict's cause names (``<kind> of <workers> from ...``), or
    ``over-limit``."""
    return "over-limit" if cause.startswith("an execution ran past") else cause.split(" ")[0]


def _in_flight(data: dict[str, Any], worker: str, t: float) -> list[dict[str, Any]]:
    """The executions ``worker`` was running at ``t``."""
    return [
        x for x in data["executions"]
        if x["worker"] == worker and x["started"] <= t and (x["ended"] is None or x["ended"] >= t)
    ]  # fmt: skip


def _summary(lib: Library, rc: int, wall: float, cpu: float, data: dict[str, Any]) -> str:
    faults = "; ".join(
        f"{d['kind']} {','.join(d['targets'])} +{d['start']:.2f}-{d['end']:.2f} s"
        for d in data["faults_done"]
    )
    verdicts = Counter(
        f"{v['kind']} {v['rule']} ({v['promise']['id'] if v['promise'] else 'no promise'}; "
        f"{'+'.join(sorted({_kind(c) for c in v['causes']})) or 'no fault'})"
        for v in data["verdicts"]
    )
    return (
        f"\n{lib.system} campaign (seed {lib.seed}): exit {rc}; wall {wall:.1f} s, CPU "
        f"{cpu:.1f} s (window {data['timings'].get('window')} s, drain "
        f"{data['timings'].get('drain')} s); {len(data['accepted'])} jobs, "
        f"{len(data['executions'])} executions; {faults}; verdicts: "
        + (", ".join(f"{n} x {v}" for v, n in sorted(verdicts.items())) or "none")
    )


@pytest.mark.parametrize("lib", LIBRARIES, ids=lambda lib: lib.system)
def test_a_fast_campaign_ends_as_the_library_promises(
    lib: Library, tmp_path: Path, no_docker: None
) -> None:
    dsn = _server_args(lib.system)
    scenario = tmp_path / f"ci-{lib.system}.toml"
    scenario.write_text(SCENARIO.format(**vars(lib)))
    out = tmp_path / "report"
    argv = [
        "deployed", "run", lib.system, "--profile", "fast", "--scenario", str(scenario),
        "--seed", str(lib.seed), "--out", str(out), *dsn,
    ]  # fmt: skip
    started, cpu = time.monotonic(), _cpu_seconds()
    rc = main(argv)
    wall, cpu = time.monotonic() - started, _cpu_seconds() - cpu
    data = json.loads((out / "results.json").read_text())
    print(_summary(lib, rc, wall, cpu, data))
    system = load_system(lib.system)
    promises = {p.id: p for p in system.promises}

    # no finding, nothing the harness could not judge
    findings = [v["message"] for v in data["verdicts"] if v["kind"] == "finding"]
    assert rc == 0 and not findings, "\n".join(findings) or f"exit {rc}: {data['error']}"
    assert data["error"] is None and data["torn"] == []
    assert data["profile"]["name"] == "fast"

    # every planned fault done: a SIGKILL and a SIGSTOP of whole workers, each while the
    # worker ran a job
    plan = data["plan"]
    assert [f["kind"] for f in sorted(plan["faults"], key=lambda f: f["kind"])] == [
        "kill", "pause"
    ]  # fmt: skip
    assert plan["not_run"] == [] and data["fault_errors"] == []
    done = sorted(data["faults_done"], key=lambda d: d["planned"]["at"])
    assert [d["planned"] for d in done] == plan["faults"]
    for d in done:
        worker = d["planned"]["worker"]
        assert d["targets"] == [worker] and d["part"] is None, d
        # the nemesis read the jobs it caught with the worker stopped: a kill's span starts
        # once its processes are gone, a pause's before its SIGSTOP (which took ``took``)
        struck = d["start"] + (d["took"] if d["kind"] == "pause" else 0.0)
        running = {x["job"] for x in _in_flight(data, worker, struck)}
        assert d["caught"] and set(d["caught"]) <= running, (
            f"the {d['kind']} of {worker} at +{d['start']:.3f}-{struck:.3f} s caught "
            f"{d['caught']}; the probe saw it running {sorted(running)}"
        )
    kill = next(d for d in done if d["kind"] == "kill")
    pause = next(d for d in done if d["kind"] == "pause")
    (restart,) = [e for e in data["workers"]["exits"] if e["cause"] == "killed by the nemesis"]
    assert restart["worker"] == kill["targets"][0] and restart["restarted"] == kill["end"]

    # every accepted job settled, in the state its behaviour makes, as the probe saw it end
    assert data["drain"]["ended_by"] == ALL_SETTLED, data["drain"]
    assert data["drain"]["bound"] >= data["profile"]["recovery_after"]
    assert data["refused"] == {} and len(data["accepted"]) == len(plan["jobs"])
    behaviour = {j["key"]: j["behaviour"] for j in plan["jobs"]}
    runs: dict[str, list[dict[str, Any]]] = {}
    for x in data["executions"]:
        runs.setdefault(x["job"], []).append(x)
    killed = {x["job"] for x in _in_flight(data, kill["targets"][0], kill["start"])}
    abandoned = set()
    for a in data["accepted"]:
        job, key = a["job"], a["key"]
        final = data["final"][job]
        outcomes = sorted({str(x["outcome"]) for x in runs.get(job, [])})
        if job in killed and lib.abandoned and re.search(lib.abandoned, final["words"]):
            assert final["state"] == "failed-for-good", (job, key, final)
            abandoned.add(job)
            continue
        want = MAKES[behaviour[key]]
        assert final["state"] == want and OUTCOMES[want] & set(outcomes), (
            f"job {job} ({key}): {lib.system} says {final['state']} ({final['words']!r}), "
            f"not {want}; the probe saw {outcomes}"
        )

    # the killed worker's jobs came back: run again after the kill, or (rq) failed as
    # abandoned
    for job in killed - abandoned:
        again = [x for x in runs[job] if x["started"] > kill["start"]]
        assert again, f"job {job}, killed on {kill['targets'][0]}, never ran again"

    # every verdict a gap, under a fault in play, citing a promise that tolerates its rule
    # under that fault
    for v in data["verdicts"]:
        promise = promises[v["promise"]["id"]]
        kinds = {_kind(c) for c in v["causes"]}
        assert v["promise"]["link"] == promise.link, v["message"]
        assert kinds & set(promise.tolerates.get(v["rule"], ())), v["message"]

    # a stop shorter than the stall threshold (rq): the stopped worker kept its jobs
    if not lib.stop_outlasts_recovery:
        stopped = pause["targets"][0]
        for x in _in_flight(data, stopped, pause["start"]):
            others = [
                y["worker"] for y in runs[x["job"]]
                if y is not x and pause["start"] < y["started"] < pause["end"]
            ]  # fmt: skip
            assert not others, f"job {x['job']}, stopped on {stopped}, also ran on {others}"
