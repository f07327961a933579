"""A system whose worker is a small process tree (a leader and two children that only
sleep), for the fleet's and the nemesis's own tests: no queue. A worker exits with
status 3 when its flag file (``<folder>/<name>.exit``) appears, deleting it; it runs a
job when its job file (``<folder>/<name>.job``, written by :meth:`TreeSystem.give`)
appears: the leader, or a child of it in a process group of its own, journals the job's
start in its probe, appends the time to ``<name>.job.beats`` every millisecond until the
test releases the job (:meth:`TreeSystem.release`), journals its end."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rdq_compliance.deployed.system import Part, WorkerLaunch

LEADER = """
import os, subprocess, sys, time
child = "import time\\nwhile True: time.sleep(0.5)"
children = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
flag, job = sys.argv[1], sys.argv[2]
while True:
    if os.path.exists(flag):
        os.unlink(flag)
        sys.exit(3)
    if os.path.exists(job):
        with open(job) as fh:
            name, where = fh.read().split()
        os.unlink(job)
        own = where == "own-group" and os.fork()
        if where == "own-group" and not own:  # the child: rq's work horse
            import signal
            os.setpgrp()
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if not own:
            from rdq_compliance.deployed.probe import ProbeWriter
            probe = ProbeWriter.from_env()
            run = probe.started(name)
            beats = os.open(job + ".beats", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            while not os.path.exists(job + ".release"):
                os.write(beats, b"%f\\n" % time.time())
                time.sleep(0.001)
            os.unlink(job + ".release")
            probe.ended(run, "succeeded")
            if where == "own-group":
                os._exit(0)
        else:
            os.waitpid(own, 0)
    time.sleep(0.05)
"""


@dataclass
class TreeSystem:
    folder: Path
    name: str = "tree==0"
    parts: tuple[Part, ...] = (Part("main"), Part("child", 2, "sleeps", "descendants"))

    def flag(self, worker: str) -> Path:
        return self.folder / f"{worker}.exit"

    def job_file(self, worker: str) -> Path:
        return self.folder / f"{worker}.job"

    def give(self, worker: str, job: str, *, own_group: bool = False) -> None:
        """Have ``worker`` run job ``job`` (once it looks: every 50 ms) until
        :meth:`release`, in its leader, or with ``own_group`` in a child in a process
        group of its own that ignores SIGHUP, as rq's work horse (the leader waits for
        it)."""
        path = self.job_file(worker)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{job} {'own-group' if own_group else 'leader'}")
        os.replace(tmp, path)

    def release(self, worker: str) -> None:
        """End the job ``worker`` runs (it journals its end)."""
        self.folder.joinpath(f"{worker}.job.release").touch()

    def beats(self, worker: str) -> Path:
        """The file a running job appends its time to every millisecond."""
        return self.folder / f"{worker}.job.beats"

    def worker(self, name: str, profile: str, probe_path: str) -> WorkerLaunch:
        argv = (sys.executable, "-c", LEADER, str(self.flag(name)), str(self.job_file(name)))
        return WorkerLaunch(argv, {"RDQ_PROBE_PATH": probe_path, "RDQ_PROBE_WORKER": name})
