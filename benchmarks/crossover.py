#!/usr/bin/env python3
"""Where `exec --tree` overtakes the direct paths: cold Group, warm holder, tree cold and warm.

Per N: wall and client CPU of `gpufleet exec` four ways, and the CPU the head spends per
worker in tree mode (the sandbox head is a local sshd: its process tree plus the per-worker
OpenSSH masters it keeps, which are reparented away from it, all read from /proc).
  cold        GPUFLEET_HOLDER=0: a new paramiko connection to every node
  warm        through the cluster's connection holder (started before timing)
  tree-cold   --tree with no kept connection: neither ours to the head nor the head's to workers
  tree-warm   --tree over both kept connections
One warm-up, then R runs of each, interleaved; medians. Why the tree is not the default
(remote/tree.TREE_FROM is 0, GPUFLEET_TREE_FROM sets one): docs/benchmarks.md#tree-crossover.

    .venv/bin/python benchmarks/crossover.py -n 8 16 32 -r 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _sandbox import bench_home, destroy, gf, make_cluster, timed
from fanout import master_pid

TOOLS = ("cold", "warm", "tree-cold", "tree-warm")


def snapshot() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent, user+sys+children's ticks, cmdline) of every process now."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(d.name)] = (int(f[1]), sum(int(x) for x in f[11:15]), cmd)
    return out


def head_pids(snap: dict[int, tuple[int, int, str]], sshd: int, keys: str) -> set[int]:
    """The head sshd and its descendants, and the workers' masters the head keeps (their
    command line names the head's key folder) with theirs."""
    roots = {sshd} | {p for p, (_, _, c) in snap.items() if keys in c}
    found, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in found or p not in snap:
            continue
        found.add(p)
        todo += [c for c, (pp, _, _) in snap.items() if pp == p]
    return found


def head_ticks(before: dict, after: dict, sshd: int, keys: str) -> float:
    """CPU seconds the head spent between two snapshots (processes alive at `after`; those
    that ended meanwhile count through their reaper's children's time)."""
    pids = head_pids(after, sshd, keys)
    ticks = sum(after[p][1] - (before[p][1] if p in before else 0) for p in pids)
    return ticks / os.sysconf("SC_CLK_TCK")


def go_cold(name: str, info) -> None:
    """Close ours to the head and the head's to the workers (outside the timing)."""
    from gpufleet.remote import head

    head.stop_mux(info)
    head.remove_relay(info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[8, 16, 32], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed runs per tool")
    ap.add_argument("--json", type=Path, help="write every run to this file")
    args = ap.parse_args()
    from gpufleet.core import state
    from gpufleet.remote import head, holder

    rows, runs = [], []
    with bench_home("i23-tree-cross-") as _home:
        env = dict(os.environ)
        for n in args.n:
            name = f"x{n}"
            info = make_cluster(name, n)
            hd = info.nodes[0]
            sshd = int((Path(hd.workdir).parent / "sshd.pid").read_text())
            keys = f"{hd.workdir}/{head.HEAD_KEYS}"
            control = head.control_path(state.cluster_dir(name))
            cmds = {
                "cold": f"GPUFLEET_HOLDER=0 {gf()} exec {name} --no-tree -- true",
                "warm": f"{gf()} exec {name} --no-tree -- true",
                "tree-cold": f"GPUFLEET_HOLDER=0 {gf()} exec {name} --tree -- true",
                "tree-warm": f"GPUFLEET_HOLDER=0 {gf()} exec {name} --tree -- true",
            }
            timed(cmds["warm"], env)  # leaves the holder
            while (s := holder._connect(name)) is None:
                time.sleep(0.1)
            s.close()
            hpid = int((state.cluster_dir(name) / "holder.pid").read_text())
            timed(cmds["tree-warm"], env)
            res: dict[str, dict[str, list[float]]] = {
                t: {"wall": [], "cpu": [], "head": []} for t in TOOLS
            }
            for rep in range(args.reps):
                for tool in TOOLS:
                    if tool == "tree-cold":
                        go_cold(name, info)
                    mux = master_pid(f"-F /dev/null -o ControlPath={control}", name, env)
                    b = snapshot()
                    w, c, _ = timed(cmds[tool], env)
                    a = snapshot()
                    if tool == "warm":
                        c += (a[hpid][1] - b[hpid][1]) / os.sysconf("SC_CLK_TCK")
                    if tool.startswith("tree"):
                        mux = mux or master_pid(f"-F /dev/null -o ControlPath={control}", name, env)
                        if mux in a:  # the master to the head: its share (all of it when new)
                            c += (a[mux][1] - b.get(mux, (0, 0, ""))[1]) / os.sysconf("SC_CLK_TCK")
                        res[tool]["head"].append(head_ticks(b, a, sshd, keys))
                    res[tool]["wall"].append(w)
                    res[tool]["cpu"].append(c)
                    runs.append({"n": n, "tool": tool, "rep": rep, "wall": w, "cpu": c})
            destroy(name)
            row = {"n": n}
            for tool in TOOLS:
                med = {k: statistics.median(v) for k, v in res[tool].items() if v}
                row[tool] = med
                head_ms = (
                    f"  head {1000 * med['head'] / (n - 1):.1f} ms/worker" if "head" in med else ""
                )
                print(
                    f"N={n:<3} {tool:<9} wall {med['wall']:.2f}s "
                    f"({min(res[tool]['wall']):.2f}-{max(res[tool]['wall']):.2f})  client "
                    f"{1000 * med['cpu']:.0f} ms = {1000 * med['cpu'] / n:.1f} ms/node{head_ms}",
                    flush=True,
                )
            rows.append(row)
    print(
        "\n| N | cold | warm | tree-cold | tree-warm | client ms/node: cold, warm, tree-cold, "
        "tree-warm | head ms/worker: tree-cold, tree-warm |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["n"]
        walls = " | ".join(f"{r[t]['wall']:.2f} s" for t in TOOLS)
        cpu = ", ".join(f"{1000 * r[t]['cpu'] / n:.1f}" for t in TOOLS)
        hd_ = ", ".join(f"{1000 * r[t]['head'] / (n - 1):.1f}" for t in ("tree-cold", "tree-warm"))
        print(f"| {n} | {walls} | {cpu} | {hd_} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
