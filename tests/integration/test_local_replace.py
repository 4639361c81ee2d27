"""LocalProvisioner.replace on a real sandbox: only node-1 is new (sshd, host key, port, empty
disk), its old sshd and sessions are gone, the record, pids and known_hosts say the new one."""

from __future__ import annotations

from gpufleet.core import state
from gpufleet.provision.local import LocalProvisioner
from gpufleet.provision.localprocs import _alive, sandbox_processes
from gpufleet.provision.localwatchdog import recorded_pids
from gpufleet.remote import Group
from tests.integration.conftest import requires_sshd

pytestmark = requires_sshd


def test_replace_makes_a_new_node_1_and_leaves_nothing_of_the_old(make_sandbox):
    info = make_sandbox("rep", nodes=3)
    with Group(info) as g:
        g.run("echo old > marker; (sleep 300 &) ; true")  # a session process left behind
    old_pids = dict(info.provider["pids"])
    assert sandbox_processes("rep", "node-1")
    lines: list[str] = []
    new = LocalProvisioner().replace(info, ["node-1"], lines.append)
    assert [n.name for n in new.nodes] == ["node-0", "node-1", "node-2"]
    old1, new1 = info.node("node-1"), new.node("node-1")
    assert new1.private_ip == old1.private_ip and new1.host_key != old1.host_key
    assert new.node("node-0") == info.node("node-0") and new.node("node-2") == info.node("node-2")
    pids = new.provider["pids"]
    assert pids["node-0"] == old_pids["node-0"] and pids["node-1"] != old_pids["node-1"]
    assert not _alive(old_pids["node-1"]) and not sandbox_processes("rep", "node-1")
    assert state.load("rep").provider["pids"] == pids  # saved: down and the watchdog see it
    assert recorded_pids(state.cluster_dir("rep"))["node-1"] == pids["node-1"]
    assert new1.host_key in (state.cluster_dir("rep") / "known_hosts").read_text()
    assert LocalProvisioner().status(new) == dict.fromkeys(
        ["node-0", "node-1", "node-2"], "running"
    )
    with Group(new) as g:
        out = g.run("cat marker 2>/dev/null || echo none", check=False)
    assert {n: r.stdout.strip() for n, r in out.items()} == {
        "node-0": "old",
        "node-1": "none",  # a new machine's empty disk
        "node-2": "old",
    }
    assert any(ln.startswith("replaced node-1 in ") for ln in lines), lines
