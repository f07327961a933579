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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rdq_core.errors import InvalidArgument

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    backend: str | None
    dsn: str | None = None
    require_backend: bool = False
    docker: bool = True
    options: Mapping[str, str] = field(default_factory=dict)


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


def parse_options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--rdq-option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def resolve(
    *,
    cli_backend: str | None,
    cli_dsn: str | None,
    cli_require: bool,
    cli_no_docker: bool,
    cli_options: list[str],
    rootpath: Path,
    environ: Mapping[str, str] = os.environ,
) -> Settings:
    """Merge the three sources into :class:`Settings`."""
    table = read_pyproject(rootpath)
    backend = cli_backend or environ.get("RDQ_BACKEND") or table.get("backend") or None
    sub = table.get(backend, {}) if backend and ":" not in backend else {}
    if not isinstance(sub, dict):
        sub = {}
    env_dsn = None
    if backend and ":" not in backend:
        env_dsn = environ.get(f"RDQ_{backend.upper().replace('-', '_')}_DSN")
    dsn = cli_dsn or env_dsn or environ.get("RDQ_DSN") or sub.get("dsn") or table.get("dsn")
    require = cli_require or _flag(
        "require-backend",
        environ.get("RDQ_REQUIRE_BACKEND", table.get("require-backend", False)),
    )
    docker = not cli_no_docker and not _flag("RDQ_NO_DOCKER", environ.get("RDQ_NO_DOCKER", "0"))
    docker = docker and _flag("docker", table.get("docker", True))
    options: dict[str, str] = {
        str(k): str(v) for k, v in sub.items() if k != "dsn" and not isinstance(v, dict)
    }
    for key, value in environ.items():
        if key.startswith("RDQ_OPTION_"):
            options[key[len("RDQ_OPTION_") :].lower()] = value
    options.update(parse_options(cli_options))
    return Settings(
        backend=backend,
        dsn=str(dsn) if dsn else None,
        require_backend=require,
        docker=docker,
        options=options,
    )
