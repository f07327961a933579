"""Benchmark of the remote fleet: the standard campaign with its workers on
this machine and on three SSH hosts, side by side, per backend.

For each backend (PostgreSQL and Redis from the local binaries: private servers the kit
starts), three SSH test hosts are built (:mod:`rdq_compliance.provision.ssh_hosts`:
network namespaces with a real sshd, on one kernel), then ``chaos/standard.toml``
(8 workers, 2,000 tasks, 40 s of faults) runs ``--pairs`` times in each placement,
alternating local and remote so both see the same machine. Printed per run: the
placement, the verdict, the whole time, the fault phase, the drain, the faults applied,
the journal events, and for the remote runs each host's measured clock (offset ±
uncertainty). Then per backend the mean times and the ratio remote / local::

    python benchmarks/fleet_overhead.py                    # postgres and redis, 2 pairs
    python benchmarks/fleet_overhead.py --only redis --pairs 3

Needs root, ``ip``, ``nft`` and Debian's openssh-server (what the SSH test hosts need).
Exit status 1 if a run did not pass. Each row carries the machine's load while it ran;
the rows follow as history rows for ``BENCHMARKS.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _figures import ROOT, LoadWatch, command, header, history_rows

from rdq_compliance.chaos.events import read_journal
from rdq_compliance.chaos.fleet_hosts import load_fleet
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.provision import ssh_hosts
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings

BACKENDS = ("postgres", "redis")
STANDARD = ROOT / "chaos" / "standard.toml"
HOSTS = 3


def _events(outdir: Path) -> int:
    return sum(1 for p in (outdir / "history").glob("w*.jsonl") for _ in read_journal(p))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", action="append", choices=BACKENDS)
    ap.add_argument("--pairs", type=int, default=2, help="local/remote pairs per backend")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    why = ssh_hosts.unavailable()
    if why:
        print(f"fleet_overhead: no SSH test hosts here: {why}", file=sys.stderr)
        return 1
    print(header(), file=sys.stderr, flush=True)
    scenario = load_scenario(STANDARD)
    ok = True
    lines: list[str] = []
    history: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rdq-fleet-bench-") as tmp:
        for name in args.only or BACKENDS:
            base = Path(tmp) / name
            session = Session(Settings(backend=name, docker=False), workdir=base / "server")
            session.start()
            times: dict[str, list[float]] = {"local": [], "ssh": []}
            try:
                relay = [session.server.network_address()]
                with ssh_hosts.SshHosts(HOSTS, base / "hosts", relays=relay) as hosts:
                    fleet = load_fleet(hosts.write_fleet_toml(base / "hosts.toml", sys.executable))
                    for n in range(args.pairs):
                        for where in ("local", "ssh"):
                            out = base / f"{where}-{n}"
                            with LoadWatch() as watch:
                                r = run_campaign(
                                    scenario,
                                    session=session,
                                    outdir=out,
                                    fleet_hosts=fleet if where == "ssh" else None,
                                )
                            ok &= r.checked and not r.violations and r.drained
                            times[where].append(r.duration)
                            c = r.counters
                            clocks = "; ".join(
                                f"{h['name']} {float(h['offset'] or 0) * 1e3:+.2f}"
                                f"±{float(h['uncertainty'] or 0) * 1e3:.2f} ms"
                                for h in r.hosts
                            )
                            line = (
                                f"{name} {where} #{n + 1}: "
                                f"{'pass' if not r.violations else 'VIOLATIONS'}, "
                                f"{r.duration:.1f} s (faults {r.fault_phase:.1f} s, drain "
                                f"{r.drain_time:.1f} s), {c.total_kills} kills, {c.pauses} "
                                f"pauses, {_events(out)} worker events"
                                + (f", clocks {clocks}" if clocks else "")
                            )
                            print(f"{line}  [{watch.span}]", file=sys.stderr, flush=True)
                            lines.append(f"{line}  [{watch.span}]")
                            history.append((line, watch.span, command("--only", name)))
            finally:
                session.close()
            local, ssh = statistics.mean(times["local"]), statistics.mean(times["ssh"])
            summary = (
                f"{name}: mean {local:.1f} s local, {ssh:.1f} s on {HOSTS} SSH hosts: "
                f"ratio {ssh / local:.3f} ({args.pairs} pairs)"
            )
            lines.append(summary)
            history.append((summary, "", command("--only", name)))
    print("\n".join(lines))
    print()
    print(history_rows(history))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
