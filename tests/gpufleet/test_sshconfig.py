"""The ssh-config snippet, read back by OpenSSH itself (`ssh -G`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from components.spec import ClusterInfo, NodeInfo
from gpufleet import sshconfig


def info() -> ClusterInfo:
    return ClusterInfo(
        name="t",
        cloud="aws",
        ssh_user="ubuntu",
        ssh_key_path="/k/id_ed25519",
        known_hosts_path="/k/known_hosts",
        nodes=[
            NodeInfo(name="node-0", private_ip="10.0.0.10", public_ip="203.0.113.10", gpus=8),
            NodeInfo(name="node-1", private_ip="10.0.0.11", public_ip="203.0.113.11", gpus=8),
        ],
    )


def test_golden(golden):
    golden("sshconfig/aws-2.conf", sshconfig.render(info()))


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
