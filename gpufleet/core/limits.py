"""This process's limits at scale: open files and threads per node, raised or refused up front."""

from __future__ import annotations

import resource
import sys

from gpufleet.core.errors import ClientLimit

# Measured (docs/limits.md; 8, 16 and 64 sandbox nodes, workers tunnelled in the head's one
# connection): a cold exec peaked at 2 fds and 2.2-2.9 threads per node, a `run` at 2 fds and 3
# threads. Per node: its socket where it is reached at its own address, and its transport's
# thread; per command running on it: the pipe (2 fds) paramiko makes for a channel that is
# waited on, a pool worker, and in a run a liveness probe and a lease renewal's or a kill's
# short-lived thread.
FDS_BASE, FDS_PER_NODE, FDS_PER_COMMAND = 64, 1, 2
THREADS_BASE, THREADS_PER_NODE, THREADS_PER_COMMAND = 16, 1, 3

FDS_FIX = (
    "raise the hard limit on open files (`ulimit -Hn` shows it; `nofile` in "
    "/etc/security/limits.conf, LimitNOFILE= for a systemd unit), or use fewer nodes"
)
THREADS_FIX = (
    "raise the limit on processes (`ulimit -Hu` shows it; `nproc` in "
    "/etc/security/limits.conf, TasksMax= for a systemd unit), or use fewer nodes"
)


def fds_needed(nodes: int, commands: int = 1) -> int:
    """Open files for `nodes` connections with `commands` running at once on each."""
    return FDS_BASE + nodes * (FDS_PER_NODE + FDS_PER_COMMAND * commands)


def threads_needed(nodes: int, commands: int = 1) -> int:
    return THREADS_BASE + nodes * (THREADS_PER_NODE + THREADS_PER_COMMAND * commands)


TREE = "; `exec --tree` holds one connection here whatever the cluster's size"


def ensure(nodes: int, commands: int = 1) -> None:
    """Make room in this process for SSH to `nodes` nodes at once, `commands` at once on each
    (the holder serves several): its soft limits on open files and threads are raised to the
    hard ones where they are too low; ClientLimit, before anything starts, when even those are."""
    fds, threads = fds_needed(nodes, commands), threads_needed(nodes, commands)
    _ensure(resource.RLIMIT_NOFILE, "open files (RLIMIT_NOFILE)", nodes, fds, FDS_FIX + TREE)
    if sys.platform.startswith("linux"):  # Linux counts threads in it; macOS, processes only
        _ensure(resource.RLIMIT_NPROC, "threads (RLIMIT_NPROC)", nodes, threads, THREADS_FIX + TREE)


def _ensure(which: int, label: str, nodes: int, need: int, fix: str) -> None:
    soft, hard = resource.getrlimit(which)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard != resource.RLIM_INFINITY and need > hard:
        raise ClientLimit(label, nodes, need, hard, fix)
    # To the hard limit (the figures per node are measured, not bounds); where that is
    # unlimited (macOS), to what is needed: a soft limit above the kernel's maximum is refused.
    for target in (hard, need):
        try:
            resource.setrlimit(which, (target, hard))
            return
        except (ValueError, OSError):
            continue
    raise ClientLimit(label, nodes, need, soft, fix)
