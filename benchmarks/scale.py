#!/usr/bin/env python3
"""Scale benchmark: every everyday command on sandbox clusters of N nodes, with client CPU per
node, next to pdsh and parallel rsync, and a projection to 1,000 nodes.

For each repetition, for each N (the order interleaves N, and every N sees the same
machine state as often), one sandbox cluster lives through, in this order:
  up             `gpufleet up --nodes N` (sshds started, every node reached, host keys rotated)
  exec-cold      `exec --no-tree -- hostname`, GPUFLEET_HOLDER=0: a new connection to every node
  pdsh           `pdsh -R ssh -f N` through `gpufleet ssh-config` (workers via the head)
  exec-warm      through the connection holder (started and connected before timing)
  tree-first     `exec --tree`, the first: the head opens its connection to every worker
  exec-tree      `exec --tree` again: the head's connections are kept
  sync-fresh     `gpufleet sync` of a small workdir into empty node folders
  rsync-fresh    one `rsync -a -e "ssh -F cfg"` per node, all at once, into empty folders
  sync-same      `gpufleet sync` again, nothing changed
  rsync-same     the parallel rsync again, nothing changed
  run            `run --cluster NAME --launcher none -- hostname` (sync, lease, launch)
  health         `gpufleet health`
  down           `gpufleet down`
Every run must succeed (exit 0; `hostname` printed by every node; every file on every node;
health on every node; nothing of the cluster left after down) or the benchmark stops with
the error. Client CPU is user+sys of the command's process tree, plus, for gpufleet's
commands after `up`, what its kept connections (the holder, the ControlMaster to the head)
spent during the run; pdsh's and rsync's are their own process trees. The sandbox's nodes
share this machine's cores with the client: node-side work (sshd forks, the head's fan-out,
the health checks) slows wall time here that runs on the nodes on a real cluster.

Prints a markdown table of medians, and the least-squares line of wall and CPU against N per
operation (fixed s + per-node s; linear in N, fitted to the medians at the measured N),
read at --project (1,000). `--json` writes every run, the medians and the lines.

    .venv/bin/python benchmarks/scale.py -n 4 8 -r 1         # a quick check
    .venv/bin/python benchmarks/scale.py -n 64 256 -r 3 --json results/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _fit import project
from _sandbox import ROOT, bench_home, gf, timed
from fanout import master_pid, proc_cpu
from sync import count_files, make_small

# operation -> the tool it is compared with
COMPARED = {"exec-cold": "pdsh", "sync-fresh": "rsync-fresh", "sync-same": "rsync-same"}


def kept_connections(name: str, env: dict) -> list[int]:
    """The cluster's holder and ControlMaster to the head, those running now."""
    from gpufleet.core import state
    from gpufleet.remote import head, holder

    pids = []
    try:
        pid = int((state.cluster_dir(name) / "holder.pid").read_text())
        if holder._is_holder(pid, name):
            pids.append(pid)
    except (OSError, ValueError):
        pass
    control = head.control_path(state.cluster_dir(name))
    if control is not None and (
        pid := master_pid(f"-F /dev/null -o ControlPath={control}", name, env)
    ):
        pids.append(pid)
    return pids


def start_holder(name: str, env: dict) -> None:
    """The connection holder, connected to every node (it listens once it is). Spawned by a
    short-lived process, so it is not this one's child: a child's CPU lands in RUSAGE_CHILDREN
    when it is reaped, i.e. in whichever timed run next starts a subprocess (it did: 26 s of
    the 256-node holder in the next `up`); here it is counted only through /proc, per run."""
    from gpufleet.remote import holder

    spawn = f"from gpufleet.remote import holder; holder.spawn({name!r})"
    subprocess.run([sys.executable, "-c", spawn], env=env, cwd=ROOT, check=True, timeout=60)
    deadline = time.monotonic() + 600
    while (s := holder._connect(name)) is None:
        if time.monotonic() > deadline:
            raise SystemExit("the connection holder did not start")
        time.sleep(0.2)
    s.close()


def check_health(out: str, n: int) -> None:
    doc = json.loads(out)
    if not doc["ok"] or len(doc["nodes"]) != n:
        raise SystemExit(f"health: ok={doc['ok']}, {len(doc['nodes'])} of {n} nodes")


def check_files(dirs: list[Path], want: int, what: str) -> None:
    got = [count_files(d) for d in dirs]
    if got != [want] * len(dirs):
        bad = [i for i, g in enumerate(got) if g != want]
        raise SystemExit(
            f"{what}: {len(bad)} node folders lack files (node-{bad[0]}: {got[bad[0]]})"
        )


def lifecycle(name: str, n: int, src: Path, home: Path, env: dict, rec) -> None:
    """One cluster of n nodes through every operation, each recorded by rec(op, wall, cpu)."""
    from gpufleet.core import state
    from gpufleet.provision.localprocs import folder_processes

    g = gf()
    cold = {**env, "GPUFLEET_HOLDER": "0"}

    def step(op: str, cmd: str, lines: int | None = None, e: dict = env, kept: bool = True):
        bg0 = kept_connections(name, env) if kept else []
        c0 = proc_cpu(bg0, gone_ok=True)
        wall, cpu, out = timed(cmd, e, lines, timeout=1800)
        if kept:  # one started during the run (tree-first's master) counts whole
            bg1 = kept_connections(name, env)
            if gone := set(bg0) - set(bg1):
                raise SystemExit(f"{op}: kept connections {sorted(gone)} exited during the run")
            cpu += proc_cpu(bg1, gone_ok=True) - c0
        rec(op, wall, cpu)
        return out

    step("up", f"{g} up -n {name} --nodes {n}", kept=False)
    info = state.load(name)
    if len(info.nodes) != n:
        raise SystemExit(f"up: {len(info.nodes)} nodes recorded, want {n}")
    cfg = state.cluster_dir(name) / "ssh_config"
    hosts = home / f"{name}.hosts"
    hosts.write_text("".join(f"{name}-{x.name}\n" for x in info.nodes))
    step("exec-cold", f"{g} exec {name} --no-tree -- hostname", n, cold, kept=False)
    step(
        "pdsh",
        f'PDSH_SSH_ARGS_APPEND="-F {cfg}" pdsh -R ssh -f {n} -w ^{hosts} hostname',
        n,
        kept=False,
    )
    start_holder(name, env)
    step("exec-warm", f"{g} exec {name} -- hostname", n)
    step("tree-first", f"{g} exec {name} --tree -- hostname", n)
    step("exec-tree", f"{g} exec {name} --tree -- hostname", n)

    nfiles = count_files(src)
    gdirs = [Path(x.workdir) for x in info.nodes]
    rdirs = [Path(x.workdir + "-rsync") for x in info.nodes]
    for d in gdirs + rdirs:
        shutil.rmtree(d, ignore_errors=True)
    for d in gdirs:
        d.mkdir(parents=True)
    rsync = (
        "pids=; "
        + " ".join(
            f'rsync -a --delete -e "ssh -F {cfg}" {src}/ {h}:{d}/ & pids="$pids $!";'
            for h, d in zip(hosts.read_text().split(), rdirs, strict=True)
        )
        + " for j in $pids; do wait $j || exit 1; done"
    )
    sync = f"{g} sync {name} --workdir {src} --json"
    step("sync-fresh", sync)
    check_files(gdirs, nfiles, "sync-fresh")
    step("rsync-fresh", rsync, kept=False)
    check_files(rdirs, nfiles, "rsync-fresh")
    step("sync-same", sync)
    step("rsync-same", rsync, kept=False)
    step("run", f"{g} run --cluster {name} --launcher none --workdir {src} -- hostname", n)
    check_health(step("health", f"{g} health {name} --json"), n)
    cdir = state.cluster_dir(name)
    step("down", f"{g} down {name}", kept=False)
    if left := folder_processes(cdir):
        raise SystemExit(f"down left {len(left)} processes of {name}: {left[:5]}")


OPS = (
    "up",
    "exec-cold",
    "pdsh",
    "exec-warm",
    "tree-first",
    "exec-tree",
    "sync-fresh",
    "rsync-fresh",
    "sync-same",
    "rsync-same",
    "run",
    "health",
    "down",
)


def medians(runs: list[dict]) -> list[dict]:
    """One row per (N, operation): median wall and CPU, the wall range, CPU ms per node."""
    rows = []
    for n in sorted({r["n"] for r in runs}):
        for op in OPS:
            rs = [r for r in runs if r["n"] == n and r["op"] == op]
            if not rs:
                continue
            walls = [r["wall"] for r in rs]
            cpu = statistics.median(r["client_cpu"] for r in rs)
            rows.append(
                {
                    "n": n,
                    "op": op,
                    "wall": statistics.median(walls),
                    "range": (min(walls), max(walls)),
                    "client_cpu": cpu,
                    "cpu_ms_per_node": 1000 * cpu / n,
                    "runs": len(rs),
                }
            )
    by = {(r["n"], r["op"]): r for r in rows}
    for r in rows:
        other = by.get((r["n"], COMPARED.get(r["op"], "")))
        if other:
            r["vs"] = COMPARED[r["op"]]
            r["ratio"] = r["wall"] / other["wall"]
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| N | operation | wall s (median) | min-max | client CPU s | CPU ms/node | vs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vs = f"{r['ratio']:.2f}x {r['vs']}" if "ratio" in r else ""
        lines.append(
            f"| {r['n']} | {r['op']} | {r['wall']:.2f} | {r['range'][0]:.2f}-{r['range'][1]:.2f} "
            f"| {r['client_cpu']:.2f} | {r['cpu_ms_per_node']:.1f} | {vs} |"
        )
    return "\n".join(lines)


def projection_table(lines: list[dict]) -> str:
    out = [
        "| operation | wall: fixed s + ms/node | wall s at N | CPU: fixed s + ms/node "
        "| CPU s at N | CPU ms/node at N |",
        "|---|---|---|---|---|---|",
    ]
    for p in lines:
        out.append(
            f"| {p['op']} | {p['wall_fixed']:.2f} + {1000 * p['wall_per_node']:.1f} "
            f"| {p['wall_at']:.1f} | {p['cpu_fixed']:.2f} + {1000 * p['cpu_per_node']:.2f} "
            f"| {p['cpu_at']:.1f} | {1000 * p['cpu_at'] / p['at']:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[64, 256], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=3, help="repetitions (medians)")
    ap.add_argument("--files", type=int, default=200, help="files in the synced workdir")
    ap.add_argument("--kb", type=int, default=4, help="size of each of those files")
    ap.add_argument("--project", type=int, default=1000, help="N to project to")
    ap.add_argument("--json", type=Path, help="write every run, the medians and the lines")
    args = ap.parse_args()
    for tool in ("pdsh", "rsync", "ssh"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed: apt-get install {tool}")

    runs: list[dict] = []
    load = {"start": os.getloadavg()}
    with bench_home("gpufleet-scale-") as home:
        env = dict(os.environ)
        src = home / "workdir"
        make_small(src, args.files, args.kb)
        for rep in range(args.reps):
            for n in args.n:
                before = os.getloadavg()

                def rec(op: str, wall: float, cpu: float, n: int = n, rep: int = rep) -> None:
                    runs.append({"n": n, "op": op, "rep": rep, "wall": wall, "client_cpu": cpu})
                    print(
                        f"rep {rep} N={n:<4} {op:<11} {wall:7.2f}s  client cpu {cpu:6.2f}s "
                        f"= {1000 * cpu / n:5.1f} ms/node",
                        flush=True,
                    )

                lifecycle(f"scale{n}r{rep}", n, src, home, env, rec)
                print(
                    f"rep {rep} N={n}: load average {before[0]:.1f} before, "
                    f"{os.getloadavg()[0]:.1f} after",
                    flush=True,
                )
    load["end"] = os.getloadavg()
    rows = medians(runs)
    points = {
        op: {r["n"]: (r["wall"], r["client_cpu"]) for r in rows if r["op"] == op} for op in OPS
    }
    lines = project(points, args.project)
    print(
        f"\n{args.reps} repetitions, N interleaved; {os.cpu_count()} cores shared by the client "
        f"and every node; load average {load['start'][0]:.1f} at start, "
        f"{load['end'][0]:.1f} at end; `{args.files}` files of {args.kb} KB synced"
    )
    print(table(rows))
    if lines:
        print(
            f"\nProjection to N = {args.project}: a least-squares line in N through the medians "
            f"at N = {', '.join(map(str, sorted(set(args.n))))} (fixed cost + a cost per node; "
            "it assumes both stay linear, which nothing here measured past the largest N)"
        )
        print(projection_table(lines))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"load": load, "cores": os.cpu_count(), "runs": runs, "summary": rows}
        args.json.write_text(json.dumps(doc | {"projection": lines}, indent=2))


if __name__ == "__main__":
    main()
