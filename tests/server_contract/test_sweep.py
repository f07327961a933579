"""A run killed by SIGTERM or SIGKILL leaves its namespaces on a server it was given by
DSN; the next run's sweep drops them, and never one of a run still going, on every
server backend (:mod:`rdq_compliance.provision.owners`).

The runs are real ``pytest`` processes with the kit's plugin, given by ``--rdq-dsn`` a
private server of the driver's local rung (the ``local`` fixture): each holds a test with
a namespace (``rdq_spec``) until it is killed; the next run's header says what its sweep
dropped. Private, because every kit run on a server sweeps it: on a shared one, another
run beside this test (the kit's own tests, the MariaDB example) may drop the dead runs'
namespaces first, and the test would judge that run, not the one it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.owners import Owner, sweep
from rdq_compliance.session import sweep_server
from tests._paths import pythonpath
from tests._processes import wait_gone
from tests.server_contract.driver import ServerDriver
from tests.server_contract.drivers import each

HOLD = '''
import os, time
from pathlib import Path


def test_hold(rdq_spec, rdq_storage):
    rdq_storage.stats("q")
    Path(os.environ["RDQ_TEST_HOLD_FILE"]).write_text(rdq_spec.namespace)
    time.sleep(300)


def test_nothing(rdq_session):
    assert rdq_session.started
'''
#: How long a run may take to start and reach its test (s): pytest, the plugin, a server
#: probe, a namespace (the SecantusDB stand-in is slow under load).
START_S = 60.0


def _run(driver: ServerDriver, server: Server, tmp_path: Path, test: str, **kw):
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    (folder / "test_hold.py").write_text(HOLD)
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(os.pathsep.join([*driver.pythonpath, env.get("PYTHONPATH", "")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    env.update(kw.pop("env", {}))
    backend = driver.backend_ref if driver.pythonpath else driver.name
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
        "--rdq-no-suite", f"--rdq-backend={backend}", f"--rdq-dsn={server.dsn}",
        "--rdq-no-docker", "--rootdir", str(folder), str(folder / "test_hold.py"),
        "-k", test,
    ]  # fmt: skip
    return subprocess.Popen(argv, cwd=folder, env=env, text=True, **kw)


def _hold(driver: ServerDriver, server: Server, tmp_path: Path, label: str):
    """A run holding one namespace: (its process, the namespace)."""
    hold_file = tmp_path / f"{label}.namespace"
    proc = _run(
        driver,
        server,
        tmp_path,
        "test_hold",
        env={"RDQ_TEST_HOLD_FILE": str(hold_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + START_S
    while not hold_file.exists() or not hold_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.communicate()[0]
            pytest.fail(f"the holding run did not reach its test in {START_S:.0f} s:\n{out}")
        time.sleep(0.1)
    return proc, hold_file.read_text()


@each("ladder")
def test_a_killed_run_leaves_nothing_after_the_next_runs_sweep(
    driver: ServerDriver, local: Server, tmp_path: Path
) -> None:
    signals = (signal.SIGTERM, signal.SIGKILL)
    runs = {sig: _hold(driver, local, tmp_path, sig.name) for sig in signals}
    records = local.recorded_namespaces()
    for proc, namespace in runs.values():
        owner = Owner.decode(records.get(namespace))
        assert owner is not None and owner.pid == proc.pid, (
            f"{driver}: the namespace {namespace} of the run (pid {proc.pid}) keeps no owner "
            f"record naming it: {records.get(namespace)!r}"
        )
        assert owner.here() and owner.alive()
    # A sweep while they run leaves their namespaces alone.
    live = sweep_server(local)
    for _proc, namespace in runs.values():
        assert namespace in live.kept and namespace not in live.dropped, live
    for sig, (proc, _namespace) in runs.items():
        proc.send_signal(sig)
    for proc, _namespace in runs.values():
        proc.communicate(timeout=30)
    assert not wait_gone([proc.pid for proc, _ in runs.values()], 10)
    left = local.recorded_namespaces()
    for sig, (_proc, namespace) in runs.items():
        assert namespace in left, f"{driver}: the run killed by {sig.name} dropped {namespace}?"
    # The next run: its header says what its sweep dropped; the namespaces are gone.
    nxt = _run(
        driver, local, tmp_path, "test_nothing", stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out = nxt.communicate(timeout=120)[0]
    assert nxt.returncode == 0, out
    assert "dropped" in out and "left by dead runs" in out, out
    left = local.recorded_namespaces()
    for sig, (proc, namespace) in runs.items():
        assert namespace not in left, (
            f"{driver}: {namespace} of the run killed by {sig.name} survived the next "
            f"run's sweep:\n{out}"
        )
        assert f"pid {proc.pid} on" in out, out
    # Nothing of a dead owner of this machine is left at all.
    dead = [
        ns for ns, rec in left.items()
        if (o := Owner.decode(rec)) is not None and o.here() and not o.alive()
    ]  # fmt: skip
    assert dead == [], f"{driver}: namespaces of dead runs left after the sweep: {dead}"


@each("ladder")
def test_the_sweep_keeps_a_namespace_made_elsewhere_until_it_is_old(
    driver: ServerDriver, shared: Server
) -> None:
    """A record from another machine cannot be asked whether its run lives: kept while
    younger than a day, dropped after; a namespace with no record is never dropped."""
    young, old = shared.create_namespace(), shared.create_namespace()
    try:
        me = Owner.current()
        records = dict(shared.recorded_namespaces())
        assert Owner.decode(records[young]) is not None
        elsewhere = {
            young: Owner("other-host", "b", 1, 4242, 1.0, me.created - 3600).encode(),
            old: Owner("other-host", "b", 1, 4242, 1.0, me.created - 2 * 86400).encode(),
        }
        report = sweep(elsewhere, shared.drop_namespace)
        assert set(report.dropped) == {old} and set(report.kept) == {young}, report
        after = shared.recorded_namespaces()
        assert young in after and old not in after
    finally:
        shared.drop_namespace(young)
        shared.drop_namespace(old)
