"""The durability check (rule ``durability``, bug class ``acknowledged-work-lost``) on
servers the kit starts: the local rung with AOF and ``appendfsync always`` keeps every
acknowledged enqueue, claim and outcome through a SIGKILL and restart, on one server and
on a 3-master cluster; with persistence off the loss is detected and named, not
hidden."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rdq_redis.local import LocalRedisServer
from rdq_redis.plugin import backend
from rdq_redis.storage import RedisStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_compliance.suite.durability import DurabilityReport, run_durability_check
from tests.broken import catalogue

#: The setting that loses acknowledged work on a restart, and what must say so: the
#: catalogue's (bug class ``acknowledged-work-lost``).
((NO_PERSISTENCE, CHECK),) = [
    (cfg, c)
    for cfg in catalogue.configurations()
    for c in cfg.catches
    if isinstance(c, catalogue.DurabilityCheck) and c.by == catalogue.relative(__file__)
]


def _durability_run(tmp_path: Path, **options: str) -> DurabilityReport:
    try:
        server = backend.provision(
            ProvisionRequest(workdir=tmp_path, options=options, allow_docker=False)
        )
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local redis-server: {exc}")
    assert isinstance(server, LocalRedisServer)
    opened: list[RedisStorage] = []
    try:
        namespace = server.create_namespace()

        def connect() -> RedisStorage:
            storage = backend.open(server.dsn, namespace)
            opened.append(storage)
            return storage

        report = run_durability_check(server, connect)
        durable = options.get("redis_persistence", "aof") == "aof"
        assert connect().capabilities().durable is durable
        return report
    finally:
        for storage in opened:
            storage.close()
        server.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "server"


@pytest.mark.parametrize("options", [{}, {"redis_cluster": "3"}], ids=["server", "cluster"])
def test_aof_always_keeps_every_acknowledged_operation_through_a_kill(
    workdir: Path, options: dict[str, str]
) -> None:
    report = _durability_run(workdir, **options)
    assert report.ok, f"{report.message}\n({report.summary()})"
    enqueues, claims, outcomes = report.ledger.before_kill()
    assert min(enqueues, claims, outcomes) >= 100, report.summary()  # a real load
    assert report.ledger.unknown > 0, "the kill should have caught calls in flight"


def test_without_persistence_the_loss_is_detected_and_named(workdir: Path) -> None:
    report = _durability_run(workdir, **NO_PERSISTENCE.options)
    assert not report.ok
    text = report.message
    assert text.startswith(
        f"[{CHECK.rule}] acknowledged work survives a kill and restart of the server: "
        "after a SIGKILL and restart of local binary "
    ), text
    assert "(persistence none: --appendonly no --save '')" in text
    enqueued = len(report.ledger.enqueued)
    lost = re.search(r"(\d+) of (\d+) acknowledged enqueues lost: task '(w\d-\d+)'", text)
    assert lost is not None, text
    assert int(lost.group(2)) == enqueued
    assert int(lost.group(1)) >= report.ledger.before_kill()[0]  # all those before the kill
    claim = r"\d+ of \d+ acknowledged claims lost: task 'w\d-\d+' claimed by w\d at "
    assert re.search(claim, text), text
    outcome = r"\d+ of \d+ acknowledged outcomes lost: task 'w\d-\d+': [A-Z_]+ by w\d of "
    assert re.search(outcome, text), text
    assert "gone (NotFound)" in text and " and " in text and " more" in text
