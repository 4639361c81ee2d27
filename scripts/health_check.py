#!/usr/bin/env python3
"""Node health check: GPUs, driver, Fabric Manager, ECC, NVLink, fabric, runtime; one JSON line.

Runs on a node with whatever Python 3.8+ it has: stdlib only, torch used when importable.
Exits 0 whenever it could judge (the verdict is in the JSON), 2 on an internal error.
"""

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

GPU_FIELDS = (
    "index",
    "name",
    "memory.total",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "pci.bus_id",
)
REMAP_FIELDS = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
# Dense bf16 tensor TFLOPS and HBM/GDDR GB/s per model (NVIDIA datasheets; SXM unless named).
PEAKS = {
    "H100": (989.0, 3350.0),  # H100 SXM5 80GB: 989 TFLOPS bf16 dense, 3.35 TB/s HBM3
    "H200": (989.0, 4800.0),
    "A100-SXM4-80GB": (312.0, 2039.0),
    "A100-PCIE-80GB": (312.0, 1935.0),
    "A100": (312.0, 1555.0),  # 40GB SXM4: 1555 GB/s HBM2
    "L4": (121.0, 300.0),
    "A10G": (70.0, 600.0),  # AWS A10G: bf16 dense 70 TFLOPS (derived: 35 TF32 x 2); 600 GB/s
    "A10": (125.0, 600.0),
    "T4": (65.0, 320.0),  # T4 has no bf16; fp16 tensor 65 TFLOPS
    "V100": (125.0, 900.0),  # fp16 tensor; V100 has no bf16
}


class Check:
    """One named check: ok, what was seen, what was expected."""

    def __init__(self, name, ok, detail="", value=None, expected=None):
        self.name, self.ok, self.detail = name, bool(ok), detail
        self.value, self.expected = value, expected

    def as_dict(self):
        return {
            "name": self.name,
            "ok": self.ok,
            "detail": self.detail,
            "value": self.value,
            "expected": self.expected,
        }


def run(cmd, timeout=60):
    """(exit code, stdout) of a command; (None, reason) when it cannot run."""
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    return p.returncode, p.stdout.decode(errors="replace")


def parse_csv(text, fields):
    """`nvidia-smi --query-*=... --format=csv,noheader,nounits` -> list of dicts."""
    rows = []
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise ValueError("expected %d fields, got %d: %r" % (len(fields), len(values), line))
        rows.append(dict(zip(fields, values)))
    return rows


def parse_nvlink_status(text):
    """`nvidia-smi nvlink --status` -> {gpu index: (active links, inactive links)}."""
    out, gpu = {}, None
    for line in text.splitlines():
        m = re.match(r"GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = [0, 0]
            continue
        m = re.match(r"\s+Link \d+: (.*)", line)
        if m and gpu is not None:
            state = m.group(1).strip().lower()
            out[gpu][1 if ("inactive" in state or state in ("", "n/a")) else 0] += 1
    return {k: tuple(v) for k, v in out.items()}


def parse_fabricmanager_version(text):
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def as_int(value):
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def peak_for(model):
    for key in sorted(PEAKS, key=len, reverse=True):
        if key.lower() in model.lower():
            return PEAKS[key]
    return None


def gpu_checks(args, smi):
    """Checks from nvidia-smi; `smi` runs it with the given arguments."""
    checks = []
    code, out = smi(["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"])
    if code != 0:
        return [Check("nvidia-smi", False, f"nvidia-smi failed: {out.strip()[-200:]}")], []
    gpus = parse_csv(out, GPU_FIELDS)
    checks.append(
        Check(
            "gpu_count",
            len(gpus) == args.expect_gpus,
            "%d GPUs, %d expected" % (len(gpus), args.expect_gpus),
            len(gpus),
            args.expect_gpus,
        )
    )
    if args.expect_model:
        wrong = [g["index"] for g in gpus if args.expect_model.lower() not in g["name"].lower()]
        names = sorted({g["name"] for g in gpus})
        checks.append(
            Check(
                "gpu_model",
                not wrong,
                "model {}{}".format(
                    ", ".join(names), " (GPUs {} differ)".format(",".join(wrong)) if wrong else ""
                ),
                names,
                args.expect_model,
            )
        )
    if args.expect_memory_gib:
        # nvidia-smi reports MiB and a little less than the marketing size (ECC, reserved).
        low = [
            g["index"]
            for g in gpus
            if (as_int(g["memory.total"]) or 0) < args.expect_memory_gib * 1024 * 0.9
        ]
        checks.append(
            Check(
                "gpu_memory",
                not low,
                "memory {} MiB{}".format(
                    gpus[0]["memory.total"] if gpus else "?",
                    " (GPUs {} short)".format(",".join(low)) if low else "",
                ),
                [as_int(g["memory.total"]) for g in gpus],
                args.expect_memory_gib,
            )
        )
    drivers = sorted({g["driver_version"] for g in gpus})
    checks.append(
        Check("driver", len(drivers) == 1, "driver {}".format(", ".join(drivers)), drivers)
    )
    off = [g["index"] for g in gpus if g["persistence_mode"].lower() != "enabled"]
    checks.append(
        Check(
            "persistence_mode",
            not off,
            "persistence mode %s" % ("off on GPUs " + ",".join(off) if off else "on"),
        )
    )
    ecc = [
        (g["index"], as_int(g["ecc.errors.uncorrected.volatile.total"]))
        for g in gpus
        if (as_int(g["ecc.errors.uncorrected.volatile.total"]) or 0) > 0
    ]
    checks.append(
        Check(
            "ecc_uncorrected",
            not ecc,
            "uncorrected volatile ECC errors: %s"
            % (", ".join("GPU %s: %d" % e for e in ecc) if ecc else "none"),
        )
    )
    code, out = smi(
        ["--query-remapped-rows=" + ",".join(REMAP_FIELDS), "--format=csv,noheader,nounits"]
    )
    if code == 0 and out.strip():
        bad = []
        for r in parse_csv(out, REMAP_FIELDS):
            if r["remapped_rows.pending"].lower() in ("yes", "1") or r[
                "remapped_rows.failure"
            ].lower() in ("yes", "1"):
                bad.append(r["gpu_bus_id"])
        checks.append(
            Check(
                "row_remap",
                not bad,
                "row remapping %s" % ("pending or failed on " + ", ".join(bad) if bad else "clean"),
            )
        )
    if args.nvswitch:
        code, out = smi(["nvlink", "--status"])
        links = parse_nvlink_status(out) if code == 0 else {}
        down = [str(g) for g, (active, inactive) in links.items() if inactive or not active]
        checks.append(
            Check(
                "nvlink",
                bool(links) and not down,
                "NVLink %s"
                % (
                    "inactive links on GPUs " + ",".join(down)
                    if down
                    else "all active"
                    if links
                    else "status unavailable"
                ),
                {str(k): v for k, v in links.items()},
            )
        )
    return checks, drivers


def fabric_manager_check(drivers):
    code, out = run(["nv-fabricmanager", "--version"])
    version = parse_fabricmanager_version(out) if code == 0 else None
    active = run(["systemctl", "is-active", "nvidia-fabricmanager"])[1].strip() == "active"
    ok = version is not None and version in drivers and active
    detail = "Fabric Manager {} ({}), driver {}".format(
        version or "missing",
        "active" if active else "not active",
        ",".join(drivers),
    )
    return Check("fabric_manager", ok, detail, version, drivers[0] if drivers else None)


def fabric_check(fabric, sysfs_root, expect_devices):
    base = os.path.join(sysfs_root, "sys/class/infiniband")
    devices = sorted(os.listdir(base)) if os.path.isdir(base) else []
    if fabric == "efa":
        found = [d for d in devices if _driver(base, d) == "efa" or d.startswith("rdmap")]
        what = "EFA"
    elif fabric == "infiniband":
        found = [d for d in devices if d.startswith("mlx5") and _port_active(base, d)]
        what = "active InfiniBand"
    else:
        return None
    want = expect_devices or 1
    return Check(
        "fabric_devices",
        len(found) >= want,
        "%d %s devices (%s), %d expected" % (len(found), what, ",".join(found) or "none", want),
        found,
        want,
    )


def _driver(base, dev):
    link = os.path.join(base, dev, "device", "driver")
    return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else ""


def _port_active(base, dev):
    try:
        with open(os.path.join(base, dev, "ports", "1", "state")) as f:
            return "ACTIVE" in f.read()
    except OSError:
        return False


def container_check():
    if not shutil.which("docker"):
        return Check("container_runtime", False, "docker not installed")
    code, out = run(["docker", "info", "--format", "{{json .Runtimes}}"])
    ok = code == 0 and "nvidia" in out
    return Check(
        "container_runtime", ok, "docker runtimes: {}".format((out.strip() or "unavailable")[:200])
    )


def torch_probes(model):
    """bf16 GEMM TFLOPS and device memory bandwidth on GPU 0, against the model's peak."""
    try:
        import torch
    except ImportError:
        return [
            Check("torch_probes", True, "torch not installed: GEMM and bandwidth probes skipped")
        ]
    if not torch.cuda.is_available():
        return [Check("torch_probes", False, "torch cannot see a CUDA device")]
    peak = peak_for(model) or (None, None)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    iters, t = 20, time.perf_counter()
    for _ in range(iters):
        a @ b
    torch.cuda.synchronize()
    tflops = 2 * n**3 * iters / (time.perf_counter() - t) / 1e12
    x = torch.empty(1 << 28, device="cuda", dtype=torch.float32)  # 1 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        y.copy_(x)
    torch.cuda.synchronize()
    gbps = 2 * x.numel() * 4 * iters / (time.perf_counter() - t) / 1e9
    out = []
    for name, value, ref in (
        ("gemm_bf16_tflops", tflops, peak[0]),
        ("memory_bandwidth_gbps", gbps, peak[1]),
    ):
        frac = value / ref if ref else None
        out.append(
            Check(
                name,
                frac is None or frac >= 0.5,
                "{:.1f} ({} of peak {})".format(
                    value, "%.0f%%" % (100 * frac) if frac else "?", ref
                ),
                round(value, 1),
                ref,
            )
        )
    return out


def evaluate(args, smi=None, nvidia_smi_path=None):
    """All checks for this node, as the JSON-ready report."""
    checks = []
    if args.expect_gpus == 0:
        checks.append(Check("gpus", True, "no GPUs expected (sandbox or CPU node)"))
    else:
        path = nvidia_smi_path or shutil.which("nvidia-smi")
        if not path and smi is None:
            checks.append(Check("nvidia-smi", False, "nvidia-smi not found: no NVIDIA driver"))
        else:
            smi = smi or (lambda a: run([path] + a))
            gpu, drivers = gpu_checks(args, smi)
            checks += gpu
            if args.nvswitch:
                checks.append(fabric_manager_check(drivers))
            if args.container_probe:
                checks.append(container_check())
            if args.torch_probes:
                model = args.expect_model or ""
                checks += torch_probes(model)
    fab = fabric_check(args.fabric, args.sysfs_root, args.expect_fabric_devices)
    if fab is not None:
        checks.append(fab)
    return {
        "node": os.environ.get("GPUFLEET_NODE") or socket.gethostname(),
        "ok": all(c.ok for c in checks),
        "checks": [c.as_dict() for c in checks],
        "time": time.time(),
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--expect-gpus", type=int, default=0)
    p.add_argument("--expect-model", default="")
    p.add_argument("--expect-memory-gib", type=float, default=0.0)
    p.add_argument(
        "--fabric", default="none", choices=("efa", "infiniband", "tcpx", "tcpxo", "none")
    )
    p.add_argument("--expect-fabric-devices", type=int, default=0)
    p.add_argument("--nvswitch", action="store_true", help="check NVLink and Fabric Manager")
    p.add_argument("--container-probe", action="store_true", help="check docker's nvidia runtime")
    p.add_argument("--torch-probes", action="store_true", help="GEMM and bandwidth with torch")
    p.add_argument("--sysfs-root", default="/", help="prefix for /sys (tests)")
    return p.parse_args(argv)


def main(argv=None):
    try:
        report = evaluate(parse_args(argv))
    except Exception as e:  # noqa: BLE001 - one JSON line with the reason, exit 2
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}", "checks": []}))
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
