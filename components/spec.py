"""The old path of ClusterSpec, ClusterInfo and their kin, each now in a module of its own."""

from gpufleet.components.clouds import CLOUDS, PULUMI_CLOUDS, Cloud
from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.clusterspec import (
    DEFAULT_REGION,
    DEFAULT_SSH_USER,
    MAX_NODES,
    MAX_TTL_MINUTES,
    ClusterSpec,
)
from gpufleet.components.hostkeyrotation import HostKeyRotation

__all__ = [
    "CLOUDS",
    "DEFAULT_REGION",
    "DEFAULT_SSH_USER",
    "MAX_NODES",
    "MAX_TTL_MINUTES",
    "PULUMI_CLOUDS",
    "ClusterInfo",
    "ClusterSpec",
    "Cloud",
    "HostKeyRotation",
    "NodeInfo",
    "node_names",
]
