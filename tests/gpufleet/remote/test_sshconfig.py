"""The ssh-config snippet, read back by OpenSSH itself (`ssh -G`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.remote import sshconfig


def info(public_workers: bool = True) -> ClusterInfo:
    return ClusterInfo(
        name="t",
        cloud="aws",
        ssh_user="ubuntu",
        ssh_key_path="/k/id_ed25519",
        known_hosts_path="/k/known_hosts",
        nodes=[
            NodeInfo(name="node-0", private_ip="10.0.0.10", public_ip="203.0.113.10", gpus=8),
            NodeInfo(
                name="node-1",
                private_ip="10.0.0.11",
                public_ip="203.0.113.11" if public_workers else None,
                gpus=8,
            ),
        ],
    )


def test_golden(golden):
    golden("sshconfig/aws-2.conf", sshconfig.render(info()))


def test_golden_workers_through_the_head(golden):
    golden("sshconfig/aws-2-jump.conf", sshconfig.render(info(public_workers=False)))


@pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")
@pytest.mark.parametrize("alias", ["t-node-1"])
def test_openssh_jumps_through_the_head_to_a_worker_without_a_public_address(tmp_path, alias):
    cfg = tmp_path / "cfg"
    cfg.write_text(sshconfig.render(info(public_workers=False)))

    def resolved(host: str) -> dict[str, str]:
        out = subprocess.run(
            ["ssh", "-G", "-F", str(cfg), host], capture_output=True, text=True, check=True
        ).stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)

    worker = resolved(alias)
    assert worker["hostname"] == "10.0.0.11" and worker["proxyjump"] == "t-node-0"
    assert worker["stricthostkeychecking"] == "true"
    head = resolved(worker["proxyjump"])  # the jump host is the pinned head entry
    assert head["hostname"] == "203.0.113.10" and "proxyjump" not in head
    assert head["userknownhostsfile"] == "/k/known_hosts"


@pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")
@pytest.mark.parametrize("alias", ["t-node-1"])
def test_openssh_resolves_names_and_private_addresses(tmp_path, alias):
    cfg = tmp_path / "cfg"
    cfg.write_text(sshconfig.render(info()))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(cfg), alias], capture_output=True, text=True, check=True
    ).stdout
    opts = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert opts["hostname"] == "203.0.113.11"
    assert opts["user"] == "ubuntu"
    assert opts["stricthostkeychecking"] == "true"
    assert opts["userknownhostsfile"] == "/k/known_hosts"
    assert opts["identityfile"] == "/k/id_ed25519"


@pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")
def test_two_clusters_included_side_by_side_do_not_collide(tmp_path):
    """OpenSSH takes the first value of each option over all matching Host blocks, so two
    clusters that both defined `Host node-0` made the second unreachable by that name."""
    other = info().model_copy(update={"name": "u"})
    other.nodes[0] = other.nodes[0].model_copy(update={"public_ip": "198.51.100.7"})
    for c in (info(), other):
        (tmp_path / "clusters" / c.name).mkdir(parents=True)
        (tmp_path / "clusters" / c.name / sshconfig.FILE).write_text(sshconfig.render(c))
    cfg = tmp_path / "config"
    cfg.write_text(sshconfig.include_line(tmp_path) + "\n")
    got = {}
    for alias in ("t", "t-node-0", "u", "u-node-0"):
        out = subprocess.run(
            ["ssh", "-G", "-F", str(cfg), alias], capture_output=True, text=True, check=True
        ).stdout
        got[alias] = dict(ln.split(" ", 1) for ln in out.splitlines() if " " in ln)["hostname"]
    assert got == {
        "t": "203.0.113.10",
        "t-node-0": "203.0.113.10",
        "u": "198.51.100.7",
        "u-node-0": "198.51.100.7",
    }


@pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")
def test_control_persist_is_read_by_openssh(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.write_text(sshconfig.render(info(), control_persist="10m"))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(cfg), "t-node-1"], capture_output=True, text=True, check=True
    ).stdout
    opts = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert opts["controlmaster"] == "auto" and opts["controlpersist"] == "600"
    assert opts["controlpath"].startswith("/k/cm-")


def test_internal_config_goes_node_to_node_without_a_jump():
    """Launchers on the head (mpirun, pdsh) reach workers directly at their private address."""
    text = sshconfig.render(info(public_workers=False), internal=True)
    assert "ProxyJump" not in text and "HostName 10.0.0.11" in text


@pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")
def test_vm_internal_config_uses_the_private_sshd_port(tmp_path):
    """The nodes' own config (mpirun, pdsh on the head) reaches a VM worker at its private
    address on sshd's port there (22), not the port forwarded on this machine."""
    from tests.gpufleet.remote.test_head import _vm_info

    cfg = tmp_path / "cfg"
    cfg.write_text(sshconfig.render(_vm_info(), internal=True))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(cfg), "v-node-1"], capture_output=True, text=True, check=True
    ).stdout
    got = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert (got["hostname"], got["port"]) == ("10.77.0.11", "22")
    outside = tmp_path / "outside"
    outside.write_text(sshconfig.render(_vm_info()))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(outside), "v-node-1"], capture_output=True, text=True, check=True
    ).stdout
    got = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert (got["hostname"], got["port"]) == ("127.0.0.1", "40101")
