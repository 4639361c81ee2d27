"""A node whose host key is not the pinned one is refused, by gpufleet and by OpenSSH."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.sshkeys import generate_ed25519
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = requires_sshd


def _swap_host_key(info, node_index: int) -> None:
    """Pin a different key for one node in known_hosts (as if the node had been replaced)."""
    kh = Path(info.known_hosts_path)
    other = " ".join(generate_ed25519().public_openssh.split()[:2])
    lines = kh.read_text().splitlines()
    host = lines[node_index].split()[0]
    lines[node_index] = f"{host} {other}"
    kh.write_text("\n".join(lines) + "\n")


def test_mismatched_host_key_is_refused(make_sandbox, gpufleet_home, tmp_path):
    info = make_sandbox("t", 2)
    _swap_host_key(info, 1)
    r = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert r.returncode == 3
    assert "node-1" in r.stderr and "known_hosts pins" in r.stderr and "refused" in r.stderr
    assert "Traceback" not in r.stderr

    cfg = tmp_path / "cfg"
    cfg.write_text(gpufleet(gpufleet_home, "ssh-config", "t").stdout)
    out = subprocess.run(
        ["ssh", "-F", str(cfg), "t-node-1", "true"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode != 0
    assert "HOST IDENTIFICATION HAS CHANGED" in out.stderr or "verification failed" in out.stderr


def test_unpinned_node_is_refused(make_sandbox, gpufleet_home):
    info = make_sandbox("t", 2)
    kh = Path(info.known_hosts_path)
    kh.write_text(kh.read_text().splitlines()[0] + "\n")  # node-1 not pinned at all
    r = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert r.returncode == 3
    assert "node-1" in r.stderr and "no key" in r.stderr
