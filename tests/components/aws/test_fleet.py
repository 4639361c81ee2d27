"""AWS stacks under Pulumi mocks: EFA layout, placement, SG, IMDSv2, disks, TTL, tags, contract."""

from __future__ import annotations

import base64
import gzip
import ipaddress
import os
import subprocess

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.aws.fleet import (
    DLAMI_SSM_PARAMETER,
    USER_DATA_LIMIT,
    encode_user_data,
    image_id,
)
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import GpufleetError, SpecError
from tests.components.stackplans import assert_contract, plan, tagged_with_cluster

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"
UNTAGGABLE = {
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "tls:index/privateKey:PrivateKey",
    "gpufleet:index:AwsGpuFleet",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:scheduler/schedule:Schedule",  # EventBridge Scheduler schedules take no tags
}
ENI = "aws:ec2/networkInterface:NetworkInterface"


def nic_view(p, nic: dict) -> dict:
    """A template NIC with what an interface made by the stack (networkInterfaceId) has."""
    if "networkInterfaceId" not in nic:
        return nic
    (eni,) = [r for r in p.of_type(ENI) if f"{r.name}-id" == nic["networkInterfaceId"]]
    return {**nic, **eni.inputs}


@pytest.fixture(scope="module")
def p4d():
    return plan("aws-p4d")


def test_one_cluster_placement_group_used_by_every_node(p4d):
    (pg,) = p4d.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert pg.inputs["strategy"] == "cluster"
    for lt in p4d.of_type(LT):
        assert lt.inputs["placement"]["groupName"] == pg.name


@pytest.mark.parametrize(("stack", "efa"), [("aws-p4d", 4), ("aws-p5", 32)])
def test_launch_template_has_one_efa_per_network_card_and_one_address(stack, efa):
    """EC2 user guide, efa-acc-inst-types.md: on types with several network cards, every card
    after the primary gets an EFA-only interface at device index 0; an EFA-only interface has
    no IP address (create-efa.md: "You can't assign an IP address to an EFA-only network
    interface"). With `efa` on all 32 cards a p5 takes 32 addresses and 32 same-subnet IP
    interfaces; ParallelCluster 3.15 checks its compute nodes have exactly one IP interface."""
    p = plan(stack)
    lts = p.of_type(LT)
    assert len(lts) == 2
    for lt in lts:
        nics = [nic_view(p, n) for n in lt.inputs["networkInterfaces"]]
        assert [n["interfaceType"] for n in nics] == ["efa"] + ["efa-only"] * (efa - 1)
        assert [n["networkCardIndex"] for n in nics] == list(range(efa))
        assert all(n["deviceIndex"] == 0 for n in nics)


def test_subnet_holds_the_largest_p5_cluster_the_spec_allows():
    """EFA traffic cannot leave its subnet (EC2 user guide, efa.md limitations), EC2 keeps 5
    addresses of every subnet (VPC user guide, subnet sizing), and every non-EFA-only interface
    takes one address: the one subnet must hold MAX_NODES nodes of the widest type."""
    from gpufleet.components.clusterspec import MAX_NODES

    p = plan("aws-p5")
    nics = p.of_type(LT)[0].inputs["networkInterfaces"]
    addresses = sum(1 for n in nics if n.get("interfaceType") != "efa-only")
    subnet = ipaddress.ip_network(named(p, SUBNET, "aws-p5-subnet").inputs["cidrBlock"])
    assert subnet.num_addresses - 5 >= MAX_NODES["aws"] * addresses
    assert subnet.subnet_of(ipaddress.ip_network(p.one("aws:ec2/vpc:Vpc").inputs["cidrBlock"]))
    nat = ipaddress.ip_network(named(p, SUBNET, "aws-p5-nat-subnet").inputs["cidrBlock"])
    assert not subnet.overlaps(nat)


def named(p, typ: str, name: str):
    (r,) = [r for r in p.of_type(typ) if r.name == name]
    return r


SG = "aws:ec2/securityGroup:SecurityGroup"
EIP = "aws:ec2/eip:Eip"


def test_only_the_head_gets_an_elastic_ip_so_six_p4d_nodes_fit_the_eip_quota():
    """AWS gives an instance launched with several network interfaces no public IPv4 (EC2 API
    reference, InstanceNetworkInterfaceSpecification.AssociatePublicIpAddress: "can only be
    assigned to a network interface for eth0 ... You cannot specify more than one network
    interface in the request", docs.aws.amazon.com/AWSEC2/latest/APIReference/
    API_InstanceNetworkInterfaceSpecification.html), and a Region allows 5 Elastic IPs by
    default ("Elastic IP addresses per Region: 5", Amazon VPC quotas, https://docs.aws.amazon.com/
    vpc/latest/userguide/amazon-vpc-limits.html): one EIP per p4d node made a 6-node cluster
    fail with AddressLimitExceeded. Only the head (and the NAT gateway) take one, whatever the
    size."""
    p = plan("aws-p4d", nodes=6)
    eips = p.of_type(EIP)
    assert sorted(e.name for e in eips) == ["aws-p4d-nat-eip", "aws-p4d-node-0-eip"]
    nodes = p.outputs["nodes"]
    assert nodes[0]["public_ip"].startswith("203.0.113.")
    assert [n["public_ip"] for n in nodes[1:]] == [None] * 5
    assert_contract(p, 6)


def test_workers_take_ssh_only_from_inside_the_fleet(p4d):
    """A security group allows only what its rules list; instances in one group reach each
    other only through a rule naming the group itself (security group rules, "source ...
    the ID of a security group", https://docs.aws.amazon.com/vpc/latest/userguide/
    security-group-rules.html). The SSH-from-CIDRs group is on the head's primary NIC alone;
    a worker's NICs carry only the fleet group, whose self rule lets the head in."""
    ssh = named(p4d, SG, "aws-p4d-ssh")
    fleet = named(p4d, SG, "aws-p4d-sg")
    assert [r["fromPort"] for r in ssh.inputs["ingress"]] == [22]
    assert all(r.get("self") for r in fleet.inputs["ingress"])
    head, worker = sorted(p4d.of_type(LT), key=lambda lt: lt.name)
    fleet_id, ssh_id = f"{fleet.name}-id", f"{ssh.name}-id"
    assert nic_view(p4d, head.inputs["networkInterfaces"][0])["securityGroups"] == [
        fleet_id,
        ssh_id,
    ]
    assert all(n["securityGroups"] == [fleet_id] for n in head.inputs["networkInterfaces"][1:])
    assert all(n["securityGroups"] == [fleet_id] for n in worker.inputs["networkInterfaces"])


def test_workers_reach_the_internet_through_nat_and_the_head_answers_through_the_igw():
    """An instance without a public IPv4 reaches the internet only through a NAT device, and
    a NAT gateway must sit in a public subnet (NAT gateways, https://docs.aws.amazon.com/vpc/
    latest/userguide/vpc-nat-gateway.html); a route table picks the most specific route
    (route priority, https://docs.aws.amazon.com/vpc/latest/userguide/
    how-route-tables-work.html). EFA keeps every node in one subnet, so that subnet routes
    0.0.0.0/0 to the NAT gateway and the SSH clients' CIDRs to the internet gateway, which
    the head's Elastic IP answers through."""
    p = plan("aws-p4d", nodes=6)
    (fleet_routes,) = [
        r for r in p.of_type("aws:ec2/routeTable:RouteTable") if r.name == "aws-p4d-routes"
    ]
    routes = {r["cidrBlock"]: r for r in fleet_routes.inputs["routes"]}
    assert routes["0.0.0.0/0"]["natGatewayId"] == "aws-p4d-nat-id"
    assert routes["203.0.113.0/24"]["gatewayId"] == "aws-p4d-igw-id"
    nat = p.one("aws:ec2/natGateway:NatGateway")
    assert nat.inputs["subnetId"] == "aws-p4d-nat-subnet-id"
    nat_rt = named(p, "aws:ec2/routeTable:RouteTable", "aws-p4d-nat-routes")
    assert nat_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "gatewayId": "aws-p4d-igw-id"}]
    assert named(p, SUBNET, "aws-p4d-nat-subnet").inputs["cidrBlock"] == "10.42.16.0/28"


def test_public_workers_gives_every_node_an_eip_and_needs_no_nat():
    """With public_workers every node must be reachable and reach out by itself. A multi-NIC
    launch gets no public IPv4, which goes to eth0 only (EC2 API reference,
    API_InstanceNetworkInterfaceSpecification.html, AssociatePublicIpAddress), so each node's
    Elastic IP goes on its primary interface; an instance with a public address needs no NAT
    device, which is for instances without one (NAT gateways, https://docs.aws.amazon.com/vpc/
    latest/userguide/vpc-nat-gateway.html), so the subnet routes 0.0.0.0/0 to the internet
    gateway; and a security group admits only what its rules list (security-group-rules.html),
    so the SSH-from-CIDRs group is on every node's primary interface."""
    p = plan("aws-p4d", public_workers=True)
    nodes = p.outputs["nodes"]
    eips = {e.name: e for e in p.of_type(EIP)}
    assert sorted(eips) == [f"aws-p4d-node-{i}-eip" for i in range(len(nodes))]
    for i, n in enumerate(nodes):  # each on the interface the stack made for card 0 / device 0
        assert eips[f"aws-p4d-node-{i}-eip"].inputs["networkInterface"] == (
            f"aws-p4d-node-{i}-eni-id"
        )
        assert n["public_ip"]
    assert not p.of_type("aws:ec2/natGateway:NatGateway")
    routes = named(p, "aws:ec2/routeTable:RouteTable", "aws-p4d-routes").inputs["routes"]
    assert routes == [{"cidrBlock": "0.0.0.0/0", "gatewayId": "aws-p4d-igw-id"}]
    for lt in p.of_type(LT):
        assert "aws-p4d-ssh-id" in nic_view(p, lt.inputs["networkInterfaces"][0])["securityGroups"]


def test_security_group_self_ingress_and_egress_all_protocols(p4d):
    """EFA's OS bypass works only if the EFA is in a security group that allows all inbound AND
    all outbound traffic to and from the group itself (EC2 user guide, create-efa.html
    "Considerations", pointing to efa-start.html#efa-start-security "Step 1: Prepare an
    EFA-enabled security group"; AWS PCS's EFA group adds both an ingress and an egress rule,
    protocol -1, source the group: pcs/latest/userguide/working-with_networking_efa_create-sg.html).
    The ingress self rule alone is not enough."""
    sg = named(p4d, SG, "aws-p4d-sg")
    self_in = [r for r in sg.inputs["ingress"] if r.get("self")]
    self_out = [r for r in sg.inputs["egress"] if r.get("self")]
    assert self_in and self_in[0]["protocol"] == "-1"
    assert self_out and self_out[0]["protocol"] == "-1"


def test_ssh_is_only_open_to_the_stack_cidrs(p4d):
    for sg in p4d.of_type(SG):
        for rule in sg.inputs["ingress"]:
            if rule.get("self"):
                continue
            assert rule["fromPort"] <= 22 <= rule["toPort"]
            assert rule["cidrBlocks"] == ["203.0.113.0/24"]
            assert all(ipaddress.ip_network(c).prefixlen > 0 for c in rule["cidrBlocks"])


def test_imdsv2_encrypted_gp3_root_and_shutdown_terminates(p4d):
    """An EBS-backed instance shut down from its OS (shutdown, poweroff; not halt) stops by
    default and terminates only when its InstanceInitiatedShutdownBehavior is terminate; the
    attribute applies to OS-initiated shutdowns only, not to StopInstances (EC2 user guide,
    "Change instance initiated shutdown behavior", docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    Using_ChangingInstanceInitiatedShutdownBehavior.html). The node's expiry timer powers off,
    so every template must say terminate or an expired node stays, stopped, with its volume."""
    for lt in p4d.of_type(LT):
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
        (root,) = lt.inputs["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
        assert root["ebs"]["volumeSize"] == 200
        assert lt.inputs["instanceInitiatedShutdownBehavior"] == "terminate"
        assert "instanceMarketOptions" not in lt.inputs


def cloud_init_text(lt) -> str:
    return gzip.decompress(base64.b64decode(lt.inputs["userData"])).decode()


def test_dlami_resolved_by_ec2_at_launch_so_a_new_dlami_does_not_replace_nodes(p4d):
    for lt in p4d.of_type(LT):
        assert lt.inputs["imageId"] == f"resolve:ssm:{DLAMI_SSM_PARAMETER}"


def test_user_data_is_gzipped_base64_cloud_init_without_a_host_key(p4d):
    for lt in p4d.of_type(LT):
        i = lt.name.split("-")[-2]  # aws-p4d-node-<i>-lt
        packed = base64.b64decode(lt.inputs["userData"])
        assert len(packed) < USER_DATA_LIMIT * 3 // 4  # room for the recipe to grow
        text = cloud_init_text(lt)
        assert text.startswith("#cloud-config")
        assert f"node-{i}" in text and "PRIVATE KEY" not in text  # the node makes its own


# The longest image reference a test expects users to name: a deep ECR repository and a long tag
LONG_ECR_IMAGE = (
    "123456789012.dkr.ecr.ap-southeast-2.amazonaws.com/research-team/foundation-models/"
    "pretraining/llm-trainer-with-a-long-name:2026.11.25-cuda12.8-torch2.9-nccl2.27-efa1.43-"
    "build-0123456789abcdef"
)


def test_user_data_with_a_container_image_keeps_2_kb_of_the_limit_free():
    """p5 (EFA) is the largest recipe; a registry image adds the boot pull (its script, unit),
    and every cloud node has the preemption watcher (its AWS part, ~1.5 KB gzipped: 12.2 KB
    before it, 13.7 KB with it): the whole still leaves 2 KB of EC2's 16 KB for the recipe to
    grow (it was a quarter before the watcher)."""
    from gpufleet.components.clusterspec import ContainerSpec

    # EC2 user guide, "Work with instance user data" (read 2026-11-25): "User data is limited to
    # 16 KB, in raw form, before it is base64-encoded" -- written here, not our constant.
    limit = 16 * 1024
    p = plan("aws-p5", container=ContainerSpec(image=LONG_ECR_IMAGE))
    sizes = [len(base64.b64decode(lt.inputs["userData"])) for lt in p.of_type(LT)]
    print(f"aws-p5 user data with {LONG_ECR_IMAGE}: {sizes} bytes of {limit}")
    assert sizes and all("gpufleet-pull.service" in cloud_init_text(lt) for lt in p.of_type(LT))
    assert max(sizes) < limit - 2048


SYSTEM_PYTHON = "/usr/bin/python3"  # the interpreter cloud-init itself runs under


def cloud_init_importable() -> bool:
    if not os.path.exists(SYSTEM_PYTHON):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import cloudinit.user_data"], check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not cloud_init_importable(), reason="cloud-init is not installed")
def test_cloud_init_itself_inflates_the_user_data(p4d):
    lt = p4d.of_type(LT)[0]
    script = (
        "import base64, sys\n"
        "from cloudinit.user_data import convert_string\n"
        "msg = convert_string(base64.b64decode(sys.stdin.read()))\n"
        "sys.stdout.write(msg.get_payload(decode=True).decode())\n"
    )
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", script],
        input=lt.inputs["userData"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == cloud_init_text(lt)


def test_user_data_over_ec2_limit_even_gzipped_is_refused():
    recipe_like = "\n".join(f"- step {i}: install and check" for i in range(2000))
    assert len(recipe_like) > USER_DATA_LIMIT  # over the limit as plain text ...
    assert len(base64.b64decode(encode_user_data(recipe_like))) < USER_DATA_LIMIT  # ... not gzipped
    with pytest.raises(GpufleetError, match="16384"):
        encode_user_data(base64.b64encode(os.urandom(USER_DATA_LIMIT)).decode())


def test_image_is_an_ami_or_an_ssm_parameter():
    assert image_id(None) == f"resolve:ssm:{DLAMI_SSM_PARAMETER}"
    assert image_id("ami-0123456789abcdef0") == "ami-0123456789abcdef0"
    assert image_id("/my/images/latest") == "resolve:ssm:/my/images/latest"
    with pytest.raises(SpecError) as e:
        image_id("ubuntu-22.04")
    assert e.value.field == "image"


def test_instances_leave_subnet_and_groups_to_the_template_nics(p4d):
    # EC2 refuses instance-level subnet or security groups next to template NICs.
    instances = p4d.of_type(INSTANCE)
    assert sorted(i.name for i in instances) == ["aws-p4d-node-0", "aws-p4d-node-1"]
    for inst in instances:
        assert inst.inputs["launchTemplate"]["version"] == "1"
        for key in ("subnetId", "vpcSecurityGroupIds", "securityGroups", "ami", "userData"):
            assert key not in inst.inputs, key


def test_subnet_goes_in_a_zone_that_offers_the_type(p4d):
    # mocks offer every type in zones d, b, f: the first by name wins
    assert named(p4d, SUBNET, "aws-p4d-subnet").inputs["availabilityZone"] == "us-east-1b"
    pinned = plan("aws-p4d", zone="us-east-1f")
    assert named(pinned, SUBNET, "aws-p4d-subnet").inputs["availabilityZone"] == "us-east-1f"
    # the NAT gateway's subnet follows the fleet's zone (no cross-zone NAT traffic)
    assert named(pinned, SUBNET, "aws-p4d-nat-subnet").inputs["availabilityZone"] == "us-east-1f"


def test_first_zone_refuses_a_type_offered_nowhere():
    from gpufleet.components.aws.offers import first_zone

    assert first_zone(["us-west-2c", "us-west-2a"], "p5.48xlarge", "us-west-2") == "us-west-2a"
    with pytest.raises(SpecError) as e:
        first_zone([], "p5.48xlarge", "eu-north-1")
    assert e.value.field == "instance_type"


def spec_error(fn) -> SpecError | None:
    """The SpecError behind whatever the Pulumi runtime wraps it in."""
    with pytest.raises(Exception) as e:
        fn()
    err = e.value
    while err is not None and not isinstance(err, SpecError):
        err = err.__cause__ or err.__context__
    return err


def test_ssh_from_ipv6_cidrs_goes_in_the_ipv6_field():
    p = plan("aws-p4d", ssh_cidrs=["203.0.113.7/32", "2001:db8::/64"])
    (ssh,) = named(p, SG, "aws-p4d-ssh").inputs["ingress"]
    assert ssh["cidrBlocks"] == ["203.0.113.7/32"]
    assert ssh["ipv6CidrBlocks"] == ["2001:db8::/64"]


def test_type_without_efa_gets_one_plain_nic_with_a_public_ip():
    p = plan("aws-g5", instance_type="g6.24xlarge")  # no EFA in the catalog
    for lt in p.of_type(LT):
        (nic,) = lt.inputs["networkInterfaces"]
        assert "interfaceType" not in nic  # a plain ENA
        assert nic["deviceIndex"] == 0
    public = {
        lt.name: lt.inputs["networkInterfaces"][0]["associatePublicIpAddress"]
        for lt in p.of_type(LT)
    }
    assert public == {"aws-g5-node-0-lt": "true", "aws-g5-node-1-lt": "false"}
    assert [e.name for e in p.of_type(EIP)] == ["aws-g5-nat-eip"]  # only NAT's
    assert_contract(p, 2)


def test_every_taggable_resource_carries_cluster_and_expiry(p4d):
    for r in p4d.resources:
        if r.type in UNTAGGABLE:
            continue
        if r.type == LT:
            # No user tags and no expiry on a launch template: a change of its own tags makes
            # latest_version unknown in a preview, which the instance's diff takes for a new
            # version (test_tags_in_place.py).
            assert set(r.inputs["tags"]) == {"gpufleet-cluster", "managed-by", "Name"}
            continue
        assert tagged_with_cluster(r.inputs.get("tags"), "aws-p4d"), r.type
    for lt in p4d.of_type(LT):
        kinds = {t["resourceType"] for t in lt.inputs["tagSpecifications"]}
        assert kinds == {"instance", "volume", "network-interface"}
        # the expiry is on the instance alone (its own tags): in the template, a TTL change
        # would make a new version and so a new instance
        for t in lt.inputs["tagSpecifications"]:
            assert t["tags"]["gpufleet-cluster"] == "aws-p4d"
            assert "gpufleet-expires" not in t["tags"]


def test_single_nic_worker_asks_for_no_public_ip_rather_than_the_subnet_default():
    """A launch template NIC without AssociatePublicIpAddress takes the subnet's
    MapPublicIpOnLaunch attribute (LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    EC2 API reference), which a user's own subnet may set: a worker says "false"."""
    p = plan("aws-g5", vpc_id="vpc-0abc", subnet_id="subnet-0abc")
    head, worker = sorted(p.of_type(LT), key=lambda lt: lt.name)
    assert head.inputs["networkInterfaces"][0]["associatePublicIpAddress"] == "true"
    assert worker.inputs["networkInterfaces"][0]["associatePublicIpAddress"] == "false"
    assert p.outputs["nodes"][1]["public_ip"] is None


def test_single_nic_type_has_public_ip_and_spot_when_asked():
    p = plan("aws-g5")  # g5.12xlarge: one EFA; the stack asks for spot
    for lt in p.of_type(LT):
        (nic,) = lt.inputs["networkInterfaces"]
        assert nic["interfaceType"] == "efa"
        assert lt.inputs["instanceMarketOptions"]["marketType"] == "spot"
    assert [e.name for e in p.of_type(EIP)] == ["aws-g5-nat-eip"]  # only NAT's


def test_existing_vpc_and_subnet_are_used_not_created():
    p = plan("aws-p4d", vpc_id="vpc-0abc", subnet_id="subnet-0abc")
    assert not p.of_type("aws:ec2/vpc:Vpc") and not p.of_type("aws:ec2/subnet:Subnet")
    assert {sg.inputs["vpcId"] for sg in p.of_type(SG)} == {"vpc-0abc"}
    assert not p.of_type("aws:ec2/natGateway:NatGateway")  # the user's network, the user's NAT
    for lt in p.of_type(LT):
        nics = [nic_view(p, n) for n in lt.inputs["networkInterfaces"]]
        assert {n["subnetId"] for n in nics} == {"subnet-0abc"}


def test_contract_outputs(p4d):
    assert_contract(p4d, 2)
    assert p4d.outputs["fabric"] == "efa" and p4d.outputs["ssh_user"] == "ubuntu"


def test_a_stack_without_ssh_cidrs_is_refused_before_anything_is_declared():
    err = spec_error(lambda: plan("aws-p4d", ssh_cidrs=[]))
    assert isinstance(err, SpecError) and err.field == "ssh_cidrs"


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "0.0.0.0/1", "64.0.0.0/3"])
def test_ssh_cidrs_that_would_take_the_internet_from_the_workers_nat_are_refused(cidr):
    """Workers have no public IPv4 and reach the internet only through the NAT gateway; VPC
    route tables send traffic by the most specific route (VPC user guide, route-tables.md,
    "Route priority"), and the fleet subnet routes the SSH clients' CIDRs to the internet
    gateway so the head answers from its Elastic IP. A very wide SSH CIDR would send that much
    of the internet to an IGW that workers cannot use: no apt, no EFA installer on workers.
    Refused before anything is declared, in the stack file and from flags alike."""
    err = spec_error(lambda: plan("aws-p4d", ssh_cidrs=[cidr]))
    assert isinstance(err, SpecError) and err.field == "ssh_cidrs"
    assert "public_workers" in err.fix
    config = stackconfig.stack_config("aws-p4d")
    data = stackconfig.spec_from_config(config, stack="aws-p4d").model_dump()
    with pytest.raises(SpecError):
        ClusterSpec.from_input({**data, "ssh_cidrs": [cidr]})
    ok = ClusterSpec.from_input({**data, "ssh_cidrs": [cidr], "public_workers": True})
    assert plan("aws-p4d", **{"ssh_cidrs": ok.ssh_cidrs, "public_workers": True}).of_type(LT)


def test_reservation_is_targeted_and_no_placement_group_of_ours_competes_with_it():
    """EC2 launches into a capacity reservation only when type, platform, zone and placement
    group match (EC2 user guide, capacity-reservations-launch.md), and AWS recommends creating
    the reservation inside the cluster placement group (placement-groups limitations). So
    with a reservation the nodes target it and gpufleet adds no placement group of its own."""
    p = plan("aws-p5", reservation="cr-0123456789abcdef0", zone="us-east-1d")
    assert not p.of_type("aws:ec2/placementGroup:PlacementGroup")
    for lt in p.of_type(LT):
        target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target["capacityReservationId"] == "cr-0123456789abcdef0"
        assert "placement" not in lt.inputs
    assert named(p, SUBNET, "aws-p5-subnet").inputs["availabilityZone"] == "us-east-1d"


def test_a_reservation_made_in_a_cluster_placement_group_is_launched_into_that_group():
    """EC2 launches into a reservation only when the instance's placement group matches the
    one the reservation was made in (EC2 user guide, capacity-reservations-launch: "For
    Placement group, select the cluster placement group in which to launch the instance";
    "Capacity Reservations for cluster placement groups"). gpufleet cannot create that
    group (it must exist before the reservation), so the spec names it."""
    p = plan("aws-p5", reservation="cr-0123456789abcdef0", zone="us-east-1d", placement_group="g1")
    assert not p.of_type("aws:ec2/placementGroup:PlacementGroup")
    for lt in p.of_type(LT):
        assert lt.inputs["placement"] == {"groupName": "g1"}
        assert "instanceMarketOptions" not in lt.inputs  # an ODCR is on-demand capacity


def test_a_capacity_block_is_launched_with_the_capacity_block_market_type():
    """A Capacity Block for ML is used by launching with purchasing option "Capacity Blocks"
    and its reservation id (EC2 user guide, capacity-blocks-launch.html), i.e. the launch
    template's InstanceMarketOptions.MarketType `capacity-block` (EC2 API reference,
    LaunchTemplateInstanceMarketOptions: valid values spot | capacity-block); without it the
    launch is an on-demand one that does not use the block."""
    p = plan("aws-p5", reservation="cr-0123456789abcdef0", zone="us-east-1d", capacity_block=True)
    for lt in p.of_type(LT):
        assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
        target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target["capacityReservationId"] == "cr-0123456789abcdef0"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"placement_group": "g1"}, "placement_group"),  # no reservation to qualify
        ({"capacity_block": True}, "capacity_block"),
        (
            {"reservation": "cr-0123456789abcdef0", "placement_group": "has space"},
            "placement_group",
        ),
        (
            {"cloud": "gcp", "instance_type": "a2-highgpu-8g", "capacity_block": True},
            "capacity_block",
        ),
    ],
)
def test_reservation_options_are_refused_where_they_mean_nothing(fields, field):
    data = {"name": "c", "cloud": "aws", "instance_type": "p5.48xlarge", "zone": "us-east-1a"}
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input({**data, **fields})
    assert e.value.field == field


@pytest.mark.parametrize("stack", ["aws-p5", "aws-p4d", "aws-g5"])
def test_every_node_is_deleted_before_its_replacement_is_created(stack):
    """Pulumi creates a replacement before deleting the old resource unless deleteBeforeReplace
    is set (pulumi.com/docs/iac/concepts/resources/options/deletebeforereplace/, read
    2026-11-25); a GPU node created beside the one it replaces needs the family's vCPU quota
    (Running On-Demand P instances, in vCPUs) twice over."""
    p = plan(stack)
    nodes = p.of_type("aws:ec2/instance:Instance")
    assert nodes and all(n.delete_before_replace for n in nodes), [
        n.name for n in nodes if not n.delete_before_replace
    ]
