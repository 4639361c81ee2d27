#!/usr/bin/env python3
"""Cold `exec` reliability: K cold `gpufleet exec NAME -- true` in a row on N sandbox nodes.

Counts the runs that failed (any node without exit 0), the runs whose output holds a Python
traceback, and what the nodes' sshd logs say about dropped connections ("Disconnecting ...
packet referred to nonexistent channel": the EOF-after-CLOSE race of paramiko#1115/#1705
that dropped the head's connection, and every worker tunnelled in it, in about 1 run of 10
at 64 nodes). `--unfixed` runs the same CLI with paramiko's own `shutdown_write` and bare
tunnels in place of gpufleet's `send_eof` and `Tunnel` (the code before the fix), so both
are measured on the same machine. Not a test: figures for the closing note and docs.

    .venv/bin/python benchmarks/coldexec.py -n 64 -k 20
    .venv/bin/python benchmarks/coldexec.py -n 64 -k 20 --unfixed
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _sandbox import bench_home, make_cluster

UNFIXED = (
    "import sys, gpufleet.remote.connection as c\n"
    "c.send_eof = lambda chan: chan.shutdown_write()\n"
    "c.Tunnel = lambda chan: chan\n"
    "from gpufleet.cli import entry\n"
    "sys.argv[0] = 'gpufleet'\n"
    "entry()\n"
)


def dropped(home: Path, name: str) -> list[str]:
    """The sshd log lines of connections sshd itself dropped, over every node."""
    lines: list[str] = []
    for log in sorted((home / "clusters" / name / "nodes").glob("*/sshd.log")):
        lines += [
            ln for ln in log.read_text(errors="replace").splitlines() if "Disconnecting" in ln
        ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nodes", type=int, default=64)
    ap.add_argument("-k", "--runs", type=int, default=20)
    ap.add_argument("--unfixed", action="store_true", help="paramiko's shutdown_write, no Tunnel")
    ap.add_argument(
        "--tree",
        action="store_true",
        help="exec --tree (the head's fan-out); else --no-tree (the default path): every "
        "worker tunnelled through the client's one head connection, where the drop was",
    )
    ap.add_argument("--json", type=Path, help="write the runs here")
    a = ap.parse_args()
    cli = [sys.executable, "-c", UNFIXED] if a.unfixed else [sys.executable, "-m", "gpufleet"]
    runs = []
    with bench_home("gf-coldexec-") as home:
        env = {**os.environ, "GPUFLEET_HOLDER": "0"}  # cold: a new connection to every node
        name = "cold"
        make_cluster(name, a.nodes)
        for i in range(a.runs):
            t0 = time.perf_counter()
            p = subprocess.run(
                [*cli, "exec", name, "--tree" if a.tree else "--no-tree", "--", "true"],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            wall = time.perf_counter() - t0
            if p.returncode not in (0, 4):  # 4: a node unreachable, what is counted here
                raise SystemExit(f"exec exited {p.returncode}: {p.stderr[-2000:]}")
            failed = [ln for ln in p.stderr.splitlines() if ln.startswith("gpufleet: node-")]
            summary = [ln for ln in p.stderr.splitlines() if "failed on " in ln]
            runs.append(
                {
                    "run": i + 1,
                    "exit": p.returncode,
                    "wall_s": round(wall, 3),
                    "failed_nodes": len(failed),
                    "first": failed[0] if failed else None,
                    "summary": summary[-1] if summary else None,
                    "traceback": "Traceback" in p.stderr + p.stdout,
                    "stderr_tail": p.stderr[-1500:] if p.returncode else "",
                }
            )
            r = runs[-1]
            print(
                f"run {r['run']:>2}: exit {r['exit']} {r['wall_s']:.2f}s "
                f"failed nodes {r['failed_nodes']}{' TRACEBACK' if r['traceback'] else ''}"
                + (f"  ({r['summary']}; {r['first']})" if r["exit"] else ""),
                flush=True,
            )
        drops = dropped(home, name)
    bad = [r for r in runs if r["exit"] != 0]
    print(
        f"\n{'unfixed' if a.unfixed else 'gpufleet'}{' --tree' if a.tree else ''}: "
        f"{a.runs} cold execs on {a.nodes} nodes: "
        f"{len(bad)} failed, {sum(r['traceback'] for r in runs)} with a traceback; "
        f"sshd dropped {len(drops)} connections"
    )
    for line in sorted(set(d.split(": ", 1)[-1] for d in drops)):
        print(f"  sshd: ...{line}")
    if a.json:
        a.json.write_text(
            json.dumps(
                {"nodes": a.nodes, "unfixed": a.unfixed, "runs": runs, "sshd_dropped": drops},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
