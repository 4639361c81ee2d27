"""The sandbox node's preemption watcher, pointed at a fake metadata server (tests only)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpufleet.components import preempt
from gpufleet.components.resources import data_dir
from gpufleet.core import state

# "CLOUD=URL", URL with {node} for the node's name: e.g. "aws=http://127.0.0.1:PORT/{node}".
ENV = "GPUFLEET_SANDBOX_METADATA"


def start_watcher(cluster: str, cdir: Path, node: str, node_dir: Path) -> int | None:
    """Start scripts/preempt_watch.sh for one sandbox node; its pid, or None when ENV is unset.

    It carries the node's session markers (GPUFLEET_SANDBOX, GPUFLEET_NODE and a
    GPUFLEET_STATE_DIR under the cluster's folder) and names the node's folder on its command
    line, so `down`, the watchdog's node removal and a replace's stop of the old node find it
    as they find the node's sshd and sessions (localprocs). It signals only this node's ranks.
    """
    spec = os.environ.get(ENV, "")
    if not spec:
        return None
    cloud, sep, url = spec.partition("=")
    if not sep or cloud not in preempt.CLOUDS or not url:
        raise ValueError(f"{ENV}={spec!r}: want CLOUD=URL, CLOUD one of {preempt.CLOUDS}")
    for name in (preempt.NOTICE, preempt.REBALANCE):  # a new node has no notice yet
        (node_dir / name).unlink(missing_ok=True)
    argv = preempt.watch_command(
        cloud,
        state_dir=str(node_dir),
        script_path=str(data_dir("scripts") / "preempt_watch.sh"),
        url=url.replace("{node}", node),
        every=1,
        sandbox=cluster,
        node=node,
    )
    env = {
        **{k: v for k, v in os.environ.items() if k != "GPUFLEET_RUN_ID"},
        "GPUFLEET_SANDBOX": cluster,
        "GPUFLEET_NODE": node,
        "GPUFLEET_STATE_DIR": str(node_dir),
        "GPUFLEET_HOME": str(state.home()),
    }
    log = open(node_dir / "preempt.log", "ab")  # noqa: SIM115 - the child keeps it
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
            cwd=str(cdir),
        )
    finally:
        log.close()
    return proc.pid
