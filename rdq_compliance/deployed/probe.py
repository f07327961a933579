"""The probe's journal: what a deployed worker's handler writes each time it runs a job.

A deployed campaign runs a queue library's own worker processes; the job handler they
run is the kit's *probe*. The probe appends one line when an execution of the handler
starts and one when it ends. The lines are the only record of what ran, where and when,
so they are written the same way whatever the language of the worker: this docstring,
``probe.schema.json`` beside this module (one line's JSON Schema) and the contract's
section 9 (``contract.md#9-deployed-systems``) say exactly what a writer must do.

The format, version 1
=====================

A journal is a file of UTF-8 JSON lines: one JSON object, then ``\\n``, per line; no
blank line, no other text. Each object is one of two kinds.

An execution starts (written before the handler's work begins)::

    {"v": 1, "kind": "start", "exec": "8c1f...", "job": "job-17", "worker": "w2",
     "pid": 4121, "t": 1767225600.125, "attempt": 3}

An execution ends (written after the handler's work, before it returns or raises)::

    {"v": 1, "kind": "end", "exec": "8c1f...", "t": 1767225601.5, "outcome": "succeeded"}

=========== ========================================================================
``v``       the format version, the integer ``1``
``kind``    ``"start"`` or ``"end"``
``exec``    the execution id: a non-empty string unique to this run of the handler
            (the Python writer uses 32 hex digits of a random UUID); an end line
            repeats its start line's id
``t``       wall-clock time read from the worker's own clock when the line is
            written, in seconds since the Unix epoch, a JSON number (fractions of a
            second kept); never a monotonic clock, whose origin differs per process
``job``     start only: the job's id as the library names it, a non-empty string
``worker``  start only: the worker's name as the harness gave it (``RDQ_PROBE_WORKER``),
            the same for every process of that worker
``pid``     start only: the OS process id of the process running the handler, a
            positive integer (tells which part of a worker ran it)
``attempt`` start only, optional: the attempt number the library gives the handler
            (an integer >= 0, as the library counts), or ``null``/absent if it gives none
``outcome`` end only: ``"succeeded"`` (the handler returned normally), ``"failed"``
            (it raised, or reported failure), ``"retry-asked"`` (it asked the library
            for a retry), ``"held"`` (it asked the library to hold the job, e.g. park
            it for a human)
``detail``  end only, optional: a short string (an error's text)
=========== ========================================================================

No other key is allowed. The order of keys does not matter.

How a line is written: the file is opened for appending (``O_APPEND``, created if
missing), and each line, newline included, is handed to the operating system in **one**
``write(2)`` call of at most :data:`MAX_LINE` bytes, before the handler goes on (no
buffering in the process). A process killed by SIGKILL thus loses at most the line it was
writing; several processes may append to one file and their lines stay whole. The line
is not ``fsync``-ed: the journal survives the death of the writer, not of the machine.

Where: the harness passes the file in ``RDQ_PROBE_PATH`` and the worker's name in
``RDQ_PROBE_WORKER`` (:meth:`ProbeWriter.from_env`).

How it is read (:func:`read_probe`): a line that is not a JSON object ending in a newline
is *torn* (its writer was killed while writing it): it is reported in
:attr:`ProbeLog.torn`, never an error. A whole JSON line that breaks the format, an end
without its start, or two lines of one kind for one execution are a writer's bug:
:class:`ProbeFormatError`.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "MAX_LINE",
    "OUTCOMES",
    "PATH_ENV",
    "SCHEMA",
    "VERSION",
    "WORKER_ENV",
    "End",
    "Execution",
    "Outcome",
    "ProbeFormatError",
    "ProbeLog",
    "ProbeWriter",
    "Start",
    "Torn",
    "line_problems",
    "read_probe",
]

VERSION = 1
#: The longest line (bytes, newline included) a writer hands over in one ``write(2)``.
MAX_LINE = 4096
#: The environment variables the harness sets for a worker's probe.
PATH_ENV = "RDQ_PROBE_PATH"
WORKER_ENV = "RDQ_PROBE_WORKER"
#: One line's JSON Schema.
SCHEMA = Path(__file__).with_name("probe.schema.json")

Outcome = Literal["succeeded", "failed", "retry-asked", "held"]
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed", "retry-asked", "held")

_START_KEYS = {"v", "kind", "exec", "t", "job", "worker", "pid"}
_START_OPTIONAL = {"attempt"}
_END_KEYS = {"v", "kind", "exec", "t", "outcome"}
_END_OPTIONAL = {"detail"}


class ProbeFormatError(ValueError):
    """A whole line that breaks the probe's format, or lines that do not pair up."""


@dataclass(frozen=True)
class Start:
    """An execution's start line."""

    exec: str
    job: str
    worker: str
    pid: int
    t: float
    attempt: int | None = None


@dataclass(frozen=True)
class End:
    """An execution's end line."""

    exec: str
    t: float
    outcome: Outcome
    detail: str | None = None


@dataclass(frozen=True)
class Torn:
    """A line that is not a whole JSON object: its writer died while writing it."""

    path: str
    line: int  # 1-based
    last: bool  # the file's last line
    text: str  # its first 200 characters


@dataclass(frozen=True)
class Execution:
    """One run of the handler: its start, and its end if one was written."""

    exec: str
    job: str
    worker: str
    pid: int
    started: float
    attempt: int | None = None
    ended: float | None = None
    outcome: Outcome | None = None


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: object) -> bool:
    """An integer as JSON has it: ``3`` or ``3.0`` (a JSON number with no fraction)."""
    return _is_number(x) and float(x).is_integer()  # type: ignore[arg-type]


def _is_id(x: object) -> bool:
    return isinstance(x, str) and x != ""


def line_problems(obj: object) -> list[str]:
    """What makes ``obj`` (one parsed line) not a line of the format; ``[]`` if it is one.
    The same checks as ``probe.schema.json``, by hand (the kit does not depend on a
    JSON Schema validator)."""
    if not isinstance(obj, dict):
        return [f"a line is a JSON object, not {type(obj).__name__}"]
    out: list[str] = []
    v = obj.get("v")
    if not (_is_int(v) and v == VERSION):
        out.append(f"'v' is {VERSION}, not {v!r}")
    kind = obj.get("kind")
    if kind == "start":
        required, optional = _START_KEYS, _START_OPTIONAL
    elif kind == "end":
        required, optional = _END_KEYS, _END_OPTIONAL
    else:
        return [*out, f"'kind' is 'start' or 'end', not {kind!r}"]
    missing = sorted(required - obj.keys())
    extra = sorted(obj.keys() - required - optional)
    if missing:
        out.append(f"{kind} line lacks {missing}")
    if extra:
        out.append(f"{kind} line has unknown keys {extra}")
    checks: list[tuple[str, Callable[[object], bool], str]] = [
        ("exec", _is_id, "a non-empty string"),
        ("t", lambda x: _is_number(x) and x >= 0, "a number of seconds since the epoch"),
    ]
    if kind == "start":
        checks += [
            ("job", _is_id, "a non-empty string"),
            ("worker", _is_id, "a non-empty string"),
            ("pid", lambda x: _is_int(x) and x > 0, "a positive integer"),
            ("attempt", lambda x: x is None or (_is_int(x) and x >= 0), "null or an integer >= 0"),
        ]
    else:
        checks += [
            ("outcome", lambda x: x in OUTCOMES, f"one of {list(OUTCOMES)}"),
            ("detail", lambda x: isinstance(x, str), "a string"),
        ]
    for key, ok, what in checks:
        if key in obj and not ok(obj[key]):
            out.append(f"{key!r} is {what}, not {obj[key]!r}")
    return out


class ProbeWriter:
    """Appends a worker's probe lines to ``path``: one ``write(2)`` per whole line, on a
    file opened ``O_APPEND``. ``clock`` gives the wall-clock time (``time.time``)."""

    def __init__(
        self, path: str | os.PathLike[str], worker: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        if not worker:
            raise ValueError("a probe writer needs the worker's name")
        self.path = Path(path)
        self.worker = worker
        self._clock = clock
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProbeWriter:
        """The writer the harness asked for: ``RDQ_PROBE_PATH`` and ``RDQ_PROBE_WORKER``."""
        env = os.environ if env is None else env
        missing = [k for k in (PATH_ENV, WORKER_ENV) if not env.get(k)]
        if missing:
            raise KeyError(f"the probe needs {missing} in its environment")
        return cls(env[PATH_ENV], env[WORKER_ENV])

    def _write(self, obj: dict[str, Any]) -> None:
        problems = line_problems(obj)
        if problems:
            raise ProbeFormatError("; ".join(problems))
        data = (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        if len(data) > MAX_LINE:
            raise ProbeFormatError(f"a probe line is at most {MAX_LINE} bytes, not {len(data)}")
        written = os.write(self._fd, data)
        if written != len(data):  # a regular file takes a whole small write, or fails
            raise OSError(f"{self.path}: wrote {written} of {len(data)} bytes of a probe line")

    def started(self, job: str, attempt: int | None = None) -> str:
        """Journal that an execution of ``job`` starts in this process; its execution id."""
        exec_id = uuid.uuid4().hex
        line: dict[str, Any] = {
            "v": VERSION, "kind": "start", "exec": exec_id, "job": job,
            "worker": self.worker, "pid": os.getpid(), "t": self._clock(),
        }  # fmt: skip
        if attempt is not None:
            line["attempt"] = attempt
        self._write(line)
        return exec_id

    def ended(self, exec_id: str, outcome: Outcome, detail: str | None = None) -> None:
        """Journal that execution ``exec_id`` ends with ``outcome``."""
        line: dict[str, Any] = {
            "v": VERSION, "kind": "end", "exec": exec_id, "t": self._clock(), "outcome": outcome,
        }  # fmt: skip
        if detail is not None:
            line["detail"] = detail[:1000]
        self._write(line)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ProbeWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ProbeLog:
    """What the journals hold: start and end lines in file order, and the torn lines."""

    starts: tuple[Start, ...]
    ends: tuple[End, ...]
    torn: tuple[Torn, ...]

    def executions(self) -> list[Execution]:
        """Every execution, its start paired with its end (by execution id), in order of
        start time. An end without a start, or a second start or end of one execution,
        is :class:`ProbeFormatError`."""
        starts: dict[str, Start] = {}
        for s in self.starts:
            if s.exec in starts:
                raise ProbeFormatError(f"execution {s.exec!r} started twice")
            starts[s.exec] = s
        ends: dict[str, End] = {}
        for e in self.ends:
            if e.exec in ends:
                raise ProbeFormatError(f"execution {e.exec!r} ended twice")
            if e.exec not in starts:
                raise ProbeFormatError(f"execution {e.exec!r} ended but never started")
            ends[e.exec] = e
        out = []
        for s in starts.values():
            e = ends.get(s.exec)
            ended, outcome = (e.t, e.outcome) if e else (None, None)
            out.append(Execution(s.exec, s.job, s.worker, s.pid, s.t, s.attempt, ended, outcome))
        return sorted(out, key=lambda x: (x.started, x.exec))


#: What a line that is not whole JSON parses to.
_TORN = object()


def _record(obj: dict[str, Any]) -> Start | End:
    if obj["kind"] == "start":
        attempt = obj.get("attempt")
        return Start(
            obj["exec"], obj["job"], obj["worker"], int(obj["pid"]), float(obj["t"]),
            None if attempt is None else int(attempt),
        )  # fmt: skip
    return End(obj["exec"], float(obj["t"]), obj["outcome"], obj.get("detail"))


def read_probe(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> ProbeLog:
    """Read one journal file or several: their lines as typed records, torn lines apart."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    starts: list[Start] = []
    ends: list[End] = []
    torn: list[Torn] = []
    for path in paths:
        raw = Path(path).read_bytes()
        lines = raw.split(b"\n")
        # a file that ends in a newline splits into a last empty piece: not a line
        complete = lines[:-1]
        tail = lines[-1]
        numbered = [(i + 1, line, True) for i, line in enumerate(complete)]
        if tail:
            numbered.append((len(complete) + 1, tail, False))
        for n, line, whole in numbered:
            last = n == len(numbered)
            try:
                obj = json.loads(line.decode("utf-8")) if whole else _TORN
            except (UnicodeDecodeError, json.JSONDecodeError):
                obj = _TORN
            if obj is _TORN:
                text = line.decode("utf-8", "replace")[:200]
                torn.append(Torn(str(path), n, last, text))
                continue
            problems = line_problems(obj)
            if problems:
                raise ProbeFormatError(f"{path}:{n}: " + "; ".join(problems))
            record = _record(obj)
            (starts if isinstance(record, Start) else ends).append(record)  # type: ignore[arg-type]
    return ProbeLog(tuple(starts), tuple(ends), tuple(torn))
