"""`AzureGpuFleetArgs`: the typed inputs of `gpufleet:index:AzureGpuFleet`."""

# No `from __future__ import annotations`: Pulumi's schema analyzer reads these at run time.

import pulumi

from gpufleet.components.fleetargs import FleetArgs


class AzureGpuFleetArgs(FleetArgs, total=False):
    """Inputs of an Azure GPU fleet (ND A100/H100 with InfiniBand)."""

    resource_group_name: pulumi.Input[str]
    """An existing resource group to create the fleet's resources in (its location may differ
    from the fleet's); default: a new group of the fleet's own. gpufleet assigns no role on a
    group it did not create, only on the fleet's own VMs, NICs and disks; its custom roles are
    defined in the group, named after the cluster plus a hash of group, project and stack."""
    subnet_id: pulumi.Input[str]
    """The ARM id of an existing subnet (/subscriptions/.../virtualNetworks/V/subnets/S) the
    nodes' NICs join; gpufleet then creates no VNet, subnet or NAT gateway. The subnet must be in
    the fleet's region, lie outside 172.16.0.0/16 (InfiniBand's range), have no delegation, give
    the workers outbound access (a NAT gateway or a firewall route) and, where an NSG is on it,
    let SSH in to the head from ssh_cidrs and traffic within the VNet."""
    network_security_group_id: pulumi.Input[str]
    """An existing NSG for every node's NIC, replacing gpufleet's (a NIC takes one NSG): its
    rules alone decide who reaches port 22, so ssh_cidrs must be empty. Needs subnet_id."""
    application_security_group_ids: list[pulumi.Input[str]]
    """Existing application security groups every node's NIC joins, so the rules of the NSGs
    you own (on your subnet) that name them apply to the nodes; they must be in the subnet's
    VNet's region. Needs subnet_id (an ASG's NICs all share one VNet)."""
