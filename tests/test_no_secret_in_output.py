"""No secret in any output: the kit is run as a user runs it, with a
distinctive password in each DSN form each server backend reads, and every stream and
every file the runs write is searched for that password: zero hits.

For each of PostgreSQL (the shared server: trust auth takes any password), Redis (a
``redis-server --requirepass`` started here), the MongoDB wire protocol (a SecantusDB
stand-in started by the kit, with a user created here) and the MariaDB example (a user
with a password created on the shared server):

- ``pytest -v --junitxml`` on a few suite tests, the DSN in the first form, passing;
- the same with a broken variant of the store, failing (PostgreSQL, Redis, MongoDB; the
  example has no broken variants);
- ``rdq-chaos run`` of the tiny scenario with the DSN in the last form, its report
  folder (``results.json`` with the replay command, JUnit, the timeline, the harness and
  worker logs) kept in the run's folder;
- a dead-server run (the port closed) with the DSN in every form, and one with the
  DSN given through ``RDQ_<BACKEND>_DSN``.

The scanner itself is shown to find a password printed once.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests._ci import missing
from tests._paths import ROOT, pythonpath
from tests._ports import closed_port, reserved_port
from tests._waiting import HANG_S

EXAMPLE = ROOT / "examples" / "rdq-mysql"
TINY = ROOT / "tests" / "chaos" / "tiny.toml"


def leaks(secret: str, streams: dict[str, str], folder: Path) -> list[str]:
    """Where ``secret`` appears: in a stream (by name) or a file under ``folder``."""
    found = [f"{name} (x{text.count(secret)})" for name, text in streams.items() if secret in text]
    needle = secret.encode()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            count = path.read_bytes().count(needle)
            if count:
                found.append(f"{path.relative_to(folder)} (x{count})")
    return found


def test_the_scan_finds_a_password_printed_once(tmp_path: Path) -> None:
    secret = "RdqS3cret" + secrets.token_hex(4)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "harness.log").write_text(f"connecting to postgresql://u:{secret}@h/db\n")
    assert leaks(secret, {"stdout": "nothing here"}, tmp_path) == ["logs/harness.log (x1)"]
    assert leaks(secret, {"stderr": f"dsn {secret}"}, tmp_path / "logs") == [
        "stderr (x1)", "harness.log (x1)",
    ]  # fmt: skip


@dataclass
class SecretServer:
    """A server that takes ``secret``; ``forms(port)`` are the DSN forms, by name, on
    ``port`` (the server's own, or a closed one)."""

    backend: str
    secret: str
    port: int
    forms: Callable[[int], dict[str, str]]
    failing: tuple[str, str] | None  # (broken variant, -k expression)


def _postgres(secret: str) -> Iterator[SecretServer]:
    from tests.backends.postgres._pg_support import require_server

    require_server()  # the shared server, trust auth on 127.0.0.1:5432

    def forms(port: int) -> dict[str, str]:
        return {
            "url user-info": f"postgresql://postgres:{secret}@127.0.0.1:{port}/test",
            "query": f"postgresql://postgres@127.0.0.1:{port}/test?password={secret}",
            "libpq keywords": f"host=127.0.0.1 port={port} user=postgres password={secret} "
            "dbname=test",
        }

    yield SecretServer(
        "postgres", secret, 5432, forms,
        ("tests.broken.postgres:pending_before_expired_leases",
         "test_expired_leases_and_due_tasks_are_claimed_in_one_due_order"),
    )  # fmt: skip


def _redis(secret: str, workdir: Path) -> Iterator[SecretServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server is not installed")
    port = reserved_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", secret,
         "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_port(port)

        def forms(p: int) -> dict[str, str]:
            return {
                "url user-info": f"redis://:{secret}@127.0.0.1:{p}/0",
                "query": f"redis://127.0.0.1:{p}/0?password={secret}",
            }

        yield SecretServer(
            "redis", secret, port, forms,
            ("tests.broken.redis:outcome_ignores_token",
             "test_stale_token_is_refused_and_changes_nothing"),
        )  # fmt: skip
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _mongo(secret: str) -> Iterator[SecretServer]:
    pymongo = pytest.importorskip("pymongo")
    from rdq_compliance.session import Session
    from rdq_compliance.settings import resolve

    session = Session(resolve(cli_backend="mongo", cli_no_docker=True, environ={}))
    try:
        session.start()
    except Exception as exc:  # a skip (or a CI failure) naming why
        missing(f"no MongoDB-protocol server could be started here: {exc}")
    try:
        host, port = session.server.network_address()
        admin = pymongo.MongoClient(f"mongodb://{host}:{port}/?directConnection=true")
        admin.admin.command("createUser", "rdq", pwd=secret, roles=["root"])
        admin.close()

        def forms(p: int) -> dict[str, str]:
            return {"url user-info": f"mongodb://rdq:{secret}@127.0.0.1:{p}/?directConnection=true"}

        yield SecretServer(
            "mongo", secret, port, forms,
            ("tests.broken.mongo:outcome_ignores_token",
             "test_stale_token_is_refused_and_changes_nothing"),
        )  # fmt: skip
    finally:
        session.close()


def _mysql(secret: str) -> Iterator[SecretServer]:
    pymysql = pytest.importorskip("pymysql")
    try:
        root = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
    except pymysql.MySQLError as exc:
        missing(f"no MariaDB server answers on 127.0.0.1:3306 as root: {exc}")
    user = "rdq_secret_" + secrets.token_hex(3)
    with root.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY %s", (secret,))
        cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'127.0.0.1'")
    try:

        def forms(p: int) -> dict[str, str]:
            return {
                "url user-info": f"mysql://{user}:{secret}@127.0.0.1:{p}/test",
                # a form the example refuses: the error must not show it
                "unknown query key": f"mysql://{user}@127.0.0.1:{p}/test?password={secret}",
            }

        yield SecretServer("rdq_mysql.plugin:backend", secret, 3306, forms, None)
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        root.close()


def _wait_port(port: int, timeout: float = HANG_S) -> None:
    """Until something listens on ``port``; ``timeout`` is a hang guard."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONPATH"] = pythonpath(str(EXAMPLE))
    return {**env, **(extra or {})}


@pytest.fixture(params=["postgres", "redis", "mongo", "mysql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    secret = "RdqS3cret" + secrets.token_hex(6)
    name = request.param
    if name == "postgres":
        yield from _postgres(secret)
    elif name == "redis":
        yield from _redis(secret, tmp_path_factory.mktemp("redis"))
    elif name == "mongo":
        yield from _mongo(secret)
    else:
        yield from _mysql(secret)


def _run(cwd: Path, args: list[str], env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        args, cwd=cwd, env=_env(env), capture_output=True, text=True, timeout=timeout
    )


def test_no_run_of_the_kit_prints_or_writes_the_password(server: SecretServer, tmp_path: Path):
    secret, backend = server.secret, server.backend
    pytest_cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                  "rdq_compliance.suite", f"--basetemp={tmp_path / 'basetemp'}"]  # fmt: skip
    forms = server.forms(server.port)
    first, last = next(iter(forms.values())), list(forms.values())[-1]
    streams: dict[str, str] = {}

    def keep(name: str, proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
        streams[f"{name}: stdout"], streams[f"{name}: stderr"] = proc.stdout, proc.stderr
        return proc

    tests = "test_stats_are_per_queue or test_claims_come_out_oldest_due_first"
    ok = keep("passing pytest -v", _run(tmp_path, [
        *pytest_cmd, f"--rdq-backend={backend}", f"--rdq-dsn={first}", "-v", "-k", tests,
        f"--junitxml={tmp_path / 'passing.xml'}"]))  # fmt: skip
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert "***" in ok.stdout  # the header shows the DSN, masked
    if server.failing is not None:
        variant, catcher = server.failing
        bad = keep("failing pytest -v", _run(tmp_path, [
            *pytest_cmd, f"--rdq-backend={variant}", f"--rdq-dsn={first}", "-v", "-k", catcher,
            f"--junitxml={tmp_path / 'failing.xml'}"]))  # fmt: skip
        assert bad.returncode == 1, bad.stdout[-3000:]
    chaos = keep("rdq-chaos run", _run(tmp_path, [
        sys.executable, "-m", "rdq_compliance.chaos.cli", "run", str(TINY),
        f"--backend={backend}", f"--dsn={last}", "--out", str(tmp_path / "chaos")]))  # fmt: skip
    if "unknown query key" not in forms:
        assert chaos.returncode == 0, chaos.stdout[-3000:] + chaos.stderr[-2000:]
        assert (tmp_path / "chaos" / "results.json").is_file()
    else:  # the example refuses that form: a usage error, the DSN masked
        assert chaos.returncode == 2, chaos.stdout[-3000:] + chaos.stderr[-2000:]
    dead = closed_port()
    for form, dsn in server.forms(dead).items():
        proc = keep(f"dead server, {form}", _run(tmp_path, [
            *pytest_cmd, f"--rdq-backend={backend}", f"--rdq-dsn={dsn}", "-k", tests]))  # fmt: skip
        assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    env_name = f"RDQ_{backend.upper()}_DSN" if ":" not in backend else "RDQ_DSN"
    proc = keep("dead server, from the environment", _run(
        tmp_path, [*pytest_cmd, f"--rdq-backend={backend}", "-k", tests],
        env={env_name: first.replace(str(server.port), str(dead))}))  # fmt: skip
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert leaks(secret, streams, tmp_path) == []
