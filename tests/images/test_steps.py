"""The node recipe's steps: shellcheck-clean and idempotent. Each step runs in a temp root
(GPUFLEET_ROOT) against fake tools at the PATH boundary, with the env file cloud-init really
writes; installers record their calls, so "nothing was installed" is an empty file."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init
from gpufleet.components.catalog import lookup

ROOT = Path(__file__).resolve().parents[2]
STEPS = ROOT / "images" / "steps"
SCRIPTS = sorted(STEPS.glob("*.sh"))
STEP_NAMES = [p.name for p in SCRIPTS if p.name[:2].isdigit() and p.name != "90-ready.sh"]
BOOT_ID = "5c1d2a8e-0000-4000-8000-000000000001"

# Recorded into `calls`: anything that installs, downloads or changes system state.
RECORDING = ("apt-get", "curl", "dpkg", "modprobe", "gpg", "mdadm", "mkfs.ext4", "mount")
FAKES = {
    # Knobs (files under K) say what the node has; an absent knob is an absent tool or state.
    "nvidia-smi": """d="$(cat K/driver 2>/dev/null)"; [ -n "$d" ] || exit 9
case "$*" in
  *driver_version*) echo "$d"; echo "$d" ;;
  *persistence_mode*) echo Enabled; echo Enabled ;;
  *) echo "| NVIDIA-SMI $d    Driver Version: $d    CUDA Version: 13.2 |" ;;
esac""",
    "nv-fabricmanager": """v="$(cat K/fm 2>/dev/null)"; [ -n "$v" ] || exit 127
echo "Fabric Manager version is : $v\"""",
    "nvidia-ctk": """case "$1" in
  --version) v="$(cat K/ctk 2>/dev/null)"; [ -n "$v" ] || exit 127
    echo "NVIDIA Container Toolkit CLI version $v"; echo "commit: 1a2b3c" ;;
  *) echo "nvidia-ctk $*" >> CALLS ;;
esac""",
    "dcgmi": """v="$(cat K/dcgm 2>/dev/null)"; [ -n "$v" ] || exit 127
echo "dcgmi  version: $v\"""",
    "fi_info": """[ -f K/efa ] || exit 1
case "$*" in
  *--version*) echo "fi_info: 2.1.0amzn1.0"; echo "libfabric: 2.1.0amzn1.0" ;;
  *) echo "provider: efa" ;;
esac""",
    "lsmod": """echo "Module Size Used by"
[ -f K/peermem ] && echo "nvidia_peermem 16384 0"; exit 0""",
    "systemctl": """case "$1" in
  is-active) if [ -f K/active ]; then echo active; else echo inactive; fi ;;
  is-enabled) if [ -f K/disabled ]; then exit 1; fi ;;
  *) echo "systemctl $*" >> CALLS ;;
esac
exit 0""",
    "docker": """case "$1" in
  inspect) cat K/rxdm 2>/dev/null; exit 0 ;;
  --version) echo "Docker version 27.5.1, build 9f9e405" ;;
  *) echo "docker $*" >> CALLS ;;
esac""",
    "dpkg-query": 'echo "install ok installed"',
    "mountpoint": "[ -f K/mounted ]",
    "uname": """case "$1" in
  -r) cat K/kernel 2>/dev/null || echo 5.15.0-1071-gcp ;;
  -m) echo x86_64 ;;
  *) echo Linux ;;
esac""",
    "modinfo": '[ -f K/import-helper ] && echo "name: import-helper"',
    "apt-cache": """case "$2" in
  libnccl2) for v in 2.31.2-1+cuda13.2 2.30.4-1+cuda13.0 2.29.3-1+cuda12.9; do
      echo " libnccl2 | $v | https://developer.download.nvidia.com Packages"; done ;;
  datacenter-gpu-manager-4-cuda*) for v in 1:4.7.0-1 1:4.5.2-1; do
      echo " $2 | $v | https://developer.download.nvidia.com Packages"; done ;;
esac""",
    "lspci": 'echo "00:1e.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB]"',
    # tar "extracts" an EFA installer that records its own run.
    "tar": """echo "tar $*" >> CALLS
while [ $# -gt 0 ]; do [ "$1" = -C ] && d="$2"; shift; done
mkdir -p "$d/aws-efa-installer"
f="$d/aws-efa-installer/efa_installer.sh"
printf '#!/bin/sh\\necho "efa_installer.sh $*" >> CALLS\\n' > "$f"
chmod +x "$f\"""",
}


EFA_TOOLS = ("fi_info",)


@dataclass
class Node:
    root: Path
    bin: Path
    knobs: Path
    calls: Path
    env: dict[str, str]
    node_env: dict[str, str]

    def knob(self, name: str, value: str | None = "") -> None:
        path = self.knobs / name
        if value is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(value)

    def put(self, rel: str, text: str = "") -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def set_env(self, **values: str) -> None:
        """Change /etc/gpufleet/env as a different node or version set would have it."""
        self.node_env.update(values)
        lines = "".join(f"{k}={v}\n" for k, v in self.node_env.items())
        self.put("etc/gpufleet/env", lines)

    def run(self, script: str, steps: Path = STEPS) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(steps / script)], env=self.env, capture_output=True, text=True, timeout=60
        )

    def recorded(self) -> str:
        return self.calls.read_text()

    def forget(self) -> None:
        self.calls.write_text("")


def cloud_init_files(cloud: str, instance_type: str) -> dict[str, str]:
    """The files cloud-init writes for node 0 of such a cluster."""
    fabric = lookup(cloud, instance_type).fabric if cloud != "local" else "none"
    ctx = BootstrapContext(
        "t", cloud, instance_type, 0, 2, "u", "ssh-ed25519 AAAA u", "KEY", "ssh-ed25519 BBBB h",
        fabric, 1_900_000_000,
    )  # fmt: skip
    doc = yaml.safe_load(render_cloud_init(ctx))
    return {f["path"]: f["content"] for f in doc["write_files"]}


def parse_env(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key] = value.strip("'")
    return out


def make_node(tmp_path: Path, cloud: str, instance_type: str) -> Node:
    root, bindir, knobs, calls = (tmp_path / d for d in ("root", "bin", "knobs", "calls"))
    for d in (root, bindir, knobs):
        d.mkdir()
    calls.write_text("")
    for name in RECORDING:
        (bindir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
    for name, body in FAKES.items():
        # EFA's tools live in /opt/amazon/efa/bin, which a systemd service's PATH lacks.
        where = root / "opt/amazon/efa/bin" if name in EFA_TOOLS else bindir
        where.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(
            "#!/bin/sh\n" + body.replace("K/", f"{knobs}/").replace("CALLS", str(calls)) + "\n"
        )
        (where / name).chmod(0o755)
    for p in bindir.iterdir():
        p.chmod(0o755)
    files = cloud_init_files(cloud, instance_type)
    node = Node(
        root=root,
        bin=bindir,
        knobs=knobs,
        calls=calls,
        env={"PATH": f"{bindir}:/usr/bin:/bin", "GPUFLEET_ROOT": str(root), "HOME": str(tmp_path)},
        node_env=parse_env(files["/etc/gpufleet/env"]),
    )
    for path, text in files.items():
        if not path.startswith("/opt/gpufleet/steps/"):  # the steps run from images/ itself
            node.put(path.lstrip("/"), text).chmod(0o755 if "/sbin/" in path else 0o644)
    node.put("proc/sys/kernel/random/boot_id", BOOT_ID + "\n")
    return node


def prebake(node: Node) -> Node:
    """Make the node look like a ready image for its env: every tool answers with the pins."""
    e = node.node_env
    if int(e["GPUFLEET_GPUS"]) > 0:
        node.knob("driver", e["GPUFLEET_DRIVER_VERSION"])
        node.knob("fm", e["GPUFLEET_FABRIC_MANAGER"])
        node.knob("active")
        node.knob("ctk", e["GPUFLEET_CONTAINER_TOOLKIT"])
        node.knob("dcgm", e["GPUFLEET_DCGM"])
        nccl = e["GPUFLEET_NCCL"].split("-")[0]
        node.put(f"usr/lib/x86_64-linux-gnu/libnccl.so.{nccl}")
        node.put("etc/docker/daemon.json", '{"runtimes": {"nvidia": {"path": "nvidia"}}}')
    fabric = e["GPUFLEET_FABRIC"]
    if fabric == "efa":
        node.knob("efa")
        node.put("opt/amazon/efa_installed_packages", "# EFA installer version: 1.50.0\n")
    elif fabric == "infiniband":
        node.knob("peermem")
        for i in range(8):
            node.put(f"sys/class/infiniband/mlx5_ib{i}/ports/1/link_layer", "InfiniBand\n")
        node.put("sys/class/infiniband/mlx5_an0/ports/1/link_layer", "Ethernet\n")
    elif fabric in ("tcpx", "tcpxo"):
        node.knob("kernel", "6.8.0-1015-gcp-tcpx")  # what a TCPX-ready image runs
        node.knob("import-helper")
        node.put(f"var/lib/{fabric}/lib64/libnccl-net.so")
        node.knob("rxdm", "true\n")
    # What the first boot left behind: NCCL files and the TTL timer.
    for step in ("50-nccl-env.sh", "60-ttl.sh"):
        r = node.run(step)
        assert r.returncode == 0, r.stdout + r.stderr
    node.forget()
    return node


NODES = {
    "aws-p4d": ("aws", "p4d.24xlarge"),
    "aws-g5": ("aws", "g5.12xlarge"),
    "azure-nd": ("azure", "Standard_ND96asr_v4"),
    "gcp-a3-tcpx": ("gcp", "a3-highgpu-8g"),
    "gcp-a3-tcpxo": ("gcp", "a3-megagpu-8g"),
    "gcp-a2": ("gcp", "a2-highgpu-8g"),
    "local": ("local", "local"),
}


@pytest.fixture
def p4d(tmp_path) -> Node:
    return prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))


# --- static checks -----------------------------------------------------------------------


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    r = subprocess.run(["shellcheck", "-x", script.name], cwd=STEPS, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_script_is_strict_bash(script):
    lines = script.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines[:8]


# --- "already satisfied": a ready node runs no installer ------------------------------------


@pytest.mark.parametrize("step", STEP_NAMES)
def test_each_step_is_satisfied_on_a_ready_p4d(p4d, step):
    r = p4d.run(step)
    assert r.returncode == 0, r.stdout + r.stderr
    ok = "skipped: no local SSDs" if step == "45-local-ssd.sh" else "already satisfied"
    assert ok in r.stdout, r.stdout
    assert p4d.recorded() == ""


@pytest.mark.parametrize("name", ["azure-nd", "gcp-a3-tcpx", "gcp-a3-tcpxo", "aws-g5"])
def test_fabric_step_is_satisfied_on_each_fabric(tmp_path, name):
    node = prebake(make_node(tmp_path, *NODES[name]))
    r = node.run("40-fabric.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "already satisfied" in r.stdout
    assert node.recorded() == ""


@pytest.mark.parametrize("name", list(NODES))
def test_whole_recipe_on_a_ready_node_runs_no_installer(tmp_path, name):
    node = prebake(make_node(tmp_path, *NODES[name]))
    r = node.run("run-steps.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    assert node.recorded() == ""
    ready = json.loads((node.root / "var/lib/gpufleet/ready.json").read_text())
    results = {s["step"]: s["result"] for s in ready["steps"]}
    assert list(results) == [n.removesuffix(".sh") for n in STEP_NAMES]
    assert set(results.values()) <= {"satisfied", "skipped"}
    assert all(isinstance(s["seconds"], float) for s in ready["steps"])
    assert ready["version_set"] == node.node_env["GPUFLEET_VERSION_SET"]
    if name == "local":
        assert ready["pinned"] == {} and ready["driver"] == ""
        assert results["00-base"] == "satisfied" and results["10-driver"] == "skipped"
    else:
        e = node.node_env
        assert ready["driver"] == e["GPUFLEET_DRIVER_VERSION"]
        assert ready["pinned"]["driver_version"] == e["GPUFLEET_DRIVER_VERSION"]
        assert ready["container_toolkit"] == e["GPUFLEET_CONTAINER_TOOLKIT"]
        assert ready["dcgm"] == e["GPUFLEET_DCGM"] and ready["cuda"] == "13.2"
        assert ready["nccl"] == e["GPUFLEET_NCCL"].split("-")[0]
        assert "skipped" not in (results["10-driver"], results["30-container"])


def test_node_copies_in_cloud_init_behave_like_the_source(p4d, tmp_path):
    """The recipe as cloud-init writes it (comments dropped) passes a ready node and reboots a
    bare one, exactly like images/steps."""
    steps = tmp_path / "opt-gpufleet-steps"
    steps.mkdir()
    for path, text in cloud_init_files("aws", "p4d.24xlarge").items():
        if path.startswith("/opt/gpufleet/steps/"):
            (steps / Path(path).name).write_text(text)
    assert sorted(p.name for p in steps.iterdir()) == [p.name for p in SCRIPTS]
    r = p4d.run("run-steps.sh", steps)
    assert r.returncode == 0 and p4d.recorded() == "", r.stdout + r.stderr
    p4d.knob("driver", None)
    assert p4d.run("run-steps.sh", steps).returncode == 0
    assert p4d.recorded().rstrip().endswith("systemctl reboot")
    p4d.forget()
    p4d.knob("disabled")
    assert p4d.run("60-ttl.sh", steps).returncode == 0
    assert p4d.recorded() == "systemctl enable --now gpufleet-ttl.timer\n"


def test_ready_marker_records_fabric_versions(p4d):
    p4d.put("usr/local/cuda-13.2/lib/libnccl.so.2.9.9")  # an older copy elsewhere
    assert p4d.run("run-steps.sh").returncode == 0
    ready = json.loads((p4d.root / "var/lib/gpufleet/ready.json").read_text())
    assert ready["fabric"] == "efa" and ready["efa_installer"] == "1.50.0"
    assert ready["libfabric"].startswith("2.1.0") and ready["fabric_manager"] == ready["driver"]
    assert ready["pinned"]["efa_installer"] == "1.50.0"
    assert ready["nccl"] == p4d.node_env["GPUFLEET_NCCL"].split("-")[0]  # the newest copy
    log = (p4d.root / "var/log/gpufleet/steps.log").read_text().splitlines()
    assert [line.split()[0] for line in log] == [n.removesuffix(".sh") for n in STEP_NAMES]


# --- driver ---------------------------------------------------------------------------------


def test_vendor_driver_on_the_pinned_branch_is_kept(p4d):
    branch = p4d.node_env["GPUFLEET_DRIVER_BRANCH"]
    p4d.knob("driver", f"{branch}.58.03")
    r = p4d.run("10-driver.sh")
    assert r.returncode == 0 and "already satisfied" in r.stdout
    assert p4d.recorded() == ""


def test_strict_versions_replace_a_same_branch_driver(p4d):
    branch, want = p4d.node_env["GPUFLEET_DRIVER_BRANCH"], p4d.node_env["GPUFLEET_DRIVER_VERSION"]
    p4d.knob("driver", f"{branch}.58.03")
    p4d.set_env(GPUFLEET_STRICT_VERSIONS="1")
    r = p4d.run("10-driver.sh")
    assert r.returncode == 0, r.stderr
    assert f"apt-get install -y -q nvidia-driver-pinning-{want}" in p4d.recorded()


def test_missing_driver_is_installed_and_a_reboot_asked_for(p4d):
    want = p4d.node_env["GPUFLEET_DRIVER_VERSION"]
    p4d.knob("driver", None)
    r = p4d.run("10-driver.sh")
    assert r.returncode == 0, r.stderr
    calls = p4d.recorded()
    assert f"apt-get install -y -q nvidia-driver-pinning-{want}" in calls
    assert "apt-get install -y -q nvidia-open" in calls
    state = p4d.root / "var/lib/gpufleet"
    assert (state / "reboot-required").exists()
    assert (state / "driver-installed").read_text().strip() == BOOT_ID


def test_a_gcp_node_without_a_loaded_driver_installs_the_pinned_one_itself(tmp_path):
    """GCP nodes keep the Deep Learning VM's installer off (install-nvidia-driver=False,
    components/gcp/fleet.py): with no driver loaded the step installs the pinned version and
    asks for the one reboot; nothing else installs one under it."""
    node = prebake(make_node(tmp_path, "gcp", "a2-highgpu-8g"))
    want = node.node_env["GPUFLEET_DRIVER_VERSION"]
    node.knob("driver", None)
    r = node.run("10-driver.sh")
    assert r.returncode == 0, r.stderr
    assert "loaded driver: none" in r.stdout + r.stderr
    assert f"apt-get install -y -q nvidia-driver-pinning-{want}" in node.recorded()
    assert (node.root / "var/lib/gpufleet/reboot-required").exists()


def test_driver_of_another_branch_is_replaced(p4d):
    p4d.knob("driver", "470.256.02")
    r = p4d.run("10-driver.sh")
    assert r.returncode == 0 and "nvidia-driver-pinning-" in p4d.recorded()


def test_driver_installed_earlier_in_this_boot_only_waits_for_the_reboot(p4d):
    p4d.knob("driver", None)
    p4d.put("var/lib/gpufleet/driver-installed", BOOT_ID + "\n")
    r = p4d.run("10-driver.sh")
    assert r.returncode == 0 and "loads after the reboot" in r.stdout
    assert p4d.recorded() == ""
    assert (p4d.root / "var/lib/gpufleet/reboot-required").exists()


def test_driver_still_missing_after_its_reboot_fails_instead_of_looping(p4d):
    p4d.knob("driver", None)
    p4d.put("var/lib/gpufleet/driver-installed", "an-earlier-boot\n")
    r = p4d.run("10-driver.sh")
    assert r.returncode == 1 and "rebooted" in r.stderr and "dmesg" in r.stderr
    assert p4d.recorded() == ""


def test_runner_reboots_after_a_driver_install_and_writes_no_marker(p4d):
    p4d.knob("driver", None)
    r = p4d.run("run-steps.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = p4d.recorded()
    assert "nvidia-open" in calls and calls.rstrip().endswith("systemctl reboot")
    assert not (p4d.root / "var/lib/gpufleet/ready.json").exists()


def test_runner_extends_a_short_lease_over_its_reboot(p4d):
    # The CLI renews only once SSH answers again, and gpufleet-ttl.timer fires a minute after
    # boot: a lease due within the reboot would remove the node while it comes back.
    p4d.knob("driver", None)
    lease = p4d.put("var/lib/gpufleet/lease", f"{int(time.time()) + 60}\n")
    before = int(time.time())
    assert p4d.run("run-steps.sh").returncode == 0
    assert int(lease.read_text()) >= before + 900
    assert not lease.with_name("lease.tmp").exists()


def test_runner_keeps_a_longer_lease_and_writes_none_where_there_was_none(p4d):
    p4d.knob("driver", None)
    far = int(time.time()) + 7200
    lease = p4d.put("var/lib/gpufleet/lease", f"{far}\n")
    assert p4d.run("run-steps.sh").returncode == 0
    assert int(lease.read_text()) == far
    lease.unlink()
    p4d.forget()
    assert p4d.run("run-steps.sh").returncode == 0
    assert not lease.exists()


# --- Fabric Manager -------------------------------------------------------------------------


def test_fabric_manager_follows_the_loaded_driver_not_the_pin(p4d):
    branch = p4d.node_env["GPUFLEET_DRIVER_BRANCH"]
    vendor = f"{branch}.58.03"  # a vendor image's driver on the pinned branch
    p4d.knob("driver", vendor)
    r = p4d.run("20-fabricmanager.sh")
    assert r.returncode == 0, r.stderr
    assert f"nvidia-fabricmanager={vendor}-1" in p4d.recorded()
    assert "systemctl enable --now nvidia-fabricmanager" in p4d.recorded()


def test_fabric_manager_before_the_reboot_matches_the_new_driver_and_does_not_start(p4d):
    want = p4d.node_env["GPUFLEET_DRIVER_VERSION"]
    p4d.knob("driver", None)
    p4d.knob("fm", None)
    p4d.put("var/lib/gpufleet/reboot-required")
    r = p4d.run("20-fabricmanager.sh")
    assert r.returncode == 0, r.stderr
    calls = p4d.recorded()
    assert f"nvidia-fabricmanager={want}-1" in calls
    assert "systemctl enable nvidia-fabricmanager" in calls and "--now" not in calls


def test_older_branches_use_the_versioned_fabric_manager_package(p4d):
    p4d.knob("driver", "535.161.08")
    assert p4d.run("20-fabricmanager.sh").returncode == 0
    assert "nvidia-fabricmanager-535=535.161.08-1" in p4d.recorded()


def test_no_nvswitch_only_needs_persistence(tmp_path):
    node = prebake(make_node(tmp_path, "aws", "g5.12xlarge"))
    r = node.run("20-fabricmanager.sh")
    assert r.returncode == 0 and "no NVSwitch; persistence mode on" in r.stdout
    assert node.recorded() == ""


# --- container toolkit, NCCL, DCGM ----------------------------------------------------------


def test_missing_container_toolkit_is_installed_at_one_pinned_version(p4d):
    want = p4d.node_env["GPUFLEET_CONTAINER_TOOLKIT"]
    p4d.knob("ctk", None)
    r = p4d.run("30-container.sh")
    assert r.returncode == 0, r.stderr
    calls = p4d.recorded()
    for pkg in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                "libnvidia-container-tools", "libnvidia-container1"):  # fmt: skip
        assert f"{pkg}={want}-1" in calls
    assert "nvidia-ctk runtime configure --runtime=docker" in calls
    assert "systemctl restart docker" in calls


def test_toolkit_present_but_docker_not_wired_is_only_configured(p4d):
    (p4d.root / "etc/docker/daemon.json").write_text("{}")
    r = p4d.run("30-container.sh")
    assert r.returncode == 0, r.stderr
    calls = p4d.recorded()
    assert "apt-get" not in calls and "nvidia-ctk runtime configure" in calls


def test_missing_nccl_and_dcgm_are_installed_from_the_cuda_repo(p4d):
    e = p4d.node_env
    for lib in (p4d.root / "usr/lib/x86_64-linux-gnu").glob("libnccl*"):
        lib.unlink()
    p4d.knob("dcgm", None)
    r = p4d.run("35-nccl-dcgm.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = p4d.recorded()
    cuda = e["GPUFLEET_CUDA"]
    nccl = f"{e['GPUFLEET_NCCL']}+cuda{cuda}"
    assert f"libnccl2={nccl} libnccl-dev={nccl}" in calls
    dcgm_pkg = f"datacenter-gpu-manager-4-cuda{cuda.split('.')[0]}"
    assert f"{dcgm_pkg}=1:{e['GPUFLEET_DCGM']}-1" in calls
    assert "systemctl enable --now nvidia-dcgm" in calls


def test_nccl_version_not_in_the_repo_is_a_clear_failure(p4d):
    for lib in (p4d.root / "usr/lib/x86_64-linux-gnu").glob("libnccl*"):
        lib.unlink()
    p4d.set_env(GPUFLEET_NCCL="2.99.9-1")
    r = p4d.run("35-nccl-dcgm.sh")
    assert r.returncode == 1 and "no libnccl2 2.99.9-1+cuda" in r.stderr


# --- fabric ----------------------------------------------------------------------------------


def test_efa_check_finds_fi_info_off_the_service_path(p4d):
    """The EFA installer puts fi_info in /opt/amazon/efa/bin (EC2 user guide, efa-start.md:
    "fi_info -p efa" after adding it to PATH), and a systemd unit's PATH is only
    /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin (systemd.exec(5), "PATH"): a bare fi_info
    fails there, the check says EFA is missing and the installer re-runs on every boot."""
    assert "/opt/amazon/efa/bin" not in p4d.env["PATH"]
    r = p4d.run("40-fabric.sh")
    assert r.returncode == 0 and "already satisfied" in r.stdout and p4d.recorded() == ""
    assert p4d.run("run-steps.sh").returncode == 0
    ready = json.loads((p4d.root / "var/lib/gpufleet/ready.json").read_text())
    assert ready["libfabric"] == "2.1.0"


def test_missing_efa_runs_the_pinned_installer(p4d):
    v = p4d.node_env["GPUFLEET_EFA_INSTALLER"]
    p4d.knob("efa", None)
    r = p4d.run("40-fabric.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = p4d.recorded()
    assert f"https://efa-installer.amazonaws.com/aws-efa-installer-{v}.tar.gz" in calls
    assert "efa_installer.sh -y" in calls


def test_infiniband_without_devices_fails_the_step(tmp_path):
    node = prebake(make_node(tmp_path, *NODES["azure-nd"]))
    shutil.rmtree(node.root / "sys/class/infiniband")
    r = node.run("40-fabric.sh")
    assert r.returncode == 1 and "no InfiniBand devices" in r.stderr


def test_infiniband_loads_peer_memory(tmp_path):
    node = prebake(make_node(tmp_path, *NODES["azure-nd"]))
    node.knob("peermem", None)
    r = node.run("40-fabric.sh")
    assert r.returncode == 0 and node.recorded() == "modprobe nvidia-peermem\n"


def test_tcpx_starts_the_receive_daemon_when_it_is_not_running(tmp_path):
    node = prebake(make_node(tmp_path, *NODES["gcp-a3-tcpx"]))
    node.knob("rxdm", None)
    r = node.run("40-fabric.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = node.recorded()
    assert "install --install-nccl" not in calls  # the plugin is already there
    assert "--name gpufleet-rxdm" in calls and node.node_env["GPUFLEET_TCPX_RXDM"] in calls
    assert "--gpu_nic_preset a3vm" in calls and "--uds_path /run/tcpx" in calls


def test_tcpxo_installs_its_plugin_and_daemon(tmp_path):
    node = prebake(make_node(tmp_path, *NODES["gcp-a3-tcpxo"]))
    shutil.rmtree(node.root / "var/lib/tcpxo")
    node.knob("rxdm", None)
    r = node.run("40-fabric.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = node.recorded()
    assert f"{node.node_env['GPUFLEET_TCPXO_PLUGIN']} install --install-nccl" in calls
    assert node.node_env["GPUFLEET_TCPXO_RXDM"] in calls and "--num_nics=8" in calls


# --- NCCL env, TTL, runner ------------------------------------------------------------------


def test_nccl_env_files_come_from_the_fabric_table(p4d):
    conf = (p4d.root / "etc/nccl.conf").read_text()
    profile = (p4d.root / "etc/profile.d/gpufleet-nccl.sh").read_text()
    assert "NCCL_SOCKET_IFNAME=^docker,lo,veth" in conf and "FI_PROVIDER" not in conf
    assert 'export FI_PROVIDER="efa"' in profile
    assert 'export LD_LIBRARY_PATH="/opt/amazon/efa/lib:' in profile
    r = subprocess.run(
        ["bash", "-c", f'LD_LIBRARY_PATH=/x; . {p4d.root}/etc/profile.d/gpufleet-nccl.sh; '
         'echo "$LD_LIBRARY_PATH|$FI_PROVIDER"'],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.stdout.strip().endswith(":/x|efa")


def test_changed_fabric_table_rewrites_the_nccl_files(p4d):
    (p4d.root / "etc/gpufleet/nccl.env").write_text("NCCL_DEBUG=INFO\n")
    r = p4d.run("50-nccl-env.sh")
    assert r.returncode == 0 and "wrote" in r.stdout
    assert (p4d.root / "etc/nccl.conf").read_text() == "NCCL_DEBUG=INFO\n"


def test_cpu_node_skips_gpu_steps(p4d):
    p4d.set_env(GPUFLEET_GPUS="0")
    for step in ("10-driver.sh", "20-fabricmanager.sh", "30-container.sh", "35-nccl-dcgm.sh"):
        r = p4d.run(step)
        assert r.returncode == 0 and "skipped" in r.stdout
    assert p4d.recorded() == ""


def test_failing_step_stops_the_runner(p4d):
    p4d.set_env(GPUFLEET_FABRIC="infiniband")
    r = p4d.run("run-steps.sh")
    assert r.returncode == 1 and "step 40-fabric failed" in r.stderr
    assert "no InfiniBand devices" in r.stdout
    assert not (p4d.root / "var/lib/gpufleet/ready.json").exists()


def test_a_node_whose_recipe_fails_still_expires(p4d):
    """The recipe stops at its first failing step (run-steps.sh), so an expiry armed only by
    step 60 is never armed when apt, curl or the fabric check fails first, and the node bills
    ($27-98/h) forever (issue 7 item 1). cloud-init writes the timer and its script in
    write_files (init stage) and enables the timer in runcmd (final stage) before the recipe
    service (cloud-init docs, "Module reference: Write Files, Runcmd"; stage order in
    /etc/cloud/cloud.cfg): the timer exists whatever the recipe does."""
    # make_node wrote cloud-init's write_files (timer, service, script): what a fresh node has
    # before any step runs.
    p4d.set_env(GPUFLEET_FABRIC="infiniband", GPUFLEET_EXPIRES_AT="1000")  # step 40 fails
    r = p4d.run("run-steps.sh")
    assert r.returncode == 1 and "step 40-fabric failed" in r.stderr
    assert "60-ttl" not in (p4d.root / "var/log/gpufleet/steps.log").read_text()
    r = expire(p4d)
    assert r.returncode == 0 and p4d.recorded().endswith("systemctl poweroff\n")


def test_cloud_init_enables_the_expiry_timer_before_it_starts_the_recipe():
    """cloud-init runs runcmd's entries in list order (cloud-init docs, "Runcmd"): the timer
    is enabled before the recipe service is started, so nothing in the recipe precedes it."""
    ctx = BootstrapContext(
        "t", "aws", "p4d.24xlarge", 0, 2, "u", "ssh-ed25519 AAAA u", "KEY", "ssh-ed25519 BBBB h",
        "efa", 1_900_000_000,
    )  # fmt: skip
    runcmd = [" ".join(c) for c in yaml.safe_load(render_cloud_init(ctx))["runcmd"]]
    timer = runcmd.index("systemctl enable --now --no-block gpufleet-ttl.timer")
    recipe = runcmd.index("systemctl enable --now --no-block gpufleet-recipe.service")
    assert timer < recipe and runcmd[0] == "systemctl daemon-reload"


def test_ttl_step_only_checks_the_timer_cloud_init_armed(p4d):
    r = p4d.run("60-ttl.sh")
    assert r.returncode == 0 and "already satisfied: expiry timer enabled" in r.stdout
    assert "2030-03-17 17:46:40 UTC" in r.stdout  # 1_900_000_000
    p4d.knob("disabled")
    r = p4d.run("60-ttl.sh")
    assert r.returncode == 0 and "enabled again" in r.stdout
    assert p4d.recorded() == "systemctl enable --now gpufleet-ttl.timer\n"
    (p4d.root / "etc/systemd/system/gpufleet-ttl.timer").unlink()
    r = p4d.run("60-ttl.sh")
    assert r.returncode == 1 and "would never expire" in r.stderr


def test_a_builder_has_a_nodes_expiry_timer_and_the_seal_removes_it(tmp_path):
    """Issue 19, item 22: the builder of a bake expires as a node does (a CLI killed mid-bake
    leaves nothing for long); what the seal removes, no node made from the image inherits."""
    from gpufleet.components.bake import seal_command

    node = make_node(tmp_path, "aws", "p4d.24xlarge")
    node.set_env(GPUFLEET_BAKE="1")
    r = node.run("60-ttl.sh")
    assert r.returncode == 0 and "expiry timer enabled" in r.stdout
    builder = BootstrapContext(
        "t", "aws", "p4d.24xlarge", 0, 1, "u", "ssh-ed25519 AAAA u", "KEY", "ssh-ed25519 BBBB h",
        "efa", 1_900_000_000, {"GPUFLEET_BAKE": "1"},
    )  # fmt: skip
    doc = yaml.safe_load(render_cloud_init(builder))
    timer_files = [f["path"] for f in doc["write_files"] if "gpufleet-ttl" in f["path"]]
    timer_files.append("/usr/local/sbin/gpufleet-expire")
    assert ["systemctl", "enable", "--now", "--no-block", "gpufleet-ttl.timer"] in doc["runcmd"]
    seal = seal_command()
    for path in (*timer_files, "/var/lib/gpufleet/lease", "/var/lib/gpufleet/expires_at"):
        assert path in seal
    assert "systemctl disable gpufleet-ttl.timer" in seal


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
def test_expire_script_is_shellcheck_clean():
    script = ROOT / "images" / "ttl" / "gpufleet-expire"
    r = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def expire(node: Node) -> subprocess.CompletedProcess:
    """Run the node's expiry script (cloud-init wrote it) as its timer would."""
    script = node.root / "usr/local/sbin/gpufleet-expire"
    return subprocess.run(["bash", str(script)], env=node.env, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("hard", "lease", "removed"),
    [
        ("1900000000", None, False),  # before the hard expiry, no lease
        ("1000", None, True),  # past the hard expiry
        ("1900000000", "1000", True),  # the CLI stopped renewing its lease
        ("1900000000", "1899999999", False),  # a live lease before the hard expiry
        ("1000", "1899999999", True),  # a lease never extends past the hard expiry
        ("1900000000", "12ab", False),  # a torn lease file: the hard expiry alone
    ],
)
def test_node_goes_at_the_earlier_of_hard_expiry_and_lease(p4d, hard, lease, removed):
    p4d.set_env(GPUFLEET_EXPIRES_AT=hard)
    if lease is not None:
        p4d.put("var/lib/gpufleet/lease", lease + "\n")
    r = expire(p4d)
    assert r.returncode == 0, r.stderr
    assert p4d.recorded() == ("systemctl poweroff\n" if removed else "")


def fake_gce_curl(node: Node, delete_rc: int) -> None:
    """curl as a GCE VM sees it: the metadata server answers, the Compute API DELETE exits
    `delete_rc` (22: curl -f on an HTTP error, e.g. 403 without compute.instances.delete)."""
    (node.bin / "curl").write_text(
        f'#!/bin/sh\necho "curl $*" >> {node.calls}\ncase "$*" in\n'
        f"  *DELETE*) exit {delete_rc} ;;\n"
        "  *default/token*) echo "
        """'{"access_token":"ya29.tok","expires_in":3599,"token_type":"Bearer"}' ;;\n"""
        "  *instance/zone*) echo projects/123456/zones/us-central1-c ;;\n"
        "  *instance/name*) echo gcp-a2-node-0-4f2a9c1 ;;\n"
        "  *project/project-id*) echo proj-1 ;;\n"
        "esac\n"
    )


@pytest.fixture
def gcp_node(tmp_path) -> Node:
    node = prebake(make_node(tmp_path, "gcp", "a2-highgpu-8g"))
    node.set_env(GPUFLEET_EXPIRES_AT="1900000000")
    node.put("var/lib/gpufleet/lease", "1000\n")  # the CLI that renewed it died
    return node


def test_gcp_node_past_its_lease_deletes_its_vm_through_the_compute_api(gcp_node):
    """GCE deletes a VM at its terminationTime only (limit-vm-runtime), so a lease shorter than
    that is the node's to enforce. A VM gets an OAuth token for its attached service account
    from the metadata server (GET http://metadata.google.internal/computeMetadata/v1/instance/
    service-accounts/default/token with "Metadata-Flavor: Google"; compute/docs/access/
    authenticate-workloads#applications), its name, zone (projects/NUMBER/zones/ZONE) and
    project id from the same server (compute/docs/metadata/predefined-metadata-keys), and
    deletes itself with DELETE https://compute.googleapis.com/compute/v1/projects/{project}/
    zones/{zone}/instances/{instance} (compute/docs/reference/rest/v1/instances/delete)."""
    fake_gce_curl(gcp_node, 0)
    r = expire(gcp_node)
    assert r.returncode == 0, r.stderr
    calls = gcp_node.recorded().splitlines()
    assert all("-H Metadata-Flavor: Google" in c for c in calls if "metadata.google" in c)
    (delete,) = [c for c in calls if "-X DELETE" in c]
    assert delete.endswith(
        "https://compute.googleapis.com/compute/v1/projects/proj-1/zones/us-central1-c/"
        "instances/gcp-a2-node-0-4f2a9c1"
    )
    assert "Authorization: Bearer ya29.tok" in delete
    assert "poweroff" not in gcp_node.recorded()


def test_gcp_node_whose_self_delete_fails_never_powers_off(gcp_node):
    """ "The termination timestamp is automatically cleared whenever a VM is stopped or
    suspended" (cloud.google.com/compute/docs/instances/limit-vm-runtime): a guest poweroff
    after a failed DELETE would leave a TERMINATED VM that GCE never deletes, its disks billed.
    The node logs the failure and stays up for GCE's own terminationTime (the hard expiry)."""
    fake_gce_curl(gcp_node, 22)
    r = expire(gcp_node)
    assert r.returncode == 1
    assert "-X DELETE" in gcp_node.recorded() and "poweroff" not in gcp_node.recorded()
    assert "terminationTime" in r.stderr


def test_gcp_node_arms_the_expiry_timer_cloud_init_wrote(gcp_node):
    """The GCP node now enforces its lease itself, so cloud-init arms the same timer there."""
    for path in ("etc/systemd/system/gpufleet-ttl.timer", "usr/local/sbin/gpufleet-expire"):
        assert (gcp_node.root / path).is_file()
    assert gcp_node.node_env["GPUFLEET_TTL_ACTION"] == "gce-delete"
    r = gcp_node.run("60-ttl.sh")
    assert r.returncode == 0 and "already satisfied: expiry timer enabled" in r.stdout


@pytest.mark.parametrize(
    ("hard", "extended", "lease", "removed"),
    [
        ("1000", "1900000000", None, False),  # extended past the user data's expiry
        ("1900000000", "1000", None, True),  # extended to an earlier time: that time
        ("1000", "12ab", None, True),  # a torn override: the user data's expiry
        ("1000", "1900000000", "1000", True),  # a lapsed lease still ends it earlier
    ],
)
def test_an_extended_hard_expiry_replaces_the_one_from_user_data(
    p4d, hard, extended, lease, removed
):
    """cloud-init writes /etc/gpufleet/env once per instance (write_files' module frequency is
    "once-per-instance", cloud-init docs "Module reference: Write Files"), so a changed user
    data never reaches a running node, and the stack keeps it fixed anyway (changing it makes
    the clouds replace or refuse the VMs: docs/decisions.md, "Expiry is fixed once per
    cluster"). `gpufleet extend` writes the new hard expiry to /var/lib/gpufleet/expires_at over
    SSH instead, and the expiry script prefers it to GPUFLEET_EXPIRES_AT."""
    p4d.set_env(GPUFLEET_EXPIRES_AT=hard)
    p4d.put("var/lib/gpufleet/expires_at", extended + "\n")
    if lease is not None:
        p4d.put("var/lib/gpufleet/lease", lease + "\n")
    r = expire(p4d)
    assert r.returncode == 0, r.stderr
    assert p4d.recorded() == ("systemctl poweroff\n" if removed else "")


def test_aws_expiry_only_powers_off(p4d):
    p4d.set_env(GPUFLEET_EXPIRES_AT="1000")
    r = expire(p4d)
    assert r.returncode == 0 and p4d.recorded() == "systemctl poweroff\n"


# --- cloud facts the recipe depends on (issue 7) ----------------------------------------------


def test_apt_waits_for_the_lock_unattended_upgrades_holds_on_first_boot(tmp_path):
    """Ubuntu cloud images run unattended-upgrades on first boot, holding the dpkg lock, and a
    plain apt-get fails at once on it ("Could not get lock /var/lib/dpkg/lock-frontend").
    Microsoft's azhpc-images disables unattended upgrades (ubuntu/common/disable_auto_upgrade.sh)
    and apt waits for the lock only when told to (apt.conf(5), DPkg::Lock::Timeout): every apt
    call of the recipe must carry the timeout and the node must turn the upgrades off."""
    node = make_node(tmp_path, "gcp", "g2-standard-8")
    (node.bin / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")  # nothing installed yet
    r = node.run("00-base.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = [c for c in node.recorded().splitlines() if c.startswith("apt-get")]
    assert [c.split()[1] for c in calls] == ["update", "install"]
    assert all("-o DPkg::Lock::Timeout=600" in c for c in calls), calls
    doc = yaml.safe_load(render_cloud_init(BootstrapContext(
        "t", "gcp", "g2-standard-8", 0, 2, "u", "ssh-ed25519 A u", "K", "ssh-ed25519 B h",
    )))  # fmt: skip
    conf = {f["path"]: f["content"] for f in doc["write_files"]}["/etc/apt/apt.conf.d/99-gpufleet"]
    assert 'APT::Periodic::Unattended-Upgrade "0";' in conf
    assert 'DPkg::Lock::Timeout "600";' in conf
    assert "dpkg -i" not in (STEPS / "lib.sh").read_text().split("cuda_repo()")[1]


@pytest.mark.parametrize(
    ("name", "knob", "missing"),
    [("gcp-a3-tcpx", "kernel", "linux-gcp-tcpx kernel"),
     ("gcp-a3-tcpxo", "import-helper", "import-helper")],
)  # fmt: skip
def test_a3_fabric_step_fails_plainly_without_what_the_receive_daemon_needs(
    tmp_path, name, knob, missing
):
    """GPUDirect-TCPX's receive daemon needs the linux-gcp-tcpx kernel (or COS) and TCPXO needs
    the dmabuf import-helper module with /dev/aperture_devices (Cluster Toolkit a3-highgpu-8g /
    a3-megagpu-8g blueprints; the stock Deep Learning VM image has neither): the fabric step
    fails saying what is missing instead of starting a daemon that cannot work."""
    node = prebake(make_node(tmp_path, *NODES[name]))
    node.knob("rxdm", None)
    node.knob(knob, None)
    r = node.run("40-fabric.sh")
    assert r.returncode == 1 and missing in r.stderr
    assert "docker run" not in node.recorded()


def test_one_node_tcpx_cluster_gets_no_net_plugin():
    """NCCL_NET=GPUDirectTCPX_v7 makes NCCL use the TCPX plugin for every communicator, and on a
    single node (no peer to receive) init fails instead of using NVLink; Cluster Toolkit's A3
    NCCL scripts set it only for multi-node runs."""
    one = cloud_init_files("gcp", "a3-highgpu-8g")  # node_count 2
    assert "NCCL_NET=GPUDirectTCPX_v7" in one["/etc/gpufleet/nccl.env"]
    ctx = BootstrapContext(
        "t", "gcp", "a3-highgpu-8g", 0, 1, "u", "ssh-ed25519 A u", "K", "ssh-ed25519 B h", "tcpx",
    )  # fmt: skip
    files = {f["path"]: f["content"] for f in yaml.safe_load(render_cloud_init(ctx))["write_files"]}
    assert "NCCL_NET" not in files["/etc/gpufleet/nccl.env"]


def test_local_ssds_become_one_raid0_mounted_once(tmp_path):
    """A3 VMs come with 16 bundled 375 GB local NVMe SSDs (GCE GPU machine types page; Cluster
    Toolkit mounts them as one RAID0): the step builds the array on first boot and mounts it;
    once mounted it does nothing."""
    node = make_node(tmp_path, "gcp", "a3-highgpu-8g")
    for i in range(16):
        node.put(f"dev/disk/by-id/google-local-nvme-ssd-{i}")
    (node.bin / "mdadm").write_text(  # no array to assemble yet
        f'#!/bin/sh\necho "mdadm $*" >> {node.calls}\ncase "$1" in --assemble) exit 1 ;; esac\n'
    )
    r = node.run("45-local-ssd.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = node.recorded()
    assert "--level=0" in calls and "--raid-devices=16" in calls
    assert "/dev/disk/by-id/google-local-nvme-ssd-15" in calls and "mkfs.ext4" in calls
    assert "mount -o discard,defaults,nofail /dev/md/gpufleet-localssd" in calls
    node.forget()
    node.knob("mounted")
    r = node.run("45-local-ssd.sh")
    assert "already satisfied" in r.stdout and node.recorded() == ""


def test_infiniband_check_does_not_count_the_ethernet_vf(tmp_path):
    """On Azure ND sizes the accelerated-networking Ethernet VF is an mlx5 RDMA device too
    (mlx5_an0, link layer Ethernet) next to the InfiniBand HCAs mlx5_ib0..7 (Azure NHC's
    nd96asr_v4.conf / nd96isr_h100_v5.conf check mlx5_ib* ports). A node whose IB ports are
    missing must fail the fabric check even though mlx5_an0 is there."""
    node = prebake(make_node(tmp_path, *NODES["azure-nd"]))
    for i in range(8):
        shutil.rmtree(node.root / f"sys/class/infiniband/mlx5_ib{i}")
    assert (node.root / "sys/class/infiniband/mlx5_an0").exists()
    r = node.run("40-fabric.sh")
    assert r.returncode == 1 and "no InfiniBand devices" in r.stderr


def test_nccl_conf_keeps_the_topology_file_the_hpc_image_wrote(tmp_path):
    """Azure's ubuntu-hpc image writes /etc/nccl.conf at boot with
    NCCL_TOPO_FILE=/opt/microsoft/ndv4/topo.xml (ndv5 for H100) (azhpc-images
    setup_sku_customizations.sh, customizations/ndv4.sh, ndv5.sh); without the topology file
    NCCL on ND sizes mis-pairs GPUs and HCAs. The step merges its settings into the file and
    keeps the image's other lines; the node's table names the size's own topology file."""
    node = make_node(tmp_path, "azure", "Standard_ND96isr_H100_v5")
    node.put("etc/nccl.conf", "NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml\nNCCL_FOO=1\n")
    r = node.run("50-nccl-env.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    conf = (node.root / "etc/nccl.conf").read_text().splitlines()
    assert "NCCL_FOO=1" in conf and "NCCL_IB_PCI_RELAXED_ORDERING=1" in conf
    assert conf.count("NCCL_TOPO_FILE=/opt/microsoft/ndv5/topo.xml") == 1
    r = node.run("50-nccl-env.sh")  # a second boot: nothing to do
    assert "already satisfied" in r.stdout
    a100 = cloud_init_files("azure", "Standard_ND96asr_v4")["/etc/gpufleet/nccl.env"]
    assert "NCCL_TOPO_FILE=/opt/microsoft/ndv4/topo.xml" in a100.splitlines()


def test_no_rank_on_infiniband_is_told_to_run_ucx_over_tcp():
    """UCX_TLS=tcp (with UCX_NET_DEVICES=eth0) makes UCX, and so Open MPI / HPC-X, use TCP on
    the Ethernet NIC only (UCX docs, UCX_TLS); azurehpc's NCCL test scripts set it for one
    run's out-of-band bootstrap, not for jobs. Exported to every rank it would move MPI off
    InfiniBand."""
    from gpufleet.components.fabric import nccl_env

    env = nccl_env("infiniband")
    assert "UCX_TLS" not in env and "UCX_NET_DEVICES" not in env
    files = cloud_init_files("azure", "Standard_ND96asr_v4")
    assert "UCX_" not in files["/etc/gpufleet/nccl.env"]
