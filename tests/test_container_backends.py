"""The container rung on real containers: what depends on the server being in a
container (the ladder climbing to it, the server's clock serving leases, a restart
keeping acknowledged work on its volume, and the chaos campaign's server kill and
restart, server freeze and connection cuts applied to it, read from the campaign's
``results.json``) on PostgreSQL, Redis and SecantusDB, the container faults, and the
SIGKILLed runner.

Each server gets one pytest process, as a user runs it (``pytest --pyargs`` the suite's
modules of :data:`MODULES`), with the local binaries hidden (``pg_bin_dir`` /
``redis_bin_dir`` / ``mongo_bin_dir`` pointing at a folder that does not exist), so the
ladder must climb to the container rung; the run's closing ``rdq: ... server:`` line must
name the container and its image. The images are the local ones of
``tools/build_local_images.sh`` (``rdq-local/postgres``, ``rdq-local/redis``,
``rdq-local/secantusdb`` — SecantusDB is a MongoDB-wire-protocol server, not MongoDB);
``RDQ_TEST_<SERVER>_IMAGE`` names another (e.g. ``postgres:16-alpine`` where a registry
answers).

Where Docker does not answer or an image is missing, the tests skip with the reason —
and fail under ``CI=true``, whose ``.ci/run`` starts Docker and builds the images.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdq_compliance.plugin import SUITE_DIR
from rdq_compliance.provision.containers import docker_unavailable_reason
from rdq_compliance.provision.kit_container import KIT_LABEL, PID_LABEL, docker_client
from tests._waiting import HANG_S

HIDDEN = "/nonexistent/rdq-hidden-binaries"

#: server -> (backend, the option hiding its local binaries, its image option, image)
SERVERS: dict[str, tuple[str, str, str, str]] = {
    "postgres": ("postgres", "pg_bin_dir", "pg_image", "rdq-local/postgres"),
    "redis": ("redis", "redis_bin_dir", "redis_image", "rdq-local/redis"),
    "secantusdb": ("mongo", "mongo_bin_dir", "mongo_image", "rdq-local/secantusdb"),
}


def _image(server: str) -> str:
    return os.environ.get(f"RDQ_TEST_{server.upper()}_IMAGE") or SERVERS[server][3]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _require_image(server: str) -> None:
    """Skip (fail under ``CI=true``) when Docker does not answer or the image is missing."""
    reason = docker_unavailable_reason(timeout=HANG_S)
    if reason is None:
        import docker.errors

        client = docker_client()
        try:
            client.images.get(_image(server))
        except docker.errors.ImageNotFound:
            reason = (
                f"image {_image(server)} is not here: build it with tools/build_local_images.sh"
            )
        finally:
            client.close()
    if reason is None:
        return
    if _in_ci():
        pytest.fail(f"container tests need Docker: {reason} (CI is set: this fails the run)")
    pytest.skip(f"container tests need Docker: {reason}")


def _args(server: str) -> list[str]:
    backend, hide, image_option, _ = SERVERS[server]
    return [
        f"--rdq-backend={backend}",
        f"--rdq-option={hide}={HIDDEN}",
        f"--rdq-option={image_option}={_image(server)}",
    ]


#: The suite's modules the container rung runs. Its subject is how the server is
#: provisioned and faulted, not the storage code: the claim and lease modules (leases
#: served by the container's clock), durability (a server killed and restarted in its
#: container keeps acknowledged work on its volume) and the chaos campaign (its faults
#: applied to the container). The rest of the suite runs the same storage code against
#: the same server software on the other rungs (tests/test_builtin_backends.py).
MODULES = ("claim", "lease", "durability", "chaos")


def _modules() -> list[str]:
    """The suite's modules the container rung runs (the stateful machine is left out)."""
    return [f"rdq_compliance.suite.test_{name}" for name in MODULES]


def _suite_size() -> int:
    """How many test functions those modules define (parameters not counted)."""
    return sum(
        1
        for name in MODULES
        for line in (SUITE_DIR / f"test_{name}.py").read_text().splitlines()
        if line.startswith("def test_")
    )


def _kit_containers(*labels: str) -> tuple[list[str], list[str]]:
    """The containers and volumes that carry every one of ``labels``."""
    client = docker_client()
    try:
        containers = client.containers.list(all=True, filters={"label": list(labels)})
        volumes = client.volumes.list(filters={"label": list(labels)})
        return [c.name for c in containers], [v.name for v in volumes]
    finally:
        client.close()


@pytest.mark.parametrize("server", list(SERVERS))
def test_conformance_and_chaos_pass_on_the_container_rung(server: str, tmp_path: Path) -> None:
    _require_image(server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    began = time.monotonic()
    basetemp = tmp_path / "basetemp"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", *_modules(),
            *_args(server), "-m", "not stateful", f"--basetemp={basetemp}",
            "--rdq-require-backend", "-q", "-rA", "-p", "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )  # fmt: skip
    took = time.monotonic() - began
    failures = proc.stdout.partition("= FAILURES =")[2] or proc.stdout.partition("= ERRORS =")[2]
    verdicts = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    tail = "\n".join([failures[:6000], *verdicts[:20], proc.stdout[-500:], proc.stderr[-2000:]])
    assert proc.returncode == 0, f"the suite failed on the {server} container:\n{tail}"
    origin = [line for line in proc.stdout.splitlines() if line.startswith("rdq: ")][-1]
    assert f"server: container {_image(server)} (" in origin, origin
    summary = [line for line in proc.stdout.splitlines() if " passed" in line][-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= int(_suite_size() * 0.9), f"too few tests ran on {server}: {summary}"
    # -rA's short summary: "PASSED path::test_chaos_campaign..." (a --durations line in
    # PYTEST_ADDOPTS names the test too, but starts with its time)
    chaos = [
        line.split()[0]
        for line in proc.stdout.splitlines()
        if "::test_chaos_campaign" in line and line.split()[0] in _VERDICTS
    ]
    assert chaos == ["PASSED"], f"the chaos campaign did not pass on {server}: {chaos}\n{tail}"
    (results,) = basetemp.glob("chaos-*[0-9]/results.json")  # not the "current" link
    applied = json.loads(results.read_text())["counters"]
    # Every server fault of the scenario was injected into the container (none skipped).
    assert applied["server_kills"] == applied["server_restarts"] >= 1, applied
    assert applied["server_pauses"] == applied["server_resumes"] >= 1, applied
    if server != "secantusdb":  # MongoDB has no connection cuts
        assert applied["connection_cuts"] >= 1, applied
    print(
        f"{server} container: {summary} ({took:.0f}s); {origin}; campaign: "
        f"{applied['server_restarts']} restart(s), {applied['server_pauses']} freeze(s), "
        f"{applied['connection_cuts']} cut(s), {applied['total_kills']} worker kills"
    )


_VERDICTS = {"PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"}

_HOLD = """
import sys, time
from pathlib import Path
from rdq_compliance.provision.backend import ProvisionRequest
from rdq_compliance.registry import load_backend
backend = load_backend(sys.argv[1])
options = dict(a.split("=", 1) for a in sys.argv[3:])
server = backend.provision(ProvisionRequest(workdir=Path(sys.argv[2]), options=options))
print("up", server.origin, flush=True)
time.sleep(600)
"""


def test_a_sigkilled_runner_leaves_no_container_and_no_volume(tmp_path: Path) -> None:
    """The kit process is SIGKILLed while its container runs: its reaper removes the
    container and its volume (found by the kit's labels with the docker SDK)."""
    server = "redis"
    _require_image(server)
    backend, hide, image_option, _ = SERVERS[server]
    options = [f"{hide}={HIDDEN}", f"{image_option}={_image(server)}"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, backend, str(tmp_path), *options],
        stdout=subprocess.PIPE,
        text=True,
    )
    label = f"{PID_LABEL}={proc.pid}"
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("up container "), line
        containers, volumes = _kit_containers(label)
        assert len(containers) == 1 and len(volumes) == 1, (containers, volumes)
        assert _kit_containers(KIT_LABEL, label)[0], "the container lacks the kit's label"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(HANG_S)
        deadline = time.monotonic() + HANG_S  # the wait ends when the reaper has removed them
        while time.monotonic() < deadline and any(_kit_containers(label)):
            time.sleep(0.2)
        assert _kit_containers(label) == ([], []), "left behind after SIGKILL"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_bad_network_mode_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rdq_compliance.provision import container_server
    from rdq_compliance.provision.backend import ProvisionRequest
    from rdq_compliance.registry import load_backend
    from rdq_core.errors import InvalidArgument

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("a container was started before the options were checked")

    monkeypatch.setattr(container_server, "start_kit_container", must_not_start)
    for backend, option in [("postgres", "pg"), ("redis", "redis"), ("mongo", "mongo")]:
        request = ProvisionRequest(workdir=tmp_path, options={f"{option}_network": "bridge"})
        with pytest.raises(InvalidArgument, match=rf"^--rdq-option {option}_network='bridge'"):
            load_backend(backend).start_container(request)


def _answers(server: str, dsn: str) -> bool:
    """Whether the server at ``dsn`` answers within about a second (a killed or paused one
    never does, however long: load cannot make it answer)."""
    if server == "postgres":
        import psycopg

        try:
            psycopg.connect(dsn, connect_timeout=1).close()
        except psycopg.Error:
            return False
        return True
    if server == "redis":
        import redis

        client = redis.Redis.from_url(dsn, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()
    import pymongo
    import pymongo.errors

    mongo: pymongo.MongoClient = pymongo.MongoClient(
        dsn, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000, socketTimeoutMS=1000
    )
    try:
        mongo.admin.command("ping")
    except pymongo.errors.PyMongoError:
        return False
    finally:
        mongo.close()
    return True


@pytest.mark.parametrize("server", list(SERVERS))
def test_container_faults_kill_restart_keep_data_and_pause(server: str, tmp_path: Path) -> None:
    """``docker kill`` takes the server down; a restart of the same container brings it
    back on the same address with the data kept; ``docker pause`` freezes it (no answer)
    until resumed."""
    _require_image(server)
    from rdq_compliance.provision.backend import ProvisionRequest
    from rdq_compliance.registry import load_backend
    from rdq_core.model import NewTask

    backend = load_backend(SERVERS[server][0])
    _, hide, image_option, _ = SERVERS[server]
    options = {hide: HIDDEN, image_option: _image(server)}
    began = time.monotonic()
    provisioned = backend.provision(ProvisionRequest(workdir=tmp_path, options=options))
    started = time.monotonic() - began
    try:
        assert provisioned.origin.startswith(f"container {_image(server)} ("), provisioned.origin
        assert "127.0.0.1:" in provisioned.origin
        namespace = provisioned.create_namespace()
        storage = backend.open(provisioned.dsn, namespace)
        try:
            assert storage.enqueue(NewTask(id="kept", queue="q", handler="h", payload=b"x"))
        finally:
            storage.close()
        provisioned.kill()
        assert not _answers(server, provisioned.dsn), "the server answers after docker kill"
        provisioned.restart()
        storage = backend.open(provisioned.dsn, namespace)
        try:
            assert storage.get("kept").payload == b"x", "the restart lost the data"
        finally:
            storage.close()
        provisioned.pause()
        try:
            assert not _answers(server, provisioned.dsn), "a paused server answered"
        finally:
            provisioned.resume()
        deadline = time.monotonic() + HANG_S  # the wait ends when it answers
        while not _answers(server, provisioned.dsn):
            assert time.monotonic() < deadline, "the server does not answer after resume"
    finally:
        provisioned.close()
    print(f"{server}: container up and ready in {started:.1f}s")
