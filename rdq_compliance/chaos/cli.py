"""``rdq-chaos``: run a chaos campaign from the shell.

::

    rdq-chaos run chaos/standard.toml [--backend NAME] [--seed N] [--dsn DSN]
              [--out DIR] [--option KEY=VALUE ...] [--no-docker]
    rdq-chaos soak chaos/standard.toml --runs 50 [--seed BASE] [...the same options]
    rdq-chaos deployed list
    rdq-chaos deployed run SYSTEM [--profile fast|defaults] [--scenario standard|smoke|PATH]
              [--seed N] [--dsn DSN] [--out DIR] [--campaigns N]

Resolves its settings exactly as the pytest plugin does (:mod:`rdq_compliance.settings`:
command line, then ``RDQ_*`` environment variables, then ``[tool.rdq]`` of the nearest
``pyproject.toml``), provisions the server through a
:class:`~rdq_compliance.session.Session` (the DSN those settings give, else local
binaries, else a container), runs the scenario with a live progress display, writes the
report folder and prints where it is. Exit status: **0** no violation, **1** violations found,
a rule a fault is there for not exercised (or
the checker failed), **2** bad usage, a bad scenario, or no server to run against —
always with a one-line reason, never a stack trace. ``deployed`` runs deployed campaigns
(:mod:`rdq_compliance.deployed.cli`: a queue library's own workers under the nemesis).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from rdq_compliance import registry
from rdq_compliance.chaos.campaign_result import CampaignResult, Progress, replay_command
from rdq_compliance.chaos.faults.display import fault_details, fault_phrases, live_rows
from rdq_compliance.chaos.runner import provision_and_run
from rdq_compliance.chaos.scenario import Scenario, ScenarioError, check_seed, load_scenario
from rdq_compliance.chaos.soak import SoakResult, SoakRun, run_soak
from rdq_compliance.deployed import cli as deployed_cli
from rdq_compliance.option_check import check_options
from rdq_compliance.session import NoBackendSelected
from rdq_compliance.settings import Settings, describe, find_rootpath, mask_dsn, resolve
from rdq_core.errors import InvalidArgument, RdqError

EXIT_OK, EXIT_VIOLATIONS, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"rdq-chaos: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


PRECEDENCE = """\
settings, highest precedence first (exactly as under pytest --rdq-*):
  backend      --backend NAME       RDQ_BACKEND          [tool.rdq] backend
  server       --dsn DSN            RDQ_<BACKEND>_DSN,   [tool.rdq.<backend>] dsn,
                                    RDQ_DSN              [tool.rdq] dsn
  options      --option KEY=VALUE   RDQ_OPTION_<KEY>     keys of [tool.rdq.<backend>]
  containers   --no-docker          RDQ_NO_DOCKER=1      [tool.rdq] docker = false
[tool.rdq] is read from the pyproject.toml of the current directory or its nearest
parent holding one. Without a DSN the kit starts a private server from local binaries,
else a container where Docker answers.
"""


def _version() -> str:
    """The installed ``rdq`` distribution's version (``unknown`` when run from a bare
    source tree that was never installed)."""
    try:
        return importlib.metadata.version("rdq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (rdq is not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rdq-chaos", description="rdq chaos campaigns against a backend")
    parser.add_argument("--version", action="version", version=f"rdq-chaos {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run",
        help="run a scenario and write a report folder",
        description="Run a chaos scenario against a backend and write a report folder.",
        epilog=PRECEDENCE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(run)
    run.add_argument("--seed", type=int, help="override the scenario's seed (replays a run)")
    run.add_argument("--out", type=Path, help="report folder (default: chaos-reports/...)")
    run.add_argument("--quiet", action="store_true", help="no live display")
    run.add_argument(
        "--fleet",
        type=Path,
        help="a hosts file ([fleet] hosts = ...): run the workers on those hosts over SSH",
    )
    soak = sub.add_parser(
        "soak",
        help="run a scenario N times with fresh seeds; count the alarms",
        description="Run a scenario --runs times on one server, each campaign with its own "
        "seed drawn from --seed, and report the runs that were not ok (on a correct "
        "backend: the kit's false alarms). Writes soak.json and each run's report folder.",
        epilog=PRECEDENCE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(soak)
    soak.add_argument("--runs", type=int, required=True, help="how many campaigns (>= 1)")
    soak.add_argument(
        "--seed",
        type=int,
        help="the base seed the runs' seeds are drawn from (default: a fresh one, printed)",
    )
    soak.add_argument("--out", type=Path, help="soak folder (default: chaos-reports/soak-...)")
    soak.add_argument(
        "--keep-passing",
        action="store_true",
        help="keep the history of passing runs too (by default only failing runs keep it)",
    )
    deployed_cli.add_commands(sub, _Parser)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", type=Path, help="a scenario file, e.g. chaos/standard.toml")
    p.add_argument(
        "--backend",
        help="an rdq.backends name (or module:attr); default: RDQ_BACKEND, [tool.rdq] backend",
    )
    p.add_argument(
        "--dsn",
        help="use this server instead of provisioning one; default: RDQ_<BACKEND>_DSN, "
        "RDQ_DSN, [tool.rdq] dsn",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend-specific setting (repeatable); also RDQ_OPTION_<KEY>",
    )
    p.add_argument(
        "--no-docker", action="store_true", help="never try containers (also RDQ_NO_DOCKER=1)"
    )


def _progress_table(p: Progress, scenario_name: str, backend: str) -> Table:
    c = p.counters
    table = Table(title=f"rdq chaos: {scenario_name} on {backend}", show_header=False, min_width=60)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("phase", f"{p.phase}  ({p.elapsed:5.1f}s)")
    table.add_row(
        "tasks done",
        f"{p.done}/{p.total}  (succeeded {p.stats.succeeded}, "
        f"dead {p.stats.dead}, pending {p.stats.pending}, "
        f"in flight {p.stats.in_flight})",
    )
    for label, text in live_rows(c):
        table.add_row(label, text)
    table.add_row("violations", "-" if p.violations is None else str(p.violations))
    return table


def _log_to(path: Path) -> None:
    """Send the harness's log (driver warnings during faults, ...) to a file, not the
    terminal, where the live display is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _default_out(scenario_name: str, backend: str, seed: int) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = backend.replace(":", "_").replace("/", "_")
    return Path("chaos-reports") / f"{scenario_name}-{safe}-seed{seed}-{stamp}"


def _summarise(console: Console, result: CampaignResult) -> None:
    c = result.counters
    t = result.tasks
    console.print(
        f"[bold]{result.scenario.name}[/] on [bold]{result.backend}[/] "
        f"({result.server_origin}), seed {result.seed}: {result.duration:.1f}s "
        f"(faults {result.fault_phase:.1f}s, drain {result.drain_time:.1f}s)"
    )
    console.print(
        f"  tasks: {t.get('enqueued')} enqueued, {t.get('succeeded')} succeeded, "
        f"{t.get('dead')} dead, {t.get('pending')} pending, {t.get('in_flight')} in flight, "
        f"{t.get('missing')} missing"
    )
    console.print(f"  faults: {'; '.join(fault_phrases(c))}")
    for line in fault_details(c):
        console.print(line, highlight=False)
    for note in c.notes:
        console.print(f"  [yellow]note:[/] {note}", highlight=False)
    if result.workers_left:
        console.print(f"  [red]processes left running: {result.workers_left}[/]")
    if result.checker_error:
        console.print(f"  [red]{result.checker_error}[/]")
    elif result.violations:
        console.print(f"  [red bold]{len(result.violations)} violation(s)[/]")
        for v in result.violations[:10]:
            # the message starts with its rule id already: ``[one-claim] ...``
            console.print(f"    {v.message}", highlight=False, markup=False)
    else:
        console.print("  [green bold]no violations[/]")
    if result.not_exercised:
        console.print(
            f"  [yellow]not exercised[/] (no call they judge): {', '.join(result.not_exercised)}",
            highlight=False,
        )
    for line in result.unmet_messages():  # the line starts with [rule]: not markup
        console.print(f"  required, not exercised: {line}", style="red", markup=False)
    console.print(f"  report: {result.outdir}  (timeline: {result.files.get('timeline')})")


def _load(
    args: argparse.Namespace, err: Console
) -> tuple[Scenario, Settings, str, list[str]] | None:
    """The scenario (its seed overridden by ``--seed``), the resolved settings, the
    backend's name and the header's notes on the options given (an unknown key is an
    error), or ``None`` after printing why not."""
    try:
        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.with_seed(check_seed(args.seed, "--seed"))
        settings = resolve(
            cli_backend=args.backend,
            cli_dsn=args.dsn,
            cli_no_docker=args.no_docker,
            cli_options=list(args.option),
            cli_option_flag="--option",
            rootpath=find_rootpath(Path.cwd()),
        )
        if settings.backend is None:
            raise NoBackendSelected("--backend NAME")
        backend = settings.backend
        notes = check_options(settings, registry.load_backend(backend)).header_lines()
    except (ScenarioError, InvalidArgument, registry.UnknownBackend) as exc:
        err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return None
    return scenario, settings, backend, notes


def _typed_dsn(settings: Settings) -> str | None:
    """The DSN for a replay command: only when it was typed (a password masked); one
    from the environment or pyproject.toml is found there again."""
    typed = settings.dsn if settings.sources.get("dsn") == "command line" else None
    return mask_dsn(typed) if typed else None


def cmd_run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    loaded = _load(args, err)
    if loaded is None:
        return EXIT_USAGE
    scenario, settings, backend, notes = loaded
    fleet_hosts = None
    fleet_errors: tuple[type[Exception], ...] = ()
    if args.fleet is not None:
        from rdq_compliance.chaos.fleet_hosts import FleetConfigError, load_fleet
        from rdq_compliance.chaos.ssh_launcher import FleetError

        fleet_errors = (FleetError,)

        try:
            fleet_hosts = load_fleet(args.fleet)
        except FleetConfigError as exc:
            err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False, soft_wrap=True)
            return EXIT_USAGE
    out = args.out or _default_out(scenario.name, backend, scenario.seed)
    try:
        _log_to(out / "logs" / "harness.log")
    except OSError as exc:
        err.print(f"rdq-chaos: error: cannot write the report folder {out}: {exc}")
        return EXIT_USAGE
    command = replay_command(
        scenario,
        backend,
        scenario.seed,
        _typed_dsn(settings),
        options=settings.options,
        fleet=args.fleet,
    )
    console = Console()
    console.print(f"rdq-chaos: {describe(settings)}", highlight=False, markup=False)
    for note in notes:
        console.print(f"rdq-chaos: {note}", highlight=False, markup=False)
    live: Live | None = None
    if not args.quiet:
        live = Live(console=console, refresh_per_second=4, transient=False)

    def on_progress(p: Progress) -> None:
        if live is not None:
            live.update(_progress_table(p, scenario.name, backend))

    try:
        if live is not None:
            live.start()
        result = provision_and_run(
            scenario,
            settings=settings,
            outdir=out,
            progress=on_progress,
            command=command,
            fleet_hosts=fleet_hosts,
        )
    except KeyboardInterrupt:
        if live is not None:
            live.stop()
        err.print("rdq-chaos: interrupted; the fleet and the server were stopped")
        return 130
    except (RdqError, OSError, *fleet_errors) as exc:
        if live is not None:
            live.stop()
        err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return EXIT_USAGE
    finally:
        if live is not None:
            live.stop()
    _summarise(console, result)
    if not result.ok:
        return EXIT_VIOLATIONS
    return EXIT_OK


def _soak_line(run: SoakRun, soak: SoakResult, total: int) -> str:
    faults = "; ".join(f for f in run.faults if not f.startswith("0 ")) or "no faults"
    verdict = run.verdict
    if run.rules:
        verdict += " (" + ", ".join(f"{k} x{n}" for k, n in sorted(run.rules.items())) + ")"
    if run.unmet:
        verdict += " (not exercised: " + ", ".join(run.unmet) + ")"
    return (
        f"run {run.index}/{total} seed {run.seed}: {verdict}, {run.duration:.1f}s; "
        f"{faults}  [alarms so far: {len(soak.alarms)}]"
    )


def cmd_soak(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    if args.runs < 1:
        err.print(f"rdq-chaos: error: --runs must be at least 1, got {args.runs}")
        return EXIT_USAGE
    base = args.seed
    args.seed = None  # the base seed draws the runs' seeds; it is not a campaign's seed
    loaded = _load(args, err)
    if loaded is None:
        return EXIT_USAGE
    scenario, settings, backend, notes = loaded
    if base is None:
        base = secrets.randbelow(2**31)
    else:
        try:
            check_seed(base, "--seed")
        except ScenarioError as exc:
            err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False, soft_wrap=True)
            return EXIT_USAGE
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = backend.replace(":", "_").replace("/", "_")
    out = args.out or Path("chaos-reports") / f"soak-{scenario.name}-{safe}-base{base}-{stamp}"
    try:
        _log_to(out / "harness.log")
    except OSError as exc:
        err.print(f"rdq-chaos: error: cannot write the soak folder {out}: {exc}")
        return EXIT_USAGE
    console = Console()
    console.print(f"rdq-chaos: {describe(settings)}", highlight=False, markup=False)
    for note in notes:
        console.print(f"rdq-chaos: {note}", highlight=False, markup=False)
    console.print(
        f"soak: {args.runs} runs of {scenario.name}, seeds drawn from base seed {base} "
        f"(replay the soak with --seed {base})",
        highlight=False,
    )

    def on_run(run: SoakRun, soak: SoakResult) -> None:
        style = "green" if run.ok else "red"
        console.print(_soak_line(run, soak, args.runs), style=style, highlight=False, markup=False)

    try:
        soak = run_soak(
            scenario,
            settings=settings,
            runs=args.runs,
            base_seed=base,
            outdir=out,
            keep_passing=args.keep_passing,
            on_run=on_run,
            dsn_for_replay=_typed_dsn(settings),
        )
    except KeyboardInterrupt:
        err.print(f"rdq-chaos: interrupted; what was measured is in {out / 'soak.json'}")
        return 130
    except (RdqError, OSError) as exc:
        err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return EXIT_USAGE
    alarms = soak.alarms
    per_run = soak.as_dict()["run_seconds"]
    assert isinstance(per_run, dict)
    spread = "/".join(str(per_run[k]) for k in ("min", "mean", "max"))
    console.print(
        f"[bold]soak[/] {scenario.name} on [bold]{soak.backend}[/] ({soak.server_origin}): "
        f"{len(soak.runs)} runs in {soak.duration:.0f}s (per run min/mean/max {spread}s), "
        f"{len(alarms)} not ok",
        highlight=False,
    )
    for run in alarms:
        console.print(
            f"  not ok: seed {run.seed}: {run.verdict}; replay: {run.replay}",
            style="red",
            highlight=False,
            markup=False,
        )
    console.print(f"  soak.json: {out / 'soak.json'}", highlight=False)
    return EXIT_VIOLATIONS if alarms else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "soak":
        return cmd_soak(args)
    if args.command == "deployed":
        return deployed_cli.run_command(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
