"""Proofs that need a race or a fault to land: the seeds a proof may try, and every attempt
reported.

A timing-dependent proof (a broken variant caught only when a fault lands in its window, a
finding shown only when a race lands) states the seeds it may try (:func:`seeds_from`, or
any sequence) and an attempt: a function of the seed (and the attempt's number, from 1)
that runs the proof once and returns an :class:`AttemptResult` (shown or not, the facts to
report, the run's result). :func:`run_seeds` runs the attempt once per seed, in turn, and
stops at the first that shows what the proof wants; each attempt is printed as it ends
(its seed, shown or not, its facts, its duration). The :class:`Proof` it returns says
"shown on seed S, attempt i of at most n", or, none shown, names what the proof wanted
and lists every attempt (:meth:`Proof.require` fails with that; :func:`prove` is
:func:`run_seeds` then :meth:`Proof.require`).

Only "not shown" moves on to the next seed. An exception raised by an attempt (a checker
error, a harness failure, a failed assertion about the run) propagates at once: it is
never taken for "not shown", and no later seed is tried.

A proof that runs in another process (a campaign in a subprocess) returns its
:meth:`Proof.as_dict` in what it writes, and the test reads it back with
:meth:`Proof.from_dict`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Attempt", "AttemptResult", "Proof", "prove", "run_seeds", "seeds_from"]

T = TypeVar("T")


def seeds_from(first: int, count: int) -> tuple[int, ...]:
    """``count`` seeds, ``first`` and the ones after it: ``first, first + 1, ...``."""
    if count < 1:
        raise ValueError(f"a proof tries at least one seed, not {count}")
    return tuple(range(first, first + count))


@dataclass(frozen=True)
class AttemptResult(Generic[T]):
    """What one attempt returns: whether it showed what the proof wants, the facts to
    report about it (counts, rules named, events; JSON values), and its result, for the
    proof's own assertions once it is shown."""

    shown: bool
    value: T
    facts: Mapping[str, object] = field(default_factory=dict)


def _fact(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass(frozen=True)
class Attempt:
    """One seed tried: its number (from 1) of at most ``of``, shown or not, the facts it
    reported, how long it took (s)."""

    seed: int
    number: int
    of: int
    shown: bool
    facts: Mapping[str, object]
    seconds: float

    def line(self) -> str:
        """``attempt 2 of at most 4, seed 6: shown in 41.2 s; rules ["fencing"], victims 3``."""
        facts = ", ".join(f"{k} {_fact(v)}" for k, v in self.facts.items())
        return (
            f"attempt {self.number} of at most {self.of}, seed {self.seed}: "
            f"{'shown' if self.shown else 'not shown'} in {self.seconds:.1f} s"
            + (f"; {facts}" if facts else "")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "number": self.number,
            "of": self.of,
            "shown": self.shown,
            "facts": dict(self.facts),
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        return cls(
            seed=int(data["seed"]),
            number=int(data["number"]),
            of=int(data["of"]),
            shown=bool(data["shown"]),
            facts=dict(data["facts"]),
            seconds=float(data["seconds"]),
        )


@dataclass(frozen=True)
class Proof(Generic[T]):
    """What a proof wanted, the seeds it could try, the attempts it made (in order; it
    stopped at the first shown), and the last attempt's result (the shown one's, when
    one was)."""

    wanted: str
    seeds: tuple[int, ...]
    attempts: tuple[Attempt, ...]
    value: T

    @property
    def shown(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].shown

    @property
    def seed(self) -> int:
        """The last attempt's seed: the one that showed it, when one did."""
        return self.attempts[-1].seed

    def verdict(self) -> str:
        """``<wanted>: shown on seed S, attempt i of at most n``, or that no seed showed it."""
        if self.shown:
            last = self.attempts[-1]
            return (
                f"{self.wanted}: shown on seed {last.seed}, attempt {last.number} of at most "
                f"{len(self.seeds)}"
            )
        return (
            f"{self.wanted}: not shown on any of seeds {', '.join(map(str, self.seeds))} "
            f"({len(self.attempts)} attempt(s))"
        )

    def report(self) -> str:
        """The verdict, then every attempt's line."""
        return "\n".join([self.verdict(), *(f"  {a.line()}" for a in self.attempts)])

    def require(self) -> Proof[T]:
        """This proof, if shown; else an ``AssertionError`` whose message is the report."""
        if not self.shown:
            raise AssertionError(self.report())
        return self

    def as_dict(self) -> dict[str, Any]:
        """The proof without its result, as JSON values (for a proof run in a subprocess)."""
        return {
            "wanted": self.wanted,
            "seeds": list(self.seeds),
            "attempts": [a.as_dict() for a in self.attempts],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], value: T) -> Proof[T]:
        """The proof :meth:`as_dict` wrote, with ``value`` as its last attempt's result."""
        return cls(
            wanted=str(data["wanted"]),
            seeds=tuple(int(s) for s in data["seeds"]),
            attempts=tuple(Attempt.from_dict(a) for a in data["attempts"]),
            value=value,
        )


def run_seeds(
    wanted: str,
    seeds: Sequence[int],
    attempt: Callable[[int, int], AttemptResult[T]],
    *,
    say: Callable[[str], None] | None = print,
) -> Proof[T]:
    """Run ``attempt(seed, number)`` for each of ``seeds`` in turn (``number`` from 1),
    stopping at the first whose result is shown; the proof, shown or not. ``wanted`` names
    what the proof must show (the rule or the finding). Each attempt's line, then the
    verdict, goes to ``say`` (``print``: pytest shows it with a failure). An exception
    raised by ``attempt`` propagates at once."""
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError(f"{wanted}: a proof tries at least one seed")
    attempts: list[Attempt] = []
    results: list[AttemptResult[T]] = []
    for number, seed in enumerate(seeds, start=1):
        started = time.monotonic()
        result = attempt(seed, number)
        results.append(result)
        tried = Attempt(
            seed=seed,
            number=number,
            of=len(seeds),
            shown=bool(result.shown),
            facts=dict(result.facts),
            seconds=time.monotonic() - started,
        )
        attempts.append(tried)
        if say is not None:
            say(f"{wanted}: {tried.line()}")
        if tried.shown:
            break
    proof = Proof(wanted, seeds, tuple(attempts), results[-1].value)
    if say is not None:
        say(proof.verdict())
    return proof


def prove(
    wanted: str,
    seeds: Sequence[int],
    attempt: Callable[[int, int], AttemptResult[T]],
    *,
    say: Callable[[str], None] | None = print,
) -> Proof[T]:
    """:func:`run_seeds`, then :meth:`Proof.require`: the shown proof, or an
    ``AssertionError`` naming ``wanted`` and listing every attempt."""
    return run_seeds(wanted, seeds, attempt, say=say).require()
