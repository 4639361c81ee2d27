#!/usr/bin/env python3
"""Fan-out benchmark: `gpufleet exec NAME -- CMD` against `pdsh -R ssh` over the same sandbox.

Both tools reach the same N sandbox nodes with the same key and the same pinned
known_hosts (pdsh through `gpufleet ssh-config`), each with its own default
algorithms. One warm-up, then R timed runs per tool, interleaved; every run must
exit 0 (and, for `hostname`, print N lines). Prints medians and the ratio
gpufleet/pdsh; `--json` writes the raw runs too. Compare with the anchors in
../shared/bench/fanout/RESULTS.md (2 cores; client and nodes share them).

    .venv/bin/python benchmarks/fanout.py                 # N = 8 32 64, 5 runs, `true`
    .venv/bin/python benchmarks/fanout.py -n 64 -r 3 -c hostname --pdsh-c25519
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: str, env: dict, expect_lines: int | None) -> tuple[float, float]:
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=300)
    wall, cpu = time.perf_counter() - t0, cpu_children() - c0
    if p.returncode != 0:
        raise SystemExit(f"run failed ({p.returncode}): {cmd}\n{p.stderr[-2000:]}")
    if expect_lines is not None and len(p.stdout.splitlines()) != expect_lines:
        raise SystemExit(f"expected {expect_lines} lines from {cmd}, got:\n{p.stdout[-2000:]}")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[8, 32, 64], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=5, help="timed runs per tool")
    ap.add_argument("-c", "--cmd", default="true", help="remote command (true or hostname)")
    ap.add_argument(
        "--pdsh-c25519",
        action="store_true",
        help="also time pdsh with KexAlgorithms=curve25519-sha256",
    )
    ap.add_argument("--json", type=Path, help="write every run to this file")
    args = ap.parse_args()
    if not shutil.which("pdsh"):
        raise SystemExit("pdsh is not installed: apt-get install pdsh")

    from components.spec import ClusterSpec
    from gpufleet import ops, sshconfig, state

    home = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    os.environ["GPUFLEET_HOME"] = str(home)
    env = dict(os.environ)
    cli = Path(sys.executable).with_name("gpufleet")
    gf = str(cli) if cli.exists() else f"{sys.executable} -m gpufleet"
    expect = None
    runs: list[dict] = []
    summary = []
    try:
        for n in args.n:
            name = f"bench{n}"
            info = ops.create(ClusterSpec.from_input({"name": name, "nodes": n}), lambda m: None)
            cfg = home / f"{name}.ssh_config"
            cfg.write_text(sshconfig.render(info))
            hosts = home / f"{name}.hosts"
            hosts.write_text("".join(f"{name}-{x.name}\n" for x in info.nodes))
            expect = n if args.cmd == "hostname" else None
            tools = {
                "gpufleet": f"{gf} exec {name} -- {args.cmd}",
                "pdsh": f'PDSH_SSH_ARGS_APPEND="-F {cfg}" pdsh -R ssh -f {n} -w ^{hosts} '
                f"{args.cmd}",
            }
            if args.pdsh_c25519:
                tools["pdsh-c25519"] = (
                    f'PDSH_SSH_ARGS_APPEND="-F {cfg} -o KexAlgorithms=curve25519-sha256" '
                    f"pdsh -R ssh -f {n} -w ^{hosts} {args.cmd}"
                )
            for cmd in tools.values():  # warm-up: page cache, sshd first forks
                timed(cmd, env, expect)
            walls: dict[str, list[float]] = {t: [] for t in tools}
            cpus: dict[str, list[float]] = {t: [] for t in tools}
            for rep in range(args.reps):
                for tool, cmd in tools.items():
                    w, c = timed(cmd, env, expect)
                    walls[tool].append(w)
                    cpus[tool].append(c)
                    runs.append({"n": n, "tool": tool, "rep": rep, "wall": w, "client_cpu": c})
            ops.destroy(state.load(name), lambda m: None)
            row = {"n": n}
            for tool in tools:
                row[tool] = statistics.median(walls[tool])
                row[tool + "_range"] = (min(walls[tool]), max(walls[tool]))
                row[tool + "_cpu"] = statistics.median(cpus[tool])
            row["ratio"] = row["gpufleet"] / row["pdsh"]
            summary.append(row)
            print(
                f"N={n:<4} gpufleet {row['gpufleet']:.2f}s ({row['gpufleet_range'][0]:.2f}-"
                f"{row['gpufleet_range'][1]:.2f}, cpu {row['gpufleet_cpu']:.2f})  "
                f"pdsh {row['pdsh']:.2f}s ({row['pdsh_range'][0]:.2f}-{row['pdsh_range'][1]:.2f}, "
                f"cpu {row['pdsh_cpu']:.2f})  ratio {row['ratio']:.2f}"
                + (f"  pdsh-c25519 {row['pdsh-c25519']:.2f}s" if args.pdsh_c25519 else ""),
                flush=True,
            )
    finally:
        for name in state.names():
            ops.destroy(state.load(name), lambda m: None)
        shutil.rmtree(home, ignore_errors=True)
    print(f"\ncommand `{args.cmd}`, {args.reps} timed runs per tool after 1 warm-up; median wall")
    print("| N | gpufleet exec (s) | pdsh -R ssh (s) | ratio |")
    print("|---|---|---|---|")
    for r in summary:
        print(f"| {r['n']} | {r['gpufleet']:.2f} | {r['pdsh']:.2f} | {r['ratio']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
