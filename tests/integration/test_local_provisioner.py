"""The sandbox provisioner: separate nodes, exact teardown, and the TTL watchdog."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import state
from gpufleet.core.errors import ClusterExpired
from gpufleet.provision.local import LocalProvisioner
from gpufleet.provision.localprocs import _cmdline
from gpufleet.provision.localwatchdog import start_watchdog
from tests.integration.conftest import leftovers, requires_sshd, sshd_of

pytestmark = requires_sshd


def test_nodes_have_own_address_key_and_workdir(make_sandbox):
    info = make_sandbox("t", 3)
    assert len({(n.private_ip, n.ssh_port) for n in info.nodes}) == 3
    assert len({n.host_key for n in info.nodes}) == 3
    assert len({n.workdir for n in info.nodes}) == 3
    assert all(os.path.isdir(n.workdir) for n in info.nodes)
    assert oct(os.stat(info.ssh_key_path).st_mode & 0o777) == "0o600"
    kh = Path(info.known_hosts_path).read_text()
    assert all(n.host_key in kh for n in info.nodes)


def test_each_node_has_its_own_temp_dir_as_a_cloud_node_has_its_own_tmp(make_sandbox):
    """Tools on a node put their files under $TMPDIR or /tmp, named by host: Open MPI's
    session dir is <tmpdir>/ompi.<hostname>.<uid>/jf.<jobfam>/ (opal_tmp_directory reads
    TMPDIR, orte/util/session_dir.c), with the hwloc.sm every daemon there maps. On a cloud
    each node has its own /tmp; sandbox nodes share this machine's /tmp and hostname, so each
    needs its own temp dir, or three orteds make and map the same files."""
    from gpufleet.remote import Group

    info = make_sandbox("t", 3)
    with Group(info) as g:
        out = g.run("python3 -c 'import tempfile; print(tempfile.gettempdir())'; hostname")
    dirs = {n: r.stdout.split()[0] for n, r in out.items()}
    assert len(set(dirs.values())) == 3, dirs
    assert len({r.stdout.split()[1] for r in out.values()}) == 1  # one hostname for all
    for name, d in dirs.items():
        assert Path(d).is_dir() and Path(d).parent.name == name


def test_two_clusters_do_not_share_addresses(make_sandbox):
    a = make_sandbox("a", 2)
    b = make_sandbox("b", 2)
    assert not {(n.private_ip, n.ssh_port) for n in a.nodes} & {
        (n.private_ip, n.ssh_port) for n in b.nodes
    }


def test_down_stops_only_its_own_processes(make_sandbox, gpufleet_home):
    make_sandbox("keep", 1)
    gone = make_sandbox("gone", 2)
    # a job that detached itself from its session must still be found and stopped
    from gpufleet.remote import Group

    with Group(gone) as g:
        g.run("setsid sleep 300 >/dev/null 2>&1 < /dev/null &")
    assert leftovers("gone")
    LocalProvisioner().down(gone, lambda _m: None)
    state.forget("gone")
    assert not leftovers("gone") and not sshd_of(gpufleet_home, "gone")
    assert sshd_of(gpufleet_home, "keep")


def _wait(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)
    return cond()


def test_watchdog_tears_down_at_expiry(gpufleet_home):
    """The hard expiry: the watchdog removes nodes, record and itself; extend moves it."""
    info = LocalProvisioner().up(ClusterSpec.from_input({"name": "w", "nodes": 2}), lambda m: None)
    try:
        dog = info.provider["watchdog"]
        assert "watchdog" in _cmdline(dog)
        cdir = state.cluster_dir("w")
        # the watchdog reads the hard expiry (hours away) from the cluster folder
        assert float((cdir / "expires_at").read_text()) > time.time() + 3600
        at = time.time()
        LocalProvisioner().extend(info, at)  # moved to now
        assert _wait(lambda: not state.exists("w"), 30)
        assert not sshd_of(gpufleet_home, "w") and not leftovers("w")
        assert _wait(lambda: "watchdog" not in _cmdline(dog), 10)
        # a tombstone: `status w` says it expired, and when, not "no cluster named 'w'"
        with pytest.raises(ClusterExpired) as e:
            state.load("w")
        assert abs(e.value.expired_at - at) <= 1 and "expired at" in str(e.value)
    finally:
        if state.exists("w"):
            LocalProvisioner().down(info, lambda m: None)
            state.forget("w")


def test_an_extended_node_outlives_its_creation_expiry_and_goes_at_the_new_one(gpufleet_home):
    """Shared with cloud nodes (images/ttl/gpufleet-expire): `extend` writes the new hard
    expiry into each node's own state directory over SSH, on every provider, and the node's
    expiry prefers it to the one it was created with, later or earlier."""
    from gpufleet.provision.localwatchdog import WATCH_EVERY_S
    from gpufleet.provision.nodeexpiry import write_node_expiry

    info = LocalProvisioner().up(ClusterSpec.from_input({"name": "x", "nodes": 2}), lambda m: None)
    try:
        write_node_expiry(state.load("x"), time.time() + 3600)
        (state.cluster_dir("x") / "expires_at").write_text(f"{time.time() - 1:.0f}\n")
        time.sleep(3 * WATCH_EVERY_S + 1)  # several watchdog passes past the creation expiry
        running = {"node-0": "running", "node-1": "running"}
        assert LocalProvisioner().status(state.load("x")) == running
        write_node_expiry(state.load("x"), time.time() - 1)
        assert _wait(lambda: not state.exists("x"), 30)
        assert not sshd_of(gpufleet_home, "x") and not leftovers("x")
    finally:
        if state.exists("x"):
            LocalProvisioner().down(info, lambda m: None)
            state.forget("x")


def test_lease_removes_only_the_node_whose_lease_ran_out(gpufleet_home):
    """Shared design: a node goes at min(hard expiry, lease); no lease file: the expiry alone."""
    info = LocalProvisioner().up(ClusterSpec.from_input({"name": "l", "nodes": 2}), lambda m: None)
    try:
        ndir = state.cluster_dir("l") / "nodes"
        (ndir / "node-1" / "lease").write_text(f"{time.time() - 1:.0f}\n")
        assert _wait(lambda: (ndir / "node-1" / "expired").exists(), 30)
        assert _wait(lambda: not leftovers_of_node("l", "node-1"), 10)
        assert state.exists("l")  # node-0 has no lease: only its 4 h expiry applies
        assert LocalProvisioner().status(state.load("l")) == {
            "node-0": "running",
            "node-1": "stopped",
        }
        (ndir / "node-0" / "lease").write_text(f"{time.time() - 1:.0f}\n")
        assert _wait(lambda: not state.exists("l"), 30)
        assert not sshd_of(gpufleet_home, "l")
    finally:
        if state.exists("l"):
            LocalProvisioner().down(info, lambda m: None)
            state.forget("l")


def leftovers_of_node(cluster: str, node: str) -> list[str]:
    info = state.load(cluster)
    pid = info.provider["pids"][node]
    return [str(pid)] if str(state.cluster_dir(cluster)) in _cmdline(pid) else []


def test_an_earlier_watchdog_leaves_a_newer_cluster_of_its_name_alone(gpufleet_home):
    """A watchdog left by an earlier cluster `r` must not remove the next cluster named `r`."""
    info = LocalProvisioner().up(ClusterSpec.from_input({"name": "r", "nodes": 1}), lambda m: None)
    own = info.provider["watchdog"]
    os.kill(own, signal.SIGSTOP)  # only the stray one may act while we look
    try:
        cdir = state.cluster_dir("r")
        (cdir / "expires_at").write_text(f"{time.time() - 1:.0f}\n")  # due for removal
        stray = start_watchdog("r", cdir, "uid-of-an-earlier-cluster")
        assert _wait(lambda: "watchdog" not in _cmdline(stray), 20)
        assert state.exists("r") and sshd_of(gpufleet_home, "r")
    finally:
        os.kill(own, signal.SIGCONT)
        LocalProvisioner().down(info, lambda m: None)
        state.forget("r")


def test_a_run_clusters_nodes_start_with_a_boot_lease_that_the_cli_replaces(gpufleet_home):
    """Issue 19, item 3, as on a cloud node (its bootcmd): the nodes of a cluster `run` makes
    carry a lease from the start, well before the hard expiry, so a CLI killed while the
    cluster is being made leaves it for BOOT_LEASE_MINUTES; the CLI's first write (a duration
    the node adds to its own clock) replaces it."""
    from gpufleet.jobs.run import BOOT_LEASE_MINUTES, with_boot_lease
    from gpufleet.remote import Group

    spec = with_boot_lease(ClusterSpec.from_input({"name": "b", "nodes": 2}))
    t0 = time.time()
    info = LocalProvisioner().up(spec, lambda m: None)
    try:
        ndir = state.cluster_dir("b") / "nodes"
        lease_s = BOOT_LEASE_MINUTES * 60
        for node in ("node-0", "node-1"):
            lease = float((ndir / node / "lease").read_text())
            assert t0 + lease_s - 1 <= lease <= time.time() + lease_s + 1  # whole seconds
            assert lease < float((state.cluster_dir("b") / "expires_at").read_text())
        with Group(state.load("b")) as g:
            assert g.write_lease(1) == {"node-0": None, "node-1": None}
        assert _wait(lambda: not state.exists("b"), 30)
        assert not sshd_of(gpufleet_home, "b") and not leftovers("b")
    finally:
        if state.exists("b"):
            LocalProvisioner().down(info, lambda m: None)
            state.forget("b")
