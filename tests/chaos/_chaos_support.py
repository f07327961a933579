"""Helpers for the chaos harness's own tests: provisioned servers, process checks."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.provision.backend import ProvisionUnavailable
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SMOKE = HERE / "smoke.toml"
STANDARD = ROOT / "chaos" / "standard.toml"


def start_session(name: str, workdir: Path) -> Session:
    """A started session on the backend's server from local resources (no Docker, no DSN:
    the kit provisions it); skip if there is none."""
    try:
        session = Session(Settings(backend=name, docker=False), workdir=workdir)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {name!r} not installed: {exc}")
    try:
        session.start()
    except ProvisionUnavailable as exc:
        pytest.skip(f"no {name} server here: {exc}")
    return session


def gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until every pid is gone; the ones still running after ``timeout``."""
    left = list(pids)
    end = time.monotonic() + timeout
    while left and time.monotonic() < end:
        left = [p for p in left if not gone(p)]
        if left:
            time.sleep(0.1)
    return left
