"""The remote fleet: campaigns whose workers run on other hosts over SSH.

The hosts are :mod:`rdq_compliance.provision.ssh_hosts`' test hosts: each a network
namespace with a real OpenSSH ``sshd`` (Debian's openssh-server), a key made for the
test, reachable only over the veth pair the test made; the server of the session is
reached from a host through a relay on the machine's end of its veth. Workers are
started by :class:`~rdq_compliance.chaos.ssh_launcher.SshLauncher` (asyncssh, host keys
checked against the test's known-hosts file), killed, paused and resumed through the
kit's watchdog on the host, their journals mirrored over SFTP.

What is checked, on PostgreSQL and Redis (the local rung's servers):

- the standard campaign, its workers over three hosts, passes, and its timeline has a
  lane group per host;
- broken variants the local fleet exposes are exposed through the remote fleet, naming
  the same rules: a client clock (``storage-clock``) under a host's clock skew (every
  worker of the host skewed), a heartbeat timeout taken as applied (``lease-respected`` /
  ``one-claim``) under partitions that cut whole hosts from the server;
- a SIGKILLed runner leaves no worker and no sshd session on any host (the watchdogs read
  end of file when sshd closes their channels), and the hosts' namespaces and veths go
  with the hosts;
- a host lost mid-campaign is journalled as a fault, its slots move to the hosts left,
  and the campaign ends with a verdict;
- bad hosts files and unusable hosts give one clear error each.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.events import read_journal
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.provision.process import descendants
from rdq_compliance.session import Session
from tests._ci import missing
from tests._paths import ROOT, pythonpath
from tests._proof import AttemptResult, run_seeds, seeds_from
from tests._ssh_hosts import host_processes, wait_no_workers
from tests._waiting import HANG_S
from tests.broken import catalogue
from tests.chaos._chaos_support import STANDARD, start_session

pytestmark = [pytest.mark.chaos]

asyncssh = pytest.importorskip("asyncssh", reason="the ssh extra (asyncssh) is not installed")

from rdq_compliance.chaos.fleet_hosts import (  # noqa: E402
    FleetConfigError,
    FleetHosts,
    fleet_from_dict,
    load_fleet,
)
from rdq_compliance.chaos.ssh_launcher import FleetError, SshLauncher, shift_line  # noqa: E402
from rdq_compliance.provision import ssh_hosts  # noqa: E402

HOSTS = 3
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def _needs_hosts() -> None:
    why = ssh_hosts.unavailable()
    if why:
        missing(f"no SSH test hosts here: {why}")


@contextmanager
def remote_fleet(
    session: Session, workdir: Path, count: int = HOSTS, env: dict[str, str] | None = None
) -> Iterator[tuple[ssh_hosts.SshHosts, FleetHosts]]:
    """``count`` SSH hosts relaying to ``session``'s server, and their checked hosts file."""
    _needs_hosts()
    address = session.server.network_address()
    extra: dict[str, object] = {"env": {"PYTHONPATH": pythonpath(None), **(env or {})}}
    if Path(FAKETIME).exists():
        extra["faketime"] = FAKETIME
    with ssh_hosts.SshHosts(count, workdir, relays=[address]) as hosts:
        path = hosts.write_fleet_toml(workdir / "hosts.toml", sys.executable, extra)
        yield hosts, load_fleet(path)


def _harness_events(outdir: Path) -> list[dict]:
    return list(read_journal(outdir / "history" / "harness.jsonl"))


def _placed(events: list[dict]) -> dict[str, str]:
    """Worker name -> the host the harness journalled it on."""
    return {
        e["target"]: e["host"] for e in events if e.get("op") == "host" and e["kind"] == "placed"
    }


def ss_sockets(listing: str) -> list[tuple[int | None, str]]:
    """``(pid, peer address)`` of each connected socket of ``listing`` (``ss -Htnp``'s
    output): a pair per process that holds the socket, ``None`` for the pid when none is
    named (an IPv6 address loses its brackets)."""
    out: list[tuple[int | None, str]] = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        peer = fields[4].rsplit(":", 1)[0].strip("[]")
        pids = [int(pid) for pid in re.findall(r",pid=(\d+),fd=", line)]
        out += [(pid, peer) for pid in pids] or [(None, peer)]
    return out


def owned_peers(sockets: Iterable[tuple[int | None, str]], owned: Container[int]) -> set[str]:
    """The peers of those ``(pid, peer address)`` sockets that a process of ``owned``
    holds: a socket of other software, or of no process, is left out."""
    return {peer for pid, peer in sockets if pid is not None and pid in owned}


def _ss(namespace: str | None = None) -> str:
    """``ss -Htnp`` in the machine's namespace; ``ss -Htn`` in ``namespace`` (a host's,
    where every socket is the test's)."""
    argv = (
        ["ss", "-Htnp"] if namespace is None else ["ip", "netns", "exec", namespace, "ss", "-Htn"]
    )
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


class PeerWatch:
    """The loopback watcher: samples, every 0.25 s while a campaign runs, the peers of the
    TCP connections the test owns, so a test can check that nothing but loopback and the
    test hosts' veths was addressed. What the test owns: in the machine's namespace, the
    sockets held by its process tree (``root``, by default this process, and its
    descendants, read again at each sample; the relays are threads of this process, the
    hosts' sshds and a server the session started are children of the watchdogs it
    started); in each host's namespace (the test made it), every socket."""

    def __init__(self, hosts: ssh_hosts.SshHosts, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.namespaces = [h.namespace for h in hosts.hosts]
        self.allowed = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
        # the SSH test hosts' block, of which this test's veths are a part
        self.allowed.append(ssh_hosts.NETWORK)
        self.peers: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(HANG_S)  # ends after the sample under way

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.sample()

    def sample(self) -> None:
        """One sample, read with ``ss`` (its scan of the machine's processes runs in a
        process of its own, not in this one, which runs the campaign). The machine's
        sockets are read before the tree: the process holding one is in the tree read
        after it, unless it has exited since."""
        machine = ss_sockets(_ss())
        tree = {self.root, *descendants(self.root)}
        in_hosts = [peer for ns in self.namespaces for _, peer in ss_sockets(_ss(ns))]
        self.take(machine, tree, in_hosts)

    def take(
        self,
        machine: Iterable[tuple[int | None, str]],
        tree: Container[int],
        in_hosts: Iterable[str] = (),
    ) -> None:
        """Record one sample: the machine namespace's ``(pid, peer)`` sockets, of which
        those held by a process of ``tree`` count, and the peers seen in the hosts'
        namespaces, which all do."""
        self.peers |= owned_peers(machine, tree)
        self.peers.update(in_hosts)
        self.samples += 1

    def outside(self) -> list[str]:
        """Peers neither on loopback nor on the test's veths (an IPv4-mapped address
        is read as its IPv4 address)."""
        out = []
        for peer in sorted(self.peers):
            try:
                address = ipaddress.ip_address(peer)
            except ValueError:
                out.append(peer)
                continue
            mapped = getattr(address, "ipv4_mapped", None)
            address = mapped or address
            if not any(address in net for net in self.allowed if net.version == address.version):
                out.append(peer)
        return out


def test_the_loopback_watcher_names_a_peer_beyond_loopback_and_the_veths():
    watch = PeerWatch(SimpleNamespace(hosts=[]))  # type: ignore[arg-type]
    watch.peers = {"127.0.0.1", "::1", "::ffff:127.0.0.1", "10.198.7.1"}
    assert watch.outside() == []
    watch.peers |= {"192.0.2.2", "::ffff:8.8.8.8"}
    assert watch.outside() == ["192.0.2.2", "::ffff:8.8.8.8"]


def test_the_loopback_watcher_counts_only_the_sockets_the_test_owns():
    """In the machine's namespace a peer counts only if a process of the test's tree holds
    its socket: another software's peer, or a socket no process holds, is left out, and a
    foreign peer of the tree is named; in a host's namespace every peer counts."""
    watch = PeerWatch(SimpleNamespace(hosts=[]))  # type: ignore[arg-type]
    tree = {100, 101, 102}
    machine = [(100, "10.198.3.2"), (101, "127.0.0.1"), (7, "203.0.113.80"), (None, "192.0.2.9")]
    watch.take(machine, tree, in_hosts=["10.198.3.1"])
    assert watch.peers == {"10.198.3.2", "127.0.0.1", "10.198.3.1"}
    assert watch.outside() == []
    watch.take([(102, "203.0.113.80"), (8, "198.51.100.1")], tree)
    assert watch.outside() == ["203.0.113.80"]
    watch.take([], tree, in_hosts=["::ffff:192.0.2.7"])
    assert watch.outside() == ["203.0.113.80", "::ffff:192.0.2.7"]
    assert watch.samples == 3
    assert owned_peers(machine, set()) == set()


def test_the_loopback_watcher_reads_the_holders_of_each_socket_from_ss():
    listing = (
        "ESTAB 0 0 10.198.3.1:5432 10.198.3.2:40112 "
        'users:(("python",pid=4100,fd=9),("python",pid=4101,fd=9))\n'
        "ESTAB 0 0 [::ffff:127.0.0.1]:22 [::ffff:203.0.113.80]:5000 "
        'users:(("sshd: root@not",pid=77,fd=4))\n'
        "ESTAB 0 0 10.0.0.5:51000 192.0.2.9:443\n"
        "garbage\n"
    )
    assert ss_sockets(listing) == [
        (4100, "10.198.3.2"), (4101, "10.198.3.2"), (77, "::ffff:203.0.113.80"), (None, "192.0.2.9")
    ]  # fmt: skip


_HOLD = r"""
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.connect((sys.argv[2], int(sys.argv[3])))
print("connected", flush=True)
sys.stdin.read()
"""


def test_the_loopback_watcher_reads_the_tree_of_its_root_from_the_machine():
    """A live sample: the socket of a grandchild of the root counts, the sockets of a
    process outside the root's tree (here this one, which the root is a child of) do not."""
    with socket.create_server(("127.0.0.66", 0)) as server:
        port = str(server.getsockname()[1])
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import subprocess, sys; subprocess.run([sys.executable, '-c', *sys.argv[1:]])",
             _HOLD, "127.0.0.88", "127.0.0.66", port],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline() == "connected\n"
            with socket.create_connection(
                ("127.0.0.66", int(port)), source_address=("127.0.0.77", 0)
            ):
                held = [server.accept()[0], server.accept()[0]]  # this process's: not counted
                watch = PeerWatch(SimpleNamespace(hosts=[]), root=child.pid)  # type: ignore[arg-type]
                watch.sample()
                for sock in held:
                    sock.close()
        finally:
            child.communicate(timeout=30)
    assert watch.samples == 1
    assert "127.0.0.66" in watch.peers, sorted(watch.peers)  # the grandchild's peer
    assert not {"127.0.0.77", "127.0.0.88"} & watch.peers, sorted(watch.peers)


# ---- the hosts file ---------------------------------------------------------------------------


def _fleet(tmp_path: Path, **fleet: object) -> FleetHosts:
    """A ``[fleet]`` table with an interpreter and an (empty) known-hosts file unless
    ``fleet`` says otherwise (``None``: the key left out)."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    table = {"python": sys.executable, "known_hosts": str(known), **fleet}
    table = {k: v for k, v in table.items() if v is not None}
    return fleet_from_dict({"fleet": table}, source="hosts.toml", base=tmp_path)


@pytest.mark.parametrize(
    ("fleet", "said"),
    [
        ({}, "no hosts: add [[fleet.hosts]]"),
        ({"hosts": [{"url": "http://h"}]}, "is not ssh://user@host[:port]"),
        ({"hosts": [{"url": "ssh://u:secret@h"}]}, "holds a password"),
        ({"hosts": [{"url": "ssh://u@h:99999"}]}, "port is not a number"),
        ({"hosts": [{"url": "ssh://h", "colour": "red"}]}, "unknown key(s) ['colour']"),
        ({"hosts": [{"url": "ssh://a", "name": "x"}, {"url": "ssh://b", "name": "x"}]},
         "two hosts have the same name"),
        ({"known_hosts": "/nonexistent/kh", "hosts": [{"url": "ssh://h"}]},
         "host keys are always checked"),
        ({"known_hosts": "", "hosts": [{"url": "ssh://h"}]}, "host keys are always checked"),
        ({"keys": ["/nonexistent/key"], "hosts": [{"url": "ssh://h"}]}, "no key file"),
        ({"env": {"A B": "x"}, "hosts": [{"url": "ssh://h"}]}, "fleet.env must be"),
        ({"python": None, "hosts": [{"url": "ssh://h"}]}, "no worker interpreter"),
        ({"speed": 1, "hosts": [{"url": "ssh://h"}]}, "unknown key(s) ['speed']"),
    ],
)  # fmt: skip
def test_a_bad_hosts_file_is_refused_saying_what_to_do(tmp_path, fleet, said):
    with pytest.raises(FleetConfigError) as raised:
        _fleet(tmp_path, **fleet)
    assert said in str(raised.value)
    assert "secret" not in str(raised.value)


def test_a_hosts_file_reads_back_its_hosts(tmp_path):
    fleet = _fleet(
        tmp_path,
        env={"PYTHONPATH": "/src"},
        faketime="/lib/ft.so",
        hosts=[{"url": "ssh://rdq@10.0.0.1:2222", "name": "n1", "server_address": "10.0.0.9"},
               {"url": "ssh://10.0.0.2", "faketime": "/other/ft.so", "python": "/p"}],
    )  # fmt: skip
    one, two = fleet.hosts
    assert (one.name, one.user, one.address, one.port) == ("n1", "rdq", "10.0.0.1", 2222)
    assert (one.server_address, one.faketime) == ("10.0.0.9", "/lib/ft.so")
    assert one.python == sys.executable
    assert (two.name, two.port, two.faketime, two.python) == ("10.0.0.2", 22, "/other/ft.so", "/p")
    assert fleet.env == (("PYTHONPATH", "/src"),)
    with pytest.raises(FleetConfigError, match="no hosts file at"):
        load_fleet(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("[fleet\n")
    with pytest.raises(FleetConfigError, match="not valid TOML"):
        load_fleet(tmp_path / "bad.toml")


def test_journal_times_move_onto_the_runners_clock():
    line = json.dumps({"t": 100.5, "op": "claim", "proc": "w1"}).encode() + b"\n"
    assert json.loads(shift_line(line, 0.25))["t"] == pytest.approx(100.25)
    assert shift_line(line, 0.0) == line
    assert shift_line(b'{"t": 1, "op"\n', 0.5) == b'{"t": 1, "op"\n'  # torn: kept as is


def test_hosts_may_be_given_as_urls_alone(tmp_path):
    fleet = _fleet(tmp_path, hosts=["ssh://rdq@10.0.0.1", "ssh://10.0.0.2:2200"])
    assert [(h.name, h.user, h.port) for h in fleet.hosts] == [
        ("10.0.0.1", "rdq", 22),
        ("10.0.0.2", None, 2200),
    ]


def test_the_plugin_refuses_a_bad_hosts_file_before_any_test(tmp_path):
    bad = tmp_path / "hosts.toml"
    (tmp_path / "known_hosts").write_text("")
    bad.write_text('[fleet]\npython = "/p"\nknown_hosts = "known_hosts"\n')
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite", "-m", "chaos",
         "--rdq-backend=sqlite", f"--rdq-chaos-fleet={bad}", "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"rdq: --rdq-chaos-fleet: {bad}: no hosts: add [[fleet.hosts]]" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_chaos_suite_runs_its_workers_on_the_hosts_of_rdq_chaos_fleet(redis_session, tmp_path):
    """The pytest path (``-m chaos --rdq-chaos-fleet``): the header names the hosts, the
    campaign's workers were placed on them, and it passes."""
    smoke = ROOT / "tests" / "chaos" / "smoke.toml"
    with remote_fleet(redis_session, tmp_path / "hosts", count=2) as (hosts, fleet):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite", "-m", "chaos",
             "--rdq-backend=redis", f"--rdq-dsn={redis_session.server.dsn}",
             f"--rdq-chaos-scenario={smoke}", f"--rdq-chaos-fleet={fleet.source}",
             f"--basetemp={tmp_path / 'run'}", "-p", "no:cacheprovider", "-p", "no:randomly"],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
            env={**os.environ, "PYTHONPATH": pythonpath(os.environ.get("PYTHONPATH"))},
        )  # fmt: skip
        left = wait_no_workers(hosts, HANG_S)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "rdq: the chaos suite's workers run over SSH on: h0 (ssh://root@" in out, out[:2000]
    journals = list((tmp_path / "run").rglob("harness.jsonl"))
    assert len(journals) == 1, journals
    placed = _placed(list(read_journal(journals[0])))
    assert set(placed.values()) == {"h0", "h1"}, placed
    assert left == {}, left


# ---- unusable hosts ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_session(tmp_path_factory) -> Iterator[Session]:
    session = start_session("redis", tmp_path_factory.mktemp("redis"))
    try:
        yield session
    finally:
        session.close()


def test_an_unknown_host_key_a_missing_kit_and_a_dead_address_are_clear_errors(
    redis_session, tmp_path, monkeypatch
):
    with remote_fleet(redis_session, tmp_path / "hosts", count=1) as (hosts, fleet):
        kwargs = dict(
            history_dir=tmp_path / "h", log_dir=tmp_path / "l", dsn_for=lambda h: "x", slots=1
        )
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        with pytest.raises(FleetError) as raised:
            SshLauncher(replace(fleet, known_hosts=empty), **kwargs)
        text = str(raised.value)
        assert "host key is not in" in text and "always checked" in text, text
        assert hosts.hosts[0].name in text

        no_kit = replace(fleet, hosts=(replace(fleet.hosts[0], python="/usr/bin/python3"),))
        with pytest.raises(FleetError, match="cannot import this kit there"):
            SshLauncher(no_kit, **kwargs)

        from rdq_compliance.chaos import ssh_launcher

        ours = ssh_launcher._runner_kit()
        assert ours["version"] and len(ours["digest"]) == 16
        other = {**ours, "digest": "0" * 16}  # the runner's code edited since: same version
        monkeypatch.setattr(ssh_launcher, "_runner_kit", lambda: other)
        with pytest.raises(FleetError, match="like the runner's, but its code differs"):
            SshLauncher(fleet, **kwargs)
        monkeypatch.setattr(ssh_launcher, "_runner_kit", lambda: {**ours, "version": "9.9"})
        with pytest.raises(FleetError, match=r"its kit is version \S+, the runner's is 9\.9"):
            SshLauncher(fleet, **kwargs)
        monkeypatch.undo()

        gone = replace(fleet, hosts=(replace(fleet.hosts[0], address="10.198.255.254"),))
        t0 = time.monotonic()
        with pytest.raises(FleetError, match="cannot connect"):
            SshLauncher(gone, **kwargs)
        # ended by the launcher's connect timeouts, not TCP's two minutes of SYN retries
        assert time.monotonic() - t0 < 4 * ssh_launcher.CONNECT_TIMEOUT_S
    assert ssh_hosts.namespaces(os.getpid()) == []


def test_the_launchers_verbs_reach_the_worker_process_on_its_host(redis_session, tmp_path):
    """start, SIGSTOP / SIGCONT, arm, SIGKILL, leftovers and close, one by one, on one
    host: each is seen on the real process (the hosts share this machine's kernel, so
    psutil sees the worker's state)."""
    from rdq_compliance.chaos.launcher import WorkerStart
    from rdq_compliance.chaos.runner import worker_template
    from tests.chaos._chaos_support import SMOKE

    spec = redis_session.create_namespace()
    config = worker_template(load_scenario(SMOKE), spec)
    with remote_fleet(redis_session, tmp_path / "hosts", count=1) as (_, fleet):
        launcher = _launcher(redis_session, fleet, tmp_path, slots=1)
        try:
            (clock,) = launcher.clocks()
            # the hosts share this machine's clock: the estimate's uncertainty is half the
            # fastest of 16 round trips, far under a second even on a loaded runner
            assert clock.host == "h0" and clock.samples == 16 and clock.uncertainty < 1.0
            w = launcher.start(WorkerStart("w0", 0, replace(config, proc="w0"), None))
            proc = psutil.Process(w.pid)  # one kernel: the host's pid is this machine's
            # the watchdog on the host starts the worker, its environment added there
            _until(lambda: "worker_main" in " ".join(proc.cmdline()), "the worker's exec")
            assert w.running
            assert launcher.leftovers() == [f"h0 pid {w.pid}"]
            w.signal(signal.SIGSTOP)
            _until(lambda: proc.status() == psutil.STATUS_STOPPED, "SIGSTOP")
            w.signal(signal.SIGCONT)
            _until(lambda: proc.status() != psutil.STATUS_STOPPED, "SIGCONT")
            launcher.arm("w0", "after_claim")
            point = Path(json.loads(proc.cmdline()[-1])["control"])
            assert point.read_text() == "after_claim\n"
            w.signal(signal.SIGKILL)
            assert w.wait(HANG_S) == -signal.SIGKILL and not w.running
            assert launcher.leftovers() == []
            w.release()
            launcher.collect()
            assert launcher.journal_path("w0").exists() and (tmp_path / "logs" / "w0.log").exists()
        finally:
            launcher.close()
        assert not point.parent.exists(), "the host's campaign folder was not removed"
    redis_session.drop_namespace(spec)


def test_a_host_that_drops_while_a_worker_starts_there_sends_it_to_another(redis_session, tmp_path):
    from rdq_compliance.chaos.launcher import WorkerStart
    from rdq_compliance.chaos.runner import worker_template
    from tests.chaos._chaos_support import SMOKE

    spec = redis_session.create_namespace()
    config = worker_template(load_scenario(SMOKE), spec)
    with remote_fleet(redis_session, tmp_path / "hosts", count=2) as (hosts, fleet):
        launcher = _launcher(redis_session, fleet, tmp_path, slots=2)
        try:
            down = ["ip", "netns", "exec", hosts.hosts[1].namespace, "ip", "link", "set",
                    ssh_hosts.HOST_LINK, "down"]  # fmt: skip
            subprocess.run(down, check=True)
            assert launcher.host_of(1) == "h1"  # not known lost yet
            w = launcher.start(WorkerStart("w1", 1, replace(config, proc="w1"), None))
            assert w.host == "h0" and launcher.host_of(1) == "h0"
            assert launcher.lost_hosts() == ["h1"] and launcher.lost_hosts() == []
            w.signal(signal.SIGKILL)
            assert w.wait(HANG_S) == -signal.SIGKILL
        finally:
            launcher.close()
    redis_session.drop_namespace(spec)


def _launcher(session: Session, fleet: FleetHosts, tmp_path: Path, *, slots: int) -> SshLauncher:
    """A launcher on ``fleet`` whose workers reach ``session``'s server through the
    hosts' relays (as the runner builds it)."""
    port = session.server.network_address()[1]
    return SshLauncher(
        fleet,
        history_dir=tmp_path / "history",
        log_dir=tmp_path / "logs",
        dsn_for=lambda h: session.server.dsn_via(h.server_address or h.address, port),
        slots=slots,
    )


def _until(predicate, what: str, timeout: float = HANG_S) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


# ---- campaigns --------------------------------------------------------------------------------


def _run(session, scenario, outdir, fleet):
    from rdq_compliance.chaos.runner import run_campaign

    return run_campaign(scenario, session=session, outdir=outdir, fleet_hosts=fleet)


#: One server: the campaign's workers reach Redis from the hosts in the fault-only and
#: clock-skew proofs below, whose campaigns run through the same fleet.
@pytest.mark.parametrize("server", ["postgres"])
def test_the_standard_campaign_passes_with_its_workers_on_three_hosts(server, tmp_path):
    session = start_session(server, tmp_path / "server")
    try:
        with remote_fleet(session, tmp_path / "hosts") as (hosts, fleet), PeerWatch(hosts) as watch:
            result = _run(session, load_scenario(STANDARD), tmp_path / "run", fleet)
            left = wait_no_workers(hosts, HANG_S)
    finally:
        session.close()
    where = f"report folder {tmp_path / 'run'}; notes {result.counters.notes}"
    assert result.checked and result.violations == [], [str(v)[:300] for v in result.violations]
    assert result.drained and result.workers_left == [], where
    assert left == {}, f"processes left on the hosts: {left}"
    # the watcher saw the workers' relays and the runner's SSH sessions, and nothing else
    seen = {h.server_address for h in hosts.hosts} | {h.address for h in hosts.hosts}
    assert watch.samples > 50 and seen <= watch.peers, (watch.samples, sorted(watch.peers))
    assert watch.outside() == [], f"addressed beyond loopback and the veths: {watch.outside()}"
    c = result.counters
    assert c.total_kills > 0 and c.pauses > 0 and c.unexpected_exits == 0, where
    events = _harness_events(tmp_path / "run")
    placed = _placed(events)
    assert set(placed.values()) == {h.name for h in hosts.hosts}, placed
    clocks = [e for e in events if e.get("op") == "host" and e["kind"] == "clock"]
    assert {e["host"] for e in clocks} == set(placed.values()) and len(clocks) == 2 * HOSTS
    # one kernel: the true offset is 0, so the estimate is within its own uncertainty (half
    # the fastest of the round trips), which stays far under a second on a loaded runner
    for e in clocks:
        assert abs(e["offset"]) <= e["uncertainty"] + 0.005 and e["uncertainty"] < 1.0, e
    worker_events = sum(
        1 for p in (tmp_path / "run" / "history").glob("w*.jsonl") for _ in read_journal(p)
    )
    assert worker_events > 2000, worker_events
    page = (tmp_path / "run" / "timeline.html").read_text()
    for h in hosts.hosts:
        assert f"host {h.name}</text>" in page
    assert any("over SSH" in n for n in c.notes), c.notes
    assert ssh_hosts.namespaces(os.getpid()) == []


def _wanted(variant: catalogue.Variant, campaign: catalogue.Campaign) -> str:
    return f"{variant.dotted} caught under {' or '.join(campaign.rules)} through the remote fleet"


def _caught(
    result: CampaignResult, campaign: catalogue.Campaign, name: str
) -> AttemptResult[CampaignResult]:
    """One campaign of a broken variant: caught under one of the campaign's rules; a history
    not checked fails at once."""
    assert result.checked, f"{result.checker_error}; report folder {result.outdir}"
    rules = sorted({v.rule for v in result.violations})
    caught = any(v.rule in campaign.rules for v in result.violations)
    return AttemptResult(caught, result, {"report": name, "rules fired": rules})


def _variants(
    fault: str, stores: tuple[str, ...] = ("postgres", "redis")
) -> list[tuple[catalogue.Variant, catalogue.Campaign]]:
    return [
        (v, c)
        for v, c in catalogue.cases(catalogue.Campaign)
        if c.fault == fault and v.store in stores
    ]


SKEWED = _variants("clock_skew")
#: The variants only a fault exposes: a partition (of whole hosts, here) or a server freeze.
#: One store per fault: what is under test is the fault applied through the hosts; each
#: store's variant is caught under both faults by the local fleet
#: (tests/chaos/test_chaos_partition.py, tests/chaos/test_chaos_server_freeze.py).
FAULT_ONLY = _variants("partition", ("postgres",)) + _variants("server_pause", ("redis",))


@pytest.mark.parametrize(("variant", "campaign"), SKEWED, ids=[v.store for v, _ in SKEWED])
def test_a_client_clock_is_found_under_a_hosts_clock_skew(variant, campaign, tmp_path):
    """Every worker of a skewed host runs under that host's skew; the variant that stamps
    times with the client's clock is caught under ``storage-clock``, naming workers of
    two hosts whose clocks differ."""
    if not Path(FAKETIME).exists():
        missing(f"no libfaketime at {FAKETIME} (Debian's libfaketime)")
    session = start_session(variant.dotted, tmp_path / "server")
    try:
        with remote_fleet(session, tmp_path / "hosts") as (_, fleet):
            scenario = load_scenario(catalogue.scenario(campaign))

            def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
                result = _run(session, scenario.with_seed(seed), tmp_path / "run", fleet)
                return _caught(result, campaign, "run")

            proof = run_seeds(_wanted(variant, campaign), (scenario.seed,), attempt)
    finally:
        session.close()
    result = proof.value
    where = f"report folder {tmp_path / 'run'}; notes {result.counters.notes}"
    events = _harness_events(tmp_path / "run")
    placed = _placed(events)
    skewed = {e["target"] for e in events if e.get("op") == "fault" and e["kind"] == "clock_skew"}
    skewed_hosts = {placed[w] for w in skewed}
    assert skewed_hosts, where
    for w, h in placed.items():  # a host is skewed whole, or not at all
        assert (w in skewed) == (h in skewed_hosts), (w, h, sorted(skewed))
    proof.require()
    found = [v for v in result.violations if v.rule in campaign.rules]
    v = found[0]
    assert f"[{v.rule}]" in v.message and all(w in v.message for w in v.workers), v.message[:400]
    assert {placed.get(w) for w in v.workers} & skewed_hosts, (v.workers, skewed_hosts)


@pytest.mark.parametrize(
    ("variant", "campaign"), FAULT_ONLY, ids=[f"{v.store}-{c.fault}" for v, c in FAULT_ONLY]
)
def test_a_fault_only_variant_is_found_through_the_remote_fleet(
    variant, campaign, tmp_path, monkeypatch
):
    """The variants only a fault exposes, caught under the rules the local fleet catches
    them with (in one of at most ``FAULTED_TRIES`` runs, each with the next seed):

    - a heartbeat unanswered for 0.4 s taken as applied, under partitions that cut whole
      hosts from the server (nftables on the host, over SSH): every cut names every
      worker of the hosts it cut, and is healed;
    - an outcome report unanswered for 1 s taken as applied, under server freezes."""
    from tests.chaos._chaos_support import FAULTED_TRIES

    victims = tmp_path / "victims.txt"
    monkeypatch.setenv(campaign.victims_env, str(victims))
    session = start_session(variant.dotted, tmp_path / "server")
    try:
        with remote_fleet(
            session, tmp_path / "hosts", env={campaign.victims_env: str(victims)}
        ) as (_, fleet):
            scenario = load_scenario(catalogue.scenario(campaign))

            def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
                name = f"run-{number - 1}"
                result = _run(session, scenario.with_seed(seed), tmp_path / name, fleet)
                return _caught(result, campaign, name)

            seeds = seeds_from(scenario.seed, FAULTED_TRIES)
            proof = run_seeds(_wanted(variant, campaign), seeds, attempt)
    finally:
        session.close()
    result = proof.value
    out = result.outdir
    where = f"report folder {out}; notes {result.counters.notes}; {proof.report()}"
    events = _harness_events(out)
    placed = _placed(events)
    assert set(placed.values()) == {f"h{i}" for i in range(HOSTS)}, placed
    if campaign.fault == "partition":
        cuts = [e for e in events if e.get("op") == "fault" and e["kind"] == "partition"]
        heals = [e for e in events if e.get("op") == "fault" and e["kind"] == "heal"]
        assert cuts and len(heals) == len(cuts), where
        per_host = scenario.workers.count // HOSTS
        for e in cuts:  # whole hosts: all the slots of every host it cut
            assert e["slots"] and len(e["slots"]) % per_host == 0, e
            assert {placed[w] for w in e["targets"]}, e
    else:
        kinds = [e["kind"] for e in events if e.get("op") == "fault"]
        assert kinds.count("pause_server") == kinds.count("resume_server") > 0, where
    proof.require()
    found = [v for v in result.violations if v.rule in campaign.rules]
    others = {v.rule for v in result.violations} - set(campaign.within or campaign.rules)
    assert not others, f"unexpected rules {others}; {where}"
    v = found[0]
    assert f"[{v.rule}]" in v.message and v.task in v.message, v.message[:400]
    assert v.workers and all(w in v.message for w in v.workers), v.message[:400]


# ---- the runner dies; a host drops --------------------------------------------------------------

_RUNNER = r"""
import sys
from pathlib import Path
from rdq_compliance.chaos.fleet_hosts import load_fleet
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.provision.process import descendants
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings

out = Path(sys.argv[2])
session = Session(Settings(backend="redis", dsn=sys.argv[3], docker=False), workdir=out / "work")
session.start()
run_campaign(load_scenario(sys.argv[1]), session=session, outdir=out / "run",
             fleet_hosts=load_fleet(Path(sys.argv[4])))
"""


def _cut_tables(hosts: ssh_hosts.SshHosts) -> list[str]:
    """The hosts on which a partition's nftables table is in place right now."""
    from rdq_compliance.chaos.faults.host_network import CUT_TABLE

    return [
        h.name
        for h in hosts.hosts
        if subprocess.run(
            ["ip", "netns", "exec", h.namespace, "nft", "list", "table", "inet", CUT_TABLE],
            capture_output=True, check=False,
        ).returncode == 0
    ]  # fmt: skip


@pytest.mark.parametrize("scenario", ["standard", "partition"])
def test_a_sigkilled_runner_leaves_no_worker_no_ssh_session_and_no_cut_on_any_host(
    redis_session, tmp_path, scenario
):
    """SIGKILLed mid-campaign (``partition``: while a host is cut off), the runner leaves
    nothing running on the hosts and no host cut off: every watchdog and every cut's
    helper reads end of file when sshd closes its channel."""
    path = STANDARD if scenario == "standard" else ROOT / "chaos" / "partition.toml"
    with remote_fleet(redis_session, tmp_path / "hosts") as (hosts, fleet):
        runner = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RUNNER,
                str(path),
                str(tmp_path),
                redis_session.server.dsn,
                fleet.source,
            ],
            env={**os.environ, "PYTHONPATH": pythonpath(os.environ.get("PYTHONPATH"))},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "runner.err").open("w"),
        )

        def working() -> dict[str, int]:
            return {
                k: sum("worker_main" in p for p in v) for k, v in host_processes(hosts).items()
            }

        def ready() -> bool:
            return all(working().values()) and (scenario == "standard" or bool(_cut_tables(hosts)))

        try:
            end = time.monotonic() + 60
            while not ready():
                assert runner.poll() is None, (tmp_path / "runner.err").read_text()[-2000:]
                if time.monotonic() > end:
                    pytest.fail(f"no moment to kill: {host_processes(hosts)}")
                time.sleep(0.1)
            if scenario == "standard":
                time.sleep(2.0)  # mid-campaign: claims held, faults under way
            before, cut = working(), _cut_tables(hosts)
            runner.send_signal(signal.SIGKILL)
            runner.wait(HANG_S)
            left = wait_no_workers(hosts, HANG_S)
            end = time.monotonic() + HANG_S
            while _cut_tables(hosts) and time.monotonic() < end:
                time.sleep(0.2)
            cut_after = _cut_tables(hosts)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
        assert sum(before.values()) >= 4, before  # the fleet, less any worker respawning
        assert left == {}, f"left on the hosts after the runner was SIGKILLed: {left}"
        assert scenario == "standard" or cut, "no host was cut off when the runner died"
        assert cut_after == [], (
            f"hosts still cut off after the runner was SIGKILLed: {cut_after} (cut when it "
            f"died: {cut}); on the hosts: {host_processes(hosts)}"
        )
    assert ssh_hosts.namespaces(os.getpid()) == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{ssh_hosts.LINK_PREFIX}{os.getpid()}m" not in links  # ours: rdqs<pid>m<i>


def test_a_host_lost_mid_campaign_is_a_fault_and_its_slots_move(redis_session, tmp_path):
    standard = load_scenario(STANDARD)  # its fleet and faults, on half its window
    scenario = replace(
        standard,
        duration=22.0,
        workload=replace(standard.workload, tasks=1000, spread=20.0),
        faults=standard.faults.replace(server_restarts=0),
    )
    with remote_fleet(redis_session, tmp_path / "hosts") as (hosts, fleet):
        doomed = hosts.hosts[1]

        harness = tmp_path / "run" / "history" / "harness.jsonl"

        def drop_host() -> None:  # down for 10 s: past the keepalives (3 s) and sshd's (6 s)
            link = ["ip", "netns", "exec", doomed.namespace, "ip", "link", "set"]
            end = time.monotonic() + 120
            while time.monotonic() < end:  # the whole fleet up, then 3 s into the faults
                if harness.exists() and len(_placed(list(read_journal(harness)))) >= 8:
                    break
                time.sleep(0.2)
            time.sleep(3.0)
            subprocess.run([*link, ssh_hosts.HOST_LINK, "down"], check=True)
            time.sleep(10.0)
            subprocess.run([*link, ssh_hosts.HOST_LINK, "up"], check=True)

        threading.Thread(target=drop_host, daemon=True).start()
        result = _run(redis_session, scenario, tmp_path / "run", fleet)
        left = wait_no_workers(hosts, HANG_S)
    events = _harness_events(tmp_path / "run")
    lost = [e for e in events if e.get("op") == "fault" and e["kind"] == "host-lost"]
    assert [e["target"] for e in lost] == [doomed.name], lost
    placed = [
        (e["t"], e["host"]) for e in events if e.get("op") == "host" and e["kind"] == "placed"
    ]
    after = [h for t, h in placed if t > lost[0]["t"]]
    assert after and doomed.name not in after, placed
    assert result.checked, result.checker_error
    assert any(f"host {doomed.name} was lost" in n for n in result.counters.notes)
    assert left == {}, left
    # the host answered again by the end: its workers' journals were fetched whole, so
    # the history is complete and the correct backend passes
    assert not any("did not answer again" in n for n in result.counters.notes)
    assert result.violations == [], [str(v)[:300] for v in result.violations]
    assert result.drained, result.counters.notes
