"""AWS GPU fleets: EFA launch templates, cluster placement, IMDSv2, TTL by shutdown-terminate."""

from typing import Any

__all__ = ["AwsGpuFleet", "AwsGpuFleetArgs"]


def __getattr__(name: str) -> Any:
    # Lazy: components.aws.rules (spec checks) must not import the AWS SDK.
    if name == "AwsGpuFleet":
        from gpufleet.components.aws.fleet import AwsGpuFleet

        return AwsGpuFleet
    if name == "AwsGpuFleetArgs":
        from gpufleet.components.aws.args import AwsGpuFleetArgs

        return AwsGpuFleetArgs
    raise AttributeError(name)
