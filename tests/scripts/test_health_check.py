"""scripts/health_check.py: parsing nvidia-smi fixtures, verdicts, and the script end to end."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import FIXTURES, ROOT

A100 = FIXTURES / "a100-sxm4-40gb"
H100 = FIXTURES / "h100-sxm5-80gb"


def read(variant: str, name: str) -> str:
    return (FIXTURES / variant / name).read_text()


def facts_from(hc, variant: str, rdma=(), **extra):
    """NodeFacts as `gather` would build them from a fixture directory (no commands run)."""
    log = hc.parse_nvidia_smi_xml(read(variant, "nvidia-smi-q.xml"))
    facts = hc.NodeFacts(
        smi_found=True,
        driver_version=log.driver_version,
        cuda_version=log.cuda_version,
        gpus=hc.merge_gpus(hc.parse_query_gpu_csv(read(variant, "query-gpu.csv")), log.gpus),
        nvlink=hc.parse_nvlink_status(read(variant, "nvlink-status.txt")),
        fabric_manager_version=hc.parse_fabric_manager_version(
            read(variant, "nv-fabricmanager-version.txt")
        ),
        rdma=list(rdma),
        docker_runtimes=hc.parse_docker_runtimes(read(variant, "docker-runtimes.json")),
    )
    for key, value in extra.items():
        setattr(facts, key, value)
    return facts


def efa_devices(hc, count: int):
    return [hc.RdmaDevice(f"rdmap{16 + i}s27", "efa") for i in range(count)]


def a100_expect(hc, **over):
    values = dict(
        gpus=8,
        model="A100-SXM4-40GB",
        memory_gib=40,
        driver="535",
        fabric="efa",
        nvswitch=True,
        fabric_devices=4,
    )
    values.update(over)
    return hc.Expect(**values)


def by_name(checks):
    return {check.name: check for check in checks}


# --- parsing --------------------------------------------------------------------------------


def test_query_csv_of_a100_fixture(hc):
    gpus = hc.parse_query_gpu_csv(read("a100-sxm4-40gb", "query-gpu.csv"))
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA A100-SXM4-40GB"}
    assert gpus[0].bus_id == "00000000:2F:00.0"
    assert gpus[7].uuid == "GPU-1a011247-3834-ff88-6682-d0776a7d7a1e"
    assert {g.memory_mib for g in gpus} == {40960}
    assert {g.persistence for g in gpus} == {"Enabled"}
    assert {g.volatile_uncorrectable for g in gpus} == {0}
    assert hc.csv_driver_version(read("a100-sxm4-40gb", "query-gpu.csv")) == "535.129.03"


def test_query_csv_rejects_a_row_with_wrong_columns(hc):
    with pytest.raises(ValueError, match="columns"):
        hc.parse_query_gpu_csv("0, NVIDIA A100-SXM4-40GB\n")


def test_query_csv_not_available_values(hc):
    fields = ("index", "name", "ecc.errors.uncorrected.volatile.total", "persistence_mode")
    (gpu,) = hc.parse_query_gpu_csv("0, Tesla T4, [N/A], [Not Supported]\n", fields)
    assert gpu.volatile_uncorrectable is None and gpu.persistence is None


def test_xml_of_a100_fixture(hc):
    log = hc.parse_nvidia_smi_xml(read("a100-sxm4-40gb", "nvidia-smi-q.xml"))
    assert (log.driver_version, log.cuda_version) == ("535.129.03", "12.2")
    assert len(log.gpus) == 8
    gpu = log.gpus[4]
    assert gpu.bus_id == "00000000:9F:00.0" and gpu.name == "NVIDIA A100-SXM4-40GB"
    assert gpu.memory_mib == 40960 and gpu.persistence == "Enabled" and gpu.ecc_mode == "Enabled"
    assert gpu.volatile_uncorrectable == 0 and gpu.aggregate_uncorrectable == 0
    assert gpu.sram_threshold_exceeded is None  # Ampere has no SRAM threshold field
    assert gpu.retired_sbe is None and gpu.retired_pending is None  # N/A with row remapping
    assert gpu.remap_pending is False and gpu.remap_failure is False
    assert gpu.fabric_state is None  # "N/A" on Ampere


def test_xml_of_h100_fixture(hc):
    log = hc.parse_nvidia_smi_xml(read("h100-sxm5-80gb", "nvidia-smi-q.xml"))
    assert log.driver_version == "535.161.08"
    assert [g.bus_id[9:11] for g in log.gpus] == ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
    assert {g.memory_mib for g in log.gpus} == {81559}
    assert {g.fabric_state for g in log.gpus} == {"Completed"}
    assert {g.fabric_status for g in log.gpus} == {"Success"}
    assert {g.sram_threshold_exceeded for g in log.gpus} == {False}
    assert {g.volatile_uncorrectable for g in log.gpus} == {0}


def test_xml_of_ecc_remap_fixture(hc):
    gpus = hc.parse_nvidia_smi_xml(read("h100-sxm5-80gb-ecc-remap", "nvidia-smi-q.xml")).gpus
    bad = gpus[3]
    assert (bad.volatile_uncorrectable, bad.aggregate_uncorrectable) == (1, 1)
    assert bad.remapped_uncorrectable == 1 and bad.remap_pending is True
    assert all(g.remap_pending is False for g in gpus if g.index != 3)


def test_xml_of_pre_ampere_ecc_layout(hc):
    # R470 and older report <double_bit><total>; the parser must still count them.
    text = """<nvidia_smi_log><driver_version>470.82.01</driver_version><gpu id="0:1:0.0">
      <product_name>Tesla V100-SXM2-16GB</product_name>
      <ecc_errors><volatile><single_bit><total>5</total></single_bit>
      <double_bit><device_memory>2</device_memory><total>2</total></double_bit></volatile>
      </ecc_errors>
      <retired_pages><multiple_single_bit_retirement><retired_count>1</retired_count>
      </multiple_single_bit_retirement><double_bit_retirement><retired_count>2</retired_count>
      </double_bit_retirement><pending_retirement>Yes</pending_retirement></retired_pages>
      </gpu></nvidia_smi_log>"""
    (gpu,) = hc.parse_nvidia_smi_xml(text).gpus
    assert gpu.volatile_uncorrectable == 2
    assert (gpu.retired_sbe, gpu.retired_dbe, gpu.retired_pending) == (1, 2, True)


def test_query_dispatches_on_format(hc):
    from_xml = hc.parse_nvidia_smi_query(read("h100-sxm5-80gb", "nvidia-smi-q.xml"))
    from_csv = hc.parse_nvidia_smi_query(read("h100-sxm5-80gb", "query-gpu.csv"))
    assert [g.bus_id for g in from_xml] == [g.bus_id for g in from_csv]
    assert [g.uuid for g in from_xml] == [g.uuid for g in from_csv]


def test_merge_keeps_csv_and_adds_xml_fields(hc):
    csv = hc.parse_query_gpu_csv(read("h100-sxm5-80gb-ecc-remap", "query-gpu.csv"))
    xml = hc.parse_nvidia_smi_xml(read("h100-sxm5-80gb-ecc-remap", "nvidia-smi-q.xml")).gpus
    merged = hc.merge_gpus(csv, xml)
    assert merged[3].volatile_uncorrectable == 1  # from both
    assert merged[3].remap_pending is True  # only in the XML
    assert merged[0].fabric_state == "Completed"


def test_nvlink_status_of_fixtures(hc):
    a100 = hc.parse_nvlink_status(read("a100-sxm4-40gb", "nvlink-status.txt"))
    assert sorted(a100) == list(range(8))
    assert [(lk.link, lk.gbps) for lk in a100[0]] == [(i, 25.0) for i in range(12)]
    degraded = hc.parse_nvlink_status(read("h100-sxm5-80gb-nvlink-degraded", "nvlink-status.txt"))
    assert len(degraded[2]) == 18 and degraded[2][4].gbps is None
    assert degraded[5][10].gbps == 1.562 and degraded[5][9].gbps == 26.562


def test_version_and_runtime_parsers(hc):
    assert hc.parse_fabric_manager_version("Fabric Manager version is : 535.161.08\n") == (
        "535.161.08"
    )
    assert hc.parse_fabric_manager_version("command not found") is None
    assert hc.parse_package_version("535.161.08-1") == "535.161.08"
    assert hc.parse_package_version("1:550.90.07-0ubuntu1") == "550.90.07"
    runtimes = hc.parse_docker_runtimes(read("h100-sxm5-80gb", "docker-runtimes.json"))
    assert runtimes == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert hc.parse_docker_runtimes(" Runtimes: io.containerd.runc.v2 runc\n") == [
        "io.containerd.runc.v2",
        "runc",
    ]
    assert hc.count_listed_gpus(read("a100-sxm4-40gb-missing-gpu", "nvidia-smi-L.txt")) == 7


def test_rdma_classification(hc):
    devices = [
        hc.RdmaDevice("rdmap16s27", "efa"),
        hc.RdmaDevice("efa_0"),
        hc.RdmaDevice("mlx5_ib0", "mlx5_core", ["InfiniBand"], ["4: ACTIVE"]),
        hc.RdmaDevice("mlx5_ib1", "mlx5_core", ["InfiniBand"], ["1: DOWN"]),
        hc.RdmaDevice("mlx5_an0", "mlx5_core", ["Ethernet"], ["4: ACTIVE"]),
    ]
    kinds = hc.classify_rdma(devices)
    assert kinds == {
        "efa": ["rdmap16s27", "efa_0"],
        "infiniband": ["mlx5_ib0"],
        "infiniband_down": ["mlx5_ib1"],
        "other": ["mlx5_an0"],
    }


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2"),
        ("NVIDIA L40S", None),
    ],
)
def test_gpu_spec_table(hc, name, key):
    spec = hc.gpu_spec(name)
    assert (spec.key if spec else None) == key


def test_gpu_spec_peaks_are_dense(hc):
    peaks = {spec.key: (spec.peak_tflops, spec.peak_gbs) for spec in hc.GPU_SPECS}
    assert peaks["A100-SXM4-40GB"] == (312.0, 1555.0)
    assert peaks["H100-SXM"] == (989.4, 3350.0)
    assert hc.gpu_spec("Tesla T4").dtype == "float16"


# --- verdicts -------------------------------------------------------------------------------


def test_healthy_a100_node_passes(hc):
    facts = facts_from(hc, "a100-sxm4-40gb", efa_devices(hc, 4))
    checks = hc.evaluate(facts, a100_expect(hc))
    assert [c.name for c in checks if not c.ok] == []
    names = [c.name for c in checks]
    assert names == [
        "gpu_count",
        "gpu_model",
        "gpu_memory",
        "driver",
        "fabric_manager",
        "ecc",
        "memory_repair",
        "persistence_mode",
        "nvlink",
        "fabric_devices",
        "container_runtime",
    ]
    assert by_name(checks)["nvlink"].detail == "12 links per GPU at 25.0 GB/s"


def test_healthy_h100_node_passes(hc):
    facts = facts_from(hc, "h100-sxm5-80gb", efa_devices(hc, 32))
    expect = hc.Expect(
        gpus=8, model="H100", memory_gib=80, fabric="efa", nvswitch=True, fabric_devices=32
    )
    assert all(c.ok for c in hc.evaluate(facts, expect))


def test_wrong_gpu_count_fails_naming_the_count(hc):
    facts = facts_from(hc, "a100-sxm4-40gb-missing-gpu", efa_devices(hc, 4))
    check = by_name(hc.evaluate(facts, a100_expect(hc)))["gpu_count"]
    assert not check.ok
    assert check.detail == "found 7 GPUs, expected 8"
    assert (check.value, check.expected) == (7, 8)


def test_ecc_error_and_pending_remap_fail(hc):
    facts = facts_from(hc, "h100-sxm5-80gb-ecc-remap", efa_devices(hc, 32))
    checks = by_name(hc.evaluate(facts, hc.Expect(gpus=8, model="H100", nvswitch=True)))
    assert not checks["ecc"].ok
    assert "GPU 3: 1" in checks["ecc"].detail
    assert not checks["memory_repair"].ok
    assert "pending on GPU 3" in checks["memory_repair"].detail
    assert checks["memory_repair"].value["remapped_uncorrectable"] == {3: 1}


def test_persistence_off_fails(hc):
    facts = facts_from(hc, "a100-sxm4-40gb-persistence-off", efa_devices(hc, 4))
    check = by_name(hc.evaluate(facts, a100_expect(hc)))["persistence_mode"]
    assert not check.ok and "all 8 GPUs" in check.detail and "nvidia-persistenced" in check.detail


def test_fabric_manager_mismatch_fails(hc):
    facts = facts_from(hc, "h100-sxm5-80gb-fm-mismatch")
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8, nvswitch=True)))["fabric_manager"]
    assert not check.ok
    assert "535.154.05 does not match driver 535.161.08" in check.detail
    assert "In Progress" in check.detail


def test_fabric_manager_missing_fails_only_on_nvswitch(hc):
    facts = facts_from(hc, "a100-sxm4-40gb", fabric_manager_version=None)
    check = by_name(hc.evaluate(facts, a100_expect(hc)))["fabric_manager"]
    assert not check.ok and "error 802" in check.detail
    assert "fabric_manager" not in by_name(hc.evaluate(facts, hc.Expect(gpus=8)))


def test_degraded_nvlink_fails(hc):
    facts = facts_from(hc, "h100-sxm5-80gb-nvlink-degraded")
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8, nvswitch=True)))["nvlink"]
    assert not check.ok
    assert "GPU 2: 17/18 links active" in check.detail
    assert "GPU 5: links [10] below 26.562 GB/s" in check.detail


def test_sandbox_without_gpus_passes_with_reason(hc):
    checks = hc.evaluate(hc.NodeFacts(), hc.Expect(gpus=0))
    assert [(c.name, c.ok, c.detail) for c in checks] == [
        ("gpu_count", True, "no GPUs expected (sandbox)")
    ]


def test_missing_nvidia_smi_fails_when_gpus_expected(hc):
    check = by_name(hc.evaluate(hc.NodeFacts(), hc.Expect(gpus=8)))["gpu_count"]
    assert not check.ok and "nvidia-smi not found" in check.detail


def test_failing_nvidia_smi_is_reported(hc):
    facts = hc.NodeFacts(smi_found=True, smi_error="NVIDIA-SMI has failed")
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8)))["gpu_count"]
    assert not check.ok and check.detail == "nvidia-smi failed: NVIDIA-SMI has failed"


def test_missing_fabric_devices_says_nccl_falls_back(hc):
    facts = facts_from(hc, "a100-sxm4-40gb")
    check = by_name(hc.evaluate(facts, a100_expect(hc)))["fabric_devices"]
    assert not check.ok
    assert "0 EFA devices" in check.detail and "fall back to sockets" in check.detail


def test_infiniband_ports_must_be_active(hc):
    devices = [
        hc.RdmaDevice(f"mlx5_ib{i}", "mlx5_core", ["InfiniBand"], ["4: ACTIVE"]) for i in range(7)
    ] + [hc.RdmaDevice("mlx5_ib7", "mlx5_core", ["InfiniBand"], ["1: DOWN"])]
    facts = facts_from(hc, "h100-sxm5-80gb", devices)
    expect = hc.Expect(gpus=8, fabric="infiniband", fabric_devices=8)
    check = by_name(hc.evaluate(facts, expect))["fabric_devices"]
    assert not check.ok and "not ACTIVE: mlx5_ib7" in check.detail


def test_container_runtime_without_nvidia_fails(hc):
    facts = facts_from(hc, "a100-sxm4-40gb", docker_runtimes=["io.containerd.runc.v2", "runc"])
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8)))["container_runtime"]
    assert not check.ok and "nvidia-ctk runtime configure" in check.detail


def test_container_probe_counts_gpus(hc):
    facts = facts_from(hc, "a100-sxm4-40gb", container_gpus=7)
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8, container_probe=True)))[
        "container_runtime"
    ]
    assert not check.ok and "sees 7 GPUs, expected 8" in check.detail


def test_probe_verdicts(hc):
    slow = hc.check_probe("gemm_bfloat16", [280.0, 120.0], 312.0, 0.5, "TFLOPS")
    assert not slow.ok and "slow: GPU 1" in slow.detail and slow.expected == 156.0
    fine = hc.check_probe("memory_bandwidth", [1400.0, 1390.0], 1555.0, 0.6, "GB/s")
    assert fine.ok and "89% of peak" in fine.detail
    facts = facts_from(hc, "a100-sxm4-40gb", probes=hc.ProbeResult(skipped="torch not importable"))
    check = by_name(hc.evaluate(facts, hc.Expect(gpus=8)))["gpu_probes"]
    assert check.ok and check.detail == "skipped: torch not importable"
    facts.probes = hc.ProbeResult(dtype="bfloat16", tflops=[250.0] * 8, gbs=[600.0] * 8)
    checks = by_name(hc.evaluate(facts, hc.Expect(gpus=8)))
    assert checks["gemm_bfloat16"].ok
    assert not checks["memory_bandwidth"].ok  # 600 of 1555 GB/s is below 60%


def test_report_document(hc):
    facts = facts_from(hc, "h100-sxm5-80gb-ecc-remap")
    doc = hc.report("node-3", facts, hc.Expect(gpus=8))
    assert doc["node"] == "node-3" and doc["ok"] is False
    assert set(doc["failed"]) == {"ecc", "memory_repair"}
    assert set(doc["checks"][0]) == {"name", "ok", "detail", "value", "expected"}
    assert doc["versions"] == {
        "driver": "535.161.08",
        "cuda": "12.2",
        "fabric_manager": "535.161.08",
    }
    json.dumps(doc)  # serialisable as is


# --- gathering with fakes ---------------------------------------------------------------------


def test_gather_with_a_fake_runner(hc, tmp_path):
    calls = []

    def run(argv, timeout=60.0):
        calls.append(argv[:2])
        if argv[0] == "nvidia-smi" and argv[1].startswith("--query-gpu="):
            return 0, read("a100-sxm4-40gb", "query-gpu.csv"), ""
        if argv[:2] == ["nvidia-smi", "-q"]:
            return 0, read("a100-sxm4-40gb", "nvidia-smi-q.xml"), ""
        if argv[:2] == ["nvidia-smi", "nvlink"]:
            return 0, read("a100-sxm4-40gb", "nvlink-status.txt"), ""
        if argv[0] == "nv-fabricmanager":
            return 127, "", "nv-fabricmanager not found"
        if argv[0] == "dpkg-query" and argv[-1] == "nvidia-fabricmanager-535":
            return 0, "535.129.03-1", ""
        if argv[0] == "docker":
            return 0, read("a100-sxm4-40gb", "docker-runtimes.json"), ""
        return 1, "", "unexpected"

    facts = hc.gather(a100_expect(hc, probes=False), str(tmp_path), run)
    assert len(facts.gpus) == 8 and facts.driver_version == "535.129.03"
    assert facts.fabric_manager_version == "535.129.03"  # from the package database
    assert facts.docker_runtimes == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert ["nvidia-smi", "nvlink"] in calls


def test_read_rdma_devices_from_sysfs(hc, tmp_path):
    make_sysfs(tmp_path, efa=2, ib=("4: ACTIVE", "1: DOWN"))
    devices = hc.read_rdma_devices(str(tmp_path))
    assert [(d.name, d.driver) for d in devices] == [
        ("mlx5_0", "mlx5_core"),
        ("mlx5_1", "mlx5_core"),
        ("rdmap16s27", "efa"),
        ("rdmap17s27", "efa"),
    ]
    assert devices[1].link_layers == ["InfiniBand"] and devices[1].states == ["1: DOWN"]
    assert hc.read_net_interfaces(str(tmp_path)) == ["ens5", "ens6"]


def make_sysfs(root: Path, efa: int = 0, ib: tuple[str, ...] = ()) -> Path:
    """A fake /sys: EFA devices bound to the efa driver, IB devices with port states, NICs."""
    drivers = root / "sys" / "bus" / "pci" / "drivers"
    for name in ("efa", "mlx5_core"):
        (drivers / name).mkdir(parents=True, exist_ok=True)
    ib_class = root / "sys" / "class" / "infiniband"
    for i in range(efa):
        dev = ib_class / f"rdmap{16 + i}s27" / "device"
        dev.mkdir(parents=True)
        (dev / "driver").symlink_to(drivers / "efa")
    for i, state in enumerate(ib):
        base = ib_class / f"mlx5_{i}"
        (base / "device").mkdir(parents=True)
        (base / "device" / "driver").symlink_to(drivers / "mlx5_core")
        port = base / "ports" / "1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text("InfiniBand\n")
        (port / "state").write_text(state + "\n")
    for nic in ("lo", "ens5", "ens6", "docker0"):
        (root / "sys" / "class" / "net" / nic).mkdir(parents=True, exist_ok=True)
    return root


# --- the script as a subprocess ---------------------------------------------------------------


def run_script(
    args: list[str], path: str, fixture: Path | None = None
) -> subprocess.CompletedProcess:
    env = {"PATH": path, "LANG": "C.UTF-8"}
    if fixture is not None:
        env["GPUFLEET_FAKE_SMI_DIR"] = str(fixture)
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "health_check.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def fake_path() -> str:
    return f"{FIXTURES / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"


def test_script_on_healthy_a100_fixture(tmp_path):
    sysfs = make_sysfs(tmp_path, efa=4)
    args = [
        "--expect-gpus=8",
        "--expect-model=A100-SXM4-40GB",
        "--expect-memory-gib=40",
        "--fabric=efa",
        "--nvswitch",
        "--expect-fabric-devices=4",
        "--skip-probes",
        f"--sysfs-root={sysfs}",
        "--node=node-0",
    ]
    proc = run_script(args, fake_path(), A100)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["node"] == "node-0"
    assert doc["ok"] is True, doc["failed"]
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["fabric_devices"]["value"] == [f"rdmap{16 + i}s27" for i in range(4)]
    assert checks["fabric_manager"]["value"] == "535.129.03"
    assert len(doc["gpus"]) == 8


def test_script_on_faulty_h100_fixture_reports_and_exits_zero(tmp_path):
    sysfs = make_sysfs(tmp_path, ib=("4: ACTIVE",) * 8)
    args = ["--expect-gpus=8", "--fabric=infiniband", "--expect-fabric-devices=8", "--nvswitch"]
    args += ["--skip-probes", f"--sysfs-root={sysfs}"]
    proc = run_script(args, fake_path(), FIXTURES / "h100-sxm5-80gb-ecc-remap")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False
    assert sorted(doc["failed"]) == ["ecc", "memory_repair"]


def test_script_when_nvidia_smi_fails(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()  # a fixture directory without files: every nvidia-smi call fails
    proc = run_script(["--expect-gpus=8", "--skip-probes"], fake_path(), broken)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False
    assert "couldn't communicate with the NVIDIA driver" in doc["checks"][0]["detail"]


def test_script_on_the_sandbox(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()  # no nvidia-smi, no docker on PATH: a CPU-only sandbox node
    proc = run_script(["--expect-gpus=0", f"--sysfs-root={tmp_path}"], str(empty))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True
    assert doc["checks"] == [
        {
            "name": "gpu_count",
            "ok": True,
            "detail": "no GPUs expected (sandbox)",
            "value": 0,
            "expected": 0,
        }
    ]


def test_internal_error_exits_2(hc, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("simulated")

    monkeypatch.setattr(hc, "gather", boom)
    assert hc.main(["--expect-gpus=0"]) == 2
    assert "internal error: RuntimeError: simulated" in capsys.readouterr().err


# --- the scripts themselves -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["health_check.py", "allreduce_probe.py"])
def test_scripts_parse_as_python_38(name):
    source = (ROOT / "scripts" / name).read_text()
    ast.parse(source, filename=name, feature_version=(3, 8))


def test_fixtures_match_their_generator():
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_fixtures
    finally:
        sys.path.remove(str(FIXTURES))
    generated = make_fixtures.all_files()
    committed = {
        str(p.relative_to(FIXTURES)): p.read_text()
        for p in FIXTURES.glob("*/*")
        if p.parent.name != "bin"
    }
    assert sorted(generated) == sorted(committed)
    stale = [rel for rel, text in generated.items() if committed[rel] != text]
    assert stale == [], "rerun tests/fixtures/nvidia-smi/make_fixtures.py"


@pytest.mark.torch
def test_probes_without_cuda_are_skipped_with_reason(hc):
    torch = pytest.importorskip("torch")
    result = hc.run_probes(1, seconds=0.05)
    if torch.cuda.is_available():
        assert result.tflops and result.gbs and min(result.tflops) > 0
    else:
        assert result.skipped == "torch sees no CUDA device"


# The health gate refuses a node whose NCCL falls back to sockets on a fabric (issue 19, item 6).
# Log lines recorded from NCCL runs: "Using network Socket" after "NET/IB : No device found."
# (NVIDIA/nccl#352, NCCL 2.4.8 shape; "Using network <name>" is NCCL's src/init.cc INFO line), the
# NET/Plugin load failure (NVIDIA/nccl#1504, NCCL 2.21.5), and a loaded aws-ofi-nccl (its
# "Loaded net plugin AWS Libfabric" line, as in tests/scripts/test_allreduce_probe.py).
SOCKET_AFTER_PLUGIN_FAILED = (
    "h:26023:26023 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot "
    "open shared object file: No such file or directory : when loading libnccl-net.so\n"
    "h:26023:26023 [0] NCCL INFO NET/Plugin: Using internal network plugin.\n"
    "h:26023:26023 [0] NCCL INFO NET/IB : No device found.\n"
    "h:26023:26023 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.2.7<0>\n"
    "h:26023:26023 [0] NCCL INFO Using network Socket\n"
)
EFA_LOADED = (
    "h:7614:7691 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v6)\n"
    "h:7614:7691 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)\n"
    "h:7614:7691 [0] NCCL INFO Using network AWS Libfabric\n"
)
IB_LOADED = (
    "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
    "h:1:1 [0] NCCL INFO Using network IB\n"
)
TCPX_LOADED = "h:1:1 [0] NCCL INFO Using network GPUDirectTCPX_v7\n"
# The HPC-X SHARP plugin (nccl-rdma-sharp-plugins), which gpufleet loads on infiniband: lines as
# NVIDIA/nccl#1357 records them (also #1029: "Using network IBext").
IB_SHARP_LOADED = (
    "h:1:1 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)\n"
    "h:1:1 [0] NCCL INFO NET/Plugin: Loaded collnet plugin SHARP (v6)\n"
    "h:1:1 [0] NCCL INFO P2P plugin IBext\n"
    "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/IB/SHARP [RO]; "
    "OOB ibp25s0:10.20.0.119<0>\n"
    "h:1:1 [0] NCCL INFO Using network IBext\n"
)


@pytest.mark.parametrize("fabric", ["efa", "infiniband", "tcpx"])
def test_nccl_on_sockets_fails_the_node_check_on_a_fabric(hc, fabric):
    facts = hc.NodeFacts(nccl_log=SOCKET_AFTER_PLUGIN_FAILED)
    check = hc.check_nccl_network(facts, hc.Expect(gpus=8, fabric=fabric, nodes=2))
    assert not check.ok and check.value == "socket" and check.expected == fabric
    assert check.detail.startswith(f"NCCL fell back to sockets (NET/Socket) instead of {fabric}")
    assert "NCCL said: Plugin load returned 2 : libnccl-net.so: cannot open" in check.detail


@pytest.mark.parametrize(
    ("fabric", "log"),
    [
        ("efa", EFA_LOADED),
        ("infiniband", IB_LOADED),
        ("infiniband", IB_SHARP_LOADED),
        ("tcpx", TCPX_LOADED),
    ],
)
def test_nccl_on_the_fabric_passes(hc, fabric, log):
    check = hc.check_nccl_network(
        hc.NodeFacts(nccl_log=log), hc.Expect(gpus=8, fabric=fabric, nodes=2)
    )
    assert check.ok and check.value == fabric


def test_nccl_network_check_applies_to_multi_node_fabric_clusters_only(hc):
    facts = hc.NodeFacts(nccl_log=SOCKET_AFTER_PLUGIN_FAILED)
    assert hc.check_nccl_network(facts, hc.Expect(gpus=8, fabric="efa", nodes=1)) is None
    assert hc.check_nccl_network(facts, hc.Expect(gpus=8, fabric="none", nodes=2)) is None
    skipped = hc.check_nccl_network(
        hc.NodeFacts(nccl_skipped="torch not importable"), hc.Expect(gpus=8, fabric="efa", nodes=2)
    )
    assert skipped.ok and skipped.detail == "skipped: torch not importable"


def test_nccl_log_is_gathered_in_a_login_shell_with_nccl_debug(hc):
    """The job's environment (profile.d puts the plugin on LD_LIBRARY_PATH), NCCL_DEBUG=INFO."""
    seen = []

    def run(argv, timeout=60.0):
        seen.append(argv)
        return 1, "", "ModuleNotFoundError: No module named 'torch'"

    facts = hc.NodeFacts(gpus=[object()])
    hc.gather_nccl_log(facts, run)
    (argv,) = seen
    assert argv[:2] == ["bash", "-lc"] and "NCCL_DEBUG=INFO" in argv[2]
    assert "NCCL_DEBUG_SUBSYS=INIT,NET" in argv[2]
    assert facts.nccl_log is None and facts.nccl_skipped == "torch not importable"


def test_gate_fails_on_a_broken_efa_container(hc):
    """Issue 21: an EFA cluster whose rank container got no uverbs device. Real: the node check
    (health_check.report), gpufleet.jobs.health.parse_report and UnhealthyCluster, which the
    `run --health-gate` hook raises. Faked: the NCCL log, made of lines NCCL and aws-ofi-nccl
    print in containers (aws/aws-ofi-nccl#1020: fi_getinfo fails without the devices, then NCCL's
    NET/Socket lines; see tests/scripts/test_allreduce_probe.py)."""
    from gpufleet.jobs.health import UnhealthyCluster, parse_report
    from tests.scripts.test_allreduce_probe import CONTAINER_NO_UVERBS_LOG

    # /sys/class/infiniband shows the host's 4 EFA devices inside a container too: the device
    # count passes, and only NCCL's own log shows that the container cannot open them.
    efa = [hc.RdmaDevice(f"rdmap{i}s0", driver="efa") for i in range(4)]
    expect = hc.Expect(gpus=0, fabric="efa", nodes=2, fabric_devices=4, container_check=False)
    facts = hc.NodeFacts(rdma=efa, nccl_log=CONTAINER_NO_UVERBS_LOG)
    checks = {c.name: c for c in hc.evaluate(facts, expect)}
    doc = {"ok": all(c.ok for c in checks.values()), "checks": [vars(c) for c in checks.values()]}
    node = parse_report("node-0", 0, json.dumps(doc), None)
    err = UnhealthyCluster("c1", [node])
    print(err)
    assert checks["fabric_devices"].ok
    assert not node.ok and checks["nccl_network"].value == "socket"
    assert "NCCL fell back to sockets (NET/Socket) instead of efa" in str(err)
    assert "NCCL said: NET/OFI OFI fi_getinfo() call failed: No data available" in str(err)
    assert err.exit_code == 5


def test_node_check_fails_on_aws_ofi_nccl_over_libfabric_tcp(hc):
    """A container without the EFA devices and FI_PROVIDER unset: "Using network Libfabric", but
    on libfabric's tcp provider (aws/aws-ofi-nccl#803). Before issue 21 this passed as efa."""
    from tests.scripts.test_allreduce_probe import CONTAINER_OFI_TCP_LOG

    check = hc.check_nccl_network(
        hc.NodeFacts(nccl_log=CONTAINER_OFI_TCP_LOG), hc.Expect(gpus=8, fabric="efa", nodes=2)
    )
    assert not check.ok and check.value == "libfabric-tcp"
    assert "aws-ofi-nccl on libfabric's tcp provider, not efa" in check.detail


def test_in_container_checks_what_the_ranks_see_without_the_hosts_tools(tmp_path):
    """Faked: nvidia-smi (8 x A100 NVSwitch fixture), the only tool in the "image": no
    nv-fabricmanager, no docker, no EFA devices in its /sys. --in-container passes there;
    the same node checked as a whole in that place fails on the host's tools."""
    image_bin = tmp_path / "bin"
    image_bin.mkdir()
    (image_bin / "nvidia-smi").symlink_to(FIXTURES / "bin" / "nvidia-smi")
    path = f"{image_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
    args = ["--expect-gpus=8", "--expect-model=A100", "--expect-memory-gib=40", "--fabric=efa"]
    args += ["--nvswitch", "--expect-fabric-devices=4", "--skip-probes", "--nodes=2"]
    args += ["--skip-nccl-network", f"--sysfs-root={tmp_path}"]
    whole = json.loads(run_script(args, path, A100).stdout)
    assert {"fabric_manager", "container_runtime", "fabric_devices"} <= set(whole["failed"])
    proc = run_script([*args, "--in-container"], path, A100)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    print(doc["failed"], [c["name"] for c in doc["checks"]])
    assert doc["ok"] is True, doc["failed"]
    assert [c["name"] for c in doc["checks"]] == ["gpu_count", "gpu_model", "gpu_memory"]
    assert doc["expected"]["in_container"] is True
