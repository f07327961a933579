"""A system whose worker is a small process tree (a leader and two children that only
sleep), for the fleet's and the nemesis's own tests: no queue, no probe lines. A worker
exits with status 3 when its flag file (``<folder>/<name>.exit``) appears, deleting it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rdq_compliance.deployed.system import Part, WorkerLaunch

LEADER = """
import os, subprocess, sys, time
child = "import time\\nwhile True: time.sleep(0.5)"
children = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
flag = sys.argv[1]
while True:
    if os.path.exists(flag):
        os.unlink(flag)
        sys.exit(3)
    time.sleep(0.05)
"""


@dataclass
class TreeSystem:
    folder: Path
    name: str = "tree==0"
    parts: tuple[Part, ...] = (Part("main"), Part("child", 2, "sleeps", "descendants"))

    def flag(self, worker: str) -> Path:
        return self.folder / f"{worker}.exit"

    def worker(self, name: str, profile: str, probe_path: str) -> WorkerLaunch:
        argv = (sys.executable, "-c", LEADER, str(self.flag(name)))
        return WorkerLaunch(argv, {"RDQ_PROBE_PATH": probe_path, "RDQ_PROBE_WORKER": name})
