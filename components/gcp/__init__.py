"""GCP GPU fleets: TERMINATE on maintenance, gVNIC, compact placement, A3 GPU NICs, TTL DELETE.

The hard expiry is GCE's own scheduling.terminationTime with DELETE. The lease (shorter) is the
node's: its expiry timer deletes its VM through the Compute API as the cluster's service
account, which holds a custom role with only compute.instances.delete, granted on each of the
cluster's instances; it never powers off (a stopped VM loses its termination time).
"""

from typing import Any

__all__ = ["GcpGpuFleet", "GcpGpuFleetArgs"]


def __getattr__(name: str) -> Any:
    # Lazy: components.gcp.rules (spec checks) must not import the GCP SDK.
    if name == "GcpGpuFleet":
        from gpufleet.components.gcp.fleet import GcpGpuFleet

        return GcpGpuFleet
    if name == "GcpGpuFleetArgs":
        from gpufleet.components.gcp.args import GcpGpuFleetArgs

        return GcpGpuFleetArgs
    raise AttributeError(name)
