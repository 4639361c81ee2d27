#!/usr/bin/env python3
"""All-reduce probe across the cluster (torchrun-launched): bus bandwidth per message size.

nccl on GPUs, gloo elsewhere. Rank 0 prints one line `GPUFLEET_ALLREDUCE {json}` with the
backend, the transport NCCL chose (from its INFO log) and a verdict; busbw follows nccl-tests:
algbw = bytes / time, busbw = algbw * 2 (n - 1) / n (nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

MARK = "GPUFLEET_ALLREDUCE "
GPU_SIZES = [1 << 20, 16 << 20, 64 << 20, 256 << 20]
CPU_SIZES = [64 << 10, 1 << 20, 16 << 20]
# What NCCL's INFO log names as its network (the line "Using network <name>").
TRANSPORTS = {
    "efa": ("Libfabric", "AWS Libfabric", "OFI"),
    "infiniband": ("IB",),
    "tcpx": ("GPUDirectTCPX",),
    "tcpxo": ("FasTrak", "GPUDirectTCPXO"),
}


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all-reduce of nbytes over `world` ranks."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def nccl_network(log_text: str) -> str | None:
    """The network NCCL used, from its INFO log ('NET/Socket', 'Using network IB', ...)."""
    m = re.search(r"Using network (\S+(?: \S+)?)", log_text)
    if m:
        return m.group(1).strip()
    m = re.search(r"NET/(\w+)", log_text)
    return m.group(1) if m else None


def verdict(fabric: str, backend: str, transport: str | None) -> tuple[bool, str]:
    """Whether the probe ran over the fabric the cluster should use, and why not."""
    if backend == "gloo":
        return True, "gloo over TCP (no GPUs): a CPU/loopback figure, not a fabric measurement"
    if fabric == "none":
        return True, f"NCCL over {transport or 'its default transport'} (no fast fabric expected)"
    if transport is None:
        return False, "could not tell which network NCCL used (no NCCL INFO log)"
    if transport.lower().startswith("socket"):
        return False, f"NCCL fell back to sockets instead of {fabric}: check the plugin and env"
    if any(t.lower() in transport.lower() for t in TRANSPORTS.get(fabric, ())):
        return True, f"NCCL over {transport} as expected for {fabric}"
    return False, f"NCCL used {transport}, expected the {fabric} transport"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", help="bytes, comma-separated")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--fabric", default="none")
    args = p.parse_args()

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    logdir = tempfile.mkdtemp(prefix="gpufleet-nccl-")
    if cuda:
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
        os.environ.setdefault("NCCL_DEBUG_FILE", os.path.join(logdir, "nccl.%h.%p.log"))
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda") if cuda else torch.device("cpu")
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else (GPU_SIZES if cuda else CPU_SIZES)
    )
    results = []
    for nbytes in sizes:
        x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / args.iters
        # Every rank's time differs a little; report the slowest, as nccl-tests does.
        t = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        algbw, busbw = bus_bandwidth(x.numel() * 4, t.item(), world)
        results.append(
            {
                "bytes": x.numel() * 4,
                "time_us": t.item() * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
            }
        )
    transport = None
    if cuda:
        logs = glob.glob(os.path.join(logdir, "*"))
        text = "".join(Path(f).read_text(errors="replace") for f in logs)
        transport = nccl_network(text)
    ok, why = verdict(args.fabric, backend, transport)
    if rank == 0:
        report = {
            "backend": backend,
            "world_size": world,
            "fabric": args.fabric,
            "transport": transport or ("tcp" if backend == "gloo" else None),
            "ok": ok,
            "verdict": why,
            "results": results,
            "peak_busbw_gbps": max(r["busbw_gbps"] for r in results),
        }
        print(MARK + json.dumps(report), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
