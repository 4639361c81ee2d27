"""Which resources of a fleet's stack belong to one node alone: what replacing it replaces."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# The fleets' type tokens (components/fleet.py type_token, legacy_type_token).
FLEET_TYPE = re.compile(r"^gpufleet:(index:\w+GpuFleet|\w+:GpuFleet)$")


def urn_name(urn: str) -> str:
    """The resource name: the URN's last `::` segment."""
    return urn.rsplit("::", 1)[-1]


def urn_type(urn: str) -> str:
    """The resource's own type: the last `$` part of the URN's qualified type."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def node_index(cluster: str, name: str) -> int | None:
    """The node a resource name belongs to alone, or None (shared by the fleet).

    Every per-node resource of the three fleets is named `<cluster>-node-<i>` or
    `<cluster>-node-<i>-<what>` (instance, launch template, ENI, EIP, host key, backstop
    schedule, NIC, public IP, identity, role assignments, auto-shutdown, GCE self-delete
    grant), except Azure's expiry grant on each VM of a brought group,
    `<cluster>-expiry-role-<i>` (components/azure/fleet.py). `<cluster>-node-role` and the
    like (shared) carry no index and match nothing.
    """
    c = re.escape(cluster)
    m = re.fullmatch(rf"{c}-node-(\d+)(?:-.+)?", name) or re.fullmatch(
        rf"{c}-expiry-role-(\d+)", name
    )
    return int(m.group(1)) if m else None


def node_urns(resources: Iterable[Mapping[str, Any]], cluster: str, index: int) -> list[str]:
    """The URNs of node `index`'s own resources, sorted: those its name marks (node_index)
    under the fleet component named `cluster`, and their children.

    `resources`: the stack's, each a mapping with "urn" and "parent" (a parent URN or
    empty) as `pulumi stack export` writes them; entries pending deletion are skipped.
    Where the stack holds no component of that name (an old layout), every resource counts.
    """
    live = [r for r in resources if r.get("urn") and not r.get("delete")]
    parent = {str(r["urn"]): str(r.get("parent") or "") for r in live}
    fleets = {
        u for u in parent if urn_name(u) == cluster and FLEET_TYPE.match(urn_type(u)) is not None
    }

    def under_fleet(urn: str) -> bool:
        if not fleets:
            return True
        seen: set[str] = set()
        while urn and urn not in seen:
            seen.add(urn)
            urn = parent.get(urn, "")
            if urn in fleets:
                return True
        return False

    own = {u for u in parent if node_index(cluster, urn_name(u)) == index and under_fleet(u)}
    grew = True
    while grew:  # children of a node's resource are that node's too
        more = {u for u, p in parent.items() if p in own and u not in own}
        own |= more
        grew = bool(more)
    return sorted(own)


# A node's resources that outlive its instance: targeted when it is replaced (so they are
# read and kept as declared), never replaced themselves, so its addresses stay. AWS: the
# head's own ENI (delete_on_termination "false", components/aws/fleet.py) and the Elastic IP
# on it; Azure: the NIC (deleteOption Detach, components/azure/network.py) and the static
# public IP on it. The instance is delete_before_replace, so the interface is free again.
KEPT_TYPES = frozenset(
    {
        "aws:ec2/networkInterface:NetworkInterface",
        "aws:ec2/eip:Eip",
        "azure-native:network:NetworkInterface",
        "azure-native:network:PublicIPAddress",
    }
)


def replaced_urns(urns: Iterable[str]) -> list[str]:
    """Of a node's URNs (node_urns), those replacing it replaces: all but KEPT_TYPES."""
    return sorted(u for u in urns if urn_type(u) not in KEPT_TYPES)
