"""The typed inputs every cloud's fleet component takes, and their mapping to a ClusterSpec."""

# No `from __future__ import annotations`: Pulumi's schema analyzer reads these annotations
# at run time (pulumi.provider.experimental.analyzer), and strings would not resolve.

from typing import Any, TypedDict

import pulumi
from typing_extensions import Required  # typing's from Python 3.11

from gpufleet.components.clusterspec import ClusterSpec

# ClusterSpec fields a component's args never carry: the class names the cloud, and the rest
# belong to other providers or to the CLI.
NOT_ARGS = frozenset({"cloud", "name", "hosts"})


class ContainerArgs(TypedDict, total=False):
    """The image the nodes run jobs in; a registry image is pulled at first boot."""

    image: Required[str]
    """A registry reference, e.g. nvcr.io/nvidia/pytorch:25.01-py3 (archives are CLI-only)."""
    runtime: str
    """docker, podman or auto (default: docker if the node has it, else podman)."""
    pull_stall_s: int
    """A pull that gets no new bytes for this long is retried (default 300)."""
    pull_attempts: int
    """Tries per node before the pull fails (default 3)."""
    mounts: list[str]
    """More node paths in the container, SRC:DST[:ro] (the workdir always is)."""
    registry_id: str
    """Azure: the ARM id of the ACR registry a NAME.azurecr.io image is in
    (/subscriptions/S/resourceGroups/G/providers/Microsoft.ContainerRegistry/registries/N);
    each node's identity gets AcrPull on it. Required for such an image on Azure."""


class FleetArgs(TypedDict, total=False):
    """Inputs shared by every cloud's GPU fleet. Fields that decide how many resources exist
    are plain values; ids of things the program owns are `pulumi.Input`s (per cloud)."""

    cluster_name: str
    """The cluster's name in tags and cloud resource names; default: the resource's name."""
    nodes: int
    """Number of nodes, head included (default 2)."""
    instance_type: Required[str]
    """The cloud's GPU instance type, e.g. p5.48xlarge, a3-highgpu-8g, Standard_ND96isr_H100_v5."""
    gpus_per_node: int
    """GPUs per node; default: the catalog's count for the instance type."""
    region: str
    """Region; default: the provider's region, else the cloud's default."""
    zone: str
    """The zone to create the nodes in (the first of `zones` when both are given)."""
    zones: list[str]
    """Zones to try in order when one has no capacity."""
    reservation: str
    """Capacity to launch into: an AWS cr-... id or a GCP reservation name."""
    expires_at: int
    """Epoch seconds the nodes remove themselves at; default: fixed by the first apply."""
    image: str
    """Node image (AMI id / SSM parameter, GCE image, Azure image id); default: the cloud's
    GPU image."""
    spot: bool
    """Spot / preemptible capacity."""
    ttl_minutes: int
    """Node-side expiry in minutes from the first apply (default 240)."""
    boot_lease_minutes: int
    """A lease each node arms from its own clock at first boot; default: none."""
    ssh_cidrs: list[str]
    """Addresses allowed to SSH to the head, e.g. ["203.0.113.7/32"]."""
    ssh_user: str
    """The login user on every node; default: the cloud image's."""
    tags: dict[str, str]
    """Tags (AWS, Azure) or labels (GCP) on every resource that takes them."""
    disk_gb: int
    """Boot disk size in GB (default 200)."""
    public_workers: bool
    """Give every node a public address; default: the head only."""
    container: ContainerArgs
    """Run jobs in this container image; the nodes pull it at first boot."""


def spec_from_args(cloud: str, name: str, args: Any) -> ClusterSpec:
    """The ClusterSpec of a component's plain args (Inputs of user-owned ids stay out)."""
    if isinstance(args, ClusterSpec):
        return args
    fields = {k: v for k, v in dict(args or {}).items() if v is not None}
    for k, v in fields.items():
        if isinstance(v, pulumi.Output):
            from gpufleet.components.errors import SpecError

            raise SpecError(
                k,
                "is a pulumi.Output, but it decides which resources exist",
                f"give {k} a plain value",
            )
    fields["name"] = fields.pop("cluster_name", None) or name
    fields["cloud"] = cloud
    return ClusterSpec.from_input(fields)


def args_from_spec(spec: ClusterSpec) -> dict[str, Any]:
    """A spec as component args (the inverse of spec_from_args for plain values)."""
    out = spec.model_dump(exclude=set(NOT_ARGS), exclude_defaults=True)
    out["cluster_name"] = spec.name
    return out
