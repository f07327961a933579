"""A campaign whose probe journalled no execution at all judged nothing of the library
(:func:`rdq_compliance.deployed.campaign.nothing_ran`), on crafted results: the jobs the
library settled unseen are counted by state and named, with the workers' logs to read;
one execution journalled, or no job accepted, and there is nothing to say. The real
broken system (every job failed before its handler ran) is ``test_broken_systems.py``'s.
Planned jobs the client did not take are never judged either: the report says which."""

from __future__ import annotations

from pathlib import Path

from rdq_compliance.deployed.campaign import nothing_ran
from rdq_compliance.deployed.plan import make_plan
from rdq_compliance.deployed.probe import Execution
from rdq_compliance.deployed.report import as_dict, markdown
from rdq_compliance.deployed.result import CampaignResult
from rdq_compliance.deployed.scenario import BUILTIN
from rdq_compliance.deployed.system import JobState
from rdq_compliance.deployed.verdicts import Accepted
from tests.deployed.toy_system import ToySystem

LOGS = ["/r/logs/w1.log", "/r/logs/w2.log"]


def _result(final: dict[str, JobState]) -> CampaignResult:
    system = ToySystem()
    profile = system.profiles["fast"]
    plan = make_plan(BUILTIN["smoke"], 1, system=system, profile=profile,
                     server_faults=frozenset())  # fmt: skip
    result = CampaignResult(system.name, "memory", "test", None, "memory://", "ns", profile,
                            plan, Path("/r"))  # fmt: skip
    for n, job in enumerate(final):
        result.accepted.append(Accepted(job, float(n)))
        result.keys[job] = f"job-{n:02d}"
    result.final = dict(final)
    return result


def test_every_job_settled_unseen_is_counted_named_and_explained() -> None:
    result = _result({
        "a1": JobState("failed-for-good", "exception"),
        "a2": JobState("failed-for-good", "exception"),
        "a3": JobState("finished", "successful"),
        "a4": JobState("waiting", "queued"),
    })  # fmt: skip
    assert nothing_ran(result, LOGS) == (
        "the library settled 3 of the 4 accepted jobs (failed-for-good 2, finished 1) without "
        "the probe ever seeing them run, and the probe journalled no execution at all: the "
        "workers never ran the probe's handler: see their logs (/r/logs/w1.log, "
        "/r/logs/w2.log) and check that the handler the system names is importable where "
        "they run; jobs settled unseen: job-00 (a1), job-01 (a2), job-02 (a3)"
    )


def test_no_execution_of_jobs_none_of_which_settled_is_said_too() -> None:
    result = _result({"a1": JobState("waiting", "queued")})
    assert nothing_ran(result, []) == (
        "the probe journalled no execution of any of the 1 accepted jobs: the workers never "
        "ran the probe's handler: see their logs (the workers' logs) and check that the "
        "handler the system names is importable where they run"
    )


def test_one_execution_journalled_or_no_job_accepted_is_nothing_to_say() -> None:
    """One job seen run, the other settled unseen: a verdict's business (never-ran), not
    the campaign's."""
    result = _result({
        "a1": JobState("finished", "successful"),
        "a2": JobState("failed-for-good", "exception"),
    })  # fmt: skip
    result.executions = [Execution("e1", "a1", "w1", 10, 1.0, 0, 2.0, "succeeded")]
    assert nothing_ran(result, LOGS) is None
    assert nothing_ran(_result({}), LOGS) is None


def test_jobs_the_client_did_not_take_are_said_by_reason_behaviour_and_key() -> None:
    """Planned jobs refused at enqueue are never judged: the report says how many, of
    which behaviours, why and which, in its header, its counts and ``results.json``."""
    result = _result({"a1": JobState("finished", "successful")})
    fails = [j.key for j in result.plan.jobs if j.behaviour == "fail"]
    why = "InvalidArgument: 'fail' with retries=2 has no meaning here"
    result.refused = {**dict.fromkeys(fails, why), "job-x": "not acknowledged by the client"}
    assert result.not_enqueued() == [
        f"{len(fails)} job(s) not enqueued (fail {len(fails)}): {why} [{', '.join(fails)}]",
        "1 job(s) not enqueued (? 1): not acknowledged by the client [job-x]",
    ]
    assert result.counts()["not enqueued by behaviour"] == {"?": 1, "fail": len(fails)}
    text = markdown(result)
    planned = len(result.plan.jobs)
    refused = len(fails) + 1
    line = f"- jobs: 1 of {planned} planned accepted; {refused} not enqueued, never judged"
    assert f"{line} (see Counts)\n" in text
    assert f"\n- {result.not_enqueued()[0]}\n" in text
    assert as_dict(result)["refused"] == result.refused
