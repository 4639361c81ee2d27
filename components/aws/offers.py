"""Does the region (and zone) offer the instance type? EC2 is asked before anything is created."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi_aws as aws

from gpufleet.components.aws.network import aws_region, brings_network
from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.offers import Availability, Offered, Status, under_mocks

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
    check_zones(list(spec.zone_choices), offered, instance_type, region)
    zone = spec.zone or first_zone(offered, instance_type, region)
    offline = under_mocks()
    source = f"a stand-in for {API} (components/aws/mocks.py)" if offline else API
    status: Status = "offline" if offline else "live"
    return Offered(Availability(status, f"{region} ({zone})", source), zone)


def zone_fallback(spec: ClusterSpec, instance_type: str) -> list[str]:
    """The zones `up` tries in turn when none was named and one has no capacity: every zone
    that offers the type, by name (the first is the one check_offered picked); none when the
    spec names zones, a reservation, or its own subnet (whose zone is fixed)."""
    if spec.zone_choices or spec.reservation or brings_network(spec):
        return []
    return sorted(offerings(instance_type, aws_region(spec), "availability-zone"))
