#!/usr/bin/env python3
"""`gpufleet exec` fan-out direct to every node vs through the head (direct-tcpip).

Two sandbox clusters of N nodes: one with every node "public" (`public_workers`), one in
the default mode where only the head has an address and every worker is tunnelled through
the head's SSH connection. One warm-up each, then R timed runs of `gpufleet exec NAME --
hostname` per mode, interleaved; every run must exit 0 and print N lines. Prints the
medians and the ratio jump/direct (issue 7 item 4 asks for at most 1.5 at N = 64).

    .venv/bin/python benchmarks/jump.py              # N = 64, 5 runs
    .venv/bin/python benchmarks/jump.py -n 8 64 -r 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str], expect_lines: int) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or len(p.stdout.splitlines()) != expect_lines:
        raise SystemExit(f"run failed ({p.returncode}): {cmd}\n{p.stdout[-500:]}{p.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[64], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=5, help="timed runs per mode")
    args = ap.parse_args()

    from components.spec import ClusterSpec
    from gpufleet import ops, state
    from gpufleet.remote import Group

    home = Path(tempfile.mkdtemp(prefix="gpufleet-jump-"))
    os.environ["GPUFLEET_HOME"] = str(home)
    gf = [sys.executable, "-m", "gpufleet"]
    rows = []
    try:
        for n in args.n:
            modes = {"direct": f"direct{n}", "jump": f"jump{n}"}
            for mode, name in modes.items():
                spec = {"name": name, "nodes": n, "public_workers": mode == "direct"}
                info = ops.create(ClusterSpec.from_input(spec), lambda m: None)
                with Group(info) as g:  # first contact: replaces the bootstrap host keys
                    g.wait_ready(120)
                tunnelled = sum(1 for x in state.load(name).nodes if not x.public_ip)
                assert tunnelled == (0 if mode == "direct" else n - 1), tunnelled
            cmds = {m: [*gf, "exec", name, "--", "hostname"] for m, name in modes.items()}
            for cmd in cmds.values():
                timed(cmd, n)
            walls: dict[str, list[float]] = {m: [] for m in cmds}
            for _ in range(args.reps):
                for m, cmd in cmds.items():
                    walls[m].append(timed(cmd, n))
            for name in modes.values():
                ops.destroy(state.load(name), lambda m: None)
            row = {m: statistics.median(w) for m, w in walls.items()}
            row["n"] = n
            row["ratio"] = row["jump"] / row["direct"]
            rows.append(row)
            print(
                f"N={n}: direct {row['direct']:.2f}s ({min(walls['direct']):.2f}-"
                f"{max(walls['direct']):.2f})  jump {row['jump']:.2f}s "
                f"({min(walls['jump']):.2f}-{max(walls['jump']):.2f})  ratio {row['ratio']:.2f}",
                flush=True,
            )
    finally:
        for name in state.names():
            ops.destroy(state.load(name), lambda m: None)
        shutil.rmtree(home, ignore_errors=True)
    print(f"\n`gpufleet exec NAME -- hostname`, {args.reps} timed runs per mode; median wall")
    print("| N | direct (s) | through the head (s) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['direct']:.2f} | {r['jump']:.2f} | {r['ratio']:.2f} |")


if __name__ == "__main__":
    main()
