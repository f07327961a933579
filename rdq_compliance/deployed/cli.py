"""``rdq-chaos deployed``: deployed campaigns from the shell.

::

    rdq-chaos deployed list
    rdq-chaos deployed run SYSTEM [--profile fast|defaults] [--scenario standard|smoke|PATH]
                              [--seed N] [--dsn DSN] [--out DIR] [--campaigns N]
                              [--fleet HOSTS.toml]

``list`` names the installed systems (``rdq.systems`` entry points), each with its
declaration's problems. ``run`` runs ``--campaigns`` campaigns (seeds ``N`` to
``N + campaigns - 1``; without ``--seed`` a fresh one, printed) and prints a line per
campaign and a total. With ``--fleet`` the workers run on the hosts of that hosts file
over SSH (``docs/fleet.md``; a bad file is a usage error). Exit status: **0** no
finding, **1** a finding in some campaign, **2** bad usage, a setup error, or a campaign
that could not judge the library (a worker that never started, a probe journal that
breaks the format, no execution journalled at all while the library accepted jobs; the
campaigns stop there) -- with a one-line reason, never a stack trace. A fault the
nemesis could not do (nothing to act on) is printed and in the report, beside the
verdicts. A password in a DSN is never printed.

:mod:`rdq_compliance.chaos.cli` adds these commands to ``rdq-chaos``
(:func:`add_commands`, :func:`run_command`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import secrets
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rdq_compliance.chaos.fleet_hosts import FleetConfigError, load_fleet
from rdq_compliance.deployed import upstream, verdicts
from rdq_compliance.deployed.campaign import CampaignError, load, run_campaign
from rdq_compliance.deployed.result import CampaignResult
from rdq_compliance.deployed.scenario import BUILTIN, ScenarioError, load_scenario
from rdq_compliance.deployed.system import declaration_problems, installed, load_system
from rdq_core.errors import RdqError
from rdq_core.masking import mask_dsn

__all__ = ["EXIT_FINDING", "EXIT_OK", "EXIT_USAGE", "add_commands", "run_command"]

EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2


def add_commands(sub: argparse._SubParsersAction, parser_class: type) -> None:  # type: ignore[type-arg]
    """Add ``deployed list`` and ``deployed run`` to the ``rdq-chaos`` subcommands."""
    deployed = sub.add_parser(
        "deployed",
        help="judge a queue library as deployed: its own workers, under faults",
        description="Deployed campaigns: a queue library's own workers at its documented "
        "settings, under the kit's nemesis, judged from the probe's journal.",
    )
    commands = deployed.add_subparsers(
        dest="deployed_command", required=True, parser_class=parser_class
    )
    commands.add_parser("list", help="the installed systems and their declaration problems")
    run = commands.add_parser("run", help="run campaigns on a system; write report folders")
    run.add_argument("system", help="an rdq.systems name (see: deployed list), or module:attr")
    run.add_argument(
        "--profile",
        default="fast",
        help="the system's settings profile (fast: shortened settings, each cited; "
        "defaults: nothing changed)",
    )
    run.add_argument(
        "--scenario",
        default="standard",
        help=f"{' or '.join(BUILTIN)}, or a scenario file (TOML)",
    )
    run.add_argument("--seed", type=int, help="the first campaign's seed (default: a fresh one)")
    run.add_argument("--dsn", help="run on this server instead of provisioning one")
    run.add_argument("--out", type=Path, help="report folder (default: deployed-reports/...)")
    run.add_argument(
        "--campaigns", type=int, default=1, help="how many campaigns (seeds seed..seed+N-1)"
    )
    run.add_argument(
        "--fleet",
        type=Path,
        metavar="HOSTS",
        help="a hosts file ([fleet] hosts = ...): run the workers on those hosts over SSH, "
        "round-robin, each under the kit's watchdog there; a partition cuts a whole host "
        "from the server and a clock skew is a whole host's (docs/fleet.md)",
    )


def _scrub(text: str, dsn: str | None) -> str:
    """``text`` with the DSN given (if any) masked."""
    return text.replace(dsn, mask_dsn(dsn)) if dsn else text


def _error(err: Console, text: str, dsn: str | None = None) -> int:
    line = " ".join(_scrub(text, dsn).split())
    err.print(f"rdq-chaos: error: {line}", highlight=False, markup=False, soft_wrap=True)
    return EXIT_USAGE


def cmd_list(console: Console) -> int:
    rules = [r.id for r in verdicts.RULES]
    table = Table(title="rdq deployed systems", show_lines=False)
    table.add_column("name", style="bold")
    table.add_column("system")
    table.add_column("declaration problems")
    found = installed()
    for name in sorted(found):
        try:
            system = load_system(name)
        except RdqError as exc:
            table.add_row(name, "-", f"cannot be loaded: {exc}")
            continue
        problems = declaration_problems(system, rules) + upstream.problems(system, rules)
        table.add_row(name, system.name, "; ".join(problems) or "none")
    console.print(table)
    if not found:
        console.print("no deployed system is installed (entry point group 'rdq.systems')")
    return EXIT_OK


def _default_out(system: str, scenario: str, seed: int) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^\w.-]+", "_", system)
    return Path("deployed-reports") / f"{safe}-{scenario}-seed{seed}-{stamp}"


def _line(n: int, total: int, result: CampaignResult) -> str:
    done = len(result.nemesis.done)
    planned = len(result.plan.faults)
    errors = len(result.nemesis.errors) + (1 if result.error else 0)
    return (
        f"campaign {n}/{total} seed {result.plan.seed}: {len(result.findings)} finding(s), "
        + (f"{len(result.known)} confirmed upstream, " if result.known_upstream else "")
        + f"{len(result.gaps)} gap(s); faults {done}/{planned} done, {errors} error(s); "
        f"{len(result.accepted)} jobs; {result.timings.get('total', 0):.1f} s; "
        f"report {result.outdir}"
    )


def _summarise(console: Console, result: CampaignResult) -> None:
    counts = result.counts()
    console.print(f"  final states: {counts['final state']}", highlight=False, markup=False)
    console.print(f"  drain: {result.drain_ended_by}", highlight=False, markup=False)
    for line in result.not_enqueued():
        console.print(f"  {line}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    for e in result.nemesis.errors:
        console.print(
            f"  fault error: {e.message}",
            style="red",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if result.error:
        console.print(f"  error: {result.error}", style="red", highlight=False, markup=False)
    for v in result.findings[:10]:
        console.print(f"  {v.message}", style="red", highlight=False, markup=False, soft_wrap=True)
    for v in result.known[:10]:
        console.print(
            f"  {v.message}", style="yellow", highlight=False, markup=False, soft_wrap=True
        )


def cmd_run(args: argparse.Namespace, console: Console, err: Console) -> int:
    if args.campaigns < 1:
        return _error(err, f"--campaigns must be at least 1, not {args.campaigns}")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        return _error(err, f"--seed must be in [0, 2**63), not {args.seed}")
    try:
        system, profile = load(args.system, args.profile)
        scenario = load_scenario(args.scenario)
    except (CampaignError, ScenarioError) as exc:
        return _error(err, str(exc), args.dsn)
    fleet = None
    if args.fleet is not None:
        try:
            fleet = load_fleet(args.fleet)
        except FleetConfigError as exc:
            return _error(err, str(exc), args.dsn)
    base = args.seed if args.seed is not None else secrets.randbelow(2**31)
    if args.seed is None:
        console.print(f"rdq-chaos: seed {base} (replay with --seed {base})", highlight=False)
    root = args.out or _default_out(system.name, scenario.name, base)
    status = EXIT_OK
    findings = known = gaps = 0
    for n in range(1, args.campaigns + 1):
        seed = base + n - 1
        out = root if args.campaigns == 1 else root / f"seed{seed}"
        console.print(
            f"[bold]{system.name}[/]: {scenario.name}, profile {profile.name}, seed {seed}",
            highlight=False,
            soft_wrap=True,
        )

        def say(line: str) -> None:
            console.print(
                f"  {_scrub(line, args.dsn)}", highlight=False, markup=False, soft_wrap=True
            )

        try:
            result = run_campaign(
                system, profile, scenario, seed, out=out, dsn=args.dsn, say=say, fleet=fleet
            )
        except KeyboardInterrupt:
            err.print("rdq-chaos: interrupted; the workers and the server were stopped")
            return 130
        except (RdqError, OSError) as exc:
            return _error(err, str(exc), args.dsn)
        _summarise(console, result)
        findings += len(result.findings)
        known += len(result.known)
        gaps += len(result.gaps)
        style = "red" if result.findings else "green"
        console.print(
            _line(n, args.campaigns, result),
            style=style,
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        if result.error:
            return _error(err, f"campaign {n} (seed {seed}): {result.error}", args.dsn)
        if result.findings:
            status = EXIT_FINDING
    console.print(
        f"total: {args.campaigns} campaign(s), {findings} finding(s), "
        + (f"{known} confirmed upstream, " if known else "")
        + f"{gaps} gap(s)",
        style="red" if findings else "green",
        highlight=False,
    )
    return status


def run_command(args: argparse.Namespace) -> int:
    """Run the ``deployed`` subcommand ``args`` asks for; the exit status."""
    console, err = Console(), Console(stderr=True)
    if args.deployed_command == "list":
        return cmd_list(console)
    return cmd_run(args, console, err)
