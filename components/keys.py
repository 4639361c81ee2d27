"""Per-cluster SSH user key and, where a node cannot publish its own, bootstrap host keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ClusterKeys:
    user: Any  # pulumi_tls.PrivateKey
    # One pulumi_tls.PrivateKey per node, head first: the bootstrap host key its user data
    # carries, replaced by a key made on the node at first contact (gpufleet/remote/hostkeys.py).
    # Empty where the nodes make their own and publish them (bootstrap.HOST_KEY_CHANNEL).
    hosts: list[Any]


def cluster_keys(name: str, node_count: int, parent: Any, *, host_keys: bool = True) -> ClusterKeys:
    """Create the user key and (host_keys) one host key per node as children of `parent`."""
    import pulumi
    import pulumi_tls as tls

    opts = pulumi.ResourceOptions(parent=parent)
    user = tls.PrivateKey(f"{name}-user-key", algorithm="ED25519", opts=opts)
    hosts = [
        tls.PrivateKey(f"{name}-node-{i}-host-key", algorithm="ED25519", opts=opts)
        for i in range(node_count if host_keys else 0)
    ]
    return ClusterKeys(user=user, hosts=hosts)
