"""examples/pulumi-aws-own-vpc: a plain Pulumi program composes AwsGpuFleet with its own VPC,
subnet and explicit provider (issue 20, items 1-3). Planned under mocks, every invoke and every
AWS resource goes to the program's provider `use2` (us-east-2), none to the default provider,
gpufleet makes no network of its own, and the nodes are in the program's subnet.

Run with `-s` to see the table of who asked which provider (the closing note's figure).
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from gpufleet.components.preview import Plan, evaluate

PROGRAM = Path(__file__).resolve().parents[2] / "examples" / "pulumi-aws-own-vpc" / "__main__.py"
NETWORK = (
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
)
# Resources of other packages the fleet makes: they take no AWS provider.
NOT_AWS = ("gpufleet:", "tls:", "pulumi-python:dynamic:", "pulumi:providers:")


def plan_program(account: Any = None) -> Plan:
    main = runpy.run_path(str(PROGRAM), run_name="example")["main"]
    return evaluate(
        lambda: {"nodes": main().nodes},
        config={"aws:region": "us-east-1"},  # the stack's default provider: elsewhere
        account=account,
    )


def table(p: Plan) -> str:
    rows = [("kind", "token/type", "name", "provider")]
    rows += [("invoke", c.token, "", c.provider or "(default)") for c in p.calls]
    rows += [
        (
            "resource",
            r.type,
            r.name,
            "-" if r.type.startswith(NOT_AWS) else r.provider or "(default)",
        )
        for r in p.resources
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


@pytest.fixture(scope="module")
def plan() -> Plan:
    p = plan_program()
    print("\n" + table(p))
    return p


def test_every_invoke_asks_the_programs_provider(plan):
    assert plan.calls, "the fleet makes lookups (offerings, region, image)"
    tokens = {c.token for c in plan.calls}
    assert "aws:index/getRegion:getRegion" in tokens  # the region comes from the provider
    assert "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings" in tokens
    assert [c for c in plan.calls if c.provider != "use2"] == []


def test_the_offer_check_asked_about_the_providers_region_not_the_stacks(plan):
    offers = [c for c in plan.calls if c.token.endswith("getInstanceTypeOfferings")]
    assert {c.args.get("region") for c in offers} == {"us-east-2"}


def test_every_aws_resource_uses_the_programs_provider(plan):
    aws = [r for r in plan.resources if not r.type.startswith(NOT_AWS)]
    assert len(aws) > 10
    assert [(r.type, r.name) for r in aws if r.provider != "use2"] == []


def test_gpufleet_makes_no_network_in_the_programs_vpc(plan):
    theirs = {r.name for r in plan.resources if r.type in NETWORK and r.parent != "lab"}
    ours = [(r.type, r.name) for r in plan.resources if r.type in NETWORK and r.parent == "lab"]
    assert theirs == {"lab-vpc", "lab-gpu", "lab-igw", "lab-routes", "lab-gpu-routes"}
    assert ours == []
    assert len(plan.of_type("aws:ec2/vpc:Vpc")) == 1


def test_the_nodes_are_in_the_programs_subnet_with_its_extra_group(plan):
    templates = plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    assert len(templates) == 2
    for lt in templates:
        nics = lt.inputs["networkInterfaces"]
        assert len(nics) == 32  # p5: one interface per network card
        for nic in nics:
            if "networkInterfaceId" in nic:  # the head's own ENI (its Elastic IP is there)
                continue
            assert nic["subnetId"] == "lab-gpu-id"
            assert "lab-metrics-id" in nic["securityGroups"]
    for eni in plan.of_type("aws:ec2/networkInterface:NetworkInterface"):
        assert eni.inputs["subnetId"] == "lab-gpu-id"
        assert "lab-metrics-id" in eni.inputs["securityGroups"]
    groups = {r.name for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup")}
    assert groups == {"lab-metrics", "lab-sg", "lab-ssh"}
    assert {r.inputs["vpcId"] for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup")} == {
        "lab-vpc-id"
    }


def test_the_validators_ask_the_programs_provider_and_count_no_new_vpc():
    """With an account to ask, the validators run too: every lookup through `use2`, and the
    VPC quota is not asked (the program brings its VPC; its id is an Output, not in the spec)."""
    from tests.components.aws.test_validators import VPCS, account

    p = plan_program(account(vpcs=5))  # a full VPC quota: a new VPC would be refused
    assert [c.token for c in p.calls if c.provider != "use2"] == []
    assert VPCS not in {c.token for c in p.calls}
    assert len(p.calls) > 8  # quotas, instances, image, EFA: all asked
