"""Azure GPU fleets: one availability set in a proximity group, InfiniBand-safe VNet, HPC image.

Grouping: InfiniBand connects VMs of one availability set, or of one Uniform scale set with a
single placement group; a Flexible scale set gets none (azure-compute-docs,
virtual-machine-scale-sets-orchestration-modes.md, "Infiniband Networking"). gpufleet creates
individual VMs in one availability set: each VM keeps its own NIC resource, whose addresses the
stack outputs for ClusterInfo. The set holds at most 200 VMs and takes no Spot VM.

Azure has no native VM TTL (facts §3.7) and a VM powered off from inside is still billed
(facts §0.12). Every node gets its own user-assigned identity, allowed (a custom role: read,
delete, deallocate) on its own VM, NIC and OS disk only; the node's TTL timer deletes its VM
through ARM at expiry, and a daily auto-shutdown schedule deallocates a node that never did.
The resource group, network and public IPs remain until `gpufleet down`.
"""

from typing import Any

__all__ = ["AzureGpuFleet", "AzureGpuFleetArgs"]


def __getattr__(name: str) -> Any:
    # Lazy: components.azure.rules (spec checks) must not import the Azure SDK.
    if name == "AzureGpuFleet":
        from gpufleet.components.azure.fleet import AzureGpuFleet

        return AzureGpuFleet
    if name == "AzureGpuFleetArgs":
        from gpufleet.components.azure.args import AzureGpuFleetArgs

        return AzureGpuFleetArgs
    raise AttributeError(name)
