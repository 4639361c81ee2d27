"""Per-cluster SSH user key and per-node bootstrap host keys (pulumi_tls), pinned before use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ClusterKeys:
    user: Any  # pulumi_tls.PrivateKey
    # One pulumi_tls.PrivateKey per node, head first: the bootstrap host key its user data
    # carries, replaced by a key made on the node at first contact (gpufleet/remote/hostkeys.py).
    hosts: list[Any]


def cluster_keys(name: str, node_count: int, parent: Any) -> ClusterKeys:
    """Create the user key and one host key per node as children of `parent`."""
    import pulumi
    import pulumi_tls as tls

    opts = pulumi.ResourceOptions(parent=parent)
    user = tls.PrivateKey(f"{name}-user-key", algorithm="ED25519", opts=opts)
    hosts = [
        tls.PrivateKey(f"{name}-node-{i}-host-key", algorithm="ED25519", opts=opts)
        for i in range(node_count)
    ]
    return ClusterKeys(user=user, hosts=hosts)
