"""The network a fleet lives in: VPC, one subnet in one AZ, and the EFA-ready security group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

VPC_CIDR = "10.42.0.0/16"
# One /20: EFA traffic cannot cross subnets, and every "efa" interface takes an address
# (p5: 32 per node), so 4091 usable addresses leave room for ~120 p5 nodes.
SUBNET_CIDR = "10.42.0.0/20"


@dataclass
class Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group: Any


def availability_zone(region: str, zone: str | None) -> str:
    return zone or f"{region}a"


def build_network(
    name: str, spec: Any, tags: dict[str, str], opts: pulumi.ResourceOptions, region: str
) -> Network:
    """Use the spec's VPC/subnet when given; otherwise create VPC, subnet, IGW and routes."""
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
            availability_zone=availability_zone(region, spec.zone),
            tags={**tags, "Name": f"{name}-subnet"},
            opts=opts,
        )
        routes = aws.ec2.RouteTable(
            f"{name}-routes",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{name}-routes"},
            opts=opts,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-routes-assoc", subnet_id=subnet.id, route_table_id=routes.id, opts=opts
        )
        vpc_id, subnet_id = vpc.id, subnet.id
    sg = aws.ec2.SecurityGroup(
        f"{name}-sg",
        vpc_id=vpc_id,
        description=f"gpufleet {spec.name}: SSH from allowed CIDRs, all traffic within the fleet",
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(
                description="SSH",
                protocol="tcp",
                from_port=22,
                to_port=22,
                cidr_blocks=spec.ssh_cidrs,
            ),
            # EFA needs all traffic to AND from the group itself (facts §1.3).
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
    return Network(vpc_id=vpc_id, subnet_id=subnet_id, security_group=sg)
