"""The helper of the timing-dependent proofs (:mod:`tests._proof`): it tries the seeds in
turn and stops at the first that shows it, fails listing every attempt when none does,
lets an attempt's exception through at once, and reports each attempt in one line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests import _proof
from tests._proof import Attempt, AttemptResult, Proof, prove, run_seeds, seeds_from


class Campaigns:
    """An attempt function that shows on the seeds given, recording the seeds it ran."""

    def __init__(self, showing: set[int]) -> None:
        self.showing = showing
        self.ran: list[tuple[int, int]] = []

    def __call__(self, seed: int, number: int) -> AttemptResult[str]:
        self.ran.append((seed, number))
        shown = seed in self.showing
        return AttemptResult(shown, f"run of seed {seed}", {"listed twice": int(shown)})


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each attempt takes 2.5 s of the helper's monotonic clock."""
    ticks: Iterator[float] = iter(float(t) * 2.5 for t in range(100))
    monkeypatch.setattr(_proof.time, "monotonic", lambda: next(ticks))


def test_seeds_from_counts_up_from_the_first() -> None:
    assert seeds_from(5, 4) == (5, 6, 7, 8)
    assert seeds_from(3, 1) == (3,)
    with pytest.raises(ValueError, match="at least one seed"):
        seeds_from(3, 0)
    with pytest.raises(ValueError, match="F2: a proof tries at least one seed"):
        run_seeds("F2", (), Campaigns(set()))


def test_it_stops_at_the_first_seed_that_shows_it(clock: None) -> None:
    said: list[str] = []
    campaigns = Campaigns({6, 7})
    proof = prove("F2 (dlq-complete)", (5, 6, 7, 8), campaigns, say=said.append)
    assert campaigns.ran == [(5, 1), (6, 2)]
    assert proof.shown and proof.seed == 6 and proof.value == "run of seed 6"
    assert [(a.seed, a.number, a.of, a.shown) for a in proof.attempts] == [
        (5, 1, 4, False),
        (6, 2, 4, True),
    ]
    assert proof.verdict() == "F2 (dlq-complete): shown on seed 6, attempt 2 of at most 4"
    assert said == [
        "F2 (dlq-complete): attempt 1 of at most 4, seed 5: not shown in 2.5 s; listed twice 0",
        "F2 (dlq-complete): attempt 2 of at most 4, seed 6: shown in 2.5 s; listed twice 1",
        "F2 (dlq-complete): shown on seed 6, attempt 2 of at most 4",
    ]


def test_the_first_seed_showing_it_is_the_only_attempt() -> None:
    campaigns = Campaigns({3})
    proof = prove("F3", seeds_from(3, 4), campaigns, say=None)
    assert campaigns.ran == [(3, 1)]
    assert proof.verdict() == "F3: shown on seed 3, attempt 1 of at most 4"


def test_none_shown_fails_naming_what_it_wanted_and_every_attempt(clock: None) -> None:
    campaigns = Campaigns(set())
    proof = run_seeds("lease-respected or one-claim", (7, 8, 9), campaigns, say=None)
    assert campaigns.ran == [(7, 1), (8, 2), (9, 3)]
    assert not proof.shown and proof.value == "run of seed 9"
    report = (
        "lease-respected or one-claim: not shown on any of seeds 7, 8, 9 (3 attempt(s))\n"
        "  attempt 1 of at most 3, seed 7: not shown in 2.5 s; listed twice 0\n"
        "  attempt 2 of at most 3, seed 8: not shown in 2.5 s; listed twice 0\n"
        "  attempt 3 of at most 3, seed 9: not shown in 2.5 s; listed twice 0"
    )
    assert proof.report() == report
    with pytest.raises(AssertionError) as failed:
        proof.require()
    assert str(failed.value) == report
    with pytest.raises(AssertionError, match=r"not shown on any of seeds 7, 8, 9"):
        prove("lease-respected or one-claim", (7, 8, 9), Campaigns(set()), say=None)


def test_an_exception_in_an_attempt_propagates_at_once_and_no_later_seed_runs() -> None:
    ran: list[int] = []
    said: list[str] = []

    def attempt(seed: int, number: int) -> AttemptResult[None]:
        ran.append(seed)
        if seed == 2:
            raise RuntimeError("the checker failed: no history")
        return AttemptResult(False, None)

    with pytest.raises(RuntimeError, match="the checker failed: no history"):
        run_seeds("fencing", (1, 2, 3), attempt, say=said.append)
    assert ran == [1, 2]
    assert len(said) == 1 and said[0].startswith("fencing: attempt 1 of at most 3, seed 1:")

    def failing(seed: int, number: int) -> AttemptResult[None]:
        ran.append(seed)
        raise AssertionError("the history was not checked")

    ran.clear()
    with pytest.raises(AssertionError, match="the history was not checked"):
        prove("fencing", (1, 2, 3), failing, say=None)
    assert ran == [1]


def test_an_attempts_line_names_its_seed_verdict_duration_and_facts() -> None:
    attempt = Attempt(
        seed=6,
        number=2,
        of=4,
        shown=True,
        facts={"rules": ["fencing", "one-claim"], "victims": 3, "folder": "faulted-2"},
        seconds=41.25,
    )
    assert attempt.line() == (
        'attempt 2 of at most 4, seed 6: shown in 41.2 s; rules ["fencing", "one-claim"], '
        "victims 3, folder faulted-2"
    )
    quiet = Attempt(seed=1, number=1, of=1, shown=False, facts={}, seconds=0.04)
    assert quiet.line() == "attempt 1 of at most 1, seed 1: not shown in 0.0 s"


def test_a_proof_read_back_from_json_says_the_same() -> None:
    proof = prove("F2", (5, 6, 7), Campaigns({7}), say=None)
    data = json.loads(json.dumps(proof.as_dict()))
    back = Proof.from_dict(data, value="summary")
    assert back.value == "summary"
    assert back.report() == proof.report() and back.shown and back.seed == 7
    assert back.attempts == proof.attempts
