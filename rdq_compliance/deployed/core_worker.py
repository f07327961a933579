"""The control's worker process: rdq's :class:`~rdq_core.worker.Worker` running the probe.

::

    python -m rdq_compliance.deployed.core_worker --backend B --namespace N --name W \\
        [--dsn D] [--queue Q] [--lease S] [--poll-interval S] [--max-poll-interval S]

opens the storage of kit backend ``B`` (an ``rdq.backends`` name or ``module:attribute``)
at ``D`` (else the environment's ``RDQ_CORE_DSN``) in namespace ``N``, and runs the worker
loop on queue ``Q`` with one handler, ``probe``: it reads the job's payload (JSON:
``behaviour``, ``seconds``) and calls :func:`rdq_compliance.deployed.handler.perform`.
A retry raises :class:`~rdq_core.retry.RetryableError` (the default retry policy
reschedules it while attempts are left); a failure raises
:class:`~rdq_core.retry.PermanentError` (dead-lettered at once). Everything else is
rdq_core's defaults. SIGTERM stops it: the tasks in hand finish, then it exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import NoReturn

from rdq_compliance import registry
from rdq_compliance.deployed.control import DSN_ENV, HANDLER
from rdq_compliance.deployed.handler import ProbeFailure, perform
from rdq_core.retry import PermanentError, RetryableError
from rdq_core.worker import TaskContext, Worker

__all__ = ["handle", "main"]


def _ask_retry() -> NoReturn:
    raise RetryableError("probe: asked for a retry")


def handle(ctx: TaskContext) -> None:
    """The ``probe`` handler: what the job's payload asks, journaled by the probe."""
    job = json.loads(ctx.payload)
    try:
        perform(
            ctx.task.id,
            str(job["behaviour"]),
            float(job.get("seconds", 0.0)),
            attempt=ctx.attempt_no,
            retry=_ask_retry,
        )
    except ProbeFailure as exc:
        raise PermanentError(str(exc)) from exc


def _seconds(text: str) -> timedelta:
    return timedelta(seconds=float(text))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rdq_compliance.deployed.core_worker")
    p.add_argument("--backend", required=True, help="an rdq.backends name or module:attribute")
    p.add_argument("--dsn", help=f"the server's address (default: ${DSN_ENV})")
    p.add_argument("--namespace", required=True)
    p.add_argument("--name", required=True, help="the worker's name")
    p.add_argument("--queue", default="deployed")
    p.add_argument("--lease", type=_seconds, default=timedelta(seconds=30))
    p.add_argument("--poll-interval", type=_seconds, default=timedelta(milliseconds=200))
    p.add_argument("--max-poll-interval", type=_seconds, default=timedelta(seconds=2))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        print(f"core_worker: no --dsn and no ${DSN_ENV}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    storage = registry.load_backend(args.backend).open(dsn, args.namespace)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    worker = Worker(
        storage,
        args.queue,
        {HANDLER: handle},
        lease=args.lease,
        poll_interval=args.poll_interval,
        max_poll_interval=args.max_poll_interval,
        name=args.name,
    )
    loop = threading.Thread(target=worker.run, args=(stop,), name=f"{args.name}-loop")
    loop.start()
    try:
        while loop.is_alive():  # the main thread is free to take SIGTERM
            loop.join(0.1)
    finally:
        storage.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
