#!/usr/bin/env python3
"""Image archive distribution: gpufleet's pull, in parallel and one by one, against scp + load.

Each method starts clean (no archive, no pull state, the image removed on every node):
  parallel    jobs.pull.ensure_image(parallel=True): this machine sends the archive to the
              head once, the head to every worker at once, every node loads it at once
  one-by-one  ensure_image(parallel=False): the same, one worker copy and one load at a time
  scp+load    what people do by hand: for each node from this machine, `scp` the archive
              there, then `RUNTIME load -i` it over ssh, one node after another
R repetitions, methods interleaved; per method the median wall time, the range, what this
machine uploaded, and each node's load time (gpufleet's report). Every run is checked: the
same digest on every node (gpufleet), every node's file complete (scp+load: its size).

Sandbox (default): an N-node local sandbox, a random --mb archive, the tests' fake runtime
(tests/fakes/runtime.py: its `load` reads the whole file through sha256 and copies it into its
storage folder) and the real node script (components/containerpull.py).
All nodes share this machine's disk and cores: what it shows is the bytes this machine
sends and the relay's shape, not a network's speed.
--cluster NAME: an existing cluster, --archive PATH (a real image, e.g. `podman save
--format oci-archive -o img.tar IMAGE`), each node's own runtime (probed) and the real node
script.

    .venv/bin/python benchmarks/pull.py                     # sandbox: N=4, 200 MB, 3 reps
    .venv/bin/python benchmarks/pull.py -n 3 --mb 50 -r 2
    .venv/bin/python benchmarks/pull.py --cluster vm2 --archive /tmp/img.tar
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _sandbox import ROOT, bench_home, make_cluster, quiet, ssh_config, timed

METHODS = ("parallel", "one-by-one", "scp+load")
BENCH_FILE = "gpufleet-bench.tar"  # scp+load's copy, in each node's workdir


def probe(group: Any) -> dict:
    from gpufleet.components.containerflags import parse_probe, probe_command

    res = group.run(probe_command(), what="container probe")
    facts = {n: parse_probe(r.stdout) for n, r in res.items()}
    bad = {n: f.problems for n, f in facts.items() if not f.runtime}
    if bad:
        raise SystemExit(f"no container runtime on: {bad}")
    return facts


def clean(group: Any, facts: dict, digest: str) -> None:
    """Every node back to the start: no archive copies, no pull state, the image gone."""
    cmds = {}
    for n, f in facts.items():
        rmi = shlex.join([*f.prefix, "rmi", "-f", digest]) if digest else "true"
        gone = f"rm -rf .gpufleet/images .gpufleet/pull {BENCH_FILE}"
        cmds[n] = f"{gone}; {rmi} >/dev/null 2>&1; true"
    group.run(cmds, what="clean")


def scp_load_cmd(info: Any, cfg: Path, facts: dict, archive: Path) -> str:
    """One node after another: scp the archive there, then load it over ssh."""
    steps = []
    for n in info.nodes:
        host = f"{info.name}-{n.name}"
        dest = f"{n.workdir.rstrip('/')}/{BENCH_FILE}"
        load = shlex.join([*facts[n.name].prefix, "load", "-i", dest])
        steps.append(
            f"scp -q -F {cfg} {shlex.quote(str(archive))} {host}:{shlex.quote(dest)} && "
            f"ssh -F {cfg} {host} {shlex.quote(f'{load} >/dev/null && stat -c %s {dest}')}"
        )
    return " && ".join(steps)


def run_bench(info: Any, archive: Path, facts: dict, reps: int, runs: list[dict]) -> dict:
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.jobs import pull
    from gpufleet.remote import Group

    size = archive.stat().st_size
    n = len(info.nodes)
    spec = ContainerSpec(image=f"oci-archive:{archive}")
    cfg = ssh_config(info.name)
    digest = ""
    with Group(info) as g:
        g.wait_ready(120)
        for rep in range(reps):
            for method in METHODS:
                clean(g, facts, digest)
                row: dict[str, Any] = {"method": method, "rep": rep, "n": n, "bytes": size}
                if method == "scp+load":
                    wall, _, out = timed(scp_load_cmd(info, cfg, facts, archive), timeout=3600)
                    sizes = [int(x) for x in out.split()]
                    if sizes != [size] * n:
                        raise SystemExit(f"scp+load: sizes on the nodes {sizes}, want {size}")
                    row |= {"wall": wall, "uploaded": size * n}
                else:
                    t0 = time.perf_counter()
                    rep_ = pull.ensure_image(
                        info, g, spec, facts, quiet, parallel=method == "parallel"
                    )
                    wall = time.perf_counter() - t0
                    if len(set(rep_.digests.values())) != 1 or len(rep_.digests) != n:
                        raise SystemExit(f"{method}: digests {rep_.digests}")
                    digest = rep_.digest
                    row |= {"wall": wall, "uploaded": rep_.uploaded, "load_s": rep_.seconds}
                runs.append(row)
                print(
                    f"rep {rep} {method:<10} {row['wall']:7.2f}s  "
                    f"uploaded {row['uploaded'] / 1e6:8.1f} MB",
                    flush=True,
                )
        clean(g, facts, digest)
    return summarize(runs, size, n)


def summarize(runs: list[dict], size: int, n: int) -> dict:
    out: dict[str, Any] = {"n": n, "archive_bytes": size}
    for m in METHODS:
        rows = [r for r in runs if r["method"] == m]
        walls = [r["wall"] for r in rows]
        out[m] = {
            "median_s": statistics.median(walls),
            "range_s": (min(walls), max(walls)),
            "uploaded": statistics.median(r["uploaded"] for r in rows),
        }
        if "load_s" in rows[-1]:
            out[m]["node_s"] = rows[-1]["load_s"]
    return out


def print_summary(s: dict) -> None:
    print(f"\narchive {s['archive_bytes'] / 1e6:.1f} MB, {s['n']} nodes")
    print(f"{'method':<11} {'median':>8} {'range':>17} {'uploaded from here':>20}")
    for m in METHODS:
        r = s[m]
        lo, hi = r["range_s"]
        print(
            f"{m:<11} {r['median_s']:7.2f}s {f'{lo:.2f}-{hi:.2f}s':>17} "
            f"{r['uploaded'] / 1e6:>17.1f} MB"
        )
        if "node_s" in r:
            per = ", ".join(f"{k} {v:.2f}s" for k, v in r["node_s"].items())
            print(f"{'':<11} load per node (last rep): {per}")
    par, one, scp = (s[m]["median_s"] for m in METHODS)
    print(f"one-by-one / parallel: {one / par:.2f}x; scp+load / parallel: {scp / par:.2f}x")


def sandbox(args: argparse.Namespace, runs: list[dict]) -> dict:
    from gpufleet.provision import localsshd

    sys.path.insert(0, str(ROOT))
    from tests.fakes import runtime as fakert

    with bench_home("gpufleet-pullbench-") as home:
        fake = fakert.install(home / "fakebin", home / "fakert")
        orig = localsshd.node_path
        localsshd.node_path = lambda: f"{fake}:{orig()}"  # the fake runtime on the nodes' PATH
        archive = home / "image.tar"
        with open(archive, "wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(1 << 20))
        info = make_cluster("pullbench", args.n)
        from gpufleet.components.containerflags import NodeFacts

        facts = {n.name: NodeFacts(runtime="docker") for n in info.nodes}
        return run_bench(info, archive, facts, args.reps, runs)


def existing(args: argparse.Namespace, runs: list[dict]) -> dict:
    from gpufleet.core import state
    from gpufleet.remote import Group

    if args.archive is None or not args.archive.is_file():
        raise SystemExit("--cluster needs --archive PATH, a real image archive")
    info = state.load(args.cluster)
    with Group(info) as g:
        g.wait_ready(120)
        facts = probe(g)
    return run_bench(info, args.archive, facts, args.reps, runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=4, help="sandbox nodes")
    ap.add_argument("--mb", type=int, default=200, help="sandbox archive size")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--cluster", help="an existing cluster instead of a sandbox")
    ap.add_argument("--archive", type=Path, help="with --cluster: the image archive")
    ap.add_argument("--real-script", action="store_true", help="ignored: always the real script")
    ap.add_argument("--json", type=Path, help="write every run and the summary to this file")
    args = ap.parse_args()
    runs: list[dict] = []
    summary = existing(args, runs) if args.cluster else sandbox(args, runs)
    print_summary(summary)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
