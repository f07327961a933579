"""What a backend's container rung shares: "does Docker answer?" and "is it ready yet?".

The container rung is tried only when the local binaries are missing and Docker is
allowed. :func:`docker_unavailable_reason` asks first whether Docker answers at all (a
ping with a hard deadline of a few seconds), so a machine without a Docker engine gets a
clean reason at once instead of a long hang or a traceback. :func:`wait_until_ready`
polls a readiness probe (a real connection, never a blind sleep) until the server in the
container accepts it, or raises :class:`~rdq_compliance.provision.backend.ProvisionUnavailable`
naming what was awaited and the last error.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from rdq_compliance.provision.backend import ProvisionUnavailable

__all__ = ["DOCKER_CHECK_TIMEOUT", "docker_unavailable_reason", "wait_until_ready"]

#: Seconds the "does Docker answer?" check may take in all.
DOCKER_CHECK_TIMEOUT = 2.0


def docker_unavailable_reason(timeout: float = DOCKER_CHECK_TIMEOUT) -> str | None:
    """Why no container can be started here, or ``None`` when Docker answers a ping.

    Uses the Docker host testcontainers would use (``DOCKER_HOST``, its properties file,
    the current Docker context). Never takes much longer than ``timeout`` seconds.
    """
    try:
        import docker
        from testcontainers.core.docker_client import get_docker_host
    except ImportError as exc:
        return f"testcontainers is not installed ({exc}); pip install 'rdq[docker]'"

    outcome: list[str | None] = []

    def check() -> None:
        try:
            environment = dict(os.environ)
            host = get_docker_host()
            if host:
                environment["DOCKER_HOST"] = host
            client = docker.from_env(timeout=max(1, round(timeout)), environment=environment)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:
            text = str(exc).strip() or type(exc).__name__
            outcome.append(f"Docker is not reachable: {text}")
        else:
            outcome.append(None)

    thread = threading.Thread(target=check, name="rdq-docker-ping", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome:
        return f"Docker is not reachable: no answer within {timeout:.0f}s"
    return outcome[0]


def wait_until_ready(
    probe: Callable[[], object],
    timeout: float,
    what: str,
    *,
    errors: tuple[type[BaseException], ...] = (OSError,),
) -> None:
    """Call ``probe`` until it returns without raising one of ``errors``.

    Polls every 50 ms at first, backing off to 500 ms. After ``timeout`` seconds raises
    ``ProvisionUnavailable("<what> did not accept connections within <timeout>s: <last
    error>")``. Exceptions not in ``errors`` propagate at once (they are not "not yet").
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            probe()
            return
        except errors as exc:
            if time.monotonic() >= deadline:
                raise ProvisionUnavailable(
                    f"{what} did not accept connections within {timeout:.0f}s: {exc}"
                ) from exc
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
