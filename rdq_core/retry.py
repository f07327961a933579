"""The retry policy: which failures are retried, how long to wait, when to give up.

Rules:

- **Budget.** ``max_attempts`` is the number of attempts per *life* of a task (redrive
  starts a new life: it resets ``attempt_count`` to 0). An attempt that fails with a
  retryable error is rescheduled while ``attempt_count + 1 < max_attempts``, where
  ``attempt_count`` is the task's count *before* the failed attempt (LEASE_EXPIRED
  reclaims count too); the attempt that spends the budget is dead-lettered with outcome
  ``RETRYABLE_FAILURE``.
- **Classification** (:meth:`RetryPolicy.classify`), first match wins:

  1. an instance of :class:`PermanentError` is permanent (explicit, always honoured);
  2. an instance of :class:`RetryableError` is retryable (explicit, always honoured,
     even if it also derives from a type listed in ``permanent``);
  3. an instance of a type in ``permanent`` is permanent;
  4. everything else is retryable.

  ``TypeError`` and ``ValueError`` are **not** permanent by default: an at-least-once
  queue errs on the side of retrying (a dead task needs a human to redrive it), and
  libraries raise ``ValueError`` for transient garbage too (a truncated response that
  fails to parse). Opt in with ``RetryPolicy(permanent={PermanentError, TypeError})``.
- **Backoff** after ``n`` failures in this life is ``min(cap, base * factor ** (n - 1))``,
  then jittered: ``"none"`` keeps it, ``"full"`` draws uniformly from ``[0, d]``,
  ``"equal"`` from ``[ceil(d / 2), d]`` (whole microseconds). It is never negative,
  never above ``cap`` and, for a seeded ``random.Random``, deterministic.
"""

from __future__ import annotations

import enum
import math
import random
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from rdq_core.errors import InvalidArgument
from rdq_core.model import ErrorInfo, Outcome
from rdq_core.validation import MAX_DELAY, MAX_ERROR_TEXT


class RetryableError(Exception):
    """Raise from a handler to ask for a retry (subject to the attempt budget)."""


class PermanentError(Exception):
    """Raise from a handler to dead-letter the task at once (PERMANENT_FAILURE)."""


Jitter = Literal["none", "full", "equal"]
JITTERS: tuple[str, ...] = ("none", "full", "equal")

#: Longest error type name accepted by the storage SPI (bytes of UTF-8).
MAX_ERROR_TYPE = 1024


class Action(str, enum.Enum):
    """What the worker does with a failed attempt."""

    RESCHEDULE = "reschedule"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class Decision:
    """The verdict on a failed attempt: reschedule after ``delay``, or dead-letter.

    ``outcome`` is the outcome recorded on the attempt: always ``RETRYABLE_FAILURE`` for
    a reschedule; ``RETRYABLE_FAILURE`` (budget spent) or ``PERMANENT_FAILURE`` for a
    dead-letter. ``delay`` is ``None`` for a dead-letter.
    """

    action: Action
    outcome: Outcome
    delay: timedelta | None = None

    @classmethod
    def reschedule(cls, delay: timedelta) -> Decision:
        return cls(Action.RESCHEDULE, Outcome.RETRYABLE_FAILURE, delay)

    @classmethod
    def dead_letter(cls, outcome: Outcome) -> Decision:
        return cls(Action.DEAD_LETTER, outcome)

    @property
    def retry(self) -> bool:
        return self.action is Action.RESCHEDULE


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class RetryPolicy:
    """Attempt budget, exponential backoff with jitter, and failure classification.

    Defaults: 5 attempts per life, backoff 1 s, 2 s, 4 s, ... capped at 5 minutes,
    equal jitter (never less than half the nominal delay, so a failing task cannot spin),
    only :class:`PermanentError` permanent. Bad values raise ``InvalidArgument``.
    """

    max_attempts: int = 5
    base: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    cap: timedelta = timedelta(minutes=5)
    jitter: Jitter = "equal"
    permanent: frozenset[type[BaseException]] = field(
        default_factory=lambda: frozenset({PermanentError})
    )

    def __post_init__(self) -> None:
        if not _is_int(self.max_attempts) or self.max_attempts < 1:
            raise InvalidArgument(
                f"max_attempts must be an int >= 1 (attempts per life), got {self.max_attempts!r}"
            )
        if not isinstance(self.base, timedelta) or self.base < timedelta(0):
            raise InvalidArgument(f"base must be a timedelta >= 0, got {self.base!r}")
        if not isinstance(self.cap, timedelta) or not self.base <= self.cap <= MAX_DELAY:
            raise InvalidArgument(
                f"cap must be a timedelta between base ({self.base}) and {MAX_DELAY}, "
                f"got {self.cap!r}"
            )
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not math.isfinite(self.factor)
            or self.factor < 1
        ):
            raise InvalidArgument(f"factor must be a finite number >= 1, got {self.factor!r}")
        object.__setattr__(self, "factor", float(self.factor))
        if self.jitter not in JITTERS:
            raise InvalidArgument(f"jitter must be one of {JITTERS}, got {self.jitter!r}")
        object.__setattr__(self, "permanent", _exception_types(self.permanent))

    # ---- backoff ------------------------------------------------------------------------

    def nominal_backoff(self, failures: int) -> timedelta:
        """``min(cap, base * factor ** (failures - 1))`` before jitter."""
        if not _is_int(failures) or failures < 1:
            raise InvalidArgument(f"failures must be an int >= 1, got {failures!r}")
        if self.base == timedelta(0):
            return timedelta(0)
        try:
            multiplier = self.factor ** (failures - 1)
        except OverflowError:
            return self.cap
        if multiplier >= self.cap / self.base:
            return self.cap
        return min(self.cap, self.base * multiplier)

    def backoff(self, failures: int, rng: random.Random) -> timedelta:
        """The delay before the next attempt after ``failures`` failures in this life."""
        nominal = self.nominal_backoff(failures)
        if self.jitter == "none":
            return nominal
        us = nominal // timedelta(microseconds=1)
        if self.jitter == "full":
            return timedelta(microseconds=rng.randint(0, us))
        return timedelta(microseconds=(us - us // 2) + rng.randint(0, us // 2))

    # ---- classification and decision -------------------------------------------------------

    def classify(self, exc: BaseException) -> Outcome:
        """``PERMANENT_FAILURE`` or ``RETRYABLE_FAILURE`` (see the module rules)."""
        if isinstance(exc, PermanentError):
            return Outcome.PERMANENT_FAILURE
        if isinstance(exc, RetryableError):
            return Outcome.RETRYABLE_FAILURE
        if self.permanent and isinstance(exc, tuple(self.permanent)):
            return Outcome.PERMANENT_FAILURE
        return Outcome.RETRYABLE_FAILURE

    def decide(self, attempt_count: int, exc: BaseException, rng: random.Random) -> Decision:
        """What to do after an attempt failed with ``exc``.

        ``attempt_count`` is the task's count *before* this attempt (as claimed). A
        retryable failure is rescheduled after ``backoff(attempt_count + 1)`` while
        ``attempt_count + 1 < max_attempts``, else dead-lettered as RETRYABLE_FAILURE;
        a permanent one is dead-lettered as PERMANENT_FAILURE.
        """
        if not _is_int(attempt_count) or attempt_count < 0:
            raise InvalidArgument(f"attempt_count must be an int >= 0, got {attempt_count!r}")
        outcome = self.classify(exc)
        if outcome is Outcome.PERMANENT_FAILURE:
            return Decision.dead_letter(outcome)
        failures = attempt_count + 1
        if failures < self.max_attempts:
            return Decision.reschedule(self.backoff(failures, rng))
        return Decision.dead_letter(Outcome.RETRYABLE_FAILURE)


def _exception_types(value: object) -> frozenset[type[BaseException]]:
    if isinstance(value, type) or not isinstance(value, Iterable):
        raise InvalidArgument(f"permanent must be a set of exception classes, got {value!r}")
    out = frozenset(value)
    for t in out:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise InvalidArgument(f"permanent must hold exception classes only, got {t!r}")
    return out


# ---- error_info ----------------------------------------------------------------------------


def _clean(text: str) -> str:
    """Drop NUL characters and make the text encodable as UTF-8."""
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _head(data: bytes, limit: int) -> str:
    return data[: max(0, limit)].decode("utf-8", "ignore")


def _tail(data: bytes, limit: int) -> str:
    return data[len(data) - max(0, limit) :].decode("utf-8", "ignore") if limit > 0 else ""


def truncate(text: str, limit: int, *, keep: Literal["head", "ends"] = "head") -> str:
    """``text`` cleaned (no NUL, valid UTF-8) and cut to at most ``limit`` UTF-8 bytes.

    A cut is marked ``[... N bytes truncated ...]``. ``keep="head"`` keeps the start,
    ``keep="ends"`` keeps a quarter from the start and the rest from the end (for a
    traceback, whose innermost frames and message come last).
    """
    text = _clean(text)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = f"[... {len(data)} bytes, truncated ...]"
    room = limit - len(marker.encode("utf-8"))
    if room <= 0:
        return _head(data, limit)
    if keep == "head":
        return _head(data, room) + marker
    front = room // 4
    return _head(data, front) + marker + _tail(data, room - front)


def error_type_name(exc: BaseException) -> str:
    """``module.QualName`` of the exception's class; builtins are named bare (``ValueError``)."""
    cls = type(exc)
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def error_info(
    exc: BaseException,
    *,
    max_message: int = MAX_ERROR_TEXT,
    max_detail: int = MAX_ERROR_TEXT,
) -> ErrorInfo:
    """The :class:`ErrorInfo` recorded for a failed attempt.

    ``type`` is :func:`error_type_name`, ``message`` is ``str(exc)`` (its start kept),
    ``detail`` the formatted traceback (both ends kept). Each is stripped of NUL, made
    valid UTF-8 and kept within the SPI limits (``MAX_ERROR_TEXT`` bytes; 1024 for the
    type), so the result always passes ``validation.error_info``. Never raises, even
    for an exception whose ``__str__`` does.
    """
    max_message = min(max_message, MAX_ERROR_TEXT)
    max_detail = min(max_detail, MAX_ERROR_TEXT)
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not lose the report
        message = f"<unprintable {type(exc).__name__} object>"
    try:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        detail = None
    return ErrorInfo(
        type=truncate(error_type_name(exc), MAX_ERROR_TYPE),
        message=truncate(message, max_message),
        detail=None if detail is None else truncate(detail, max_detail, keep="ends"),
    )
