"""The node recipe's steps: shellcheck-clean, and idempotent — each one's "already satisfied"
branch runs against fake tools at the PATH boundary, and a pre-baked node runs no installer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = ROOT / "images" / "steps"
SCRIPTS = sorted(STEPS.glob("*.sh"))
INSTALLERS = ("apt-get", "curl", "dpkg", "modprobe", "docker", "efa_installer.sh", "gpg")
DRIVER = "580.126.09"


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    r = subprocess.run(["shellcheck", "-x", script.name], cwd=STEPS, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def fake(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def node(tmp_path):
    """A pre-baked GPU node in a temp root: tools answer as on a ready p4d; installers record."""
    root, bindir, calls = tmp_path / "root", tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    calls.write_text("")
    for name in INSTALLERS:
        fake(bindir, name, f'echo "{name} $*" >> {calls}')
    fake(
        bindir,
        "nvidia-smi",
        f'case "$*" in *driver_version*) for i in 0 1; do echo {DRIVER}; done ;;'
        " *persistence_mode*) echo Enabled; echo Enabled ;; esac",
    )
    fake(bindir, "nv-fabricmanager", f'echo "Fabric Manager version is : {DRIVER}"')
    fake(bindir, "systemctl", 'case "$1" in is-active) echo active ;; esac; exit 0')
    fake(bindir, "nvidia-ctk", 'echo "NVIDIA Container Toolkit CLI version 1.20.1"')
    fake(bindir, "fi_info", 'echo "libfabric: 2.1.0"; exit 0')
    fake(bindir, "dpkg-query", 'echo "install ok installed"')
    fake(bindir, "lsmod", 'echo "nvidia_peermem 16384 0"')
    (root / "etc/gpufleet").mkdir(parents=True)
    (root / "etc/gpufleet/env").write_text(
        "GPUFLEET_CLUSTER=t\nGPUFLEET_NODE=node-0\nGPUFLEET_GPUS=8\nGPUFLEET_NVSWITCH=1\n"
        f"GPUFLEET_FABRIC=efa\nGPUFLEET_DRIVER_VERSION={DRIVER}\nGPUFLEET_FABRIC_MANAGER={DRIVER}\n"
        "GPUFLEET_CONTAINER_TOOLKIT=1.20.1\nGPUFLEET_EFA_INSTALLER=1.47.0\n"
        "GPUFLEET_VERSION_SET=aws-2026-11\nGPUFLEET_EXPIRES_AT=1900000000\n"
    )
    (root / "etc/gpufleet/nccl.env").write_text("FI_PROVIDER=efa\nNCCL_DEBUG=WARN\n")
    (root / "etc/docker").mkdir(parents=True)
    (root / "etc/docker/daemon.json").write_text('{"runtimes": {"nvidia": {}}}')
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "GPUFLEET_ROOT": str(root),
        "HOME": str(tmp_path),
    }
    return {"root": root, "bin": bindir, "calls": calls, "env": env}


def run_step(node, name: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(STEPS / name)], env=node["env"], capture_output=True, text=True, timeout=60
    )


def bake(node) -> None:
    """What a first run leaves behind: the NCCL files and the TTL timer."""
    for name in ("50-nccl-env.sh", "60-ttl.sh"):
        assert run_step(node, name).returncode == 0


@pytest.mark.parametrize(
    "step",
    ["00-base.sh", "10-driver.sh", "20-fabricmanager.sh", "30-container.sh", "40-fabric.sh",
     "50-nccl-env.sh", "60-ttl.sh"],
)  # fmt: skip
def test_each_step_is_satisfied_on_a_baked_node(node, step):
    bake(node)
    node["calls"].write_text("")
    r = run_step(node, step)
    assert r.returncode == 0, r.stderr
    assert "already satisfied" in r.stdout, r.stdout
    assert node["calls"].read_text() == ""


def test_whole_recipe_on_a_baked_node_runs_no_installer(node):
    bake(node)
    node["calls"].write_text("")
    r = subprocess.run(
        ["bash", str(STEPS / "run-steps.sh")], env=node["env"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert node["calls"].read_text() == ""
    ready = json.loads((node["root"] / "var/lib/gpufleet/ready.json").read_text())
    assert ready["driver"] == DRIVER and ready["fabric_manager"] == DRIVER
    assert ready["container_toolkit"] == "1.20.1" and ready["version_set"] == "aws-2026-11"
    assert [s["result"] for s in ready["steps"]] == ["satisfied"] * 7
    assert all(isinstance(s["seconds"], float | int) for s in ready["steps"])


def test_missing_driver_is_installed_at_the_pinned_version(node):
    os.remove(node["bin"] / "nvidia-smi")
    (node["root"] / "var/lib/gpufleet").mkdir(parents=True)
    fake(node["bin"], "lspci", "echo 'NVIDIA Corporation GA100 [A100 SXM4 40GB]'")
    r = run_step(node, "10-driver.sh")
    assert r.returncode == 0, r.stderr
    calls = node["calls"].read_text()
    assert f"apt-get install -y -q nvidia-driver-pinning-{DRIVER}" in calls
    assert "apt-get install -y -q nvidia-open" in calls


def test_wrong_fabric_manager_version_is_replaced(node):
    fake(node["bin"], "nv-fabricmanager", 'echo "Fabric Manager version is : 570.1.2"')
    r = run_step(node, "20-fabricmanager.sh")
    assert r.returncode == 0, r.stderr
    assert f"apt-get install -y -q nvidia-fabricmanager={DRIVER}-1" in node["calls"].read_text()


def test_cpu_node_skips_gpu_steps(node):
    env_file = node["root"] / "etc/gpufleet/env"
    env_file.write_text(env_file.read_text().replace("GPUFLEET_GPUS=8", "GPUFLEET_GPUS=0"))
    for step in ("10-driver.sh", "20-fabricmanager.sh", "30-container.sh"):
        r = run_step(node, step)
        assert r.returncode == 0 and "skipped" in r.stdout


def test_failing_step_stops_the_runner(node):
    env_file = node["root"] / "etc/gpufleet/env"
    env_file.write_text(
        env_file.read_text().replace("GPUFLEET_FABRIC=efa", "GPUFLEET_FABRIC=infiniband")
    )
    r = subprocess.run(
        ["bash", str(STEPS / "run-steps.sh")], env=node["env"], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and "step 40-fabric failed" in r.stderr
    assert "no InfiniBand devices" in r.stdout


def test_bake_builds_no_expiry_timer_into_the_image(node):
    env_file = node["root"] / "etc/gpufleet/env"
    env_file.write_text(env_file.read_text() + "GPUFLEET_BAKE=1\n")
    r = run_step(node, "60-ttl.sh")
    assert r.returncode == 0 and "skipped: baking an image" in r.stdout
    assert not (node["root"] / "etc/systemd/system/gpufleet-ttl.timer").exists()
