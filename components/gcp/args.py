"""`GcpGpuFleetArgs`: the typed inputs of `gpufleet:index:GcpGpuFleet`."""

# No `from __future__ import annotations`: Pulumi's schema analyzer reads these at run time.

import pulumi

from gpufleet.components.fleetargs import FleetArgs


class GcpGpuFleetArgs(FleetArgs, total=False):
    """Inputs of a GCP GPU fleet (a2/a3 with compact placement and gVNIC, g2)."""

    vpc_id: pulumi.Input[str]
    """An existing VPC network for the nodes' first NIC (id or self link; another resource's
    output is fine); default: a network of the cluster's own. Needs `subnet_id`. gpufleet adds
    two firewall rules to it, named for the cluster and limited to its network tags (SSH from
    `ssh_cidrs` to the head, all traffic between the cluster's nodes); they go with the
    cluster."""
    subnet_id: pulumi.Input[str]
    """An existing subnetwork of `vpc_id` in the fleet's region. With private workers it needs
    a Cloud NAT (checked when the id is a plain string)."""
    gpu_vpc_ids: list[pulumi.Input[str]]
    """A3 only: existing VPC networks for the GPU NICs, one per NIC (4 on a3-highgpu-8g, 8 on
    a3-megagpu-8g); default: networks of the cluster's own. Needs `gpu_subnet_ids`; gpufleet
    adds no firewall rule to them, so they must allow all traffic between the nodes."""
    gpu_subnet_ids: list[pulumi.Input[str]]
    """A3 only: a subnetwork of each of `gpu_vpc_ids`, in the same order and region."""
