"""What the claim-throughput benchmarks share (``pg_throughput.py``, ``redis_throughput.py``).

- **The runner**: N workers — forked processes (:func:`run_processes`) or threads of this
  process (:func:`run_threads`) — each opens its own :class:`Client`, runs warm-up cycles,
  then runs claim + complete cycles through a timed window that starts for all of them
  at once; only the tasks a cycle completed inside the window count.
- **The cells**: a :class:`Cell` holds one (workers, batch) cell's rates, per side and
  round, and the ratios of one side to another.
- **The bench**: a :class:`Bench` warms each side up unrecorded, then runs every cell
  round by round, who goes first rotating cell by cell and round by round (drift in the
  load of a shared machine spreads over all sides); each measurement runs in a fresh
  namespace, pre-filled, and is repeated with twice the tasks when the queue ran dry.
  A script's subclass says what is specific to its store: its sides, how many tasks to
  pre-fill and how, how one side is measured, and its progress line.
- **The table**: :func:`markdown_table`, the preamble (date, commit, the command that
  reproduces the run) and the Markdown table every script prints at the end, each cell
  with the machine's load while it was measured (``_figures``: load average and cores at
  the start of each of the cell's measurements), then the cells as history rows.
- **The profile**: :meth:`Bench.profile` runs one worker of each side in this process,
  first in interleaved timed slices (its client CPU per task: what the server's CPU does
  not include), then under ``cProfile``, and prints where each worker's time goes.

A script runs from the repository root (``python benchmarks/<script>.py``), which puts
this folder on ``sys.path``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import multiprocessing
import multiprocessing.synchronize
import os
import pstats
import shlex
import shutil
import statistics
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from _figures import Load, command, commit, history_rows, load_now, load_span, today

from rdq_compliance.provision import Server

#: How long (s) a worker may take to connect and warm up, and to report after its window.
READY_TIMEOUT_S = 120
#: A generous rate (tasks/s) of one worker, to size a profile's pre-fill.
PROFILE_RATE = 12_000.0


# ---- the runner ------------------------------------------------------------------------------


class Client(Protocol):
    """One worker's connection to the store under test."""

    def cycle(self, batch: int, end: float) -> int:
        """Claim up to ``batch`` tasks and complete each; return how many of them count:
        those completed by ``end`` (``time.monotonic()``)."""
        ...

    def close(self) -> None: ...


def _timed_worker(
    open_client: Callable[[], Client],
    batch: int,
    duration: float,
    warmup_cycles: int,
    ready: multiprocessing.synchronize.Semaphore | threading.Semaphore,
    go: multiprocessing.synchronize.Event | threading.Event,
    start_at: Callable[[], float],
    report: Callable[[int], None],
) -> None:
    """Open a client, warm up, signal ``ready``; at ``go``, wait for the common start,
    cycle until ``duration`` has passed, and ``report`` the tasks that count."""
    client = open_client()
    try:
        for _ in range(warmup_cycles):
            client.cycle(batch, math.inf)
        ready.release()
        go.wait()
        begin = start_at()
        end = begin + duration
        monotonic, cycle = time.monotonic, client.cycle
        while monotonic() < begin:
            pass
        done = 0
        while True:
            done += cycle(batch, end)
            if monotonic() >= end:
                break
        report(done)
    finally:
        client.close()


def _process_main(
    open_client: Callable[[], Client],
    batch: int,
    duration: float,
    warmup_cycles: int,
    ready: multiprocessing.synchronize.Semaphore,
    go: multiprocessing.synchronize.Event,
    start: multiprocessing.sharedctypes.Synchronized,  # type: ignore[name-defined]
    results: multiprocessing.Queue,  # type: ignore[type-arg]
) -> None:
    try:
        _timed_worker(
            open_client,
            batch,
            duration,
            warmup_cycles,
            ready,
            go,
            lambda: float(start.value),
            lambda n: results.put(n),
        )
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {exc}")
        ready.release()
        raise


def run_processes(
    open_client: Callable[[], Client],
    workers: int,
    batch: int,
    duration: float,
    *,
    warmup_cycles: int,
    who: str,
) -> int:
    """Tasks completed within ``duration`` by ``workers`` forked processes, each with its
    own client from ``open_client`` (picklable where processes are spawned: a
    module-level function or a ``functools.partial`` of one). ``who`` names the workers
    in the error raised when one fails or does not get ready in time."""
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    start = ctx.Value("d", 0.0)
    results: multiprocessing.Queue[int | str] = ctx.Queue()
    procs = [
        ctx.Process(
            target=_process_main,
            args=(open_client, batch, duration, warmup_cycles, ready, go, start, results),
            daemon=True,
        )
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            if not ready.acquire(timeout=READY_TIMEOUT_S):
                raise RuntimeError(f"a {who} worker did not get ready in {READY_TIMEOUT_S} s")
        start.value = time.monotonic() + 0.05
        go.set()
        got = [results.get(timeout=duration + READY_TIMEOUT_S) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    failures = [g for g in got if isinstance(g, str)]
    if failures:
        raise RuntimeError(f"{who} worker failed: {failures[0]}")
    return sum(int(g) for g in got)


def run_threads(
    open_client: Callable[[], Client],
    workers: int,
    batch: int,
    duration: float,
    *,
    warmup_cycles: int,
) -> int:
    """Tasks completed within ``duration`` by ``workers`` threads of this process (one
    GIL), each with its own client; a worker's error is raised here."""
    ready = threading.Semaphore(0)
    go = threading.Event()
    start = [0.0]
    got: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def main() -> None:
        def add(n: int) -> None:
            with lock:
                got.append(n)

        try:
            _timed_worker(
                open_client, batch, duration, warmup_cycles, ready, go, lambda: start[0], add
            )
        except BaseException as exc:
            errors.append(exc)
            ready.release()

    threads = [threading.Thread(target=main, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for _ in threads:
        ready.acquire()
    start[0] = time.monotonic() + 0.05
    go.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(got)


# ---- the cells and the bench -----------------------------------------------------------------


@dataclass
class Cell:
    """One (workers, batch) cell: its rates (tasks/s) per side, one per round."""

    workers: int
    batch: int
    rates: dict[str, list[float]] = field(default_factory=dict)
    #: The machine's load at the start of each of the cell's measurements.
    loads: list[Load] = field(default_factory=list)

    @property
    def load(self) -> str:
        """``"load 2.1-4.3 on 2 cores"``: the 1-minute load over the cell's measurements."""
        return load_span(self.loads)

    def mean(self, side: str) -> float | None:
        got = self.rates.get(side)
        return statistics.mean(got) if got else None

    def ratio(self, side: str, base: str) -> float | None:
        """``side`` over ``base``, summed over the rounds (each round ran both)."""
        mine, theirs = self.rates.get(side), self.rates.get(base)
        return sum(mine) / sum(theirs) if mine and theirs else None

    def round_ratios(self, side: str, base: str) -> list[float]:
        """``side`` over ``base`` round by round, lowest first."""
        return sorted(
            a / b for a, b in zip(self.rates.get(side, []), self.rates.get(base, []), strict=False)
        )


class Bench(ABC):
    """Runs every cell of ``args.workers`` x ``args.batches`` for ``args.rounds`` rounds,
    after ``args.warmup`` seconds of unrecorded runs of each side, each measurement
    ``args.duration`` seconds long. A subclass sets :attr:`server` and fills in the
    abstract methods: what its store makes of a side."""

    server: Server

    def __init__(self, args: argparse.Namespace, tmp_prefix: str) -> None:
        self.args = args
        self.duration: float = args.duration
        #: The best rate measured so far, by (side, batch).
        self.best: dict[tuple[str, int], float] = {}
        self.tmp = Path(tempfile.mkdtemp(prefix=tmp_prefix))

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- what a store's bench says -----------------------------------------------------------

    @abstractmethod
    def sides(self, cell: Cell) -> Sequence[str]:
        """The sides measured in ``cell``, in order (the bench rotates them)."""

    @abstractmethod
    def warmup_sides(self) -> Sequence[str]:
        """The sides warmed up before the first measurement, in order."""

    @abstractmethod
    def prefill(self, side: str, workers: int, batch: int, previous: int | None) -> int:
        """How many tasks to pre-fill for a measurement; ``previous`` is what the
        measurement before it in the same cell used (``None`` for a cell's first)."""

    @abstractmethod
    def fill(self, namespace: str, tasks: int) -> None:
        """``tasks`` due PENDING tasks in a fresh ``namespace``."""

    @abstractmethod
    def once(self, side: str, namespace: str, workers: int, batch: int, tasks: int) -> float:
        """Tasks/s of one measurement of ``side`` in the filled ``namespace``."""

    @abstractmethod
    def pending(self, namespace: str) -> int:
        """PENDING tasks left in ``namespace`` (none: the queue ran dry)."""

    @abstractmethod
    def progress(self, rnd: int, cell: Cell, side: str, rate: float) -> str:
        """The line printed after each measurement (``rnd`` counts from 0)."""

    # -- the bench ---------------------------------------------------------------------------

    def best_rate(self, batch: int, side: str | None = None) -> float:
        """The best rate measured so far at ``batch``, of ``side`` (or of any side)."""
        return max(
            (r for (s, b), r in self.best.items() if b == batch and (side is None or s == side)),
            default=0.0,
        )

    def measure(self, side: str, workers: int, batch: int, tasks: int) -> tuple[float, int]:
        """(tasks/s, tasks pre-filled) of one measurement in a fresh namespace; repeated
        with twice the tasks while the queue runs dry."""
        while True:
            namespace = self.server.create_namespace()
            try:
                self.fill(namespace, tasks)
                rate = self.once(side, namespace, workers, batch, tasks)
                pending = self.pending(namespace)
            finally:
                self.server.drop_namespace(namespace)
            if pending > 0:
                key = (side, batch)
                self.best[key] = max(self.best.get(key, 0.0), rate)
                return rate, tasks
            tasks *= 2
            print(f"    (the queue ran dry; again with {tasks} tasks)", flush=True)

    def warm_up(self) -> None:
        """Unrecorded runs of each side first (4 workers, batch 1), so that no
        measurement meets a cold server (empty caches, first connections of the run)."""
        seconds = self.args.warmup
        if seconds <= 0:
            return
        saved, self.duration = self.duration, seconds
        try:
            for side in self.warmup_sides():
                self.measure(side, 4, 1, self.prefill(side, 4, 1, None))
        finally:
            self.duration = saved
            self.best.clear()
        print(f"  (warmed up: {seconds:g} s of each side, not recorded)", flush=True)

    def run(self) -> list[Cell]:
        cells = [Cell(w, b) for b in self.args.batches for w in self.args.workers]
        self.warm_up()
        for rnd in range(self.args.rounds):
            for i, cell in enumerate(cells):
                sides = list(self.sides(cell))
                # Rotate who goes first, round by round and cell by cell (drift cancels).
                shift = (rnd + i) % len(sides)
                tasks: int | None = None
                for side in sides[shift:] + sides[:shift]:
                    cell.loads.append(load_now())
                    tasks = self.prefill(side, cell.workers, cell.batch, tasks)
                    rate, tasks = self.measure(side, cell.workers, cell.batch, tasks)
                    cell.rates.setdefault(side, []).append(rate)
                    print(self.progress(rnd, cell, side, rate), flush=True)
        return cells

    # -- the profile -------------------------------------------------------------------------

    @abstractmethod
    def client_factory(self, side: str, namespace: str) -> Callable[[], Client]:
        """What opens one worker's client of ``side`` (a process side) in ``namespace``."""

    def profile(self, sides: Sequence[str], batch: int, top: int) -> str:
        """One worker of each of ``sides`` in this process, each in its own fresh filled
        namespace: ``rounds`` timed slices of ``duration`` seconds per side, interleaved
        (who goes first rotates), giving tasks/s, wall and client CPU (user and system) per
        task — the worker's alone: the server runs elsewhere — then one slice per side under
        ``cProfile`` (its ``top`` functions by own time and by cumulative time)."""
        rounds = max(1, self.args.rounds)
        out = [
            f"profile: one worker per side, batch {batch}, {rounds} interleaved timed "
            f"slice(s) of {self.duration:g} s per side, then one under cProfile; {load_now()}"
        ]
        namespaces: list[str] = []
        clients: dict[str, Client] = {}
        runs: dict[str, Profiled] = {}
        try:
            for side in sides:
                tasks = int(PROFILE_RATE * self.duration * (rounds + 1) * 1.5) + 64 * batch
                namespace = self.server.create_namespace()
                namespaces.append(namespace)
                self.fill(namespace, tasks)
                clients[side] = client = self.client_factory(side, namespace)()
                for _ in range(20):
                    client.cycle(batch, math.inf)
                runs[side] = Profiled(0, 0, 0.0, 0.0, "")
            for rnd in range(rounds):
                shift = rnd % len(sides)
                for side in [*sides[shift:], *sides[:shift]]:
                    runs[side].add(*_loop(clients[side], batch, self.duration))
            for side in sides:
                profiler = cProfile.Profile()
                profiler.enable()
                _loop(clients[side], batch, self.duration)
                profiler.disable()
                runs[side].stats = _stats_text(profiler, top)
            dry = [s for s, ns in zip(sides, namespaces, strict=True) if self.pending(ns) == 0]
        finally:
            for client in clients.values():
                client.close()
            for namespace in namespaces:
                self.server.drop_namespace(namespace)
        if dry:
            out.append(f"(the queue ran dry for {', '.join(dry)}: its figures are too low)")
        for side in sides:
            out += ["", f"== {side}: {runs[side].figures}", runs[side].stats]
        out += ["", f"summary (timed slices, no profiler; {load_now()} at the end):"]
        out += [f"  {side:<10} {runs[side].figures}" for side in sides]
        return "\n".join(out)


@dataclass
class Profiled:
    """One worker's timed slices (summed) and its profile."""

    tasks: int
    cycles: int
    wall: float
    cpu: float
    stats: str

    def add(self, tasks: int, cycles: int, wall: float, cpu: float) -> None:
        self.tasks += tasks
        self.cycles += cycles
        self.wall += wall
        self.cpu += cpu

    @property
    def figures(self) -> str:
        per = max(self.tasks, 1)
        return (
            f"{self.tasks / self.wall:,.0f} tasks/s; per task {self.wall / per * 1e6:.1f} µs wall, "
            f"{self.cpu / per * 1e6:.1f} µs client CPU ({self.cpu / self.wall:.0%} of the wall; "
            f"{self.cycles:,} cycles, {self.tasks:,} tasks)"
        )


def _loop(client: Client, batch: int, seconds: float) -> tuple[int, int, float, float]:
    """``seconds`` of ``client``'s cycles: (tasks, cycles, wall, CPU of this process)."""
    tasks = cycles = 0
    cycle, monotonic = client.cycle, time.monotonic
    wall, cpu = time.perf_counter(), time.process_time()
    end = monotonic() + seconds
    while monotonic() < end:
        tasks += cycle(batch, math.inf)
        cycles += 1
    return tasks, cycles, time.perf_counter() - wall, time.process_time() - cpu


def _stats_text(profiler: cProfile.Profile, top: int) -> str:
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return "\n".join(ln for ln in text.getvalue().splitlines() if ln.strip())


# ---- the command line and the table ----------------------------------------------------------


def int_list(text: str) -> list[int]:
    """``"1,4,16"`` as ``[1, 4, 16]``."""
    return [int(x) for x in text.split(",") if x.strip()]


def add_cell_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers`` and ``--batches``: the cells measured."""
    parser.add_argument("--workers", type=int_list, default=[1, 4, 16])
    parser.add_argument("--batches", type=int_list, default=[1, 32])
    parser.add_argument(
        "--profile",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=None,
        metavar="SIDES",
        help="instead of the cells: profile one worker of each of these sides (comma-"
        "separated) at each of --batches: --rounds interleaved timed slices of --duration s "
        "per side, then one slice each under cProfile",
    )
    parser.add_argument("--top", type=int, default=25, help="functions a profile shows")


def markdown_table(
    where: str,
    args: argparse.Namespace,
    how: str,
    notes: Sequence[str],
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[str]],
) -> str:
    """The date, commit and command of the run, the server line, ``"<duration> s per
    measurement, <rounds> round(s), <how>"``, the ``notes``, then a Markdown table of
    ``columns`` (title, alignment cell such as ``"--:"``) and ``rows``."""
    lines = [
        f"measured {today()} at commit {commit()}: {command()}",
        f"server: {where}",
        f"{args.duration:g} s per measurement, {args.rounds} round(s), {how}",
        *notes,
        "",
        "| " + " | ".join(title for title, _ in columns) + " |",
        "|" + "|".join(align for _, align in columns) + "|",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def cell_history(cells: Sequence[Cell], figure: Callable[[Cell], str]) -> str:
    """The cells as history rows for ``BENCHMARKS.md`` (``figure`` says what a cell's
    figure is), each with its load and the command that measures that cell alone."""
    base = _without_cells(command())
    return history_rows(
        [(figure(c), c.load, f"{base} --workers {c.workers} --batches {c.batch}") for c in cells]
    )


def _without_cells(cmd: str) -> str:
    """``cmd`` without its ``--workers`` / ``--batches`` options (a cell's own replace them)."""
    words = shlex.split(cmd)
    kept: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("--workers", "--batches"):
            skip = True
            continue
        if w.startswith(("--workers=", "--batches=")):
            continue
        kept.append(w)
    return shlex.join(kept)
