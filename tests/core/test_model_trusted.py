"""The trusted constructors of ``rdq_core.model`` build the very values the validated
constructors build: equal both ways, same hash, repr, fields and ``vars``, as frozen, and
with headers as read-only (what the backends' decode paths rely on)."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import datetime, timedelta, timezone
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdq_core.model import (
    Attempt,
    Claim,
    ErrorInfo,
    Outcome,
    Status,
    Task,
    trusted_attempt,
    trusted_claim,
    trusted_error,
    trusted_task,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)

times = st.integers(0, 10**12).map(lambda us: T0 + timedelta(microseconds=us))
texts = st.text(max_size=8)
errors = st.none() | st.builds(ErrorInfo, texts, texts, st.none() | texts)


@st.composite
def attempt_fields(draw: st.DrawFn) -> tuple:
    return (
        draw(st.integers(1, 50)),
        draw(times),
        draw(times),
        draw(st.sampled_from(Outcome)),
        draw(errors),
    )


@st.composite
def task_fields(draw: st.DrawFn) -> tuple:
    return (
        draw(texts),
        draw(texts),
        draw(texts),
        draw(st.binary(max_size=8)),
        draw(st.dictionaries(texts, texts, max_size=3)),
        draw(st.sampled_from(Status)),
        draw(st.integers(0, 9)),
        draw(st.integers(0, 9)),
        draw(st.none() | times),
        draw(st.none() | times),
        draw(times),
        tuple(Attempt(*f) for f in draw(st.lists(attempt_fields(), max_size=3))),
    )


def _both(fields: tuple) -> tuple[Task, Task]:
    """(validated, trusted) from the same fields; the trusted one gets its own dict."""
    validated = Task(*fields)
    trusted = trusted_task(*fields[:4], dict(fields[4]), *fields[5:])
    return validated, trusted


@given(task_fields())
def test_a_trusted_task_is_the_validated_task(fields: tuple) -> None:
    validated, trusted = _both(fields)
    assert type(trusted) is Task
    assert trusted == validated and validated == trusted
    assert not (trusted != validated)
    assert hash(trusted) == hash(validated)
    assert repr(trusted) == repr(validated)
    assert vars(trusted) == vars(validated)
    assert list(vars(trusted)) == list(vars(validated))  # same fields, same order
    names = [f.name for f in dataclasses.fields(Task)]
    assert [getattr(trusted, n) for n in names] == [getattr(validated, n) for n in names]
    assert trusted.next_attempt_no == validated.next_attempt_no
    assert trusted.last_error == validated.last_error
    assert type(trusted.headers) is type(validated.headers) is MappingProxyType
    assert type(trusted.attempts) is tuple
    assert {trusted: 1}[validated] == 1


@given(task_fields(), st.sampled_from(["id", "status", "attempt_count", "headers", "attempts"]))
def test_a_trusted_task_differs_where_the_validated_one_does(fields: tuple, name: str) -> None:
    _, trusted = _both(fields)
    changed = {
        "id": trusted.id + "x",
        "status": Status.DEAD if trusted.status is not Status.DEAD else Status.PENDING,
        "attempt_count": trusted.attempt_count + 1,
        "headers": {**trusted.headers, "extra": "1"},
        "attempts": (*trusted.attempts, Attempt(99, T0, T0, Outcome.SUCCESS)),
    }
    other = dataclasses.replace(trusted, **{name: changed[name]})
    assert other != trusted and trusted != other


def test_a_trusted_task_is_as_frozen_as_the_validated_one() -> None:
    fields = ("t", "q", "h", b"p", {"k": "v"}, Status.PENDING, 0, 0, T0, None, T0, ())
    for task in _both(fields):
        with pytest.raises(dataclasses.FrozenInstanceError):
            task.status = Status.DEAD  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del task.id  # type: ignore[misc]
        with pytest.raises(TypeError):
            task.headers["k"] = "changed"  # type: ignore[index]
        with pytest.raises(TypeError):
            del task.headers["k"]  # type: ignore[attr-defined]
        assert dict(task.headers) == {"k": "v"}
        with pytest.raises(TypeError):  # MappingProxyType does not pickle: neither does
            pickle.dumps(task)
        # replace() goes through the validated constructor, from either
        assert dataclasses.replace(task, attempt_count=2).attempt_count == 2


def test_a_trusted_task_without_headers_has_read_only_empty_headers() -> None:
    task = trusted_task("t", "q", "h", b"", {}, Status.PENDING, 0, 0, T0, None, T0)
    assert task.headers == {} and task.attempts == ()
    with pytest.raises(TypeError):
        task.headers["k"] = "v"  # type: ignore[index]
    assert task == Task("t", "q", "h", b"", {}, Status.PENDING, 0, 0, T0, None, T0)


@given(attempt_fields())
def test_a_trusted_attempt_and_error_are_the_validated_ones(fields: tuple) -> None:
    attempt = trusted_attempt(*fields)
    assert attempt == Attempt(*fields) and hash(attempt) == hash(Attempt(*fields))
    assert repr(attempt) == repr(Attempt(*fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.attempt_no = 0  # type: ignore[misc]
    if fields[4] is not None:
        e = fields[4]
        error = trusted_error(e.type, e.message, e.detail)
        assert error == e and hash(error) == hash(e) and repr(error) == repr(e)
        assert trusted_error(e.type, e.message) == ErrorInfo(e.type, e.message)
        with pytest.raises(dataclasses.FrozenInstanceError):
            error.type = "x"  # type: ignore[misc]


@given(task_fields(), st.text(min_size=1, max_size=4), times, times, st.booleans())
def test_a_trusted_claim_is_the_validated_claim(
    fields: tuple, token: str, at: datetime, until: datetime, reclaimed: bool
) -> None:
    validated_task, task = _both(fields)
    claim = trusted_claim(task, token, at, until, reclaimed)
    validated = Claim(validated_task, token, at, until, reclaimed)
    assert type(claim) is Claim
    assert claim == validated and validated == claim
    assert hash(claim) == hash(validated)
    assert repr(claim) == repr(validated)
    assert claim.task_id == validated.task_id
    assert trusted_claim(task, token, at, until) == Claim(validated_task, token, at, until)
    assert claim != trusted_claim(task, token + "x", at, until, reclaimed)
    with pytest.raises(dataclasses.FrozenInstanceError):
        claim.token = "x"  # type: ignore[misc]
