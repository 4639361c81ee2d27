"""Sandbox fixtures: real sshd nodes on loopback, always stopped, even when a test fails."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.clusters import ops
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import state
from gpufleet.provision.localprocs import sandbox_processes
from gpufleet.provision.localsshd import find_sshd

ROOT = Path(__file__).resolve().parents[2]


def _have_sshd() -> bool:
    try:
        find_sshd()
        return True
    except Exception:
        return False


requires_sshd = pytest.mark.skipif(not _have_sshd(), reason="OpenSSH sshd is not installed")


def _have_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


requires_torch = pytest.mark.skipif(not _have_torch(), reason="torch is not installed")


def leftovers(name: str) -> list[int]:
    """Processes of a sandbox cluster still alive: its sshds' sessions and job ranks."""
    return sandbox_processes(name)


def sshd_of(home: Path, name: str) -> list[str]:
    """sshd command lines still running for this cluster's folder."""
    out = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    marker = str(home / "clusters" / name)
    return [ln for ln in out.splitlines() if "sshd" in ln and marker in ln]


@pytest.fixture
def make_sandbox(gpufleet_home: Path) -> Iterator:
    """make_sandbox(name, nodes, **spec fields) -> ClusterInfo; every cluster is torn down."""
    made: list[str] = []

    def make(name: str = "t", nodes: int = 2, ttl_minutes: int = 30, **fields) -> ClusterInfo:
        spec = ClusterSpec.from_input(
            {"name": name, "nodes": nodes, "ttl_minutes": ttl_minutes, **fields}
        )
        made.append(name)
        return ops.create(spec, lambda _m: None)

    yield make
    for name in made:
        if state.exists(name):
            ops.destroy(state.load(name), lambda _m: None)
        assert not leftovers(name), f"processes of {name} left running"


def cli_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, GPUFLEET_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("GPUFLEET_DEBUG", None)
    return env


def gpufleet(home: Path, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess against this test's state dir."""
    argv = [sys.executable, "-m", "gpufleet", *args]
    return run_in_session(argv, timeout=timeout, env=cli_env(home), cwd=ROOT, **kw)


def run_in_session(
    argv: list[str], timeout: float, input: str | None = None, **kw
) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True), but in a session of its own: on
    timeout its whole process group is killed (ssh clients, a local torchrun, the CLI a
    script started), not just its first process; the home's teardown removes clusters."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a process started with start_new_session=True and its whole group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)
