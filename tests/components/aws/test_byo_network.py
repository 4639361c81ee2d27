"""AwsGpuFleet in a network the program brings (issue 20, items 1-3): ids as Outputs, the
program's provider for every lookup, and refusals, before anything is registered, of what
cannot be honoured.

EFA's security group rule, stated from the EC2 user guide (read 2026-11-25,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html, "Prepare an EFA-enabled
security group"): the group must allow all inbound and all outbound traffic to and from the
security group itself. pulumi-eks's shape for the same inputs (read 2026-11-25,
https://www.pulumi.com/registry/packages/eks/api-docs/nodegroup/): `vpcId`, `nodeSubnetIds`,
`extraNodeSecurityGroups` beside the group it makes.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
import pytest

from gpufleet.components.aws import AwsGpuFleet, AwsGpuFleetArgs
from gpufleet.components.errors import SpecError
from gpufleet.components.preview import Plan, evaluate

LT = "aws:ec2/launchTemplate:LaunchTemplate"
SG = "aws:ec2/securityGroup:SecurityGroup"
NETWORK = ("aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/internetGateway:InternetGateway",
           "aws:ec2/natGateway:NatGateway", "aws:ec2/routeTable:RouteTable")  # fmt: skip
BASE: dict[str, Any] = {
    "instance_type": "p4d.24xlarge",
    "nodes": 2,
    "ssh_cidrs": ["198.51.100.7/32"],
}


def program_vpc() -> tuple[Any, Any, Any]:
    """A VPC, subnet and group the program makes itself: their ids are Outputs."""
    vpc = aws.ec2.Vpc("own-vpc", cidr_block="10.9.0.0/16")
    subnet = aws.ec2.Subnet("own-subnet", vpc_id=vpc.id, cidr_block="10.9.0.0/22")
    group = aws.ec2.SecurityGroup("own-group", vpc_id=vpc.id)
    return vpc, subnet, group


def fleet_plan(
    make_args: Any, opts: Any = None, config: dict | None = None, into: Plan | None = None
) -> Plan:
    def program() -> dict:
        args = AwsGpuFleetArgs(**{**BASE, **make_args()})
        fleet = AwsGpuFleet("f", args, opts() if callable(opts) else opts)
        return {"nodes": fleet.nodes}

    return evaluate(program, config=config or {"aws:region": "us-east-1"}, into=into)


def refused(make_args: Any, opts: Any = None) -> tuple[SpecError, list[str]]:
    """The SpecError, and the fleet's resources registered before it (none, if refused first)."""
    made = Plan()
    with pytest.raises(Exception) as e:
        fleet_plan(make_args, opts, into=made)
    seen = [r.name for r in made.resources]
    err = e.value
    while not isinstance(err, SpecError) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, SpecError), repr(e.value)
    return err, [n for n in seen if n.startswith("f")]


def interfaces(p: Plan) -> list[dict]:
    """Every node interface: the templates' and the heads' own ENIs (in place of a template's
    primary interface, which then names the ENI only)."""
    nics = [n for lt in p.of_type(LT) for n in lt.inputs["networkInterfaces"]]
    enis = [r.inputs for r in p.of_type("aws:ec2/networkInterface:NetworkInterface")]
    return [n for n in nics if "networkInterfaceId" not in n] + enis


def groups_of(p: Plan) -> list[list[str]]:
    return [n["securityGroups"] for n in interfaces(p)]


def test_outputs_of_the_programs_vpc_are_taken_and_no_network_is_made():
    def args() -> dict:
        vpc, subnet, group = program_vpc()
        return {"vpc_id": vpc.id, "subnet_ids": [subnet.id], "extra_security_group_ids": [group.id]}

    p = fleet_plan(args)
    made = [(r.type, r.name) for r in p.resources if r.type in NETWORK and r.name.startswith("f")]
    assert made == []
    nics = interfaces(p)
    assert len(nics) == 2 * 4  # p4d: 4 network cards per node
    assert {n["subnetId"] for n in nics} == {"own-subnet-id"}
    # The extra group is on every interface of every node, beside gpufleet's own.
    assert all("own-group-id" in g and "f-sg-id" in g for g in groups_of(p))
    assert {r.inputs["vpcId"] for r in p.of_type(SG) if r.name.startswith("f")} == {"own-vpc-id"}


def test_replacement_groups_replace_gpufleets_and_need_no_ssh_cidrs():
    def args() -> dict:
        vpc, subnet, group = program_vpc()
        return {"vpc_id": vpc.id, "subnet_ids": [subnet.id], "security_group_ids": [group.id],
                "ssh_cidrs": []}  # fmt: skip

    p = fleet_plan(args)
    assert [r.name for r in p.of_type(SG)] == ["own-group"]  # gpufleet made none
    assert groups_of(p) and all(g == ["own-group-id"] for g in groups_of(p))


def test_several_subnets_put_every_node_in_the_first():
    def args() -> dict:
        vpc, subnet, _ = program_vpc()
        other = aws.ec2.Subnet("other-subnet", vpc_id=vpc.id, cidr_block="10.9.8.0/22")
        return {"vpc_id": vpc.id, "subnet_ids": [subnet.id, other.id]}

    p = fleet_plan(args)
    assert {n["subnetId"] for n in interfaces(p)} == {"own-subnet-id"}


def test_the_plain_subnet_id_of_the_stacks_still_works():
    p = fleet_plan(lambda: {"vpc_id": "vpc-0abc", "subnet_id": "subnet-0def"})
    made = [r.name for r in p.resources if r.type in NETWORK]
    assert made == []
    assert {n["subnetId"] for n in interfaces(p)} == {"subnet-0def"}


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        (lambda: {"vpc_id": program_vpc()[0].id}, "subnet_ids", "vpc_id alone"),
        (lambda: {"vpc_id": "vpc-0abc"}, "subnet_ids", "vpc_id alone"),  # main made a VPC
        (lambda: {"subnet_ids": [program_vpc()[1].id]}, "vpc_id", "without the VPC"),
        (lambda: {"extra_security_group_ids": [program_vpc()[2].id]}, "vpc_id", "belong to a VPC"),
        (lambda: {"vpc_id": "vpc-1", "subnet_ids": program_vpc()[1].id}, "subnet_ids", "a list"),
        (lambda: {"vpc_id": "v", "subnet_ids": ["s-1"], "subnet_id": "s-1"}, "subnet_id", "both"),
        (lambda: {"vpc_id": "vpc-1", "subnet_ids": ["s-1"], "security_group_ids": []},
         "security_group_ids", "no security group"),
        (lambda: {"vpc_id": "vpc-1", "subnet_ids": ["s-1"], "security_group_ids": ["sg-1"]},
         "ssh_cidrs", "no effect"),
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_refused_before_the_fleet_registers_anything(args, field, says):
    err, registered = refused(args)
    assert err.field == field and says in str(err)
    assert registered == []


def test_a_spec_region_other_than_the_providers_is_refused():
    def opts() -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(provider=aws.Provider("euw1", region="eu-west-1"))

    err, registered = refused(lambda: {"region": "us-east-1"}, opts)
    assert err.field == "region" and "euw1" in str(err) and "eu-west-1" in str(err)
    assert registered == []


def test_without_a_region_the_fleet_takes_its_providers_and_asks_it_everything():
    def opts() -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(provider=aws.Provider("usw2", region="us-west-2"))

    p = fleet_plan(dict, opts)  # the stack's aws:region says us-east-1
    assert {c.provider for c in p.calls} == {"usw2"}
    regions = {c.args.get("region") for c in p.calls if "region" in c.args}
    assert regions == {"us-west-2"}
    # The backstop's schedule names the region of the instances it terminates.
    assert all(r.provider == "usw2" for r in p.resources if r.type.startswith("aws:"))


def test_a_provider_inherited_from_a_parent_component_is_asked_too():
    def opts() -> pulumi.ResourceOptions:
        parent = pulumi.ComponentResource(
            "my:index:Lab",
            "lab",
            opts=pulumi.ResourceOptions(providers=[aws.Provider("aps1", region="ap-south-1")]),
        )
        return pulumi.ResourceOptions(parent=parent)

    p = fleet_plan(dict, opts)
    assert {c.provider for c in p.calls} == {"aps1"}


def test_the_default_provider_is_asked_when_the_program_names_none():
    p = fleet_plan(dict)
    assert p.calls and {c.provider for c in p.calls} == {None}
    assert {c.args.get("region") for c in p.calls if "region" in c.args} == {"us-east-1"}


def test_a_spec_region_other_than_the_default_providers_is_refused():
    """No explicit provider: the default one (the stack's aws:region) places every resource,
    so a `region` argument naming another region is refused before anything registers."""
    made = Plan()
    with pytest.raises(Exception) as e:
        fleet_plan(lambda: {"region": "us-west-2"}, config={"aws:region": "us-east-1"}, into=made)
    seen = [r.name for r in made.resources]
    err: BaseException | None = e.value
    while err is not None and not isinstance(err, SpecError):
        err = err.__cause__
    assert isinstance(err, SpecError), repr(e.value)
    assert err.field == "region" and "us-west-2" in str(err) and "us-east-1" in str(err)
    assert "aws:region us-west-2" in err.fix
    assert [n for n in seen if n.startswith("f")] == []


def test_a_spec_region_equal_to_the_default_providers_passes():
    p = fleet_plan(lambda: {"region": "us-east-1"}, config={"aws:region": "us-east-1"})
    assert {c.args.get("region") for c in p.calls if "region" in c.args} == {"us-east-1"}
