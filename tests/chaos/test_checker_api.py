"""The chaos checker as a whole: a correct run passes, its rule ids are declared, each
rule function runs alone, it reads torn journals and malformed events, and its
violations read as a report."""

from __future__ import annotations

from pathlib import Path

from rdq_compliance.chaos import checker
from rdq_compliance.chaos.checker import FinalState, check
from rdq_compliance.chaos.events import Journal, read_history
from rdq_compliance.rules import RULES
from rdq_core.model import Status
from tests.chaos.crafted_history import (
    PERM,
    SUCCESS,
    A,
    B,
    H,
    att,
    clean,
    final,
    of,
    reclaimed_at,
    task,
)

# ---- a correct run --------------------------------------------------------------------------


def test_a_plain_correct_run_passes() -> None:
    h = H().enqueue("t1", "t2")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).beat(3, "w0", "t1", A)
    h.run(0, "w0", "t1", A, end=5).report(5, "w0", "t1", A)
    h.claim(1, "w1", "t2", B).run(1, "w1", "t2", B, end=2)
    h.report(2, "w1", "t2", B, "dead_letter")
    state = final(
        task("t1", Status.SUCCEEDED, att(1, 0, 5, SUCCESS)),
        task("t2", Status.DEAD, att(1, 1, 2, PERM)),
    )
    clean(h.events, state)


def test_every_rule_id_is_declared() -> None:
    assert set(checker.RULES) <= set(RULES)
    for rule in ("lease-expired-recorded", "execution-count", "dlq-complete", "drain-timeout"):
        assert rule in checker.RULES


# ---- journals: a torn last line ----------------------------------------------------------------


def write_journals(tmp_path: Path, h: H) -> list[Path]:
    paths: dict[str, Path] = {}
    journals: dict[str, Journal] = {}
    for e in h.events:
        proc = e["proc"]
        if proc not in journals:
            paths[proc] = tmp_path / f"{proc}.jsonl"
            journals[proc] = Journal(paths[proc], proc)
        fields = {k: v for k, v in e.items() if k not in ("seq", "proc", "pid", "t", "type", "op")}
        journals[proc].write(e["type"], e["op"], **fields)
    for j in journals.values():
        j.close()
    return list(paths.values())


def test_a_torn_last_journal_line_is_read_as_an_open_operation(tmp_path: Path) -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A, "complete", "open")
    paths = write_journals(tmp_path, h)
    w0 = tmp_path / "w0.jsonl"
    with open(w0, "ab") as fh:  # SIGKILL while writing the ``ok complete`` line
        fh.write(b'{"seq":5,"proc":"w0","pid":1,"t":1.0,"type":"ok","op":"compl')
    events = read_history(paths)
    assert len(events) == len(h.events)
    assert events[-1]["op"] == "complete" and events[-1]["type"] == "invoke"
    clean(events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))))
    # the same journals still prove a violation elsewhere in the history
    got = check(events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)), dlq=[
        task("t1", Status.DEAD)]))
    assert [v.rule for v in got] == ["dlq-complete"]


def test_malformed_events_are_skipped_not_fatal() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    h.events.append({"proc": "w9", "type": "ok", "op": "claim", "claims": [{"task": "t1"}]})
    h.events.append({"proc": "w9", "type": "ok", "op": "heartbeat", "task": "t1"})
    h.events.append({"proc": "w9"})
    clean(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))))


def test_violation_report_is_readable() -> None:
    h, state = reclaimed_at(6)
    (v,) = of(check(h.events, state), "lease-respected")
    text = str(v)
    lines = text.splitlines()
    assert lines[0] == v.message
    assert lines[1].strip().startswith("timeline of task 't1'")
    claim_lines = [ln for ln in lines if " claim " in ln and " ok " in ln]
    assert len(claim_lines) == 2
    assert "reclaimed=True" in claim_lines[1] and "claimed_at=" in claim_lines[1]
    assert all(e.get("claims", [{"task": "t1"}])[0]["task"] == "t1" for e in v.excerpt)


def test_each_rule_function_runs_alone() -> None:
    h, state = reclaimed_at(6)
    assert [v.rule for v in checker.check_mutual_exclusion(h.events, state)] == ["lease-respected"]
    assert checker.check_fencing(h.events, state) == []
    for fn in (
        checker.check_reclaim_after_expiry, checker.check_lease_expired_recorded,
        checker.check_history_numbering, checker.check_execution_count,
        checker.check_outcomes_recorded, checker.check_no_loss, checker.check_drained,
        checker.check_dlq, checker.check_terminal_final, checker.check_final_status,
    ):
        assert fn.__doc__
        assert fn(h.events, state) == []


def test_final_state_accepts_a_list_of_tasks() -> None:
    t = task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))
    state = FinalState([t], (), ["t1"])  # type: ignore[arg-type]
    assert state.tasks == {"t1": t} and state.enqueued == frozenset({"t1"}) and state.drained
