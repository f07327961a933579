#!/usr/bin/env python
"""Claim + complete throughput of ``RedisStorage`` against a bare redis-py loop and
``redis-benchmark``, all running the same Lua scripts.

For each connection count (default 1, 4, 16) and batch size (default 1, 32) this measures,
in one run, time-sliced (``--rounds`` short slices per side and cell; who goes first
rotates cell by cell and round by round, so drift in the load of a shared machine
spreads over all three sides):

* **backend**: N worker processes (forked; threads would measure the GIL), each with its
  own ``RedisStorage`` (one connection), looping ``claim_due(queue, batch, lease)`` then
  ``complete(id, token)`` for every claim;
* **bare redis-py**: N worker processes, each with a plain ``redis.Redis`` (hiredis),
  sending the backend's own claim and complete scripts (``rdq_redis.scripts.SOURCES``,
  byte for byte) by ``EVALSHA`` with the same keys and arguments (a fresh random token
  prefix per claim, as the protocol needs), and reading from the claim's reply only each
  task's id and token: the floor of any Python client of these scripts;
* **redis-benchmark**: ``redis-benchmark -c N`` sending one ``EVALSHA`` per cycle of a
  script made of the claim script and the complete script verbatim (each wrapped as a
  Lua function with its prelude, so the same code runs: one claim, then one complete per
  claimed task, its token read from the claim's reply). It is the server's cost of the
  same scripts with no client round trip in between (a cycle is one round trip, the
  backend's is 1 + batch): a ceiling no client that waits for the claim's reply reaches.

Only tasks completed inside the timed window count: each worker connects and runs a few
warm-up cycles before the clock starts; redis-benchmark's own figure excludes its
connection time. Before the first measurement each side runs unrecorded for
``--warmup`` seconds. Every measurement runs in a fresh namespace pre-filled with enough
due PENDING tasks, written by the backend's enqueue script (run in a loop server-side,
``--fill-chunk`` per call), and dropped afterwards (SCAN + UNLINK); one whose queue ran dry
is repeated with twice the tasks. redis-benchmark's rate is its requests/s times the
tasks completed per request (SUCCEEDED tasks counted afterwards).

Usage::

    python benchmarks/redis_throughput.py                 # 4 s slices, 3 rounds
    python benchmarks/redis_throughput.py --quick         # 2 s, 1 round
    python benchmarks/redis_throughput.py --dsn redis://127.0.0.1:6379/0
    python benchmarks/redis_throughput.py --workers 1,4 --batches 32 --rounds 5
    python benchmarks/redis_throughput.py --profile backend,bare --batches 1,32

``--profile`` measures no cells: it runs one worker of each side given (``backend``,
``bare``) in this process, timed (tasks/s, wall and client CPU per task), then under
``cProfile``, and prints where its time goes; then the client's own work without the
network: both sides' cycles with redis-py's ``evalsha`` answered in-process by a canned
reply of the claim script (recorded from the server first), so only what each side does
around the driver is timed.

Every run prints first the date, commit, command and load (``_figures.header``), and in
the table the load while each cell was measured; at the end, each cell as a history row
for ``BENCHMARKS.md``.

The server is, by default, a private ``redis-server`` the script starts from the local
binaries like the kit's local rung, with ``--persistence`` (default ``none``: this
measures the client and the scripts, not the disk) and removes afterwards; ``--dsn``
measures a given single server instead (keys in a fresh namespace, dropped).

The runner, the cells, the time-slicing and the table are ``_harness.py``'s (shared with
``pg_throughput.py``); this script holds what is Redis's: its clients and scripts, the
pre-fill, the redis-benchmark side and the table's columns.
"""

from __future__ import annotations

import argparse
import functools
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

import redis
from _figures import header
from _harness import Bench, Cell, add_cell_arguments, cell_history, markdown_table, run_processes
from rdq_redis.connection import CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S, _common_kwargs
from rdq_redis.keys import Layout
from rdq_redis.scripts import SOURCES
from rdq_redis.server import RedisServer
from rdq_redis.storage import RedisStorage

from rdq_core.model import micros_from_delta

QUEUE = "bench"
LEASE = timedelta(minutes=5)
LEASE_US = micros_from_delta(LEASE)
#: Cycles each worker runs before the clock starts.
WARMUP_CYCLES = 20
#: First guess of a side's best rate (tasks/s) per batch size, to size the pre-fill; then
#: the best rate measured so far is used.
RATE_GUESS = {1: 15_000.0}
RATE_GUESS_BATCHED = 80_000.0
#: The issue's target: the backend at >= 90 % of the bare redis-py loop in every cell.
TARGET_RATIO = 0.90
SIDES = ("backend", "bare", "redis-benchmark")
#: The meta record's token field (see rdq_redis.scripts: field 9, NUL-separated).
TOKEN_FIELD = 8


def _wrapped(name: str, function: str) -> str:
    """Script ``name`` (its prelude and body, verbatim) as a local Lua function of
    ``(KEYS, ARGV)``: called from another script, it runs exactly the same code."""
    src = SOURCES[name]
    return f"local function {function}(KEYS, ARGV)\n{src.prelude}{src.body}\nend\n"


#: One claim + complete cycle in one call (redis-benchmark's side).
#: KEYS: task pay hdr hist ready lease done. ARGV: queue, limit, lease_us, token prefix.
CYCLE = (
    "#!lua\n"
    + SOURCES["claim"].prelude
    + _wrapped("claim", "claim_script")
    + _wrapped("complete", "complete_script")
    + r"""
local rows = claim_script({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]},
  {ARGV[1], ARGV[2], ARGV[3], ARGV[4]})
local done = 0
for _, row in ipairs(rows) do
  local token = split(row[2])[F_TOKEN]
  local ok = complete_script({KEYS[1], KEYS[4], KEYS[6], KEYS[7]}, {row[1], token})
  if ok[1] == 1 then done = done + 1 end
end
return done
"""
)

#: The pre-fill: the enqueue script in a loop. KEYS: task pay hdr ready seq rv.
#: ARGV: queue, first number, last number, id prefix.
FILL = (
    "#!lua\n"
    + SOURCES["enqueue"].prelude
    + _wrapped("enqueue", "enqueue_script")
    + r"""
local n = 0
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local id = ARGV[4] .. i
  local r = enqueue_script(KEYS, {id, ARGV[1], 'noop', '', '', '0', 'n' .. i, '1'})
  n = n + r[1]
end
return n
"""
)


# ---- the namespace ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    claim: list[str]
    complete: list[str]
    enqueue: list[str]
    cycle: list[str]

    @classmethod
    def of(cls, namespace: str) -> Keys:
        b = Layout(namespace).of_queue(QUEUE)
        return cls(
            claim=[b.task, b.pay, b.hdr, b.hist, b.ready, b.lease],
            complete=[b.task, b.hist, b.lease, b.done],
            enqueue=[b.task, b.pay, b.hdr, b.ready, b.seq, b.rv],
            cycle=[b.task, b.pay, b.hdr, b.hist, b.ready, b.lease, b.done],
        )


def fill(client: redis.Redis, namespace: str, count: int, chunk: int) -> None:
    """``count`` due PENDING tasks in ``namespace``, as the enqueue script writes them."""
    keys = Keys.of(namespace).enqueue
    script = client.register_script(FILL)
    for first in range(1, count + 1, chunk):
        last = min(count, first + chunk - 1)
        script(keys=keys, args=[QUEUE, first, last, "task-"])


def counts(client: redis.Redis, namespace: str) -> tuple[int, int]:
    """(SUCCEEDED, PENDING) tasks of the bench queue."""
    b = Layout(namespace).of_queue(QUEUE)
    return int(client.zcard(b.done)), int(client.zcard(b.ready))


# ---- the worker sides ------------------------------------------------------------------------


class _Backend:
    """The backend: ``RedisStorage.claim_due`` and ``complete``."""

    def __init__(self, dsn: str, namespace: str) -> None:
        self.storage = RedisStorage(dsn, namespace)

    def cycle(self, batch: int, end: float) -> int:
        """Claim up to ``batch`` tasks and complete each; all count if done by ``end``."""
        storage = self.storage
        claims = storage.claim_due(QUEUE, batch, LEASE)
        for c in claims:
            storage.complete(c.task_id, c.token)
        return len(claims) if time.monotonic() < end else 0

    def close(self) -> None:
        self.storage.close()


class _Bare:
    """The floor of any Python client: the backend's two scripts by ``EVALSHA`` on a plain
    redis-py connection, reading only id and token from the claim's reply."""

    def __init__(self, dsn: str, namespace: str) -> None:
        # The backend's connection settings (reply and connect timeouts, no retry): what
        # any client of these scripts needs to report a lost server instead of hanging.
        self.client = redis.Redis.from_url(
            dsn, **_common_kwargs("rdq-bench-bare", SOCKET_TIMEOUT_S, CONNECT_TIMEOUT_S)
        )
        keys = Keys.of(namespace)
        self.claim_keys, self.complete_keys = keys.claim, keys.complete
        self.bucket = Layout(namespace).of_queue(QUEUE).bucket
        self.claim_sha = self.client.script_load(SOURCES["claim"].source())
        self.complete_sha = self.client.script_load(SOURCES["complete"].source())

    def cycle(self, batch: int, end: float) -> int:
        """Claim up to ``batch`` tasks and complete each; all count if done by ``end``."""
        evalsha = self.client.evalsha
        prefix = self.bucket + secrets.token_hex(13)
        rows = evalsha(self.claim_sha, 6, *self.claim_keys, QUEUE, batch, LEASE_US, prefix)
        for row in rows:
            token = row[1].split(b"\0", TOKEN_FIELD + 1)[TOKEN_FIELD]
            evalsha(self.complete_sha, 4, *self.complete_keys, row[0], token)
        return len(rows) if time.monotonic() < end else 0

    def close(self) -> None:
        self.client.close()


def _open_client(side: str, dsn: str, namespace: str) -> _Backend | _Bare:
    return _Backend(dsn, namespace) if side == "backend" else _Bare(dsn, namespace)


# ---- the redis-benchmark side ----------------------------------------------------------------


def run_redis_benchmark(
    binary: str, dsn: str, sha: str, namespace: str, workers: int, batch: int, requests: int
) -> float:
    """Requests/s of ``redis-benchmark -c workers -n requests`` sending the cycle script
    (one token prefix for every call: the complete reads the token from the claim's reply
    inside the script, so fencing still holds within a cycle)."""
    keys = Keys.of(namespace).cycle
    prefix = Layout(namespace).of_queue(QUEUE).bucket + "0" * 26
    url = urlsplit(dsn)
    argv = [
        binary, "-h", url.hostname or "127.0.0.1", "-p", str(url.port or 6379),
        "-c", str(workers), "-n", str(requests), "--csv",
        "EVALSHA", sha, str(len(keys)), *keys,
        QUEUE, str(batch), str(LEASE_US), prefix,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    found = re.search(r'^"EVALSHA[^"]*","([\d.]+)"', out, re.MULTILINE)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"redis-benchmark failed (exit {done.returncode}):\n{out[-3000:]}")
    return float(found[1])


# ---- measurements ----------------------------------------------------------------------------


class RedisBench(Bench):
    """The backend, the bare redis-py loop and redis-benchmark, on a private server or
    ``--dsn``."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args, "rdq-redis-bench-")
        if args.dsn:
            self.server = RedisServer(args.dsn)
        else:
            from rdq_redis.local import start_local_server

            from rdq_compliance.provision.backend import ProvisionRequest

            request = ProvisionRequest(
                workdir=self.tmp / "server",
                options={"redis_persistence": args.persistence},
                allow_docker=False,
            )
            self.server = start_local_server(request)
        self.dsn: str = self.server.dsn
        self.client = redis.Redis.from_url(self.dsn)
        info = self.client.info("server")
        self.where = f"{self.server.origin}; redis {info.get('redis_version')}"
        self.cycle_sha = self.client.script_load(CYCLE)

    def close(self) -> None:
        self.client.close()
        super().close()

    def sides(self, cell: Cell) -> tuple[str, ...]:
        return SIDES

    def warmup_sides(self) -> tuple[str, ...]:
        return SIDES

    def prefill(self, side: str, workers: int, batch: int, previous: int | None) -> int:
        """Enough for the side's best rate so far at ``batch``, and its warm-up cycles."""
        guess = RATE_GUESS.get(batch, RATE_GUESS_BATCHED)
        rate = max(guess, 1.5 * self.best_rate(batch, side))
        return int(rate * (self.duration + 1)) + 2 * WARMUP_CYCLES * batch * workers

    def fill(self, namespace: str, tasks: int) -> None:
        fill(self.client, namespace, tasks, self.args.fill_chunk)

    def once(self, side: str, namespace: str, workers: int, batch: int, tasks: int) -> float:
        if side != "redis-benchmark":  # N worker processes: the backend, or bare redis-py
            open_client = functools.partial(_open_client, side, self.dsn, namespace)
            done = run_processes(
                open_client, workers, batch, self.duration, warmup_cycles=WARMUP_CYCLES, who=side
            )
            return done / self.duration
        requests = max(workers * 50, int(tasks / batch * self.duration / (self.duration + 1)))
        requests = min(requests, tasks // batch - workers)
        rps = run_redis_benchmark(
            self.args.redis_benchmark, self.dsn, self.cycle_sha, namespace, workers, batch, requests
        )
        succeeded, _ = counts(self.client, namespace)
        return rps * succeeded / requests

    def pending(self, namespace: str) -> int:
        return counts(self.client, namespace)[1]

    def client_factory(self, side: str, namespace: str) -> functools.partial[_Backend | _Bare]:
        return functools.partial(_open_client, side, self.dsn, namespace)

    def progress(self, rnd: int, cell: Cell, side: str, rate: float) -> str:
        return (
            f"  round {rnd + 1}  connections={cell.workers:<2}  batch={cell.batch:<2}"
            f"  {side:<15} {rate:>9,.0f} tasks/s  ({cell.loads[-1].short} at its start)"
        )


def canned(bench: RedisBench, batch: int, cycles: int = 20_000, rounds: int = 5) -> str:
    """CPU per cycle of the backend and the bare loop with the network taken out: each
    side's ``evalsha`` answers a claim with a reply the claim script gave for ``batch``
    tasks and a complete with success; ``rounds`` interleaved runs of ``cycles``."""
    namespace = bench.server.create_namespace()
    try:
        fill(bench.client, namespace, batch * 4, bench.args.fill_chunk)
        backend, bare = _Backend(bench.dsn, namespace), _Bare(bench.dsn, namespace)
        try:
            prefix = Layout(namespace).of_queue(QUEUE).bucket + secrets.token_hex(13)
            claim_keys = Keys.of(namespace).claim
            reply = bare.client.evalsha(
                bare.claim_sha, 6, *claim_keys, QUEUE, batch, LEASE_US, prefix
            )
            client, scripts = backend.storage._scripts()
            shas = {scripts.sha("claim"), bare.claim_sha}

            def answer(sha: str, numkeys: int, *args: object) -> object:
                return reply if sha in shas else [1]

            client.evalsha = answer
            bare.client.evalsha = answer
            spent = {"backend": 0.0, "bare": 0.0}
            for rnd in range(rounds):
                for name, side in (("backend", backend), ("bare", bare))[:: 1 if rnd % 2 else -1]:
                    cpu = time.process_time()
                    for _ in range(cycles):
                        side.cycle(batch, float("inf"))
                    spent[name] += time.process_time() - cpu
        finally:
            backend.close()
            bare.close()
    finally:
        bench.server.drop_namespace(namespace)
    per = {k: v / (cycles * rounds) * 1e6 for k, v in spent.items()}
    return (
        f"without the network (claim reply of {len(reply)} task(s) canned, {rounds} x "
        f"{cycles:,} cycles per side, interleaved): backend {per['backend']:.1f} µs per cycle "
        f"({per['backend'] / batch:.1f} per task), bare redis-py {per['bare']:.1f} µs "
        f"({per['bare'] / batch:.1f} per task); the backend's own work: "
        f"{(per['backend'] - per['bare']) / batch:.1f} µs per task"
    )


def _spread(cell: Cell, side: str, base: str) -> str:
    """The lowest-highest and the median round ratio of ``side`` to ``base``."""
    rounds = cell.round_ratios(side, base)
    if len(rounds) < 2:
        return ""
    return f"{rounds[0]:.0%}-{rounds[-1]:.0%}, median {statistics.median(rounds):.0%}"


def table(cells: list[Cell], args: argparse.Namespace, bench: RedisBench) -> str:
    rows = []
    for c in cells:
        to_bare, to_rb = c.ratio("backend", "bare"), c.ratio("backend", "redis-benchmark")
        missed = "" if to_bare is None or to_bare >= TARGET_RATIO else " MISSED"
        spread_bare = _spread(c, "backend", "bare")
        spread_rb = _spread(c, "backend", "redis-benchmark")
        rows.append(
            [
                str(c.workers),
                str(c.batch),
                f"{c.mean('redis-benchmark') or 0:,.0f}",
                f"{c.mean('bare') or 0:,.0f}",
                f"{c.mean('backend') or 0:,.0f}",
                f"{to_bare or 0:.0%}{f' ({spread_bare})' if spread_bare else ''}{missed}",
                f"{to_rb or 0:.0%}{f' ({spread_rb})' if spread_rb else ''}",
                c.load,
            ]
        )
    return markdown_table(
        bench.where,
        args,
        "time-sliced and interleaved",
        [
            f"target: backend >= {TARGET_RATIO:.0%} of the bare redis-py loop in every cell",
            "cells: mean tasks/s; ratios summed over rounds (lowest-highest round, median round)",
            "load: the 1-minute load average at the start of each of the cell's measurements "
            "(the benchmark's own workers and server included)",
        ],
        [
            ("connections", "--:"),
            ("batch", "--:"),
            ("redis-benchmark", "--:"),
            ("bare redis-py", "--:"),
            ("backend", "--:"),
            ("backend / bare", ":--"),
            ("backend / redis-benchmark", ":--"),
            ("load while measured", ":--"),
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=None, help="a given single server (default: private)")
    parser.add_argument(
        "--persistence", default="none", help="the private server's (none, aof, everysec, rdb)"
    )
    parser.add_argument("--duration", type=float, default=None, help="seconds (default 4)")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--quick", action="store_true", help="2 s per measurement, 1 round")
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default 2)")
    add_cell_arguments(parser)
    parser.add_argument("--fill-chunk", type=int, default=20_000)
    parser.add_argument("--redis-benchmark", default=shutil.which("redis-benchmark"))
    args = parser.parse_args(argv)
    args.duration = args.duration or (2.0 if args.quick else 4.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.warmup = (1.0 if args.quick else 2.0) if args.warmup is None else args.warmup
    if not args.redis_benchmark:
        parser.error("redis-benchmark not found; pass --redis-benchmark")
    if args.profile and set(args.profile) - {"backend", "bare"}:
        parser.error("--profile: a comma-separated list of backend, bare")
    print(header(), flush=True)
    bench = RedisBench(args)
    try:
        if args.profile:
            for batch in args.batches:
                print(bench.profile(args.profile, batch, args.top), flush=True)
                print(canned(bench, batch), flush=True)
            return 0
        cells = bench.run()
        print()
        print(table(cells, args, bench))
        print()
        print(cell_history(cells, _history_figure))
    finally:
        bench.close()
    return 0


def _history_figure(cell: Cell) -> str:
    to_bare, to_rb = cell.ratio("backend", "bare"), cell.ratio("backend", "redis-benchmark")
    return (
        f"Redis, {cell.workers} x batch {cell.batch}: backend / bare redis-py {to_bare or 0:.0%}"
        f" ({cell.mean('backend') or 0:,.0f} tasks/s); / redis-benchmark {to_rb or 0:.0%}"
    )


if __name__ == "__main__":
    sys.exit(main())
