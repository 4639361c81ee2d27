"""The network a fleet lives in: VPC, one subnet in one AZ, and the EFA-ready security group."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws

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
    security_group: Any  # the fleet's own traffic (EFA: all to and from itself)
    ssh_group: Any  # SSH from the allowed CIDRs: the head's primary NIC only, by default
    gateways: list[Any] = field(default_factory=list)  # what an Elastic IP must wait for


def aws_region(spec: ClusterSpec) -> str:
    """The region the fleet is in: the spec's, else the stack's `aws:region` (the two agree:
    stackconfig.spec_from_config refuses a stack where they differ)."""
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
) -> Network:
    """Use the spec's VPC/subnet when given; otherwise create VPC, subnet, IGW and routes in
    `zone` (one that offers the type: components/aws/offers.py checked it before)."""
    gateways: list[Any] = []
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    if spec.subnet_id and spec.vpc_id:
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
        vpc_id=vpc_id, subnet_id=subnet_id, security_group=sg, ssh_group=ssh, gateways=gateways
    )
