"""The aws-ofi-nccl plugin's directory on the node's LD_LIBRARY_PATH, wherever the EFA
installer and the OS put it (before: only Ubuntu's lib/x86_64-linux-gnu of older installers)."""

from __future__ import annotations

import platform
import subprocess

import pytest

from tests.images.test_steps import make_node, prebake

# Read 2026-11-25:
# - aws/deep-learning-containers EFA tests and sanity scripts: "EFA >= 1.44 installs
#   libnccl-net-ofi.so under lib64; older installers use the arch subdir"
#   (/opt/amazon/ofi-nccl/lib/<arch>-linux-gnu/libnccl-net.so);
# - the aws-ofi-nccl INSTALL notes and ParallelCluster/DLAMI builds that configure it with
#   --prefix=/opt/aws-ofi-nccl (plugin in /opt/aws-ofi-nccl/lib), and RPM layouts (Amazon
#   Linux, RHEL) without the Debian multiarch subdirectory (/opt/amazon/ofi-nccl/lib).
ARCH = platform.machine()
SOURCE_LAYOUTS = {
    "efa-installer-1.44+": "/opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so",
    "older-ubuntu": f"/opt/amazon/ofi-nccl/lib/{ARCH}-linux-gnu/libnccl-net.so",
    "older-amazon-linux": "/opt/amazon/ofi-nccl/lib/libnccl-net.so",
    "dlami-source-build": "/opt/aws-ofi-nccl/lib/libnccl-net.so",
}


@pytest.mark.parametrize("layout", sorted(SOURCE_LAYOUTS))
def test_the_plugins_directory_is_on_the_library_path(tmp_path, layout):
    plugin = SOURCE_LAYOUTS[layout]
    node = prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))
    node.put(plugin.lstrip("/"))
    r = node.run("50-nccl-env.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    profile = node.root / "etc/profile.d/gpufleet-nccl.sh"
    r = subprocess.run(
        ["bash", "-c", f'LD_LIBRARY_PATH=/x; . {profile}; echo "$LD_LIBRARY_PATH"'],
        capture_output=True,
        text=True,
    )
    dirs = r.stdout.strip().split(":")
    assert plugin.rsplit("/", 1)[0] in dirs and dirs[-1] == "/x"
