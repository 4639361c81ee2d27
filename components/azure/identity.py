"""Each node's own identity: a custom role that lets it read, delete and deallocate itself only."""

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


def node_role(name: str, rg: Any, opts: pulumi.ResourceOptions) -> Any:
    """The cluster's custom role, defined on (and assignable only within) its resource group;
    each node gets it on its own VM, NIC and OS disk, never on the group."""
    return az.authorization.RoleDefinition(
        f"{name}-node-role",
        role_name=pulumi.Output.concat("gpufleet node self-delete (", rg.name, ")"),
        description="A gpufleet node may read, deallocate and delete its own VM, NIC and disk",
        role_type="CustomRole",
        scope=rg.id,
        assignable_scopes=[rg.id],
        permissions=[az.authorization.PermissionArgs(actions=list(NODE_ACTIONS))],
        opts=opts,
    )
