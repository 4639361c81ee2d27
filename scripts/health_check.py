#!/usr/bin/env python3
"""Node health check: GPUs, driver, Fabric Manager, ECC, NVLink, fabric, docker; one JSON."""

# Runs ON a node with whatever Python it has: standard library only, Python 3.8 syntax, torch
# only when importable. Parsing and verdicts are pure functions (tested on fixtures); `gather` is
# the only part that runs commands or reads /sys. Exit 0 whenever the check could run (the
# verdict is in the JSON); exit 2 on an internal error.

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Callable

SCHEMA = 1
FABRICS = ("efa", "infiniband", "tcpx", "tcpxo", "none")

# `nvidia-smi --query-gpu=<these> --format=csv,noheader,nounits`; names from `--help-query-gpu`.
QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "memory.total",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
)


# ---------------------------------------------------------------------------------------------
# GPU model table: peak dense (no sparsity) tensor throughput and device memory bandwidth.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    """Published peaks of one GPU model, used to judge the probes."""

    key: str
    pattern: str  # regular expression matched against nvidia-smi's product name
    peak_tflops: float  # dense tensor-core TFLOPS in `dtype` (datasheets quote 2x "with sparsity")
    peak_gbs: float  # device memory bandwidth, GB/s (10^9 bytes/s)
    dtype: str  # "bfloat16", or "float16" on GPUs without bf16 tensor cores
    nvlinks: int  # NVLink links per GPU on NVSwitch (HGX) boards; 0 = not checked by default
    source: str


GPU_SPECS = (
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf):
    # BF16 312 TFLOPS (624 with sparsity); 40GB HBM2 1,555 GB/s; 80GB HBM2e SXM 2,039 GB/s.
    # 12 NVLink links per A100 (`nvidia-smi nvlink -s` on p4d/p4de shows Link 0..11 at 25 GB/s).
    GpuSpec("A100-SXM4-80GB", r"A100[- ]SXM4?[- ]80GB", 312.0, 2039.0, "bfloat16", 12, "A100 ds"),
    GpuSpec("A100-SXM4-40GB", r"A100[- ]SXM4?[- ]40GB", 312.0, 1555.0, "bfloat16", 12, "A100 ds"),
    GpuSpec("A100-PCIE-80GB", r"A100[- ]PCIE[- ]80GB", 312.0, 1935.0, "bfloat16", 0, "A100 ds"),
    GpuSpec("A100-PCIE-40GB", r"A100[- ]PCIE[- ]40GB", 312.0, 1555.0, "bfloat16", 0, "A100 ds"),
    # NVIDIA H100 Tensor Core GPU datasheet: SXM BF16 1,979 TFLOPS with sparsity (989.4 dense),
    # 3.35 TB/s; PCIe 1,513 with sparsity (756 dense), 2.0 TB/s. 18 NVLink4 links on SXM5.
    # nvidia-smi names the SXM5 part "NVIDIA H100 80GB HBM3".
    GpuSpec("H100-SXM", r"H100 80GB HBM3|H100[- ]SXM", 989.4, 3350.0, "bfloat16", 18, "H100 ds"),
    GpuSpec("H100-PCIE", r"H100 PCIe", 756.0, 2000.0, "bfloat16", 0, "H100 ds"),
    # NVIDIA H200 datasheet: same tensor peaks as H100 SXM, 4.8 TB/s HBM3e.
    GpuSpec("H200", r"H200", 989.4, 4800.0, "bfloat16", 18, "H200 ds"),
    # NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity (121 dense), 300 GB/s GDDR6.
    GpuSpec("L4", r"\bL4\b", 121.0, 300.0, "bfloat16", 0, "L4 ds"),
    # A10G is an AWS-only SKU with no NVIDIA datasheet (unconfirmed). The A10 datasheet's 125 TFLOPS
    # does not match A10G measurements (bf16 matmul 66-69 TFLOPS at n=8192..10240, reported in
    # github.com/zzc0721/torch-performance-test-data/issues/126), so 70 is used; 600 GB/s GDDR6.
    GpuSpec("A10G", r"\bA10G\b", 70.0, 600.0, "bfloat16", 0, "A10G unconfirmed"),
    # NVIDIA A10 datasheet: BF16 125 TFLOPS (250 with sparsity), 600 GB/s.
    GpuSpec("A10", r"\bA10\b", 125.0, 600.0, "bfloat16", 0, "A10 ds"),
    # NVIDIA T4 datasheet: mixed precision (FP16/FP32) 65 TFLOPS, 320 GB/s; Turing has no bf16.
    GpuSpec("T4", r"\bT4\b", 65.0, 320.0, "float16", 0, "T4 ds"),
    # NVIDIA V100 datasheet: SXM2 tensor 125 TFLOPS, PCIe 112 TFLOPS, 900 GB/s; Volta has no bf16.
    GpuSpec("V100-SXM2", r"V100-SXM2", 125.0, 900.0, "float16", 0, "V100 ds"),
    GpuSpec("V100", r"V100", 112.0, 900.0, "float16", 0, "V100 ds"),
)


def gpu_spec(product_name: str) -> GpuSpec | None:
    """The first spec whose pattern matches nvidia-smi's product name, or None."""
    for spec in GPU_SPECS:
        if re.search(spec.pattern, product_name, re.IGNORECASE):
            return spec
    return None


# ---------------------------------------------------------------------------------------------
# Facts: what was observed on the node (filled by parsers, then by `gather`).
# ---------------------------------------------------------------------------------------------


@dataclass
class Gpu:
    """One GPU as nvidia-smi reports it; None where the source did not say."""

    index: int
    bus_id: str
    name: str = ""
    uuid: str = ""
    memory_mib: int | None = None
    persistence: str | None = None  # "Enabled" / "Disabled"
    ecc_mode: str | None = None
    volatile_uncorrectable: int | None = None
    aggregate_uncorrectable: int | None = None
    sram_threshold_exceeded: bool | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None


@dataclass
class SmiLog:
    """The parts of `nvidia-smi -q -x` the checks use."""

    driver_version: str | None
    cuda_version: str | None
    gpus: list[Gpu]


@dataclass
class Link:
    """One NVLink of one GPU; gbps is None when the link is inactive."""

    link: int
    gbps: float | None


@dataclass
class RdmaDevice:
    """One entry of /sys/class/infiniband with what sysfs says about it."""

    name: str
    driver: str | None = None  # basename of device/driver
    link_layers: list[str] = field(default_factory=list)  # per port: InfiniBand / Ethernet
    states: list[str] = field(default_factory=list)  # per port: e.g. "4: ACTIVE"


@dataclass
class ProbeResult:
    """Torch probes on the GPUs: per-GPU TFLOPS and GB/s, or why they did not run."""

    skipped: str = ""
    dtype: str = ""
    tflops: list[float] = field(default_factory=list)
    gbs: list[float] = field(default_factory=list)


@dataclass
class NodeFacts:
    """Everything observed on the node; `evaluate` turns it into checks."""

    smi_found: bool = False
    smi_error: str = ""
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    nvlink: dict[int, list[Link]] | None = None
    nvlink_error: str = ""
    fabric_manager_version: str | None = None
    fabric_manager_error: str = ""
    rdma: list[RdmaDevice] = field(default_factory=list)
    net_interfaces: list[str] = field(default_factory=list)
    docker_runtimes: list[str] | None = None
    docker_error: str = ""
    container_gpus: int | None = None
    container_error: str = ""
    probes: ProbeResult | None = None
    nccl_log: str | None = None  # NCCL_DEBUG=INFO output of a one-rank NCCL init on this node
    nccl_skipped: str = ""  # why it did not run (no torch, no CUDA)


@dataclass
class Expect:
    """What this node should be (from the catalog, passed on the command line)."""

    gpus: int
    model: str = ""
    memory_gib: float | None = None
    driver: str = ""
    fabric: str = "none"
    nvswitch: bool = False
    nvlinks: int | None = None
    fabric_devices: int | None = None
    container_check: bool = True
    container_probe: bool = False
    container_image: str = "ubuntu:22.04"  # the NVIDIA runtime mounts nvidia-smi into any image
    probes: bool = True
    min_gemm_fraction: float = 0.5
    min_bandwidth_fraction: float = 0.6
    nodes: int = 1  # nodes in the cluster: with one, the inter-node fabric is never used
    nccl_network: bool = True
    # inside the run's container: only what the ranks see there (IN_CONTAINER); the host's
    # driver, Fabric Manager, container runtime and devices are checked on the host itself
    in_container: bool = False


@dataclass
class Check:
    """One verdict line of the report."""

    name: str
    ok: bool
    detail: str
    value: object = None
    expected: object = None


# ---------------------------------------------------------------------------------------------
# Parsers (pure).
# ---------------------------------------------------------------------------------------------

_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "unknown error"}


def _text(value: str | None) -> str | None:
    """Stripped text, or None for nvidia-smi's not-available spellings."""
    if value is None:
        return None
    value = value.strip()
    return None if value.lower() in _NA else value


def _int(value: str | None) -> int | None:
    """The leading integer of a value such as '40960 MiB' or '0', or None."""
    value = _text(value)
    if value is None:
        return None
    match = re.match(r"-?\d+", value)
    return int(match.group(0)) if match else None


def _yes(value: str | None) -> bool | None:
    """Yes/No (and Enabled/Disabled) as a bool, or None when not reported."""
    value = _text(value)
    if value is None:
        return None
    return value.lower() in ("yes", "enabled", "true", "active")


def parse_query_gpu_csv(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> list[Gpu]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` as Gpus."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(f"expected {len(fields)} columns, got {len(cells)}: {line!r}")
        row = dict(zip(fields, cells))
        index = _int(row.get("index"))
        gpus.append(
            Gpu(
                index=len(gpus) if index is None else index,
                bus_id=row.get("pci.bus_id", ""),
                name=row.get("name", ""),
                uuid=row.get("uuid", ""),
                memory_mib=_int(row.get("memory.total")),
                persistence=_text(row.get("persistence_mode")),
                ecc_mode=_text(row.get("ecc.mode.current")),
                volatile_uncorrectable=_int(row.get("ecc.errors.uncorrected.volatile.total")),
                aggregate_uncorrectable=_int(row.get("ecc.errors.uncorrected.aggregate.total")),
            )
        )
    return gpus


def csv_driver_version(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> str | None:
    """The driver version column of the first --query-gpu CSV row, or None."""
    if "driver_version" not in fields:
        return None
    for line in text.splitlines():
        if line.strip():
            return _text(line.split(",")[fields.index("driver_version")])
    return None


def _find(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    return None if found is None else (found.text or "")


def _uncorrectable(scope: ET.Element | None) -> int | None:
    """Sum of uncorrectable ECC counters under <volatile> or <aggregate>, across driver layouts.

    R470 and older: <double_bit><total>; R510+ on Ampere: <sram_uncorrectable>,
    <dram_uncorrectable>; Hopper: <sram_uncorrectable_parity>, <sram_uncorrectable_secded>.
    """
    if scope is None:
        return None
    total = _int(_find(scope, "double_bit/total"))
    if total is not None:
        return total
    counts = [
        _int(child.text)
        for child in scope
        if "uncorrectable" in child.tag and not child.tag.endswith("_sources")
    ]
    known = [count for count in counts if count is not None]
    return sum(known) if known else None


def parse_nvidia_smi_xml(text: str) -> SmiLog:
    """`nvidia-smi -q -x` output as driver/CUDA versions and per-GPU health fields."""
    root = ET.fromstring(text)
    gpus = []
    for index, node in enumerate(root.findall("gpu")):
        ecc = node.find("ecc_errors")
        retired = node.find("retired_pages")
        remap = node.find("remapped_rows")
        gpus.append(
            Gpu(
                index=index,
                bus_id=node.get("id", ""),
                name=(_find(node, "product_name") or "").strip(),
                uuid=(_find(node, "uuid") or "").strip(),
                memory_mib=_int(_find(node, "fb_memory_usage/total")),
                persistence=_text(_find(node, "persistence_mode")),
                ecc_mode=_text(_find(node, "ecc_mode/current_ecc")),
                volatile_uncorrectable=_uncorrectable(
                    None if ecc is None else ecc.find("volatile")
                ),
                aggregate_uncorrectable=_uncorrectable(
                    None if ecc is None else ecc.find("aggregate")
                ),
                sram_threshold_exceeded=(
                    None if ecc is None else _yes(_find(ecc, "aggregate/sram_threshold_exceeded"))
                ),
                retired_sbe=(
                    None
                    if retired is None
                    else _int(_find(retired, "multiple_single_bit_retirement/retired_count"))
                ),
                retired_dbe=(
                    None
                    if retired is None
                    else _int(_find(retired, "double_bit_retirement/retired_count"))
                ),
                retired_pending=(
                    None
                    if retired is None
                    else (
                        _yes(_find(retired, "pending_retirement"))
                        or _yes(_find(retired, "pending_blacklist"))
                    )
                ),
                remapped_uncorrectable=(
                    None if remap is None else _int(_find(remap, "remapped_row_unc"))
                ),
                remap_pending=None if remap is None else _yes(_find(remap, "remapped_row_pending")),
                remap_failure=None if remap is None else _yes(_find(remap, "remapped_row_failure")),
                fabric_state=_text(_find(node, "fabric/state")),
                fabric_status=_text(_find(node, "fabric/status")),
            )
        )
    return SmiLog(
        driver_version=_text(_find(root, "driver_version")),
        cuda_version=_text(_find(root, "cuda_version")),
        gpus=gpus,
    )


def parse_nvidia_smi_query(text: str) -> list[Gpu]:
    """GPUs from either `nvidia-smi -q -x` (XML) or `--query-gpu ... --format=csv` output."""
    if text.lstrip().startswith("<"):
        return parse_nvidia_smi_xml(text).gpus
    return parse_query_gpu_csv(text)


def merge_gpus(csv_gpus: list[Gpu], xml_gpus: list[Gpu]) -> list[Gpu]:
    """CSV rows completed with the XML's extra fields, matched by PCI bus id (XML if no CSV)."""
    if not csv_gpus:
        return list(xml_gpus)
    by_bus = {gpu.bus_id.upper(): gpu for gpu in xml_gpus}
    merged = []
    for gpu in csv_gpus:
        extra = by_bus.get(gpu.bus_id.upper())
        if extra is not None:
            values = asdict(gpu)
            for key, value in asdict(extra).items():
                if values.get(key) in (None, "") and value not in (None, ""):
                    values[key] = value
            gpu = Gpu(**values)
        merged.append(gpu)
    return merged


_NVLINK_GPU = re.compile(r"^GPU (\d+):")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")


def parse_nvlink_status(text: str) -> dict[int, list[Link]]:
    """`nvidia-smi nvlink --status`: GPU index -> its links (speed in GB/s, None if inactive)."""
    result: dict[int, list[Link]] = {}
    current = None
    for line in text.splitlines():
        gpu = _NVLINK_GPU.match(line)
        if gpu:
            current = int(gpu.group(1))
            result[current] = []
            continue
        link = _NVLINK_LINK.match(line)
        if link and current is not None:
            speed = re.match(r"([\d.]+)\s*GB/s", link.group(2))
            result[current].append(
                Link(int(link.group(1)), float(speed.group(1)) if speed else None)
            )
    return result


def parse_fabric_manager_version(text: str) -> str | None:
    """The version in `nv-fabricmanager --version` ("Fabric Manager version is : 535.161.08")."""
    match = re.search(r"version is\s*:?\s*(\d+(?:\.\d+)+)", text, re.IGNORECASE)
    return match.group(1) if match else None


def parse_package_version(text: str) -> str | None:
    """The upstream version of `dpkg-query -W -f='${Version}'` output ("535.161.08-1" -> ...)."""
    match = re.match(r"\s*(?:\d+:)?(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def parse_docker_runtimes(text: str) -> list[str]:
    """Runtime names from `docker info --format '{{json .Runtimes}}'` (or plain `docker info`)."""
    text = text.strip()
    if text.startswith("{"):
        return sorted(json.loads(text))
    for line in text.splitlines():
        if line.strip().startswith("Runtimes:"):
            return sorted(line.split(":", 1)[1].split())
    return []


def count_listed_gpus(text: str) -> int:
    """GPUs in `nvidia-smi -L` output ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: ...)")."""
    return sum(1 for line in text.splitlines() if re.match(r"^GPU \d+:", line))


def classify_rdma(devices: list[RdmaDevice]) -> dict[str, list[str]]:
    """RDMA devices by kind: EFA, InfiniBand (link layer IB and port ACTIVE), or other.

    EFA devices are named efa_N by older rdma-core and rdmapXsY by newer (libfabric PR 5521);
    the driver link (device/driver -> efa) decides when sysfs has it.
    """
    kinds: dict[str, list[str]] = {"efa": [], "infiniband": [], "infiniband_down": [], "other": []}
    for dev in devices:
        if dev.driver == "efa" or (dev.driver is None and dev.name.startswith(("efa", "rdmap"))):
            kinds["efa"].append(dev.name)
        elif any(layer.lower() == "infiniband" for layer in dev.link_layers) or (
            not dev.link_layers and dev.name.startswith("mlx5_")
        ):
            active = not dev.states or any("ACTIVE" in state.upper() for state in dev.states)
            kinds["infiniband" if active else "infiniband_down"].append(dev.name)
        else:
            kinds["other"].append(dev.name)
    return kinds


# ---------------------------------------------------------------------------------------------
# Verdicts (pure).
# ---------------------------------------------------------------------------------------------


def _gpu_list(indices: list[int], total: int = 0) -> str:
    """'GPU 1, GPU 3', or 'all 8 GPUs' when every GPU is named."""
    if total > 1 and len(indices) == total:
        return f"all {total} GPUs"
    return ", ".join(f"GPU {i}" for i in indices)


def check_gpu_count(facts: NodeFacts, expect: Expect) -> Check:
    """GPU count versus expected; the sandbox (0 expected, none present) passes with its reason."""
    found = len(facts.gpus)
    if expect.gpus == 0 and found == 0:
        return Check("gpu_count", True, "no GPUs expected (sandbox)", 0, 0)
    if not facts.smi_found:
        return Check(
            "gpu_count",
            False,
            f"nvidia-smi not found: expected {expect.gpus} GPUs (is the NVIDIA driver installed?)",
            0,
            expect.gpus,
        )
    if facts.smi_error and not facts.gpus:
        return Check("gpu_count", False, f"nvidia-smi failed: {facts.smi_error}", 0, expect.gpus)
    ok = found == expect.gpus
    detail = f"{found} GPUs" if ok else f"found {found} GPUs, expected {expect.gpus}"
    return Check("gpu_count", ok, detail, found, expect.gpus)


def check_gpu_model(facts: NodeFacts, expect: Expect) -> Check | None:
    """Every GPU's product name contains the expected model substring."""
    if not expect.model or not facts.gpus:
        return None
    names = sorted({gpu.name for gpu in facts.gpus})
    wrong = [gpu.index for gpu in facts.gpus if expect.model.lower() not in gpu.name.lower()]
    if wrong:
        detail = f"{_gpu_list(wrong, len(facts.gpus))} not {expect.model!r}: {', '.join(names)}"
        return Check("gpu_model", False, detail, names, expect.model)
    return Check("gpu_model", True, ", ".join(names), names, expect.model)


def check_gpu_memory(facts: NodeFacts, expect: Expect) -> Check | None:
    """Each GPU's memory within 10% of the catalog's GiB (ECC and reservations take a little)."""
    if expect.memory_gib is None or not facts.gpus:
        return None
    sizes = [None if g.memory_mib is None else round(g.memory_mib / 1024, 1) for g in facts.gpus]
    low, high = 0.9 * expect.memory_gib, 1.1 * expect.memory_gib
    wrong = [g.index for g, gib in zip(facts.gpus, sizes) if gib is None or not low <= gib <= high]
    if wrong:
        seen = sorted({str(size) for size in sizes})
        detail = (
            f"{_gpu_list(wrong, len(facts.gpus))} have {'/'.join(seen)} GiB, "
            f"expected ~{expect.memory_gib} GiB"
        )
        return Check("gpu_memory", False, detail, sizes, expect.memory_gib)
    return Check("gpu_memory", True, f"{min(sizes)} GiB per GPU", sizes, expect.memory_gib)


def check_driver(facts: NodeFacts, expect: Expect) -> Check | None:
    """A driver version is reported (and starts with the pinned one, when given)."""
    if not facts.gpus:
        return None
    version = facts.driver_version
    if version is None:
        return Check("driver", False, "driver version not reported", None, expect.driver or None)
    if expect.driver and not (version == expect.driver or version.startswith(expect.driver + ".")):
        return Check(
            "driver", False, f"driver {version}, expected {expect.driver}", version, expect.driver
        )
    return Check("driver", True, f"driver {version}", version, expect.driver or None)


def check_fabric_manager(facts: NodeFacts, expect: Expect) -> Check | None:
    """NVSwitch systems: Fabric Manager present, same version as the driver, GPUs registered."""
    if not expect.nvswitch or not facts.gpus:
        return None
    fm, driver = facts.fabric_manager_version, facts.driver_version
    problems = []
    if fm is None:
        problems.append(
            "Fabric Manager not found; NVSwitch GPUs fail CUDA init (error 802) without it"
            + (f" ({facts.fabric_manager_error})" if facts.fabric_manager_error else "")
        )
    elif fm != driver:
        problems.append(f"Fabric Manager {fm} does not match driver {driver}; they must be equal")
    # Hopper and later report NVLink fabric registration per GPU; Ampere reports N/A.
    pending = [g.index for g in facts.gpus if g.fabric_state not in (None, "Completed")]
    if pending:
        states = sorted({str(g.fabric_state) for g in facts.gpus if g.index in pending})
        problems.append(
            f"{_gpu_list(pending, len(facts.gpus))} NVLink fabric state {', '.join(states)} "
            "(expected Completed): is nvidia-fabricmanager running?"
        )
    if problems:
        return Check("fabric_manager", False, "; ".join(problems), fm, driver)
    return Check("fabric_manager", True, f"Fabric Manager {fm} matches the driver", fm, driver)


def check_ecc(facts: NodeFacts, expect: Expect) -> Check | None:
    """No uncorrectable ECC errors since the driver loaded; SRAM threshold not exceeded."""
    if not facts.gpus:
        return None
    volatile = {g.index: g.volatile_uncorrectable for g in facts.gpus if g.volatile_uncorrectable}
    sram = [g.index for g in facts.gpus if g.sram_threshold_exceeded]
    aggregate = {
        g.index: g.aggregate_uncorrectable for g in facts.gpus if g.aggregate_uncorrectable
    }
    problems = []
    if volatile:
        problems.append(
            "uncorrectable ECC errors since driver load: "
            + ", ".join(f"GPU {i}: {n}" for i, n in sorted(volatile.items()))
        )
    if sram:
        problems.append(f"SRAM uncorrectable threshold exceeded on {_gpu_list(sram)}")
    value = {"volatile_uncorrectable": volatile, "aggregate_uncorrectable": aggregate}
    if problems:
        return Check("ecc", False, "; ".join(problems), value, 0)
    disabled = [g.index for g in facts.gpus if g.ecc_mode and g.ecc_mode.lower() == "disabled"]
    detail = "no uncorrectable ECC errors"
    if aggregate:
        detail += f" (lifetime counts {aggregate})"
    if disabled:
        detail += f"; ECC disabled on {_gpu_list(disabled)}"
    return Check("ecc", True, detail, value, 0)


def check_memory_repair(facts: NodeFacts, expect: Expect) -> Check | None:
    """Row remapping (A100+) and page retirement (older GPUs): nothing pending, nothing failed.

    A pending remap needs a GPU reset; a remapping failure is an RMA condition
    (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt).
    """
    if not facts.gpus:
        return None
    failed = [g.index for g in facts.gpus if g.remap_failure]
    pending = [g.index for g in facts.gpus if g.remap_pending]
    retire = [g.index for g in facts.gpus if g.retired_pending]
    value = {
        "remapped_uncorrectable": {
            g.index: g.remapped_uncorrectable for g in facts.gpus if g.remapped_uncorrectable
        },
        "retired_pages": {
            g.index: (g.retired_sbe or 0) + (g.retired_dbe or 0)
            for g in facts.gpus
            if g.retired_sbe or g.retired_dbe
        },
    }
    problems = []
    if failed:
        problems.append(f"row remapping failed on {_gpu_list(failed)} (replace the GPU)")
    if pending:
        problems.append(f"row remapping pending on {_gpu_list(pending)} (reset the GPU)")
    if retire:
        problems.append(f"page retirement pending on {_gpu_list(retire)} (reboot)")
    if problems:
        return Check("memory_repair", False, "; ".join(problems), value, "none pending")
    return Check("memory_repair", True, "no pending or failed row remaps", value, "none pending")


def check_persistence(facts: NodeFacts, expect: Expect) -> Check | None:
    """Persistence mode on for every GPU (nvidia-persistenced)."""
    if not facts.gpus:
        return None
    off = [g.index for g in facts.gpus if (g.persistence or "").lower() != "enabled"]
    if off:
        detail = (
            f"persistence mode off on {_gpu_list(off, len(facts.gpus))}: enable nvidia-persistenced"
        )
        return Check("persistence_mode", False, detail, len(facts.gpus) - len(off), "all")
    return Check("persistence_mode", True, "enabled on every GPU", len(facts.gpus), "all")


def expected_nvlinks(facts: NodeFacts, expect: Expect) -> int | None:
    """Links per GPU to expect: the caller's number, else the model's on NVSwitch boards."""
    if expect.nvlinks is not None:
        return expect.nvlinks
    if expect.nvswitch and facts.gpus:
        spec = gpu_spec(facts.gpus[0].name)
        if spec is not None and spec.nvlinks:
            return spec.nvlinks
    return None


def check_nvlink(facts: NodeFacts, expect: Expect) -> Check | None:
    """Every GPU has the expected active NVLinks, none inactive, none below the top speed."""
    want = expected_nvlinks(facts, expect)
    if want is None or not facts.gpus:
        return None
    if facts.nvlink is None:
        detail = "NVLink status unavailable" + (
            f": {facts.nvlink_error}" if facts.nvlink_error else ""
        )
        return Check("nvlink", False, detail, None, want)
    speeds = [lk.gbps for links in facts.nvlink.values() for lk in links if lk.gbps is not None]
    top = max(speeds) if speeds else None
    problems = []
    active_counts = {}
    for gpu in facts.gpus:
        links = facts.nvlink.get(gpu.index, [])
        inactive = [lk.link for lk in links if lk.gbps is None]
        slow = [lk.link for lk in links if lk.gbps is not None and top and lk.gbps < 0.95 * top]
        active = sum(1 for lk in links if lk.gbps is not None)
        active_counts[gpu.index] = active
        if active < want:
            problems.append(f"GPU {gpu.index}: {active}/{want} links active")
        if inactive:
            problems.append(f"GPU {gpu.index}: links {inactive} inactive")
        if slow:
            problems.append(f"GPU {gpu.index}: links {slow} below {top} GB/s")
    if problems:
        return Check("nvlink", False, "; ".join(problems), active_counts, want)
    return Check("nvlink", True, f"{want} links per GPU at {top} GB/s", active_counts, want)


_FABRIC_DEFAULT_DEVICES = {"efa": 1, "infiniband": 1, "tcpx": 5, "tcpxo": 9}


def check_fabric_devices(facts: NodeFacts, expect: Expect) -> Check | None:
    """The fabric's devices are present: EFA or IB under /sys/class/infiniband, NICs for TCPX."""
    if expect.fabric == "none":
        return None
    want = expect.fabric_devices or _FABRIC_DEFAULT_DEVICES[expect.fabric]
    kinds = classify_rdma(facts.rdma)
    if expect.fabric == "efa":
        found, what = kinds["efa"], "EFA devices in /sys/class/infiniband"
    elif expect.fabric == "infiniband":
        found, what = kinds["infiniband"], "active InfiniBand ports in /sys/class/infiniband"
    else:  # GPUDirect-TCPX(O): one gVNIC per GPU pair (A3 High) or per GPU (A3 Mega) + primary
        found, what = facts.net_interfaces, "network interfaces in /sys/class/net"
    ok = len(found) >= want
    detail = f"{len(found)} {what} (need {want})"
    if kinds["infiniband_down"] and expect.fabric == "infiniband":
        detail += f"; not ACTIVE: {', '.join(kinds['infiniband_down'])}"
    if not ok:
        detail += f": NCCL would fall back to sockets on fabric {expect.fabric}"
    return Check("fabric_devices", ok, detail, sorted(found), want)


def check_container_runtime(facts: NodeFacts, expect: Expect) -> Check | None:
    """Docker knows the nvidia runtime; with --container-probe, a container sees every GPU."""
    if expect.gpus == 0 or not expect.container_check or not facts.gpus:
        return None  # without GPUs there is nothing for a container to see
    if facts.docker_runtimes is None:
        detail = "docker not usable" + (f": {facts.docker_error}" if facts.docker_error else "")
        return Check("container_runtime", False, detail, None, "nvidia")
    if "nvidia" not in facts.docker_runtimes:
        detail = (
            f"docker runtimes {facts.docker_runtimes} lack nvidia: "
            "run `nvidia-ctk runtime configure --runtime=docker` and restart docker"
        )
        return Check("container_runtime", False, detail, facts.docker_runtimes, "nvidia")
    if expect.container_probe:
        if facts.container_gpus != expect.gpus:
            seen = "no" if facts.container_gpus is None else facts.container_gpus
            detail = f"a container with --gpus all sees {seen} GPUs, expected {expect.gpus}"
            if facts.container_error:
                detail += f" ({facts.container_error})"
            return Check("container_runtime", False, detail, facts.container_gpus, expect.gpus)
        detail = f"nvidia runtime present; a container sees {facts.container_gpus} GPUs"
        return Check("container_runtime", True, detail, facts.container_gpus, expect.gpus)
    return Check(
        "container_runtime", True, "nvidia runtime present", facts.docker_runtimes, "nvidia"
    )


def check_probe(
    name: str, measured: list[float], peak: float | None, fraction: float, unit: str
) -> Check:
    """Slowest GPU's measurement against the model's peak times `fraction`."""
    if not measured:
        return Check(name, False, "no measurement", None, None)
    worst = min(measured)
    if peak is None:
        return Check(name, True, f"min {worst:.1f} {unit} (no peak known for model)", measured)
    need = fraction * peak
    share = worst / peak
    detail = f"min {worst:.1f} {unit} = {share:.0%} of peak {peak:g} (need {fraction:.0%})"
    ok = worst >= need
    if not ok:
        slow = [i for i, m in enumerate(measured) if m < need]
        detail += f"; slow: {_gpu_list(slow)}"
    return Check(name, ok, detail, [round(m, 1) for m in measured], round(need, 1))


def check_probes(facts: NodeFacts, expect: Expect) -> list[Check]:
    """GEMM TFLOPS and memory bandwidth probes, judged against the GPU model's peaks."""
    if not expect.probes or not facts.gpus or facts.probes is None:
        return []
    probes = facts.probes
    if probes.skipped:
        return [Check("gpu_probes", True, f"skipped: {probes.skipped}", None, None)]
    spec = gpu_spec(facts.gpus[0].name)
    return [
        check_probe(
            f"gemm_{probes.dtype or 'bfloat16'}",
            probes.tflops,
            None if spec is None else spec.peak_tflops,
            expect.min_gemm_fraction,
            "TFLOPS",
        ),
        check_probe(
            "memory_bandwidth",
            probes.gbs,
            None if spec is None else spec.peak_gbs,
            expect.min_bandwidth_fraction,
            "GB/s",
        ),
    ]


def _probe_script():
    """scripts/allreduce_probe.py, which ships next to this script: one NCCL log parser."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allreduce_probe.py")
    spec = importlib.util.spec_from_file_location("gpufleet_allreduce_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_nccl_network(facts: NodeFacts, expect: Expect) -> Check | None:
    """NCCL picks the fabric's network, not sockets: a plugin that does not load (aws-ofi-nccl
    off LD_LIBRARY_PATH, TCPX plugin missing) or IB down makes NCCL fall back to NET/Socket
    without an error, and jobs run 10-100x slower. Refused here, before the job starts."""
    if expect.fabric == "none" or expect.nodes < 2 or not expect.nccl_network:
        return None
    if facts.nccl_log is None:
        return Check("nccl_network", True, f"skipped: {facts.nccl_skipped or 'not run'}", None)
    probe = _probe_script()
    observed = probe.transport_from_nccl_log(facts.nccl_log)
    result = probe.verdict(expect.fabric, observed, expect.nodes)
    detail = result["message"]
    failures = probe.plugin_failures(facts.nccl_log)
    if not result["ok"] and failures:
        detail += "; NCCL said: " + " | ".join(failures)
    return Check("nccl_network", result["ok"], detail, observed, expect.fabric)


CHECKS: tuple[Callable[[NodeFacts, Expect], Check | None], ...] = (
    check_gpu_count,
    check_gpu_model,
    check_gpu_memory,
    check_driver,
    check_fabric_manager,
    check_ecc,
    check_memory_repair,
    check_persistence,
    check_nvlink,
    check_fabric_devices,
    check_nccl_network,
    check_container_runtime,
)


# --in-container: GPU visibility and NCCL's network, as the ranks in the image see them
IN_CONTAINER: tuple[Callable[[NodeFacts, Expect], Check | None], ...] = (
    check_gpu_count,
    check_gpu_model,
    check_gpu_memory,
    check_nccl_network,
)


def evaluate(facts: NodeFacts, expect: Expect) -> list[Check]:
    """All checks that apply to this node, in a stable order."""
    fns = IN_CONTAINER if expect.in_container else CHECKS
    checks = [check for check in (fn(facts, expect) for fn in fns) if check is not None]
    return checks + check_probes(facts, expect)


def report(node: str, facts: NodeFacts, expect: Expect, elapsed_s: float = 0.0) -> dict:
    """The JSON document for one node."""
    checks = evaluate(facts, expect)
    return {
        "schema": SCHEMA,
        "node": node,
        "ok": all(check.ok for check in checks),
        "checks": [asdict(check) for check in checks],
        "failed": [check.name for check in checks if not check.ok],
        "expected": asdict(expect),
        "versions": {
            "driver": facts.driver_version,
            "cuda": facts.cuda_version,
            "fabric_manager": facts.fabric_manager_version,
        },
        "gpus": [
            {"index": g.index, "name": g.name, "bus_id": g.bus_id, "memory_mib": g.memory_mib}
            for g in facts.gpus
        ],
        "elapsed_s": round(elapsed_s, 2),
    }


# ---------------------------------------------------------------------------------------------
# Gathering (impure): commands, /sys, torch.
# ---------------------------------------------------------------------------------------------


def run_command(argv: list[str], timeout: float = 60.0) -> tuple[int, str, str]:
    """(returncode, stdout, stderr); 127 when not found, 124 on timeout."""
    if shutil.which(argv[0]) is None:
        return 127, "", f"{argv[0]} not found"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(argv)} timed out after {timeout:g}s"
    except OSError as exc:
        return 126, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def read_rdma_devices(sysfs_root: str) -> list[RdmaDevice]:
    """Entries of <sysfs_root>/sys/class/infiniband with their driver and per-port state."""
    base = os.path.join(sysfs_root, "sys", "class", "infiniband")
    if not os.path.isdir(base):
        return []
    devices = []
    for name in sorted(os.listdir(base)):
        dev = os.path.join(base, name)
        driver_link = os.path.join(dev, "device", "driver")
        driver = (
            os.path.basename(os.path.realpath(driver_link)) if os.path.exists(driver_link) else None
        )
        layers, states = [], []
        ports = os.path.join(dev, "ports")
        if os.path.isdir(ports):
            for port in sorted(os.listdir(ports)):
                for fname, into in (("link_layer", layers), ("state", states)):
                    path = os.path.join(ports, port, fname)
                    if os.path.isfile(path):
                        with open(path) as handle:
                            into.append(handle.read().strip())
        devices.append(RdmaDevice(name, driver, layers, states))
    return devices


def read_net_interfaces(sysfs_root: str) -> list[str]:
    """Network interfaces in <sysfs_root>/sys/class/net, without lo, docker and veth ones."""
    base = os.path.join(sysfs_root, "sys", "class", "net")
    if not os.path.isdir(base):
        return []
    skip = ("lo", "docker", "veth", "br-", "virbr")
    return sorted(n for n in os.listdir(base) if not n.startswith(skip))


def run_probes(gpu_count: int, seconds: float = 1.0) -> ProbeResult:
    """bf16 (fp16 on pre-Ampere) GEMM TFLOPS and device-copy GB/s on each GPU, with torch."""
    try:
        import torch  # optional: only GPU nodes that have it
    except ImportError:
        return ProbeResult(skipped="torch not importable")
    if not torch.cuda.is_available():
        return ProbeResult(skipped="torch sees no CUDA device")
    result = ProbeResult()
    for index in range(min(gpu_count or torch.cuda.device_count(), torch.cuda.device_count())):
        device = torch.device("cuda", index)
        name = torch.cuda.get_device_name(index)
        spec = gpu_spec(name)
        bf16_ok = torch.cuda.is_bf16_supported() if spec is None else spec.dtype == "bfloat16"
        dtype = torch.bfloat16 if bf16_ok else torch.float16
        result.dtype = str(dtype).replace("torch.", "")
        with torch.cuda.device(device):
            result.tflops.append(_gemm_tflops(torch, device, dtype, seconds))
            result.gbs.append(_copy_gbs(torch, device, seconds))
    return result


def _timed(torch, fn, seconds: float) -> tuple[int, float]:
    """Run fn until `seconds` of GPU time pass (after 3 warm-ups); (iterations, seconds)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    iterations, elapsed = 0, 0.0
    while elapsed < seconds:
        start.record()
        for _ in range(10):
            fn()
        end.record()
        end.synchronize()
        iterations += 10
        elapsed += start.elapsed_time(end) / 1000.0
    return iterations, elapsed


def _gemm_tflops(torch, device, dtype, seconds: float) -> float:
    n = 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    iterations, elapsed = _timed(torch, lambda: torch.matmul(a, b, out=out), seconds)
    return 2.0 * n**3 * iterations / elapsed / 1e12


def _copy_gbs(torch, device, seconds: float) -> float:
    nbytes = 1 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    iterations, elapsed = _timed(torch, lambda: dst.copy_(src), seconds)
    return 2.0 * nbytes * iterations / elapsed / 1e9  # each copy reads and writes nbytes


def gather(
    expect: Expect, sysfs_root: str = "/", run: Callable[..., tuple[int, str, str]] = run_command
) -> NodeFacts:
    """Observe the node: nvidia-smi, Fabric Manager, NVLink, /sys, docker and the probes."""
    facts = NodeFacts()
    rc, out, err = run(
        ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    facts.smi_found = rc != 127
    csv_gpus: list[Gpu] = []
    csv_driver = None
    if facts.smi_found:
        if rc == 0:
            try:
                csv_gpus = parse_query_gpu_csv(out)
                csv_driver = csv_driver_version(out)
            except ValueError as exc:
                facts.smi_error = str(exc)
        else:
            facts.smi_error = _first_line(err) or _first_line(out) or f"exit {rc}"
        rc, out, err = run(["nvidia-smi", "-q", "-x"])
        xml_gpus: list[Gpu] = []
        if rc == 0:
            try:
                log = parse_nvidia_smi_xml(out)
                xml_gpus = log.gpus
                facts.driver_version, facts.cuda_version = log.driver_version, log.cuda_version
            except ET.ParseError as exc:
                facts.smi_error = facts.smi_error or f"unreadable nvidia-smi -q -x output: {exc}"
        elif not facts.smi_error:
            facts.smi_error = _first_line(err) or f"nvidia-smi -q -x exit {rc}"
        facts.gpus = merge_gpus(csv_gpus, xml_gpus)
        facts.driver_version = facts.driver_version or csv_driver
    if facts.gpus and not expect.in_container and expected_nvlinks(facts, expect) is not None:
        rc, out, err = run(["nvidia-smi", "nvlink", "--status"])
        if rc == 0:
            facts.nvlink = parse_nvlink_status(out)
        else:
            facts.nvlink_error = _first_line(err) or _first_line(out) or f"exit {rc}"
    if not expect.in_container:  # the host's own facts: in a container, checked on the host
        if expect.nvswitch and facts.gpus:
            gather_fabric_manager(facts, run)
        facts.rdma = read_rdma_devices(sysfs_root)
        facts.net_interfaces = read_net_interfaces(sysfs_root)
        if expect.gpus > 0 and expect.container_check and facts.gpus:
            gather_docker(facts, expect, run)
    if expect.probes and facts.gpus:
        facts.probes = run_probes(len(facts.gpus))
    if expect.fabric != "none" and expect.nodes > 1 and expect.nccl_network:
        gather_nccl_log(facts, run)
    return facts


# One rank, one GPU: NCCL still loads its network (plugin or internal) at init and logs
# "Using network <name>". Run in a login shell so /etc/profile.d/gpufleet-nccl.sh puts the
# fabric's plugin on LD_LIBRARY_PATH as it does for jobs; /etc/nccl.conf is read by NCCL itself.
_NCCL_INIT = """
import os, socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1)
t = torch.ones(1, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
dist.destroy_process_group()
"""


def gather_nccl_log(facts: NodeFacts, run: Callable[..., tuple[int, str, str]]) -> None:
    """NCCL's INIT/NET log of a one-rank init with the node's job environment."""
    import shlex
    import tempfile

    if not facts.gpus:
        facts.nccl_skipped = "no GPU seen"
        return
    log = os.path.join(tempfile.gettempdir(), f"gpufleet-health-nccl-{os.getpid()}.log")
    script = (
        f"export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE={shlex.quote(log)}; "
        f"exec {shlex.quote(sys.executable)} -c {shlex.quote(_NCCL_INIT)}"
    )
    rc, out, err = run(["bash", "-lc", script], timeout=120.0)
    try:
        with open(log, errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    finally:
        if os.path.exists(log):
            os.unlink(log)
    if "No module named 'torch'" in err:
        facts.nccl_skipped = "torch not importable"
    elif not text:
        facts.nccl_skipped = (
            f"NCCL init gave no log (exit {rc}: {_first_line(err) or _first_line(out)})"
        )
    else:
        facts.nccl_log = text


def gather_fabric_manager(facts: NodeFacts, run: Callable[..., tuple[int, str, str]]) -> None:
    """Fabric Manager's version from its binary, else from the package database."""
    rc, out, err = run(["nv-fabricmanager", "--version"])
    if rc == 0:
        facts.fabric_manager_version = parse_fabric_manager_version(out + err)
        if facts.fabric_manager_version:
            return
    major = (facts.driver_version or "").split(".")[0]
    for package in (f"nvidia-fabricmanager-{major}", "nvidia-fabricmanager"):
        rc, out, _ = run(["dpkg-query", "-W", "-f=${Version}", package])
        if rc == 0 and parse_package_version(out):
            facts.fabric_manager_version = parse_package_version(out)
            return
    facts.fabric_manager_error = _first_line(err) or "nv-fabricmanager and its package not found"


def gather_docker(
    facts: NodeFacts, expect: Expect, run: Callable[..., tuple[int, str, str]]
) -> None:
    """Docker's runtimes and, with --container-probe, the GPUs a container sees."""
    rc, out, err = run(["docker", "info", "--format", "{{json .Runtimes}}"])
    if rc != 0:
        facts.docker_error = _first_line(err) or f"exit {rc}"
        return
    try:
        facts.docker_runtimes = parse_docker_runtimes(out)
    except ValueError as exc:
        facts.docker_error = f"unreadable docker info: {exc}"
        return
    if expect.container_probe:
        rc, out, err = run(
            ["docker", "run", "--rm", "--gpus", "all", expect.container_image, "nvidia-smi", "-L"],
            timeout=300.0,
        )
        if rc == 0:
            facts.container_gpus = count_listed_gpus(out)
        else:
            facts.container_error = _first_line(err) or f"exit {rc}"


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--expect-gpus", type=int, required=True, help="GPUs this node should have")
    p.add_argument("--expect-model", default="", help="substring of the GPU product name")
    p.add_argument("--expect-memory-gib", type=float, default=None, help="memory per GPU, GiB")
    p.add_argument("--expect-driver", default="", help="driver version or branch, e.g. 535")
    p.add_argument("--fabric", choices=FABRICS, default="none")
    p.add_argument("--nvswitch", action="store_true", help="NVSwitch board: Fabric Manager needed")
    p.add_argument("--expect-nvlinks", type=int, default=None, help="active NVLinks per GPU")
    p.add_argument("--expect-fabric-devices", type=int, default=None, help="EFA/IB devices or NICs")
    p.add_argument("--no-container-check", action="store_true", help="skip the docker checks")
    p.add_argument("--container-probe", action="store_true", help="run a --gpus all container")
    p.add_argument("--container-image", default=Expect.container_image)
    p.add_argument(
        "--skip-probes", action="store_true", help="skip the torch GEMM/bandwidth probes"
    )
    p.add_argument("--min-gemm-fraction", type=float, default=0.5)
    p.add_argument("--min-bandwidth-fraction", type=float, default=0.6)
    p.add_argument("--nodes", type=int, default=1, help="nodes in the cluster")
    p.add_argument(
        "--skip-nccl-network", action="store_true", help="skip the NCCL network (plugin) check"
    )
    p.add_argument(
        "--in-container",
        action="store_true",
        help="inside a run's container: GPU visibility, probes and NCCL network only",
    )
    p.add_argument("--sysfs-root", default="/", help="prefix for /sys paths (tests)")
    p.add_argument("--node", default="", help="node name in the report (default: hostname)")
    return p.parse_args(argv)


def expect_from_args(args: argparse.Namespace) -> Expect:
    """Expectations from parsed options."""
    return Expect(
        gpus=args.expect_gpus,
        model=args.expect_model,
        memory_gib=args.expect_memory_gib,
        driver=args.expect_driver,
        fabric=args.fabric,
        nvswitch=args.nvswitch,
        nvlinks=args.expect_nvlinks,
        fabric_devices=args.expect_fabric_devices,
        container_check=not args.no_container_check,
        container_probe=args.container_probe,
        container_image=args.container_image,
        probes=not args.skip_probes,
        min_gemm_fraction=args.min_gemm_fraction,
        min_bandwidth_fraction=args.min_bandwidth_fraction,
        nodes=args.nodes,
        nccl_network=not args.skip_nccl_network,
        in_container=args.in_container,
    )


def main(argv: list[str] | None = None) -> int:
    """Print one JSON document; 0 when the check ran (whatever the verdict), 2 on internal error."""
    args = parse_args(argv)
    started = time.monotonic()
    try:
        expect = expect_from_args(args)
        facts = gather(expect, args.sysfs_root)
        doc = report(args.node or socket.gethostname(), facts, expect, time.monotonic() - started)
    except Exception as exc:  # the caller gets a clear internal error, not a half verdict
        print(f"health_check: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(doc), flush=True)  # one line: callers take the last line that is JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
