"""The sandbox's watchdog process: it removes each node at min(hard expiry, lease)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.core import state
from gpufleet.provision.localprocs import (
    _cmdline,
    _descendants,
    sandbox_processes,
    stop_cluster_processes,
    terminate,
)
from gpufleet.provision.localsshd import _write

WATCH_EVERY_S = float(os.environ.get("GPUFLEET_WATCHDOG_EVERY_S", 2.0))


def _record_pids(cdir: Path, pids: dict[str, int]) -> None:
    """pids.json beside the state: the watchdog's nodes when cluster.json is missing or damaged."""
    tmp = cdir / f"pids.json.{os.getpid()}.tmp"
    _write(tmp, json.dumps(pids))
    os.replace(tmp, cdir / "pids.json")


def recorded_pids(cdir: Path) -> dict[str, int]:
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = json.loads((cdir / "pids.json").read_text())
        return {str(k): int(v) for k, v in data.items()}
    return {}


def start_watchdog(cluster: str, cdir: Path, uid: str) -> int:
    """A detached process that removes each sandbox node at min(hard expiry, its lease)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpufleet.provision.localwatchdog",
            "watchdog",
            cluster,
            f"{cdir}/",
            uid,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "GPUFLEET_HOME": str(state.home())},
    )
    return proc.pid


def _read_epoch(path: Path) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        return float(path.read_text().split()[0])
    return None


def _node_deadline(cdir: Path, node: str) -> float | None:
    """When a node removes itself: min(hard expiry, lease); None: never. As on a cloud node
    (images/ttl/gpufleet-expire), a hard expiry `extend` wrote to the node's own state
    directory replaces the one it was created with."""
    ndir = cdir / "nodes" / node
    hard = _read_epoch(ndir / "expires_at")
    if hard is None:
        hard = _read_epoch(cdir / "expires_at")
    ends = [t for t in (hard, _read_epoch(ndir / "lease")) if t is not None]
    return min(ends) if ends else None


def _stop_node(cluster: str, cdir: Path, node: str, pid: int | None, when: float) -> None:
    ndir = cdir / "nodes" / node
    with contextlib.suppress(OSError):
        (ndir / "expired").write_text(f"{when:.0f}\n")
    ours = [pid] if pid and str(cdir) in _cmdline(pid) else []
    procs = set(sandbox_processes(cluster, node))
    for p in ours:
        procs.update(_descendants(p))
    terminate(sorted(procs) + ours, grace_s=2.0)


def _watchdog(cluster: str, cdir: Path, uid: str) -> None:
    """The sandbox nodes' own expiry; ends when its cluster is gone or was replaced."""
    stopped: set[str] = set()
    unreadable = 0
    while True:
        time.sleep(WATCH_EVERY_S)
        if not cdir.is_dir():
            return  # `down` removed the cluster
        try:
            data = json.loads((cdir / "cluster.json").read_text())
            unreadable = 0
        except (OSError, ValueError):
            # still being created, or damaged: give creation time, then go on pids.json
            unreadable += 1
            data = {"provider": {"uid": uid, "pids": recorded_pids(cdir)}, "nodes": []}
            if unreadable * WATCH_EVERY_S < 60:
                continue
        if data.get("provider", {}).get("uid") != uid:
            return  # a newer cluster of the same name: not ours to remove
        pids = {k: v for k, v in data["provider"].get("pids", {}).items() if k != "watchdog"}
        names = [n["name"] for n in data.get("nodes", [])] or sorted(pids)
        now = time.time()
        for node in names:
            when = _node_deadline(cdir, node)
            if node not in stopped and when is not None and now >= when:
                _stop_node(cluster, cdir, node, pids.get(node), when)
                stopped.add(node)
        if names and stopped >= set(names):
            stop_cluster_processes(cluster, cdir)
            ends = [t for node in names if (t := _node_deadline(cdir, node)) is not None]
            state.forget(cluster, expired=max(ends, default=now))
            return


if __name__ == "__main__" and sys.argv[1:2] == ["watchdog"]:
    _watchdog(sys.argv[2], Path(sys.argv[3].rstrip("/")), sys.argv[4])
