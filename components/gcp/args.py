"""`GcpGpuFleetArgs`: the typed inputs of `gpufleet:index:GcpGpuFleet`."""

from gpufleet.components.fleetargs import FleetArgs


class GcpGpuFleetArgs(FleetArgs, total=False):
    """Inputs of a GCP GPU fleet (a2/a3 with compact placement and gVNIC, g2)."""

    vpc_id: str
    """An existing VPC network to create the nodes in; default: a network of the cluster's own."""
    subnet_id: str
    """An existing subnetwork of `vpc_id` in the fleet's region."""
