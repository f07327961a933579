"""The scripts: every one declares every key it touches, every one is reloaded after
``NOSCRIPT``, and every time comes from the server's ``TIME``, never from the client."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
import redis
from rdq_redis import scripts as scripts_module
from rdq_redis.scripts import SOURCES, Scripts, ScriptSource

from rdq_core.model import NewTask, utc_from_micros
from tests.backends.redis._redis_support import lifecycle, with_query


def test_every_script_touches_only_declared_keys(dsn, connect, monkeypatch):
    """With the undeclared-key guard (``rdq_check_keys=1``) every script runs — a whole
    lifecycle (every selector kind and DLQ filter, reclaims), then the repair of an
    enqueue that died after its first step: a script that touched a key not in KEYS
    would fail with the guard's error."""
    ran: set[str] = set()
    real = Scripts.run

    def spy(self, name, keys_, args):
        ran.add(name)
        return real(self, name, keys_, args)

    monkeypatch.setattr(Scripts, "run", spy)
    storage = connect(with_query(dsn, "rdq_check_keys=1"))
    lifecycle(storage, "checked")
    _, scripts = storage._source.get()
    assert scripts.check_keys
    shard = storage.layout.shard("orphan").ids
    scripts.run("reserve", [shard], ["orphan", "checked", "0" * 32])  # step 2 never comes
    assert storage.enqueue(NewTask("orphan", "elsewhere", "h")) is True  # revoke + release
    assert ran == set(SOURCES), f"scripts never run under the guard: {set(SOURCES) - ran}"


def test_the_guard_catches_an_undeclared_key(dsn, namespace):
    """Negative control: the guard does fail a script that builds a key."""
    client = redis.Redis.from_url(dsn)
    rogue = ScriptSource("rogue", "return redis.call('GET', KEYS[1] .. ':built')")
    script = client.register_script(rogue.source(check_keys=True))
    with pytest.raises(redis.ResponseError, match="undeclared key"):
        script(keys=[f"rdq:{{{namespace}:000}}:task"], args=[])


def test_every_script_is_new_style_and_reads_cannot_write():
    for name, src in SOURCES.items():
        first = src.source().splitlines()[0]
        assert first.startswith("#!lua"), name
        assert ("flags=no-writes" in first) == (name in {"get", "stats", "dlq_list"}), name
        # a key is only ever a KEYS entry, or a parameter holding one
        for line in src.source().splitlines():
            if "redis.call(" in line and "'TIME'" not in line:
                call = line.split("redis.call(", 1)[1]
                first_arg = call.split(",", 2)[1].strip()
                assert first_arg.startswith(("KEYS[", "key", "dlq", "from_ready")), (name, line)


def test_scripts_are_reloaded_after_script_flush(dsn, storage):
    """``SCRIPT FLUSH`` (as after a restart of a server without persistence): the next
    call of every kind gets NOSCRIPT, loads its script and succeeds, transparently."""
    lifecycle(storage, "before-flush")
    client = redis.Redis.from_url(dsn)
    sha = storage._source.get()[1].sha("claim")
    client.script_flush()
    assert client.script_exists(sha) == [False]
    lifecycle(storage, "after-flush")
    assert client.script_exists(sha) == [True]


def _plausible_times() -> list[tuple[str, float, float]]:
    now = time.time()
    day = 2 * 86_400
    return [
        ("s", now - day, now + day),
        ("ms", (now - day) * 1e3, (now + day) * 1e3),
        ("us", (now - day) * 1e6, (now + day) * 1e6),
    ]


def test_no_script_is_sent_a_time_by_the_client(storage, monkeypatch):
    """Scripts get durations (lease, delay, age), never an instant: no argument of any
    script call, over a whole lifecycle, looks like a current timestamp in s, ms or µs."""
    sent: list[tuple[str, object]] = []
    real = Scripts.run

    def spy(self, name, keys_, args):
        sent.extend((name, a) for a in args)
        return real(self, name, keys_, args)

    monkeypatch.setattr(Scripts, "run", spy)
    lifecycle(storage, "clockless")
    suspicious = []
    for name, arg in sent:
        try:
            value = float(arg.decode() if isinstance(arg, bytes) else arg)  # type: ignore[arg-type]
        except (TypeError, ValueError, UnicodeDecodeError):
            continue
        for unit, low, high in _plausible_times():
            if low <= value <= high:
                suspicious.append((name, unit, arg))
    assert not suspicious, f"script arguments that look like client timestamps: {suspicious}"
    assert sent


def _server_now(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return utc_from_micros(seconds * 1_000_000 + micros)


def test_claim_and_enqueue_times_lie_between_two_server_time_reads(dsn, storage, monkeypatch):
    """Rule storage-clock: created_at and claimed_at are the server's TIME at the call,
    even with the client's clock a day ahead (``time.time`` patched in this process)."""
    client = redis.Redis.from_url(dsn)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86_400)
    t1 = _server_now(client)
    storage.enqueue(NewTask("clocked", "q", "h"))
    claim = storage.claim_due("q", 1, timedelta(seconds=30))[0]
    t2 = _server_now(client)
    task = storage.get("clocked")
    assert t1 <= task.created_at <= claim.claimed_at <= t2
    assert claim.lease_expires_at == claim.claimed_at + timedelta(seconds=30)
    assert t2 <= storage.now() <= _server_now(client)


def test_revocations_are_kept_a_bounded_time():
    assert scripts_module.REVOCATION_KEEP_US == 7 * 86_400 * 1_000_000
    assert str(scripts_module.REVOCATION_KEEP_US) in SOURCES["revoke"].body
