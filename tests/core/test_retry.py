"""Property tests of the retry policy (rdq_core.retry)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdq_core import validation
from rdq_core.errors import InvalidArgument
from rdq_core.model import Outcome
from rdq_core.retry import (
    Action,
    PermanentError,
    RetryableError,
    RetryPolicy,
    error_info,
    error_type_name,
    truncate,
)
from rdq_core.validation import MAX_DELAY, MAX_ERROR_TEXT

US = timedelta(microseconds=1)

bases = st.integers(min_value=0, max_value=10**8).map(lambda us: timedelta(microseconds=us))
jitters = st.sampled_from(["none", "full", "equal"])


@st.composite
def policies(draw, jitter=jitters, factor=None):
    base = draw(bases)
    cap = base + timedelta(microseconds=draw(st.integers(0, 10**11)))
    f = draw(
        factor
        if factor is not None
        else st.one_of(
            st.integers(1, 10),
            st.floats(min_value=1.0, max_value=1e6, allow_nan=False, allow_infinity=False),
        )
    )
    return RetryPolicy(
        max_attempts=draw(st.integers(1, 50)),
        base=base,
        factor=f,
        cap=cap,
        jitter=draw(jitter),
    )


failures_st = st.one_of(st.integers(1, 100), st.integers(1, 10**12))


# ---- backoff ------------------------------------------------------------------------------


@given(policies(), failures_st, st.integers())
def test_backoff_within_zero_and_cap(policy, failures, seed):
    d = policy.backoff(failures, random.Random(seed))
    assert timedelta(0) <= d <= policy.cap


@given(policies(jitter=st.just("none")), st.integers(1, 200), st.integers(1, 200))
def test_no_jitter_is_non_decreasing(policy, a, b):
    lo, hi = sorted((a, b))
    rng = random.Random(0)
    assert policy.backoff(lo, rng) <= policy.backoff(hi, rng)


@given(policies(jitter=st.just("none"), factor=st.integers(1, 10)), st.integers(1, 80))
def test_no_jitter_equals_the_formula(policy, n):
    # exact integer arithmetic in microseconds: min(cap, base * factor ** (n - 1))
    base_us, cap_us = policy.base // US, policy.cap // US
    expected = min(cap_us, base_us * int(policy.factor) ** (n - 1))
    assert policy.backoff(n, random.Random(1)) == timedelta(microseconds=expected)


@given(policies(jitter=st.just("equal")), failures_st, st.integers())
def test_equal_jitter_within_half_and_full(policy, failures, seed):
    nominal = policy.nominal_backoff(failures)
    d = policy.backoff(failures, random.Random(seed))
    assert nominal / 2 <= d <= nominal


@given(policies(jitter=st.just("full")), failures_st, st.integers())
def test_full_jitter_within_zero_and_full(policy, failures, seed):
    nominal = policy.nominal_backoff(failures)
    assert timedelta(0) <= policy.backoff(failures, random.Random(seed)) <= nominal


@given(policies(), st.lists(failures_st, min_size=1, max_size=20), st.integers())
def test_backoff_is_deterministic_per_seed(policy, sequence, seed):
    r1, r2 = random.Random(seed), random.Random(seed)
    assert [policy.backoff(n, r1) for n in sequence] == [policy.backoff(n, r2) for n in sequence]


def test_backoff_rejects_bad_failures():
    policy = RetryPolicy()
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidArgument, match="failures"):
            policy.backoff(bad, random.Random(0))  # type: ignore[arg-type]


def test_huge_failure_counts_saturate_at_cap():
    policy = RetryPolicy(base=timedelta(seconds=1), factor=1.5, cap=MAX_DELAY, jitter="none")
    assert policy.backoff(10**15, random.Random(0)) == MAX_DELAY


# ---- classify / decide ---------------------------------------------------------------------------


class Both(PermanentError, RetryableError):
    pass


class RetryableValue(RetryableError, ValueError):
    pass


def test_classify_rules():
    default = RetryPolicy()
    assert default.classify(PermanentError("x")) is Outcome.PERMANENT_FAILURE
    assert default.classify(RetryableError("x")) is Outcome.RETRYABLE_FAILURE
    assert default.classify(ValueError("x")) is Outcome.RETRYABLE_FAILURE
    assert default.classify(TypeError("x")) is Outcome.RETRYABLE_FAILURE
    assert default.classify(KeyboardInterrupt()) is Outcome.RETRYABLE_FAILURE
    assert default.classify(Both()) is Outcome.PERMANENT_FAILURE
    strict = RetryPolicy(permanent={ValueError})
    assert strict.classify(ValueError("x")) is Outcome.PERMANENT_FAILURE
    assert strict.classify(UnicodeDecodeError("utf-8", b"", 0, 1, "x")) is (
        Outcome.PERMANENT_FAILURE
    )
    assert strict.classify(RetryableValue("x")) is Outcome.RETRYABLE_FAILURE
    # PermanentError stays permanent even when left out of the set
    assert RetryPolicy(permanent=()).classify(PermanentError()) is Outcome.PERMANENT_FAILURE


@given(policies(), st.integers(0, 100), st.integers())
def test_decide_respects_the_budget_exactly(policy, count, seed):
    d = policy.decide(count, RuntimeError("boom"), random.Random(seed))
    if count + 1 < policy.max_attempts:
        assert d.action is Action.RESCHEDULE and d.retry
        assert d.outcome is Outcome.RETRYABLE_FAILURE
        assert d.delay == policy.backoff(count + 1, random.Random(seed))
    else:
        assert d.action is Action.DEAD_LETTER and not d.retry
        assert d.outcome is Outcome.RETRYABLE_FAILURE and d.delay is None


@given(policies(), st.integers(0, 100))
def test_permanent_is_dead_at_once(policy, count):
    d = policy.decide(count, PermanentError("no"), random.Random(0))
    assert d.action is Action.DEAD_LETTER and d.outcome is Outcome.PERMANENT_FAILURE


@given(policies())
def test_a_life_has_exactly_max_attempts(policy):
    rng = random.Random(0)
    count = 0
    while policy.decide(count, RuntimeError(), rng).retry:
        count += 1
    assert count + 1 == policy.max_attempts


def test_decide_rejects_bad_count():
    with pytest.raises(InvalidArgument, match="attempt_count"):
        RetryPolicy().decide(-1, RuntimeError(), random.Random(0))


# ---- error_info ---------------------------------------------------------------------------------


def _raise(exc):
    try:
        raise exc
    except BaseException as e:
        return e


texts = st.text(st.characters(codec=None), max_size=300)


@settings(max_examples=60)
@given(texts, st.integers(0, 3), st.integers(0, 70_000))
def test_error_info_within_limits_and_without_nul(text, repeat_pow, pad):
    msg = (text * (4**repeat_pow)) + "\x00" * (pad % 7) + "é" * pad
    info = error_info(_raise(RuntimeError(msg)))
    for part in (info.type, info.message, info.detail):
        assert part is not None
        assert "\x00" not in part
        assert len(part.encode("utf-8")) <= MAX_ERROR_TEXT
    assert validation.error_info(info) is info  # the SPI accepts it as is


def test_error_info_surrogates_and_small_limits():
    exc = _raise(ValueError("bad \udcff byte\x00"))
    info = error_info(exc, max_message=10, max_detail=100)
    assert validation.error_info(info) is info
    assert len(info.message.encode()) <= 10
    assert info.detail is not None and len(info.detail.encode()) <= 100


def test_error_info_fields():
    class Local(Exception):
        pass

    info = error_info(_raise(Local("it broke")))
    assert info.type == f"{__name__}.test_error_info_fields.<locals>.Local"
    assert info.message == "it broke"
    assert info.detail is not None and "Traceback" in info.detail and "it broke" in info.detail
    assert error_info(_raise(KeyError("k"))).type == "KeyError"
    assert error_type_name(PermanentError()) == "rdq_core.retry.PermanentError"


def test_error_info_of_unprintable_exception():
    class Ugly(Exception):
        def __str__(self):
            raise RuntimeError("no str for you")

    info = error_info(_raise(Ugly()))
    assert info.message == "<unprintable Ugly object>"


def test_truncate_keeps_ends_of_a_traceback():
    text = "HEAD" + "x" * 100_000 + "TAIL"
    cut = truncate(text, 1000, keep="ends")
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and len(cut.encode()) <= 1000
    assert "truncated" in cut
    head = truncate(text, 1000)
    assert head.startswith("HEAD") and not head.endswith("TAIL")
    assert truncate("é" * 10, 5) in ("éé", "é")  # never splits a character


# ---- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"base": timedelta(seconds=-1)}, "base"),
        ({"base": 1}, "base"),
        ({"cap": timedelta(0), "base": timedelta(seconds=1)}, "cap"),
        ({"cap": MAX_DELAY + timedelta(seconds=1)}, "cap"),
        ({"cap": 60}, "cap"),
        ({"factor": 0.5}, "factor"),
        ({"factor": float("nan")}, "factor"),
        ({"factor": float("inf")}, "factor"),
        ({"factor": True}, "factor"),
        ({"factor": "2"}, "factor"),
        ({"jitter": "some"}, "jitter"),
        ({"permanent": ValueError}, "permanent"),
        ({"permanent": {ValueError, 3}}, "permanent"),
        ({"permanent": {int}}, "permanent"),
    ],
)
def test_bad_policy_values_raise(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        RetryPolicy(**kwargs)


def test_policy_normalises():
    p = RetryPolicy(factor=3, permanent=[TypeError])
    assert p.factor == 3.0 and isinstance(p.factor, float)
    assert p.permanent == frozenset({TypeError})
    assert RetryPolicy().permanent == frozenset({PermanentError})
