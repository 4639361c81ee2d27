"""Does the region (and zone) offer the instance type? EC2 is asked before anything is created."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi_aws as aws

from gpufleet.components.aws.network import aws_region, brings_network
from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.offers import Availability, Offered, Status, under_mocks
from gpufleet.components.validators import offline

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

API = "EC2 DescribeInstanceTypeOfferings"
CATALOG_HINT = "see `gpufleet catalog --cloud aws`"


def offerings(instance_type: str, region: str, location_type: str) -> list[str]:
    """The locations (region, or zone names) that offer the type: a synchronous invoke, so it
    runs before any resource is registered, on `pulumi preview` and `up` alike."""
    found = aws.ec2.get_instance_type_offerings(
        location_type=location_type,
        filters=[
            aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[instance_type])
        ],
        region=region,
        opts=lookup_opts(),  # the component's provider (its account), not the default
    )
    return list(found.locations or [])


def first_zone(locations: list[str], instance_type: str, region: str) -> str:
    """The zone a new subnet goes in: the first (by name) that offers the instance type."""
    if not locations:
        raise SpecError(
            "instance_type",
            f"{instance_type} is not offered in any availability zone of {region}",
            f"pick another region, or another type ({CATALOG_HINT})",
        )
    return sorted(locations)[0]


def check_zones(asked: list[str], offered: list[str], instance_type: str, region: str) -> None:
    """Refuse a zone the spec names (zone, or any of zones) that does not offer the type."""
    for zone in asked:
        if zone not in offered:
            others = ", ".join(sorted(offered)) or "none"
            raise SpecError(
                "zone",
                f"{zone} does not offer {instance_type} (zones of {region} that do: {others})",
                f"pick one of those zones, or drop zone to let gpufleet choose ({CATALOG_HINT})",
            )


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def subnet_zone(spec: ClusterSpec) -> str | None:
    """The zone of the spec's own plain subnet_id, read from EC2 (DescribeSubnets) through the
    component's provider; refused when the subnet is not in vpc_id or not in the spec's zone.
    None: no plain subnet, or nothing to ask (a plan offline, a stand-in that knows none)."""
    if not (spec.vpc_id and spec.subnet_id) or offline():
        return None
    region = aws_region(spec)
    try:
        subnet = aws.ec2.get_subnet(id=spec.subnet_id, region=region, opts=lookup_opts())
    except Exception as e:  # the provider's error: InvalidSubnetID.NotFound, access denied
        raise SpecError(
            "subnet_id",
            f"{spec.subnet_id} is not a subnet this account sees in {region} ({_first_line(e)})",
            "give a subnet id of vpc_id in that region (aws ec2 describe-subnets --filters "
            f"Name=vpc-id,Values={spec.vpc_id} --region {region})",
        ) from None
    zone = subnet.availability_zone
    if not zone:
        return None
    if subnet.vpc_id and subnet.vpc_id != spec.vpc_id:
        raise SpecError(
            "subnet_id",
            f"{spec.subnet_id} is in VPC {subnet.vpc_id}, not vpc_id {spec.vpc_id} (gpufleet's "
            "security groups are made in vpc_id and could not be attached in another VPC)",
            f"give a subnet of {spec.vpc_id}, or vpc_id: {subnet.vpc_id}",
        )
    asked = list(spec.zone_choices)
    if asked and asked != [zone]:
        raise SpecError(
            "zone",
            f"is {', '.join(asked)}, but subnet {spec.subnet_id} is in {zone} (every node goes "
            "in the subnet, so in its zone)",
            f"drop zone (the subnet's is used), set zone: {zone}, or give a subnet in {asked[0]}",
        )
    return zone


def check_offered(spec: ClusterSpec, instance_type: str) -> Offered:
    """A CheckOffered (components/offers.py): EC2 says the region and the zone offer the type;
    the zone the fleet goes in is the spec's, else the first (by name) that offers it."""
    region = aws_region(spec)
    if not offerings(instance_type, region, "region"):
        raise SpecError(
            "region",
            f"{region} does not offer {instance_type}",
            f"pick another region that offers it ({CATALOG_HINT}; "
            f"`aws ec2 describe-instance-type-offerings --filters Name=instance-type,"
            f"Values={instance_type} --region REGION`)",
        )
    offered = offerings(instance_type, region, "availability-zone")
    in_subnet = bool(spec.vpc_id and spec.subnet_id and spec.zone)
    if in_subnet and spec.zone not in offered:
        # AwsGpuFleet put the plain subnet's own zone in the spec (subnet_zone).
        raise SpecError(
            "subnet_id",
            f"{spec.subnet_id} is in {spec.zone}, which does not offer {instance_type} (zones "
            f"of {region} that do: {', '.join(sorted(offered)) or 'none'})",
            f"give a subnet of vpc_id in one of those zones ({CATALOG_HINT})",
        )
    check_zones(list(spec.zone_choices), offered, instance_type, region)
    zone = spec.zone or first_zone(offered, instance_type, region)
    stand_in = under_mocks()
    source = f"a stand-in for {API} (components/aws/mocks.py)" if stand_in else API
    status: Status = "offline" if stand_in else "live"
    where = f"{region} ({zone}" + (f", subnet {spec.subnet_id}'s zone)" if in_subnet else ")")
    return Offered(Availability(status, where, source), zone)


def zone_fallback(spec: ClusterSpec, instance_type: str) -> list[str]:
    """The zones `up` tries in turn when none was named and one has no capacity: every zone
    that offers the type, by name (the first is the one check_offered picked); none when the
    spec names zones, a reservation, or its own subnet (whose zone is fixed)."""
    if spec.zone_choices or spec.reservation or brings_network(spec):
        return []
    return sorted(offerings(instance_type, aws_region(spec), "availability-zone"))
