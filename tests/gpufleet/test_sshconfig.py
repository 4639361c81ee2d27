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
@pytest.mark.parametrize("alias", ["node-1", "t-node-1", "10.0.0.11"])
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
