"""Benchmark of the chaos checker: time and memory of reading and checking a large history.

Synthesizes a valid history of a correct queue (default 1,000,000 events, ~150k tasks)
in the exact event schema of ``rdq_compliance.chaos.events`` — 16 workers claiming in
batches, heartbeats (some unknown), retries, dead letters and redrives, workers killed
mid-run whose tasks are reclaimed after their lease with a LEASE_EXPIRED attempt,
paused workers refused as stale when they wake — plus its final state, then times
``check()`` and measures its peak memory::

    python benchmarks/checker_bench.py                      # 1,000,000 events
    python benchmarks/checker_bench.py --in-memory          # also check() alone
    python benchmarks/checker_bench.py --inject 20          # with 20 broken tasks

The whole path is measured: the history is written as JSONL journals (one per
process, as the fleet writes them) and the final state beside them; then, in a fresh
process per run, ``read_history`` reads the journals and ``check()`` checks them.
Figures: wall and CPU time of the read and of the check (best of ``--repeat``), and
that process's resident set before reading, with the events loaded, and at its peak
(``VmHWM``: interpreter, final state, events and checker together).
Targets: read + check under 10 s, peak RSS under 1 GiB. A valid history must give no
violation. ``--in-memory`` also times ``check()`` alone on the synthesized events, with
the peak it allocates (tracemalloc, a separate run, since tracing slows allocation).
Every run prints first the date, commit, command and load; each figure line carries the
load while it was measured and the command that reproduces it; the figures follow as
history rows for ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _figures import LoadWatch, command, figure, header, history_rows, load_now

from rdq_compliance.chaos.checker import FinalState, check
from rdq_compliance.chaos.events import read_history
from rdq_core.model import (
    Attempt,
    ErrorInfo,
    Outcome,
    Status,
    Task,
    micros_from_utc,
    utc_from_micros,
)

T0 = 1_700_000_000_000_000
SEC = 1_000_000
LEASE = 30 * SEC
WORKERS = [f"w{i}" for i in range(16)]
EPOCH = utc_from_micros(T0)
ERR = ErrorInfo("ValueError", "boom")
LE_ERR = ErrorInfo("rdq.LeaseExpired", "lease expired before an outcome")


class Synth:
    """Writes journals (per process, like the fleet) and the final state."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.journals: dict[str, list[dict[str, Any]]] = {p: [] for p in ["harness", *WORKERS]}
        self.count = 0
        self.tasks: dict[str, Task] = {}
        self.dlq: list[Task] = []
        self.enqueued: list[str] = []
        self.stats = {"tasks": 0, "claims": 0, "reclaims": 0, "dead": 0, "redrives": 0}

    def ev(self, proc: str, us: int, type_: str, op: str, **fields: Any) -> None:
        j = self.journals[proc]
        e = {
            "seq": len(j),
            "proc": proc,
            "pid": 4000 + len(proc),
            "t": us / SEC,
            "type": type_,
            "op": op,
        }
        e.update(fields)
        j.append(e)
        self.count += 1

    def token(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    # one claim's life on worker ``w``: returns (finish time, outcome or None if killed)
    def life(
        self,
        w: str,
        task: str,
        token: str,
        start: int,
        no: int,
        fate: str,
    ) -> int:
        rng = self.rng
        self.ev(w, start + 5, "invoke", "run", task=task, token=token, attempt_no=no, handler="h")
        t = start + 10
        for _ in range(rng.choice((0,) * 12 + (1, 1, 2)) if fate != "killed" else 1):
            t += rng.randrange(2 * SEC, 9 * SEC)
            self.ev(w, t, "invoke", "heartbeat", task=task, token=token)
            if rng.random() < 0.03:
                self.ev(w, t + 900, "info", "heartbeat", task=task, token=token, error="timeout")
            else:
                self.ev(
                    w,
                    t + 900,
                    "ok",
                    "heartbeat",
                    task=task,
                    token=token,
                    lease_expires_at=t + 900 + LEASE,
                )
        if fate == "killed":
            self.ev("harness", t + 1000, "info", "fault", kind="kill", target=w, point="mid-run")
            return t + 1000
        t += rng.randrange(1000, 2 * SEC)
        if fate == "complete":
            self.ev(w, t, "ok", "run", task=task, token=token)
        else:
            self.ev(w, t, "fail", "run", task=task, token=token, error="ValueError: boom")
        op = {"complete": "complete", "retry": "reschedule", "dead": "dead_letter"}[fate]
        self.ev(w, t + 10, "invoke", op, task=task, token=token)
        if rng.random() < 0.01:  # reply lost, but the call took effect
            self.ev(w, t + 500, "info", op, task=task, token=token, error="unavailable")
        else:
            self.ev(w, t + 500, "ok", op, task=task, token=token)
        return t + 300  # the storage time of the outcome

    def batch(self, ids: list[str], base: int) -> None:
        """Enqueue ``ids`` and take each through claims to SUCCEEDED or DEAD."""
        rng = self.rng
        for task in ids:
            self.ev("harness", base - SEC, "ok", "enqueue", task=task, handler="h", created=True)
            self.enqueued.append(task)
        plans = []
        for _ in ids:
            r = rng.random()
            if r < 0.08:
                plan = ["killed", "complete"]
            elif r < 0.09:
                plan = ["stale", "complete"]  # paused past its lease, refused when it wakes
            elif r < 0.19:
                plan = ["retry", "complete"]
            elif r < 0.215:
                plan = ["dead"]
            elif r < 0.225:
                plan = ["dead", "redrive", "complete"]
            else:
                plan = ["complete"]
            plans.append(plan)
        attempts: list[list[Attempt]] = [[] for _ in ids]
        # the first claim: one batch claim event for all of ``ids``
        w = rng.choice(WORKERS)
        claimed_at = base
        entries = []
        tokens = []
        for task in ids:
            tok = self.token()
            tokens.append(tok)
            entries.append(
                {
                    "task": task,
                    "token": tok,
                    "claimed_at": claimed_at,
                    "lease_expires_at": claimed_at + LEASE,
                    "reclaimed": False,
                    "attempt_count": 0,
                    "attempt_no": 1,
                }
            )
        self.ev(w, claimed_at - 200, "invoke", "claim", limit=len(ids))
        self.ev(w, claimed_at + 300, "ok", "claim", claims=entries)
        self.stats["claims"] += len(ids)
        for i, task in enumerate(ids):
            self.one_task(task, tokens[i], w, claimed_at, plans[i], attempts[i])

    def one_task(
        self, task: str, token: str, w: str, claimed_at: int, plan: list[str], atts: list[Attempt]
    ) -> None:
        rng = self.rng
        count = 0
        redrives = 0
        first = True
        pending_le = False  # the last claim ended by expiry: the next claim is a reclaim
        for step in plan:
            if step == "redrive":
                t = claimed_at + 60 * SEC
                self.ev("harness", t, "invoke", "redrive", tasks=[task])
                self.ev("harness", t + 100, "ok", "redrive", tasks=[task], count=1)
                redrives += 1
                count = 0
                claimed_at = t + 200
                self.stats["redrives"] += 1
                continue
            if not first:  # a new claim of this task
                reclaimed = pending_le
                w = rng.choice(WORKERS)
                token = self.token()
                entry = {
                    "task": task,
                    "token": token,
                    "claimed_at": claimed_at,
                    "lease_expires_at": claimed_at + LEASE,
                    "reclaimed": reclaimed,
                    "attempt_count": count,
                    "attempt_no": len(atts) + 1,
                }
                self.ev(w, claimed_at - 200, "invoke", "claim", limit=1)
                self.ev(w, claimed_at + 300, "ok", "claim", claims=[entry])
                self.stats["claims"] += 1
                self.stats["reclaims"] += reclaimed
            first = False
            pending_le = False
            no = len(atts) + 1
            if step in ("killed", "stale"):
                end = self.life(w, task, token, claimed_at, no, "killed")
                # its lease (extended by its last heartbeat) runs out; another claim takes it
                lease_end = max(claimed_at + LEASE, end - 100 + LEASE)
                reclaim = lease_end + rng.randrange(1, 5 * SEC)
                atts.append(
                    Attempt(
                        no,
                        utc_from_micros(claimed_at),
                        utc_from_micros(reclaim),
                        Outcome.LEASE_EXPIRED,
                        LE_ERR,
                    )
                )
                count += 1
                if step == "stale":  # it wakes up after the reclaim: refused
                    wake = reclaim + 2 * SEC
                    self.ev(w, wake, "invoke", "heartbeat", task=task, token=token)
                    self.ev(
                        w, wake + 100, "fail", "heartbeat", task=task, token=token, error="stale"
                    )
                    self.ev(w, wake + 200, "info", "lease_lost", task=task, token=token)
                claimed_at = reclaim
                pending_le = True
                continue
            fin = self.life(w, task, token, claimed_at, no, step)
            outcome = {
                "complete": Outcome.SUCCESS,
                "retry": Outcome.RETRYABLE_FAILURE,
                "dead": Outcome.PERMANENT_FAILURE,
            }[step]
            atts.append(
                Attempt(
                    no,
                    utc_from_micros(claimed_at),
                    utc_from_micros(fin),
                    outcome,
                    None if step == "complete" else ERR,
                )
            )
            count += 1
            claimed_at = fin + rng.randrange(SEC, 10 * SEC)  # due again after a backoff
        status = Status.SUCCEEDED if atts[-1].outcome is Outcome.SUCCESS else Status.DEAD
        t = Task(
            id=task,
            queue="chaos",
            handler="h",
            payload=b"{}",
            headers={},
            status=status,
            attempt_count=count,
            redrive_count=redrives,
            next_attempt_at=None,
            lease_expires_at=None,
            created_at=EPOCH,
            attempts=tuple(atts),
        )
        self.tasks[task] = t
        self.stats["tasks"] += 1
        if status is Status.DEAD:
            self.dlq.append(t)
            self.stats["dead"] += 1

    def run(self, n_events: int) -> tuple[list[dict[str, Any]], FinalState]:
        i = 0
        base = T0
        while self.count < n_events - 60:
            size = self.rng.choice((2, 4, 8, 8, 16))
            ids = [f"t{i + k:07d}" for k in range(size)]
            i += size
            self.batch(ids, base)
            base += self.rng.randrange(20, 400)
        while self.count < n_events:  # pad to the exact count with harmless faults
            self.ev("harness", base, "info", "fault", kind="pause", target=self.rng.choice(WORKERS))
        events: list[dict[str, Any]] = []
        for proc in sorted(self.journals):
            events.extend(self.journals[proc])
        self.journals.clear()
        state = FinalState(
            tasks=self.tasks, dlq=self.dlq, enqueued=frozenset(self.enqueued), drained=True
        )
        return events, state


def inject(state: FinalState, n: int, seed: int) -> FinalState:
    """Break ``n`` tasks: drop the LEASE_EXPIRED attempt of reclaimed tasks."""
    rng = random.Random(seed)
    victims = [
        t
        for t in state.tasks.values()
        if any(a.outcome is Outcome.LEASE_EXPIRED for a in t.attempts)
    ]
    tasks = dict(state.tasks)
    for t in rng.sample(victims, min(n, len(victims))):
        kept = tuple(a for a in t.attempts if a.outcome is not Outcome.LEASE_EXPIRED)
        tasks[t.id] = Task(**{**t.__dict__, "attempts": kept})
    return FinalState(tasks, state.dlq, state.enqueued, state.drained)


def rss_peak_mib() -> float:
    """This process image's peak resident set: ``VmHWM`` on Linux (``ru_maxrss`` may
    carry the high-water mark of the process that forked us across ``exec``)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024


def rss_now_mib() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def timed(events: Any, state: FinalState, repeat: int) -> tuple[float, list[Any]]:
    """Best wall time of ``repeat`` runs of ``check()`` (prints each run, wall and CPU)."""
    best = float("inf")
    got: list[Any] = []
    runs = []
    for _ in range(repeat):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        got = check(events, state)
        wall = time.perf_counter() - start
        runs.append(f"{wall:.2f} s wall / {time.process_time() - cpu:.2f} s CPU")
        best = min(best, wall)
    print("  runs: " + "; ".join(runs))
    return best, got


def _task_json(t: Task) -> list[Any]:
    return [
        t.id,
        t.status.value,
        t.attempt_count,
        t.redrive_count,
        [
            [
                a.attempt_no,
                micros_from_utc(a.started_at),
                micros_from_utc(a.finished_at),
                a.outcome.value,
            ]
            for a in t.attempts
        ],
    ]


def _task_of(row: list[Any]) -> Task:
    task_id, status, count, redrives, attempts = row
    return Task(
        id=task_id,
        queue="chaos",
        handler="h",
        payload=b"{}",
        headers={},
        status=Status(status),
        attempt_count=count,
        redrive_count=redrives,
        next_attempt_at=None,
        lease_expires_at=None,
        created_at=EPOCH,
        attempts=tuple(
            Attempt(no, utc_from_micros(s), utc_from_micros(f), Outcome(o))
            for no, s, f, o in attempts
        ),
    )


def state_to_json(state: FinalState) -> dict[str, Any]:
    return {
        "tasks": [_task_json(t) for t in state.tasks.values()],
        "dlq": [_task_json(t) for t in state.dlq],
        "enqueued": sorted(state.enqueued),
        "drained": state.drained,
    }


def state_from_json(data: dict[str, Any]) -> FinalState:
    tasks = {t.id: t for t in map(_task_of, data["tasks"])}
    dlq = [tasks.get(row[0]) or _task_of(row) for row in data["dlq"]]
    return FinalState(tasks, dlq, frozenset(data["enqueued"]), data["drained"])


def write_journals(events: list[dict[str, Any]], state: FinalState, folder: Path) -> int:
    """Write the history as JSONL journals, one per process and one line per event in the
    format of ``Journal.write``, and the final state as ``final.json``; the JSONL bytes."""
    files: dict[str, Any] = {}
    try:
        for e in events:
            fh = files.get(e["proc"])
            if fh is None:
                fh = files[e["proc"]] = open(folder / f"{e['proc']}.jsonl", "w")
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")
    finally:
        for fh in files.values():
            fh.close()
    with open(folder / "final.json", "w") as fh:
        json.dump(state_to_json(state), fh)
    return sum(p.stat().st_size for p in folder.glob("*.jsonl"))


def whole_path(folder: Path, expected: int, runs: int, history: list[tuple[str, str, str]]) -> bool:
    """``read_history`` + ``check()`` on the journals of ``folder``, each run in a fresh
    process (its peak RSS is the whole path's); prints every run and the best (with the
    load while the runs ran), and adds it to ``history``."""
    results = []
    with LoadWatch() as watch:
        for _ in range(runs):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--from-journals",
                    str(folder),
                    "--expect",
                    str(expected),
                ],
                check=False,
                capture_output=True,
                text=True,
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode not in (0, 1) or not lines:
                print(done.stdout + done.stderr)
                return False
            got = json.loads(lines[-1])
            results.append(got)
            print(
                f"  run: read {got['read_s']:.2f} s + check {got['check_s']:.2f} s = "
                f"{got['read_s'] + got['check_s']:.2f} s wall "
                f"({got['read_cpu'] + got['check_cpu']:.2f} s CPU); RSS {got['base_mib']:.0f} MiB "
                f"before reading (interpreter, imports, final state), {got['loaded_mib']:.0f} MiB "
                f"with the events, peak {got['peak_mib']:.0f} MiB; {got['violations']} violation(s)"
            )
            if done.returncode != 0:
                print(f"  expected {expected} violation(s)")
                return False
    best = min(results, key=lambda g: g["read_s"] + g["check_s"])
    total = best["read_s"] + best["check_s"]
    peak = max(g["peak_mib"] for g in results)
    text = (
        f"read + check, {best['events']:,} events from journals: {total:.2f} s "
        f"(best of {runs}; read {best['read_s']:.2f} s, check {best['check_s']:.2f} s; "
        f"{best['read_cpu'] + best['check_cpu']:.2f} s CPU) "
        f"[{'OK' if total < 10 else 'MISSED'}: < 10 s]; peak RSS {peak:.0f} MiB "
        f"[{'OK' if peak < 1024 else 'MISSED'}: < 1 GiB]"
    )
    print(figure(text, watch.span))
    history.append((f"checker: {text}", watch.span, command()))
    return True


def from_journals(folder: str, expected: int) -> int:
    """The child of :func:`whole_path`: one read + check; a JSON summary as last line."""
    paths = sorted(Path(folder).glob("*.jsonl"))
    with open(Path(folder) / "final.json") as fh:
        state = state_from_json(json.load(fh))
    gc.collect()
    base = rss_now_mib()
    start, cpu = time.perf_counter(), time.process_time()
    events = read_history(paths)
    read_s, read_cpu = time.perf_counter() - start, time.process_time() - cpu
    loaded = rss_now_mib()
    start, cpu = time.perf_counter(), time.process_time()
    got = check(events, state)
    check_s, check_cpu = time.perf_counter() - start, time.process_time() - cpu
    summary = {
        "events": len(events),
        "read_s": read_s,
        "read_cpu": read_cpu,
        "check_s": check_s,
        "check_cpu": check_cpu,
        "base_mib": base,
        "loaded_mib": loaded,
        "peak_mib": rss_peak_mib(),
        "violations": len(got),
    }
    print(json.dumps(summary))
    return 0 if len(got) == expected else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs (best is reported)")
    ap.add_argument("--inject", type=int, default=0, help="break this many tasks")
    ap.add_argument(
        "--in-memory",
        action="store_true",
        help="also time check() alone on the synthesized events (no journals), with tracemalloc",
    )
    ap.add_argument("--from-journals", help=argparse.SUPPRESS)  # the child of whole_path
    ap.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.from_journals:
        return from_journals(args.from_journals, args.expect)

    print(header(), flush=True)
    history: list[tuple[str, str, str]] = []
    start = time.perf_counter()
    events, state = Synth(args.seed).run(args.events)
    synth_s = time.perf_counter() - start
    ops: dict[str, int] = {}
    for e in events:
        ops[e["op"]] = ops.get(e["op"], 0) + 1
    reclaims = sum(
        1
        for e in events
        if e["op"] == "claim" and e["type"] == "ok"
        for c in e["claims"]
        if c["reclaimed"]
    )
    print(
        f"history: {len(events):,} events, {len(state.tasks):,} tasks, "
        f"{len(state.dlq):,} dead, {reclaims:,} reclaims (synthesized in {synth_s:.1f} s)"
    )
    print("  by op: " + ", ".join(f"{k} {v:,}" for k, v in sorted(ops.items())))
    if args.inject:
        state = inject(state, args.inject, args.seed)
    expected = 0
    ok = True
    if args.in_memory:
        rss_before = rss_now_mib()
        peak_before = rss_peak_mib()
        with LoadWatch() as watch:
            seconds, got = timed(events, state, args.repeat)
        peak_after = rss_peak_mib()
        expected = len(got)
        text = f"check() alone: {seconds:.2f} s (best of {args.repeat}), {len(got)} violation(s)"
        print(figure(text, watch.span))
        history.append((f"checker: {text}", watch.span, command()))
        if got:
            print("  first: " + got[0].message[:200])
        gc.collect()
        tracemalloc.start()
        check(events, state)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        text = f"check() peak allocation (tracemalloc): {traced_peak / 2**20:.0f} MiB"
        print(figure(text, load_now().short))
        history.append((f"checker: {text}", load_now().short, command()))
        print(
            f"resident: {rss_before:.0f} MiB with the synthesized history; peak RSS "
            f"{peak_before:.0f} MiB before check(), {peak_after:.0f} MiB after it "
            f"(+{peak_after - peak_before:.0f} MiB)"
        )
        ok = (not got) == (args.inject == 0)
    elif args.inject:
        expected = len(check(events, state))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        size = write_journals(events, state, Path(tmp))
        print(
            f"journals: {len({e['proc'] for e in events})} files, {size / 2**20:.0f} MiB "
            f"JSONL (written in {time.perf_counter() - start:.1f} s); each run below is a "
            "fresh process: read_history, then check()"
        )
        del events
        gc.collect()
        ok = whole_path(Path(tmp), expected, args.repeat, history) and ok
    print()
    print(history_rows(history))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
