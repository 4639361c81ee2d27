#!/usr/bin/env python3
"""Plan benchmark: `gpufleet plan` of shipped stacks at N nodes (the allowed maxima by default).

Each run is a child process that plans one stack (a copy of stacks/Pulumi.<stack>.yaml with
`nodes: N`, in a temporary folder) under Pulumi mocks, as `gpufleet plan --json` does: nothing
is created and no credentials are needed. Per run: wall and CPU seconds of plan_stack (the
cloud SDK's import included, the interpreter's start not), ms per node, the child's peak RSS
(ru_maxrss), the plan document's size, and the resources `pulumi up` would send: in all, per
node, and by type (a type's count, and how many of them are named for one node).
`--tracemalloc` adds the Python heap's peak (several times slower). Not a test: no figure is
asserted.

    .venv/bin/python benchmarks/plan.py                       # aws-p5:512 aws-p4d:512
                                                              # azure-nd-h100:200 gcp-a3:150
    .venv/bin/python benchmarks/plan.py aws-p5:64 aws-p5:128 --json results/plan.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The maxima gpufleet allows: MAX_NODES (aws 512, azure 200: one availability set) and GCP's
# compact placement policy (gcp/rules.py COMPACT_MAX_VMS, 150 VMs per policy).
DEFAULT_RUNS = ("aws-p5:512", "aws-p4d:512", "azure-nd-h100:200", "gcp-a3:150")
NODE_NAME = re.compile(r"-node-\d+(-|$)")


def parse_run(text: str) -> tuple[str, int]:
    """`STACK:N` -> (stack, N)."""
    stack, sep, n = text.rpartition(":")
    if not sep or not stack or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not STACK:N (e.g. aws-p5:512)")
    return stack, int(n)


def stack_copy(stack: str, nodes: int, folder: Path) -> None:
    """stacks/Pulumi.<stack>.yaml with `nodes: N`, written into `folder`."""
    import yaml

    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["gpufleet:cluster"]["nodes"] = nodes
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))


def resource_counts(resources: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per type: how many in all, and how many are one node's (named `<cluster>-node-K...`)."""
    out: dict[str, dict[str, int]] = {}
    for r in resources:
        c = out.setdefault(r["type"], {"total": 0, "per_node_named": 0})
        c["total"] += 1
        c["per_node_named"] += bool(NODE_NAME.search(r["name"]))
    return dict(sorted(out.items()))


def child(stack: str, nodes: int, folder: Path, trace: bool) -> dict[str, Any]:
    """One plan in this process (the child): its figures."""
    import tracemalloc

    from gpufleet.clusters.plan import plan_stack

    if trace:
        tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    doc = plan_stack(stack, folder)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    heap = tracemalloc.get_traced_memory()[1] if trace else None
    return {
        "stack": stack,
        "cloud": doc["cloud"],
        "nodes": nodes,
        "wall_s": wall,
        "cpu_s": cpu,
        "tracemalloc_peak_mib": heap / 2**20 if heap is not None else None,
        "plan_json_mib": len(json.dumps(doc)) / 2**20,
        "resources": len(doc["resources"]),
        "by_type": resource_counts(doc["resources"]),
    }


def measure(stack: str, nodes: int, trace: bool) -> dict[str, Any]:
    """Run one plan in a child process; its figures plus the child's peak RSS."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-plan-") as tmp:
        folder = Path(tmp)
        stack_copy(stack, nodes, folder)
        cmd = [sys.executable, __file__, "--child", f"{stack}:{nodes}", "--folder", tmp]
        # The gpufleet of PYTHONPATH when set (another checkout's, to compare), else this one.
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT)}
        proc = subprocess.Popen(
            cmd + (["--tracemalloc"] if trace else []), stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"plan of {stack} at {nodes} nodes failed (exit {proc.returncode})")
    fig = json.loads(out)
    fig["peak_rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    return fig


def table(runs: list[dict[str, Any]]) -> str:
    head = (
        f"{'cloud':6} {'stack':14} {'N':>4} {'wall s':>7} {'ms/node':>8} {'cpu s':>7} "
        f"{'cpu ms/node':>11} {'peak RSS MiB':>12} {'plan MiB':>8} {'resources':>9} {'/node':>6}"
    )
    lines = [head]
    for r in runs:
        n = r["nodes"]
        lines.append(
            f"{r['cloud']:6} {r['stack']:14} {n:>4} {r['wall_s']:>7.1f} "
            f"{1000 * r['wall_s'] / n:>8.1f} {r['cpu_s']:>7.1f} {1000 * r['cpu_s'] / n:>11.1f} "
            f"{r['peak_rss_mib']:>12.0f} {r['plan_json_mib']:>8.1f} {r['resources']:>9} "
            f"{r['resources'] / n:>6.2f}"
        )
    for r in runs:
        parts = [
            f"{c['total']} {t.split(':')[-1]}"
            + (
                f" ({c['total'] // r['nodes']} per node)"
                if c["per_node_named"] == c["total"] and c["total"] % r["nodes"] == 0
                else f" ({c['per_node_named']} a node's)"
                if c["per_node_named"]
                else ""
            )
            for t, c in r["by_type"].items()
        ]
        lines.append(f"{r['stack']}:{r['nodes']}: " + ", ".join(parts))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", type=parse_run, help="STACK:N, e.g. aws-p5:512")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    ap.add_argument("--tracemalloc", action="store_true", help="also the Python heap's peak")
    ap.add_argument("--child", type=parse_run, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        stack, n = args.child
        print(json.dumps(child(stack, n, args.folder, args.tracemalloc)))
        return
    results = []
    for stack, n in args.runs or [parse_run(r) for r in DEFAULT_RUNS]:
        results.append(measure(stack, n, args.tracemalloc))
        print(table(results[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
