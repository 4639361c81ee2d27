"""scripts/health_check.py on nvidia-smi fixtures (reconstructed; see tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
SCRIPT = ROOT / "scripts" / "health_check.py"


def load():
    spec = importlib.util.spec_from_file_location("health_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


hc = load()


def fake_smi(fixture: str):
    d = FIXTURES / fixture

    def smi(args: list[str]) -> tuple[int, str]:
        if args[0].startswith("--query-gpu="):
            return 0, (d / "query-gpu.csv").read_text()
        if args[0].startswith("--query-remapped-rows="):
            return 0, (d / "query-remapped-rows.csv").read_text()
        if args[:2] == ["nvlink", "--status"]:
            return 0, (d / "nvlink-status.txt").read_text()
        return 1, "unknown arguments"

    return smi


def report(fixture: str, *argv: str) -> dict:
    args = hc.parse_args(list(argv))
    return hc.evaluate(args, smi=fake_smi(fixture))


def failed(rep: dict) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in rep["checks"] if not c["ok"]}


A100 = ("--expect-gpus", "8", "--expect-model", "A100", "--expect-memory-gib", "40", "--nvswitch")
H100 = ("--expect-gpus", "8", "--expect-model", "H100", "--expect-memory-gib", "80", "--nvswitch")


def test_parse_gpu_csv():
    rows = hc.parse_csv(
        (FIXTURES / "a100-sxm4-40gb-healthy/query-gpu.csv").read_text(), hc.GPU_FIELDS
    )
    assert len(rows) == 8 and rows[0]["name"] == "NVIDIA A100-SXM4-40GB"
    assert rows[0]["memory.total"] == "40960" and rows[7]["pci.bus_id"] == "00000000:A0:1D.0"


def test_parse_nvlink_status():
    text = (FIXTURES / "h100-sxm5-80gb-degraded/nvlink-status.txt").read_text()
    links = hc.parse_nvlink_status(text)
    assert links[0] == (18, 0) and links[2] == (17, 1)
    a100 = hc.parse_nvlink_status(
        (FIXTURES / "a100-sxm4-40gb-healthy/nvlink-status.txt").read_text()
    )
    assert set(a100.values()) == {(12, 0)}


def test_fabric_manager_version_parsing():
    assert hc.parse_fabricmanager_version("Fabric Manager version is : 535.183.01") == "535.183.01"


@pytest.mark.parametrize(
    ("fixture", "argv"), [("a100-sxm4-40gb-healthy", A100), ("h100-sxm5-80gb-healthy", H100)]
)
def test_healthy_nodes_pass_the_gpu_checks(fixture, argv):
    rep = report(fixture, *argv)
    # Fabric Manager is not installed on this machine: the one expected failure off a GPU node.
    assert set(failed(rep)) == {"fabric_manager"}


def test_missing_gpu_fails_naming_the_count():
    assert failed(report("a100-sxm4-40gb-missing-gpu", *A100))["gpu_count"] == "7 GPUs, 8 expected"


def test_ecc_and_row_remap_fail():
    bad = failed(report("a100-sxm4-40gb-ecc", *A100))
    assert "GPU 3: 2" in bad["ecc_uncorrected"] and "00000000:20:1D.0" in bad["row_remap"]


def test_persistence_off_and_inactive_link_fail():
    bad = failed(report("h100-sxm5-80gb-degraded", *H100))
    assert "GPUs 5" in bad["persistence_mode"] and "GPUs 2" in bad["nvlink"]


def test_wrong_model_and_memory_fail():
    bad = failed(report("a100-sxm4-40gb-healthy", "--expect-gpus", "8", "--expect-model", "H100",
                        "--expect-memory-gib", "80"))  # fmt: skip
    assert "gpu_model" in bad and "gpu_memory" in bad


def test_sandbox_node_without_gpus_passes_with_the_reason():
    rep = hc.evaluate(hc.parse_args(["--expect-gpus", "0"]))
    assert rep["ok"] and rep["checks"][0]["detail"].startswith("no GPUs expected")


def test_fabric_devices_from_sysfs(tmp_path):
    ib = tmp_path / "sys/class/infiniband"
    for k in range(8):
        port = ib / f"mlx5_ib{k}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n" if k != 6 else "1: DOWN\n")
    args = ["--fabric", "infiniband", "--expect-fabric-devices", "8", "--sysfs-root", str(tmp_path)]
    check = hc.evaluate(hc.parse_args(args))["checks"][-1]
    assert check["name"] == "fabric_devices" and not check["ok"]
    assert check["detail"].startswith("7 active InfiniBand devices")


def test_whole_script_with_fake_nvidia_smi_on_path(tmp_path):
    """The script as a node runs it: nvidia-smi found on PATH, one JSON line out."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'd="$FIXTURE"\n'
        'case "$1" in\n'
        '  --query-gpu=*) cat "$d/query-gpu.csv" ;;\n'
        '  --query-remapped-rows=*) cat "$d/query-remapped-rows.csv" ;;\n'
        '  nvlink) cat "$d/nvlink-status.txt" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    efa = tmp_path / "sys/class/infiniband"
    for k in range(4):
        (efa / f"rdmap{16 + k}s27").mkdir(parents=True)
    env = dict(
        os.environ, PATH=f"{bindir}:/usr/bin:/bin", FIXTURE=str(FIXTURES / "a100-sxm4-40gb-healthy")
    )
    r = subprocess.run(
        [sys.executable, str(SCRIPT), *A100, "--fabric", "efa", "--expect-fabric-devices", "4",
         "--sysfs-root", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    names = {c["name"]: c["ok"] for c in rep["checks"]}
    assert names["gpu_count"] and names["nvlink"] and names["fabric_devices"]
    assert rep["ok"] is False and names["fabric_manager"] is False  # no Fabric Manager here
