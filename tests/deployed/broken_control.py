"""The control broken on purpose, for the deployed harness's own tests.

- :func:`reclaim_ignores_lease`: rdq's worker loop on
  ``tests.broken.sqlite:reclaim_ignores_lease``, whose claim takes an IN_FLIGHT task
  claimed more than 0.5 s ago whatever its lease (bug class ``live-lease-stolen``). Its
  workers import the backend by that name, so they need the checkout root on
  ``PYTHONPATH`` (:func:`tests._paths.pythonpath`).
- :func:`reclaim_ignores_lease_known`: the same, its double runs declared known upstream.
- :func:`reclaim_ignores_lease_postgres`: the same bug on PostgreSQL
  (``tests.deployed.broken_postgres:reclaim_ignores_lease``), for workers on other hosts.
- :func:`never_starts`: workers that exit before they run anything.
- :func:`handler_missing`: workers that run, but know no handler by the jobs' name: rdq
  dead-letters every job before any handler runs, and the probe journals nothing.

One for each other deployed rule, on a backend of :mod:`tests.deployed.broken_sqlite`
(workers need the checkout root on ``PYTHONPATH`` too):

- :func:`dead_letter_deletes`: ``tests.broken.sqlite:dead_letter_deletes``, a job failed
  for good is deleted (``lost``);
- :func:`hands_out_succeeded_tasks`: a SUCCEEDED task is handed out again (``ran-after-done``);
- :func:`reruns_succeeded_tasks`: a SUCCEEDED task is claimed and run again, each rerun
  recorded, until its attempts are used up (``ran-after-done``);
- :func:`expired_leases_never_reclaimed`: a killed worker's task is never reclaimed
  (``stuck``);
- :func:`reclaim_by_age_keeps_token`: a live lease is taken and its holder's outcome still
  counts (``superseded-outcome``), run by :class:`CooperativeSystem`, whose handler stops
  when its lease is lost; :func:`cooperative` is that system on the unbroken backend."""

from __future__ import annotations

import sys

from rdq_compliance.deployed.control import CoreSystem
from rdq_compliance.deployed.system import WorkerLaunch
from rdq_compliance.known_upstream import KnownUpstream

#: A scenario with no fault: two workers, three jobs that sleep past the 0.5 s the broken
#: claim waits. A worker takes a waiting job before a running one, so once both workers
#: are up and no job waits, the first one idle takes a job the other is running: a second
#: run of one job, the backend's doing alone (a worker slow to start, on a busy machine,
#: still finds one running, the three last 22.5 s on one worker).
NO_FAULTS = """\
name = "no-faults"
workers = 2
window = 1
drain_margin = 10

[jobs]
sleep = 3
"""


def reclaim_ignores_lease() -> CoreSystem:
    return CoreSystem("tests.broken.sqlite:reclaim_ignores_lease")


def reclaim_ignores_lease_postgres() -> CoreSystem:
    return CoreSystem("tests.deployed.broken_postgres:reclaim_ignores_lease")


class NeverStarts(CoreSystem):
    """The control whose workers exit with status 1 before they run anything, a little
    after the harness's first look (a worker that cannot start, slow to say so)."""

    def worker(self, name: str, profile: str, probe_path: str) -> WorkerLaunch:
        env = super().worker(name, profile, probe_path).env
        return WorkerLaunch((sys.executable, "-c", EXITS), env)


EXITS = "import time; time.sleep(1.5); raise SystemExit(1)"

#: One worker, one job, a short drain.
ONE_JOB = """\
name = "one-job"
workers = 1
window = 1
drain_margin = 2

[jobs]
succeed = 1
"""


def never_starts() -> CoreSystem:
    return NeverStarts("sqlite")


#: The module :class:`HandlerMissing`'s workers run.
HANDLERLESS_WORKER = "tests.deployed.handlerless_worker"


class HandlerMissing(CoreSystem):
    """The control whose workers run :mod:`tests.deployed.handlerless_worker`: every job
    is failed for good by rdq's own worker loop, none of them run."""

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        launch = super().worker(name, profile, probe_path, dsn)
        argv = tuple(
            HANDLERLESS_WORKER if a == "rdq_compliance.deployed.core_worker" else a
            for a in launch.argv
        )
        return WorkerLaunch(argv, launch.env)


def handler_missing() -> CoreSystem:
    return HandlerMissing("sqlite")


def dead_letter_deletes() -> CoreSystem:
    return CoreSystem("tests.broken.sqlite:dead_letter_deletes")


def hands_out_succeeded_tasks() -> CoreSystem:
    return CoreSystem("tests.deployed.broken_sqlite:hands_out_succeeded_tasks")


def reruns_succeeded_tasks() -> CoreSystem:
    return CoreSystem("tests.deployed.broken_sqlite:reruns_succeeded_tasks")


def expired_leases_never_reclaimed() -> CoreSystem:
    return CoreSystem("tests.deployed.broken_sqlite:expired_leases_never_reclaimed")


#: The module :class:`CooperativeSystem`'s workers run.
COOPERATIVE_WORKER = "tests.deployed.cooperative_worker"


class CooperativeSystem(CoreSystem):
    """The control whose workers run :mod:`tests.deployed.cooperative_worker`: a ``succeed``
    or ``sleep`` job stops (journaled ``failed``) once rdq finds its lease lost."""

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self.name += " (handler stops when its lease is lost)"

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        launch = super().worker(name, profile, probe_path, dsn)
        argv = tuple(
            COOPERATIVE_WORKER if a == "rdq_compliance.deployed.core_worker" else a
            for a in launch.argv
        )
        return WorkerLaunch(argv, launch.env)


def reclaim_by_age_keeps_token() -> CoreSystem:
    return CooperativeSystem("tests.deployed.broken_sqlite:reclaim_by_age_keeps_token")


def cooperative() -> CoreSystem:
    return CooperativeSystem("sqlite")


#: An issue that tracks the broken claim's double runs, as a library's tracker would: a
#: run that starts while another runs, and one that starts after another's handler
#: returned (its success refused: the claim had taken the job from it meanwhile).
KNOWN_DOUBLE_RUN = KnownUpstream(
    "rdq-tests/broken-sqlite", 1, "a claim takes a job whose lease is live",
    rules=("handed-out-while-held", "ran-after-done"),
    pattern=r"started while .* ran|, then ran again: ",
)  # fmt: skip


def reclaim_ignores_lease_known() -> CoreSystem:
    """:func:`reclaim_ignores_lease` with its double runs known upstream
    (:data:`KNOWN_DOUBLE_RUN`)."""
    system = reclaim_ignores_lease()
    system.known_upstream = (KNOWN_DOUBLE_RUN,)  # type: ignore[attr-defined]
    return system


class RunsElsewhere(CoreSystem):
    """The control whose workers run in another folder (``/``), as a library's own CLI may
    (procrastinate's does): the probe's path must not depend on the harness's folder."""

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        launch = super().worker(name, profile, probe_path, dsn)
        return WorkerLaunch(launch.argv, launch.env, cwd="/")


def runs_elsewhere() -> CoreSystem:
    return RunsElsewhere("sqlite")
