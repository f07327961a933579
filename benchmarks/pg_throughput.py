#!/usr/bin/env python
"""Claim + complete throughput of ``PostgresStorage`` against a ``pgbench`` baseline.

For each worker count (default 1, 4, 16) and batch size (default 1, 32) this measures,
side by side in one run, interleaved (who goes first rotates cell by cell and round by
round, so drift in the load of a shared machine spreads over all sides):

* **backend, processes**: N worker processes (forked), each with its own
  ``PostgresStorage`` (a pool of one connection), looping ``claim_due(queue, batch,
  lease)`` then ``complete(id, token)`` for every claim, for ``--duration`` seconds;
* **backend, threads**: the same with N threads of this process (one GIL: on a machine
  with few cores this leaves the server more CPU; skipped for N = 1, where it is the same
  as one process);
* **pgbench**: ``pgbench -n -M prepared -c N -j N -T duration`` with a custom script of the
  SQL the backend executes, taken from ``rdq_postgres.queries``: the claim statement the
  backend runs for fresh tasks (``Queries.claim_fresh``; its final ``SELECT`` replaced by
  one that returns the claimed ids and tokens as ``id_1, token_1, …`` columns for
  ``\\gset``: pgbench can store neither several rows nor a ``?column?``), then the
  complete statement once per claimed task, verbatim. (For an ``rdq_postgres`` from before
  the fresh claim, its one claim statement, made to return the same columns.)

Only tasks/s inside the timed window count: each backend worker opens its storage and runs
a few warm-up cycles (psycopg prepares a statement on its 5th run) before the clock
starts; pgbench's own figure excludes its connection time. Before the first measurement,
each side runs unrecorded for ``--warmup`` seconds (the first run on a fresh server is
slower, whoever makes it). The pgbench rate is its tps
times the tasks completed per transaction (counted in the namespace afterwards).

Every measurement runs in a fresh namespace (schema), pre-filled with enough due PENDING
tasks as ``enqueue`` writes them (one ``INSERT … SELECT``, then ``VACUUM ANALYZE`` of the
tasks table; the attempts table is left alone, as in a new namespace), and dropped
afterwards. A measurement whose queue ran dry is repeated with twice the tasks.

Usage::

    python benchmarks/pg_throughput.py                   # 10 s per measurement, 2 rounds
    python benchmarks/pg_throughput.py --quick           # 3 s, 1 round
    python benchmarks/pg_throughput.py --local           # a private fsync=off server
    python benchmarks/pg_throughput.py --duration 5 --rounds 3 --workers 1,4 --batches 32
    python benchmarks/pg_throughput.py --local --profile process,psycopg --batches 1,32

``--profile`` measures no cells: it runs one worker of each side given (``process``: the
backend; ``psycopg``: the bare loop) in this process, timed (tasks/s, wall and client CPU
per task), then under ``cProfile``, and prints where its time goes.

Every run prints first the date, commit, command and load (``_figures.header``), and in
the table the load while each cell was measured; at the end, each cell as a history row
for ``BENCHMARKS.md``.

The server is ``--dsn``, else ``RDQ_POSTGRES_DSN`` / ``RDQ_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``; or, with ``--local``, a private server the
script starts from local binaries like the kit's local rung (``fsync=off``) and removes.

The runner, the cells, the interleaving and the table are ``_harness.py``'s (shared with
``redis_throughput.py``); this script holds what is PostgreSQL's: its clients, the
pre-fill, the pgbench side and the table's columns.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
from _figures import header
from _harness import (
    Bench,
    Cell,
    add_cell_arguments,
    cell_history,
    markdown_table,
    run_processes,
    run_threads,
)
from psycopg import sql
from rdq_postgres.queries import LEASE_EXPIRED_MESSAGE, Queries
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_core.model import LEASE_EXPIRED_ERROR

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PGBENCH_CANDIDATES = ("/usr/lib/postgresql/15/bin/pgbench", "pgbench")
QUEUE = "bench"
LEASE = timedelta(minutes=5)
#: claim + complete cycles each backend worker runs before the clock starts (psycopg
#: prepares a statement on its 5th execution; pgbench -M prepared at once).
WARMUP_CYCLES = 8
#: First guess of the best rate (tasks/s) per batch size, to size the pre-fill; then the
#: best rate measured so far is used.
RATE_GUESS = {1: 5_000.0}
RATE_GUESS_BATCHED = 40_000.0
#: Where the fresh claim's final query starts (replaced for pgbench, see the module doc).
FINAL_SELECT = "\nSELECT * FROM claimed"
#: The targets the throughput is held to.
SINGLE_TARGET_RATIO = 0.70
#: The backend (processes) at >= 90 % of the bare psycopg loop in every cell.
BARE_TARGET_RATIO = 0.90
BATCHED_TARGET_RATE = 10_000.0


# ---- namespaces ------------------------------------------------------------------------


def fill(dsn: str, namespace: str, count: int) -> None:
    """``count`` due PENDING tasks, as ``enqueue`` writes them, in ``namespace``."""
    tasks = sql.Identifier(namespace, "tasks")
    with psycopg.connect(dsn, autocommit=True, application_name="rdq-bench:fill") as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, queue, handler, payload, headers, status, attempt_count,"
                " redrive_count, next_attempt_at, due_at, created_at)"
                " SELECT 'task-' || g, %s, 'noop', ''::bytea, '{{}}'::jsonb, 'PENDING', 0, 0,"
                " now(), now(), now() FROM generate_series(1, %s) g"
            ).format(tasks),
            (QUEUE, count),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(tasks))


def server_settings(dsn: str) -> str:
    """The server's version and the settings a commit's cost depends on."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        shown = [f"PostgreSQL {conn.info.server_version}"]
        for name in ("fsync", "synchronous_commit"):
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            shown.append(f"{name}={row[0] if row else '?'}")
    return ", ".join(shown)


def counts(dsn: str, namespace: str) -> tuple[int, int]:
    """(SUCCEEDED, PENDING) tasks of the namespace."""
    with psycopg.connect(dsn, autocommit=True, application_name="rdq-bench:count") as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE status = 'SUCCEEDED'),"
                " count(*) FILTER (WHERE status = 'PENDING') FROM {}"
            ).format(sql.Identifier(namespace, "tasks"))
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# ---- the backend side ------------------------------------------------------------------


class _Cycles(ABC):
    """One claim + complete cycle over a client's ``claim_due`` and ``complete``."""

    @abstractmethod
    def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[tuple[str, str]]:
        """Claim up to ``limit`` due tasks: their ids and tokens."""

    @abstractmethod
    def complete(self, task_id: str, token: str) -> None:
        """Complete one claimed task."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""

    def cycle(self, batch: int, end: float) -> int:
        """Claim up to ``batch`` tasks and complete each; count those completed by ``end``."""
        done = 0
        complete, monotonic = self.complete, time.monotonic
        for task_id, token in self.claim_due(QUEUE, batch, LEASE):
            complete(task_id, token)
            if monotonic() <= end:
                done += 1
        return done


class _Bare(_Cycles):
    """The floor of any Python client: the backend's two statements on a plain psycopg
    connection (one reused cursor, statements as bytes, the same parameters), without
    rdq's layers (validation, pool, row conversion)."""

    def __init__(self, dsn: str, namespace: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name="rdq-bench:bare")
        q = Queries(namespace)
        self.claim_sql = q.claim_fresh.as_bytes(self.conn)
        self.complete_sql = q.finish["complete"].as_bytes(self.conn)
        self.cur = self.conn.cursor()

    def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[tuple[str, str]]:
        params = {"queue": queue, "limit": limit, "lease": lease}
        rows = self.cur.execute(self.claim_sql, params, binary=True).fetchall()
        return [(r[0], r[11]) for r in rows if r[0] is not None]

    def complete(self, task_id: str, token: str) -> None:
        params = {
            "id": task_id,
            "token": token,
            "outcome": "SUCCESS",
            "error_type": None,
            "error_message": None,
            "error_detail": None,
        }
        self.cur.execute(self.complete_sql, params).fetchone()

    def close(self) -> None:
        self.conn.close()


class _Storage(_Cycles):
    """The backend: ``PostgresStorage.claim_due`` and ``complete``."""

    def __init__(self, dsn: str, namespace: str) -> None:
        self.storage = PostgresStorage(dsn, namespace, min_size=1, max_size=1)

    def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[tuple[str, str]]:
        return [(c.task.id, c.token) for c in self.storage.claim_due(queue, limit, lease)]

    def complete(self, task_id: str, token: str) -> None:
        self.storage.complete(task_id, token)

    def close(self) -> None:
        self.storage.close()


def _open_client(mode: str, dsn: str, namespace: str) -> _Cycles:
    return _Bare(dsn, namespace) if mode == "psycopg" else _Storage(dsn, namespace)


# ---- the pgbench side ------------------------------------------------------------------


def _pgbench_sql(statement: sql.Composed, conn: psycopg.Connection, values: dict[str, str]) -> str:
    """``statement`` as pgbench text: each ``%(name)s`` becomes ``values[name]``."""
    text = statement.as_string(conn).strip()
    return re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], text)


def pgbench_script(conn: psycopg.Connection, namespace: str, batch: int) -> str:
    """The claim, then ``batch`` completes, as the backend sends them (see the module doc)."""
    q = Queries(namespace)
    columns = ", ".join(
        f"(array_agg(id ORDER BY seq))[{i}] AS id_{i}, (array_agg(token ORDER BY seq))[{i}]"
        f" AS token_{i}"
        for i in range(1, batch + 1)
    )
    if hasattr(q, "claim_fresh"):  # what the backend runs to claim fresh tasks
        claim = _pgbench_sql(
            q.claim_fresh,
            conn,
            {"queue": ":queue", "limit": ":limit::bigint", "lease": ":lease::interval"},
        )
        head, sep, _ = claim.rpartition(FINAL_SELECT)
        wrapped = f"{head}\nSELECT {columns} FROM claimed\n\\gset"
    else:  # an rdq_postgres from before the fresh claim: its one claim statement
        claim = _pgbench_sql(
            q.claim,
            conn,
            {
                "queue": ":queue",
                "limit": ":limit::bigint",
                "lease": ":lease::interval",
                "lease_error": ":lease_error",
                "lease_message": ":lease_message",
            },
        )
        head, sep, update = claim.rpartition("\nUPDATE ")
        wrapped = (
            f"{head}\n, claimed AS (\nUPDATE {update}\n)\nSELECT {columns} FROM claimed\n\\gset"
        )
    if not sep:
        raise RuntimeError("the claim statement has a new shape: update pgbench_script")
    completes = [
        _pgbench_sql(
            q.finish["complete"],
            conn,
            {
                "id": f":id_{i}",
                "token": f":token_{i}",
                "outcome": ":outcome",
                "error_type": "NULL",
                "error_message": "NULL",
                "error_detail": "NULL",
            },
        )
        + ";"
        for i in range(1, batch + 1)
    ]
    return "\n".join([wrapped, *completes]) + "\n"


@dataclass
class PgbenchRun:
    tps: float
    transactions: int


def run_pgbench(
    pgbench: str, dsn: str, script: Path, workers: int, batch: int, duration: float
) -> PgbenchRun:
    argv = [
        pgbench,
        "-n",
        "-M",
        "prepared",
        "-c",
        str(workers),
        "-j",
        str(workers),
        "-T",
        str(max(1, round(duration))),
        "-f",
        str(script),
        "-D",
        f"queue={QUEUE}",
        "-D",
        f"limit={batch}",
        "-D",
        f"lease={int(LEASE.total_seconds())} seconds",
        "-D",
        f"lease_error={LEASE_EXPIRED_ERROR}",
        "-D",
        f"lease_message={LEASE_EXPIRED_MESSAGE}",
        "-D",
        "outcome=SUCCESS",
        dsn,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
    out = done.stdout + done.stderr
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    txns = re.search(r"number of transactions actually processed: (\d+)", out)
    if done.returncode != 0 or tps is None or txns is None:
        raise RuntimeError(f"pgbench failed (exit {done.returncode}):\n{out[-3000:]}")
    return PgbenchRun(float(tps.group(1)), int(txns.group(1)))


# ---- measurements ----------------------------------------------------------------------


SIDES = ("process", "thread", "psycopg", "pgbench")


class PgBench(Bench):
    """The backend's modes and pgbench, on ``--dsn`` or a private ``--local`` server."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, "rdq-bench-")
        if args.local:
            from rdq_postgres.local import start_local_server

            from rdq_compliance.provision.backend import ProvisionRequest

            request = ProvisionRequest(workdir=self.tmp / "server", allow_docker=False)
            self.server = start_local_server(request)
        else:
            self.server = PostgresServer(args.dsn)
        self.dsn: str = self.server.dsn
        self.where = f"{self.server.origin} ({server_settings(self.dsn)})"

    def sides(self, cell: Cell) -> list[str]:
        # One worker is one worker: threads and a process are the same there.
        sides = [
            s
            for s in SIDES
            if s == "pgbench" or (s in self.args.modes and (s != "thread" or cell.workers > 1))
        ]
        if "process" not in sides and cell.workers == 1 and "thread" in self.args.modes:
            sides.insert(0, "thread")
        return sides

    def warmup_sides(self) -> list[str]:
        return ["pgbench", *self.args.modes]

    def prefill(self, side: str, workers: int, batch: int, previous: int | None) -> int:
        """Enough for the best rate so far at ``batch`` (of any side), and every side of
        a cell starts from what the one before it used."""
        if previous is not None:
            return previous
        guess = RATE_GUESS.get(batch, RATE_GUESS_BATCHED)
        rate = max(guess, 1.5 * self.best_rate(batch))
        return int(rate * (self.duration + 1)) + 64 * WARMUP_CYCLES * batch

    def fill(self, namespace: str, tasks: int) -> None:
        fill(self.dsn, namespace, tasks)

    def once(self, side: str, namespace: str, workers: int, batch: int, tasks: int) -> float:
        if side != "pgbench":  # the backend's workers: processes, threads, or bare psycopg
            open_client = functools.partial(_open_client, side, self.dsn, namespace)
            if side == "thread":
                done = run_threads(
                    open_client, workers, batch, self.duration, warmup_cycles=WARMUP_CYCLES
                )
            else:
                done = run_processes(
                    open_client, workers, batch, self.duration,
                    warmup_cycles=WARMUP_CYCLES, who="backend",
                )  # fmt: skip
            return done / self.duration
        script = self.tmp / f"{namespace}.sql"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            script.write_text(pgbench_script(conn, namespace, batch))
        run = run_pgbench(self.args.pgbench, self.dsn, script, workers, batch, self.duration)
        succeeded, _ = counts(self.dsn, namespace)
        return run.tps * (succeeded / run.transactions if run.transactions else 0.0)

    def pending(self, namespace: str) -> int:
        return counts(self.dsn, namespace)[1]

    def client_factory(self, side: str, namespace: str) -> functools.partial[_Cycles]:
        return functools.partial(_open_client, side, self.dsn, namespace)

    def progress(self, rnd: int, cell: Cell, side: str, rate: float) -> str:
        return (
            f"  round {rnd + 1}  workers={cell.workers:<2}  batch={cell.batch:<2}  "
            f"{side:<8} {rate:>9,.0f} tasks/s  ({cell.loads[-1].short} at its start)"
        )


COLUMNS = {
    "process": "backend, processes",
    "thread": "backend, threads",
    "psycopg": "bare psycopg, processes",
}


def _verdict(cell: Cell, side: str) -> str:
    """``rate (ratio; per-round ratios low-high)``, and MISSED where the target is."""
    rate, ratio = cell.mean(side), cell.ratio(side, "pgbench")
    if rate is None or ratio is None:
        return "-"
    rounds = cell.round_ratios(side, "pgbench")
    spread = f"; {rounds[0]:.0%}-{rounds[-1]:.0%}" if len(rounds) > 1 else ""
    met = ratio >= SINGLE_TARGET_RATIO if cell.batch == 1 else rate >= BATCHED_TARGET_RATE
    missed = "" if met or side == "psycopg" else " MISSED"
    return f"{rate:,.0f} ({ratio:.0%}{spread}){missed}"


def _to_bare(cell: Cell) -> str:
    """The backend (processes) over the bare psycopg loop: summed over rounds (lowest-
    highest round, median round), MISSED under :data:`BARE_TARGET_RATIO`."""
    ratio = cell.ratio("process", "psycopg")
    if ratio is None:
        return "-"
    rounds = cell.round_ratios("process", "psycopg")
    spread = (
        f" ({rounds[0]:.0%}-{rounds[-1]:.0%}, median {statistics.median(rounds):.0%})"
        if len(rounds) > 1
        else ""
    )
    return f"{ratio:.0%}{spread}{'' if ratio >= BARE_TARGET_RATIO else ' MISSED'}"


def table(cells: list[Cell], args: argparse.Namespace, where: str) -> str:
    """A Markdown table: pgbench's rate, each backend mode's rate and its ratio to it."""
    modes = [m for m in COLUMNS if m in args.modes]
    to_bare = "process" in modes and "psycopg" in modes
    columns = [
        ("workers", "--------:"),
        ("batch", "------:"),
        ("pgbench tasks/s", "----------------:"),
        *((f"{COLUMNS[m]}: tasks/s (ratio)", ":---") for m in modes),
        *((("backend / bare psycopg", ":---"),) if to_bare else ()),
        ("load while measured", ":---"),
    ]
    rows = [
        [str(c.workers), str(c.batch), f"{c.mean('pgbench') or 0:,.0f}"]
        + [_verdict(c, m) for m in modes]
        + ([_to_bare(c)] if to_bare else [])
        + [c.load]
        for c in cells
    ]
    return markdown_table(
        where,
        args,
        "interleaved; pgbench -n -M prepared -c N -j N; backend: N worker processes or N "
        "threads in one process, each with its own PostgresStorage",
        [
            f"targets: batch 1 >= {SINGLE_TARGET_RATIO:.0%} of pgbench at the same concurrency; "
            f"batch 32 >= {BATCHED_TARGET_RATE:,.0f} tasks/s; backend (processes) >= "
            f"{BARE_TARGET_RATIO:.0%} of the bare psycopg loop in every cell",
            "load: the 1-minute load average at the start of each of the cell's measurements "
            "(the benchmark's own workers and server included)",
            "cells: mean tasks/s (sum over rounds / pgbench's sum; lowest-highest round ratio)",
        ],
        columns,
        rows,
    )


def _history_figure(cell: Cell) -> str:
    parts = [f"PostgreSQL, {cell.workers} x batch {cell.batch}"]
    if cell.ratio("process", "psycopg") is not None:
        parts.append(f"backend / bare psycopg {cell.ratio('process', 'psycopg'):.0%}")
    for side in ("process", "thread"):
        ratio = cell.ratio(side, "pgbench")
        if ratio is not None:
            parts.append(f"{COLUMNS[side]} / pgbench {ratio:.0%} ({cell.mean(side):,.0f} tasks/s)")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("RDQ_POSTGRES_DSN") or os.environ.get("RDQ_DSN") or DEFAULT_DSN,
    )
    parser.add_argument("--duration", type=int, default=None, help="seconds (default 10)")
    parser.add_argument("--rounds", type=int, default=None, help="default 2 (quick: 1)")
    parser.add_argument("--quick", action="store_true", help="3 s per measurement, 1 round")
    parser.add_argument(
        "--warmup", type=int, default=None, help="seconds of unrecorded runs first (default 3)"
    )
    add_cell_arguments(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="start a private server from local binaries (fsync=off, as the kit's local "
        "rung) instead of using --dsn",
    )
    parser.add_argument(
        "--modes",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=["process", "thread"],
        help="backend worker modes to measure: process, thread (default both); psycopg: "
        "also a bare psycopg loop running the same statements in processes (the floor of "
        "any Python client)",
    )
    parser.add_argument("--pgbench", default=None, help="path of pgbench")
    args = parser.parse_args(argv)
    args.duration = args.duration or (3 if args.quick else 10)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.warmup = (1 if args.quick else 3) if args.warmup is None else args.warmup
    if not args.modes or set(args.modes) - {"process", "thread", "psycopg"}:
        parser.error("--modes: a comma-separated list of process, thread, psycopg")
    if args.profile and set(args.profile) - {"process", "psycopg"}:
        parser.error("--profile: a comma-separated list of process, psycopg")
    if args.pgbench is None:
        found = [shutil.which(c) for c in PGBENCH_CANDIDATES]
        args.pgbench = next((f for f in found if f), None)
        if args.pgbench is None:
            parser.error("pgbench not found; pass --pgbench")
    print(header(), flush=True)
    bench = PgBench(args)
    try:
        if args.profile:
            for batch in args.batches:
                print(bench.profile(args.profile, batch, args.top), flush=True)
            return 0
        cells = bench.run()
    finally:
        bench.close()
    print()
    print(table(cells, args, bench.where))
    print()
    print(cell_history(cells, _history_figure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
