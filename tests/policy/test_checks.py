"""The policy pack's checks over every ready stack's plan (all pass) and over bad resources."""

from __future__ import annotations

from pathlib import Path

import pytest

from policy import gpufleet_policy as checks
from tests.components.stackplans import plan

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(
    p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
)
PLANNED_EXPIRY = 1_900_000_000  # stackplans builds every stack with this expiry
NOW = PLANNED_EXPIRY - 4 * 3600  # the ready stacks' 4 h TTL


@pytest.mark.parametrize("stack", STACKS)
def test_every_ready_stack_passes_the_pack(stack):
    p = plan(stack)
    assert checks.check_resources(p.resources, now=NOW) == []
    # and the expiry check did look at the stack's GPU machines: a tighter limit catches them
    gpus = [r for r in p.resources if checks.gpu_instance(r.type, r.inputs)]
    assert gpus, f"{stack}: no GPU instance recognised"
    tight = checks.check_resources(p.resources, now=NOW, max_hours=1)
    assert {name for name, _ in tight} == {r.name for r in gpus}


def test_ready_stacks_cover_every_cloud():
    assert {s.split("-")[0] for s in STACKS} == {"aws", "gcp", "azure"}


BAD = {
    "aws instance without the tag": (
        "aws:ec2/instance:Instance",
        {"instanceType": "p4d.24xlarge", "tags": {"team": "ml"}},
        "gpu-instances-expire",
        "GPU instance (p4d.24xlarge) has no `gpufleet-expires` tag",
    ),
    "aws instance 30 days out": (
        "aws:ec2/instance:Instance",
        {"instanceType": "g5.xlarge", "tags": {"gpufleet-expires": str(NOW + 30 * 86400)}},
        "gpu-instances-expire",
        "GPU instance (g5.xlarge) expires 720 h from now (tags.gpufleet-expires=",
    ),
    "gcp instance without the label": (
        "gcp:compute/instance:Instance",
        {"machineType": "a3-highgpu-8g", "labels": {"team": "ml"}},
        "gpu-instances-expire",
        "GPU instance (a3-highgpu-8g) has no `gpufleet-expires` label",
    ),
    "gcp n1 with a T4 accelerator, 30 days out": (
        "gcp:compute/instance:Instance",
        {
            "machineType": "n1-standard-8",
            "guestAccelerators": [{"type": "nvidia-tesla-t4", "count": 1}],
            "labels": {"gpufleet-expires": str(NOW + 30 * 86400)},
        },
        "gpu-instances-expire",
        "GPU instance (n1-standard-8) expires 720 h from now",
    ),
    "azure vm without the tag": (
        "azure-native:compute:VirtualMachine",
        {"hardwareProfile": {"vmSize": "Standard_ND96isr_H100_v5"}},
        "gpu-instances-expire",
        "GPU instance (Standard_ND96isr_H100_v5) has no `gpufleet-expires` tag",
    ),
    "aws sg 0.0.0.0/0 on 22": (
        "aws:ec2/securityGroup:SecurityGroup",
        {
            "ingress": [
                {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}
            ]
        },
        "no-ssh-from-anywhere",
        "ingress[0] allows SSH (port 22) from 0.0.0.0/0",
    ),
    "aws sg all traffic from ::/0": (
        "aws:ec2/securityGroup:SecurityGroup",
        {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "ipv6CidrBlocks": ["::/0"]}]},
        "no-ssh-from-anywhere",
        "ingress[0] allows SSH (port 22) from ::/0",
    ),
    "aws vpc ingress rule 0.0.0.0/0 on 0-65535": (
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        {"ipProtocol": "tcp", "fromPort": 0, "toPort": 65535, "cidrIpv4": "0.0.0.0/0"},
        "no-ssh-from-anywhere",
        "ingress rule allows SSH (port 22) from 0.0.0.0/0",
    ),
    "gcp firewall 0.0.0.0/0 tcp:22": (
        "gcp:compute/firewall:Firewall",
        {"allows": [{"protocol": "tcp", "ports": ["22"]}], "sourceRanges": ["0.0.0.0/0"]},
        "no-ssh-from-anywhere",
        "firewall allows tcp:22 from 0.0.0.0/0",
    ),
    "azure nsg rule * -> 22": (
        "azure-native:network:NetworkSecurityGroup",
        {
            "securityRules": [
                {
                    "name": "ssh",
                    "direction": "Inbound",
                    "access": "Allow",
                    "protocol": "Tcp",
                    "sourceAddressPrefix": "*",
                    "destinationPortRange": "22",
                }
            ]
        },
        "no-ssh-from-anywhere",
        "securityRules[0] (ssh) allows SSH (port 22) from *",
    ),
    "azure security rule Internet -> 20-30": (
        "azure-native:network:SecurityRule",
        {
            "name": "wide",
            "direction": "Inbound",
            "access": "Allow",
            "protocol": "*",
            "sourceAddressPrefix": "Internet",
            "destinationPortRanges": ["20-30"],
        },
        "no-ssh-from-anywhere",
        "security rule wide allows SSH (port 22) from Internet",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_each_bad_resource_is_reported_with_its_message(case):
    rtype, props, policy, message = BAD[case]
    found = checks.check_resource(rtype, props, now=NOW)
    assert [v.policy for v in found] == [policy], found
    assert found[0].message.startswith(message), found[0].message


GOOD = {
    "cpu instance without the tag": ("aws:ec2/instance:Instance", {"instanceType": "m5.large"}),
    "gcp cpu instance": ("gcp:compute/instance:Instance", {"machineType": "n1-standard-8"}),
    "azure cpu vm": (
        "azure-native:compute:VirtualMachine",
        {"hardwareProfile": {"vmSize": "Standard_D4s_v5"}},
    ),
    "ssh from one address": (
        "aws:ec2/securityGroup:SecurityGroup",
        {
            "ingress": [
                {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["203.0.113.7/32"]}
            ]
        },
    ),
    "https from anywhere": (
        "aws:ec2/securityGroup:SecurityGroup",
        {
            "ingress": [
                {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}
            ]
        },
    ),
    "gcp egress firewall": (
        "gcp:compute/firewall:Firewall",
        {
            "direction": "EGRESS",
            "allows": [{"protocol": "tcp", "ports": ["22"]}],
            "destinationRanges": ["0.0.0.0/0"],
        },
    ),
    "azure deny rule": (
        "azure-native:network:SecurityRule",
        {
            "direction": "Inbound",
            "access": "Deny",
            "protocol": "Tcp",
            "sourceAddressPrefix": "*",
            "destinationPortRange": "22",
        },
    ),
    "gpu instance 2 h out": (
        "aws:ec2/instance:Instance",
        {"instanceType": "p4d.24xlarge", "tags": {"gpufleet-expires": str(NOW + 7200)}},
    ),
}


@pytest.mark.parametrize("case", GOOD)
def test_what_the_pack_lets_through(case):
    rtype, props = GOOD[case]
    assert checks.check_resource(rtype, props, now=NOW) == []


def test_the_limit_is_the_pack_config_value():
    props = {"instanceType": "p4d.24xlarge", "tags": {"gpufleet-expires": str(NOW + 48 * 3600)}}
    assert checks.check_expiry("aws:ec2/instance:Instance", props, now=NOW, max_hours=72) == []
    (v,) = checks.check_expiry("aws:ec2/instance:Instance", props, now=NOW, max_hours=24)
    assert "expires 48 h from now" in v.message and "the most allowed is 24 h" in v.message


def test_an_expiry_unknown_at_preview_neither_passes_nor_fails():
    """The fleets' expiry is an Output when the stack's state holds it (components/fleet.py
    fleet_tags): during preview the Policy SDK holds its unknown sentinel (pulumi-policy
    proxy.py UNKNOWN_STRING_VALUE)."""
    unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    props = {"instanceType": "p4d.24xlarge", "tags": {"gpufleet-expires": unknown}}
    with pytest.raises(checks.UnknownAtPreview, match="tags.gpufleet-expires"):
        checks.check_expiry("aws:ec2/instance:Instance", props, now=NOW)
    with pytest.raises(checks.UnknownAtPreview):
        checks.check_expiry("aws:ec2/instance:Instance", {"instanceType": unknown}, now=NOW)


# AWS GPU instance families, written from the EC2 User Guide's accelerated computing instances
# page, "GPU instances" (docs.aws.amazon.com/AWSEC2/latest/WindowsGuide/
# accelerated-computing-instances.html, read 2026-11-25: G5, G4ad (AMD Radeon Pro V520 GPUs),
# G4dn, G3, P2, P3, P4d), AWS Batch "GPU jobs" (docs.aws.amazon.com/batch/latest/userguide/
# gpu-jobs.html, read 2026-11-25: g3s, g5g, g6) and RAPIDS' AWS page (gr6.8xlarge, 1 x L4,
# read 2026-11-25); and types the same pages list as not GPUs (Inferentia, Trainium, FPGA).
AWS_GPU_TYPES = [
    "p2.xlarge", "p3.2xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge",
    "g3.4xlarge", "g3s.xlarge", "g4ad.xlarge", "g4dn.xlarge", "g5.xlarge", "g5g.xlarge",
    "g6.xlarge", "g6e.xlarge", "gr6.8xlarge",
]  # fmt: skip
AWS_NOT_GPU_TYPES = ["inf2.xlarge", "trn1.2xlarge", "f1.2xlarge", "m5.large", "c5.xlarge"]


@pytest.mark.parametrize("itype", AWS_GPU_TYPES)
@pytest.mark.parametrize("rtype", ["aws:ec2/instance:Instance",
                                   "aws:ec2/spotInstanceRequest:SpotInstanceRequest"])  # fmt: skip
def test_aws_gpu_families_the_catalog_may_lack_are_gpu_instances(itype, rtype):
    (v,) = checks.check_expiry(rtype, {"instanceType": itype, "tags": {}}, now=NOW)
    assert v.message.startswith(f"GPU instance ({itype}) has no `gpufleet-expires` tag")


@pytest.mark.parametrize("itype", AWS_NOT_GPU_TYPES)
def test_accelerators_that_are_not_gpus_are_not_judged(itype):
    assert checks.gpu_instance("aws:ec2/instance:Instance", {"instanceType": itype}) is None


MORE_GPU_RESOURCES = {
    "azure scale set": (
        "azure-native:compute:VirtualMachineScaleSet",
        {"sku": {"name": "Standard_ND96isr_H100_v5", "capacity": 2}, "tags": {}},
        "GPU instance (Standard_ND96isr_H100_v5) has no `gpufleet-expires` tag",
    ),
    "gcp region instance template": (
        "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
        {"machineType": "a3-highgpu-8g", "labels": {}},
        "GPU instance (a3-highgpu-8g) has no `gpufleet-expires` label",
    ),
    "gcp instance from template with its own n1 + T4": (
        "gcp:compute/instanceFromTemplate:InstanceFromTemplate",
        {"machineType": "n1-standard-8", "guestAccelerators": [{"count": 1}], "labels": {}},
        "GPU instance (n1-standard-8) has no `gpufleet-expires` label",
    ),
}


@pytest.mark.parametrize("case", MORE_GPU_RESOURCES)
def test_scale_sets_and_templates_carrying_a_gpu_type_must_expire(case):
    rtype, props, message = MORE_GPU_RESOURCES[case]
    (v,) = checks.check_expiry(rtype, props, now=NOW)
    assert v.message.startswith(message), v.message
    far = {**props, ("labels" if rtype.startswith("gcp") else "tags"): {
        "gpufleet-expires": str(NOW + 3600)}}  # fmt: skip
    assert checks.check_expiry(rtype, far, now=NOW) == []


# GCP: an INGRESS rule with none of sourceRanges, sourceTags and sourceServiceAccounts gets
# the source 0.0.0.0/0 (cloud.google.com/vpc/docs/firewalls, ingress sources, read 2026-11-25;
# seen in practice: hashicorp/terraform-provider-google#6789 "Firewall source_ranges defaults to
# 0.0.0.0/0 when source_tags not provided", read 2026-11-25).
def test_a_gcp_ingress_rule_without_any_source_is_open_to_everyone():
    fw = {"allows": [{"protocol": "tcp", "ports": ["22"]}]}
    (v,) = checks.check_ssh("gcp:compute/firewall:Firewall", fw)
    assert v.message.startswith("firewall allows tcp:22 from 0.0.0.0/0 (an ingress rule with no")
    # a source tag (or a service account) narrows it: not from anywhere
    assert (
        checks.check_ssh("gcp:compute/firewall:Firewall", {**fw, "sourceTags": ["bastion"]}) == []
    )
    assert (
        checks.check_ssh(
            "gcp:compute/firewall:Firewall", {**fw, "sourceServiceAccounts": ["sa@p.iam"]}
        )
        == []
    )


UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # pulumi-policy proxy.py UNKNOWN_STRING_VALUE
UNKNOWN_NUMBER = "3eeb2bf0-c639-47a8-9e75-3b44932eb421"  # UNKNOWN_NUMBER_VALUE
UNKNOWN_SSH = {
    "aws port unknown": (
        "aws:ec2/securityGroup:SecurityGroup",
        {
            "ingress": [
                {
                    "protocol": "tcp",
                    "fromPort": UNKNOWN_NUMBER,
                    "toPort": UNKNOWN_NUMBER,
                    "cidrBlocks": ["0.0.0.0/0"],
                }
            ]
        },  # fmt: skip
    ),
    "aws protocol unknown": (
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        {"ipProtocol": UNKNOWN, "fromPort": 22, "toPort": 22, "cidrIpv4": "0.0.0.0/0"},
    ),
    "gcp ports unknown": (
        "gcp:compute/firewall:Firewall",
        {"allows": [{"protocol": "tcp", "ports": [UNKNOWN]}], "sourceRanges": ["0.0.0.0/0"]},
    ),
    "gcp protocol unknown": (
        "gcp:compute/firewall:Firewall",
        {"allows": [{"protocol": UNKNOWN}], "sourceRanges": ["0.0.0.0/0"]},
    ),
    "azure port unknown": (
        "azure-native:network:SecurityRule",
        {
            "direction": "Inbound",
            "access": "Allow",
            "protocol": "Tcp",
            "sourceAddressPrefix": "*",
            "destinationPortRange": UNKNOWN,
        },  # fmt: skip
    ),
}


@pytest.mark.parametrize("case", UNKNOWN_SSH)
def test_a_protocol_or_port_unknown_at_preview_neither_passes_nor_fails(case):
    rtype, props = UNKNOWN_SSH[case]
    with pytest.raises(checks.UnknownAtPreview):
        checks.check_ssh(rtype, props)


def test_the_pack_imports_nothing_of_gpufleet():
    """Pulumi runs the pack in its own virtualenv holding only the Policy SDK (requirements.txt):
    its modules import the SDK and the standard library, never gpufleet."""
    import ast

    for path in (ROOT / "policy").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] == "gpufleet"], path


def test_a_launch_template_is_not_judged_the_instance_from_it_is():
    """A template launches nothing itself, and an expiry on it would make each TTL change a new
    template version (and so new instances): the instance, which names its type, is judged."""
    template = {"instanceType": "p5.48xlarge", "tags": {}}
    assert checks.check_expiry("aws:ec2/launchTemplate:LaunchTemplate", template, now=NOW) == []
    instance = {"instanceType": "p5.48xlarge", "launchTemplate": {"id": "lt-1"}, "tags": {}}
    (v,) = checks.check_expiry("aws:ec2/instance:Instance", instance, now=NOW)
    assert v.message.startswith("GPU instance (p5.48xlarge) has no `gpufleet-expires` tag")
