"""AWS GPU fleets: EFA launch templates, cluster placement, IMDSv2, TTL by shutdown-terminate."""

from components.aws.fleet import GpuFleet

__all__ = ["GpuFleet"]
