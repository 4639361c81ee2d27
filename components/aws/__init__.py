"""AWS GPU fleets: EFA launch templates, cluster placement, IMDSv2, TTL by shutdown-terminate."""

from typing import Any

__all__ = ["GpuFleet"]


def __getattr__(name: str) -> Any:
    # Lazy: components.aws.rules (spec checks) must not import the AWS SDK.
    if name == "GpuFleet":
        from gpufleet.components.aws.fleet import GpuFleet

        return GpuFleet
    raise AttributeError(name)
