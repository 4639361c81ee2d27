"""ClusterSpec: the one validated input; invalid combinations fail here, before anything exists."""

from __future__ import annotations

import ipaddress
import re
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpufleet.components.clouds import PULUMI_CLOUDS, Cloud
from gpufleet.components.errors import SpecError
from gpufleet.components.sandboxrules import SANDBOX_CLOUDS, sandbox_rules

BAKE_SUFFIX = "-image"  # `<name>-image` is the stack of the image bake for cluster <name>
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
# An EC2 capacity reservation id (ODCR or Capacity Block); a GCE reservation name (RFC 1035).
RESERVATION_RE = {
    "aws": re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$"),
    "gcp": re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"),
}
# An EC2 placement group name: up to 255 ASCII characters (CreatePlacementGroup, GroupName).
PLACEMENT_GROUP_RE = re.compile(r"[\x21-\x7e]{1,255}")
DEFAULT_REGION = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}
DEFAULT_SSH_USER = {"aws": "ubuntu", "gcp": "gpufleet", "azure": "azureuser", "vm": "gpufleet"}
# azure: one availability set (the InfiniBand domain gpufleet uses) holds at most 200 VMs.
MAX_TTL_MINUTES = 366 * 1440
# vm: each node is a whole QEMU VM (1.5 GiB) on this machine. local: 1,000 sshds came up, ran
# `exec` and went down on 2 cores and 24 GiB (benchmarks/scale.py measures up to 256 in full).
MAX_NODES = {"local": 1000, "vm": 16, "ssh": 1024, "aws": 512, "gcp": 512, "azure": 200}


# An ACR registry's ARM id (ARM resource ids are case-insensitive).
_ACR_ID = re.compile(
    r"/subscriptions/[0-9a-fA-F-]{36}/resourceGroups/[^/]+/providers/"
    r"Microsoft\.ContainerRegistry/registries/[a-zA-Z0-9]{5,50}",
    re.IGNORECASE,
)


class ContainerSpec(BaseModel):
    """The image every rank, `--setup` and the health checks run in (`run --image`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(
        description="a registry reference (nvcr.io/nvidia/pytorch:25.01-py3), or "
        "oci-archive:PATH / docker-archive:PATH, a file copied to every node and loaded there"
    )
    runtime: Literal["auto", "docker", "podman"] = Field(
        "auto", description="the node's container runtime; auto: docker, else podman"
    )
    pull_stall_s: int = Field(
        300, ge=10, description="a pull that gets no new bytes for this long is retried"
    )
    pull_attempts: int = Field(3, ge=1, le=10, description="tries per node before it fails")
    mounts: list[str] = Field(
        default_factory=list,
        description="more node paths in the container, SRC:DST[:ro] (the workdir always is)",
    )

    registry_id: str | None = Field(
        None,
        description="Azure: the ARM id of the ACR registry the image is in "
        "(/subscriptions/S/resourceGroups/G/providers/Microsoft.ContainerRegistry/registries/N); "
        "each node's identity gets AcrPull on it. Required for a NAME.azurecr.io image on "
        "Azure (the host does not name the registry's subscription or group)",
    )

    @field_validator("registry_id")
    @classmethod
    def _registry_id(cls, v: str | None) -> str | None:
        if v is not None and not _ACR_ID.fullmatch(v):
            raise SpecError(
                "container.registry_id",
                f"{v!r} is not an ACR registry's resource id",
                "give /subscriptions/<id>/resourceGroups/<group>/providers/"
                "Microsoft.ContainerRegistry/registries/<name> "
                "(`az acr show -n <name> --query id -o tsv`)",
            )
        return v

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            parts = m.split(":")
            ok = len(parts) in (2, 3) and all(p.startswith("/") for p in parts[:2])
            if not ok or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise SpecError(
                    "container.mounts",
                    f"{m!r} is not SRC:DST[:ro|rw] with absolute paths",
                    "e.g. /data:/data:ro",
                )
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        from gpufleet.components.containerimage import parse

        return str(parse(v))

    @model_validator(mode="after")
    def _registry_id_for_acr(self) -> ContainerSpec:
        from gpufleet.components.containerimage import parse

        if self.registry_id is not None and parse(self.image).registry_kind != "acr":
            raise SpecError(
                "container.registry_id",
                f"is set, but container.image {self.image} is not in an ACR registry "
                "(NAME.azurecr.io)",
                "drop registry_id, or give the ACR image it is for",
            )
        return self


RECOVERY_MODES = ("replace", "relaunch", "restart", "none")


class RecoverySpec(BaseModel):
    """What `run` does when a node is lost or preempted, or a rank fails with one of `on_exit`
    (`run --recover N`): at most `max` recoveries, each a new start of the job on every node,
    which resumes from GPUFLEET_CHECKPOINT_DIR."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max: int = Field(0, ge=0, le=100, description="recoveries at most; 0: none (today's behaviour)")
    mode: Literal["replace", "relaunch", "restart", "none"] = Field(
        "replace",
        description="replace: only the lost nodes are replaced (same name, index, placement); "
        "relaunch: every node is; restart: the job again on the same nodes; none: give up",
    )
    on_exit: list[int] = Field(
        default_factory=list,
        description="rank exit codes that also start a recovery (opt-in; a failing rank "
        "otherwise ends the run as today)",
    )
    checkpoint_dir: str | None = Field(
        None,
        description="GPUFLEET_CHECKPOINT_DIR: a bucket URL (s3://, gs://, az://, https://) the "
        "job writes itself; default: a folder on the head's disk, copied to every node before "
        "a restart (lost with the head)",
    )

    @field_validator("on_exit")
    @classmethod
    def _on_exit(cls, v: list[int]) -> list[int]:
        bad = [c for c in v if not 1 <= c <= 255]
        if bad:
            raise SpecError(
                "recovery.on_exit",
                f"{bad[0]} is not a failing exit code",
                "give codes from 1 to 255 (0 is success)",
            )
        return sorted(set(v))


class ClusterSpec(BaseModel):
    """What the user asks for. Invalid combinations fail here, before anything is created."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    cloud: Cloud = "local"
    nodes: int = Field(2, description="number of nodes, head included")
    instance_type: str | None = None
    gpus_per_node: int | None = Field(None, description="derived from the catalog when omitted")
    region: str | None = None
    zone: str | None = None
    zones: list[str] = Field(
        default_factory=list,
        description="zones to try in order when one has no capacity (`zone` is a list of one)",
    )
    reservation: str | None = Field(
        None, description="capacity to launch into: AWS cr-... id, or a GCP reservation name"
    )
    placement_group: str | None = Field(
        None,
        description="aws, with a reservation: the existing cluster placement group it was made in",
    )
    capacity_block: bool = Field(
        False, description="aws: the reservation is a Capacity Block for ML (market capacity-block)"
    )
    expires_at: int | None = Field(
        None,
        description="epoch seconds the nodes remove themselves at; fixed once per cluster "
        "(by the CLI's state, or by the stack's first apply when absent)",
    )
    image: str | None = Field(None, description="image id/name; default: the cloud's GPU image")
    spot: bool = False
    ttl_minutes: int = Field(240, description="node-side expiry; 0 disables it (local/ssh only)")
    boot_lease_minutes: int | None = Field(
        None,
        description="a lease each node arms from its own clock at first boot (`run` sets it, "
        "so a CLI killed while provisioning leaves nothing for a day); None: no boot lease",
        ge=1,
    )
    ssh_cidrs: list[str] = Field(default_factory=list)
    ssh_user: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    container: ContainerSpec | None = Field(
        None, description="run every rank in this image; a registry image is pulled at boot"
    )
    recovery: RecoverySpec | None = Field(
        None, description="what `run` does when a node is lost or preempted (`run --recover`)"
    )
    disk_gb: int = 200
    hosts: list[str] = Field(default_factory=list, description="cloud=ssh: the hosts you own")
    vpc_id: str | None = None
    subnet_id: str | None = None
    public_workers: bool = Field(
        False, description="give every node a public address; default: the head only"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not isinstance(v, str) or not NAME_RE.fullmatch(v):  # fullmatch: no trailing \n
            raise SpecError(
                "name",
                f"{v!r} is not a valid cluster name",
                "use 1-32 lowercase letters, digits and '-', starting with a letter "
                "(it becomes part of cloud resource names)",
            )
        if v.endswith(BAKE_SUFFIX):
            raise SpecError(
                "name",
                f"{v!r} ends in {BAKE_SUFFIX!r}, which names the Pulumi stack (and lock) of "
                f"`gpufleet image bake` for cluster {v.removesuffix(BAKE_SUFFIX)!r}",
                f"pick another name; {BAKE_SUFFIX!r} is reserved for image bakes",
            )
        return v

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: int) -> int:
        if v < 1:
            raise SpecError("nodes", f"must be at least 1, got {v}", "pass --nodes 1 or more")
        return v

    @field_validator("ttl_minutes")
    @classmethod
    def _ttl(cls, v: int) -> int:
        if v < 0:
            raise SpecError("ttl_minutes", f"must not be negative, got {v}", "pass --ttl 4h, say")
        if v > MAX_TTL_MINUTES:  # beyond it, expiry timestamps overflow the platform's time_t
            raise SpecError(
                "ttl_minutes",
                f"{v} is over the maximum of {MAX_TTL_MINUTES} (366 days)",
                "pass --ttl 4h, say",
            )
        return v

    @field_validator("expires_at")
    @classmethod
    def _expires_at(cls, v: int | None) -> int | None:
        if v is not None and v <= 0:
            raise SpecError("expires_at", f"must be epoch seconds, got {v}", "leave it unset")
        return v

    @field_validator("disk_gb")
    @classmethod
    def _disk(cls, v: int) -> int:
        if v < 30:
            raise SpecError("disk_gb", f"{v} GB is too small for a GPU image", "use 100 or more")
        return v

    @field_validator("ssh_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        out = []
        for c in v:
            try:
                out.append(str(ipaddress.ip_network(c, strict=False)))
            except ValueError:
                raise SpecError(
                    "ssh_cidrs", f"{c!r} is not a CIDR", "write it like 203.0.113.7/32"
                ) from None
        return out

    @model_validator(mode="before")
    @classmethod
    def _old_container_image(cls, data: Any) -> Any:
        # Specs recorded before `container` (spec.json of existing clusters) hold
        # `container_image`, never used then: null is dropped, an image becomes `container`.
        if isinstance(data, dict) and "container_image" in data:
            data = dict(data)
            old = data.pop("container_image")
            if old is not None and data.get("container") is None:
                data["container"] = {"image": old}
        return data

    @model_validator(mode="before")
    @classmethod
    def _first_zone(cls, data: Any) -> Any:
        # Every component reads `zone`: the first of `zones` is the one an apply uses.
        # Only a real list: anything else is left for the field's own validation to refuse.
        zones = data.get("zones") if isinstance(data, dict) else None
        if isinstance(zones, list) and zones and not data.get("zone"):
            data = {**data, "zone": zones[0]}
        return data

    @model_validator(mode="after")
    def _by_cloud(self) -> ClusterSpec:
        limit = MAX_NODES[self.cloud]
        if self.nodes > limit:
            raise SpecError(
                "nodes",
                f"{self.nodes} nodes is over the {self.cloud} limit of {limit}",
                f"use at most {limit} nodes per cluster",
            )
        self._check_reservation_options()
        if self.cloud in SANDBOX_CLOUDS:
            sandbox_rules(self)
            return self
        if not self.instance_type:
            raise SpecError(
                "instance_type",
                f"cloud={self.cloud} needs an instance type",
                f"pass --instance-type (see `gpufleet catalog --cloud {self.cloud}`)",
            )
        from gpufleet.components.catalog import lookup  # catalog data is only read for real clouds

        itype = lookup(self.cloud, self.instance_type)
        if self.gpus_per_node not in (None, itype.gpus):
            raise SpecError(
                "gpus_per_node",
                f"{self.instance_type} has {itype.gpus} GPUs, not {self.gpus_per_node}",
                "drop --gpus: it is derived from the instance type",
            )
        if self.ttl_minutes == 0:
            raise SpecError(
                "ttl_minutes",
                f"cloud={self.cloud} clusters must expire",
                "pass a TTL such as --ttl 4h; a leaked GPU fleet costs money every hour",
            )
        if self.cloud == "aws" and self.subnet_id and not self.vpc_id:
            raise SpecError("vpc_id", "subnet_id given without vpc_id", "pass both, or neither")
        if self.zone and self.zones and self.zones[0] != self.zone:
            raise SpecError(
                "zones", f"starts with {self.zones[0]}, not zone {self.zone}", "give one of them"
            )
        if self.reservation:
            self._check_reservation()
        from gpufleet.components.registry import spec_rules

        spec_rules(self)  # zones, labels, placement caps: each cloud's own rules
        return self

    def _check_reservation(self) -> None:
        pattern = RESERVATION_RE.get(self.cloud)
        if pattern is None:
            raise SpecError(
                "reservation",
                f"capacity reservations are not supported on {self.cloud}",
                "drop reservation (aws: cr-... id; gcp: reservation name)",
            )
        if not pattern.match(self.reservation or ""):
            example = "cr-0123456789abcdef0" if self.cloud == "aws" else "my-a3-reservation"
            raise SpecError(
                "reservation",
                f"{self.reservation!r} is not a {self.cloud} reservation",
                f"give it like {example}",
            )
        if self.spot:
            raise SpecError(
                "spot", "a reservation holds on-demand capacity", "drop spot, or the reservation"
            )
        if len(self.zone_choices) != 1:
            raise SpecError(
                "zone",
                "a reservation lives in one zone and nodes can only use it there",
                "set zone to the reservation's zone (and no other zones)",
            )

    def _check_reservation_options(self) -> None:
        """placement_group and capacity_block qualify an AWS reservation, and nothing else."""
        for field, value in (
            ("placement_group", self.placement_group),
            ("capacity_block", self.capacity_block),
        ):
            if not value:
                continue
            if self.cloud != "aws":
                raise SpecError(field, f"means nothing on cloud={self.cloud}", f"drop {field}")
            if not self.reservation:
                raise SpecError(
                    field,
                    "qualifies a capacity reservation, and none is given "
                    "(without one gpufleet makes its own cluster placement group)",
                    f"add reservation: cr-..., or drop {field}",
                )
        if self.placement_group is not None and not PLACEMENT_GROUP_RE.fullmatch(
            self.placement_group
        ):
            raise SpecError(
                "placement_group",
                f"{self.placement_group!r} is not an EC2 placement group name",
                "give the group's name (up to 255 ASCII characters, no spaces)",
            )

    @classmethod
    def from_input(cls, data: dict[str, Any]) -> ClusterSpec:
        """Validate raw input (flags, stack config); any problem becomes a SpecError."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "spec"
            if err["type"] == "extra_forbidden":
                raise SpecError(
                    field,
                    "is not a ClusterSpec field",
                    "remove it; known fields: " + ", ".join(cls.model_fields),
                ) from None
            if err["type"] == "literal_error":
                expected = err.get("ctx", {}).get("expected", "")
                raise SpecError(
                    field, f"{err['input']!r} is not one of {expected}", f"use one of {expected}"
                ) from None
            raise SpecError(field, err["msg"], f"give {field} a valid value") from None

    def with_(self, **changes: Any) -> ClusterSpec:
        """This spec with `changes`, validated again (model_copy would skip every check)."""
        return ClusterSpec.from_input({**self.model_dump(), **changes})

    @property
    def fabric(self) -> str:
        if self.cloud in PULUMI_CLOUDS and self.instance_type:
            from gpufleet.components.catalog import lookup

            return lookup(self.cloud, self.instance_type).fabric
        return "none"

    @property
    def gpus(self) -> int:
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        if self.cloud in PULUMI_CLOUDS and self.instance_type:
            from gpufleet.components.catalog import lookup

            return lookup(self.cloud, self.instance_type).gpus
        return 0

    @property
    def effective_region(self) -> str | None:
        return self.region or DEFAULT_REGION.get(self.cloud)

    @property
    def zone_choices(self) -> list[str]:
        """The zones to try, in order; empty: the cloud's first zone that offers the type."""
        return list(self.zones) or ([self.zone] if self.zone else [])

    @property
    def effective_ssh_user(self) -> str | None:
        return self.ssh_user or DEFAULT_SSH_USER.get(self.cloud)

    def expiry(self, now: float | None = None) -> float | None:
        """Epoch seconds at which the nodes remove themselves, or None without a TTL."""
        if self.ttl_minutes == 0:
            return None
        return (now if now is not None else time.time()) + self.ttl_minutes * 60
