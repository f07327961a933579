"""Where the test server is (a clean module-level skip when it does not answer, a failure
under ``CI=true``), a TCP proxy that loses replies on demand, a throwaway 3-master
cluster on loopback, and a lifecycle that runs every script of the backend."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from rdq_core.errors import IdConflict
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome
from rdq_core.spi import Storage

DEFAULT_DSN = "redis://127.0.0.1:6379/0"
CLUSTER_ENV = "RDQ_REDIS_CLUSTER_DSN"


def server_dsn() -> str:
    return os.environ.get("RDQ_REDIS_DSN") or os.environ.get("RDQ_DSN") or DEFAULT_DSN


def _unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        # CI machines start the server before the run: its absence is a failure there.
        pytest.fail(message + " (CI is set: a missing server fails the run)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_server() -> str:
    """The DSN of a server that answers, or skip (the whole module when called at import)."""
    dsn = server_dsn()
    try:
        client = redis.Redis.from_url(dsn, socket_connect_timeout=3, socket_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _unavailable(f"no Redis server answers at RDQ_REDIS_DSN / default {dsn!r}: {reason}")
    return dsn


def with_query(dsn: str, query: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + query


def free_port(*, bus: bool = False) -> int:
    """A loopback port free now (and, with ``bus``, port + 10000 too: a cluster bus)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found")


# ---- a proxy that loses replies -----------------------------------------------------------


class ReplyLosingProxy:
    """A loopback TCP proxy to ``host:port``. ``drop_next_reply()`` makes it forward the
    next request as usual but close the client's connection instead of passing the reply
    on (the server acted, the caller never learns it); ``hold_replies(seconds)`` delays
    every reply (a caller with a shorter timeout gives up while the server has acted)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._drop = threading.Event()
        self.hold = 0.0
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="rdq-proxy").start()

    def drop_next_reply(self) -> None:
        self._drop.set()

    def hold_replies(self, seconds: float) -> None:
        self.hold = seconds

    def dsn(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for src, dst, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(src, dst, replies), daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if replies and self._drop.is_set():
                    self._drop.clear()
                    self.dropped += 1
                    break
                if replies and self.hold:
                    time.sleep(self.hold)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()


# ---- a throwaway cluster --------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def cluster(masters: int = 3) -> Iterator[str]:
    """The DSN of one node of a Redis Cluster: ``RDQ_REDIS_CLUSTER_DSN`` if set, else a
    private one of ``masters`` masters started from the local binaries on loopback ports
    in a temporary folder (children of this process, SIGKILLed if it dies), shut down
    afterwards. Skips (fails under CI) when ``redis-server``/``redis-cli`` are missing."""
    given = os.environ.get(CLUSTER_ENV)
    if given:
        yield given
        return
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        _unavailable("no redis-server/redis-cli on PATH to start a test cluster")
    workdir = Path(tempfile.mkdtemp(prefix="rdq-redis-cluster-"))
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for _ in range(masters):
            port = free_port(bus=True)
            ports.append(port)
            procs.append(
                subprocess.Popen(
                    [
                        *(server, "--port", str(port), "--bind", "127.0.0.1"),
                        *("--cluster-enabled", "yes"),
                        *("--cluster-config-file", f"nodes-{port}.conf"),
                        *("--dir", str(workdir), "--save", "", "--appendonly", "no"),
                        *("--logfile", str(workdir / f"{port}.log")),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            )
        for port in ports:
            _wait_ping(port)
        subprocess.run(
            [
                *(cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)),
                *("--cluster-replicas", "0", "--cluster-yes"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in ports:
            _wait_cluster_ok(port)
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_ping(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            redis.Redis(port=port, socket_timeout=1).ping()
            return
        except redis.RedisError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def _wait_cluster_ok(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    node = redis.Redis(port=port, socket_timeout=1)
    while b"cluster_state:ok" not in node.execute_command("CLUSTER", "INFO"):
        if time.monotonic() > end:
            raise TimeoutError(f"cluster node {port} never reached cluster_state:ok")
        time.sleep(0.1)


# ---- every script, once ---------------------------------------------------------------------

ERR = ErrorInfo("app.Boom", "boom", "detail \x01")
SHORT = timedelta(milliseconds=50)
LONG = timedelta(minutes=5)


def _wait_past(storage: Storage, when: object) -> None:
    while storage.now() <= when:  # type: ignore[operator]
        time.sleep(0.01)


def lifecycle(storage: Storage, queue: str, prefix: str = "") -> None:
    """Drive one queue through every SPI call (so every script runs at least once, with
    every selector kind and filter index); asserts only what the suite would."""
    other = queue + ".other"
    p = prefix or queue
    ids = [f"{p}-{i}" for i in range(6)]
    for i, tid in enumerate(ids):
        assert storage.enqueue(NewTask(tid, queue, "h" if i % 2 else "g", b"\x00\xff", {"k": "v"}))
    assert not storage.enqueue(NewTask(ids[0], queue, "h"))
    with contextlib.suppress(IdConflict):
        storage.enqueue(NewTask(ids[0], other, "h"))
        raise AssertionError("IdConflict expected")
    claims = {c.task_id: c for c in storage.claim_due(queue, 10, SHORT)}
    assert set(claims) == set(ids)
    storage.extend_lease(ids[0], claims[ids[0]].token, LONG)
    storage.complete(ids[0], claims[ids[0]].token)
    storage.reschedule(ids[1], claims[ids[1]].token, timedelta(0), ERR)
    _wait_past(storage, max(c.lease_expires_at for c in claims.values()))
    again = {c.task_id: c for c in storage.claim_due(queue, 10, LONG)}  # reclaims too
    assert set(again) == set(ids[1:]) and again[ids[2]].reclaimed
    for i, tid in enumerate(ids[1:]):
        outcome = Outcome.PERMANENT_FAILURE if i % 2 else Outcome.RETRYABLE_FAILURE
        storage.dead_letter(tid, again[tid].token, ERR if i % 3 else None, outcome)
    storage.get(ids[3])
    storage.stats(queue)
    for flt in (
        None,
        DlqFilter(everything=True),
        DlqFilter(handler="h"),
        DlqFilter(error_type=ERR.type),
        DlqFilter(handler="h", error_type=ERR.type),
    ):
        page = storage.dlq_list(queue, flt, None, 1)
        if page.next_cursor is not None:
            storage.dlq_list(queue, flt, page.next_cursor, 100)
    assert storage.redrive(queue, ByIds([ids[1]])) == 1
    assert storage.redrive(queue, DlqFilter(handler="g")) >= 1
    assert storage.purge(queue, ByIds([ids[3], "never-there"])) == 1
    storage.purge(queue, DlqFilter(everything=True))
    assert storage.purge_succeeded(queue, timedelta(0)) == 1
