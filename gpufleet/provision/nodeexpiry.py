"""Moves a running cluster's hard expiry on its nodes over SSH, the same way on every provider."""

from __future__ import annotations

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.core.errors import ExtendFailed

CONNECT_S = 60.0


def write_node_expiry(info: ClusterInfo, expires_at: float) -> None:
    """Write the new hard expiry where every node's own expiry reads it first
    (/var/lib/gpufleet/expires_at, root's; the sandbox node's state folder); ExtendFailed,
    naming the nodes, unless every node took it."""
    from gpufleet.remote import Group

    with Group(info) as g:
        # refused_fails: the cluster exists, so a refused connection is a node gone, not booting
        g.wait_ready(CONNECT_S, refused_fails=True)
        failed = {n: why for n, why in g.write_expiry(expires_at).items() if why}
    if failed:
        raise ExtendFailed(info.name, failed)
