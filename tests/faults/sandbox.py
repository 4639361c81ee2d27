"""Helpers to start `gpufleet run` on the sandbox, disturb it, and check nothing is left."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.provision.localprocs import _descendants, folder_processes, sandbox_processes
from tests.integration.conftest import ROOT, cli_env, gpufleet, kill_group, sshd_of


@dataclass
class Run:
    """A `gpufleet run` in its own session, its merged output read on a thread."""

    proc: subprocess.Popen
    started: float
    lines: list[str] = field(default_factory=list)
    q: queue.Queue = field(default_factory=queue.Queue)

    def wait_for(self, pattern: str, timeout: float = 120) -> bool:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        if any(rx.search(ln) for ln in self.lines):
            return True
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                return False
            if rx.search(line):
                return True
        return False

    def finish(self, timeout: float = 180) -> tuple[int, float, str]:
        """Exit code, seconds from `t0` (set by the caller) to exit, all output."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        ended = time.monotonic()
        self._reader.join(5)
        return rc, ended, "".join(self.lines)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        """A test that failed before finish(): kill the run's whole group (the home's
        teardown then removes its cluster)."""
        kill_group(self.proc)


def start_run(home: Path, *args: str, env: dict[str, str] | None = None) -> Run:
    """Start `gpufleet run`; use as `with start_run(...) as run:` so it never outlives the test."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**cli_env(home), **(env or {})},
        cwd=ROOT,
        start_new_session=True,
    )
    run = Run(proc, time.monotonic())

    def pump() -> None:
        for line in proc.stdout:
            run.lines.append(line)
            run.q.put(line)
        run.q.put(None)

    run._reader = threading.Thread(target=pump, daemon=True)  # type: ignore[attr-defined]
    run._reader.start()  # type: ignore[attr-defined]
    return run


def cluster_json(home: Path, name: str) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((home / "clusters" / name / "cluster.json").read_text())
    return None


def node_processes(home: Path, name: str, node: str) -> list[int]:
    """A sandbox node's sshd, its per-connection children and every session process."""
    data = cluster_json(home, name) or {}
    pid = data.get("provider", {}).get("pids", {}).get(node)
    pids = set(sandbox_processes(name, node))
    if pid:
        pids.add(pid)
        pids.update(_descendants(pid))
    return sorted(pids)


def signal_node(home: Path, name: str, node: str, sig: int) -> list[int]:
    pids = node_processes(home, name, node)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return pids


def node_address(home: Path, name: str, node: str) -> tuple[str, int]:
    data = cluster_json(home, name) or {"nodes": []}
    n = next(n for n in data["nodes"] if n["name"] == node)
    return n["private_ip"], n["ssh_port"]


def iptables_works() -> bool:
    if not shutil.which("iptables") or os.geteuid() != 0:
        return False
    return subprocess.run(["iptables", "-S", "INPUT"], capture_output=True).returncode == 0


@contextlib.contextmanager
def partitioned(addr: str, port: int):
    """DROP a sandbox node's SSH traffic (its 127.0.1.K:port only); removed afterwards."""
    rules = [
        ["INPUT", "-p", "tcp", "-d", addr, "--dport", str(port), "-j", "DROP"],
        ["OUTPUT", "-p", "tcp", "-s", addr, "--sport", str(port), "-j", "DROP"],
    ]
    added = []
    try:
        for r in rules:
            subprocess.run(["iptables", "-I", *r], check=True, capture_output=True)
            added.append(r)
        yield
    finally:
        for r in added:
            subprocess.run(["iptables", "-D", *r], capture_output=True)


def leaks(home: Path, name: str) -> list[str]:
    """Whatever of cluster `name` is still there: records, sshd, sessions, watchdog."""
    out = []
    listed = json.loads(gpufleet(home, "list", "--json").stdout or "{}").get("clusters", [])
    out += [f"listed: {r['name']}" for r in listed if r["name"] == name]
    out += [f"sshd: {ln}" for ln in sshd_of(home, name)]
    out += [f"session pid {p}" for p in sandbox_processes(name)]
    out += [f"folder pid {p}" for p in folder_processes(home / "clusters" / name)]
    return out


def wait_no_leaks(home: Path, name: str, timeout: float = 15) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := leaks(home, name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
