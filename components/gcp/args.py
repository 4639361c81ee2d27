"""`GcpGpuFleetArgs`: the typed inputs of `gpufleet:index:GcpGpuFleet`."""

# No `from __future__ import annotations`: Pulumi's schema analyzer reads these at run time.

import pulumi

from gpufleet.components.fleetargs import FleetArgs


class GcpGpuFleetArgs(FleetArgs, total=False):
    """Inputs of a GCP GPU fleet (a2/a3 with compact placement and gVNIC, g2)."""

    vpc_id: pulumi.Input[str]
    """An existing VPC network for the nodes' first NIC (`projects/P/global/networks/N` or a
    self link; another resource's output is fine); default: a network of the cluster's own.
    Needs `subnet_id`, in the same project. On a Shared VPC, name the host project here: a bare
    name means the provider's project. gpufleet adds two firewall rules to it, in the network's
    project (see `firewall_rules`); they go with the cluster."""
    subnet_id: pulumi.Input[str]
    """An existing subnetwork of `vpc_id` in the fleet's region
    (`projects/P/regions/R/subnetworks/S`). With private workers it needs a Cloud NAT (checked
    when the id is a plain string)."""
    firewall_rules: bool
    """With `vpc_id`: whether gpufleet adds its two firewall rules to that network, in the
    network's project (a Shared VPC's host project, where the deployer then needs
    `compute.firewalls.create`). Default true. The nodes carry the network tag
    `gpufleet-<cluster>-<8 hex>` (every node) and `gpufleet-<cluster>-<8 hex>-ssh` (the head,
    or every node with `public_workers`); the hex is fixed per Pulumi project, stack and
    cluster, and the plan shows it (the VMs' `tags`). The two rules: INGRESS allow tcp:22 from
    `ssh_cidrs` to target tag `gpufleet-<cluster>-<8 hex>-ssh`; INGRESS allow all protocols
    from source tag `gpufleet-<cluster>-<8 hex>` to target tag `gpufleet-<cluster>-<8 hex>`.
    False: gpufleet adds no rule to the network, and its owner creates these two (or broader
    ones) before the nodes boot, else nothing reaches them. Plain only; false without `vpc_id`
    is refused."""
