"""`AwsGpuFleetArgs`: the typed inputs of `gpufleet:index:AwsGpuFleet`."""

from gpufleet.components.fleetargs import FleetArgs


class AwsGpuFleetArgs(FleetArgs, total=False):
    """Inputs of an AWS GPU fleet (p4d/p5 with EFA, g5/g6)."""

    placement_group: str
    """With a reservation: the existing cluster placement group it was made in."""
    capacity_block: bool
    """The reservation is a Capacity Block for ML (market type capacity-block)."""
    vpc_id: str
    """An existing VPC to create the nodes in; default: a VPC of the cluster's own."""
    subnet_id: str
    """An existing subnet of `vpc_id` (with NAT egress for private workers)."""
