"""`AzureGpuFleetArgs`: the typed inputs of `gpufleet:index:AzureGpuFleet`."""

from gpufleet.components.fleetargs import FleetArgs


class AzureGpuFleetArgs(FleetArgs, total=False):
    """Inputs of an Azure GPU fleet (ND A100/H100 with InfiniBand)."""
