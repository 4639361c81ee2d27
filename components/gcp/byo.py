"""The networks a user brings (ids, maybe Outputs), kept out of the ClusterSpec's plain fields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from gpufleet.components.errors import SpecError

# Args holding ids of networks the user owns: pulumi.Inputs, never in a ClusterSpec as Outputs.
NETWORK_ARGS = ("vpc_id", "subnet_id", "gpu_vpc_ids", "gpu_subnet_ids")


@dataclass(frozen=True)
class UserNetworks:
    """What the user brings: the first NIC's network and subnet, and the GPU NICs' pairs."""

    network: Any = None
    subnetwork: Any = None
    gpu: tuple[tuple[Any, Any], ...] = field(default_factory=tuple)

    @property
    def primary(self) -> bool:
        return self.network is not None

    @property
    def plain(self) -> bool:
        """The first NIC's ids are strings now (not Outputs), so an account check can read them."""
        return isinstance(self.network, str) and isinstance(self.subnetwork, str)


def split_args(args: Any) -> tuple[dict[str, Any], UserNetworks]:
    """(the args for spec_from_args, the networks brought). Plain vpc_id/subnet_id stay in the
    args too (the CLI's ClusterSpec fields, and the validators read them); an Output never does.
    Refused before anything is registered: a network without its subnet and the reverse, and
    GPU network lists of different lengths."""
    if not isinstance(args, Mapping):  # a ClusterSpec: plain by construction
        if args.vpc_id and args.subnet_id:
            return args, UserNetworks(args.vpc_id, args.subnet_id)
        return args, UserNetworks()
    rest = {k: v for k, v in args.items() if k not in NETWORK_ARGS}
    vpc, subnet = args.get("vpc_id"), args.get("subnet_id")
    if (vpc is None) != (subnet is None):
        missing = "subnet_id" if subnet is None else "vpc_id"
        raise SpecError(
            missing,
            "is missing: gpufleet uses an existing network only with both its id and the id of "
            "its subnet in the cluster's region, and would otherwise build its own",
            "pass vpc_id and subnet_id (projects/P/regions/R/subnetworks/S), or neither",
        )
    gnets = list(args.get("gpu_vpc_ids") or [])
    gsubs = list(args.get("gpu_subnet_ids") or [])
    if len(gnets) != len(gsubs):
        raise SpecError(
            "gpu_subnet_ids",
            f"lists {len(gsubs)} subnets for {len(gnets)} GPU networks (gpu_vpc_ids)",
            "give one subnet per GPU network, in the same order",
        )
    if isinstance(vpc, str) and isinstance(subnet, str):
        rest.update(vpc_id=vpc, subnet_id=subnet)
    return rest, UserNetworks(vpc, subnet, tuple(zip(gnets, gsubs, strict=True)))


def check_gpu_networks(brought: UserNetworks, extra_nics: int, machine_type: str) -> None:
    """GPU networks brought must be one per GPU NIC of the machine type."""
    if brought.gpu and len(brought.gpu) != extra_nics:
        what = f"has {extra_nics} GPU NICs" if extra_nics else "has no GPU NICs"
        raise SpecError(
            "gpu_vpc_ids",
            f"lists {len(brought.gpu)} GPU networks, but {machine_type} {what}",
            f"give exactly {extra_nics} networks and subnets"
            if extra_nics
            else "leave out gpu_vpc_ids and gpu_subnet_ids",
        )


_BROUGHT: ContextVar[UserNetworks | None] = ContextVar("gpufleet_gcp_networks", default=None)


@contextmanager
def bringing(networks: UserNetworks) -> Iterator[None]:
    """Within it, the validators know which networks the user brings (brought())."""
    token = _BROUGHT.set(networks)
    try:
        yield
    finally:
        _BROUGHT.reset(token)


def brought() -> UserNetworks:
    """The networks the fleet being declared brings (none outside bringing())."""
    return _BROUGHT.get() or UserNetworks()
