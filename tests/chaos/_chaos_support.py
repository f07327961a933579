"""Helpers for the chaos harness's own tests: provisioned servers, process checks."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.provision.backend import Backend, ProvisionRequest, ProvisionUnavailable, Server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SMOKE = HERE / "smoke.toml"
STANDARD = ROOT / "chaos" / "standard.toml"


def provision(name: str, workdir: Path) -> tuple[Backend, Server]:
    """The backend's server from local resources (no Docker); skip if there is none."""
    try:
        backend = registry.load_backend(name)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {name!r} not installed: {exc}")
    try:
        server = backend.provision(ProvisionRequest(workdir=workdir, allow_docker=False))
    except ProvisionUnavailable as exc:
        pytest.skip(f"no {name} server here: {exc}")
    return backend, server


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
