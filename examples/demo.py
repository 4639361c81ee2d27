#!/usr/bin/env python3
"""`make demo`: a real 2-node DDP training job on the local sandbox, then proof nothing is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAME = "demo"


def gpufleet(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], text=True, **kw)


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    from gpufleet.provision.localprocs import sandbox_processes

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    print(
        f"$ gpufleet run --cloud local --nodes 2 --name {NAME} --workdir examples "
        "-- train_ddp.py --steps 60",
        flush=True,
    )
    run = gpufleet(
        "run",
        "--cloud",
        "local",
        "--nodes",
        "2",
        "--name",
        NAME,
        "--workdir",
        str(HERE),
        "--",
        "train_ddp.py",
        "--steps",
        "60",
        env=env,
    )
    listed = json.loads(gpufleet("list", "--json", capture_output=True, env=env).stdout)["clusters"]
    left = sandbox_processes(NAME)
    sshd = [
        ln
        for ln in subprocess.run(
            ["ps", "-ww", "-eo", "args="], capture_output=True, text=True
        ).stdout.splitlines()
        if "sshd" in ln and f"clusters/{NAME}/" in ln
    ]
    print(f"\nrun exit code: {run.returncode}")
    print(f"clusters recorded afterwards: {[c['name'] for c in listed] or 'none'}")
    print(f"sandbox processes left: {len(left)}, sandbox sshd left: {len(sshd)}")
    if run.returncode == 0 and not left and not sshd and all(c["name"] != NAME for c in listed):
        print("demo ok: 2-node training ran over SSH and the cluster is gone")
        return 0
    print("demo FAILED", file=sys.stderr)
    return run.returncode or 1


if __name__ == "__main__":
    sys.exit(main())
