"""Each node's own identity: custom roles to delete itself, and to deallocate before it exists."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as az

# What ARM's DELETE of a VM whose OS disk has deleteOption=Delete (its NIC: Detach, kept for
# `gpufleet down`), and its deallocate fallback, need (images/ttl/gpufleet-expire). Virtual
# Machine Contributor would also grant virtualMachines/* (runCommand, extensions, resize) and
# networkInterfaces/*, to any process on the node that asks IMDS for the token.
NODE_ACTIONS = (
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/delete",
    "Microsoft.Compute/virtualMachines/deallocate/action",
    "Microsoft.Network/networkInterfaces/read",
    "Microsoft.Compute/disks/read",
    "Microsoft.Compute/disks/delete",
)


def _group_role(
    name: str, kind: str, what: str, actions: tuple[str, ...], rg: Any, opts: Any
) -> Any:
    """A custom role defined on (and assignable only within) the cluster's resource group."""
    return az.authorization.RoleDefinition(
        f"{name}-{kind}-role",
        role_name=pulumi.Output.concat(f"gpufleet {what} (", rg.name, ")"),
        description=f"A gpufleet node may {DESCRIPTIONS[kind]}",
        role_type="CustomRole",
        scope=rg.id,
        assignable_scopes=[rg.id],
        permissions=[az.authorization.PermissionArgs(actions=list(actions))],
        opts=opts,
    )


DESCRIPTIONS = {
    "node": "read, deallocate and delete its own VM, NIC and disk",
    "deallocate": "deallocate the cluster's VMs (its expiry's fallback)",
}


def node_role(name: str, rg: Any, opts: pulumi.ResourceOptions) -> Any:
    """The cluster's custom role, defined on (and assignable only within) its resource group;
    each node gets it on its own VM, NIC and OS disk, never on the group."""
    return _group_role(name, "node", "node self-delete", NODE_ACTIONS, rg, opts)


# The self-delete's fallback (gpufleet-expire): POST .../deallocate. Assigned on the resource
# group (which holds only this cluster) before any VM is created, so a node can stop its compute
# billing even when `up` died between its VM and the VM-scoped assignments.
DEALLOCATE_ACTIONS = (
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
)


def deallocate_role(name: str, rg: Any, opts: pulumi.ResourceOptions) -> Any:
    """The cluster's deallocate-only role, assigned to every node on the whole group: a node
    may deallocate (never delete, run commands on or resize) its neighbours too."""
    return _group_role(name, "deallocate", "node deallocate", DEALLOCATE_ACTIONS, rg, opts)
