"""GCP GPU fleets: TERMINATE on maintenance, gVNIC, compact placement, A3 GPU NICs, TTL DELETE."""

from typing import Any

__all__ = ["GpuFleet"]


def __getattr__(name: str) -> Any:
    # Lazy: components.gcp.rules (spec checks) must not import the GCP SDK.
    if name == "GpuFleet":
        from components.gcp.fleet import GpuFleet

        return GpuFleet
    raise AttributeError(name)
