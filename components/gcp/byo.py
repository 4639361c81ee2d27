"""The networks a user brings (ids, maybe Outputs), kept out of the ClusterSpec's plain fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.components.errors import SpecError
from gpufleet.components.scoped import Scoped

# Args holding ids of networks the user owns: pulumi.Inputs, never in a ClusterSpec as Outputs.
NETWORK_ARGS = ("vpc_id", "subnet_id", "gpu_vpc_ids", "gpu_subnet_ids")
# Plain, but no ClusterSpec field: whether gpufleet adds its firewall rules to a brought network.
FIREWALL_RULES = "firewall_rules"


def network_project(resource_id: str) -> str | None:
    """The project named in a network's or subnetwork's id: `projects/P/...` or a self link
    (https://www.googleapis.com/compute/v1/projects/P/...); None for a bare name, which GCE
    resolves in the provider's project."""
    parts = resource_id.split("/")
    return parts[parts.index("projects") + 1] if "projects" in parts[:-1] else None


def host_project(network: Any, subnetwork: Any) -> Any:
    """The project that owns the brought network (a Shared VPC's host project), from its id or
    else its subnet's, as Cluster Toolkit's firewall-rules module takes the project of the
    subnetwork; an Output when either id is one, None when neither names a project."""
    if isinstance(network, str) and isinstance(subnetwork, str):
        return network_project(network) or network_project(subnetwork)
    import pulumi

    return pulumi.Output.all(network, subnetwork).apply(
        lambda ids: network_project(str(ids[0] or "")) or network_project(str(ids[1] or ""))
    )


@dataclass(frozen=True)
class UserNetworks:
    """What the user brings: the first NIC's network and subnet, and the GPU NICs' pairs."""

    network: Any = None
    subnetwork: Any = None
    gpu: tuple[tuple[Any, Any], ...] = field(default_factory=tuple)
    # False: the network's owner makes the rules (docs/clouds.md names them); gpufleet adds none.
    firewall_rules: bool = True

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
    Refused before anything is registered: a network without its subnet and the reverse, a
    network and subnet that name different projects, `firewall_rules` not a plain bool or false
    without a network brought, and GPU network lists of different lengths."""
    if not isinstance(args, Mapping):  # a ClusterSpec: plain by construction
        if args.vpc_id and args.subnet_id:
            check_same_project(args.vpc_id, args.subnet_id)
            return args, UserNetworks(args.vpc_id, args.subnet_id)
        return args, UserNetworks()
    rest = {k: v for k, v in args.items() if k not in (*NETWORK_ARGS, FIREWALL_RULES)}
    vpc, subnet = args.get("vpc_id"), args.get("subnet_id")
    rules = args.get(FIREWALL_RULES, True)
    if not isinstance(rules, bool):
        raise SpecError(
            FIREWALL_RULES,
            f"is {type(rules).__name__}, but it decides which resources exist",
            "give firewall_rules a plain true or false",
        )
    if not rules and vpc is None:
        raise SpecError(
            FIREWALL_RULES,
            "is false, but no vpc_id is given: the network gpufleet builds needs its own rules, "
            "and no one else could add them",
            "leave out firewall_rules, or pass vpc_id and subnet_id of a network whose owner "
            "creates the rules",
        )
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
        check_same_project(vpc, subnet)
        rest.update(vpc_id=vpc, subnet_id=subnet)
    return rest, UserNetworks(vpc, subnet, tuple(zip(gnets, gsubs, strict=True)), rules)


def check_same_project(vpc_id: str, subnet_id: str) -> None:
    """A network and subnet whose ids name two projects cannot be one network: refused. (A bare
    network name with a subnet of another project than the provider's is the validators' to
    refuse: only the account knows the provider's project.)"""
    net, sub = network_project(vpc_id), network_project(subnet_id)
    if net and sub and net != sub:
        name = vpc_id.rstrip("/").rsplit("/", 1)[-1]
        raise SpecError(
            "vpc_id",
            f"names project {net}, but subnet_id names project {sub}: a subnet belongs to its "
            "network's project (on a Shared VPC, both are the host project's)",
            f"give the network of the subnet's project (projects/{sub}/global/networks/{name}), "
            "or the subnet of the network's",
        )


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


# Within `bringing(networks)`, the validators know which networks the user brings
# (`brought()`; none outside it).
_BROUGHT: Scoped[UserNetworks] = Scoped("gcp_networks", UserNetworks)
bringing = _BROUGHT.within
brought = _BROUGHT.get
