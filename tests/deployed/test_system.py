"""A deployed system's declaration: :func:`load_system` finds systems by their
``rdq.systems`` entry point and names the installed ones when asked for another;
:func:`declaration_problems` reports what a declaration lacks."""

from __future__ import annotations

import dataclasses
from importlib.metadata import EntryPoint

import pytest

from rdq_compliance.deployed import verdicts
from rdq_compliance.deployed.system import (
    GROUP,
    DeployedSystem,
    Profile,
    Setting,
    UnknownSystem,
    declaration_problems,
    link_problem,
    load_system,
)
from rdq_compliance.deployed.upstream import known_upstream_of, problems
from rdq_compliance.known_upstream import KnownUpstream
from rdq_core.errors import InvalidArgument
from tests.deployed.toy_system import AT_LEAST_ONCE, DONE_IS_FINAL, ToySystem

RULE_IDS = [r.id for r in verdicts.RULES]


def _found(**values: str):
    return lambda: {n: EntryPoint(n, v, GROUP) for n, v in values.items()}


def test_a_system_is_loaded_by_its_entry_point() -> None:
    found = _found(toy="tests.deployed.toy_system:ToySystem")
    system = load_system("toy", found=found)
    assert isinstance(system, ToySystem) and isinstance(system, DeployedSystem)
    assert system.worker("w1", "fast", "/p").env["RDQ_PROBE_WORKER"] == "w1"


def test_an_unknown_name_names_the_installed_systems() -> None:
    found = _found(toy="tests.deployed.toy_system:ToySystem", other="x:y")
    with pytest.raises(UnknownSystem, match=r"no rdq deployed system named 'nope'; installed "
                       r"deployed systems: other, toy\..*'rdq\.systems'"):  # fmt: skip
        load_system("nope", found=found)
    with pytest.raises(UnknownSystem, match="installed deployed systems: none"):
        load_system("nope", found=_found())


def test_an_entry_point_that_is_not_a_system_is_refused() -> None:
    with pytest.raises(UnknownSystem, match="gives a str, not a deployed system"):
        load_system("toy", found=_found(toy="tests.deployed.toy_system:DOCS"))
    with pytest.raises(UnknownSystem, match="cannot be imported"):
        load_system("toy", found=_found(toy="tests.deployed.no_such_module:X"))


def test_the_toy_declaration_is_complete() -> None:
    assert declaration_problems(ToySystem(), RULE_IDS) == []


def test_what_a_declaration_lacks_is_reported() -> None:
    vague = dataclasses.replace(
        AT_LEAST_ONCE,
        quote=" ",
        forbids=frozenset({"lost", "no-such-rule"}),
        tolerates={"lost": frozenset({"meteor"})},
    )
    system = ToySystem(
        promises=(vague, vague),
        profiles={
            "defaults": Profile("defaults", (Setting("timeout", "5", "60", "docs"),)),
            "elsewhere": Profile("elsewhere"),
        },
        server="",
        behaviours=frozenset({"fail", "dance"}),
    )
    assert declaration_problems(system, RULE_IDS) == [
        "toy==1.0: profile 'defaults' changes timeout (60 -> 5)",
        "toy==1.0: no 'fast' profile",
        "toy==1.0: names no kit backend whose server it runs on",
        "toy==1.0: unknown handler behaviours ['dance'] (known: "
        "['succeed', 'fail', 'retry', 'sleep', 'hold'])",
        "toy==1.0: its handler cannot even succeed ('succeed' not in behaviours)",
        "toy==1.0: promise 'toy-at-least-once' declared twice",
        "toy==1.0: promise 'toy-at-least-once' lacks the library's words or a link",
        "toy==1.0: promise 'toy-at-least-once' names unknown rule 'no-such-rule'",
        "toy==1.0: promise 'toy-at-least-once' tolerates 'lost' under unknown causes ['meteor']",
        "toy==1.0: promise 'toy-at-least-once' lacks the library's words or a link",
        "toy==1.0: promise 'toy-at-least-once' names unknown rule 'no-such-rule'",
        "toy==1.0: promise 'toy-at-least-once' tolerates 'lost' under unknown causes ['meteor']",
        "toy==1.0: no promise forbids 'never-ran'",
        "toy==1.0: no promise forbids 'ran-after-done'",
        "toy==1.0: no promise forbids 'handed-out-while-held'",
        "toy==1.0: no promise forbids 'superseded-outcome'",
        "toy==1.0: no promise forbids 'stuck'",
    ]


def test_a_fast_setting_cites_the_docs_line_that_allows_it() -> None:
    fast = Profile("fast", (Setting("heartbeat_timeout", "5", "60"),))
    assert fast.problems() == ["profile 'fast' changes heartbeat_timeout citing no docs line"]
    assert Profile("fast", (Setting("x", "1", "1"),)).problems() == []


def test_a_link_is_an_http_address_or_a_page_of_the_repositorys_docs() -> None:
    assert link_problem("https://toy.invalid/docs/1.0/x.html#y") is None
    assert link_problem("docs/contract.md#2-the-model") is None
    assert link_problem("docs/contract.md") is None
    for bad in ("contract.md#2-the-model", "docs/../../etc/x.md", "ftp://x/y", "docs/a.md#b c"):
        assert link_problem(bad) is not None, bad
    local = dataclasses.replace(AT_LEAST_ONCE, link="docs/contract.md#9-deployed-systems")
    assert declaration_problems(ToySystem(promises=(local, DONE_IS_FINAL)), RULE_IDS) == []
    elsewhere = dataclasses.replace(AT_LEAST_ONCE, link="README.md")
    assert declaration_problems(ToySystem(promises=(elsewhere, DONE_IS_FINAL)), RULE_IDS) == [
        "toy==1.0: promise 'toy-at-least-once' lacks the library's words or a link"
    ]


def test_a_system_is_loaded_by_module_and_attribute() -> None:
    system = load_system("tests.deployed.toy_system:ToySystem")
    assert isinstance(system, ToySystem)
    with pytest.raises(UnknownSystem, match=r"cannot load a deployed system from 'tests\.nope:X'"):
        load_system("tests.nope:X")


def test_a_known_upstream_entry_names_deployed_rules_and_no_test() -> None:
    good = KnownUpstream("toy/toy", 431, "a paused worker's job runs twice",
                         rules=("handed-out-while-held",), pattern="paused")  # fmt: skip
    system = ToySystem(known_upstream=(good,))
    assert problems(system, RULE_IDS) == []
    assert known_upstream_of(system, RULE_IDS) == (dataclasses.replace(
        good, source="toy==1.0's known_upstream"),)  # fmt: skip
    bad = (
        KnownUpstream("toy/toy", 1, "chaos rule", rules=("one-claim",)),
        KnownUpstream("toy/toy", 2, "a test", tests=("test_chaos_campaign",), rules=("lost",)),
        {"repository": "https://github.com/toy/toy/issues/3", "number": 3, "title": "url",
         "rules": ["stuck"]},
        KnownUpstream("toy/toy", 4, "typo", rules=("handed-out-while-hold",)),
    )  # fmt: skip
    (problem,) = problems(ToySystem(known_upstream=bad), RULE_IDS)
    assert problem.startswith("known-upstream ledger: ")
    assert "rule 'one-claim' is not a rule id (the deployed checker's rules)" in problem
    assert 'write repository = "toy/toy"' in problem
    assert "close matches: handed-out-while-held" in problem
    with pytest.raises(InvalidArgument, match=r"toy/toy#2: names tests \['test_chaos_campaign'\]"):
        known_upstream_of(ToySystem(known_upstream=bad[1:2]), RULE_IDS)
