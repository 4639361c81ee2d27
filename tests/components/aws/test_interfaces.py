"""Where the head's Elastic IP goes on a multi-card type, and the root device the AMI names."""

from __future__ import annotations

import pytest

from tests.components.aws.test_validators import account, build_plan
from tests.components.stackplans import plan

# EC2 user guide, read 2026-11-25:
# - efa-acc-inst-types.html (p5): the primary interface at network card index 0, device index
#   0; every further card's EFA-only interface also at device index 0 ("use the next unused
#   network card index, device index 0, for EFA-only network interface").
# - create-efa.html: "You can't assign an IP address to an EFA-only network interface".
# - amazonlinux/amazon-ec2-net-utils#104 (read 2026-11-25): on a p5, IMDS lists several
#   interfaces with device-number 0, one per network-card.
SOURCE_PRIMARY = {"networkCardIndex": 0, "deviceIndex": 0}
SOURCE_TAKES_NO_IP = {"efa-only"}
# EC2 user guide, device-naming.html (read 2026-11-25): root device /dev/sda1 on Ubuntu and
# most other AMIs; /dev/xvda on Amazon Linux.
SOURCE_ROOT = {"ubuntu": "/dev/sda1", "amazon-linux": "/dev/xvda"}

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ENI = "aws:ec2/networkInterface:NetworkInterface"
EIP = "aws:ec2/eip:Eip"


@pytest.mark.parametrize("stack", ["aws-p4d", "aws-p5"])
def test_the_heads_elastic_ip_is_on_the_interface_at_card_0_device_0(stack):
    """Every card's interface has device index 0 on these types, so "the primary interface"
    read back from EC2 is ambiguous; the address goes on the interface the template places at
    card 0 / device 0, which takes an IP (it is not EFA-only)."""
    p = plan(stack)
    (head_eip,) = [e for e in p.of_type(EIP) if e.name == f"{stack}-node-0-eip"]
    (head_lt,) = [lt for lt in p.of_type(LT) if lt.name == f"{stack}-node-0-lt"]
    nics = head_lt.inputs["networkInterfaces"]
    at_device_0 = [n for n in nics if n["deviceIndex"] == SOURCE_PRIMARY["deviceIndex"]]
    assert len(at_device_0) > 1  # the ambiguity: several interfaces at device index 0
    primary = [n for n in at_device_0 if {k: n[k] for k in SOURCE_PRIMARY} == SOURCE_PRIMARY]
    assert len(primary) == 1
    eni_id = primary[0]["networkInterfaceId"]
    assert head_eip.inputs["networkInterface"] == eni_id
    (eni,) = [e for e in p.of_type(ENI) if f"{e.name}-id" == eni_id]
    assert eni.inputs["interfaceType"] not in SOURCE_TAKES_NO_IP
    assert primary[0]["deleteOnTermination"] == "false"  # the stack owns it, and its address


@pytest.mark.parametrize("os", ["ubuntu", "amazon-linux"])
def test_the_root_volume_is_mapped_at_the_root_device_the_ami_names(os):
    """A mapping under another name than the AMI's root device adds a second volume and
    leaves the root at the image's size."""
    root = SOURCE_ROOT[os]
    _, p = build_plan(
        "aws-p4d", account(ami={"rootDeviceName": root}), image="ami-0123456789abcdef0"
    )
    for lt in p.of_type(LT):
        (mapping,) = lt.inputs["blockDeviceMappings"]
        assert mapping["deviceName"] == root
