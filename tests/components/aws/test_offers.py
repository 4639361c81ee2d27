"""AWS: a region or zone that does not offer the instance type is refused before anything."""

from __future__ import annotations

import pytest

from gpufleet.components.aws.mocks import OFFERED_REGIONS
from gpufleet.components.aws.offers import check_zones, first_zone
from gpufleet.components.errors import SpecError
from tests.components.stackplans import plan_and_fleet, refused_before_anything


def test_a_region_without_the_type_registers_nothing_and_names_the_region():
    """EC2's DescribeInstanceTypeOfferings with LocationType=region lists only the regions
    that offer a type (docs.aws.amazon.com/AWSEC2/latest/APIReference/
    API_DescribeInstanceTypeOfferings.html); p5.48xlarge has no row for eu-central-1 in
    skypilot-catalog v8 aws/vms.csv (built from that API). Asked synchronously, before the
    component registers anything: no VPC, gateway or group is created for a fleet that
    cannot exist (before, the invoke was an Output and only the subnet waited for it)."""
    assert "eu-central-1" not in OFFERED_REGIONS["p5.48xlarge"]
    err, registered = refused_before_anything(
        "aws-p5", config={"aws:region": "eu-central-1"}, region="eu-central-1"
    )
    assert registered == []
    assert err.field == "region"
    assert "eu-central-1 does not offer p5.48xlarge" in err.problem
    assert "gpufleet catalog --cloud aws" in err.fix


def test_a_zone_without_the_type_registers_nothing_and_names_the_zone():
    """With LocationType=availability-zone EC2 lists the zones of the region that offer the
    type (same API doc); zone letters map to different zones per account, so a named zone
    may not offer it even where the region does. The stand-in offers in zones d, b, f."""
    err, registered = refused_before_anything("aws-p5", zone="us-east-1a")
    assert registered == []
    assert err.field == "zone"
    assert "us-east-1a does not offer p5.48xlarge" in err.problem
    assert "us-east-1b, us-east-1d, us-east-1f" in err.problem


def test_every_zone_to_try_must_offer_the_type():
    """`zones` are tried in order when one has no capacity: a zone that cannot offer the type
    would fail its turn after the earlier zones' attempts, so it is refused up front."""
    err, registered = refused_before_anything(
        "aws-p5", zone="us-east-1d", zones=["us-east-1d", "us-east-1c"]
    )
    assert registered == [] and err.field == "zone" and "us-east-1c" in err.problem


def test_zone_choice_and_what_the_plan_says_it_checked():
    """With no zone given the first zone (by name) that offers the type is used (and kept by
    ignore_changes); a plan under mocks says its answer came from the offline stand-in."""
    p, fleet = plan_and_fleet("aws-p5")
    (subnet,) = [r for r in p.of_type("aws:ec2/subnet:Subnet") if r.name == "aws-p5-subnet"]
    assert subnet.inputs["availabilityZone"] == "us-east-1b"
    assert fleet.availability.status == "offline"
    assert "stand-in for EC2 DescribeInstanceTypeOfferings" in fleet.availability.source


def test_zone_helpers():
    check_zones(["us-west-2a"], ["us-west-2c", "us-west-2a"], "p5.48xlarge", "us-west-2")
    with pytest.raises(SpecError) as e:
        check_zones(["us-west-2b"], [], "p5.48xlarge", "us-west-2")
    assert e.value.field == "zone" and "that do: none" in e.value.problem
    assert first_zone(["us-west-2c", "us-west-2a"], "p5.48xlarge", "us-west-2") == "us-west-2a"
