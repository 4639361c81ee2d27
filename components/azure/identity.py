"""Each node's own identity: custom roles to delete itself, and to deallocate before it exists."""

from __future__ import annotations

import hashlib
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


# A custom role's name (roleName) must be unique in the Entra tenant, 128 characters at most
# (learn.microsoft.com/azure/role-based-access-control/custom-roles, "Custom role properties";
# ARM answers RoleDefinitionWithSameNameExists otherwise).
# A cluster's name has at most 32 characters (ClusterSpec): the longest is 74.


def role_name(what: str, rg: Any, cluster: str | None = None) -> pulumi.Output[str]:
    """The role's tenant-wide name. In the fleet's own group (`cluster` None) the group's
    name, which Pulumi autonames (unchanged since before groups could be brought). In a brought
    group, shared by other fleets and stacks: the cluster's name and a hash of the group's id
    (its subscription), the Pulumi project, stack and cluster, so two fleets never collide."""
    if cluster is None:
        return pulumi.Output.concat(f"gpufleet {what} (", rg.name, ")")
    owner = f"{pulumi.get_project()}/{pulumi.get_stack()}/{cluster}"
    digest = pulumi.Output.from_input(rg.id).apply(
        lambda group: hashlib.sha256(f"{group.lower()}|{owner}".encode()).hexdigest()[:12]
    )
    return pulumi.Output.concat(f"gpufleet {what} ({cluster}, ", digest, ")")


def _group_role(
    name: str,
    kind: str,
    what: str,
    actions: tuple[str, ...],
    rg: Any,
    opts: Any,
    shared: bool = False,
) -> Any:
    """A custom role defined on (and assignable only within) the cluster's resource group;
    `shared`: the group is the user's, so the role's name says which cluster it is for."""
    return az.authorization.RoleDefinition(
        f"{name}-{kind}-role",
        role_name=role_name(what, rg, name if shared else None),
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


def node_role(name: str, rg: Any, opts: pulumi.ResourceOptions, shared: bool = False) -> Any:
    """The cluster's custom role, defined on (and assignable only within) its resource group;
    each node gets it on its own VM, NIC and OS disk, never on the group."""
    return _group_role(name, "node", "node self-delete", NODE_ACTIONS, rg, opts, shared)


# The self-delete's fallback (gpufleet-expire): POST .../deallocate. In the fleet's own group
# (which holds only this cluster) assigned on the group before any VM is created, so a node can
# stop its compute billing even when `up` died between its VM and the VM-scoped assignments. In a
# brought group, never on the group (it holds the user's other VMs): the Logic App backstop gets
# it on each VM, and a node has deallocate on its own VM through the node role.
DEALLOCATE_ACTIONS = (
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
)


def deallocate_role(name: str, rg: Any, opts: pulumi.ResourceOptions, shared: bool = False) -> Any:
    """The cluster's deallocate-only role; in its own group assigned to every node on the
    whole group (a node may deallocate, never delete, run commands on or resize, its
    neighbours too), in a brought group only on the cluster's VMs."""
    return _group_role(name, "deallocate", "node deallocate", DEALLOCATE_ACTIONS, rg, opts, shared)
