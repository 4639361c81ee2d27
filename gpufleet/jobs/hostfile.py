"""Hostfiles for MPI, DeepSpeed and shell scripts: pure renderers of a ClusterInfo."""

from __future__ import annotations

import shlex

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.components.contract import hostfile_lines
from gpufleet.components.errors import SpecError
from gpufleet.remote import sshconfig

FORMATS: tuple[str, ...] = ("openmpi", "mpich", "deepspeed", "plain", "env")


def slots(node: NodeInfo, override: int | None = None) -> int:
    """Ranks on a node: the override, else its GPUs, and never 0 (a CPU node runs one rank)."""
    return max(override or node.gpus, 1)


def env_vars(info: ClusterInfo, slots_per_node: int | None = None) -> dict[str, str]:
    """The cluster-wide variables of the `env` format (and of every rank's environment)."""
    per_node = [slots(n, slots_per_node) for n in info.nodes]
    return {
        "GPUFLEET_CLUSTER": info.name,
        "GPUFLEET_NUM_NODES": str(len(info.nodes)),
        "GPUFLEET_NODE_IPS": ",".join(n.private_ip for n in info.nodes),
        "GPUFLEET_NODE_NAMES": ",".join(n.name for n in info.nodes),
        "GPUFLEET_SLOTS_PER_NODE": ",".join(map(str, per_node)),
        "GPUFLEET_WORLD_SIZE": str(sum(per_node)),
        "MASTER_ADDR": info.head.private_ip,
    }


def render(
    info: ClusterInfo, fmt: str, slots_per_node: int | None = None, *, aliases: bool = False
) -> str:
    """The hostfile text in `fmt`, head first: private addresses, or with `aliases` the
    `<cluster>-node-K` names of the cluster's ssh config (which carry each node's port)."""
    if fmt not in FORMATS:
        raise SpecError("format", f"{fmt!r} is not a hostfile format", f"use {', '.join(FORMATS)}")
    if fmt == "env":
        pairs = env_vars(info, slots_per_node).items()
        return "".join(f"{k}={shlex.quote(v)}\n" for k, v in pairs)
    # one renderer: the stack's `hostfile` output is this text too (components/contract.py)
    hosts = [
        (sshconfig.alias(info, n) if aliases else n.private_ip, slots(n, slots_per_node))
        for n in info.nodes
    ]
    return hostfile_lines(hosts, fmt)
