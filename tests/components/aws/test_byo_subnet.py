"""A subnet, security groups and region the program brings, checked against a fake account
before anything registers: the subnet's VPC and zone (DescribeSubnets), its route table for
the head's SSH replies with replacement groups, and the security groups per interface.

Read 2026-11-25:
- Amazon VPC quotas (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html,
  "Security groups"): "Security groups per network interface", default 5, adjustable up to 16;
  its Service Quotas code is L-2AFB9258 under service code vpc (the quota table of the Red Hat
  OpenShift Service on AWS docs, "Required AWS service quotas": "Security groups per network
  interface | vpc | L-2AFB9258 | 5").
- EC2 API reference, DescribeSubnets / Subnet (API_Subnet.html): VpcId, AvailabilityZone; an
  instance's interface is in its subnet's zone, so the nodes are where the subnet is.
"""

from __future__ import annotations

from typing import Any

import pulumi_aws as aws
import pytest

from gpufleet.components.aws import AwsGpuFleet, AwsGpuFleetArgs
from gpufleet.components.errors import SpecError
from gpufleet.components.preview import Plan, evaluate
from gpufleet.components.validators import AccountError, FakeAccount
from tests.components.aws.test_validators import IGW, NAT, QUOTA, SUBNET, account, to

SOURCE_GROUPS_QUOTA = ("vpc", "L-2AFB9258")
SOURCE_DEFAULT_GROUPS, SOURCE_MAX_GROUPS = 5, 16
BASE: dict[str, Any] = {
    "instance_type": "p4d.24xlarge",
    "nodes": 2,
    "ssh_cidrs": ["203.0.113.0/24"],
    "vpc_id": "vpc-0abc",
    "subnet_id": "subnet-0abc",
}
SSH_IGW = to("203.0.113.0/24", gatewayId="igw-1")


def plan(
    acc: FakeAccount | None, into: Plan | None = None, **args: Any
) -> tuple[Plan, list[AwsGpuFleet]]:
    built: list[AwsGpuFleet] = []

    def program() -> dict:
        built.append(AwsGpuFleet("f", AwsGpuFleetArgs(**{**BASE, **args})))
        return {"nodes": built[0].nodes}

    return evaluate(program, config={"aws:region": "us-east-1"}, account=acc, into=into), built


def refused(acc: FakeAccount | None, **args: Any) -> tuple[Exception, list[str]]:
    """The SpecError or AccountError, and the fleet's resources registered before it."""
    made = Plan()
    with pytest.raises(Exception) as e:
        plan(acc, into=made, **args)
    seen = [r.name for r in made.resources]
    err: BaseException | None = e.value
    while err is not None and not isinstance(err, (SpecError, AccountError)):
        err = err.__cause__ or err.__context__
    assert isinstance(err, (SpecError, AccountError)), repr(e.value)
    return err, [n for n in seen if n.startswith("f")]


# --- the subnet's VPC and zone (review 20, should-fix 8) ---


def test_the_fleet_takes_its_subnets_zone_and_the_offer_check_names_it():
    p, (fleet,) = plan(account(subnet={"availabilityZone": "us-east-1f"}))
    asked = [c for c in p.calls if c.token == SUBNET]
    assert [c.args["id"] for c in asked] == ["subnet-0abc"]
    assert fleet.spec.zone == "us-east-1f"
    assert "us-east-1f, subnet subnet-0abc's zone" in fleet.availability.where


@pytest.mark.parametrize(
    ("subnet", "args", "field", "says"),
    [
        ({"vpcId": "vpc-other"}, {}, "subnet_id", "is in VPC vpc-other, not vpc_id vpc-0abc"),
        ({"availabilityZone": "us-east-1f"}, {"zone": "us-east-1b"}, "zone",
         "subnet subnet-0abc is in us-east-1f"),
        # The stand-in offers p4d in us-east-1b, d, f only (components/aws/mocks.py OFFERED_IN).
        ({"availabilityZone": "us-east-1a"}, {}, "subnet_id",
         "is in us-east-1a, which does not offer p4d.24xlarge"),
    ],
)  # fmt: skip
def test_a_subnet_of_another_vpc_or_zone_is_refused_before_anything_registers(
    subnet, args, field, says
):
    err, registered = refused(account(subnet=subnet), **args)
    assert isinstance(err, SpecError) and err.field == field and says in str(err)
    assert registered == []


def test_a_subnet_the_account_does_not_see_is_refused(monkeypatch):
    """The provider's error for an unknown id (an exception from the mocks' own call would
    stop the mock monitor, so the invoke function itself raises here)."""

    def missing(**kw: Any) -> Any:
        raise RuntimeError("InvalidSubnetID.NotFound: The subnet ID 'subnet-0abc' does not exist")

    monkeypatch.setattr(aws.ec2, "get_subnet", missing)
    err, registered = refused(account())
    assert isinstance(err, SpecError) and err.field == "subnet_id"
    assert "InvalidSubnetID.NotFound" in str(err) and registered == []


def test_offline_the_subnet_is_not_asked():
    p, (fleet,) = plan(None)
    assert not [c for c in p.calls if c.token == SUBNET]
    assert fleet.spec.zone is None


# --- the head's SSH replies with replacement groups (review 20, must-fix 2) ---


@pytest.mark.parametrize(
    ("routes", "says"),
    [([NAT, SSH_IGW], None), ([NAT], "no route to an internet gateway")],
)
def test_replacement_groups_need_some_route_to_an_internet_gateway_beside_nat(routes, says):
    """No ssh_cidrs: the groups decide who may SSH, so the check asks for an internet gateway
    route at all beside the NAT default, and names the CIDRs it covers."""
    acc = account(routes=routes)
    args = {"security_group_ids": ["sg-own"], "ssh_cidrs": []}
    if says is None:
        _, (fleet,) = plan(acc, **args)
        (egress,) = [c for c in fleet.checks if "subnet" in c.fact]
        assert "through an internet gateway to 203.0.113.0/24" in egress.detail
        assert "not checked" in egress.detail
    else:
        err, registered = refused(acc, **args)
        assert isinstance(err, AccountError) and says in str(err) and registered == []
        assert "public_workers" in err.hint


def test_replacement_groups_with_every_node_public_need_only_the_igw_default():
    _, (fleet,) = plan(
        account(routes=[IGW]), security_group_ids=["sg-own"], ssh_cidrs=[], public_workers=True
    )
    (egress,) = [c for c in fleet.checks if "subnet" in c.fact]
    assert egress.status == "passed"


# --- security groups per interface (review 20, should-fix 7) ---


def quota_of(groups: float, asked: list[dict] | None = None) -> FakeAccount:
    acc = account()
    others = acc.invokes[QUOTA]

    def quota(a: dict) -> dict:
        if (a["serviceCode"], a["quotaCode"]) == SOURCE_GROUPS_QUOTA:
            if asked is not None:
                asked.append(a)
            return {"value": groups, "quotaCode": a["quotaCode"]}
        return others(a)

    acc.invokes[QUOTA] = quota
    return acc


def extra(n: int) -> list[str]:
    return [f"sg-extra{i}" for i in range(n)]


def test_more_groups_than_the_accounts_quota_are_refused_before_anything_registers():
    # gpufleet's fleet + SSH groups and 4 extra: 6 on the head's primary interface.
    err, registered = refused(quota_of(SOURCE_DEFAULT_GROUPS), extra_security_group_ids=extra(4))
    assert isinstance(err, AccountError) and registered == []
    assert "L-2AFB9258" in str(err) and "is 5" in str(err) and "would carry 6" in str(err)
    assert "--service-code vpc --quota-code L-2AFB9258 --desired-value 6" in err.hint
    assert "fewer extra_security_group_ids" in err.hint


def test_a_raised_quota_holds_them():
    _, (fleet,) = plan(quota_of(8), extra_security_group_ids=extra(4))
    (groups,) = [c for c in fleet.checks if "per-interface" in c.fact]
    assert groups.status == "passed" and "carries 6" in groups.detail


def test_replacement_groups_count_instead_of_gpufleets_two():
    asked: list[dict] = []
    _, (fleet,) = plan(
        quota_of(SOURCE_DEFAULT_GROUPS, asked),
        security_group_ids=["sg-a", "sg-b"],
        extra_security_group_ids=extra(3),
        ssh_cidrs=[],
        public_workers=False,
    )  # 2 + 3 = 5: within the default, the quota is not even asked
    assert asked == []
    err, _ = refused(
        quota_of(SOURCE_DEFAULT_GROUPS),
        security_group_ids=["sg-a", "sg-b", "sg-c"],
        extra_security_group_ids=extra(3),
        ssh_cidrs=[],
    )
    assert isinstance(err, AccountError) and "would carry 6" in str(err)


def test_more_groups_than_any_quota_allows_are_refused_offline_too():
    err, registered = refused(None, extra_security_group_ids=extra(SOURCE_MAX_GROUPS - 1))
    assert isinstance(err, SpecError) and err.field == "extra_security_group_ids"
    assert "at most 16" in str(err) and registered == []
