"""``rdq-chaos``: run a chaos campaign from the shell.

::

    rdq-chaos run chaos/standard.toml [--backend NAME] [--seed N] [--dsn DSN]
              [--out DIR] [--option KEY=VALUE ...] [--no-docker]

Resolves its settings exactly as the pytest plugin does (:mod:`rdq_compliance.settings`:
command line, then ``RDQ_*`` environment variables, then ``[tool.rdq]`` of the nearest
``pyproject.toml``), provisions the server through a
:class:`~rdq_compliance.session.Session` (the DSN those settings give, else local
binaries, else a container), runs the scenario with a live progress display, writes the
report folder and prints where it is. Exit status: **0** no violation, **1** violations found,
a rule a fault is there for not exercised (or
the checker failed), **2** bad usage, a bad scenario, or no server to run against —
always with a one-line reason, never a stack trace.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import os
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
from rdq_compliance.chaos.scenario import ScenarioError, check_seed, load_scenario
from rdq_compliance.session import NoBackendSelected
from rdq_compliance.settings import describe, find_rootpath, mask_dsn, resolve
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rdq-chaos", description="rdq chaos campaigns against a backend")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run",
        help="run a scenario and write a report folder",
        description="Run a chaos scenario against a backend and write a report folder.",
        epilog=PRECEDENCE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("scenario", type=Path, help="a scenario file, e.g. chaos/standard.toml")
    run.add_argument(
        "--backend",
        help="an rdq.backends name (or module:attr); default: RDQ_BACKEND, [tool.rdq] backend",
    )
    run.add_argument("--seed", type=int, help="override the scenario's seed (replays a run)")
    run.add_argument(
        "--dsn",
        help="use this server instead of provisioning one; default: RDQ_<BACKEND>_DSN, "
        "RDQ_DSN, [tool.rdq] dsn",
    )
    run.add_argument("--out", type=Path, help="report folder (default: chaos-reports/...)")
    run.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend-specific setting (repeatable); also RDQ_OPTION_<KEY>",
    )
    run.add_argument(
        "--no-docker", action="store_true", help="never try containers (also RDQ_NO_DOCKER=1)"
    )
    run.add_argument("--quiet", action="store_true", help="no live display")
    return parser


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


def cmd_run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.with_seed(check_seed(args.seed, "--seed"))
        settings = resolve(
            cli_backend=args.backend,
            cli_dsn=args.dsn,
            cli_no_docker=args.no_docker,
            cli_options=list(args.option),
            rootpath=find_rootpath(Path.cwd()),
        )
        if settings.backend is None:
            raise NoBackendSelected("--backend NAME")
        registry.load_backend(settings.backend)
    except (ScenarioError, InvalidArgument, registry.UnknownBackend) as exc:
        err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False)
        return EXIT_USAGE
    backend = settings.backend
    out = args.out or _default_out(scenario.name, backend, scenario.seed)
    try:
        _log_to(out / "logs" / "harness.log")
    except OSError as exc:
        err.print(f"rdq-chaos: error: cannot write the report folder {out}: {exc}")
        return EXIT_USAGE
    # The DSN goes into the replay command only when it was typed (a password masked);
    # one from the environment or pyproject.toml is found there again.
    typed_dsn = settings.dsn if settings.sources.get("dsn") == "command line" else None
    command = replay_command(
        scenario,
        backend,
        scenario.seed,
        mask_dsn(typed_dsn) if typed_dsn else None,
        options=settings.options,
    )
    console = Console()
    console.print(f"rdq-chaos: {describe(settings)}", highlight=False, markup=False)
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
            scenario, settings=settings, outdir=out, progress=on_progress, command=command
        )
    except KeyboardInterrupt:
        if live is not None:
            live.stop()
        err.print("rdq-chaos: interrupted; the fleet and the server were stopped")
        return 130
    except (RdqError, OSError) as exc:
        if live is not None:
            live.stop()
        err.print(f"rdq-chaos: error: {exc}", highlight=False, markup=False)
        return EXIT_USAGE
    finally:
        if live is not None:
            live.stop()
    _summarise(console, result)
    if not result.ok:
        return EXIT_VIOLATIONS
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
