"""Sandbox processes: found by their command line's folder or session environment; stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from gpufleet.core import state


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, in one pass over /proc."""
    out: dict[int, int] = {}
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            out[int(p.name)] = int((p / "stat").read_text().split(")")[-1].split()[1])
    return out


def _descendants(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """Children of `pid` and theirs. One /proc pass (`parents`, or a fresh one) serves every
    call: a scan per process made `down` of 256 nodes take 40 s (N sshds x every process)."""
    kids: dict[int, list[int]] = {}
    for child, parent in (_parents() if parents is None else parents).items():
        kids.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for kid in kids.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def sandbox_processes(cluster: str, node: str | None = None) -> list[int]:
    """PIDs of sessions (and their children) that sandbox sshd started for this cluster.

    The name alone is not enough: another $GPUFLEET_HOME (another user's tests, say) may
    have a cluster of the same name, so the session's state dir must be under ours.
    """
    markers = {f"GPUFLEET_SANDBOX={cluster}".encode()}
    if node:
        markers.add(f"GPUFLEET_NODE={node}".encode())
    ours = f"GPUFLEET_STATE_DIR={state.cluster_dir(cluster)}/".encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            env = (p / "environ").read_bytes().split(b"\0")
            if markers <= set(env) and any(e.startswith(ours) for e in env):
                found.append(int(p.name))
    return [pid for pid in found if pid != os.getpid()]


def folder_processes(cluster_dir: Path) -> list[int]:
    """PIDs whose command line names the cluster's folder: its sshds and its watchdog."""
    marker = str(cluster_dir) + "/"
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmd + "/" and int(p.name) != os.getpid():
                found.append(int(p.name))
    return found


def terminate(pids: list[int], grace_s: float = 3.0) -> None:
    """SIGTERM, wait for exit up to grace_s, then SIGKILL whatever is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_cluster_processes(cluster: str, cluster_dir: Path) -> None:
    """Stop a sandbox cluster's sshds and watchdog and every session process.

    Found by the folder their command line names, not by recorded PIDs: a damaged or
    half-written state file still leaves nothing running, and a reused PID is never hit.
    """
    ours = sorted(folder_processes(cluster_dir))
    sessions = set(sandbox_processes(cluster))
    parents = _parents()
    for pid in ours:
        sessions.update(_descendants(pid, parents))
    terminate(sorted(sessions) + ours)
    leftovers = sandbox_processes(cluster)
    if leftovers:
        terminate(leftovers, grace_s=1.0)


def stop_node_processes(cluster: str, node: str, sshd_pid: int | None, cluster_dir: Path) -> None:
    """Stop what is left of one sandbox node: its sshd (by pid, checked against its command
    line) and every session process with its markers; leftovers are killed."""
    conf = f"{cluster_dir}/nodes/{node}/sshd_config"
    mine = [sshd_pid] if sshd_pid and conf in _cmdline(sshd_pid) else []
    sessions = set(sandbox_processes(cluster, node))
    parents = _parents()
    for pid in mine:
        sessions.update(_descendants(pid, parents))
    terminate(sorted(sessions) + mine, grace_s=1.0)
    leftovers = sandbox_processes(cluster, node)
    if leftovers:
        terminate(leftovers, grace_s=1.0)


def stop_by_folder(cluster: str) -> None:
    """Stop everything of a sandbox cluster: what its folder names and its sessions."""
    stop_cluster_processes(cluster, state.cluster_dir(cluster))


def stray_processes() -> list[int]:
    """sshds and watchdogs (with their sessions) of sandbox clusters whose folder is gone."""
    root = str(state.home() / "clusters") + "/"
    out: list[int] = []
    parents = _parents()
    for pid in parents:
        cmd = _cmdline(pid)
        if root not in cmd or pid == os.getpid():
            continue
        name = cmd.split(root, 1)[1].split("/", 1)[0].split()[0]
        if name and not (state.home() / "clusters" / name).is_dir():
            out.append(pid)
            out.extend(_descendants(pid, parents))
    return sorted(set(out))
