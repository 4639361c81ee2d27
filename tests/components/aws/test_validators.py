"""AWS validators against a fake account: each refuses with the quota, the numbers and the fix,
and passes when the account has room. The facts come from the tables below, not the code."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import evaluate
from gpufleet.components.validators import AccountError, FakeAccount

# Service Quotas codes, service code ec2 / vpc. Read 2026-11-25 from:
# - EC2 user guide, "On-Demand Instance quotas" (https://docs.aws.amazon.com/AWSEC2/latest/
#   UserGuide/ec2-on-demand-instances.html#ec2-on-demand-instances-limits): "Running On-Demand
#   P instances" and "Running On-Demand G and VT instances", quotas in vCPUs;
# - EC2 user guide, "Spot Instance quotas" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
#   using-spot-limits.html): "All P Spot Instance Requests", "All G and VT Spot Instance Requests";
# - Amazon VPC quotas (https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html):
#   "VPCs per Region" 5 by default; "Elastic IP addresses per Region" 5 by default;
# - the codes as the Service Quotas console and `aws service-quotas list-service-quotas
#   --service-code ec2` list them (L-417A185B, L-DB2E81BA, L-7212CCBC, L-3819A6DF, L-0263D0A3;
#   vpc: L-F678F1CE).
SOURCE_QUOTAS = {
    ("p", "on-demand"): ("ec2", "L-417A185B"),
    ("g", "on-demand"): ("ec2", "L-DB2E81BA"),
    ("p", "spot"): ("ec2", "L-7212CCBC"),
    ("g", "spot"): ("ec2", "L-3819A6DF"),
    "vpcs": ("vpc", "L-F678F1CE"),
    "eips": ("ec2", "L-0263D0A3"),
}
# vCPUs per type (EC2 instance type pages; p4d.24xlarge 96, p5.48xlarge 192, g5.12xlarge 48).
SOURCE_VCPUS = {"p4d.24xlarge": 96, "p5.48xlarge": 192, "g5.12xlarge": 48}
# DescribeInstanceTypes (EC2 API reference, API_InstanceTypeInfo.html: ProcessorInfo.
# SupportedArchitectures, NetworkInfo.EfaSupported; values from the EC2 instance type pages,
# accelerated-computing-instances.html, and the EFA supported-types list in efa.html, read
# 2026-11-25): all three are x86_64 and support EFA.
SOURCE_TYPES: dict[str, dict[str, Any]] = {
    "p4d.24xlarge": {"supportedArchitectures": ["x86_64"], "efaSupported": True},
    "p5.48xlarge": {"supportedArchitectures": ["x86_64"], "efaSupported": True},
    "g5.12xlarge": {"supportedArchitectures": ["x86_64"], "efaSupported": True},
}

QUOTA = "aws:servicequotas/getServiceQuota:getServiceQuota"
VPCS = "aws:ec2/getVpcs:getVpcs"
EIPS = "aws:ec2/getEips:getEips"
AMI = "aws:ec2/getAmi:getAmi"
TABLES = "aws:ec2/getRouteTables:getRouteTables"
TABLE = "aws:ec2/getRouteTable:getRouteTable"
INSTANCES = "aws:ec2/getInstances:getInstances"
INSTANCE = "aws:ec2/getInstance:getInstance"
ITYPE = "aws:ec2/getInstanceType:getInstanceType"
SUBNET = "aws:ec2/getSubnet:getSubnet"
# A subnet for private workers that the head's SSH clients (the stacks' 203.0.113.0/24) reach:
# NAT for the internet, the clients' CIDR through the internet gateway (as fleet_routes makes).
USABLE_ROUTES = [
    {"cidrBlock": "0.0.0.0/0", "natGatewayId": "nat-1"},
    {"cidrBlock": "203.0.113.0/24", "gatewayId": "igw-1"},
]


def account(
    quotas: dict[tuple[str, str], float] | None = None,
    vpcs: int = 1,
    eips: int = 0,
    ami: dict[str, Any] | None = None,
    routes: list[dict[str, str]] | None = None,
    asked: list[dict[str, Any]] | None = None,
    running: list[tuple[str, str, bool]] | None = None,
    types: dict[str, dict[str, Any]] | None = None,
    subnet: dict[str, Any] | None = None,
) -> FakeAccount:
    """An account with room everywhere, but for what is given; `running` lists pending or
    running instances as (id, type, spot); `subnet` is DescribeSubnets' answer for any id
    (default: in vpc-0abc, zone us-east-1d)."""
    quotas = quotas or {}
    running = running or []

    def instances(args: dict[str, Any]) -> dict[str, Any]:
        assert args["instanceStateNames"] == ["pending", "running"]
        filters = {f["name"]: f["values"] for f in args["filters"]}
        prefixes = [v.rstrip("*") for v in filters["instance-type"]]
        spot_only = filters.get("instance-lifecycle") == ["spot"]
        ids = [
            i for i, t, spot in running if t.startswith(tuple(prefixes)) and (spot or not spot_only)
        ]
        return {"id": "r", "ids": ids}

    def quota(args: dict[str, Any]) -> dict[str, Any]:
        if asked is not None:
            asked.append(args)
        key = (args["serviceCode"], args["quotaCode"])
        return {"value": quotas.get(key, 10_000.0), "quotaCode": args["quotaCode"]}

    def image(args: dict[str, Any]) -> dict[str, Any]:
        (ami_id,) = args["filters"][0]["values"]
        base = {"id": ami_id, "imageId": ami_id, "name": "dlami", "state": "available"}
        return {**base, "rootDeviceName": "/dev/sda1", **(ami or {})}

    return FakeAccount(
        invokes={
            QUOTA: quota,
            VPCS: lambda a: {"id": "r", "ids": [f"vpc-{i}" for i in range(vpcs)]},
            EIPS: lambda a: {"id": "r", "allocationIds": [f"eipalloc-{i}" for i in range(eips)]},
            AMI: image,
            TABLES: lambda a: {
                "id": "r",
                "ids": ["rtb-1"] if a["filters"][0]["name"] == "association.subnet-id" else [],
            },
            TABLE: lambda a: {
                "id": "rtb-1",
                "routeTableId": "rtb-1",
                "routes": USABLE_ROUTES if routes is None else routes,
            },
            SUBNET: lambda a: {
                "id": a["id"],
                "vpcId": "vpc-0abc",
                "availabilityZone": "us-east-1d",
                **(subnet or {}),
            },
            INSTANCES: instances,
            INSTANCE: lambda a: {
                "id": a["instanceId"],
                "instanceType": {i: t for i, t, _ in running}[a["instanceId"]],
            },
            ITYPE: lambda a: {
                "id": a["instanceType"],
                "defaultVcpus": SOURCE_VCPUS[a["instanceType"]],
                **SOURCE_TYPES.get(a["instanceType"], {}),
                **(types or {}).get(a["instanceType"], {}),
            },
        }
    )


def build(stack: str, acc: FakeAccount, **overrides: Any) -> Any:
    return build_plan(stack, acc, **overrides)[0]


def build_plan(stack: str, acc: FakeAccount, **overrides: Any) -> tuple[Any, Any]:
    """The GpuFleet the stack builds against `acc`, and its plan."""
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack)
    if overrides:
        spec = spec.with_(**overrides)
    built: list[Any] = []

    def program() -> Any:
        built.append(stackconfig.build(spec, expires_at=1_900_000_000))
        return stackconfig.exports(built[0])

    p = evaluate(program, config=stackconfig.pulumi_config(config), account=acc)
    return built[0], p


def refusal(stack: str, acc: FakeAccount, **overrides: Any) -> AccountError:
    with pytest.raises(Exception) as caught:
        build(stack, acc, **overrides)
    err: BaseException | None = caught.value
    while err is not None and not isinstance(err, AccountError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, AccountError), repr(caught.value)
    return err


@pytest.mark.parametrize(
    ("stack", "spot", "family"),
    [("aws-p5", False, "p"), ("aws-p4d", False, "p"), ("aws-g5", True, "g")],
)
def test_a_vcpu_quota_below_the_fleet_is_refused_naming_quota_numbers_and_fix(stack, spot, family):
    """New accounts often hold 0 vCPUs for P instances; EC2 answers VcpuLimitExceeded only
    after the network exists. The quota is in vCPUs: nodes × the type's vCPUs."""
    service, code = SOURCE_QUOTAS[(family, "spot" if spot else "on-demand")]
    itype = stackconfig.stack_config(stack)["gpufleet:cluster"]["instance_type"]
    need = 2 * SOURCE_VCPUS[itype]
    err = refusal(stack, account({(service, code): 0.0}))
    assert code in str(err) and " 0 vCPUs" in str(err) and f"need {need}" in str(err)
    assert "VcpuLimitExceeded" in str(err)
    assert "aws service-quotas request-service-quota-increase" in err.hint
    assert f"--quota-code {code}" in err.hint and f"--desired-value {need}" in err.hint
    assert "Service Quotas console" in err.hint


def test_a_vcpu_quota_with_room_passes_and_says_what_it_found():
    asked: list[dict[str, Any]] = []
    fleet = build("aws-p5", account({("ec2", "L-417A185B"): 384.0}, asked=asked))
    (vcpu,) = [c for c in fleet.checks if "vCPU" in c.fact]
    assert vcpu.status == "passed" and vcpu.detail.endswith("384 vCPUs, 0 in use, need 384")
    assert {"serviceCode": "ec2", "quotaCode": "L-417A185B", "region": "us-east-1"} in asked


def test_running_instances_of_the_family_use_the_quota_and_are_subtracted():
    """The quota counts every running instance of the family (EC2 user guide, On-Demand
    Instance quotas: "the number of vCPUs ... for your running On-Demand instances"): another
    cluster's p4d (96 vCPUs) leaves 384 - 96 = 288, short of 2 × p5.48xlarge (384). A spot p5
    and a stopped-or-other-family instance do not count against the on-demand quota."""
    code = SOURCE_QUOTAS[("p", "on-demand")][1]
    running = [
        ("i-1", "p4d.24xlarge", False),
        ("i-2", "p5.48xlarge", True),
        ("i-3", "g5.12xlarge", False),
    ]
    err = refusal("aws-p5", account({("ec2", code): 384.0}, running=running))
    assert "is 384 vCPUs" in str(err) and "96 of them in use" in str(err)
    assert "need 384" in str(err) and "--desired-value 480" in err.hint


def test_room_beside_running_instances_passes():
    code = SOURCE_QUOTAS[("p", "on-demand")][1]
    running = [("i-1", "p4d.24xlarge", False), ("i-2", "p4d.24xlarge", False)]
    fleet = build("aws-p5", account({("ec2", code): 576.0}, running=running))
    (vcpu,) = [c for c in fleet.checks if "vCPU" in c.fact]
    assert vcpu.status == "passed" and vcpu.detail.endswith("576 vCPUs, 192 in use, need 384")


def test_spot_instances_use_the_spot_quota():
    code = SOURCE_QUOTAS[("g", "spot")][1]
    running = [("i-1", "g5.12xlarge", True), ("i-2", "g5.12xlarge", False)]
    err = refusal("aws-g5", account({("ec2", code): 96.0}, running=running))
    assert "48 of them in use" in str(err)


def test_a_capacity_block_is_not_refused_for_the_on_demand_quota():
    code = SOURCE_QUOTAS[("p", "on-demand")][1]
    fleet = build(
        "aws-p5",
        with_block(account({("ec2", code): 0.0})),
        reservation="cr-0123456789abcdef0",
        capacity_block=True,
        zone="us-east-1d",
    )
    (vcpu,) = [c for c in fleet.checks if "vCPU" in c.fact]
    assert vcpu.status == "passed" and "unconfirmed" in vcpu.detail


def test_a_full_vpc_quota_is_refused_and_an_existing_vpc_is_offered():
    """Default 5 VPCs per Region: a cluster that makes its own VPC needs one more."""
    service, code = SOURCE_QUOTAS["vpcs"]
    err = refusal("aws-p4d", account({(service, code): 5.0}, vpcs=5))
    assert code in str(err) and "is 5" in str(err) and "5 exist" in str(err)
    assert f"--service-code {service} --quota-code {code} --desired-value 6" in err.hint
    assert "vpc_id and subnet_id" in err.hint


def test_the_vpc_quota_is_not_asked_when_the_spec_reuses_a_vpc():
    fleet = build(
        "aws-p4d",
        account({("vpc", "L-F678F1CE"): 0.0}),
        vpc_id="vpc-0abc",
        subnet_id="subnet-0abc",
    )
    assert not [c for c in fleet.checks if "VPC quota" in c.fact]


def test_an_eip_quota_without_room_for_head_and_nat_is_refused():
    """A multi-card head takes an Elastic IP and the NAT gateway another: 2 more."""
    service, code = SOURCE_QUOTAS["eips"]
    err = refusal("aws-p5", account({(service, code): 5.0}, eips=4))
    assert code in str(err) and "4 are allocated" in str(err) and "allocates 2 more" in str(err)
    assert "--desired-value 6" in err.hint


def test_an_eip_quota_with_room_passes():
    fleet = build("aws-p5", account({("ec2", "L-0263D0A3"): 5.0}, eips=3))
    (eip,) = [c for c in fleet.checks if "Elastic IP" in c.fact]
    assert eip.status == "passed" and "3 allocated, need 2 more" in eip.detail


def test_a_deprecated_ami_passes_with_a_warning():
    """DescribeImages gives DeprecationTime; past it, the image is deprecated, but "you can
    still launch instances ... using the deprecated AMI ID", launch templates included (EC2
    user guide, ami-deprecate.html, read 2026-11-25)."""
    fleet = build(
        "aws-p4d",
        account(ami={"deprecationTime": "2026-04-13T00:00:00.000Z"}),
        image="ami-0123456789abcdef0",
    )
    (image,) = [c for c in fleet.checks if "image" in c.fact]
    assert image.status == "passed"
    assert "warning: deprecated since 2026-04-13" in image.detail


# DescribeImages (EC2 API reference, API_Image.html, read 2026-11-25): Architecture (i386 |
# x86_64 | arm64 | ...), RootDeviceName, BlockDeviceMappings with Ebs.VolumeSize of the
# snapshot; "you can't decrease the size of the volume below the size of the snapshot"
# (RunInstances BlockDeviceMapping / EbsBlockDevice.VolumeSize: "the volume size must be equal
# to or larger than the snapshot size").
SOURCE_ARM_AMI = {"architecture": "arm64"}
SOURCE_ROOT_200 = {
    "blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"volume_size": "200"}}]
}


def test_an_ami_of_another_architecture_is_refused():
    err = refusal("aws-p4d", account(ami=SOURCE_ARM_AMI), image="ami-0123456789abcdef0")
    assert "is arm64" in str(err) and "p4d.24xlarge runs x86_64" in str(err)


def test_a_root_volume_smaller_than_the_amis_snapshot_is_refused():
    err = refusal(
        "aws-p4d", account(ami=SOURCE_ROOT_200), image="ami-0123456789abcdef0", disk_gb=100
    )
    assert "root snapshot is 200 GiB" in str(err) and "at least 200" in err.hint


def test_a_root_volume_as_large_as_the_snapshot_passes():
    fleet = build(
        "aws-p4d", account(ami={**SOURCE_ROOT_200, "architecture": "x86_64"}), disk_gb=200
    )
    (image,) = [c for c in fleet.checks if "image" in c.fact]
    assert image.status == "passed" and "x86_64" in image.detail and "200 GiB" in image.detail


def test_an_efa_fabric_on_a_type_without_efa_is_refused():
    err = refusal("aws-p5", account(types={"p5.48xlarge": {"efaSupported": False}}))
    assert "does not support EFA" in str(err)


def test_an_efa_type_passes():
    fleet = build("aws-p5", account())
    (efa,) = [c for c in fleet.checks if "EFA" in c.fact]
    assert efa.status == "passed"


def test_an_unavailable_ami_is_refused():
    err = refusal("aws-p4d", account(ami={"state": "failed"}), image="ami-0123456789abcdef0")
    assert "is failed, not available" in str(err)


def test_an_available_ami_passes_and_names_its_root_device():
    fleet = build("aws-p4d", account(ami={"deprecationTime": "2099-01-01T00:00:00.000Z"}))
    (image,) = [c for c in fleet.checks if "image" in c.fact]
    assert image.status == "passed" and "root device /dev/sda1" in image.detail


# Route tables, read 2026-11-25:
# - VPC user guide, "How route priority works" (https://docs.aws.amazon.com/vpc/latest/userguide/
#   route-tables-priority.html): "we direct traffic using the most specific route that matches
#   the traffic ... longest prefix match";
# - VPC user guide, NAT gateways (vpc-nat-gateway.html): instances in private subnets "can
#   connect to the internet through a public NAT gateway, but ... can't receive unsolicited
#   inbound connections"; an instance without a public IPv4 reaches the internet only so;
# - an instance with an Elastic IP in a subnet whose 0.0.0.0/0 goes to a NAT gateway answers
#   inbound connections through the NAT (another source address), so they fail; only a more
#   specific route to the internet gateway for the client fixes it (serverfault 826317, answer
#   quoting the VPC route table docs; gpufleet's own network: test_fleet.py
#   test_workers_reach_the_internet_through_nat_and_the_head_answers_through_the_igw);
# - dstack (src/dstack/_internal/core/backends/aws/resources.py,
#   _is_private_subnet_with_internet_egress) takes NAT, transit gateway or peering as egress.
NAT = {"cidrBlock": "0.0.0.0/0", "natGatewayId": "nat-1"}
TGW = {"cidrBlock": "0.0.0.0/0", "transitGatewayId": "tgw-1"}
IGW = {"cidrBlock": "0.0.0.0/0", "gatewayId": "igw-1"}
LOCAL = {"cidrBlock": "10.0.0.0/16", "gatewayId": "local"}


def to(cidr: str, **target: str) -> dict[str, str]:
    return {"cidrBlock": cidr, **target}


SSH = "203.0.113.0/24"
SSH_IGW = to(SSH, gatewayId="igw-1")


# The aws-p4d stack: 2 nodes, private workers, ssh_cidrs [203.0.113.0/24].
@pytest.mark.parametrize(
    ("routes", "says"),
    [
        ([NAT, to("203.0.113.0/24", gatewayId="igw-1")], None),
        ([TGW, LOCAL, to("203.0.113.0/24", gatewayId="igw-1")], None),
        ([NAT, to("203.0.0.0/16", gatewayId="igw-1")], None),  # a wider route covers it
        ([NAT], "203.0.113.0/24 goes through nat-1 (route 0.0.0.0/0)"),
        ([NAT, SSH_IGW, to("203.0.113.128/25", natGatewayId="nat-1")],
         "203.0.113.128/25 (in 203.0.113.0/24) goes through nat-1"),
        ([NAT, to(SSH, transitGatewayId="tgw-1")], f"{SSH} goes through tgw-1"),
        ([IGW], "no 0.0.0.0/0 route to a NAT gateway"),  # workers have no address
        ([LOCAL], "no 0.0.0.0/0 route to a NAT gateway"),
        ([], "no 0.0.0.0/0 route to a NAT gateway"),
    ],
)  # fmt: skip
def test_a_given_subnet_with_private_workers_needs_nat_and_igw_routes_for_ssh(routes, says):
    acc = account(routes=routes)
    if says is None:
        fleet = build("aws-p4d", acc, vpc_id="vpc-0abc", subnet_id="subnet-0abc")
        (egress,) = [c for c in fleet.checks if "subnet" in c.fact]
        assert egress.status == "passed" and "rtb-1" in egress.detail
        assert "SSH replies to 203.0.113.0/24 through an internet gateway" in egress.detail
    else:
        err = refusal("aws-p4d", acc, vpc_id="vpc-0abc", subnet_id="subnet-0abc")
        assert "subnet-0abc" in str(err) and says in str(err)
        assert "set public_workers: true" in err.hint
        assert "drop vpc_id/subnet_id" in err.hint


@pytest.mark.parametrize(
    ("routes", "says"),
    [
        ([IGW], None),
        ([IGW, to("203.0.113.0/24", gatewayId="igw-1")], None),
        ([IGW, to("203.0.113.0/24", natGatewayId="nat-1")], "203.0.113.0/24 goes through nat-1"),
        ([NAT, to("203.0.113.0/24", gatewayId="igw-1")], "no 0.0.0.0/0 route to an internet"),
    ],
)
def test_every_node_public_needs_an_internet_gateway_for_everything(routes, says):
    acc = account(routes=routes)
    if says is None:
        fleet = build(
            "aws-p4d", acc, vpc_id="vpc-0abc", subnet_id="subnet-0abc", public_workers=True
        )
        (egress,) = [c for c in fleet.checks if "subnet" in c.fact]
        assert "internet gateway" in egress.detail
    else:
        err = refusal(
            "aws-p4d", acc, vpc_id="vpc-0abc", subnet_id="subnet-0abc", public_workers=True
        )
        assert says in str(err)


# EC2 API reference, CapacityReservation (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
# API_CapacityReservation.html, read 2026-11-25): InstanceType, AvailabilityZone,
# AvailableInstanceCount ("the remaining capacity ... the number of instances that can be
# launched"), State (active = "the capacity is available for use"; scheduled, expired, ...),
# ReservationType (default | capacity-block), PlacementGroupArn. ParallelCluster
# (aws/aws-parallelcluster cli/src/pcluster/validators/ec2_validators.py,
# CapacityReservationValidator and PlacementGroupCapacityReservationValidator, read 2026-11-25)
# refuses a reservation of another instance type or zone, and a placement group other than the
# one the reservation was made in.
BLOCK = "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation"
SOURCE_BLOCK = {
    "instanceType": "p5.48xlarge",
    "availabilityZone": "us-east-1d",
    "state": "active",
    "availableInstanceCount": 2,
    "instanceCount": 2,
    "reservationType": "capacity-block",
    "placementGroupArn": "",
    "startDate": "2026-11-25T11:30:00Z",
    "endDate": "2026-11-26T11:30:00Z",
}


def with_block(acc: FakeAccount, **fields: Any) -> FakeAccount:
    def block(args: dict[str, Any]) -> dict[str, Any]:
        if fields.get("missing"):  # the data source finds none of type capacity-block
            return {"id": args["id"]}
        return {**SOURCE_BLOCK, "id": args["id"], **fields}

    acc.invokes[BLOCK] = block
    return acc


BLOCK_SPEC = {"reservation": "cr-0123456789abcdef0", "capacity_block": True, "zone": "us-east-1d"}


def test_a_capacity_block_that_holds_the_fleet_passes():
    fleet = build("aws-p5", with_block(account()), **BLOCK_SPEC)
    (r,) = [c for c in fleet.checks if "reservation" in c.fact]
    assert r.status == "passed" and "active, 2 free" in r.detail


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"instanceType": "p4d.24xlarge"}, "reserves p4d.24xlarge, not p5.48xlarge"),
        ({"availabilityZone": "us-east-1a"}, "in us-east-1a, not zone us-east-1d"),
        ({"state": "scheduled"}, "is scheduled"),
        ({"availableInstanceCount": 1}, "1 of its 2 instances are free, not 2"),
        (
            {"placementGroupArn": "arn:aws:ec2:us-east-1:123456789012:placement-group/blk"},
            "placement group blk",
        ),
    ],
)
def test_a_capacity_block_that_does_not_match_is_refused(fields, says):
    err = refusal("aws-p5", with_block(account(), **fields), **BLOCK_SPEC)
    assert "cr-0123456789abcdef0" in str(err) and says in str(err), str(err)


def test_a_reservation_that_is_not_the_block_the_spec_says_is_refused():
    err = refusal("aws-p5", with_block(account(), missing=True), **BLOCK_SPEC)
    assert "is not a Capacity Block" in str(err) and "drop capacity_block" in err.hint


def test_a_capacity_block_named_without_capacity_block_is_refused():
    spec = {**BLOCK_SPEC, "capacity_block": False}
    err = refusal("aws-p5", with_block(account()), **spec)
    assert "capacity_block is false" in str(err) and "capacity_block: true" in err.hint


def test_an_on_demand_capacity_reservation_is_skipped_with_the_reason():
    spec = {**BLOCK_SPEC, "capacity_block": False}
    fleet = build("aws-p5", with_block(account(), missing=True), **spec)
    (r,) = [c for c in fleet.checks if "reservation" in c.fact]
    assert r.status == "skipped" and "no data source" in r.detail


# EC2 user guide, "Restrictions for Amazon EC2 launch templates" (https://docs.aws.amazon.com/
# AWSEC2/latest/UserGuide/launch-template-restrictions.html, read 2026-11-26): "Each AWS account
# can have up to a maximum of 5,000 launch templates per Region and up to 10,000 versions per
# launch template."
SOURCE_LAUNCH_TEMPLATES = 5000
# Resource Groups Tagging API GetResources, as pulumi_aws 7 invokes it
# (resourcegroupstaggingapi/get_resources.py): resourceTypeFilters "service:resourceType", the
# answer's resourceTagMappingLists one entry per resource (resourceArn, tags).
TAGGED = "aws:resourcegroupstaggingapi/getResources:getResources"
TEMPLATE_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
TEMPLATES_FACT = "the region's launch templates have room for one per node"


def with_templates(acc: FakeAccount, count: int, asked: list[dict[str, Any]]) -> FakeAccount:
    def tagged(args: dict[str, Any]) -> dict[str, Any]:
        asked.append(args)
        arns = [f"arn:aws:ec2:{args['region']}:123456789012:launch-template/lt-{i:017x}"
                for i in range(count)]  # fmt: skip
        return {"id": "r", "resourceTagMappingLists": [{"resourceArn": a} for a in arns]}

    acc.invokes[TAGGED] = tagged
    return acc


def test_launch_templates_past_the_regions_maximum_are_refused_naming_count_and_fix():
    """One template per node: at 512 nodes a region with 4,489 others is full, and EC2 would
    refuse CreateLaunchTemplate after the VPC exists. The fleet's count is what its plan
    registers."""
    asked: list[dict[str, Any]] = []
    fleet, plan = build_plan("aws-p4d", with_templates(account(), 0, asked))
    made = len(plan.of_type(TEMPLATE_TYPE))
    (passed,) = [c for c in fleet.checks if c.fact == TEMPLATES_FACT]
    assert passed.status == "passed" and passed.detail.endswith(f"the cluster makes {made}")
    assert asked[0]["resourceTypeFilters"] == ["ec2:launch-template"]
    assert asked[0]["region"] == "us-east-1"

    used = SOURCE_LAUNCH_TEMPLATES - made + 1
    err = refusal("aws-p4d", with_templates(account(), used, []))
    assert err.fact == TEMPLATES_FACT and f"at least {used} launch templates" in err.problem
    assert f"makes {made} more" in err.problem
    assert f"{SOURCE_LAUNCH_TEMPLATES} per Region" in err.problem
    assert "aws ec2 delete-launch-template" in err.fix and "another region" in err.fix
    assert f"room for {made - 1}" in err.fix


def test_launch_templates_up_to_the_maximum_pass():
    fleet = build("aws-p4d", with_templates(account(), SOURCE_LAUNCH_TEMPLATES - 2, []))
    (check,) = [c for c in fleet.checks if c.fact == TEMPLATES_FACT]
    assert check.status == "passed"
    assert check.detail.startswith(f"at least {SOURCE_LAUNCH_TEMPLATES - 2} of ")


def test_launch_templates_that_cannot_be_listed_are_skipped_with_the_reason():
    acc = account()

    def denied(args: dict[str, Any]) -> Any:
        # a failed invoke, as pulumi's mocks return one: (outputs, [(property, reason)])
        return {}, [("resourceTypeFilters", "AccessDeniedException: tag:GetResources")]

    acc.invokes[TAGGED] = denied
    fleet = build("aws-p4d", acc)
    (check,) = [c for c in fleet.checks if c.fact == TEMPLATES_FACT]
    assert check.status == "skipped" and "tag:GetResources" in check.detail
