#!/usr/bin/env python3
"""Fan-out benchmark: `gpufleet exec NAME -- CMD`, cold and warm, against `pdsh -R ssh` and
OpenSSH ControlMaster over the same sandbox.

All tools reach the same N sandbox nodes with the same key and the same pinned
known_hosts (pdsh and ssh through `gpufleet ssh-config`), each with its own default
algorithms. Tools:
  gpufleet       cold: GPUFLEET_HOLDER=0, a new connection to every node
  pdsh           `pdsh -R ssh -f N`, new connections
  gpufleet-warm  through the cluster's connection holder (started before timing)
  ssh-cm         one `ssh` per node through an OpenSSH ControlMaster opened before timing
  gpufleet-tree  `exec --tree`: one kept connection to the head (a local OpenSSH
                 ControlMaster), and the head fans out (that CPU is on the head, i.e. in
                 the sandbox's sshd sessions, not the client)
One warm-up, then R timed runs per tool, interleaved; every run must exit 0 (and,
for `hostname`, print N lines). Prints medians, the ratios gpufleet/pdsh and
gpufleet-warm/ssh-cm, and client CPU per node: user+sys of the client's process tree,
plus, for the kept-connection tools, what the holder / the ControlMasters (and their
ProxyJump children) / the tree's master to the head spent during the run. Warm figures
are checked: the warm tools open no new SSH connection in a timed run (the sshd logs),
and the holder and every master that served the first run still serve after the last.
`--json` writes the raw runs too. Compare with the anchors in
../shared/bench/fanout/RESULTS.md (2 cores; client and nodes share them).

    .venv/bin/python benchmarks/fanout.py                 # N = 8 32 64, 5 runs, `true`
    .venv/bin/python benchmarks/fanout.py -n 64 -r 3 -c hostname --pdsh-c25519
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from _sandbox import bench_home, destroy, gf, make_cluster, ssh_config, timed


def start_warm(name: str, hosts: Path, cm: str, env: dict) -> None:
    """Open what the warm tools reuse: gpufleet's holder and one ControlMaster per node."""
    from gpufleet.remote import holder

    subprocess.run(
        f"for h in $(cat {hosts}); do ssh {cm} -o ControlMaster=yes -o ControlPersist=600 "
        "-N -f $h || exit 1; done",
        shell=True,
        env=env,
        check=True,
        timeout=600,
    )
    holder.spawn(name)
    deadline = time.monotonic() + 120
    while (s := holder._connect(name)) is None:
        if time.monotonic() > deadline:
            raise SystemExit("the connection holder did not start")
        time.sleep(0.1)
    s.close()


def master_pid(opts: str, host: str, env: dict) -> int | None:
    """The pid of the OpenSSH ControlMaster these options reach (`-O check` names it)."""
    p = subprocess.run(
        f"ssh {opts} -O check {host}",
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if p.returncode != 0 or "pid=" not in p.stderr:
        return None
    return int(p.stderr.split("pid=")[1].split(")")[0])


def background_pids(name: str, hosts: Path, cm: str, env: dict) -> dict[str, list[int]]:
    """The processes the kept-connection tools lean on, whose CPU no child's rusage holds:
    gpufleet's holder, OpenSSH's masters, and the ControlMaster that `exec --tree` keeps to
    the head (head.control_path). Call it after the warm-up: that starts the tree's master.
    A missing one ends the benchmark: the tool would silently run cold."""
    from gpufleet.core import state
    from gpufleet.remote import head, holder

    masters = {h: master_pid(cm, h, env) for h in hosts.read_text().split()}
    if None in masters.values():
        raise SystemExit(f"no ControlMaster for {[h for h, p in masters.items() if p is None]}")
    holder_pid = int((state.cluster_dir(name) / "holder.pid").read_text())
    if not holder._is_holder(holder_pid, name):
        raise SystemExit(f"pid {holder_pid} in holder.pid is not {name}'s connection holder")
    bg = {"gpufleet-warm": [holder_pid], "ssh-cm": list(masters.values())}
    control = head.control_path(state.cluster_dir(name))
    if control is not None:  # None: a folder path too long for a socket; the tree runs unshared
        tree = master_pid(f"-F /dev/null -o ControlPath={control}", name, env)
        if tree is None:
            raise SystemExit(f"exec --tree left no ControlMaster at {control}")
        bg["gpufleet-tree"] = [tree]
    return bg


def proc_cpu(pids: list[int], gone_ok: bool = False) -> float:
    """user+sys seconds so far of these processes and their descendants (a ControlMaster's
    ProxyJump ssh to the head carries that node's traffic), reaped ones included (/proc,
    clock ticks). One of `pids` gone ends the benchmark: its CPU would be lost, and its
    tool would have run without it; gone_ok: it counts 0."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (parent, ticks)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            stats[int(d.name)] = (int(f[1]), sum(int(x) for x in f[11:15]))
    gone = [p for p in pids if p not in stats]
    if gone and not gone_ok:
        raise SystemExit(f"background processes {gone} exited during the runs")
    tree, todo = set(), [p for p in pids if p in stats]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, (pp, _) in stats.items() if pp == p and c not in tree]
    return sum(stats[p][1] for p in tree) / os.sysconf("SC_CLK_TCK")


def accepted(info) -> int:
    """How many SSH logins the sandbox nodes' sshds have accepted so far (their logs)."""
    total = 0
    for x in info.nodes:
        log = Path(x.workdir).parent / "sshd.log"
        total += log.read_text(errors="replace").count("Accepted publickey")
    return total


def stop_warm(hosts: Path, cm: str, env: dict) -> None:
    subprocess.run(
        f"for h in $(cat {hosts}); do ssh {cm} -O exit $h 2>/dev/null; done; true",
        shell=True,
        env=env,
        timeout=300,
    )


# tools that must open no new connection in a timed run (bench.py in shared/bench/fanout
# checks the same through the sshd logs): otherwise their figures are not warm ones
WARM = ("gpufleet-warm", "ssh-cm")


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

    runs: list[dict] = []
    summary = []
    with bench_home("gpufleet-bench-") as home:
        env = dict(os.environ)
        for n in args.n:
            name = f"bench{n}"
            info = make_cluster(name, n)
            cfg = ssh_config(name)
            hosts = home / f"{name}.hosts"
            hosts.write_text("".join(f"{name}-{x.name}\n" for x in info.nodes))
            expect = n if args.cmd == "hostname" else None
            cm = f"-F {cfg} -o ControlPath={home}/cm-%C"
            tools = {
                "gpufleet": f"GPUFLEET_HOLDER=0 {gf()} exec {name} --no-tree -- {args.cmd}",
                "pdsh": f'PDSH_SSH_ARGS_APPEND="-F {cfg}" pdsh -R ssh -f {n} -w ^{hosts} '
                f"{args.cmd}",
                "gpufleet-warm": f"{gf()} exec {name} --no-tree -- {args.cmd}",
                "ssh-cm": f"pids=; for h in $(cat {hosts}); do ssh {cm} $h {args.cmd} & "
                'pids="$pids $!"; done; for j in $pids; do wait $j || exit 1; done',
                "gpufleet-tree": f"{gf()} exec {name} --tree -- {args.cmd}",
            }
            if args.pdsh_c25519:
                tools["pdsh-c25519"] = (
                    f'PDSH_SSH_ARGS_APPEND="-F {cfg} -o KexAlgorithms=curve25519-sha256" '
                    f"pdsh -R ssh -f {n} -w ^{hosts} {args.cmd}"
                )
            try:
                start_warm(name, hosts, cm, env)
                for cmd in tools.values():  # warm-up: page cache, sshd first forks, tree's master
                    timed(cmd, env, expect)
                bg = background_pids(name, hosts, cm, env)
                walls: dict[str, list[float]] = {t: [] for t in tools}
                cpus: dict[str, list[float]] = {t: [] for t in tools}
                for rep in range(args.reps):
                    for tool, cmd in tools.items():
                        a0, b0 = accepted(info), proc_cpu(bg.get(tool, []))
                        w, c, _ = timed(cmd, env, expect)
                        c += proc_cpu(bg.get(tool, [])) - b0  # the holder's / masters' share
                        if tool in WARM and (new := accepted(info) - a0):
                            raise SystemExit(f"{tool} opened {new} new SSH connections")
                        walls[tool].append(w)
                        cpus[tool].append(c)
                        runs.append({"n": n, "tool": tool, "rep": rep, "wall": w, "client_cpu": c})
                # the same processes still serve: every warm figure above was a warm one
                if (after := background_pids(name, hosts, cm, env)) != bg:
                    raise SystemExit(f"kept connections changed during the runs: {bg} -> {after}")
            finally:
                stop_warm(hosts, cm, env)
            destroy(name)
            row = {"n": n}
            for tool in tools:
                row[tool] = statistics.median(walls[tool])
                row[tool + "_range"] = (min(walls[tool]), max(walls[tool]))
                row[tool + "_cpu"] = statistics.median(cpus[tool])
            row["ratio"] = row["gpufleet"] / row["pdsh"]
            row["warm_ratio"] = row["gpufleet-warm"] / row["ssh-cm"]
            summary.append(row)
            for tool in tools:
                lo, hi = row[tool + "_range"]
                print(
                    f"N={n:<4} {tool:<14} {row[tool]:.2f}s ({lo:.2f}-{hi:.2f})  client cpu "
                    f"{row[tool + '_cpu']:.2f}s = {1000 * row[tool + '_cpu'] / n:.1f} ms/node",
                    flush=True,
                )
            print(
                f"N={n:<4} cold gpufleet/pdsh {row['ratio']:.2f}   "
                f"warm gpufleet/ssh-cm {row['warm_ratio']:.2f}",
                flush=True,
            )
    print(f"\ncommand `{args.cmd}`, {args.reps} timed runs per tool after 1 warm-up; median wall")
    print(
        "| N | gpufleet cold (s) | pdsh (s) | cold ratio | gpufleet warm (s) | ssh-cm (s) "
        "| warm ratio | gpufleet tree (s) | client CPU/node: cold gpufleet, pdsh, warm "
        "gpufleet, ssh-cm, tree (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in summary:
        per = ", ".join(
            f"{1000 * r[t + '_cpu'] / r['n']:.1f}"
            for t in ("gpufleet", "pdsh", "gpufleet-warm", "ssh-cm", "gpufleet-tree")
        )
        print(
            f"| {r['n']} | {r['gpufleet']:.2f} | {r['pdsh']:.2f} | {r['ratio']:.2f} "
            f"| {r['gpufleet-warm']:.2f} | {r['ssh-cm']:.2f} | {r['warm_ratio']:.2f} "
            f"| {r['gpufleet-tree']:.2f} | {per} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
