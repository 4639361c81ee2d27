"""One `Include` line reaches every sandbox cluster with plain OpenSSH; `down` removes it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpufleet.remote import sshconfig
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = [
    requires_sshd,
    pytest.mark.sandbox,
    pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed"),
]


def ssh(cfg, host: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", str(cfg), host, "echo", "$GPUFLEET_NODE"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_include_line_reaches_two_clusters_and_down_removes_one(gpufleet_home, tmp_path):
    user_config = tmp_path / "config"  # stands in for ~/.ssh/config
    r = gpufleet(gpufleet_home, "ssh-config", "--include")
    assert r.stdout.strip() == sshconfig.include_line(gpufleet_home)
    user_config.write_text(r.stdout)
    try:
        for name in ("ta", "tb"):
            r = gpufleet(gpufleet_home, "up", "--nodes", "2", "--name", name)
            assert r.returncode == 0, r.stderr
        assert ssh(user_config, "ta-node-1").stdout.strip() == "node-1"
        assert ssh(user_config, "tb").stdout.strip() == "node-0"  # the head's short name
        r = gpufleet(gpufleet_home, "down", "ta")
        assert r.returncode == 0, r.stderr
        assert not (gpufleet_home / "clusters" / "ta" / sshconfig.FILE).exists()
        assert ssh(user_config, "ta-node-1").returncode == 255  # no stale entry to follow
        assert ssh(user_config, "tb-node-1").stdout.strip() == "node-1"
    finally:
        for name in ("ta", "tb"):
            if (gpufleet_home / "clusters" / name).exists():
                gpufleet(gpufleet_home, "down", name)
