"""Finding a node by name or index: for ClusterInfo and for the state's pydantic-free view."""

from __future__ import annotations

from typing import Any

from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode


def find_node(cluster: str, nodes: list[Any], name_or_index: str | int) -> Any:
    """The node named `node-K` (or at index K); an error listing the nodes otherwise."""
    key = str(name_or_index)
    for i, n in enumerate(nodes):
        if key in (n.name, str(i)):
            return n
    raise GpufleetError(
        f"cluster {cluster!r} has no node {key!r}",
        hint="nodes are " + ", ".join(n.name for n in nodes),
        exit_code=ExitCode.USAGE,
    )


def jump_host(nodes: list[Any], node: Any) -> Any:
    """The node to tunnel through to reach `node`: the head, when `node` has no public address.

    For ClusterInfo and the plain view exec's fast path loads (state.load_view).
    """
    head = nodes[0]
    if getattr(node, "public_ip", None) or node.name == head.name:
        return None
    return head
