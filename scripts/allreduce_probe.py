#!/usr/bin/env python3
"""All-reduce probe for torchrun: algbw/busbw per message size and NCCL's transport, as JSON."""

# Launched by torchrun on every node (env RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT). nccl when CUDA is available, else gloo. Rank 0 prints one line:
#   GPUFLEET_ALLREDUCE {"backend": ..., "results": [...], "verdict": "...", "ok": ...}
# The bandwidth definitions are nccl-tests' (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
# algbw = bytes / time; all-reduce busbw = algbw * 2(n-1)/n, n = number of ranks.
# Python 3.8 syntax; everything above `main` is pure and importable without torch.

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

MARKER = "GPUFLEET_ALLREDUCE"
MIB = 1 << 20
GPU_SIZES = tuple(MIB << shift for shift in range(0, 9, 2))  # 1, 4, 16, 64, 256 MiB
CPU_SIZES = tuple((64 << 10) << shift for shift in range(0, 9, 4))  # 64 KiB, 1 MiB, 16 MiB
FAST_FABRICS = ("efa", "infiniband", "tcpx", "tcpxo")

# NCCL names of the network it chose ("NCCL INFO Using network <name>"), by fabric.
_NETWORK_PATTERNS = (
    ("socket", re.compile(r"^Socket$", re.IGNORECASE)),
    # NCCL's own IB transport is "IB"; the nccl-rdma-sharp-plugins (HPC-X) one, which fabric.py
    # puts on the library path for infiniband, is "IBext" (NVIDIA/nccl#1357, #1029) or
    # "IBext_v6" on channel lines (NVIDIA/nccl#1120).
    ("infiniband", re.compile(r"^IB(ext)?(_v\d+)?$", re.IGNORECASE)),
    ("efa", re.compile(r"Libfabric|OFI", re.IGNORECASE)),  # aws-ofi-nccl: "AWS Libfabric"
    ("tcpxo", re.compile(r"FasTrak", re.IGNORECASE)),
    ("tcpx", re.compile(r"TCPX", re.IGNORECASE)),  # "GPUDirectTCPX_v7"
)

# Environment worth reporting next to the transport (what steers NCCL's choice).
REPORTED_ENV = (
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "NCCL_DEBUG",
    "FI_PROVIDER",
    "FI_EFA_USE_DEVICE_RDMA",
    "GLOO_SOCKET_IFNAME",
    "LD_LIBRARY_PATH",
)

_FALLBACK_HINTS = {
    "efa": "is the aws-ofi-nccl plugin on LD_LIBRARY_PATH, FI_PROVIDER=efa set, and are EFA "
    "devices present (fi_info -p efa)?",
    "infiniband": "are /dev/infiniband and the mlx5 ports ACTIVE, and NCCL_IB_DISABLE unset?",
    "tcpx": "is NCCL_NET=GPUDirectTCPX_v7 set and the plugin in /var/lib/tcpx/lib64?",
    "tcpxo": "is the TCPXO (FasTrak) plugin from /var/lib/tcpxo/lib64 loaded "
    "(source nccl-env-profile.sh)?",
}


def parse_size(text: str) -> int:
    """'65536', '64K', '1M', '256MiB', '1G' -> bytes (binary multiples)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a message size: {text!r} (examples: 65536, 64K, 1M, 256MiB)")
    number, unit = int(match.group(1)), match.group(2).upper()
    return number << {"": 0, "K": 10, "M": 20, "G": 30}[unit]


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, in bytes."""
    return [parse_size(part) for part in text.split(",") if part.strip()]


def algbw_gbps(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes/s): message bytes over time per operation."""
    return nbytes / seconds / 1e9


def busbw_gbps(algbw: float, ranks: int) -> float:
    """All-reduce bus bandwidth: algbw * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md)."""
    return algbw * 2.0 * (ranks - 1) / ranks if ranks > 1 else 0.0


def result_row(nbytes: int, seconds: float, ranks: int) -> dict:
    """One message size's timing as a result row."""
    alg = algbw_gbps(nbytes, seconds)
    return {
        "bytes": nbytes,
        "time_us": round(seconds * 1e6, 2),
        "algbw_gbps": round(alg, 3),  # GB/s (10^9 bytes/s), named as the catalog names it
        "busbw_gbps": round(busbw_gbps(alg, ranks), 3),
    }


def transport_from_nccl_log(text: str) -> str | None:
    """The network NCCL chose, from NCCL_DEBUG=INFO output: socket|efa|infiniband|tcpx|tcpxo
    (or libfabric-<provider>: aws-ofi-nccl on a libfabric provider other than efa).

    "NCCL INFO Using network <name>" is the decision (IB may initialise and still lose to
    Socket); without it, the channel lines "via NET/<name>" tell.
    """
    names = re.findall(r"NCCL INFO Using network (.+?)\s*$", text, re.MULTILINE)
    if not names:
        names = re.findall(r"via NET/([^/\s]+(?: [^/\s]+)?)", text)
    for name in names:
        for kind, pattern in _NETWORK_PATTERNS:
            if pattern.search(name.strip()):
                return _ofi_provider(text) if kind == "efa" else kind
    return None


def _ofi_provider(text: str) -> str:
    """aws-ofi-nccl's libfabric provider: "efa", or "libfabric-<provider>" when it is not EFA.

    Without the EFA devices (a container given none) and FI_PROVIDER unset, aws-ofi-nccl runs on
    libfabric's tcp provider and NCCL still says "Using network Libfabric"; the plugin's own
    line tells (aws/aws-ofi-nccl#803, in a docker container, aws-ofi-nccl 1.12.1):
      NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)
    From aws-ofi-nccl 1.15.0 (commit 06e8db33, "Print fabric name with provider name") the line
    is "Selected provider is %s, fabric is %s (found %d nics)" (src/nccl_ofi_net.cpp).
    """
    found = re.findall(r"NET/OFI Selected [Pp]rovider is ([^\s,]+)", text)
    other = sorted({p for p in found if not p.startswith("efa")})
    return "libfabric-" + other[0] if other else "efa"


def is_socket_fallback(observed: str | None) -> bool:
    """NCCL's own sockets, or aws-ofi-nccl over a TCP provider of libfabric."""
    return observed == "socket" or bool(observed and observed.startswith("libfabric-"))


def plugin_failures(text: str) -> list[str]:
    """Why NCCL did not load a network plugin, from its NCCL_DEBUG=INFO log (deduplicated).

    Line shapes, as NCCL prints them (recorded in NVIDIA/nccl#1504, NCCL 2.21.5, and
    NVIDIA/nccl-tests#188, NCCL 2.18.1):
      NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: ...
      NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open ...
    """
    found = re.findall(r"NET/Plugin ?: ?(Plugin load.*?returned.*?)\s*$", text, re.MULTILINE)
    # aws-ofi-nccl loaded but found no EFA device (aws/aws-ofi-nccl#1020, a container without
    # the uverbs devices):
    #   ... nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data ...
    found += re.findall(r"NCCL WARN (NET/OFI .*?)\s*$", text, re.MULTILINE)
    return list(dict.fromkeys(line.strip() for line in found))


def verdict(fabric: str, observed: str | None, nodes: int = 2) -> dict:
    """Whether the collective ran on the cluster's fabric; says so plainly when NCCL fell back.

    fabric: the cluster's (efa|infiniband|tcpx|tcpxo|none); observed: transport_from_nccl_log's
    answer, or "gloo" for the gloo backend; nodes: nodes in the job (one node never uses it).
    """
    if fabric not in FAST_FABRICS:
        return {"ok": True, "message": f"no fast fabric expected (fabric {fabric}); {observed}"}
    if nodes < 2:
        return {
            "ok": True,
            "message": f"single node: the inter-node {fabric} fabric is not exercised",
        }
    if observed == "gloo":
        return {"ok": False, "message": f"gloo over TCP was used on a {fabric} cluster, not NCCL"}
    if observed is None:
        return {
            "ok": False,
            "message": "could not tell which network NCCL used (no 'Using network' line in the "
            "NCCL_DEBUG=INFO log)",
        }
    if observed == "socket":
        return {
            "ok": False,
            "message": f"NCCL fell back to sockets (NET/Socket) instead of {fabric}: "
            + _FALLBACK_HINTS[fabric],
        }
    if is_socket_fallback(observed):
        provider = observed[len("libfabric-") :]
        return {
            "ok": False,
            "message": f"NCCL fell back to sockets (aws-ofi-nccl on libfabric's {provider} "
            f"provider, not efa) instead of {fabric}: " + _FALLBACK_HINTS["efa"],
        }
    if observed != fabric:
        return {"ok": False, "message": f"NCCL used {observed}, expected {fabric}"}
    return {"ok": True, "message": f"NCCL used {fabric}"}


def baseline_check(peak_busbw: float, baseline: float | None, min_fraction: float) -> dict | None:
    """Peak bus bandwidth against the catalog's published baseline, if there is one."""
    if not baseline:
        return None
    fraction = peak_busbw / baseline
    return {
        "busbw_gbps": baseline,
        "fraction": round(fraction, 3),
        "min_fraction": min_fraction,
        "ok": fraction >= min_fraction,
    }


def summary(
    backend: str,
    world_size: int,
    nodes: int,
    rows: list[dict],
    fabric: str,
    observed: list[str | None],
    env: dict[str, str],
    baseline: float | None = None,
    min_fraction: float = 0.5,
    extra: dict | None = None,
) -> dict:
    """The document rank 0 prints: results, transport per rank, verdicts."""
    worst = "gloo" if backend == "gloo" else _worst_transport(observed)
    peak = max((row["busbw_gbps"] for row in rows), default=0.0)
    transport_verdict = verdict(fabric, worst, nodes)
    base = baseline_check(peak, baseline, min_fraction)
    doc = {
        "backend": backend,
        "world_size": world_size,
        "nodes": nodes,
        "fabric": fabric,
        "results": rows,
        "peak_busbw_gbps": peak,
        "transport": {"observed": worst, "per_rank": observed, "env": env},
        "transport_ok": transport_verdict["ok"],
        "verdict": transport_verdict["message"],
        "baseline": base,
        "ok": transport_verdict["ok"] and (base is None or base["ok"]),
    }
    doc.update(extra or {})
    return doc


def _worst_transport(observed: list[str | None]) -> str | None:
    """Socket anywhere wins (one rank on sockets slows all); then unknown; else the common one."""
    fallbacks = sorted({o for o in observed if is_socket_fallback(o)})
    if fallbacks:
        return "socket" if "socket" in fallbacks else fallbacks[0]
    if None in observed or not observed:
        return None
    return sorted(set(observed))[0] if len(set(observed)) == 1 else ",".join(sorted(set(observed)))


def format_line(doc: dict) -> str:
    """The single line rank 0 prints."""
    return f"{MARKER} {json.dumps(doc, sort_keys=True)}"


def parse_line(output: str) -> dict:
    """The document from a probe's output (the last marker line)."""
    lines = [line for line in output.splitlines() if line.startswith(MARKER + " ")]
    if not lines:
        raise ValueError(f"no {MARKER} line in the output")
    return json.loads(lines[-1][len(MARKER) + 1 :])


# ---------------------------------------------------------------------------------------------
# The run (needs torch).
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="", help="comma-separated message sizes (65536,1M,256MiB)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    p.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--fabric", default=os.environ.get("GPUFLEET_FABRIC", "none"))
    p.add_argument("--baseline-busbw-gbps", type=float, default=None, help="catalog baseline")
    p.add_argument("--min-baseline-fraction", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, s")
    return p.parse_args(argv)


def _nccl_log_path() -> str:
    """Where this rank's NCCL_DEBUG=INFO log goes (one file per process)."""
    return os.path.join(tempfile.gettempdir(), f"gpufleet-nccl-{os.getpid()}.log")


def _read_and_remove(path: str) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main(argv: list[str] | None = None) -> int:
    """Run the probe on this rank; rank 0 prints the JSON line. 0 on success."""
    args = parse_args(argv)
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    env = {key: os.environ[key] for key in REPORTED_ENV if key in os.environ}  # before overrides
    nccl_log = ""
    if backend == "nccl":
        # Ask NCCL which network it picks; its log goes to a file, not into the job's output.
        nccl_log = _nccl_log_path()
        os.environ["NCCL_DEBUG_FILE"] = nccl_log
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    default = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    sizes = parse_sizes(args.sizes) if args.sizes else list(default)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        rows = []
        for nbytes in sizes:
            tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
            for _ in range(args.warmup):
                dist.all_reduce(tensor)
            _sync(torch, device)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(tensor)
            _sync(torch, device)
            elapsed = torch.tensor([(time.perf_counter() - start) / args.iters], device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
            rows.append(result_row(tensor.numel() * 4, float(elapsed.item()), world))
        observed = (
            transport_from_nccl_log(_read_and_remove(nccl_log)) if backend == "nccl" else "gloo"
        )
        per_rank: list = [None] * world
        dist.all_gather_object(per_rank, observed)
        if rank == 0:
            doc = summary(
                backend,
                world,
                max(1, world // max(1, local_world)),
                rows,
                args.fabric,
                per_rank,
                env,
                args.baseline_busbw_gbps,
                args.min_baseline_fraction,
                {
                    "device": "cuda" if device.type == "cuda" else "cpu",
                    "dtype": "float32",
                    "iters": args.iters,
                    "warmup": args.warmup,
                    "torch": torch.__version__,
                    "nccl": _nccl_version(torch) if backend == "nccl" else None,
                },
            )
            print(format_line(doc), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _nccl_version(torch) -> str | None:
    try:
        return ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception:  # older torch returns an int, some builds have no NCCL
        return None


if __name__ == "__main__":
    sys.exit(main())
