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


# aws/aws-ofi-nccl PR #808 "dist: Change default library to libnccl-net-ofi.so" (merged
# 2025-03-14, read 2026-11-25): the plugin is built as libnccl-net-ofi.so with a libnccl-net.so
# link beside it. NCCL environment variables, NCCL_NET_PLUGIN (docs.nvidia.com/deeplearning/
# nccl/user-guide/docs/env.html, read 2026-11-25): NCCL loads libnccl-net-<value>.so for a
# suffix. NGC PyTorch images set NCCL_NET_PLUGIN=spcx (NVIDIA-NeMo/Megatron-Bridge PR #5033,
# read 2026-11-25), so without our own value NCCL would not load the EFA plugin.
SOURCE_OFI_NAME = {"library": "libnccl-net-ofi.so", "link": "libnccl-net.so", "suffix": "ofi"}


def _profile_env(node, name: str) -> str:
    profile = node.root / "etc/profile.d/gpufleet-nccl.sh"
    r = subprocess.run(
        ["bash", "-c", f'NCCL_NET_PLUGIN=spcx; . {profile}; echo "${name}"'],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip()


@pytest.mark.parametrize("lib", ["lib64", "lib/x86_64-linux-gnu"])  # uname -m: x86_64
def test_a_plugin_named_ofi_is_selected_by_name(tmp_path, lib):
    node = prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))
    d = f"opt/amazon/ofi-nccl/{lib}"
    node.put(f"{d}/{SOURCE_OFI_NAME['library']}")
    node.put(f"{d}/{SOURCE_OFI_NAME['link']}")
    r = node.run("50-nccl-env.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _profile_env(node, "NCCL_NET_PLUGIN") == SOURCE_OFI_NAME["suffix"]
    conf = (node.root / "etc/nccl.conf").read_text().splitlines()
    assert f"NCCL_NET_PLUGIN={SOURCE_OFI_NAME['suffix']}" in conf


def test_an_older_plugin_without_the_ofi_name_is_not_asked_for_by_it(tmp_path):
    """Before PR #808 only libnccl-net.so exists: NCCL_NET_PLUGIN=ofi would name nothing."""
    node = prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))
    node.put(f"opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/{SOURCE_OFI_NAME['link']}")
    r = node.run("50-nccl-env.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NCCL_NET_PLUGIN" not in (node.root / "etc/nccl.conf").read_text()


# aws-ofi-nccl's install directory on an arm64 (Graviton) node: the Debian multiarch directory
# is lib/aarch64-linux-gnu (awslabs/awsome-distributed-ai PR #935, read 2026-11-25: "For
# ARM(GB200) this path is probably different"; Debian multiarch tuple aarch64-linux-gnu).
SOURCE_ARCH_DIRS = {
    "x86_64": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
    "aarch64": "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu",
    "lib64": "/opt/amazon/ofi-nccl/lib64",
}


def test_the_launchers_library_path_covers_both_architectures():
    from gpufleet.components.fabric import library_paths

    paths = library_paths("efa")
    assert all(d in paths for d in SOURCE_ARCH_DIRS.values()), paths
