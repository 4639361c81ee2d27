"""Azure GPU fleets: one availability set in a proximity group, InfiniBand-safe VNet, HPC image.

Azure has no native VM TTL (facts §3.7) and a VM powered off from inside is still billed
(facts §0.12). gpufleet's choice: every node gets a user-assigned identity allowed to manage
VMs in the cluster's resource group, and the node's TTL timer deletes its own VM through ARM
at expiry. The resource group, network and public IPs remain until `gpufleet down`.
"""

from components.azure.fleet import GpuFleet

__all__ = ["GpuFleet"]
