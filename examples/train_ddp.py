#!/usr/bin/env python3
"""A small DistributedDataParallel job on synthetic data: gloo on CPU, nccl on CUDA.

Launched by `gpufleet run -- train_ddp.py` (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*).
Rank 0 prints the falling loss and a last line `done world_size=.. final_loss=.. checksum=..`;
every rank checks that its parameters equal rank 0's and exits 1 loudly if they do not.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="slow down (for tests)")
    p.add_argument("--fail-on-rank", type=int, default=None, help="this global rank exits ...")
    p.add_argument("--fail-code", type=int, default=3, help="... with this code ...")
    p.add_argument("--fail-at-step", type=int, default=5, help="... at this step")
    # DeepSpeed's launcher passes --local_rank to every rank; LOCAL_RANK carries the same.
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args()


def make_model(features: int) -> nn.Module:
    torch.manual_seed(0)  # same start everywhere; DDP also broadcasts rank 0's weights
    return nn.Sequential(nn.Linear(features, 64), nn.Tanh(), nn.Linear(64, 1))


def checksum(model: nn.Module) -> torch.Tensor:
    """Sum of all parameters in float64: equal models give bit-identical sums."""
    return torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()


def main() -> int:
    args = parse_args()
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    node = os.environ.get("GPUFLEET_NODE_RANK", "?")
    print(
        f"rank {rank}/{world} up on node {node} ({socket.gethostname()}), backend {backend}, "
        f"device {device}",
        flush=True,
    )

    features = 16
    true_w = torch.linspace(-1, 1, features).unsqueeze(1)  # the function every rank learns
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard of data
    model = DDP(make_model(features).to(device), device_ids=[local_rank] if cuda else None)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    loss = torch.zeros((), device=device)
    window = torch.zeros((), device=device)  # summed loss since the last log line
    for step in range(1, args.steps + 1):
        if args.fail_on_rank == rank and step == args.fail_at_step:
            print(f"rank {rank}: failing on purpose with exit code {args.fail_code}", flush=True)
            sys.exit(args.fail_code)
        x = torch.randn(args.batch_size, features, generator=gen)
        y = torch.tanh(x @ true_w) + 0.01 * torch.randn(args.batch_size, 1, generator=gen)
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        window += loss.detach()
        if step % args.log_every == 0 or step == args.steps:
            steps_in_window = (step - 1) % args.log_every + 1
            dist.all_reduce(window)  # mean over ranks and steps: a smooth curve
            if rank == 0:
                print(
                    f"step {step:4d} loss {window.item() / world / steps_in_window:.5f}", flush=True
                )
            window.zero_()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

    mine = checksum(model.module).to(device)
    ref = mine.clone()
    dist.broadcast(ref, src=0)
    if not torch.equal(mine, ref):
        print(
            f"rank {rank}: PARAMETERS DIVERGED: checksum {mine.item():.12f} != rank 0's "
            f"{ref.item():.12f}",
            file=sys.stderr,
            flush=True,
        )
        dist.destroy_process_group()
        return 1
    final = loss.detach().clone()
    dist.all_reduce(final)
    print(f"rank {rank}: parameters match rank 0 (checksum {mine.item():.12f})", flush=True)
    if rank == 0:
        print(
            f"done world_size={world} final_loss={final.item() / world:.5f} "
            f"checksum={ref.item():.12f}",
            flush=True,
        )
    dist.barrier()  # nobody tears down the process group while a peer still uses it
    # DDP's reducer holds the process group: free it first. Left to the end of main() and the
    # interpreter's exit, gloo's teardown now and then aborted a rank after its work was done
    # ("terminate called without an active exception", SIGABRT, exit -6).
    del model, opt
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
