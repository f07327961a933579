"""How steady the kit's own CI is: ``.ci/run`` in N fresh clones, one after another,
optionally with K busy loops beside each run, and per test how often it failed.

Each run is a ``git clone`` of this checkout's committed ``HEAD`` into a temporary folder,
then ``CI=true bash .ci/run`` in it as CI runs it (no stdin; this environment less any
variable that looks like a credential, less this shell's venv, less ``PYTEST_*``), or,
with ``--pytest ARGS...``, the README's set-up (``python3 -m venv .venv``, ``pip install
-e '.[dev]'``) and then only ``pytest ARGS`` in that venv (``CI=true`` as well): a quick
measurement of a subset. Runs never overlap::

    python benchmarks/ci_steadiness.py --runs 3 --busy 2      # loaded: 2 busy loops beside
    python benchmarks/ci_steadiness.py --runs 2               # idle
    python benchmarks/ci_steadiness.py --runs 2 --busy 1 --pytest tests/test_proof.py

A busy loop is a Python process spinning on a core; K of them start before each run and
are killed after it, however it ends (Ctrl-C, SIGTERM, a timeout), and each exits by
itself when this script's process is gone.

Per run it prints the exit status, the wall time, pytest's closing line, the tests that
failed (from a JUnit file), the 1-minute load sampled while it ran, and the proofs that
made more than one attempt inside their test (the lines of ``tests/_proof.py``, read from
the JUnit file's captured output). ``.ci/run`` is not changed for this: its pytest gets
``--junitxml`` and ``-o junit_logging=system-out`` through ``PYTEST_ADDOPTS``, set only in
the run's environment; the pytest processes the tests start inherit it too, and write
their own JUnit files elsewhere under the run's folder (``_steadiness.junit_addopts``).
At the end: the runs as a table, per test the runs it failed in, per proof its attempts
in each run, and history rows for ``BENCHMARKS.md``.

Everything goes under one temporary folder, named at the start (``--root`` to choose it):
each run's clone (and its venv) is deleted when the run ends, unless ``--keep``; the
run's output and JUnit files stay until the end, and are deleted then only when every
run was green (else the folder is kept and named). The work tree must be clean (it is
``HEAD`` that is cloned) unless ``--allow-dirty``. Exit status 0 when every run had exit
status 0, 1 otherwise, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from _figures import ROOT, LoadWatch, command, header, history_rows
from _steadiness import (
    Closing,
    Run,
    ci_closings,
    ci_environment,
    cpu_table,
    failures_table,
    junit_addopts,
    last_closing,
    read_junit,
    retries_table,
    runs_table,
    wall,
)

#: A busy loop: spins until its parent (this script) is gone.
BUSY = (
    "import os\n"
    "parent = os.getppid()\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(2_000_000):\n"
    "        pass\n"
)
#: How long a stopped run's process group gets between SIGTERM and SIGKILL.
GRACE = 30.0
#: The signals that stop this script; held back while it stops a run.
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Interrupted(Exception):
    """SIGTERM or SIGHUP: stop the run in progress, clean up, print what is done."""


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=300
    ).stdout.strip()


def _venv() -> str | None:
    """The running interpreter's venv, if it runs in one."""
    return sys.prefix if sys.prefix != sys.base_prefix else None


@contextmanager
def busy_loops(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` busy loops while in the block, each in its own session (a Ctrl-C at the
    terminal reaches this script only), killed when the block ends."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", BUSY],
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc``'s process group: SIGTERM (``.ci/run``'s exit trap stops the dockerd
    it started), then SIGKILL after :data:`GRACE` seconds; a second Ctrl-C waits until
    it is done."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _run_logged(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float
) -> int | None:
    """``argv`` in its own session, stdin closed, stdout and stderr into ``log``; its exit
    status, or ``None`` when it was stopped at ``timeout`` seconds. Stopped (and the
    exception passed on) when this script is interrupted."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return None
        except BaseException:
            _stop(proc)
            raise


def _remove(path: Path) -> None:
    def retry(func, p, _exc) -> None:  # a read-only folder or file
        os.chmod(os.path.dirname(p), 0o700)
        if os.path.isdir(p):
            os.chmod(p, 0o700)
        func(p)

    if path.exists():
        shutil.rmtree(path, onerror=retry)


def _clone(sha: str, dest: Path) -> None:
    _git("clone", "--quiet", "--no-checkout", str(ROOT), str(dest))
    _git("fetch", "--quiet", str(ROOT), "HEAD", cwd=dest)  # HEAD may be on no branch
    _git("checkout", "--quiet", "--detach", sha, cwd=dest)


def _setup_venv(clone: Path, env: dict[str, str], log: Path, timeout: float) -> str | None:
    """The README's set-up in ``clone``: what failed, or ``None``."""
    steps = [
        ["python3", "-m", "venv", ".venv"],
        [str(clone / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q", "-e", ".[dev]"],
    ]
    for argv in steps:
        rc = _run_logged(argv, clone, env, log, timeout)
        if rc != 0:
            return f"set-up failed ({shlex.join(argv)}: {'timeout' if rc is None else rc})"
    return None


def one_run(number: int, sha: str, base: Path, args: argparse.Namespace) -> Run:
    """Clone, run, read, and (unless ``--keep``) delete the clone."""
    here = base / f"run-{number}"
    clone, log, junit_dir = here / "clone", here / "output.log", here / "junit"
    here.mkdir(parents=True)
    env, _ = ci_environment(os.environ, _venv())
    notes: list[str] = []
    try:
        try:
            _clone(sha, clone)
        except subprocess.CalledProcessError as exc:
            return Run(number, 1, 0.0, busy=args.busy, notes=[f"clone failed: {exc.stderr}"])
        env["PWD"] = str(clone)
        if args.pytest is None:
            opts, junit = junit_addopts(junit_dir, clone)
            env["PYTEST_ADDOPTS"] = opts
            argv = ["bash", ".ci/run"]
        else:
            started = time.monotonic()
            failed = _setup_venv(clone, env, log, args.timeout)
            if failed:
                return Run(number, 1, 0.0, busy=args.busy, notes=[failed, f"log: {log}"])
            setup = wall(time.monotonic() - started)
            notes.append(f"set-up (venv, pip install): {setup}, no busy loop beside it")
            bin_dir = clone / ".venv" / "bin"
            env["VIRTUAL_ENV"] = str(clone / ".venv")
            env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
            junit = junit_dir / "junit.xml"
            argv = [str(bin_dir / "pytest"), *args.pytest, f"--junitxml={junit}",
                    "-o", "junit_logging=system-out"]  # fmt: skip
        print(f"run {number} of {args.runs}: {shlex.join(argv)} in {clone}, "
              f"{args.busy} busy loop(s) beside it; output: {log}", flush=True)  # fmt: skip
        with busy_loops(args.busy), LoadWatch(interval=5.0) as watch:
            started = time.monotonic()
            rc = _run_logged(argv, clone, env, log, args.timeout)
            seconds = time.monotonic() - started
        output = log.read_text(errors="replace")
        examples: dict[str, Closing | None] = {}
        if args.pytest is None:
            closing, examples = ci_closings(output)
        else:
            closing = last_closing(output)
        junit_read = read_junit(junit, root=clone) if junit.is_file() else None
        if junit_read is None:
            notes.append(f"no JUnit file at {junit}: pytest did not run or did not end")
        if rc is None:
            notes.append(f"stopped after {args.timeout:.0f} s (--timeout)")
        if rc != 0:
            tail = output.strip().splitlines()[-12:]
            notes.append("last lines of its output:\n    " + "\n    ".join(tail))
        return Run(number, rc, seconds, closing, junit_read, watch.span, args.busy,
                   examples, notes, cpu_table(output))  # fmt: skip
    finally:
        if not args.keep:
            _remove(clone)


def _summary(r: Run) -> str:
    closing = r.closing.text if r.closing else "no closing line"
    failed = "?" if r.junit is None else r.junit.failed
    retried = "?" if r.junit is None else len(r.junit.retried)
    rc = "did not end" if r.rc is None else r.rc
    return f"rc {rc}, {wall(r.seconds)}; {closing}; {failed} failed; {retried} proof(s) retried"


def _details(r: Run) -> list[str]:
    lines: list[str] = []
    if r.junit is not None:
        for f in r.junit.failures:
            lines.append(f"run #{r.number}: {f.kind} `{f.test}`: {f.message[:300]}")
        for p in r.junit.retried:
            lines.append(f"run #{r.number}: retried `{p.test}`: {p.wanted}: {p.cell()}")
    for rung, closing in r.examples.items():
        lines.append(
            f"run #{r.number}: examples/rdq-mysql, {rung} rung: "
            + (closing.text if closing else "no closing line")
        )
    lines += [f"run #{r.number}: {note}" for note in r.notes]
    if r.cpu:
        lines.append(f"run #{r.number}: CPU seconds per test (tests/_cpu.py):")
        lines += [f"    {line}" for line in r.cpu]
    return lines


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    ap.add_argument("--runs", type=int, default=1, help="fresh clones, run one after another")
    ap.add_argument("--busy", type=int, default=0, help="busy loops beside each run")
    ap.add_argument("--root", help="the folder for clones and outputs (default: a new temp one)")
    ap.add_argument("--keep", action="store_true", help="keep the clones and the root folder")
    ap.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run although the work tree differs from HEAD (HEAD is what is cloned)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds before a run (and each set-up step) is stopped (default 3600)",
    )
    ap.add_argument(
        "--pytest",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="run only `pytest ARGS` in the clone's venv instead of .ci/run (last)",
    )
    args = ap.parse_args(argv)
    if args.runs < 1 or args.busy < 0:
        ap.error("--runs must be at least 1 and --busy at least 0")
    if args.pytest is not None and not args.pytest:
        ap.error("--pytest needs the arguments to give pytest")
    changed = _git("status", "--porcelain").splitlines()
    if changed and not args.allow_dirty:
        shown = "\n  ".join(changed[:10]) + ("\n  ..." if len(changed) > 10 else "")
        print(
            f"ci_steadiness: the work tree has uncommitted changes; a fresh clone would not "
            f"have them:\n  {shown}\ncommit them, or pass --allow-dirty to run HEAD as "
            "committed",
            file=sys.stderr,
        )
        return 2
    sha = _git("rev-parse", "HEAD")
    if args.root:
        base = Path(args.root).resolve()
        base.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="rdq-ci-steadiness-"))
    _, dropped = ci_environment(os.environ, _venv())
    what = "CI=true bash .ci/run" if args.pytest is None else f"pytest {shlex.join(args.pytest)}"
    print(header(), flush=True)
    unclean = " (not of the work tree: it has uncommitted changes)" if changed else ""
    print(
        f"each run: a fresh clone of HEAD {sha[:10]}{unclean}, then `{what}`, {args.busy} "
        f"busy loop(s) beside it; left out of its environment: {', '.join(dropped) or 'nothing'}",
        flush=True,
    )
    print(f"temporary folder: {base}", flush=True)
    runs: list[Run] = []
    interrupted = ""
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for n in range(1, args.runs + 1):
            run = one_run(n, sha, base, args)
            runs.append(run)
            print(f"run {n} of {args.runs}: {_summary(run)}  [{run.load}]", flush=True)
    except (KeyboardInterrupt, Interrupted) as exc:
        interrupted = type(exc).__name__ if isinstance(exc, KeyboardInterrupt) else str(exc)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    print()
    print(f"## {len(runs)} run(s) of `{what}`, {args.busy} busy loop(s) beside each")
    print()
    print(runs_table(runs) if runs else "no run ended")
    details = [line for r in runs for line in _details(r)]
    if details:
        print()
        print("\n".join(details))
    print()
    print("### Failures per test")
    print()
    print(failures_table(runs))
    print()
    print("### Proofs that made more than one attempt")
    print()
    print(retries_table(runs))
    print()
    rows = [
        (f"fresh clone #{r.number}, {r.busy} busy loop(s): {_summary(r)}", r.load, command())
        for r in runs
    ]
    print(history_rows(rows, sha[:7]))  # the commit cloned, though HEAD may have moved since
    green = bool(runs) and all(r.green for r in runs) and len(runs) == args.runs
    if interrupted:
        print(f"\ninterrupted ({interrupted}) during run {len(runs) + 1}; kept: {base}")
    elif args.keep or not green:
        print(f"\nkept: {base}")
    else:
        _remove(base)
    return 130 if interrupted else 0 if green else 1


if __name__ == "__main__":
    sys.exit(main())
