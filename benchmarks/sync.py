#!/usr/bin/env python3
"""Workdir sync benchmark: `gpufleet sync` against parallel `rsync` and `tar | ssh` per node.

On a sandbox of N nodes, for two working directories — many small files, and one big
file — each tool runs three phases into its own folder on every node:
  fresh     the node folders are empty
  nochange  again, with nothing changed
  edit      again, after one small file was rewritten
Tools (same key, same pinned known_hosts, OpenSSH for all):
  gpufleet  `gpufleet sync NAME --workdir D`: rsync to the head, the head to the workers;
            its kept connection to the head is reused between runs (--cold-client: not)
  rsync     one `rsync -a --delete -e "ssh -F cfg"` per node, all at once
  tar       one `tar c | ssh node tar x` per node, all at once (fresh only)
R timed repetitions, tools interleaved; medians, gpufleet/rsync ratios, and the bytes the
client uploaded (rsync's own "Total bytes sent", summed over its connections; tar: the
stream size times N). Every fresh run is checked: every node folder holds every file.

    .venv/bin/python benchmarks/sync.py                           # N = 3 8 32, both sets
    .venv/bin/python benchmarks/sync.py -n 3 -r 3 --data small --big-mb 50
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

PHASES = ("fresh", "nochange", "edit")


def make_small(root: Path, files: int, kb: int) -> None:
    for i in range(files):
        d = root / f"pkg{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.py").write_bytes(os.urandom(kb * 1024))


def make_big(root: Path, mb: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "weights.bin", "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    (root / "train.py").write_text("print('train')\n")


def edit_one(root: Path, tag: str) -> None:
    small = sorted(p for p in root.rglob("*.py"))[0]
    small.write_text(f"# edited {tag} {time.time()}\n")


def count_files(d: Path) -> int:
    """The user's files in a node folder: gpufleet's own .gpufleet/ (run folders, and on the
    head the relay keys to the workers) is not part of what was synced."""
    if not d.is_dir():
        return 0
    return sum(len(fs) for root, _, fs in os.walk(d) if ".gpufleet" not in Path(root).parts)


def rsync_bytes(outdir: Path) -> int:
    total = 0
    for f in outdir.glob("rs.*"):
        for line in f.read_text().splitlines():
            if line.startswith("Total bytes sent:"):
                total += int(line.split(":")[1].strip().replace(",", ""))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, nargs="+", default=[3, 8, 32], help="node counts")
    ap.add_argument("-r", "--reps", type=int, default=3, help="timed repetitions per tool")
    ap.add_argument("--data", nargs="+", default=["small", "big"], choices=["small", "big"])
    ap.add_argument("--small-files", type=int, default=2000)
    ap.add_argument("--small-kb", type=int, default=10)
    ap.add_argument("--big-mb", type=int, default=500)
    ap.add_argument("--skip", nargs="*", default=[], help="N:data pairs to skip, e.g. 32:big")
    ap.add_argument(
        "--cold-client",
        action="store_true",
        help="close gpufleet's kept connection to the head before every gpufleet run",
    )
    ap.add_argument("--json", type=Path, help="write every run to this file")
    args = ap.parse_args()
    for tool in ("rsync", "ssh", "tar"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed: apt-get install {tool}")

    runs: list[dict] = []
    table: list[dict] = []
    with bench_home("gpufleet-syncbench-") as home:
        env = dict(os.environ)
        data_dirs = {}
        if "small" in args.data:
            data_dirs["small"] = home / "data-small"
            make_small(data_dirs["small"], args.small_files, args.small_kb)
        if "big" in args.data:
            data_dirs["big"] = home / "data-big"
            make_big(data_dirs["big"], args.big_mb)
        for n in args.n:
            name = f"sync{n}"
            info = make_cluster(name, n)
            cfg = ssh_config(name)
            for data, src in data_dirs.items():
                if f"{n}:{data}" in args.skip:
                    print(f"N={n} {data}: skipped (--skip)", flush=True)
                    continue
                table.append(
                    bench_case(
                        info, name, src, data, cfg, gf(), env, args.reps, runs, args.cold_client
                    )
                )
            destroy(name)
    print_table(table, args)
    if args.json:
        args.json.write_text(json.dumps({"summary": table, "runs": runs}, indent=2))


def bench_case(info, name, src, data, cfg, gf, env, reps, runs, cold_client=False) -> dict:
    n = len(info.nodes)
    nfiles = count_files(src)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    dests = {
        "gpufleet": [Path(x.workdir) for x in info.nodes],
        "rsync": [Path(x.workdir + "-rsync") for x in info.nodes],
        "tar": [Path(x.workdir + "-tar") for x in info.nodes],
    }
    hosts = [f"{name}-{x.name}" for x in info.nodes]
    out = Path(env["GPUFLEET_HOME"]) / "out"
    out.mkdir(exist_ok=True)
    rsync_cmd = "pids=; " + " ".join(
        f'rsync -a --delete --stats -e "ssh -F {cfg}" {src}/ {h}:{d}/ > {out}/rs.{k} & '
        'pids="$pids $!";'
        for k, (h, d) in enumerate(zip(hosts, dests["rsync"], strict=True))
    )
    tar_cmd = "set -o pipefail; pids=; " + " ".join(
        f'tar -C {src} -cf - . | ssh -F {cfg} {h} "mkdir -p {d} && tar -C {d} -xf -" & '
        'pids="$pids $!";'
        for h, d in zip(hosts, dests["tar"], strict=True)
    )
    wait_all = " for j in $pids; do wait $j || exit 1; done"
    tar_size = len(
        subprocess.run(["tar", "-C", str(src), "-cf", "-", "."], capture_output=True).stdout
    )
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    sent: dict[tuple[str, str], list[int]] = {}
    for rep in range(reps):
        for tool in ("gpufleet", "rsync", "tar"):
            for d in dests[tool]:
                shutil.rmtree(d, ignore_errors=True)
            if tool == "gpufleet":
                for d in dests[tool]:
                    d.mkdir(parents=True)
            for phase in PHASES if tool != "tar" else ("fresh",):
                if phase == "edit":
                    edit_one(src, f"{tool}{rep}")
                if tool == "gpufleet":
                    if cold_client:
                        from gpufleet.remote.head import stop_mux

                        stop_mux(info)
                    w, c, stdout = timed(
                        f"{gf} sync {name} --workdir {src} --json", env, None, 3600
                    )
                    up = json.loads(stdout)["uploaded"]
                elif tool == "rsync":
                    for f in out.glob("rs.*"):
                        f.unlink()
                    w, c, _ = timed(rsync_cmd + wait_all, env, timeout=3600)
                    up = rsync_bytes(out)
                else:
                    w, c, _ = timed(tar_cmd + wait_all, env, timeout=3600)
                    up = tar_size * n
                if phase == "fresh":
                    got = [count_files(d) for d in dests[tool]]
                    if got != [nfiles] * n:
                        raise SystemExit(
                            f"{tool} {data} N={n}: files per node {got}, want {nfiles}"
                        )
                key = (tool, phase)
                walls.setdefault(key, []).append(w)
                cpus.setdefault(key, []).append(c)
                sent.setdefault(key, []).append(up)
                runs.append(
                    {"n": n, "data": data, "tool": tool, "phase": phase, "rep": rep}
                    | {"wall": w, "client_cpu": c, "uploaded": up}
                )
            for d in dests[tool]:  # free the disk before the next tool (500 MB x N)
                shutil.rmtree(d, ignore_errors=True)
                if tool == "gpufleet":
                    d.mkdir(parents=True)
    row = {"n": n, "data": data, "files": nfiles, "bytes": size}
    for (tool, phase), ws in walls.items():
        row[f"{tool}_{phase}"] = statistics.median(ws)
        row[f"{tool}_{phase}_range"] = (min(ws), max(ws))
        row[f"{tool}_{phase}_cpu"] = statistics.median(cpus[(tool, phase)])
        row[f"{tool}_{phase}_up"] = statistics.median(sent[(tool, phase)])
    for phase in PHASES:
        row[f"ratio_{phase}"] = row[f"gpufleet_{phase}"] / row[f"rsync_{phase}"]
        print(
            f"N={n:<3} {data:<5} {phase:<8} gpufleet {row[f'gpufleet_{phase}']:6.2f}s "
            f"(cpu {row[f'gpufleet_{phase}_cpu']:.2f}s, "
            f"up {row[f'gpufleet_{phase}_up'] / 1e6:.2f} MB)"
            f"  rsync {row[f'rsync_{phase}']:6.2f}s (cpu {row[f'rsync_{phase}_cpu']:.2f}s, "
            f"up {row[f'rsync_{phase}_up'] / 1e6:.2f} MB)  ratio {row[f'ratio_{phase}']:.2f}"
            + (f"  tar|ssh {row['tar_fresh']:.2f}s" if phase == "fresh" else ""),
            flush=True,
        )
    return row


def print_table(table: list[dict], args) -> None:
    print(
        f"\n{args.reps} timed runs per tool and phase, median wall seconds; "
        "up = bytes the client uploaded (MB)"
    )
    print(
        "| N | workdir | phase | gpufleet (s) | rsync ×N (s) | ratio | tar\\|ssh (s) "
        "| gpufleet up (MB) | rsync up (MB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        label = f"{r['files']} files, {r['bytes'] / 1e6:.0f} MB"
        for phase in PHASES:
            tar = f"{r['tar_fresh']:.2f}" if phase == "fresh" else ""
            print(
                f"| {r['n']} | {label} | {phase} | {r[f'gpufleet_{phase}']:.2f} "
                f"| {r[f'rsync_{phase}']:.2f} | {r[f'ratio_{phase}']:.2f} | {tar} "
                f"| {r[f'gpufleet_{phase}_up'] / 1e6:.2f} | {r[f'rsync_{phase}_up'] / 1e6:.2f} |"
            )


if __name__ == "__main__":
    main()
