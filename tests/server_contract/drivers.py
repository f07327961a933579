"""The server backends' drivers, and ``@each(family)``: a test run once per driver.

Each driver lives with its backend's own tests (``tests/backends/<name>/driver.py``, the
MariaDB example's in ``tests/backends/mysql/``) and is named here by module. A driver
that cannot be imported (its client library missing) makes its cases skips naming why —
failures under ``CI=true``, where every backend must be there.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from tests.server_contract.driver import ServerDriver

#: The server backends, in the order their cases run.
MODULES = (
    "tests.backends.postgres.driver",
    "tests.backends.redis.driver",
    "tests.backends.mongo.driver",
    "tests.backends.mysql.driver",
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _load(module: str) -> ServerDriver | str:
    """The module's ``DRIVER``, or why it cannot be had."""
    try:
        driver = importlib.import_module(module).DRIVER
    except ImportError as exc:
        if IN_CI:
            raise  # CI has every backend: a missing one fails the collection
        return f"{module} cannot be imported: {exc}"
    assert isinstance(driver, ServerDriver), f"{module}.DRIVER is not a ServerDriver"
    return driver


def drivers() -> list[ServerDriver | str]:
    return [_load(m) for m in MODULES]


def _why_not(
    driver: ServerDriver, family: str, needs: Callable[[ServerDriver], str | None] | None
) -> str | None:
    if getattr(driver, family) is None:
        return driver.why_not.get(family, f"its driver has no {family} facts")
    return needs(driver) if needs is not None else None


def each(
    family: str,
    *,
    cases: Callable[[ServerDriver], Iterable[tuple[str, Any]]] | None = None,
    needs: Callable[[ServerDriver], str | None] | None = None,
    bug: str | None = None,
) -> pytest.MarkDecorator:
    """Parametrize ``driver`` (module scope) over every server backend with ``family``
    facts (a backend without them is a skip naming why); ``cases``: also ``case``, over
    the driver's ``(id, value)`` cases; ``needs``: a reason to skip one driver, or None;
    ``bug``: the key of :attr:`~ServerDriver.known_bugs` that makes a driver's case a
    strict xfail (it fails when the bug is fixed, so the entry goes too)."""
    params = []
    for module, loaded in zip(MODULES, drivers(), strict=True):
        marks = []
        if isinstance(loaded, ServerDriver):
            name, why = loaded.name, _why_not(loaded, family, needs)
            known = loaded.known_bugs.get(bug) if bug else None
            if known:
                marks.append(pytest.mark.xfail(reason=f"{name}: {known}", strict=True))
        else:
            name, why = module.rsplit(".", 2)[-2], loaded
        if why:
            marks = [pytest.mark.skip(reason=f"{name}: {why}")]
        if why or cases is None:
            values = (loaded, None) if cases else (loaded,)
            params.append(pytest.param(*values, id=name, marks=marks))
        else:
            params += [
                pytest.param(loaded, c, id=f"{name}-{i}", marks=marks) for i, c in cases(loaded)
            ]
    names = ("driver", "case") if cases else "driver"
    return pytest.mark.parametrize(names, params, scope="module")
