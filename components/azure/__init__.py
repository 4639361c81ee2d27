"""Azure GPU fleets: one availability set in a proximity group, InfiniBand-safe VNet, HPC image.

Grouping: InfiniBand links only VMs in one scale set or one availability set (facts §3.2).
gpufleet uses individual VMs in one availability set, not a scale set: each VM then has its own
NIC resource, whose private address (and its public IP's) the stack can output for ClusterInfo;
a Uniform scale set's instance addresses are not resource outputs. Spot VMs cannot join an
availability set, so spot is refused for InfiniBand sizes and goes without one otherwise.

Azure has no native VM TTL (facts §3.7) and a VM powered off from inside is still billed
(facts §0.12). gpufleet's choice: every node gets a user-assigned identity allowed to manage
VMs in the cluster's resource group, and the node's TTL timer deletes its own VM through ARM
at expiry. The resource group, network and public IPs remain until `gpufleet down`.
"""

from components.azure.fleet import GpuFleet

__all__ = ["GpuFleet"]
