"""What every benchmark shares: a throwaway GPUFLEET_HOME of sandbox clusters, and timing."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the checkout's gpufleet, also when it is not installed
    sys.path.insert(0, str(ROOT))


def quiet(_: str) -> None:
    """A progress callback that prints nothing."""


def cpu_children() -> float:
    """user+sys seconds of every child process reaped so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(
    cmd: str,
    env: dict[str, str] | None = None,
    expect_lines: int | None = None,
    timeout: float = 600.0,
) -> tuple[float, float, str]:
    """Run a bash command line: (wall s, client CPU s of its process tree, stdout).

    A non-zero exit, or a line count other than expect_lines, ends the benchmark.
    """
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run(
        cmd,
        shell=True,
        executable="/bin/bash",
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall, cpu = time.perf_counter() - t0, cpu_children() - c0
    if p.returncode != 0:
        raise SystemExit(f"run failed ({p.returncode}): {cmd}\n{p.stderr[-3000:]}")
    if expect_lines is not None and len(p.stdout.splitlines()) != expect_lines:
        raise SystemExit(f"expected {expect_lines} lines from {cmd}, got:\n{p.stdout[-2000:]}")
    return wall, cpu, p.stdout


def gf() -> str:
    """The gpufleet command line: the venv's console script, else `python -m gpufleet`."""
    cli = Path(sys.executable).with_name("gpufleet")
    return str(cli) if cli.exists() else f"{sys.executable} -m gpufleet"


def destroy(name: str) -> None:
    """Stop everything of one cluster (holder, kept head connection, nodes) and forget it."""
    from gpufleet.clusters import ops
    from gpufleet.core import state

    ops.destroy(state.load(name), quiet)


@contextlib.contextmanager
def bench_home(prefix: str) -> Iterator[Path]:
    """A fresh GPUFLEET_HOME for this run; on exit, also on Ctrl-C, SIGTERM or a failed
    check, every cluster in it is destroyed and the folder removed."""
    from gpufleet.core import signals, state

    home = Path(tempfile.mkdtemp(prefix=prefix))
    before = os.environ.get("GPUFLEET_HOME")
    os.environ["GPUFLEET_HOME"] = str(home)
    signals.install_handlers()  # SIGTERM/SIGHUP too unwind through the finally below
    try:
        yield home
    finally:
        with signals.shielded():  # a Ctrl-C during the teardown waits for it to finish
            for name in state.names():
                destroy(name)
            shutil.rmtree(home, ignore_errors=True)
        if before is None:
            os.environ.pop("GPUFLEET_HOME", None)
        else:
            os.environ["GPUFLEET_HOME"] = before
        signals.raise_pending()  # a signal that arrived during the teardown is not lost


def make_cluster(name: str, n: int, **fields: Any) -> Any:
    """Create a sandbox cluster of n nodes and wait until every node answers; its record.

    The first contact replaces the nodes' bootstrap host keys, so it happens here and not
    inside the first timed run.
    """
    from gpufleet.clusters import ops
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from gpufleet.remote import Group

    info = ops.create(ClusterSpec.from_input({"name": name, "nodes": n, **fields}), quiet)
    with Group(info) as g:
        g.wait_ready(120)
    return state.load(name)


def ssh_config(name: str) -> Path:
    """The OpenSSH config `create` wrote for the cluster (hosts NAME and NAME-node-K)."""
    from gpufleet.core import state
    from gpufleet.remote import sshconfig

    return state.cluster_dir(name) / sshconfig.FILE
