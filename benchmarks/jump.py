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
import statistics

from _sandbox import bench_home, destroy, gf, make_cluster, timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[64], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=5, help="timed runs per mode")
    args = ap.parse_args()

    rows = []
    with bench_home("gpufleet-jump-"):
        for n in args.n:
            modes = {"direct": f"direct{n}", "jump": f"jump{n}"}
            for mode, name in modes.items():
                info = make_cluster(name, n, public_workers=mode == "direct")
                tunnelled = sum(1 for x in info.nodes if not x.public_ip)
                assert tunnelled == (0 if mode == "direct" else n - 1), tunnelled
            cmds = {m: f"{gf()} exec {name} --no-tree -- hostname" for m, name in modes.items()}
            for cmd in cmds.values():
                timed(cmd, expect_lines=n)
            walls: dict[str, list[float]] = {m: [] for m in cmds}
            for _ in range(args.reps):
                for m, cmd in cmds.items():
                    walls[m].append(timed(cmd, expect_lines=n)[0])
            for name in modes.values():
                destroy(name)
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
    print(f"\n`gpufleet exec NAME -- hostname`, {args.reps} timed runs per mode; median wall")
    print("| N | direct (s) | through the head (s) | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['direct']:.2f} | {r['jump']:.2f} | {r['ratio']:.2f} |")


if __name__ == "__main__":
    main()
