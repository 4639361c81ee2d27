"""`--cloud ssh` against three sshd "machines" started by hand, as a user's own hosts are."""

from __future__ import annotations

import getpass
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.provision.localprocs import _descendants, folder_processes, terminate
from gpufleet.provision.localsshd import _write, find_sshd, free_port, pick_addresses, sshd_config
from gpufleet.provision.ssh import fingerprint
from gpufleet.remote.sshkeys import generate_ed25519
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = [requires_sshd, pytest.mark.sandbox]
MARK = "byo-hosts"  # sessions on these hosts carry GPUFLEET_SANDBOX=byo-hosts


class Hosts:
    def __init__(self, root: Path):
        self.root = root
        self.key = root / "id_ed25519"
        self.procs: list[subprocess.Popen] = []
        self.addrs: list[tuple[str, int]] = []
        self.host_keys: list[str] = []
        self.workdirs: list[Path] = []

    def spec(self, user: bool = True) -> str:
        who = f"{getpass.getuser()}@" if user else ""
        return ",".join(f"{who}{a}:{p}" for a, p in self.addrs)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    """Three sshd on loopback with their own host keys, one authorized user key; stopped at
    the end by PID (their sessions too), whatever the test did."""
    h = Hosts(tmp_path)
    user_key = generate_ed25519("byo")
    _write(h.key, user_key.private_openssh)
    _write(tmp_path / "authorized_keys", user_key.public_openssh + "\n", 0o644)
    try:
        for i, addr in enumerate(pick_addresses(3)):
            d = tmp_path / f"host{i}"
            host = generate_ed25519(f"host{i}")
            _write(d / "ssh_host_ed25519_key", host.private_openssh)
            port = free_port(addr)
            conf = sshd_config(addr=addr, port=port, node_dir=d, cluster_dir=tmp_path,
                               user=getpass.getuser(), cluster=MARK, node=f"host{i}")  # fmt: skip
            _write(d / "sshd_config", conf, 0o644)
            h.procs.append(
                subprocess.Popen(
                    [find_sshd(), "-D", "-e", "-f", str(d / "sshd_config")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            )
            h.addrs.append((addr, port))
            h.host_keys.append(" ".join(host.public_openssh.split()[:2]))
            (d / "work").mkdir()
            (d / "tmp").mkdir()
            h.workdirs.append(d / "work")
        yield h
    finally:
        # their sessions are the listeners' descendants (sandbox_processes(MARK) looks under
        # $GPUFLEET_HOME and cannot see them); a holder `exec` left goes with the home
        listeners = [p.pid for p in h.procs]
        sessions = [pid for lst in listeners for pid in _descendants(lst)]
        terminate(sorted(set(sessions) | set(folder_processes(tmp_path))) + listeners)
        for p in h.procs:
            p.wait(timeout=10)


def _wait_listening(h: Hosts) -> None:
    import socket
    import time

    deadline = time.monotonic() + 10
    for addr, port in h.addrs:
        while True:
            try:
                socket.create_connection((addr, port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{addr}:{port} never listened"
                time.sleep(0.05)


def test_unpinned_hosts_are_refused_before_anything_is_recorded(hosts, gpufleet_home):
    _wait_listening(hosts)
    r = gpufleet(gpufleet_home, "up", "--cloud", "ssh", "--name", "mine",
                 "--hosts", hosts.spec(), "--ssh-key", str(hosts.key))  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "no pinned host key" in r.stderr and "--accept-host-keys" in r.stderr
    assert not (gpufleet_home / "clusters" / "mine").exists()


def test_accepted_keys_are_printed_used_and_down_leaves_the_hosts_alone(hosts, gpufleet_home):
    _wait_listening(hosts)
    r = gpufleet(gpufleet_home, "up", "--cloud", "ssh", "--name", "mine", "--hosts",
                 hosts.spec(), "--ssh-key", str(hosts.key), "--accept-host-keys")  # fmt: skip
    assert r.returncode == 0, r.stderr
    for i, key in enumerate(hosts.host_keys):  # the fingerprints OpenSSH would show
        assert f"node-{i} {hosts.addrs[i][0]}:{hosts.addrs[i][1]} host key {fingerprint(key)}" in (
            r.stderr
        )
    r = gpufleet(gpufleet_home, "exec", "mine", "--", "echo $GPUFLEET_NODE")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:3]) == [
        "[node-0] host0",
        "[node-1] host1",
        "[node-2] host2",
    ]
    cfg = gpufleet_home / "clusters" / "mine" / "ssh_config"
    r = subprocess.run(["ssh", "-F", str(cfg), "mine-node-2", "echo", "$GPUFLEET_NODE"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.stdout.strip() == "host2", r.stderr  # plain OpenSSH, pinned key, alias w/ port
    marker = hosts.root / "host1" / "work" / "kept"
    marker.write_text("mine")
    r = gpufleet(gpufleet_home, "down", "mine")
    assert r.returncode == 0, r.stderr
    assert not (gpufleet_home / "clusters" / "mine").exists()  # forgotten, ssh_config too
    assert hosts.alive() and marker.read_text() == "mine"  # nothing on the hosts changed


def test_inventory_pins_keys_and_a_wrong_key_is_refused(hosts, gpufleet_home, tmp_path):
    import yaml

    _wait_listening(hosts)
    entries = [
        {"address": a, "port": p, "host_key": k, "workdir": str(w), "gpus": 0}
        for (a, p), k, w in zip(hosts.addrs, hosts.host_keys, hosts.workdirs, strict=True)
    ]
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"user": getpass.getuser(), "key": str(hosts.key),
                                   "hosts": entries}))  # fmt: skip
    r = gpufleet(gpufleet_home, "up", "--cloud", "ssh", "--name", "inv", "--inventory", str(inv))
    assert r.returncode == 0, r.stderr
    assert "accepted" not in r.stderr  # pinned: nothing fetched
    r = gpufleet(gpufleet_home, "exec", "inv", "--", "pwd")
    assert sorted(r.stdout.split("\n")[:3]) == [
        f"[node-{i}] {w}" for i, w in enumerate(hosts.workdirs)
    ]
    assert gpufleet(gpufleet_home, "down", "inv").returncode == 0
    job = tmp_path / "job"
    job.mkdir()
    (job / "hello.sh").write_text('echo "hello from $GPUFLEET_NODE rank $GPUFLEET_NODE_RANK"\n')
    r = gpufleet(gpufleet_home, "run", "--cloud", "ssh", "--inventory", str(inv), "--name", "once",
                 "--workdir", str(job), "--launcher", "none", "--", "sh", "hello.sh")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(ln for ln in r.stdout.splitlines() if "hello" in ln) == [
        f"[node-{i}] hello from host{i} rank {i}" for i in range(3)
    ]
    assert not (gpufleet_home / "clusters" / "once").exists() and hosts.alive()

    entries[1]["host_key"] = hosts.host_keys[0]  # host1 pinned with host0's key
    inv.write_text(yaml.safe_dump({"user": getpass.getuser(), "key": str(hosts.key),
                                   "hosts": entries}))  # fmt: skip
    r = gpufleet(gpufleet_home, "up", "--cloud", "ssh", "--name", "bad", "--inventory", str(inv))
    assert r.returncode == 3, r.stderr
    assert "node-1" in r.stderr and "host key" in r.stderr
    assert not (gpufleet_home / "clusters" / "bad").exists()
    assert hosts.alive()


def _tree(root: Path, skip: set[Path]) -> dict[str, str]:
    """path -> sha256 of every file under root (a folder: 'dir'), but the paths in `skip` and
    sshd's own logs (each login adds a line: sshd writes them, not the run)."""
    import hashlib

    out = {}
    for p in sorted(root.rglob("*")):
        if any(p == s or s in p.parents for s in skip) or p.name == "sshd.log":
            continue
        out[str(p.relative_to(root))] = (
            hashlib.sha256(p.read_bytes()).hexdigest()[:12] if p.is_file() else "dir"
        )
    return out


def _ssh_clients(folder: Path) -> list[str]:
    """OpenSSH clients (not sshd) whose command line names `folder`."""
    out = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln.startswith("ssh ") and f"{folder}/" in ln]


def test_a_one_shot_run_on_a_clusters_nodes_leaves_that_cluster_alone(gpufleet_home, tmp_path):
    """Issue 17: `run --cloud ssh` against the nodes of a cluster made with `up` wrote a lease
    into each node's state folder; that cluster's own watchdog then removed it when the
    lease lapsed (28 s later with GPUFLEET_LEASE_S=20). A one-shot run on hosts gpufleet did
    not create writes nothing outside its workdir, and the cluster outlives the lease."""
    import json
    import sys
    import time

    import yaml

    from gpufleet.core import state
    from tests.integration.conftest import ROOT, cli_env, leftovers, run_in_session, sshd_of

    lease_s, watch_s = 20, 2.0  # the sandbox watchdog looks every 2 s (localwatchdog.WATCH_EVERY_S)
    try:
        r = gpufleet(gpufleet_home, "up", "--cloud", "local", "--name", "lab", "--nodes", "2")
        assert r.returncode == 0, r.stderr
        lab = state.load("lab")
        cdir = state.cluster_dir("lab")
        runs = {cdir / "nodes" / n.name / "byo-run" for n in lab.nodes}
        inv = tmp_path / "hosts.yaml"
        hosts = [
            {"address": n.private_ip, "port": n.ssh_port, "host_key": n.host_key,
             "workdir": str(cdir / "nodes" / n.name / "byo-run")}
            for n in lab.nodes
        ]  # fmt: skip
        inv.write_text(yaml.safe_dump({"user": getpass.getuser(), "key": lab.ssh_key_path,
                                       "hosts": hosts}))  # fmt: skip
        job = tmp_path / "job"
        job.mkdir()
        (job / "hello.sh").write_text('echo "hello from rank $GPUFLEET_NODE_RANK"\n')
        before = _tree(cdir, runs)

        env = {**cli_env(gpufleet_home), "GPUFLEET_LEASE_S": str(lease_s)}
        argv = [sys.executable, "-m", "gpufleet", "run", "--cloud", "ssh", "--inventory",
                str(inv), "--name", "once", "--workdir", str(job), "--launcher", "none",
                "--", "sh", "hello.sh"]  # fmt: skip
        r = run_in_session(argv, timeout=120, env=env, cwd=ROOT)
        ran_until = time.time()
        assert r.returncode == 0, r.stderr
        assert sorted(ln for ln in r.stdout.splitlines() if "hello" in ln) == [
            "[node-0] hello from rank 0",
            "[node-1] hello from rank 1",
        ]
        assert all((d / "hello.sh").is_file() for d in runs)  # it did use the nodes
        assert "nothing on them was changed outside their workdirs" in r.stderr
        # what the sync handed the head (a copy of the user's key) went with the run, and the
        # head's connections to the workers with it
        assert not any((d / ".gpufleet" / "ssh").exists() for d in runs)
        assert _ssh_clients(cdir) == []
        after_run = _tree(cdir, runs)
        print(f"\nlab's folder before the run: {json.dumps(before, indent=1)}")
        print(f"after the run: {'the same' if after_run == before else after_run}")

        # Past any lease that run could have written, and a few watchdog rounds more.
        until = ran_until + lease_s + 3 * watch_s
        while time.time() < until and len(sshd_of(gpufleet_home, "lab")) == 2:
            time.sleep(0.5)
        assert len(sshd_of(gpufleet_home, "lab")) == 2  # its sshds outlived the lease
        assert not any((cdir / "nodes" / n.name / "expired").exists() for n in lab.nodes)
        r = gpufleet(gpufleet_home, "status", "lab", "--json")
        assert r.returncode == 0, r.stderr
        assert r.stdout.count('"running"') >= 2, r.stdout
        assert after_run == before  # no lease, nothing outside the run's workdir
        assert _tree(cdir, runs) == before
    finally:
        if state.exists("lab"):
            assert gpufleet(gpufleet_home, "down", "lab").returncode == 0
        assert not sshd_of(gpufleet_home, "lab") and not leftovers("lab")


def _commands(root: Path, argv: list[str]) -> list[int]:
    """PIDs running `argv` in a session of the hosts under `root` (wherever re-parented)."""
    mark = f"GPUFLEET_STATE_DIR={root}/".encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")[:-1]
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd == [a.encode() for a in argv] and any(e.startswith(mark) for e in env):
            found.append(int(p.name))
    return found


def test_kill_9_of_a_byo_run_leaves_no_command_running_on_the_hosts(hosts, gpufleet_home):
    """No lease on hosts the user has, so nothing there removes a dead CLI's work: its
    commands end with their SSH sessions (sshd alone leaves them running, re-parented)."""
    import os
    import signal
    import time

    import yaml

    from tests.faults.sandbox import start_run

    _wait_listening(hosts)
    entries = [
        {"address": a, "port": p, "host_key": k, "workdir": str(w)}
        for (a, p), k, w in zip(hosts.addrs, hosts.host_keys, hosts.workdirs, strict=True)
    ]
    inv = hosts.root / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"user": getpass.getuser(), "key": str(hosts.key),
                                   "hosts": entries}))  # fmt: skip
    job = hosts.root / "job"
    job.mkdir()
    sleep = ["sleep", "317"]
    args = ["--cloud", "ssh", "--inventory", str(inv), "--name", "k9", "--workdir", str(job)]
    try:
        with start_run(gpufleet_home, *args, "--launcher", "none", "--", *sleep) as run:
            assert run.wait_for("launching none"), "".join(run.lines)
            deadline = time.monotonic() + 30
            while len(_commands(hosts.root, sleep)) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(_commands(hosts.root, sleep)) == 3
            os.kill(run.proc.pid, signal.SIGKILL)  # the CLI alone, as the OOM killer would
            run.finish()
        deadline = time.monotonic() + 30  # sshd notices at once; the watchers poll each second
        while _commands(hosts.root, sleep) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _commands(hosts.root, sleep) == []
        assert hosts.alive()
    finally:
        for pid in _commands(hosts.root, sleep):
            os.kill(pid, signal.SIGKILL)
