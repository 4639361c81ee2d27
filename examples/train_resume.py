#!/usr/bin/env python3
"""A DistributedDataParallel job that checkpoints and resumes: gloo on CPU, nccl on CUDA.

Launched by `gpufleet run -- train_resume.py` or plain torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_*). Everything it computes follows from --seed: the model's first weights come from the
seed, and the batch of step k on rank r from a generator seeded by (seed, k, r), so a run that is
stopped and resumed ends with bit-identical parameters to one that was not.

The job's side of gpufleet's recovery contract (docs/running-jobs.md):
  * GPUFLEET_CHECKPOINT_DIR: the same folder on every attempt. Rank 0 writes ckpt.pt there every
    --ckpt-every steps (a temporary file, then os.replace: a reader never sees half a file);
    every rank loads it at start when present (gpufleet copies the head's folder to every node
    before a restart). Unset (plain torchrun): ./checkpoints.
  * GPUFLEET_RESTART_COUNT, GPUFLEET_RECOVERY_REASON: printed at start. --fail-at-step K
    --fail-rank R --fail-code C (tests of `run --recover-on-exit C`): rank R exits C after
    step K, on the first start only (GPUFLEET_RESTART_COUNT 0).
  * SIGTERM (a preemption notice, or gpufleet stopping the job): the current step finishes, all
    ranks agree to stop (an all-reduce of a flag each step: the signal reaches only the ranks of
    one node), rank 0 saves, and every rank exits 143.

Rank 0 prints `step K t=<epoch>` after each step and last
`done steps=N checksum=<float64 sum> sha256=<hex digest of the parameters' bytes>`.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FEATURES = 16
CKPT = "ckpt.pt"
_stop = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="slow down (for tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-every", type=int, default=10, help="rank 0 saves every K steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument(
        "--pg-timeout", type=float, default=300.0, help="collective timeout (s): a vanished peer"
    )
    # a rank's crash, for tests of `run --recover-on-exit`: only on the first start
    p.add_argument("--fail-at-step", type=int, default=None, help="after this step, on the ...")
    p.add_argument("--fail-rank", type=int, default=0, help="... global rank, exit with ...")
    p.add_argument("--fail-code", type=int, default=3, help="... this code (restart_count 0 only)")
    # DeepSpeed's launcher passes --local_rank to every rank; LOCAL_RANK carries the same.
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps < 0 or args.ckpt_every < 1:
        p.error("--steps must be >= 0 and --ckpt-every >= 1")
    return args


def batch_generator(seed: int, step: int, rank: int) -> torch.Generator:
    """The data of (seed, step, rank), independent of where a run started or stopped."""
    digest = hashlib.sha256(f"{seed}:{step}:{rank}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 1))


def fingerprint(model: nn.Module) -> tuple[float, str]:
    """(float64 sum of all parameters, sha256 of their bytes in order)."""
    h = hashlib.sha256()
    total = 0.0
    for p in model.parameters():
        t = p.detach().cpu().contiguous()
        h.update(t.numpy().tobytes())
        total += float(t.double().sum())
    return total, h.hexdigest()


def is_url(path: str) -> bool:
    return "://" in path


def load(ckpt_dir: str) -> dict[str, Any] | None:
    if is_url(ckpt_dir):
        import fsspec  # type: ignore[import-untyped]  # only for a bucket URL

        fs, root = fsspec.core.url_to_fs(ckpt_dir)
        path = f"{root.rstrip('/')}/{CKPT}"
        if not fs.exists(path):
            return None
        with fs.open(path, "rb") as f:
            return torch.load(f, map_location="cpu", weights_only=False)  # type: ignore[no-any-return]
    path = Path(ckpt_dir) / CKPT
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)  # type: ignore[no-any-return]


def save(ckpt_dir: str, state: dict[str, Any]) -> None:
    if is_url(ckpt_dir):
        import fsspec

        # An object store's PUT replaces the whole object at once: nobody sees half of it.
        with fsspec.open(f"{ckpt_dir.rstrip('/')}/{CKPT}", "wb") as f:
            torch.save(state, f)
        return
    folder = Path(ckpt_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{CKPT}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / CKPT)  # atomic: a reader sees the old file or the new one


def main() -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)  # first: a notice may come at any time
    args = parse_args()
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt_dir = os.environ.get("GPUFLEET_CHECKPOINT_DIR") or "checkpoints"
    restart_count = int(os.environ.get("GPUFLEET_RESTART_COUNT") or 0)

    model = make_model(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    state = load(ckpt_dir)
    # Every rank read its own copy: check they are the same checkpoint, and if not (a node
    # whose copy is stale or missing) take rank 0's, so that no rank trains from another step.
    mine = torch.tensor([state["step"] if state else 0], dtype=torch.int64)
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if lo.item() != hi.item():
        print(
            f"rank {rank}: checkpoints differ between ranks (step {lo.item()}..{hi.item()}): "
            f"taking rank 0's",
            file=sys.stderr,
            flush=True,
        )
        box = [state]
        dist.broadcast_object_list(box, src=0)
        state = box[0]
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    # The data come from per-step generators and the model has no dropout: no RNG state to keep.
    if rank == 0:
        print(
            f"start world_size={world} backend={backend} "
            f"restart_count={restart_count} "
            f"recovery_reason={os.environ.get('GPUFLEET_RECOVERY_REASON', '')!r} "
            f"resumed_step={start} checkpoint_dir={ckpt_dir}",
            flush=True,
        )

    ddp = DDP(model.to(device), device_ids=[local_rank] if cuda else None)
    # DDP rebuilds its gradient buckets after its first backward: a warm-up pass (no step)
    # makes every start use the same layout, so 3+ ranks sum each gradient in the same order
    warm = torch.zeros(1, FEATURES, device=device)
    ddp(warm).sum().backward()
    opt.zero_grad(set_to_none=True)
    true_w = torch.linspace(-1, 1, FEATURES).unsqueeze(1)
    loss_fn = nn.MSELoss()
    saved = start  # the step of the checkpoint on disk

    def checkpoint(step: int) -> int:
        if rank == 0 and step != saved:
            save(ckpt_dir, {"step": step, "model": model.state_dict(),
                            "optimizer": opt.state_dict(), "seed": args.seed})  # fmt: skip
        return step

    step = start
    stopping = False
    while step < args.steps:
        step += 1
        gen = batch_generator(args.seed, step, rank)
        x = torch.randn(args.batch_size, FEATURES, generator=gen)
        y = torch.tanh(x @ true_w) + 0.01 * torch.randn(args.batch_size, 1, generator=gen)
        opt.zero_grad()
        loss_fn(ddp(x.to(device)), y.to(device)).backward()  # DDP all-reduces the gradients
        opt.step()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        if rank == 0:
            print(f"step {step} t={time.time()}", flush=True)
        if step % args.ckpt_every == 0:
            saved = checkpoint(step)
        if step == args.fail_at_step and rank == args.fail_rank and restart_count == 0:
            print(
                f"rank {rank}: failing on purpose with exit code {args.fail_code} after step "
                f"{step} t={time.time()}",
                flush=True,
            )
            # SystemExit, not os._exit: gpufleet's rank wrapper records the rank's own code
            sys.exit(args.fail_code)
        flag = torch.tensor([1.0 if _stop else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0 and step < args.steps:  # after the last step: done, not stopped
            stopping = True
            break

    saved = checkpoint(step)
    if stopping:
        if rank == 0:
            print(f"stopped by SIGTERM after step {step}: checkpoint saved", flush=True)
    elif rank == 0:
        total, digest = fingerprint(model)
        print(f"done steps={step} checksum={total!r} sha256={digest}", flush=True)
    dist.barrier()  # rank 0's checkpoint is on disk before any rank exits
    # DDP's reducer holds the process group: free it first (see train_ddp.py: gloo's teardown
    # otherwise aborted a rank now and then after its work was done).
    del ddp
    gc.collect()
    dist.destroy_process_group()
    return 143 if stopping else 0


if __name__ == "__main__":
    sys.exit(main())
