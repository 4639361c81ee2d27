"""The rules of the clouds gpufleet makes no cloud resources on: local, vm and ssh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

SANDBOX_CLOUDS = ("local", "vm", "ssh")


def sandbox_rules(spec: ClusterSpec) -> None:
    """No instance type, region, zone, spot or (local, vm) GPUs; cloud=ssh: one host per node."""
    if spec.instance_type not in (None, "local", "vm", "ssh"):
        raise SpecError(
            "instance_type",
            f"{spec.instance_type!r} means nothing on cloud={spec.cloud}",
            "drop --instance-type, or pick --cloud aws|gcp|azure",
        )
    for field, value in (("region", spec.region), ("zone", spec.zone)):
        if value:
            raise SpecError(
                field,
                f"{value!r} means nothing on cloud={spec.cloud}",
                f"drop --{field}, or pick --cloud aws|gcp|azure",
            )
    if spec.spot:
        raise SpecError("spot", f"cloud={spec.cloud} has no spot capacity", "drop --spot")
    if spec.cloud in ("local", "vm") and (spec.gpus_per_node or 0) > 0:
        raise SpecError(
            "gpus_per_node",
            f"cloud={spec.cloud} nodes have no GPUs",
            f"drop --gpus on --cloud {spec.cloud}",
        )
    if spec.cloud == "ssh" and len(spec.hosts) != spec.nodes:
        raise SpecError(
            "hosts",
            f"cloud=ssh needs one host per node ({spec.nodes}), got {len(spec.hosts)}",
            "pass --hosts h1,h2,... with --nodes equal to their number",
        )
