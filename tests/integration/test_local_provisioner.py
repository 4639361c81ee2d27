"""The sandbox provisioner: separate nodes, exact teardown, and the TTL watchdog."""

from __future__ import annotations

import os
import time
from pathlib import Path

from components.spec import ClusterSpec
from gpufleet import state
from gpufleet.provision.local import LocalProvisioner, _cmdline, start_watchdog
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


def test_watchdog_tears_down_at_expiry(gpufleet_home):
    info = LocalProvisioner().up(ClusterSpec.from_input({"name": "w", "nodes": 1}), lambda m: None)
    try:
        first_watchdog = info.provider["watchdog"]  # started by up() for the 4h default TTL
        start_watchdog("w", time.time() + 0.5)
        deadline = time.monotonic() + 15
        while state.exists("w") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not state.exists("w")
        assert not sshd_of(gpufleet_home, "w")
        deadline = time.monotonic() + 5  # and the first watchdog was stopped by that teardown
        while "watchdog" in _cmdline(first_watchdog) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "watchdog" not in _cmdline(first_watchdog)
    finally:
        if state.exists("w"):
            LocalProvisioner().down(info, lambda m: None)
            state.forget("w")
