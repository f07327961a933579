"""The probe handler's body (``handler.perform``): each behaviour journals a start and an
end line with its outcome, then returns or raises what the library must see (a retry or
hold request the library's callable raises is raised, one it returns is returned); an
exception raised into the work is journaled as a failure and raised on; a retry or a hold
without the library's callable, or an unknown behaviour, is a ``ValueError`` before
anything is journaled."""

from __future__ import annotations

import time
from pathlib import Path
from typing import NoReturn

import pytest

from rdq_compliance.deployed.handler import ProbeFailure, perform
from rdq_compliance.deployed.probe import ProbeWriter, read_probe


class Asked(Exception):
    """What a library's retry or hold request raises, here."""


def _asks(what: str):
    def ask() -> NoReturn:
        raise Asked(what)

    return ask


def _journal(tmp_path: Path) -> ProbeWriter:
    return ProbeWriter(tmp_path / "probe.jsonl", "w1")


def _one(tmp_path: Path):
    log = read_probe(tmp_path / "probe.jsonl")
    assert log.torn == ()
    (x,) = log.executions()
    return x, log


def test_succeed_returns_after_its_seconds(tmp_path: Path) -> None:
    with _journal(tmp_path) as w:
        began = time.monotonic()
        assert perform("job-1", "succeed", 0.2, attempt=3, probe=w) is None
        took = time.monotonic() - began
    x, _ = _one(tmp_path)
    assert (x.job, x.worker, x.attempt, x.outcome) == ("job-1", "w1", 3, "succeeded")
    assert took >= 0.2 and x.ended is not None and x.ended - x.started >= 0.2


def test_sleep_returns_after_its_seconds(tmp_path: Path) -> None:
    with _journal(tmp_path) as w:
        perform("job-2", "sleep", 0.3, probe=w)
    x, _ = _one(tmp_path)
    assert x.outcome == "succeeded" and x.attempt is None
    assert x.ended is not None and x.ended - x.started >= 0.3


def test_fail_raises_a_probe_failure_after_its_end_line(tmp_path: Path) -> None:
    with _journal(tmp_path) as w, pytest.raises(ProbeFailure, match="job-3 told to fail"):
        perform("job-3", "fail", probe=w, retry=_asks("retry"))
    x, log = _one(tmp_path)
    assert x.outcome == "failed" and log.ends[0].detail == "told to fail"


@pytest.mark.parametrize(("behaviour", "outcome"), [("retry", "retry-asked"), ("hold", "held")])
def test_retry_and_hold_raise_what_the_library_asks(
    tmp_path: Path, behaviour: str, outcome: str
) -> None:
    with _journal(tmp_path) as w, pytest.raises(Asked, match=behaviour):
        perform("job-4", behaviour, probe=w, **{behaviour: _asks(behaviour)})
    x, _ = _one(tmp_path)
    assert x.outcome == outcome


def test_a_request_the_library_returns_is_returned(tmp_path: Path) -> None:
    request = object()
    with _journal(tmp_path) as w:
        assert perform("job-5", "hold", probe=w, hold=lambda: request) is request
    x, _ = _one(tmp_path)
    assert x.outcome == "held"


@pytest.mark.parametrize("behaviour", ["succeed", "sleep"])
def test_an_exception_raised_into_the_work_is_journaled_as_a_failure(
    tmp_path: Path, behaviour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(seconds: float) -> None:
        raise TimeoutError("the library's time limit")

    monkeypatch.setattr(time, "sleep", interrupted)
    with _journal(tmp_path) as w, pytest.raises(TimeoutError):
        perform("job-7", behaviour, 1.0, probe=w)
    x, log = _one(tmp_path)
    assert x.outcome == "failed"
    assert log.ends[0].detail == "interrupted by TimeoutError: the library's time limit"


@pytest.mark.parametrize(
    ("behaviour", "kwargs", "message"),
    [
        ("retry", {}, "'retry' needs the library's way to ask for it"),
        ("hold", {"retry": _asks("retry")}, "'hold' needs the library's way to ask for it"),
        ("dance", {}, "unknown probe behaviour 'dance'"),
    ],
)
def test_what_cannot_be_done_is_a_value_error_and_journals_nothing(
    tmp_path: Path, behaviour: str, kwargs: dict, message: str
) -> None:
    with _journal(tmp_path) as w, pytest.raises(ValueError, match=message):
        perform("job-6", behaviour, probe=w, **kwargs)
    assert (tmp_path / "probe.jsonl").read_text() == ""
