"""The whole conformance suite against every built-in backend (and the chaos and
stateful gates through the plugin).

Each run is its own pytest process, exactly as a user would start it
(``pytest --pyargs rdq_compliance.suite --rdq-backend=NAME ...``), so it exercises
entry-point discovery, provisioning and suite injection end to end.

Each backend's storage code runs the whole kit once (conformance, stateful ``ci``
profile, standard chaos campaign); a second way of reaching the same server software
(a given server by DSN, a private one from the local binaries) runs what depends on that
way and nothing again:

- PostgreSQL: conformance and the stateful machine on the given server
  (``RDQ_POSTGRES_DSN``, default the local 127.0.0.1:5432); the chaos campaign on a
  private server the kit starts from the local binaries (it kills and restarts it).
- Redis: conformance and the stateful machine on the given server (``RDQ_REDIS_DSN``,
  default 127.0.0.1:6379); the chaos campaign on a private server from the local binaries
  (AOF, ``appendfsync always``: durable, so its campaign kills and restarts it, beside
  every worker fault a given server's campaign has); and the whole kit again on a private
  3-master Redis Cluster (``--rdq-option redis_cluster=3``), whose storage differs (keys
  spread over hash slots).
- MongoDB: by URI (``RDQ_MONGO_DSN``; unset, a fresh SecantusDB started through the local
  rung for the row, so the URI path is exercised here too) the conformance suite but its
  heaviest tests (:data:`MONGO_HEAVY`); on the local rung (``mongod`` if installed, else
  SecantusDB, a MongoDB wire-protocol server, with the compact chaos scenario its server
  names) those tests, the stateful machine and the chaos campaign.

The container rung is ``tests/test_container_backends.py``. A PostgreSQL, Redis or
MongoDB run whose server does not answer (or whose binaries are missing) is skipped with
the reason — a failure under ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq_compliance.plugin import SUITE_DIR
from tests._waiting import HANG_S

PG_DSN = (
    os.environ.get("RDQ_POSTGRES_DSN")
    or os.environ.get("RDQ_DSN")
    or "postgresql://postgres@127.0.0.1:5432/test"
)

REDIS_DSN = os.environ.get("RDQ_REDIS_DSN") or "redis://127.0.0.1:6379/0"
REDIS_LOCAL = ["--rdq-backend=redis", "--rdq-no-docker"]
REDIS_CLUSTER = [*REDIS_LOCAL, "--rdq-option=redis_cluster=3"]

MONGO_LOCAL = ["--rdq-backend=mongo", "--rdq-no-docker"]
#: Stands for the URI of the mongo-dsn runs (RDQ_MONGO_DSN, or a server started here).
MONGO_URI = "<mongo-uri>"
MONGO_DSN = ["--rdq-backend=mongo", f"--rdq-dsn={MONGO_URI}"]
#: The heaviest tests of the conformance suite on a MongoDB-protocol server: the mongo-dsn
#: row leaves them out and the mongo-local row runs only them, so that the suite runs once
#: over the two. On the SecantusDB stand-in, a Python server, they cost a minute of CPU
#: under CI load.
MONGO_HEAVY = "test_queues_stored_side_by_side_stay_apart or never_share_a_claim or late_outcome"
#: how many tests :data:`MONGO_HEAVY` selects: the two claim races of test_exclusive, the
#: neighbours test and test_late_outcome's two
MONGO_HEAVY_COUNT = 5

CONFORMANCE = ["-m", "not chaos and not stateful"]
CHAOS = ["-m", "chaos"]
STATEFUL = ["-m", "stateful"]

#: run id -> (arguments, the least number of tests that must pass; None: 90 % of the suite)
RUNS: dict[str, tuple[list[str], int | None]] = {
    "memory": (["--rdq-backend=memory", *CONFORMANCE], None),
    "sqlite": (["--rdq-backend=sqlite", *CONFORMANCE], None),
    "postgres-dsn": (["--rdq-backend=postgres", f"--rdq-dsn={PG_DSN}", *CONFORMANCE], None),
    # The chaos gate, through the plugin as a user runs it: the standard scenario.
    "sqlite-chaos": (["--rdq-backend=sqlite", *CHAOS], 1),
    "postgres-local-chaos": (["--rdq-backend=postgres", "--rdq-no-docker", *CHAOS], 1),
    # The stateful machine, ci profile (fixed seed), through the plugin.
    "memory-stateful": (["--rdq-backend=memory", *STATEFUL], 1),
    "sqlite-stateful": (["--rdq-backend=sqlite", *STATEFUL], 1),
    "postgres-dsn-stateful": (["--rdq-backend=postgres", f"--rdq-dsn={PG_DSN}", *STATEFUL], 1),
    # Redis: conformance and the machine on a given server; the campaign on a durable one
    # of the local rung (it kills and restarts it); the whole kit on a local cluster.
    "redis-dsn": (["--rdq-backend=redis", f"--rdq-dsn={REDIS_DSN}", *CONFORMANCE], None),
    "redis-dsn-stateful": (["--rdq-backend=redis", f"--rdq-dsn={REDIS_DSN}", *STATEFUL], 1),
    "redis-local-chaos": ([*REDIS_LOCAL, *CHAOS], 1),
    "redis-cluster": ([*REDIS_CLUSTER, *CONFORMANCE], None),
    "redis-cluster-stateful": ([*REDIS_CLUSTER, *STATEFUL], 1),
    "redis-cluster-chaos": ([*REDIS_CLUSTER, *CHAOS], 1),
    # MongoDB: the conformance suite split between the URI and the local rung; the
    # stateful machine and the campaign (which kills and restarts the server) on the latter.
    "mongo-dsn": ([*MONGO_DSN, *CONFORMANCE, "-k", f"not ({MONGO_HEAVY})"], None),
    "mongo-local": ([*MONGO_LOCAL, *CONFORMANCE, "-k", MONGO_HEAVY], MONGO_HEAVY_COUNT),
    "mongo-local-stateful": ([*MONGO_LOCAL, *STATEFUL], 1),
    "mongo-local-chaos": ([*MONGO_LOCAL, *CHAOS], 1),
}


def _redis_answers() -> str | None:
    """Why the given Redis server cannot serve the run, or ``None``."""
    import redis

    client = redis.Redis.from_url(REDIS_DSN, socket_connect_timeout=HANG_S, socket_timeout=HANG_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"no Redis server answers at RDQ_REDIS_DSN / default {REDIS_DSN!r}: {exc}"
    finally:
        client.close()
    return None


def _redis_binaries(cluster: bool) -> str | None:
    """Why the local rung cannot start a server (or a cluster) here, or ``None``."""
    from rdq_redis.local import find_redis

    from rdq_compliance.provision.backend import ProvisionUnavailable

    try:
        find_redis(None, cluster=cluster)
    except ProvisionUnavailable as exc:
        return str(exc)
    return None


def _postgres_answers() -> str | None:
    """Why the given PostgreSQL server cannot serve the run, or ``None``."""
    import psycopg

    try:
        psycopg.connect(PG_DSN, connect_timeout=int(HANG_S)).close()
    except psycopg.Error as exc:
        return f"no PostgreSQL answers at RDQ_POSTGRES_DSN / default {PG_DSN!r}: {exc}"
    return None


def _postgres_binaries() -> str | None:
    """Why the local rung cannot start a PostgreSQL server here, or ``None``."""
    from rdq_postgres.local import find_postgres

    from rdq_compliance.provision.backend import ProvisionUnavailable

    try:
        find_postgres({})
    except ProvisionUnavailable as exc:
        return str(exc)
    return None


def _mongo_binaries() -> str | None:
    """Why the local rung cannot start a MongoDB (or SecantusDB) server here, or ``None``."""
    from rdq_mongo.local import find_server

    from rdq_compliance.provision.backend import ProvisionUnavailable

    try:
        find_server("auto", None)
    except ProvisionUnavailable as exc:
        return str(exc)
    return None


@pytest.fixture
def mongo_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    """For a mongo-dsn row: ``RDQ_MONGO_DSN``, else the URI of a server started for this
    row alone (``None`` for every other row).

    One server per row, not one per module: SecantusDB 0.7.0b3 slows with every database
    created and dropped on it (measured: a single update from 0.98 to 2.05 ms after 600
    namespace cycles, the 16-thread claim race from 6.5 s on a fresh server to 30-44 s on
    one that had served the conformance suite), so a server shared by the three rows
    made the last ones several times slower than a user's run on a fresh server."""
    run = request.node.callspec.params["run"]
    if not any(MONGO_URI in a for a in RUNS[run][0]):
        yield None
        return
    given = os.environ.get("RDQ_MONGO_DSN")
    if given:
        yield given
        return
    _precondition(run)
    from rdq_mongo.plugin import backend

    from rdq_compliance.provision.backend import ProvisionRequest

    workdir = tmp_path / "mongo-by-uri"
    workdir.mkdir()
    server = backend.start_local_server(ProvisionRequest(workdir=workdir))
    try:
        yield server.dsn
    finally:
        server.close()


#: run id prefix -> why that run cannot happen here (None: it can)
PRECONDITIONS = {
    "postgres-dsn": _postgres_answers,
    "postgres-local": _postgres_binaries,
    "redis-dsn": _redis_answers,
    "redis-local": lambda: _redis_binaries(cluster=False),
    "redis-cluster": lambda: _redis_binaries(cluster=True),
    "mongo-dsn": lambda: None if os.environ.get("RDQ_MONGO_DSN") else _mongo_binaries(),
    "mongo-local": _mongo_binaries,
}


def _precondition(run: str) -> None:
    """Skip a run whose server is not there, with the reason; fail under ``CI=true``."""
    for prefix, check in PRECONDITIONS.items():
        if run == prefix or run.startswith(prefix + "-"):
            reason = check()
            if reason is None:
                return
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"{run}: {reason} (CI is set: a missing server fails the run)")
            pytest.skip(f"{run}: {reason}")


def _suite_size() -> int:
    return sum(
        1
        for path in SUITE_DIR.glob("test_*.py")
        for line in path.read_text().splitlines()
        if line.startswith("def test_")
    )


@pytest.mark.parametrize("run", list(RUNS))
def test_conformance_suite_passes(run: str, tmp_path: Path, mongo_uri: str | None) -> None:
    _precondition(run)
    args = RUNS[run][0]
    if mongo_uri is not None:
        args = [a.replace(MONGO_URI, mongo_uri) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            *args, "--rdq-require-backend", "-q", "-rs", "-p", "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"conformance suite failed on {run}:\n{tail}"
    summary = [line for line in proc.stdout.splitlines() if " passed" in line][-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    least = RUNS[run][1] or int(_suite_size() * 0.9)
    assert passed >= least, f"too few tests ran on {run}: {summary}"
    print(f"{run}: {summary}")
