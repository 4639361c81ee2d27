"""Azure GPU fleets: one Flexible scale set in a proximity group, InfiniBand-safe VNet, HPC image.

Grouping: InfiniBand is set up between VMs of one scale set (ND A100 v4 / ND H100 v5 pages;
CycleCloud and az-hop use scale sets). gpufleet creates individual VMs joined to one Flexible
scale set: each VM keeps its own NIC resource, whose private address (and its public IP's) the
stack can output for ClusterInfo, Spot is allowed, and the availability set's 200-VM cap goes.

Azure has no native VM TTL (facts §3.7) and a VM powered off from inside is still billed
(facts §0.12). Every node gets its own user-assigned identity, allowed (Virtual Machine
Contributor) on its own VM, NIC and OS disk only; the node's TTL timer deletes its VM through
ARM at expiry. The resource group, network and public IPs remain until `gpufleet down`.
"""

from typing import Any

__all__ = ["GpuFleet"]


def __getattr__(name: str) -> Any:
    # Lazy: components.azure.rules (spec checks) must not import the Azure SDK.
    if name == "GpuFleet":
        from components.azure.fleet import GpuFleet

        return GpuFleet
    raise AttributeError(name)
