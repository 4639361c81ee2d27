"""The network a fleet lives in: VPC, one subnet in one AZ, and the EFA-ready security group."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws

from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.scoped import Scoped

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

VPC_CIDR = "10.42.0.0/16"
# The fleet's one subnet (EFA cannot cross subnets): 1019 usable addresses (EC2 keeps five of
# every subnet), one per node since the other network cards carry EFA-only interfaces without
# an IP address (EC2 user guide, create-efa.md). Sized for the largest cluster the spec allows,
# so a re-apply with more nodes never needs a new subnet (which would replace every node).
SUBNET_CIDR = "10.42.0.0/22"
# The NAT gateway's own public subnet (the fleet's subnet routes the internet through it); it
# lies past the fleet subnet (at most a /22 from 10.42.0.0).
NAT_SUBNET_CIDR = "10.42.16.0/28"


@dataclass
class Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group: Any  # the fleet's own traffic (EFA: all to and from itself); None: replaced
    ssh_group: Any  # SSH from the allowed CIDRs: the head's primary NIC only; None: replaced
    gateways: list[Any] = field(default_factory=list)  # what an Elastic IP must wait for
    node_groups: list[Any] = field(default_factory=list)  # on every interface of every node
    ssh_groups: list[Any] = field(default_factory=list)  # also on a public node's primary one


# Security groups per network interface (Amazon VPC quotas, vpc/latest/userguide/
# amazon-vpc-limits.html#vpc-limits-security-groups): 5 by default, adjustable up to 16.
DEFAULT_GROUPS_PER_INTERFACE = 5
MAX_GROUPS_PER_INTERFACE = 16
OWN_GROUPS = 2  # gpufleet's fleet group on every interface, its SSH group on a public primary


@dataclass(frozen=True)
class UserNetwork:
    """The network a program brings (AwsGpuFleetArgs vpc_id, subnet_ids, security groups):
    ids that may be pulumi Outputs, so they never go into the ClusterSpec."""

    vpc_id: Any
    subnet_id: Any  # the one every node goes in: the first of subnet_ids
    extra_groups: tuple[Any, ...] = ()  # added to every node interface
    groups: tuple[Any, ...] | None = None  # replace gpufleet's own groups; None: it makes them


# Within `bringing(net)`, the offer check and validators know the program brings `net`.
_USER_NETWORK: Scoped[UserNetwork | None] = Scoped("aws_net", lambda: None)
bringing = _USER_NETWORK.within
user_network = _USER_NETWORK.get


def brings_network(spec: ClusterSpec) -> bool:
    """The fleet goes in an existing VPC and subnet (plain ids in the spec, or a program's
    Outputs): gpufleet then makes no VPC, subnet, gateway or route."""
    return bool(spec.vpc_id and spec.subnet_id) or user_network() is not None


# AwsGpuFleetArgs fields naming what the program owns: they may hold Outputs.
NETWORK_ARGS = (
    "vpc_id",
    "subnet_id",
    "subnet_ids",
    "extra_security_group_ids",
    "security_group_ids",
)


def _id_list(args: dict[str, Any], key: str) -> list[Any] | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, (str, pulumi.Output)) or not isinstance(value, (list, tuple)):
        raise SpecError(
            key,
            "must be a list (its items may be Outputs): how many there are decides the "
            "interfaces and the subnet the nodes go in before anything is registered",
            f"pass a list, e.g. {key}=[resource.id]",
        )
    return list(value)


def groups_per_interface(net: UserNetwork | None) -> int:
    """Security groups on the busiest interface, a public node's primary one: the program's
    replacement groups, or gpufleet's two, plus every extra group (fleet.network_interfaces)."""
    if net is None:
        return OWN_GROUPS
    own = len(net.groups) if net.groups is not None else OWN_GROUPS
    return own + len(net.extra_groups)


def groups_counted(net: UserNetwork | None) -> str:
    own = (
        f"{len(net.groups)} of security_group_ids"
        if net is not None and net.groups is not None
        else "gpufleet's fleet and SSH groups"
    )
    extra = len(net.extra_groups) if net is not None else 0
    return f"{own} + {extra} extra_security_group_ids"


def take_user_network(args: Any) -> tuple[Any, UserNetwork | None]:
    """Split component args into the plain ones (for the ClusterSpec) and the network the
    program brings; refuse what cannot be honoured, before anything is registered.

    Plain vpc_id and subnet ids also stay in the spec (its vpc_id/subnet_id: the validators
    read the subnet's routes, and the CLI's stacks name them so); Outputs never do.
    """
    if args is None or not isinstance(args, dict):
        return args, None  # a ClusterSpec: its own plain vpc_id/subnet_id (build_network)
    given = {k: args[k] for k in NETWORK_ARGS if args.get(k) is not None}
    rest = {k: v for k, v in args.items() if k not in NETWORK_ARGS}
    subnets = _id_list(given, "subnet_ids")
    extra = _id_list(given, "extra_security_group_ids") or []
    groups = _id_list(given, "security_group_ids")
    if "subnet_id" in given:
        if subnets is not None:
            raise SpecError(
                "subnet_id", "and subnet_ids are both given", "give subnet_ids=[...] alone"
            )
        subnets = [given["subnet_id"]]
    vpc = given.get("vpc_id")
    if vpc is None:
        if subnets:
            raise SpecError(
                "vpc_id",
                "is missing: subnets were given without the VPC they belong to",
                "pass vpc_id too (gpufleet's security groups are made in it)",
            )
        if extra or groups is not None:
            raise SpecError(
                "vpc_id",
                "is missing: security groups belong to a VPC, and without vpc_id gpufleet "
                "makes a VPC of its own that they cannot be attached in",
                "pass vpc_id and subnet_ids of the groups' VPC, or drop the security groups",
            )
        return rest, None
    if not subnets:
        raise SpecError(
            "subnet_ids",
            "is missing: vpc_id alone names a VPC but not the subnet the nodes join (gpufleet "
            "does not make subnets in a VPC it does not own)",
            "pass subnet_ids=[...] with a subnet of that VPC (one with a NAT gateway route for "
            "private workers), or leave out vpc_id to let gpufleet make the whole network",
        )
    if groups is not None and not groups:
        raise SpecError(
            "security_group_ids",
            "is empty: the nodes would have no security group",
            "list groups that allow all traffic between the nodes and SSH to the head, or "
            "leave security_group_ids out to let gpufleet make them",
        )
    if groups is not None and rest.get("ssh_cidrs"):
        raise SpecError(
            "ssh_cidrs",
            "has no effect with security_group_ids: gpufleet makes no SSH group then, and "
            "your groups decide who may SSH to the head",
            "drop ssh_cidrs (allow SSH in your groups), or drop security_group_ids",
        )
    if len(subnets) > 1:
        pulumi.log.warn(
            f"subnet_ids: {len(subnets)} subnets given; every node goes in the first (a cluster "
            "placement group and EFA keep the fleet in one zone and one subnet), the other "
            f"{len(subnets) - 1} are not used"
        )
    if isinstance(vpc, str) and isinstance(subnets[0], str):
        rest = {**rest, "vpc_id": vpc, "subnet_id": subnets[0]}
    net = UserNetwork(vpc, subnets[0], tuple(extra), tuple(groups) if groups is not None else None)
    count = groups_per_interface(net)
    if count > MAX_GROUPS_PER_INTERFACE:
        raise SpecError(
            "extra_security_group_ids",
            f"puts {count} security groups on the head's primary interface "
            f"({groups_counted(net)}); EC2 allows at most {MAX_GROUPS_PER_INTERFACE} per "
            f"interface even with a raised quota (the default is {DEFAULT_GROUPS_PER_INTERFACE})",
            "pass fewer extra_security_group_ids, or merge their rules into fewer groups "
            "(security_group_ids replaces gpufleet's own two)",
        )
    return rest, net


def provider_region() -> str | None:
    """The region of an explicit provider the component's lookups ask (components/invokes.py),
    asked through it; None: the default provider (default_provider_region)."""
    opts = lookup_opts()
    if opts is None or opts.provider is None:
        return None
    return aws.get_region(opts=opts).region or None


def default_provider_region() -> str | None:
    """The default provider's region: the stack's `aws:region`, else asked through it (the
    provider then takes AWS_REGION / the profile's); None when nothing answers (a plan offline)."""
    configured = pulumi.Config("aws").get("region")
    if configured:
        return configured
    return aws.get_region(opts=lookup_opts()).region or None


def aws_region(spec: ClusterSpec) -> str:
    """The region the fleet is in: the spec's, else the stack's `aws:region` (the two agree:
    stackconfig.spec_from_config refuses a stack where they differ). With an explicit
    provider, AwsGpuFleet puts the provider's own region in the spec first (provider_region)."""
    region = spec.region or pulumi.Config("aws").get("region") or spec.effective_region
    assert region is not None  # aws has a default region
    return region


def ssh_sources(cidrs: list[str]) -> dict[str, list[str]]:
    """SSH rule sources split by IP version, as the security group rule takes them."""
    v6 = [c for c in cidrs if ipaddress.ip_network(c).version == 6]
    v4 = [c for c in cidrs if c not in v6]
    return {k: v for k, v in (("cidr_blocks", v4), ("ipv6_cidr_blocks", v6)) if v}


def fleet_routes(
    name: str,
    spec: ClusterSpec,
    vpc_id: Any,
    zone: Any,
    igw: Any,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> list[Any]:
    """The fleet subnet's routes: the internet straight through the gateway when every node
    is public; otherwise through a NAT gateway, except the SSH clients' CIDRs.

    Workers without a public IPv4 reach the internet (apt, the EFA installer, images) only
    through NAT. EFA keeps all nodes in one subnet, head included; the head's replies to
    SSH clients must leave through the internet gateway its Elastic IP is mapped on
    (through NAT they would come back from another address), hence the more specific
    routes for spec.ssh_cidrs. The NAT gateway sits in its own small public subnet.
    """
    to_igw = [c for c in spec.ssh_cidrs if ipaddress.ip_network(c).version == 4]
    if spec.public_workers or spec.nodes == 1:
        return [aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)]
    nat_subnet = aws.ec2.Subnet(
        f"{name}-nat-subnet",
        vpc_id=vpc_id,
        cidr_block=NAT_SUBNET_CIDR,
        availability_zone=zone,
        tags={**tags, "Name": f"{name}-nat-subnet"},
        opts=opts,
    )
    nat_routes = aws.ec2.RouteTable(
        f"{name}-nat-routes",
        vpc_id=vpc_id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
        tags={**tags, "Name": f"{name}-nat-routes"},
        opts=opts,
    )
    aws.ec2.RouteTableAssociation(
        f"{name}-nat-routes-assoc", subnet_id=nat_subnet.id, route_table_id=nat_routes.id, opts=opts
    )
    nat_ip = aws.ec2.Eip(
        f"{name}-nat-eip",
        domain="vpc",
        tags={**tags, "Name": f"{name}-nat-eip"},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[igw])),
    )
    nat = aws.ec2.NatGateway(
        f"{name}-nat",
        subnet_id=nat_subnet.id,
        allocation_id=nat_ip.allocation_id,
        tags={**tags, "Name": f"{name}-nat"},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[igw])),
    )
    return [
        aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id),
        *(aws.ec2.RouteTableRouteArgs(cidr_block=c, gateway_id=igw.id) for c in to_igw),
    ]


def build_network(
    name: str,
    spec: ClusterSpec,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
    zone: str,
    user: UserNetwork | None = None,
) -> Network:
    """Use the program's (`user`) or the spec's VPC/subnet when given; otherwise create VPC,
    subnet, IGW and routes in `zone` (one that offers the type: components/aws/offers.py
    checked it before). The fleet's security groups unless `user` replaces them."""
    gateways: list[Any] = []
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    if user is not None:
        vpc_id, subnet_id = user.vpc_id, user.subnet_id
    elif spec.subnet_id and spec.vpc_id:
        vpc_id, subnet_id = spec.vpc_id, spec.subnet_id
    else:
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=VPC_CIDR,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{name}-vpc"},
            opts=opts,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{name}-igw"}, opts=opts
        )
        subnet = aws.ec2.Subnet(
            f"{name}-subnet",
            vpc_id=vpc.id,
            cidr_block=SUBNET_CIDR,
            availability_zone=zone,
            tags={**tags, "Name": f"{name}-subnet"},
            # A looked-up zone is chosen once: a later offering elsewhere must not move the fleet.
            opts=opts
            if spec.zone
            else pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(ignore_changes=["availabilityZone"])
            ),
        )
        routes = aws.ec2.RouteTable(
            f"{name}-routes",
            vpc_id=vpc.id,
            routes=fleet_routes(name, spec, vpc.id, subnet.availability_zone, igw, tags, opts),
            tags={**tags, "Name": f"{name}-routes"},
            opts=opts,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-routes-assoc", subnet_id=subnet.id, route_table_id=routes.id, opts=opts
        )
        vpc_id, subnet_id = vpc.id, subnet.id
        gateways = [igw]
    extra = list(user.extra_groups) if user else []
    if user is not None and user.groups is not None:
        # The program's groups replace ours (their rules are its to get right: AwsGpuFleetArgs).
        return Network(
            vpc_id=vpc_id,
            subnet_id=subnet_id,
            security_group=None,
            ssh_group=None,
            gateways=gateways,
            node_groups=[*user.groups, *extra],
        )
    sg = aws.ec2.SecurityGroup(
        f"{name}-sg",
        vpc_id=vpc_id,
        description=f"gpufleet {spec.name}: all traffic within the fleet",
        ingress=[
            # EFA needs all traffic to AND from the group itself (facts §1.3). Workers' SSH
            # comes through here too: from the head, inside the VPC.
            aws.ec2.SecurityGroupIngressArgs(
                description="fleet", protocol="-1", from_port=0, to_port=0, self=True
            ),
        ],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(
                description="fleet", protocol="-1", from_port=0, to_port=0, self=True
            ),
            aws.ec2.SecurityGroupEgressArgs(
                description="internet (packages)",
                protocol="-1",
                from_port=0,
                to_port=0,
                cidr_blocks=["0.0.0.0/0"],
            ),
        ],
        tags={**tags, "Name": f"{name}-sg"},
        opts=opts,
    )
    ssh = aws.ec2.SecurityGroup(
        f"{name}-ssh",
        vpc_id=vpc_id,
        description=f"gpufleet {spec.name}: SSH from allowed CIDRs (the head's public NIC)",
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(
                description="SSH",
                protocol="tcp",
                from_port=22,
                to_port=22,
                **ssh_sources(spec.ssh_cidrs),
            ),
        ],
        tags={**tags, "Name": f"{name}-ssh"},
        opts=opts,
    )
    return Network(
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        security_group=sg,
        ssh_group=ssh,
        gateways=gateways,
        node_groups=[sg.id, *extra],
        ssh_groups=[ssh.id],
    )
