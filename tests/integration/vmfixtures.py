"""Helpers for the `--cloud vm` tests: one image cache per session, VMs always stopped."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gpufleet.components.clusterinfo import ClusterInfo


def vm_skip_reason() -> str | None:
    """Why the VM tests cannot run here, or None."""
    from gpufleet.core.errors import MissingTool

    if os.environ.get("GPUFLEET_VM_TESTS") != "1":
        # `make test` (and so CI) sets it; a bare `pytest` skips the ~25 minutes of TCG boots.
        return "VM tests run with GPUFLEET_VM_TESTS=1 (make test, make test-vm)"
    from gpufleet.provision.vmimage import require_tools

    try:
        require_tools()
    except MissingTool as e:
        return f"{e} ({e.hint})"
    if os.geteuid() != 0 and not os.environ.get("GPUFLEET_IMAGE_CACHE"):
        return "building the VM image needs root (or a prebuilt GPUFLEET_IMAGE_CACHE)"
    return None


requires_vm = pytest.mark.skipif(vm_skip_reason() is not None, reason=str(vm_skip_reason()))


def image_cache() -> Path:
    """Shared by every test of a session and across sessions (CI may cache this folder)."""
    return Path(
        os.environ.get("GPUFLEET_IMAGE_CACHE") or Path.home() / ".cache" / "gpufleet" / "images"
    )


def qemu_pids(cluster_dir: Path) -> list[int]:
    """QEMU processes running for this cluster's folder."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True)
    return [
        int(ln.split()[0])
        for ln in out.stdout.splitlines()
        if "qemu-system" in ln and str(cluster_dir) + "/" in ln
    ]


def ssh_argv(info: ClusterInfo, node: int, known_hosts: str, *command: str) -> list[str]:
    """Plain OpenSSH with gpufleet's pinned options (StrictHostKeyChecking=yes) against
    `known_hosts`."""
    from gpufleet.remote.head import key_type, ssh_options

    n = info.nodes[node]
    opts = ssh_options(info.ssh_key_path, known_hosts, n.ssh_port, key_type(n))
    return ["ssh", *opts, f"{info.ssh_user}@{n.public_ip}", *command]


def ssh(info: ClusterInfo, node: int, *command: str, timeout: float = 120):
    return subprocess.run(
        ssh_argv(info, node, info.known_hosts_path, *command),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for(predicate, timeout: float, every: float = 2.0, what: str = "condition", detail=None):
    """Poll until predicate() is truthy; its value, or an AssertionError naming `what` (and
    what detail() says: e.g. the end of the node's serial console)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            more = f"\n{detail()}" if detail else ""
            raise AssertionError(f"{what}: not reached within {timeout:.0f}s{more}")
        time.sleep(every)


def console_tail(home: Path, cluster: str, node: str, chars: int = 4000) -> str:
    """The end of a VM's serial console, which says where a boot or the recipe stopped."""
    log = home / "clusters" / cluster / "nodes" / node / "console.log"
    text = log.read_text(errors="replace") if log.exists() else "(no console.log)"
    return f"--- {log} (last {chars} chars) ---\n{text[-chars:]}"
