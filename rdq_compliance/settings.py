"""The kit's settings, from the command line, the environment and ``pyproject.toml``.

Precedence, highest first: ``--rdq-*`` options, ``RDQ_*`` environment variables,
the ``[tool.rdq]`` table of the ``pyproject.toml`` in pytest's root directory.

================== ============================ =========================== ====================
setting            option                       environment                 ``[tool.rdq]`` key
================== ============================ =========================== ====================
backend            ``--rdq-backend NAME``       ``RDQ_BACKEND``             ``backend``
server address     ``--rdq-dsn DSN``            ``RDQ_<BACKEND>_DSN``,      ``dsn``, or ``dsn`` in
                                                ``RDQ_DSN``                 ``[tool.rdq.<backend>]``
fail, not skip     ``--rdq-require-backend``    ``RDQ_REQUIRE_BACKEND=1``   ``require-backend``
no containers      ``--rdq-no-docker``          ``RDQ_NO_DOCKER=1``         ``docker = false``
backend options    ``--rdq-option KEY=VALUE``   ``RDQ_OPTION_<KEY>``        ``[tool.rdq.<backend>]``
================== ============================ =========================== ====================

``[tool.rdq.expected-failures]`` and ``[tool.rdq.<backend>.expected-failures]`` map a rule
id or a test id to the reason it is a known gap (see :mod:`rdq_compliance.ledger`); the
backend's table adds to the shared one. ``[[tool.rdq.known-upstream]]`` and
``[[tool.rdq.<backend>.known-upstream]]`` are arrays of tables, each a behaviour a public
issue tracks (see :mod:`rdq_compliance.known_upstream`, which checks them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rdq_core.errors import InvalidArgument
from rdq_core.masking import mask_dsn

#: Each setting by source, highest precedence first: (setting, command line, environment,
#: ``pyproject.toml``); the docs' settings reference is generated from it.
SOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("backend", "`--rdq-backend NAME`", "`RDQ_BACKEND`", "`backend` in `[tool.rdq]`"),
    (
        "server address",
        "`--rdq-dsn DSN`",
        "`RDQ_<BACKEND>_DSN`, then `RDQ_DSN`",
        "`dsn` in `[tool.rdq.<backend>]`, then in `[tool.rdq]`",
    ),
    (
        "fail instead of skip when no server",
        "`--rdq-require-backend`",
        "`RDQ_REQUIRE_BACKEND=1`",
        "`require-backend = true`",
    ),
    ("never use containers", "`--rdq-no-docker`", "`RDQ_NO_DOCKER=1`", "`docker = false`"),
    (
        "backend options (checked: an unknown key is a usage error)",
        "`--rdq-option KEY=VALUE` (`rdq-chaos`: `--option`)",
        "`RDQ_OPTION_<KEY>`",
        "keys of `[tool.rdq.<backend>]`",
    ),
    (
        "known gaps (the ledger)",
        "none",
        "none",
        "`[tool.rdq.expected-failures]`, `[tool.rdq.<backend>.expected-failures]`",
    ),
    (
        "behaviours a public issue tracks (the ledger)",
        "none",
        "none",
        "`[[tool.rdq.known-upstream]]`, `[[tool.rdq.<backend>.known-upstream]]`",
    ),
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    """The kit's settings, merged. ``sources`` says where ``backend`` and ``dsn`` came from
    (``"command line"``, ``"RDQ_POSTGRES_DSN"``, ``"[tool.rdq] in /path/pyproject.toml"``)."""

    backend: str | None
    dsn: str | None = None
    require_backend: bool = False
    docker: bool = True
    options: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    #: ``[tool.rdq.expected-failures]`` (and the backend's own table): rule or test id ->
    #: reason; ``sources["expected-failures"]`` says which file and tables.
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    #: ``[[tool.rdq.known-upstream]]`` then ``[[tool.rdq.<backend>.known-upstream]]``: per
    #: array, where it is and its tables as written (checked by
    #: :func:`rdq_compliance.known_upstream.entries_from`).
    known_upstream: tuple[tuple[str, tuple[object, ...]], ...] = ()
    #: where each of ``options`` was set: ``"--rdq-option"`` (``"--option"`` for
    #: ``rdq-chaos``), ``"RDQ_OPTION_<KEY>"`` or
    #: ``"[tool.rdq.<backend>] in /path/pyproject.toml"``
    option_sources: Mapping[str, str] = field(default_factory=dict)


def find_rootpath(start: Path) -> Path:
    """The folder whose ``pyproject.toml`` a runner without pytest's rootdir reads: the
    nearest of ``start`` and its parents that holds one (else ``start``)."""
    start = start.absolute()
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return start


def read_pyproject(rootpath: Path) -> dict[str, Any]:
    """The ``[tool.rdq]`` table, or ``{}``; a malformed file is a clear error."""
    path = rootpath / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{path}: not valid TOML ({exc})") from None
    table = data.get("tool", {}).get("rdq", {})
    if not isinstance(table, dict):
        raise InvalidArgument(f"{path}: [tool.rdq] must be a table")
    return table


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgument(f"{name}={value!r}: expected true/false (1/0, yes/no)")


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--rdq-option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def resolve(
    *,
    cli_backend: str | None = None,
    cli_dsn: str | None = None,
    cli_require: bool = False,
    cli_no_docker: bool = False,
    cli_options: Sequence[str] = (),
    cli_option_flag: str = "--rdq-option",
    rootpath: Path | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Settings:
    """Merge the three sources into :class:`Settings`. ``rootpath`` is the folder whose
    ``pyproject.toml`` is read (pytest's rootdir; default: :func:`find_rootpath` of the
    current directory); ``cli_option_flag`` is how the command line spells its option
    flag, for :attr:`Settings.option_sources`."""
    rootpath = rootpath if rootpath is not None else find_rootpath(Path.cwd())
    table = read_pyproject(rootpath)
    in_pyproject = f"[tool.rdq] in {rootpath / 'pyproject.toml'}"
    sources: dict[str, str] = {}
    backend = _first(
        sources,
        "backend",
        ("command line", cli_backend),
        ("RDQ_BACKEND", environ.get("RDQ_BACKEND")),
        (in_pyproject, table.get("backend")),
    )
    sub = table.get(backend, {}) if backend and ":" not in backend else {}
    if not isinstance(sub, dict):
        sub = {}
    env_name = f"RDQ_{backend.upper().replace('-', '_')}_DSN" if backend else None
    dsn = _first(
        sources,
        "dsn",
        ("command line", cli_dsn),
        (str(env_name), environ.get(env_name) if env_name and ":" not in str(backend) else None),
        ("RDQ_DSN", environ.get("RDQ_DSN")),
        (f"[tool.rdq.{backend}] in {rootpath / 'pyproject.toml'}", sub.get("dsn")),
        (in_pyproject, table.get("dsn")),
    )
    require = cli_require or _flag(
        "require-backend",
        environ.get("RDQ_REQUIRE_BACKEND", table.get("require-backend", False)),
    )
    docker = not cli_no_docker and not _flag("RDQ_NO_DOCKER", environ.get("RDQ_NO_DOCKER", "0"))
    docker = docker and _flag("docker", table.get("docker", True))
    options: dict[str, str] = {}
    option_sources: dict[str, str] = {}
    in_sub = f"[tool.rdq.{backend}] in {rootpath / 'pyproject.toml'}"
    for k, v in sub.items():
        if k not in ("dsn", "known-upstream") and not isinstance(v, dict):
            options[str(k)] = str(v)
            option_sources[str(k)] = in_sub
    for key, value in environ.items():
        if key.startswith("RDQ_OPTION_"):
            options[key[len("RDQ_OPTION_") :].lower()] = value
            option_sources[key[len("RDQ_OPTION_") :].lower()] = key
    for key, value in parse_options(cli_options).items():
        options[key] = value
        option_sources[key] = cli_option_flag
    expected: dict[str, str] = {}
    tables = []
    for where, container in (
        ("[tool.rdq.expected-failures]", table),
        (f"[tool.rdq.{backend}.expected-failures]", sub),
    ):
        if "expected-failures" in container:
            expected.update(_ledger_table(where, rootpath, container["expected-failures"]))
            tables.append(where)
    if tables:
        sources["expected-failures"] = f"{' and '.join(tables)} in {rootpath / 'pyproject.toml'}"
    upstream = tuple(
        _upstream_array(where, rootpath, container["known-upstream"])
        for where, container in (
            ("[[tool.rdq.known-upstream]]", table),
            (f"[[tool.rdq.{backend}.known-upstream]]", sub),
        )
        if "known-upstream" in container
    )
    return Settings(
        backend=backend,
        dsn=dsn,
        require_backend=require,
        docker=docker,
        options=options,
        sources=sources,
        expected_failures=expected,
        known_upstream=upstream,
        option_sources=option_sources,
    )


def _upstream_array(where: str, rootpath: Path, value: object) -> tuple[str, tuple[object, ...]]:
    """A known-upstream array of tables, as written (its entries are checked later)."""
    path = rootpath / "pyproject.toml"
    if not isinstance(value, list):
        raise InvalidArgument(
            f"{path}: {where} must be an array of tables, each entry under its own "
            f'{where} header with repository = "owner/name", number = N, title = "..." and '
            "tests = [...] or rules = [...]"
        )
    return f"{where} in {path}", tuple(value)


def _ledger_table(where: str, rootpath: Path, value: object) -> dict[str, str]:
    """An expected-failures table: rule or test id -> a non-empty reason."""
    path = rootpath / "pyproject.toml"
    if not isinstance(value, dict):
        raise InvalidArgument(
            f'{path}: {where} must be a table of id = "reason", e.g. '
            f"'claim-order' = \"ties are ordered by id, not due time\""
        )
    out = {}
    for key, reason in value.items():
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidArgument(
                f"{path}: {where} {key!r} = {reason!r}: the value must be the reason the test "
                "is expected to fail, as a non-empty string"
            )
        out[str(key)] = reason.strip()
    return out


def describe(s: Settings) -> str:
    """One line for humans: the backend, and the server address or that the kit provisions
    one, each with where it came from."""
    backend = f"backend {s.backend}"
    if "backend" in s.sources:
        backend += f" (from {s.sources['backend']})"
    if s.dsn:
        server = f"given DSN {mask_dsn(s.dsn)} (from {s.sources.get('dsn', 'settings')})"
    else:
        server = "server provisioned by the kit"
    return f"{backend}, {server}"


def _first(sources: dict[str, str], name: str, *candidates: tuple[str, object]) -> str | None:
    """The first candidate value that is set; records its source under ``name``."""
    for source, value in candidates:
        if value is not None and str(value) != "":
            sources[name] = source
            return str(value)
    return None
