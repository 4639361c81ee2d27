"""This process's limits at scale: open files and threads per node, raised or refused up front."""

from __future__ import annotations

import resource

from gpufleet.core.errors import ClientLimit

# Measured (docs/limits.md): a cold exec on 8 and 16 sandbox nodes peaked at 2 fds per node + 1
# (workers tunnelled in the head's one connection: paramiko makes a pipe of 2 fds for each
# channel waited on); a node reached at its own address adds its socket.
FDS_PER_NODE = 3
FDS_BASE = 64  # the interpreter, state files, log and subprocess pipes (6 at start-up)
# Measured 2.6 per node (a transport's thread and a pool worker each); `run` adds a liveness
# probe per node, and a lease renewal or a cancel a short-lived thread per node.
THREADS_PER_NODE = 4

FDS_FIX = (
    "raise the hard limit on open files (`ulimit -Hn` shows it; `nofile` in "
    "/etc/security/limits.conf, LimitNOFILE= for a systemd unit), or use fewer nodes"
)
THREADS_FIX = (
    "raise the limit on processes (`ulimit -Hu` shows it; `nproc` in "
    "/etc/security/limits.conf, TasksMax= for a systemd unit), or use fewer nodes"
)


def fds_needed(nodes: int) -> int:
    return FDS_BASE + FDS_PER_NODE * nodes


def threads_needed(nodes: int) -> int:
    return 16 + THREADS_PER_NODE * nodes


TREE = "; `exec --tree` holds one connection here whatever the cluster's size"


def ensure(nodes: int) -> None:
    """Make room in this process for SSH to `nodes` nodes at once: its soft limits on open
    files and threads are raised to the hard ones where they are too low; ClientLimit, before
    anything starts, when even those are."""
    _ensure(resource.RLIMIT_NOFILE, "open files (RLIMIT_NOFILE)", nodes, fds_needed(nodes),
            FDS_FIX + TREE)  # fmt: skip
    _ensure(resource.RLIMIT_NPROC, "threads (RLIMIT_NPROC)", nodes, threads_needed(nodes),
            THREADS_FIX + TREE)  # fmt: skip


def _ensure(which: int, label: str, nodes: int, need: int, fix: str) -> None:
    soft, hard = resource.getrlimit(which)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    if hard != resource.RLIM_INFINITY and need > hard:
        raise ClientLimit(label, nodes, need, hard, fix)
    # To the hard limit; where that is unlimited (macOS), to what is needed: a soft limit
    # above the kernel's own maximum is refused there.
    for target in (hard, need):
        try:
            resource.setrlimit(which, (target, hard))
            return
        except (ValueError, OSError):
            continue
    raise ClientLimit(label, nodes, need, soft, fix)
