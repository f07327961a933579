"""The probe's journal: what the writer writes is what the reader reads, every line the
writer writes is valid under ``probe.schema.json``, the reader's own checks agree with
the schema, a torn line is reported (not fatal), a writer's bug is an error, and two
writers in two processes appending to one file leave whole lines."""

from __future__ import annotations

import json
import multiprocessing
import os
from multiprocessing.synchronize import Barrier
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdq_compliance.deployed.probe import (
    MAX_LINE,
    SCHEMA,
    Execution,
    ProbeFormatError,
    ProbeWriter,
    line_problems,
    read_probe,
)

VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def _clock(times: list[float]):
    it = iter(times)
    return lambda: next(it)


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


def test_what_is_written_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    with ProbeWriter(path, "w1", clock=_clock([10.0, 10.5, 11.25, 12.0])) as w:
        a = w.started("job-1", attempt=0)
        b = w.started("job-2")
        w.ended(a, "succeeded")
        w.ended(b, "failed", detail="ValueError: boom")
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        VALIDATOR.validate(json.loads(line))
    log = read_probe(path)
    assert log.torn == ()
    pid = os.getpid()
    assert log.executions() == [
        Execution(a, "job-1", "w1", pid, 10.0, 0, 11.25, "succeeded"),
        Execution(b, "job-2", "w1", pid, 10.5, None, 12.0, "failed"),
    ]
    assert log.ends[1].detail == "ValueError: boom"
    assert a != b and len(a) == 32


def test_an_execution_without_an_end_is_open(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with ProbeWriter(path, "w1", clock=_clock([1.0])) as w:
        x = w.started("j", attempt=2)
    (e,) = read_probe(path).executions()
    assert (e.exec, e.ended, e.outcome, e.attempt) == (x, None, None, 2)


def test_the_writer_refuses_what_the_format_refuses(tmp_path: Path) -> None:
    with ProbeWriter(tmp_path / "p.jsonl", "w1") as w:
        with pytest.raises(ProbeFormatError, match="'job' is a non-empty string"):
            w.started("")
        with pytest.raises(ProbeFormatError, match="'outcome' is one of"):
            w.ended("x", "done")  # type: ignore[arg-type]
        with pytest.raises(ProbeFormatError, match=f"at most {MAX_LINE} bytes"):
            w.started("j" * MAX_LINE)
    assert (tmp_path / "p.jsonl").read_text() == ""


def test_from_env_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="RDQ_PROBE_WORKER"):
        ProbeWriter.from_env({"RDQ_PROBE_PATH": str(tmp_path / "p")})
    w = ProbeWriter.from_env({"RDQ_PROBE_PATH": str(tmp_path / "p"), "RDQ_PROBE_WORKER": "w9"})
    w.close()
    assert w.worker == "w9"


def test_a_torn_last_line_is_reported_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with ProbeWriter(path, "w1", clock=_clock([1.0, 2.0])) as w:
        x = w.started("j")
        w.ended(x, "succeeded")
    with path.open("ab") as f:
        f.write(b'{"v":1,"kind":"start","exec":"ab')  # a writer killed mid-line
    log = read_probe(path)
    assert len(log.executions()) == 1
    (torn,) = log.torn
    assert (torn.path, torn.line, torn.last) == (str(path), 3, True)
    assert torn.text.startswith('{"v":1,"kind":"start"')


def test_a_whole_line_with_no_newline_is_torn_too(tmp_path: Path) -> None:
    """Its newline never reached the file: the writer's one write did not happen whole."""
    path = tmp_path / "p.jsonl"
    line = {"v": 1, "kind": "start", "exec": "e", "job": "j", "worker": "w", "pid": 1, "t": 1}
    path.write_text(json.dumps(line))
    log = read_probe(path)
    assert log.starts == () and [t.last for t in log.torn] == [True]


def test_a_torn_line_in_a_shared_file_is_reported_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with ProbeWriter(path, "w1", clock=_clock([1.0, 2.0])) as w:
        x = w.started("j")
        with path.open("ab") as f:
            f.write(b'{"v":1,"ki\n')  # another writer's line, cut
        w.ended(x, "held")
    log = read_probe([path])
    assert [(t.line, t.last) for t in log.torn] == [(2, False)]
    assert [e.outcome for e in log.executions()] == ["held"]


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (['{"v":2,"kind":"end","exec":"e","t":1,"outcome":"held"}'], "'v' is 1, not 2"),
        (['{"v":1,"kind":"end","exec":"e","t":1,"outcome":"held","x":1}'], "unknown keys"),
        (['{"v":1,"kind":"start","exec":"e","t":1}'], "lacks ['job', 'pid', 'worker']"),
        (["[1, 2]"], "a JSON object, not list"),
    ],
)
def test_a_whole_line_that_breaks_the_format_is_an_error(
    tmp_path: Path, lines: list[str], error: str
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(ProbeFormatError, match=f"p.jsonl:1: .*{error.replace('[', '.')}"):
        read_probe(path)


def _start(e: str) -> str:
    return json.dumps(
        {"v": 1, "kind": "start", "exec": e, "job": "j", "worker": "w", "pid": 7, "t": 1}
    )


def _end(e: str) -> str:
    return json.dumps({"v": 1, "kind": "end", "exec": e, "t": 2, "outcome": "succeeded"})


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([_end("e")], "execution 'e' ended but never started"),
        ([_start("e"), _start("e")], "execution 'e' started twice"),
        ([_start("e"), _end("e"), _end("e")], "execution 'e' ended twice"),
    ],
)
def test_lines_that_do_not_pair_are_an_error(tmp_path: Path, lines: list[str], error: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(ProbeFormatError, match=error):
        read_probe(path).executions()


_VALUES = st.sampled_from(
    [None, True, False, 0, 1, 1.0, 2, -1, 2.5, 1e9, "", "x", "start", "end", "succeeded",
     "held", "retry-asked", "nope", [], {}]
)  # fmt: skip
_KEYS = st.sampled_from(
    ["v", "kind", "exec", "job", "worker", "pid", "t", "attempt", "outcome", "detail", "other"]
)


@st.composite
def _lines(draw: st.DrawFn) -> dict[str, object]:
    """A line near the format: a valid start or end, with a few keys changed or dropped."""
    if draw(st.booleans()):
        base: dict[str, object] = {
            "v": 1, "kind": "start", "exec": "e1", "job": "j", "worker": "w", "pid": 3, "t": 1.5,
        }  # fmt: skip
        if draw(st.booleans()):
            base["attempt"] = draw(st.sampled_from([None, 0, 4]))
    else:
        base = {"v": 1, "kind": "end", "exec": "e1", "t": 2.0, "outcome": "failed"}
    for key, value in draw(st.dictionaries(_KEYS, _VALUES, max_size=2)).items():
        base[key] = value
    for key in draw(st.lists(_KEYS, max_size=1)):
        base.pop(key, None)
    return base


@settings(max_examples=300, deadline=None)
@given(line=_lines())
def test_the_readers_checks_agree_with_the_schema(line: dict[str, object]) -> None:
    assert (line_problems(line) == []) == VALIDATOR.is_valid(line), (
        line_problems(line),
        [e.message for e in VALIDATOR.iter_errors(line)],
    )


_PER_WRITER = 300
_ROUND = 50


def _append_many(path: str, worker: str, barrier: Barrier) -> None:
    """A worker process's probe: ``_PER_WRITER`` executions, each a start and an end
    line, the lines long enough (about 1 kB) that a split write would show. Both writers
    meet at ``barrier`` every ``_ROUND`` executions, so their lines do interleave."""
    with ProbeWriter(path, worker) as w:
        for i in range(_PER_WRITER):
            if i % _ROUND == 0:
                barrier.wait(timeout=120)
            x = w.started(f"{worker}-job-{i}", attempt=i)
            w.ended(x, "failed", detail=f"{worker}:{i}:" + "x" * 1000)


def test_two_writer_processes_appending_to_one_file_leave_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_append_many, args=(str(path), f"w{n}", barrier)) for n in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)  # a bound on a hung child only; the writes take well under 1 s
        assert p.exitcode == 0
    log = read_probe(path)
    assert log.torn == ()
    runs = log.executions()
    assert len(runs) == 2 * _PER_WRITER
    for worker in ("w1", "w2"):
        mine = [r for r in runs if r.worker == worker]
        assert [r.attempt for r in mine] == list(range(_PER_WRITER))
        assert all(r.outcome == "failed" for r in mine)
    for line in path.read_text().splitlines():
        VALIDATOR.validate(json.loads(line))
    # in file order, the two processes' lines interleave (the barrier makes it so)
    in_file = [s.worker for s in log.starts]
    assert in_file != sorted(in_file) and in_file != sorted(in_file, reverse=True)
