"""AWS stacks under Pulumi mocks: EFA layout, placement, SG, IMDSv2, disks, TTL, tags, contract."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from tests.components.stackplans import assert_contract, plan, tagged_with_cluster

LT = "aws:ec2/launchTemplate:LaunchTemplate"
UNTAGGABLE = {
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "tls:index/privateKey:PrivateKey",
    "gpufleet:aws:GpuFleet",
}


@pytest.fixture(scope="module")
def p4d():
    return plan("aws-p4d")


def test_one_cluster_placement_group_used_by_every_node(p4d):
    (pg,) = p4d.of_type("aws:ec2/placementGroup:PlacementGroup")
    assert pg.inputs["strategy"] == "cluster"
    for lt in p4d.of_type(LT):
        assert lt.inputs["placement"]["groupName"] == pg.name


@pytest.mark.parametrize(("stack", "efa"), [("aws-p4d", 4), ("aws-p5", 32)])
def test_launch_template_has_one_efa_per_network_card(stack, efa):
    lts = plan(stack).of_type(LT)
    assert len(lts) == 2
    for lt in lts:
        nics = lt.inputs["networkInterfaces"]
        assert [n["interfaceType"] for n in nics] == ["efa"] * efa
        assert [n["networkCardIndex"] for n in nics] == list(range(efa))
        assert nics[0]["deviceIndex"] == 0 and all(n["deviceIndex"] == 1 for n in nics[1:])


def test_multi_nic_nodes_get_an_elastic_ip(p4d):
    eips = p4d.of_type("aws:ec2/eip:Eip")
    assert len(eips) == 2
    assert p4d.outputs["nodes"][0]["public_ip"].startswith("203.0.113.")


def test_security_group_self_ingress_and_egress_all_protocols(p4d):
    sg = p4d.one("aws:ec2/securityGroup:SecurityGroup")
    self_in = [r for r in sg.inputs["ingress"] if r.get("self")]
    self_out = [r for r in sg.inputs["egress"] if r.get("self")]
    assert self_in and self_in[0]["protocol"] == "-1"
    assert self_out and self_out[0]["protocol"] == "-1"


def test_ssh_is_only_open_to_the_stack_cidrs(p4d):
    sg = p4d.one("aws:ec2/securityGroup:SecurityGroup")
    for rule in sg.inputs["ingress"]:
        if rule.get("self"):
            continue
        assert rule["fromPort"] <= 22 <= rule["toPort"]
        assert rule["cidrBlocks"] == ["203.0.113.0/24"]
        assert all(ipaddress.ip_network(c).prefixlen > 0 for c in rule["cidrBlocks"])


def test_imdsv2_encrypted_gp3_root_and_shutdown_terminates(p4d):
    for lt in p4d.of_type(LT):
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
        (root,) = lt.inputs["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
        assert root["ebs"]["volumeSize"] == 200
        assert lt.inputs["instanceInitiatedShutdownBehavior"] == "terminate"
        assert "instanceMarketOptions" not in lt.inputs


def test_dlami_from_ssm_and_user_data_is_base64_cloud_init(p4d):
    from components.aws.mocks import FAKE_AMI

    for lt in p4d.of_type(LT):
        i = lt.name.split("-")[-2]  # aws-p4d-node-<i>-lt
        assert lt.inputs["imageId"] == FAKE_AMI
        text = base64.b64decode(lt.inputs["userData"]).decode()
        assert text.startswith("#cloud-config")
        assert f"MOCK-aws-p4d-node-{i}-host-key" in text  # this node's own host key


def test_every_taggable_resource_carries_cluster_and_expiry(p4d):
    for r in p4d.resources:
        if r.type in UNTAGGABLE:
            continue
        assert tagged_with_cluster(r.inputs.get("tags"), "aws-p4d"), r.type
    for lt in p4d.of_type(LT):
        kinds = {t["resourceType"] for t in lt.inputs["tagSpecifications"]}
        assert kinds == {"instance", "volume", "network-interface"}
        assert all(
            tagged_with_cluster(t["tags"], "aws-p4d") for t in lt.inputs["tagSpecifications"]
        )


def test_single_nic_type_has_public_ip_and_spot_when_asked():
    p = plan("aws-g5")  # g5.12xlarge: one EFA; the stack asks for spot
    for lt in p.of_type(LT):
        (nic,) = lt.inputs["networkInterfaces"]
        assert nic["associatePublicIpAddress"] == "true" and nic["interfaceType"] == "efa"
        assert lt.inputs["instanceMarketOptions"]["marketType"] == "spot"
    assert not p.of_type("aws:ec2/eip:Eip")


def test_existing_vpc_and_subnet_are_used_not_created():
    p = plan("aws-p4d", vpc_id="vpc-0abc", subnet_id="subnet-0abc")
    assert not p.of_type("aws:ec2/vpc:Vpc") and not p.of_type("aws:ec2/subnet:Subnet")
    assert p.one("aws:ec2/securityGroup:SecurityGroup").inputs["vpcId"] == "vpc-0abc"
    for lt in p.of_type(LT):
        assert {n["subnetId"] for n in lt.inputs["networkInterfaces"]} == {"subnet-0abc"}


def test_contract_outputs(p4d):
    assert_contract(p4d, 2)
    assert p4d.outputs["fabric"] == "efa" and p4d.outputs["ssh_user"] == "ubuntu"


def test_a_stack_without_ssh_cidrs_is_refused_before_anything_is_declared():
    from components.errors import SpecError

    with pytest.raises(Exception) as e:
        plan("aws-p4d", ssh_cidrs=[])
    err = e.value
    while err is not None and not isinstance(err, SpecError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, SpecError) and err.field == "ssh_cidrs"
