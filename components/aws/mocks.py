"""What AWS would fill in, for the offline plan and the tests (components/preview.py)."""

from __future__ import annotations

from typing import Any

FAKE_AMI = "ami-0a1b2c3d4e5f60718"
OFFERED_IN = ("d", "b", "f")  # zone letters offering a type, unsorted as AWS may list them
# The regions that offer a type, where gpufleet has a source; a type not listed here is answered
# as offered in every region (the stand-in knows no better, and a plan says it was offline).
# p5.48xlarge: the regions with a p5.48xlarge row in skypilot-catalog v8 aws/vms.csv (commit
# 00148f2a, built from EC2's DescribeInstanceTypeOfferings); e.g. eu-central-1 has none.
OFFERED_REGIONS: dict[str, tuple[str, ...]] = {
    "p5.48xlarge": (
        "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-2", "ap-southeast-3",
        "ca-central-1", "eu-north-1", "eu-west-2", "us-east-1", "us-east-2", "us-west-1",
        "us-west-2",
    ),
}  # fmt: skip


def offered(instance_type: str, region: str) -> bool:
    regions = OFFERED_REGIONS.get(instance_type)
    return regions is None or region in regions


def fake_outputs(typ: str, name: str, inputs: dict[str, Any], count: int) -> dict | None:
    if typ == "aws:ec2/instance:Instance":
        return {
            "private_ip": f"10.42.0.{10 + count % 200}",
            "public_ip": f"198.51.100.{10 + count % 200}",
            "primary_network_interface_id": f"eni-{count:08x}",
            "arn": f"arn:aws:ec2:us-east-1:123456789012:instance/i-{count:017x}",
        }
    if typ == "aws:iam/role:Role":
        return {"arn": f"arn:aws:iam::123456789012:role/{name}", "name": name}
    if typ == "aws:iam/instanceProfile:InstanceProfile":
        return {"arn": f"arn:aws:iam::123456789012:instance-profile/{name}", "name": name}
    if typ == "aws:ec2/eip:Eip":
        return {
            "public_ip": f"203.0.113.{10 + count % 200}",
            "allocation_id": f"eipalloc-{count:08x}",
        }
    if typ == "aws:ec2/launchTemplate:LaunchTemplate":
        return {"latest_version": 1}
    if typ == "aws:ec2/placementGroup:PlacementGroup":
        return {"name": inputs.get("name", name)}
    return None


def fake_call(token: str, args: dict[str, Any]) -> dict | None:
    if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
        # As EC2's DescribeInstanceTypeOfferings answers: the locations of the asked kind
        # ("region" or "availability-zone") that offer the filtered type; none when none do.
        region = args.get("region") or "us-east-1"
        kind = args.get("locationType") or "region"
        types = [v for f in args.get("filters") or [] for v in f["values"]]
        found = [t for t in types if offered(t, region)]
        locations = (
            ([region] if kind == "region" else [f"{region}{z}" for z in OFFERED_IN])
            if found
            else []
        )
        return {
            "id": region,
            "locations": locations,
            "location_types": [kind] * len(locations),
            "instance_types": found[:1] * len(locations),
        }
    if token == "aws:index/getCallerIdentity:getCallerIdentity":
        return {
            "id": "123456789012",
            "accountId": "123456789012",
            "arn": "arn:aws:iam::123456789012:user/planner",
            "userId": "AIDAPLANNER",
        }
    if token == "aws:ssm/getParameter:getParameter":
        return {
            "name": args.get("name"),
            "value": FAKE_AMI,
            "type": "String",
            "id": args.get("name"),
        }
    if token == "aws:ec2/getAmi:getAmi":
        # As DescribeImages answers for the DLAMI (Ubuntu): available, not deprecated.
        ids = [v for f in args.get("filters") or [] for v in f["values"]]
        return {
            "id": ids[0] if ids else FAKE_AMI,
            "imageId": ids[0] if ids else FAKE_AMI,
            "name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) (stand-in)",
            "rootDeviceName": "/dev/sda1",
            "state": "available",
            "deprecationTime": "",
        }
    return None


def fake_provider_call(
    token: str, args: dict[str, Any], provider: dict[str, Any] | None
) -> dict | None:
    """Answers that come from the explicit provider asked: its region, as its own `region`
    input says (aws.get_region through that provider)."""
    if token == "aws:index/getRegion:getRegion" and provider and provider.get("region"):
        region = provider["region"]
        return {
            "id": region,
            "region": region,
            "name": region,
            "endpoint": f"ec2.{region}.amazonaws.com",
        }
    return None
