"""What AWS would fill in, for the offline plan and the tests (components/preview.py)."""

from __future__ import annotations

from typing import Any

FAKE_AMI = "ami-0a1b2c3d4e5f60718"


def fake_outputs(typ: str, name: str, inputs: dict[str, Any], count: int) -> dict | None:
    if typ == "aws:ec2/instance:Instance":
        return {
            "private_ip": f"10.42.0.{10 + count % 200}",
            "public_ip": f"198.51.100.{10 + count % 200}",
            "primary_network_interface_id": f"eni-{count:08x}",
        }
    if typ == "aws:ec2/eip:Eip":
        return {"public_ip": f"203.0.113.{10 + count % 200}"}
    if typ == "aws:ec2/launchTemplate:LaunchTemplate":
        return {"latest_version": 1}
    if typ == "aws:ec2/placementGroup:PlacementGroup":
        return {"name": inputs.get("name", name)}
    return None


def fake_call(token: str, args: dict[str, Any]) -> dict | None:
    if token == "aws:ssm/getParameter:getParameter":
        return {
            "name": args.get("name"),
            "value": FAKE_AMI,
            "type": "String",
            "id": args.get("name"),
        }
    return None
