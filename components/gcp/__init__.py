"""GCP GPU fleets: TERMINATE on maintenance, gVNIC, compact placement, A3 GPU NICs, run-time TTL."""

from components.gcp.fleet import GpuFleet

__all__ = ["GpuFleet"]
