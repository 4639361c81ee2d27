"""What AWS would fill in, for the offline plan and the tests (components/preview.py)."""

from __future__ import annotations

from typing import Any

FAKE_AMI = "ami-0a1b2c3d4e5f60718"
OFFERED_IN = ("d", "b", "f")  # zone letters offering every type, unsorted as AWS may list them


def fake_outputs(typ: str, name: str, inputs: dict[str, Any], count: int) -> dict | None:
    if typ == "aws:ec2/instance:Instance":
        return {
            "private_ip": f"10.42.0.{10 + count % 200}",
            "public_ip": f"198.51.100.{10 + count % 200}",
            "primary_network_interface_id": f"eni-{count:08x}",
        }
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
        region = args.get("region") or "us-east-1"
        zones = [f"{region}{z}" for z in OFFERED_IN]
        return {
            "id": region,
            "locations": zones,
            "location_types": ["availability-zone"] * len(zones),
            "instance_types": [f["values"][0] for f in args.get("filters") or []] * len(zones),
        }
    if token == "aws:ssm/getParameter:getParameter":
        return {
            "name": args.get("name"),
            "value": FAKE_AMI,
            "type": "String",
            "id": args.get("name"),
        }
    return None
