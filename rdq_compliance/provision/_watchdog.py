"""The launcher and watchdog of a :class:`rdq_compliance.provision.process.ManagedProcess`.

Run as a script (``python -I -S _watchdog.py``), stdlib only, never imported by the
kit's runtime code (``-S`` leaves site-packages off the path, so a third-party import
here would fail at once); it walks ``/proc`` itself for the same reason. Its stdin is a
pipe whose only writer is the kit process; the protocol is line-based.

kit → watchdog
    first line: a JSON object describing the process to start (``argv``, ``cwd``, ``env``
    (the whole environment) or ``env_add`` (variables added to the watchdog's own),
    ``uid``, ``gid``, ``groups``, ``log``, ``stop_signal``, ``grace``, ``cleanup``); then
    commands: ``kill`` (SIGKILL the whole tree now), ``stop <grace>`` (the stop signal to
    the leader, then SIGKILL the tree after ``grace`` seconds), ``signal <n>`` (signal
    ``n`` to the leader alone: a remote fleet's SIGKILL, SIGSTOP and SIGCONT), ``pause``
    and ``resume`` (SIGSTOP / SIGCONT to every process of the tree), ``pids`` (list the
    tree), ``signal-pid <pid> <n>`` (signal ``n`` to one process of the tree; for SIGKILL,
    answered once it is gone), ``quit`` (the kit is done: make sure nothing is left, exit).
    The tree commands are how a remote fleet freezes or kills a whole worker, or one of
    its processes, on its host.
watchdog → kit (stdout, JSON lines)
    ``{"started": pid}`` or ``{"error": "..."}``; ``{"exited": returncode}`` when the
    leader ends; ``{"done": "kill"|"stop", "survivors": [...]}`` after a command (a kill
    also says which pids it found, ``"killed"``); ``{"done": "signal"}`` after a signal;
    ``{"done": "pause"|"resume", "pids": [...]}``; ``{"done": "pids", "leader": pid or
    null, "tree": [...], "under": [...]}`` (the leader while it runs, every process of
    the tree, the leader's descendants); ``{"done": "signal-pid", "hit": true|false}``.

The rule this process exists for: **the server dies with the kit.** The watchdog (not the
kit) forks the server, in a new session, as another user if asked. It then waits on its
stdin. End of file on stdin means every copy of the write end is closed, i.e. the kit
process is gone — however it died, SIGKILL included, because the kernel closes a dead
process's descriptors. The watchdog then stops the server (the stop signal, a grace
period, then SIGKILL to every process of the tree), removes the ``cleanup`` paths (the
server's data) and exits.

Why a separate process rather than ``PR_SET_PDEATHSIG``: the death signal is Linux-only,
is cleared when the child changes credentials (our server runs as another user), fires
on the death of the *thread* that forked, and is not inherited by the server's children.
Why the watchdog launches the server rather than the kit: there is no moment at which the
server exists and nobody watches it — if the kit dies even before the fork, the watchdog
still reads end of file and cleans up.

**The tree, not the process group.** Servers put their children in sessions of their own
(a PostgreSQL backend calls ``setsid()``), so signalling the leader's process group is not
enough. On Linux the watchdog makes itself a *child subreaper*: every process of the
server's tree whose parent dies is reparented to the watchdog, never to PID 1, so "all
descendants of the watchdog" is exactly the server's tree, even after the leader died.
Killing repeats "SIGKILL every descendant, reap" until none is left (a process forking
meanwhile is caught in the next round). Elsewhere the leader's process group is killed
as well, as the best available approximation.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

_PR_SET_CHILD_SUBREAPER = 36


def _say(**message: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def _log(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"rdq watchdog[{os.getpid()}]: {text}\n")
        sys.stderr.flush()


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except Exception:
        return False


def _process_table() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, state)}`` for every process we can see."""
    table: dict[int, tuple[int, str]] = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), fields[0])
        return table
    out = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            table[int(parts[0])] = (int(parts[1]), parts[2][:1])
    return table


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if table[pid][1] not in ("Z", "X"):
            out.append(pid)
        stack.extend(children.get(pid, []))
    return sorted(out)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


class Watchdog:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.leader: subprocess.Popen[bytes] | None = None
        self.pgid = 0
        self.reported_exit = False
        self.terminate = False
        self.subreaper = False
        self.me = os.getpid()

    # ---- starting ---------------------------------------------------------------------

    def spawn(self) -> None:
        c = self.config
        kwargs: dict[str, Any] = {}
        if c.get("uid") is not None:
            kwargs.update(user=c["uid"], group=c["gid"], extra_groups=c.get("groups") or [])
        env = c.get("env")
        if c.get("env_add"):
            env = {**(env if env is not None else os.environ), **c["env_add"]}
        with open(c["log"], "ab", buffering=0) as log:
            self.leader = subprocess.Popen(
                c["argv"],
                cwd=c.get("cwd"),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **kwargs,
            )
        self.pgid = self.leader.pid

    # ---- the tree ---------------------------------------------------------------------

    def tree(self) -> list[int]:
        """Live processes of the server: our descendants (and, without a subreaper, the
        leader's process group)."""
        pids = set(descendants(self.me))
        if not self.subreaper and self.pgid:
            try:
                os.killpg(self.pgid, 0)
            except (ProcessLookupError, PermissionError):
                pass
            else:
                table = _process_table()
                pids.update(p for p in table if _pgid(p) == self.pgid)
        pids.discard(self.me)
        return sorted(pids)

    def reap(self) -> None:
        """Reap the leader (reporting its exit) and any adopted orphans."""
        leader = self.leader
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None:
                break
            if leader is not None and info.si_pid == leader.pid:
                leader.poll()
                if leader.returncode is None:  # pragma: no cover - defensive
                    break
            else:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(info.si_pid, 0)
        if leader is not None and leader.returncode is None:
            leader.poll()
        if leader is not None and leader.returncode is not None and not self.reported_exit:
            self.reported_exit = True
            _say(exited=leader.returncode)

    def kill_tree(self, found: list[int] | None = None) -> list[int]:
        """SIGKILL every process of the tree until none is left; the survivors (if any).
        ``found`` (if given) gets every pid the kills were sent to."""
        deadline = time.monotonic() + 10.0
        while True:
            self.reap()
            pids = self.tree()
            if not pids or time.monotonic() >= deadline:
                return pids
            if self.pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pgid, signal.SIGKILL)
            for pid in pids:
                _signal(pid, signal.SIGKILL)
            if found is not None:
                found.extend(p for p in pids if p not in found)
            time.sleep(0.005)

    def pause_tree(self) -> list[int]:
        """SIGSTOP every process of the tree, listing it again until no process is left
        unsignalled (a child forked meanwhile is stopped too); returns the pids stopped
        once each is seen stopped (or gone), or after 5 s."""
        stopped: list[int] = []
        for _ in range(50):
            todo = [p for p in self.tree() if p not in stopped]
            if not todo:
                break
            for pid in todo:
                _signal(pid, signal.SIGSTOP)
            stopped += todo
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            table = _process_table()
            if all(table.get(p, (0, "X"))[1] in ("T", "t", "Z", "X") for p in stopped):
                break
            time.sleep(0.002)
        return sorted(stopped)

    def resume_tree(self) -> list[int]:
        """SIGCONT every process of the tree; the pids continued."""
        pids = self.tree()
        for pid in pids:
            _signal(pid, signal.SIGCONT)
        return pids

    def listing(self) -> dict[str, Any]:
        """The leader (while it runs), the whole tree, and the leader's descendants."""
        self.reap()
        leader = self.leader
        alive = leader is not None and leader.returncode is None
        return {
            "leader": leader.pid if alive and leader is not None else None,
            "tree": self.tree(),
            "under": descendants(leader.pid) if alive and leader is not None else [],
        }

    def signal_one(self, pid: int, signum: int) -> bool:
        """Signal ``signum`` to ``pid`` if it is a process of the tree; for SIGKILL, wait
        (up to 10 s) until it is gone. Whether it was one of the tree's."""
        if pid not in self.tree():
            return False
        _signal(pid, signum)
        if signum == signal.SIGKILL:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                self.reap()
                if _process_table().get(pid, (0, "X"))[1] in ("Z", "X"):
                    break
                time.sleep(0.005)
        return True

    def stop_tree(self, grace: float) -> list[int]:
        """The stop signal to the leader (and SIGCONT to the tree, in case it was paused);
        once it has exited (or after ``grace`` seconds) :meth:`kill_tree` takes whatever
        is left (strays the leader did not wait for)."""
        self.reap()
        leader = self.leader
        if leader is not None and leader.returncode is None:
            _signal(leader.pid, int(self.config.get("stop_signal", signal.SIGTERM)))
            # A paused (SIGSTOPped) server acts on the stop signal only once continued.
            for pid in self.tree():
                _signal(pid, signal.SIGCONT)
            deadline = time.monotonic() + grace
            while leader.returncode is None and time.monotonic() < deadline:
                time.sleep(0.01)
                self.reap()
        return self.kill_tree()

    def cleanup(self) -> None:
        for path in self.config.get("cleanup") or []:
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                _log(f"could not remove {path}: {exc}")

    # ---- the loop ---------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run one command; ``True`` means: exit the loop (``quit``)."""
        word, _, arg = line.strip().partition(" ")
        if word == "quit":
            return True
        if word == "kill":
            found: list[int] = []
            survivors = self.kill_tree(found)
            _say(done="kill", survivors=survivors, killed=sorted(found))
        elif word == "pause":
            _say(done="pause", pids=self.pause_tree())
        elif word == "resume":
            _say(done="resume", pids=self.resume_tree())
        elif word == "pids":
            _say(done="pids", **self.listing())
        elif word == "signal-pid":
            pid, _, signum = arg.partition(" ")
            _say(done="signal-pid", hit=self.signal_one(int(pid), int(signum)))
        elif word == "stop":
            grace = float(arg) if arg else float(self.config.get("grace", 5.0))
            _say(done="stop", survivors=self.stop_tree(grace))
        elif word == "signal":
            leader = self.leader
            if leader is not None and leader.returncode is None:
                _signal(leader.pid, int(arg))
            _say(done="signal")
        elif word:
            _log(f"unknown command {word!r}")
        return False

    def watch(self, control: int, pending: bytes) -> None:
        buffer = pending
        orphaned = False
        quit_ = False
        while not self.terminate and not quit_:
            while b"\n" in buffer and not quit_:
                line, _, buffer = buffer.partition(b"\n")
                quit_ = self.command(line.decode("utf-8", "replace"))
            if quit_:
                break
            try:
                ready, _, _ = select.select([control], [], [], 0.1)
            except InterruptedError:  # pragma: no cover - PEP 475 retries select
                ready = []
            if ready:
                data = os.read(control, 4096)
                if not data:
                    orphaned = True
                    break
                buffer += data
            self.reap()
        if orphaned or self.terminate:
            why = "the kit process is gone" if orphaned else "SIGTERM"
            _log(f"{why}: stopping the server (pid {self.pgid}) and removing its data")
            survivors = self.stop_tree(float(self.config.get("grace", 5.0)))
            if survivors:  # pragma: no cover - unkillable (uninterruptible sleep)
                _log(f"processes still alive after SIGKILL: {survivors}")
            self.cleanup()
        else:
            # A normal release: the kit stopped the server already; make sure of it.
            self.kill_tree()


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _read_first_line(fd: int) -> tuple[bytes, bytes]:
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"", b""
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line, rest


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    control = sys.stdin.fileno()
    line, rest = _read_first_line(control)
    if not line:
        return 0  # the kit died before telling us anything: nothing was started
    watchdog = Watchdog(json.loads(line))

    def on_sigterm(signum: int, frame: object) -> None:
        watchdog.terminate = True

    signal.signal(signal.SIGTERM, on_sigterm)
    watchdog.subreaper = _become_subreaper()
    try:
        watchdog.spawn()
    except Exception as exc:
        _say(error=f"{type(exc).__name__}: {exc}")
        return 1
    _say(started=watchdog.pgid)
    watchdog.watch(control, rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
