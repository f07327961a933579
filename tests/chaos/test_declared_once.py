"""Every rule is declared once, and a fault's coverage windows are its own data.

- A toy checker rule (``toy_rule.py``: a check and one ``CheckerRule`` value, as its
  rule family module would hold them) composed with the built-in families is in the
  rule list, the composition (its check run after the built-in ones, which do not
  change), what exercises each rule ("not exercised" included) and the public checks,
  with nothing else edited; a checker rule that does not say what exercises it cannot
  be declared.
- A toy fault family that opens a window (``toy_fault.py``) with the registry's one line
  added has its window counted by coverage, in the report's table, in rank order among
  the built-in ones (which stay as they were), and its requirement judged; the
  composition refuses a window or a requirement that names what no family has.
"""

from __future__ import annotations

import pytest

from rdq_compliance import rules
from rdq_compliance.chaos import checker
from rdq_compliance.chaos.checker import compose
from rdq_compliance.chaos.checker.engine import CheckerRule
from rdq_compliance.chaos.coverage import (
    NEEDS,
    WINDOWS,
    Requirement,
    coverage,
    unexercised,
    window_names,
)
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.windows import Span
from rdq_compliance.chaos.report.coverage_html import coverage_section
from rdq_compliance.rule import Need, NoNeed, needs_of
from tests.chaos import toy_fault, toy_rule
from tests.chaos.crafted_history import A, B, assert_names, reclaimed_at
from tests.chaos.test_coverage import History, Quirk, claims

#: The checker with the toy rule's module composed after the built-in families.
WITH_TOY = compose.Composition.of((*compose.FAMILIES, toy_rule))
#: The registry with the toy fault's one line added.
REGISTRY = BUILTIN.plus(toy_fault.FAMILY)

# ---- a rule ---------------------------------------------------------------------------------


def test_the_toy_rule_is_in_the_rule_list_the_composition_and_the_exports() -> None:
    toy = toy_rule.SINGLE_CLAIM
    assert compose.declared_in(toy_rule) == (toy,)
    # the rule list: the checker's, then the toy's, with its text
    assert WITH_TOY.texts == {**checker.RULES, "toy-single-claim": "a task is claimed at most once"}
    kit = rules.declare((*WITH_TOY.rules, *rules.SUITE_RULES))
    assert list(kit) == [*checker.RULES, "toy-single-claim", *(r.id for r in rules.SUITE_RULES)]
    assert (
        kit["toy-single-claim"].message("seen")
        == "[toy-single-claim] a task is claimed at most once: seen"
    )
    # the composition: the built-in checks in their order, then the toy's
    assert WITH_TOY.checks == (*compose.ALL, toy_rule.check_single_claim)
    # the public checks, by name
    assert WITH_TOY.exports == {**compose.CHECKS, "check_single_claim": toy_rule.check_single_claim}
    assert sorted(checker.__all__) == sorted(
        ["RULES", "FinalState", "Violation", "check", "read_final_state", *compose.CHECKS]
    )
    assert all(getattr(checker, name) is c for name, c in compose.CHECKS.items())
    # what exercises it
    assert needs_of(WITH_TOY.rules) == {
        **NEEDS_OF_CHECKER,
        "toy-single-claim": Need(("claim",), "claim"),
    }


#: What exercises each built-in checker rule (those no call exercises left out).
NEEDS_OF_CHECKER = {r: n for r, n in NEEDS.items() if r in checker.RULES}


def test_the_toy_rule_is_checked_and_reported_not_exercised_when_no_claim_came() -> None:
    h, state = reclaimed_at(12)  # w0's lease expired, w1 reclaimed t1: a correct history
    assert checker.check(h.events, state) == []
    got = WITH_TOY.check(h.events, state)
    assert [v.rule for v in got] == ["toy-single-claim"]
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))
    assert got[0].message.startswith("[toy-single-claim] a task is claimed at most once: ")
    assert toy_rule.check_single_claim(h.events, state) == got
    # a campaign that made no claim did not exercise it; one that did, did
    calls = History()
    calls.call("harness", 0.0, "enqueue", task="t-A")
    idle, _ = unexercised(coverage(calls.events), WITH_TOY.rules)
    assert "toy-single-claim" in idle and "one-claim" in idle and "no-loss" not in idle
    assert "drain-timeout" not in idle and "transition" not in idle  # NoNeed: never idle
    calls.call("w0", 1.0, "claim", claims=claims("A"))
    idle, _ = unexercised(coverage(calls.events), WITH_TOY.rules)
    assert "toy-single-claim" not in idle and "one-claim" not in idle
    # by id, what the built-in rules need is NEEDS, as before
    assert unexercised(coverage(calls.events), checker.RULES) == (
        unexercised(coverage(calls.events), compose.DECLARED)
    )


def test_a_checker_rule_says_what_exercises_it() -> None:
    check = toy_rule.check_single_claim
    with pytest.raises(TypeError, match="'toy-forgot' must say what exercises it"):
        CheckerRule(id="toy-forgot", text="forgot its needs", checks=(check,))
    with pytest.raises(TypeError, match="needs the checks that decide it"):
        CheckerRule(id="toy-unchecked", text="no check", checks=(), needs=Need(("claim",), "c"))
    with pytest.raises(ValueError, match="operations of"):
        Need(("heartbeat",), "heartbeat")
    told = CheckerRule(id="toy-told", text="told", checks=(check,), needs=NoNeed("the drain"))
    assert needs_of([told]) == {}
    with pytest.raises(ValueError, match="declared twice"):
        rules.declare((*compose.DECLARED, toy_rule.SINGLE_CLAIM, told, toy_rule.SINGLE_CLAIM))
    with pytest.raises(ValueError, match=r"checker rules declared twice: \['toy-single-claim'\]"):
        compose.Composition((toy_rule.SINGLE_CLAIM, toy_rule.SINGLE_CLAIM))


def test_the_chaos_test_holds_every_rule_of_the_composition() -> None:
    from rdq_compliance.suite import test_chaos

    doc = test_chaos.test_chaos_campaign_finds_no_violation.__doc__
    assert rules.declared_by(doc) == tuple(checker.RULES)


# ---- a fault that opens a window --------------------------------------------------------------


def _brownout_history() -> History:
    h = History()
    h.call("w0", 1.0, "claim", claims=claims("A"))
    h.fault(2.0, "brownout")
    h.call("w0", 3.0, "complete", "fail", token="A", error="stale")
    h.fault(4.0, "recovered")
    h.call("w0", 5.0, "claim", claims=claims("B"))
    return h


def test_the_toy_window_is_counted_in_its_rank_and_shown_in_the_report() -> None:
    names = window_names(REGISTRY.windows())
    assert names == (*WINDOWS[:6], "brownout", *WINDOWS[6:])  # after "server frozen"
    assert window_names(BUILTIN.windows()) == WINDOWS
    h = _brownout_history()
    cov = coverage(h.events, REGISTRY.windows())
    table = cov.table()
    assert set(table["claim"]) == {*names, "all"}
    assert table["complete"]["brownout"]["fail"] == 1 and table["complete"]["calm"]["fail"] == 0
    assert table["claim"]["calm"]["ok"] == 2 and table["claim"]["brownout"]["ok"] == 0
    # without the registry line, the same call is calm
    assert coverage(h.events).table()["complete"]["calm"]["fail"] == 1
    html = coverage_section({"coverage": table, "rules": {}})
    assert "<th>brownout</th>" in html and "<th>server frozen</th>" not in html
    assert (
        html.index("<th>calm</th>") < html.index("<th>brownout</th>") < html.index("<th>all</th>")
    )


def test_the_toy_requirement_is_judged_in_its_window() -> None:
    required = REGISTRY.requirements(["brownout", "recovered"])
    assert required == [Requirement("fencing", "brownout")]
    h = _brownout_history()
    assert unexercised(coverage(h.events, REGISTRY.windows()), [], required) == ([], [])
    quiet = History()
    quiet.fault(2.0, "brownout")
    quiet.call("w0", 5.0, "complete", "fail", token="A", error="stale")  # after the recovery
    quiet.fault(4.0, "recovered")
    _, unmet = unexercised(coverage(quiet.events, REGISTRY.windows()), [], required)
    assert unmet == required
    assert (
        unmet[0].describe()
        == "outcome report or heartbeat call (ok or refused) in the 'brownout' window"
    )


def test_the_composition_refuses_windows_that_read_or_name_what_no_family_has() -> None:
    with pytest.raises(ValueError, match=r"reads fault kinds no family draws: \['quirk_off'\]"):
        BUILTIN.plus(Quirk(Span("quirky", ("quirk",), ("quirk_off",), 99)))
    with pytest.raises(ValueError, match="fault families clash: the coverage window 'brownout'"):
        REGISTRY.plus(Quirk(Span("brownout", ("quirk",), ("quirk",), 99)))
    with pytest.raises(ValueError, match="unknown fault window 'brownout'"):
        BUILTIN.plus(Quirk(requires="brownout"))
    assert REGISTRY.plus(Quirk(requires="brownout")).requirements(["quirk"]) == [
        Requirement("fencing", "brownout")
    ]
