"""Rules lost, never-ran, ran-after-done, handed-out-while-held, superseded-outcome and stuck: each
fails on a crafted history with a message naming the rule, the job and the workers, is a
finding or a gap by the toy system's promises, and stays silent on the innocent history
beside it; a history made from a correct serial schedule yields no verdict."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdq_compliance.deployed.faults import Fault, true_time
from rdq_compliance.deployed.probe import Execution
from rdq_compliance.deployed.system import JobState, Promise
from rdq_compliance.deployed.verdicts import (
    Accepted,
    Drain,
    Verdict,
    judge,
    mark_known,
    settled_unseen,
)
from rdq_compliance.known_upstream import KnownUpstream
from tests.deployed.toy_system import AT_LEAST_ONCE, DONE_IS_FINAL

PROMISES = (AT_LEAST_ONCE, DONE_IS_FINAL)
DRAIN = Drain(ended=100.0, live=frozenset({"w1", "w2", "w3"}))

FINISHED = JobState("finished", "done")
FAILED = JobState("failed-for-good", "dead")
HELD = JobState("held", "parked")
WAITING = JobState("waiting", "queued")
RUNNING = JobState("running", "started")
GONE = JobState("unknown", "no such job")


def ex(exec_: str, job: str, worker: str, start: float, end: float | None = None,
       outcome: str | None = None, pid: int = 100) -> Execution:  # fmt: skip
    return Execution(exec_, job, worker, pid, start, None, end, outcome)  # type: ignore[arg-type]


def run(executions, final, *, faults=(), accepted=None, drain=DRAIN, promises=PROMISES, **kw):
    if accepted is None:
        accepted = [Accepted(j, 0.0) for j in dict.fromkeys(e.job for e in executions)]
    return judge(executions, list(faults), accepted, final, promises, drain, **kw)


def only(verdicts: list[Verdict], rule: str) -> list[Verdict]:
    return [v for v in verdicts if v.rule == rule]


def assert_names(v: Verdict, rule: str, job: str, workers: list[str]) -> None:
    assert v.message.startswith(f"[{rule}] "), v.message
    assert f"job {job!r}" in v.message, v.message
    assert f"workers {', '.join(workers) or 'none'}:" in v.message, v.message
    assert v.job == job and list(v.workers) == workers


# ---- lost ---------------------------------------------------------------------------------


def test_lost_an_accepted_job_the_library_forgot() -> None:
    got = run([], {"j1": GONE}, accepted=[Accepted("j1", 1.0)])
    (v,) = got
    assert_names(v, "lost", "j1", [])
    assert v.kind == "finding" and v.promise == AT_LEAST_ONCE
    assert "unknown to the library" in v.message and "'no such job'" in v.message
    assert "finding: breaks promise 'toy-at-least-once' (https://toy.invalid/" in v.message


def test_lost_a_job_still_waiting_after_a_failed_execution() -> None:
    got = run([ex("e1", "j1", "w1", 1, 2, "failed")], {"j1": WAITING})
    (v,) = got
    assert_names(v, "lost", "j1", ["w1"])
    assert v.executions == ("e1",) and "still waiting" in v.message


@pytest.mark.parametrize("state", [FINISHED, FAILED, HELD, RUNNING])
def test_not_lost_when_the_library_accounts_for_the_job(state: JobState) -> None:
    assert only(run([], {"j1": state}, accepted=[Accepted("j1", 0)]), "lost") == []
    assert only(run([ex("e1", "j1", "w1", 1, 2, "failed")], {"j1": state}), "lost") == []


def test_not_lost_when_it_succeeded_and_its_record_expired() -> None:
    assert run([ex("e1", "j1", "w1", 1, 2, "succeeded")], {"j1": GONE}) == []


def test_lost_after_a_kill_is_a_gap_where_a_promise_tolerates_it() -> None:
    at_most_once = Promise(
        "toy-at-most-once", "A job whose worker is killed may be lost.", "https://toy.invalid/k",
        delivery="at-most-once", tolerates={"lost": frozenset({"kill"})},
    )  # fmt: skip
    kill = Fault("kill", 1.5, targets=("w1",))
    execs = [ex("e1", "j1", "w1", 1, None)]
    (v,) = run(execs, {"j1": GONE}, faults=[kill], promises=(at_most_once, *PROMISES))
    assert v.kind == "gap" and v.promise == at_most_once
    assert "gap: within promise 'toy-at-most-once'" in v.message
    assert "kill of w1 from 1.500 never undone" in v.message
    # the same loss with no kill breaks the at-least-once promise
    (v,) = run(execs, {"j1": GONE}, promises=(at_most_once, *PROMISES))
    assert v.kind == "finding" and v.promise == AT_LEAST_ONCE


# ---- never-ran ----------------------------------------------------------------------------


@pytest.mark.parametrize("state", [FINISHED, FAILED, HELD])
def test_never_ran_one_job_settled_that_the_probe_never_saw_start(state: JobState) -> None:
    """Two jobs accepted, one run and finished; the other settled by the library with no
    execution journalled: one verdict, on that job alone, naming its state in the
    library's words."""
    execs = [ex("e1", "j1", "w1", 1, 2, "succeeded")]
    accepted = [Accepted("j1", 0.5), Accepted("j2", 0.7)]
    got = run(execs, {"j1": FINISHED, "j2": state}, accepted=accepted)
    (v,) = got
    assert_names(v, "never-ran", "j2", [])
    assert v.kind == "finding" and v.promise == AT_LEAST_ONCE and v.executions == ()
    assert (
        f"accepted at 0.700, {state.state} by the end of the drain (100.000; the library "
        f"says {state.words!r}), yet no execution of it was journalled: the library settled "
        "it without the probe's handler ever starting it"
    ) in v.message
    assert "finding: breaks promise 'toy-at-least-once'" in v.message
    assert settled_unseen(execs, accepted, {"j1": FINISHED, "j2": state}) == [accepted[1]]


@pytest.mark.parametrize("state", [WAITING, RUNNING, GONE])
def test_never_ran_only_judges_a_job_the_library_settled(state: JobState) -> None:
    """A job not settled is lost or stuck, or still running: never-ran says nothing."""
    got = run([], {"j1": state}, accepted=[Accepted("j1", 0.0)])
    assert only(got, "never-ran") == []
    assert settled_unseen([], [Accepted("j1", 0.0)], {"j1": state}) == []


def test_never_ran_is_silent_once_any_run_of_the_job_was_seen() -> None:
    """A run that never ended (its worker killed) is still a run the probe saw; and a job
    the library never accepted is not judged."""
    execs = [ex("e1", "j1", "w1", 1, None)]
    kill = Fault("kill", 1.5, 2.0, targets=("w1",))
    assert only(run(execs, {"j1": FAILED}, faults=[kill]), "never-ran") == []
    assert run([], {"j9": FINISHED}, accepted=[]) == []


def test_never_ran_under_a_kill_is_a_gap_where_a_promise_tolerates_it() -> None:
    """A worker killed after it took the job and before its handler started, the library
    then failing the job: within a promise that says so, a finding where none does."""
    fails_killed = Promise(
        "toy-killed-fails", "A job whose worker is killed ends up failed.",
        "https://toy.invalid/killed", tolerates={"never-ran": frozenset({"kill"})},
    )  # fmt: skip
    kill = Fault("kill", 3.0, 4.0, targets=("w2",))
    accepted = [Accepted("j1", 1.0)]
    (v,) = run([], {"j1": FAILED}, faults=[kill], accepted=accepted,
               promises=(fails_killed, *PROMISES))  # fmt: skip
    assert v.rule == "never-ran" and v.kind == "gap" and v.promise == fails_killed
    assert v.causes == (kill.describe(),)
    (v,) = run([], {"j1": FAILED}, accepted=accepted, promises=(fails_killed, *PROMISES))
    assert v.kind == "finding" and v.promise == AT_LEAST_ONCE and v.causes == ()


# ---- ran-after-done -----------------------------------------------------------------------


def test_ran_after_done_a_finished_job_runs_again() -> None:
    execs = [ex("e1", "j1", "w1", 1, 2, "succeeded"), ex("e2", "j1", "w2", 5, 6, "succeeded")]
    (v,) = run(execs, {"j1": FINISHED})
    assert_names(v, "ran-after-done", "j1", ["w1", "w2"])
    assert v.executions == ("e1", "e2") and v.kind == "finding" and v.promise == DONE_IS_FINAL


def test_ran_after_done_a_held_job_runs_again() -> None:
    execs = [ex("e1", "j1", "w1", 1, 2, "held"), ex("e2", "j1", "w1", 3, None)]
    (v,) = only(run(execs, {"j1": HELD}), "ran-after-done")
    assert_names(v, "ran-after-done", "j1", ["w1"])


def test_retries_are_not_runs_after_done() -> None:
    """Two failures then a success, and three failures with two retries asked: each run
    came before the job was done."""
    execs = [ex(f"e{i}", "j1", "w1", i * 10, i * 10 + 1, "failed") for i in range(3)]
    ok = [*execs[:2], ex("e2", "j1", "w2", 20, 21, "succeeded")]
    assert run(ok, {"j1": FINISHED}) == []
    assert run(execs, {"j1": FAILED}, accepted=[Accepted("j1", 0, retries=2)]) == []
    assert run(execs, {"j1": FAILED}) == []  # retries unknown: its last failure made it so
    # with one retry asked, the third run came after the job had failed for good
    (v,) = run(execs, {"j1": FAILED}, accepted=[Accepted("j1", 0, retries=1)])
    assert v.rule == "ran-after-done" and v.executions == ("e1", "e2")


def test_the_attempt_the_library_kept_decides_which_run_made_it_done() -> None:
    """Three failures of a job failed for good: with its last failure kept, every run came
    before the job was done; with its second one kept, the third run came after it."""
    fails = [Execution(f"e{i}", "j1", "w1", 100, i * 10.0, i, i * 10.0 + 1, "failed")
             for i in (1, 2, 3)]  # fmt: skip
    assert run(fails, {"j1": JobState("failed-for-good", "DEAD after 3", 3)}) == []
    (v,) = run(fails, {"j1": JobState("failed-for-good", "DEAD after 3", 2)})
    assert v.rule == "ran-after-done" and v.executions == ("e2", "e3")
    assert "recorded failed-for-good ('DEAD after 3') by e2 on w1 (pid 100) 20.000-21.000" in (
        v.message
    )


def test_a_success_the_library_never_kept_made_the_job_done() -> None:
    """A run journaled a success the library never kept, then the run it kept: the job was
    done when the first handler returned, whichever attempt the library kept."""
    lost = Execution("e1", "j1", "w1", 100, 1.0, 1, 5.0, "succeeded")
    kept = Execution("e2", "j1", "w2", 200, 7.0, 2, 8.0, "succeeded")
    (v,) = run([lost, kept], {"j1": JobState("finished", "SUCCEEDED after 2", 2)})
    assert_names(v, "ran-after-done", "j1", ["w1", "w2"])
    assert v.executions == ("e1", "e2") and v.kind == "finding" and v.promise == DONE_IS_FINAL
    assert (
        "e1 on w1 (pid 100) 1.000-5.000 succeeded (its handler returned; final state finished "
        "('SUCCEEDED after 2')), then ran again: e2 on w2 (pid 200) 7.000-8.000 succeeded"
    ) in v.message
    # without the kept attempt, the final state confirms the first success itself
    (v,) = run([lost, kept], {"j1": FINISHED})
    assert v.executions == ("e1", "e2")
    assert "recorded finished ('done') by e1 on w1 (pid 100) 1.000-5.000 succeeded," in v.message
    # the kept attempt ran again afterwards: still counted from the first success
    again = Execution("e3", "j1", "w1", 100, 9.0, 3, 10.0, "succeeded")
    (v,) = run([lost, kept, again], {"j1": JobState("finished", "SUCCEEDED", 2)})
    assert v.rule == "ran-after-done" and v.executions == ("e1", "e2", "e3")


#: The final state of a job whose attempts ran out after its reruns (none of its runs made it).
USED_UP = JobState("failed-for-good", "DEAD after 3 attempt(s)", 3)


@pytest.mark.parametrize(
    ("outcome", "did"),
    [("succeeded", "its handler returned"), ("held", "its handler asked to hold the job")],
)
def test_ran_after_done_a_run_after_a_success_whatever_the_final_state(
    outcome: str, did: str
) -> None:
    """The first run succeeded (or was held), the library ran the job again and recorded
    that run too, then failed it for good: the job ran after it was done."""
    execs = [
        Execution("e1", "j1", "w1", 100, 1.0, 1, 2.0, outcome),  # type: ignore[arg-type]
        Execution("e2", "j1", "w1", 100, 4.0, 2, 5.0, "succeeded"),
    ]
    (v,) = run(execs, {"j1": USED_UP})
    assert_names(v, "ran-after-done", "j1", ["w1"])
    assert v.executions == ("e1", "e2") and v.kind == "finding" and v.promise == DONE_IS_FINAL
    assert v.causes == ()
    assert (
        f"e1 on w1 (pid 100) 1.000-2.000 {outcome} ({did}; final state failed-for-good "
        "('DEAD after 3 attempt(s)')), then ran again: e2 on w1 (pid 100) 4.000-5.000 succeeded"
    ) in v.message
    # whatever the final state: still running, or forgotten
    for final in (RUNNING, GONE):
        (v,) = only(run(execs, {"j1": final}), "ran-after-done")
        assert v.executions == ("e1", "e2") and v.kind == "finding"


def test_a_run_after_a_success_whose_worker_was_killed_before_recording_it_is_a_gap() -> None:
    """w1's handler returned, then w1 was killed before the library recorded the success:
    the rerun is within a promise that tolerates a run after done under a kill; a kill of
    a worker that took no part in it leaves it a finding."""
    redelivers = Promise(
        "toy-redelivers", "A job whose worker dies before it acknowledges is run again.",
        "https://toy.invalid/ack", tolerates={"ran-after-done": frozenset({"kill"})},
    )  # fmt: skip
    execs = [
        Execution("e1", "j1", "w1", 100, 1.0, 1, 2.0, "succeeded"),
        Execution("e2", "j1", "w2", 200, 6.0, 2, 7.0, "succeeded"),
    ]
    promises = (redelivers, *PROMISES)
    kill = Fault("kill", 2.5, 3.5, targets=("w1",))
    (v,) = run(execs, {"j1": USED_UP}, faults=[kill], promises=promises)
    assert_names(v, "ran-after-done", "j1", ["w1", "w2"])
    assert v.kind == "gap" and v.promise == redelivers
    assert "gap: within promise 'toy-redelivers'" in v.message
    assert f"causes in play: {kill.describe()}" in v.message
    elsewhere = Fault("kill", 2.5, 3.5, targets=("w3",))
    (v,) = run(execs, {"j1": USED_UP}, faults=[elsewhere], promises=promises)
    assert v.kind == "finding" and v.promise == DONE_IS_FINAL and v.causes == ()


@pytest.mark.parametrize("outcome", ["retry-asked", "failed"])
def test_a_run_after_a_retry_is_no_run_after_done(outcome: str) -> None:
    """A run that asked for a retry (or failed) left its job to be run again."""
    execs = [
        Execution("e1", "j1", "w1", 100, 1.0, 1, 2.0, outcome),  # type: ignore[arg-type]
        Execution("e2", "j1", "w2", 200, 4.0, 2, 5.0, "succeeded"),
    ]
    assert run(execs, {"j1": FINISHED}) == []
    assert run(execs, {"j1": JobState("finished", "SUCCEEDED after 2", 2)}) == []
    for final in (RUNNING, GONE):
        assert only(run(execs, {"j1": final}), "ran-after-done") == []


def test_a_rerun_the_clocks_cannot_order_after_the_success_is_not_judged() -> None:
    """The rerun starts 0.5 s after the success ended: a run after done when the clocks
    are exact, nothing within a clock uncertainty of 1 s."""
    execs = [
        Execution("e1", "j1", "w1", 100, 1.0, 1, 2.0, "succeeded"),
        Execution("e2", "j1", "w2", 200, 2.5, 2, 3.0, "succeeded"),
    ]
    (v,) = run(execs, {"j1": USED_UP})
    assert v.rule == "ran-after-done" and v.executions == ("e1", "e2")
    assert run(execs, {"j1": USED_UP}, uncertainty=1.0) == []


def test_an_order_the_clocks_cannot_tell_is_not_judged() -> None:
    execs = [ex("e1", "j1", "w1", 1, 2, "succeeded"), ex("e2", "j1", "w2", 2.5, 3, "succeeded")]
    assert only(run(execs, {"j1": FINISHED}), "ran-after-done") != []
    assert run(execs, {"j1": FINISHED}, uncertainty=1.0) == []


# ---- handed-out-while-held ----------------------------------------------------------------


def _overlap() -> list[Execution]:
    return [ex("a", "j1", "w1", 0, 20, "succeeded", pid=101),
            ex("b", "j1", "w2", 10, 12, "succeeded", pid=200)]  # fmt: skip


def test_handed_out_while_held_with_no_fault_is_a_finding() -> None:
    (v,) = run(_overlap(), {"j1": FINISHED})
    assert_names(v, "handed-out-while-held", "j1", ["w1", "w2"])
    assert v.kind == "finding" and v.promise == AT_LEAST_ONCE and v.causes == ()
    assert "b on w2 (pid 200) 10.000-12.000 succeeded started while a on w1" in v.message


def test_a_fault_on_another_worker_leaves_it_a_finding() -> None:
    faults = [Fault("kill", 5, 6, targets=("w3",)), Fault("pause", 1, 15, targets=("w2",))]
    (v,) = run(_overlap(), {"j1": FINISHED}, faults=faults)
    assert v.kind == "finding" and v.causes == ()


@pytest.mark.parametrize(
    "fault",
    [
        Fault("kill", 5, 8, targets=("w1",), part="main", pids=frozenset({100})),
        Fault("pause", 2, 9, targets=("w1",)),
        Fault("partition", 3, 4, targets=("w1", "w3")),
        Fault("cut", 11, targets=("w1",)),
        Fault("server-freeze", 1, 2),
    ],
    ids=lambda f: f.kind,
)
def test_handed_out_after_a_fault_on_the_first_worker_is_a_gap(fault: Fault) -> None:
    """The first execution's worker was hit (its main process killed while the child ran
    the job, paused, cut off): a second run is within the at-least-once promise."""
    (v,) = run(_overlap(), {"j1": FINISHED}, faults=[fault])
    assert_names(v, "handed-out-while-held", "j1", ["w1", "w2"])
    assert v.kind == "gap" and v.promise == AT_LEAST_ONCE
    assert "gap: within promise 'toy-at-least-once'" in v.message
    assert f"causes in play: {fault.describe()}" in v.message


def test_a_server_kill_the_promise_does_not_tolerate_stays_a_finding() -> None:
    (v,) = run(_overlap(), {"j1": FINISHED}, faults=[Fault("server-kill", 1, 2)])
    assert v.kind == "finding" and v.causes == ("server-kill of the server from 1.000 to 2.000",)


def test_handed_out_past_the_time_limit_is_a_gap() -> None:
    (v,) = run(_overlap(), {"j1": FINISHED}, execution_limit=8.0)
    assert v.kind == "gap" and "an execution ran past its time limit" in v.message
    (v,) = run(_overlap(), {"j1": FINISHED}, execution_limit=30.0)
    assert v.kind == "finding"
    # a job's own limit counts over the profile's
    (v,) = run(_overlap(), {"j1": FINISHED}, accepted=[Accepted("j1", 0, limit=5.0)],
               execution_limit=30.0)  # fmt: skip
    assert v.kind == "gap"


def test_a_run_after_its_first_worker_was_killed_is_no_overlap() -> None:
    """The first execution never ended: it stopped with the kill of its process."""
    execs = [ex("a", "j1", "w1", 0, None, pid=101), ex("b", "j1", "w2", 10, 12, "succeeded")]
    kill = Fault("kill", 5, 9, targets=("w1",))
    assert run(execs, {"j1": FINISHED}, faults=[kill]) == []
    # a kill of another process of that worker leaves the execution running: overlap
    part = Fault("kill", 5, 9, targets=("w1",), part="main", pids=frozenset({100}))
    (v,) = run(execs, {"j1": FINISHED}, faults=[part])
    assert v.rule == "handed-out-while-held" and v.kind == "gap"


def test_a_skewed_clock_is_taken_back_before_comparing() -> None:
    """w2's clock reads 100 s ahead: its run at 105-106 by its clock was at 5-6, during
    a's run; the skew of the second's clock puts it within the promise's model only if
    the promise tolerates clock-skew (the toy's does not)."""
    skew = Fault("clock-skew", 0, targets=("w2",), offset=100.0)
    assert true_time("w2", 105.0, [skew]) == 5.0 and true_time("w1", 105.0, [skew]) == 105.0
    execs = [ex("a", "j1", "w1", 0, 20, "succeeded"), ex("b", "j1", "w2", 105, 106, "failed")]
    (v,) = only(run(execs, {"j1": FINISHED}, faults=[skew]), "handed-out-while-held")
    assert v.kind == "finding" and "clock-skew of w2" in v.message
    tolerant = dataclasses.replace(
        AT_LEAST_ONCE, tolerates={"handed-out-while-held": frozenset({"clock-skew"})}
    )
    got = run(execs, {"j1": FINISHED}, faults=[skew], promises=(tolerant, DONE_IS_FINAL))
    (v,) = only(got, "handed-out-while-held")
    assert v.kind == "gap"


# ---- superseded-outcome -------------------------------------------------------------------


def test_superseded_outcome_the_stale_executions_success_stands() -> None:
    """a was superseded by b (b started while a ran); only a's outcome makes the final
    state, so the library let the superseded execution's outcome stand."""
    execs = [ex("a", "j1", "w1", 0, 20, "succeeded"), ex("b", "j1", "w2", 10, 12, "failed")]
    got = run(execs, {"j1": FINISHED}, accepted=[Accepted("j1", 0, retries=0)])
    (v,) = only(got, "superseded-outcome")
    assert_names(v, "superseded-outcome", "j1", ["w1", "w2"])
    assert v.executions == ("a", "b") and v.kind == "finding" and v.promise == AT_LEAST_ONCE
    assert "a on w1 (pid 100) 0.000-20.000 succeeded superseded by b" in v.message


def test_not_superseded_when_the_later_execution_made_the_same_outcome() -> None:
    execs = [ex("a", "j1", "w1", 0, 20, "succeeded"), ex("b", "j1", "w2", 10, 12, "succeeded")]
    assert only(run(execs, {"j1": FINISHED}), "superseded-outcome") == []
    # nor when the final state is the later execution's
    execs[1] = ex("b", "j1", "w2", 10, 12, "failed")
    assert only(run(execs, {"j1": FAILED}), "superseded-outcome") == []


# ---- stuck --------------------------------------------------------------------------------


def test_stuck_running_with_its_worker_dead() -> None:
    execs = [ex("a", "j1", "w1", 1, None)]
    kill = Fault("kill", 5, targets=("w1",))
    drain = Drain(100.0, frozenset({"w2"}))
    (v,) = run(execs, {"j1": RUNNING}, faults=[kill], drain=drain)
    assert_names(v, "stuck", "j1", ["w1"])
    assert v.kind == "finding" and v.causes == ("kill of w1 from 5.000 never undone",)
    assert "(alive: w2)" in v.message


def test_stuck_running_though_no_execution_ever_started() -> None:
    (v,) = run([], {"j1": RUNNING}, accepted=[Accepted("j1", 0)], drain=Drain(9.0, frozenset()))
    assert_names(v, "stuck", "j1", [])


def test_not_stuck_while_a_live_worker_runs_it() -> None:
    assert run([ex("a", "j1", "w1", 1, None)], {"j1": RUNNING}) == []
    # restarted after the kill, but the execution died with the kill: stuck
    kill = Fault("kill", 5, 6, targets=("w1",))
    (v,) = run([ex("a", "j1", "w1", 1, None)], {"j1": RUNNING}, faults=[kill])
    assert v.rule == "stuck"


def test_not_stuck_when_its_run_ends_after_the_drain() -> None:
    """A live worker was running the job when the drain ended; the handler wrote its end
    line while the workers were being stopped."""
    assert run([ex("a", "j1", "w1", 90, 103, "succeeded")], {"j1": RUNNING}) == []
    # a run that ended before the drain's end does not make a running job live
    (v,) = run([ex("a", "j1", "w1", 90, 95, "succeeded")], {"j1": RUNNING})
    assert v.rule == "stuck"


# ---- a correct serial schedule ------------------------------------------------------------

_OUTCOMES = st.sampled_from(["succeeded", "failed", "retry-asked", "held"])


@st.composite
def _serial(draw: st.DrawFn):
    """Jobs run one execution at a time each (workers interleave across jobs), every
    execution ending before the next of its job starts, the final state the one its last
    execution made (a job whose runs all failed is failed for good after its retries)."""
    n_jobs = draw(st.integers(1, 6))
    executions: list[Execution] = []
    accepted: list[Accepted] = []
    final: dict[str, JobState] = {}
    for j in range(n_jobs):
        job = f"j{j}"
        t = draw(st.floats(0, 50))
        accepted.append(Accepted(job, t))
        runs = draw(st.lists(_OUTCOMES, min_size=0, max_size=4))
        # an outcome that ends the job ends its runs
        cut = next((i for i, o in enumerate(runs) if o in ("succeeded", "held")), None)
        if cut is not None:
            runs = runs[: cut + 1]
        for i, outcome in enumerate(runs):
            t += draw(st.floats(1.5, 10))
            end = t + draw(st.floats(0.01, 5))
            worker = draw(st.sampled_from(["w1", "w2", "w3"]))
            executions.append(ex(f"{job}-e{i}", job, worker, t, end, outcome, pid=100 + i))
            t = end
        if not runs:
            final[job] = draw(st.sampled_from([WAITING, GONE, RUNNING]))
            if final[job] != RUNNING:
                accepted.pop()  # never acknowledged: nothing owed
        else:
            last = runs[-1]
            final[job] = {"succeeded": FINISHED, "held": HELD}.get(last, FAILED)
    draw(st.randoms()).shuffle(executions)
    return executions, accepted, final


@settings(max_examples=200, deadline=None)
@given(history=_serial(), uncertainty=st.sampled_from([0.0, 0.5, 1.0]))
def test_a_correct_serial_schedule_yields_no_verdict(history, uncertainty: float) -> None:
    executions, accepted, final = history
    # a job left running is run by an open execution on a live worker
    open_runs = [
        ex(f"{job}-open", job, "w1", 90.0, None) for job, s in final.items() if s == RUNNING
    ]
    got = judge([*executions, *open_runs], [], accepted, final, PROMISES,
                Drain(100.0, frozenset({"w1"})), uncertainty=uncertainty)  # fmt: skip
    assert got == [], "\n".join(v.message for v in got)


# ---- known upstream -----------------------------------------------------------------------


def test_a_finding_the_trackers_issue_covers_is_marked_and_stays_a_finding() -> None:
    entry = KnownUpstream("toy/toy", 431, "a job runs twice", rules=("handed-out-while-held",),
                          pattern=r"started while a on w1")  # fmt: skip
    (v,) = mark_known(run(_overlap(), {"j1": FINISHED}), [entry])
    assert v.kind == "finding" and v.upstream is entry
    assert_names(v, "handed-out-while-held", "j1", ["w1", "w2"])
    assert v.message.endswith(
        "; known upstream, still present: toy/toy#431 (a job runs twice) "
        "<https://github.com/toy/toy/issues/431>"
    )
    assert v.plain in v.message and "known upstream" not in v.plain


@pytest.mark.parametrize(
    "entry",
    [
        KnownUpstream("toy/toy", 1, "another rule", rules=("lost", "stuck")),
        KnownUpstream("toy/toy", 2, "pattern misses", rules=("handed-out-while-held",),
                      pattern="no such words"),
    ],
    ids=["rule", "pattern"],
)  # fmt: skip
def test_a_finding_another_issue_describes_is_not_covered(entry: KnownUpstream) -> None:
    (v,) = mark_known(run(_overlap(), {"j1": FINISHED}), [entry])
    assert v.kind == "finding" and v.upstream is None and "known upstream" not in v.message


def test_a_gap_is_never_marked_known_upstream() -> None:
    entry = KnownUpstream("toy/toy", 3, "any double run", rules=("handed-out-while-held",))
    faults = [Fault("pause", 2, 9, targets=("w1",))]
    (v,) = mark_known(run(_overlap(), {"j1": FINISHED}, faults=faults), [entry])
    assert v.kind == "gap" and v.upstream is None


# ---- a worker that held the job through a fault, and duplicated attempts ----------------


def test_a_second_run_by_a_worker_that_held_the_job_through_its_pause_is_a_gap() -> None:
    """w2 had the job (fetched) when it was paused, before w1's run began; its heartbeats
    stopped, the library handed the job to w1, and w2 ran its own copy once resumed: the
    pause on w2 is the cause, within the at-least-once promise."""
    pause = Fault("pause", 1, 9, targets=("w2",))
    execs = [ex("a", "j1", "w1", 1.5, 20, "succeeded", pid=101),
             ex("b", "j1", "w2", 10, 12, "succeeded", pid=200)]  # fmt: skip
    (v,) = run(execs, {"j1": FINISHED}, faults=[pause])
    assert_names(v, "handed-out-while-held", "j1", ["w1", "w2"])
    assert v.kind == "gap" and v.promise == AT_LEAST_ONCE
    assert f"causes in play: {pause.describe()}" in v.message


@pytest.mark.parametrize(
    "fault",
    [
        Fault("pause", 2, 9, targets=("w2",)),  # began after w1's run: w2 did not hold it
        Fault("pause", 1, 11, targets=("w2",)),  # not over when w2's run began
        Fault("kill", 1, 2, targets=("w2",)),  # a killed worker holds nothing
        Fault("pause", -5, -1, targets=("w2",)),  # before the job was accepted
    ],
    ids=["after-first-run", "not-over", "kill", "before-accepted"],
)
def test_a_fault_the_second_worker_did_not_hold_the_job_through_leaves_a_finding(
    fault: Fault,
) -> None:
    execs = [ex("a", "j1", "w1", 1.5, 20, "succeeded", pid=101),
             ex("b", "j1", "w2", 10, 12, "succeeded", pid=200)]  # fmt: skip
    (v,) = run(execs, {"j1": FINISHED}, faults=[fault], accepted=[Accepted("j1", 0.0)])
    assert v.rule == "handed-out-while-held" and v.kind == "finding" and v.causes == ()


def test_an_attempt_run_twice_uses_one_retry() -> None:
    """A job with 2 retries failed for good: attempt 1 ran twice (a duplicate delivery), so
    the failure that used its last retry is attempt 2's, not the second run of attempt 1,
    and no run came after it."""
    def at(exec_: str, worker: str, start: float, attempt: int) -> Execution:
        return Execution(exec_, "j1", worker, 100, start, attempt, start + 0.5, "retry-asked")

    execs = [at("a0", "w1", 1, 0), at("a1", "w1", 3, 1), at("a1b", "w2", 4, 1),
             at("a2", "w1", 6, 2)]  # fmt: skip
    got = run(execs, {"j1": FAILED}, accepted=[Accepted("j1", 0.0, 2)])
    assert only(got, "ran-after-done") == []
    # a third attempt after the last retry was used is a run after done
    got = run([*execs, at("a3", "w2", 8, 3)], {"j1": FAILED}, accepted=[Accepted("j1", 0.0, 2)])
    (v,) = only(got, "ran-after-done")
    assert v.executions == ("a2", "a3")
