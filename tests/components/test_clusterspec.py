"""ClusterSpec validation names the field and the fix."""

from __future__ import annotations

import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import CatalogError, SpecError


def spec(**kw) -> ClusterSpec:
    return ClusterSpec.from_input({"name": "t", **kw})


def test_local_defaults():
    s = spec()
    assert (s.cloud, s.nodes, s.gpus, s.fabric) == ("local", 2, 0, "none")


@pytest.mark.parametrize(
    ("kw", "field", "fix_part"),
    [
        ({"name": "Bad_Name"}, "name", "lowercase"),
        ({"nodes": 0}, "nodes", "--nodes"),
        ({"nodes": "many"}, "nodes", "valid value"),
        ({"ttl_minutes": -1}, "ttl_minutes", "--ttl"),
        ({"ssh_cidrs": ["not-a-cidr"]}, "ssh_cidrs", "203.0.113.7/32"),
        ({"cloud": "aws"}, "instance_type", "gpufleet catalog"),
        ({"instance_type": "p4d.24xlarge"}, "instance_type", "--cloud"),
        ({"gpus_per_node": 8}, "gpus_per_node", "--gpus"),
        ({"nodes": 1500}, "nodes", "at most 1000"),
        ({"colour": "red"}, "colour", "known fields"),
        ({"cloud": "moon"}, "cloud", "use one of 'local', 'vm', 'ssh', 'aws'"),
        (
            {"cloud": "aws", "instance_type": "p4d.24xlarge", "ttl_minutes": 0},
            "ttl_minutes",
            "--ttl",
        ),
        ({"disk_gb": 10}, "disk_gb", "100"),
        # `<name>-image` is the Pulumi stack and lock of cluster <name>'s image bake
        ({"name": "llama-image"}, "name", "reserved for image bakes"),
    ],
)
def test_bad_input_names_field_and_fix(kw, field, fix_part):
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert e.value.field == field
    assert fix_part in e.value.fix
    assert e.value.exit_code == 2


def test_a_name_only_containing_image_is_still_a_name():
    assert spec(name="image-llama").name == "image-llama"
    assert spec(name="llama-images").name == "llama-images"


def test_cloud_spec_derives_gpus_and_fabric_from_catalog():
    s = spec(cloud="aws", instance_type="p4d.24xlarge")
    assert (s.gpus, s.fabric, s.effective_region, s.effective_ssh_user) == (
        8,
        "efa",
        "us-east-1",
        "ubuntu",
    )


def test_unknown_instance_type_lists_choices():
    with pytest.raises(CatalogError) as e:
        spec(cloud="aws", instance_type="p9.huge")
    assert "p4d.24xlarge" in e.value.hint


def test_cidrs_are_normalised():
    assert spec(ssh_cidrs=["10.1.2.3/8"]).ssh_cidrs == ["10.0.0.0/8"]


def test_expiry_follows_ttl():
    assert spec(ttl_minutes=60).expiry(now=1000.0) == 1000.0 + 3600
    assert spec(ttl_minutes=0).expiry(now=1000.0) is None


AWS = {"cloud": "aws", "instance_type": "p5.48xlarge"}


def test_zones_are_tried_in_order_and_the_first_is_the_zone():
    s = spec(**AWS, zones=["us-east-1d", "us-east-1a"])
    assert s.zone == "us-east-1d" and s.zone_choices == ["us-east-1d", "us-east-1a"]
    assert spec(**AWS, zone="us-east-1b").zone_choices == ["us-east-1b"]
    assert spec(**AWS).zone_choices == []
    with pytest.raises(SpecError) as e:
        spec(**AWS, zone="us-east-1b", zones=["us-east-1a", "us-east-1b"])
    assert e.value.field == "zones"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({**AWS, "reservation": "cr-0123456789abcdef0"}, "zone"),  # which zone is it in?
        ({**AWS, "reservation": "cr-0123", "zone": "us-east-1a"}, "reservation"),
        ({**AWS, "reservation": "my-res", "zone": "us-east-1a"}, "reservation"),
        (
            {**AWS, "reservation": "cr-0123456789abcdef0", "zone": "us-east-1a", "spot": True},
            "spot",
        ),
        (
            {**AWS, "reservation": "cr-0123456789abcdef0", "zones": ["us-east-1a", "us-east-1b"]},
            "zone",
        ),
        (
            {"cloud": "azure", "instance_type": "Standard_ND96asr_v4", "reservation": "r"},
            "reservation",
        ),
    ],
)
def test_a_reservation_is_one_zone_of_on_demand_capacity(kw, field):
    """An EC2 capacity reservation holds on-demand capacity of one type in one Availability
    Zone (EC2 user guide, ec2-capacity-reservations.md); a GCE reservation is zonal too
    (compute/docs/instances/reservations-overview). Nodes elsewhere cannot use it."""
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert e.value.field == field


def test_a_reservation_with_its_zone_is_accepted():
    s = spec(**AWS, reservation="cr-0123456789abcdef0", zone="us-east-1a")
    assert s.reservation == "cr-0123456789abcdef0"
    g = spec(cloud="gcp", instance_type="a2-highgpu-8g", reservation="a2-res", zone="us-central1-a")
    assert g.reservation == "a2-res"


def test_expires_at_is_epoch_seconds():
    assert spec(**AWS, expires_at=1_900_000_000).expires_at == 1_900_000_000
    with pytest.raises(SpecError) as e:
        spec(**AWS, expires_at=0)
    assert e.value.field == "expires_at"


def test_with_validates_the_changed_spec_again_cloud_rules_included():
    spec = ClusterSpec.from_input(
        {"name": "c", "cloud": "aws", "instance_type": "p4d.24xlarge", "zones": ["a", "b"]}
    )
    assert spec.with_(ssh_cidrs=["203.0.113.7/32"]).ssh_cidrs == ["203.0.113.7/32"]
    assert spec.with_(zone="b", zones=["b"]).zone == "b"
    with pytest.raises(SpecError, match="nodes"):
        spec.with_(nodes=0)
    with pytest.raises(SpecError, match="too wide"):  # components/aws/rules.py
        spec.with_(ssh_cidrs=["0.0.0.0/0"])


def test_a_spec_recorded_before_container_still_loads():
    """spec.json of a cluster made before issue 21 holds `"container_image": null` (the field was
    never used); `run --cluster` loads it for every run, so it must still validate."""
    old = {"name": "t", "cloud": "local", "nodes": 2, "container_image": None}
    assert ClusterSpec.model_validate(old).container is None
    moved = ClusterSpec.model_validate({**old, "container_image": "ubuntu:22.04"})
    assert moved.container is not None
    assert moved.container.image == "docker.io/library/ubuntu:22.04"
