"""AWS image bake under Pulumi mocks: the builder instance the provider can actually create."""

from __future__ import annotations

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.aws.mocks import FAKE_AMI
from gpufleet.components.bake import bake_program
from gpufleet.components.preview import Plan, evaluate

INSTANCE = "aws:ec2/instance:Instance"


def bake_plan(**overrides) -> Plan:
    cfg = stackconfig.stack_config("aws-p4d")
    spec = stackconfig.spec_from_config(cfg, stack="aws-p4d").with_(**overrides)
    return evaluate(lambda: bake_program(spec), config=stackconfig.pulumi_config(cfg))


GIVEN_AMI = "ami-0123456789abcdef0"


@pytest.mark.parametrize(
    "image", [None, "/my/images/gpu/latest", "resolve:ssm:/my/images/x", GIVEN_AMI]
)
def test_builder_gets_an_ami_id_never_an_ssm_reference(image):
    """terraform-provider-aws (under pulumi-aws) describes an aws_instance's AMI when the
    instance has a root_block_device: with `resolve:ssm:...` it fails with
    InvalidAMIID.Malformed (issue 43488) or plans a replacement on every run (issue 22912).
    The builder needs its root disk size, so an SSM parameter is read before it is declared,
    and an AMI id, which the provider can describe, is what it gets in every case."""
    builder = bake_plan(image=image).one(INSTANCE)
    ami = builder.inputs["ami"]
    assert ami.startswith("ami-") and "ssm" not in ami
    # the mocked ssm:getParameter answers FAKE_AMI; an AMI id needs no lookup
    assert ami == (GIVEN_AMI if image == GIVEN_AMI else FAKE_AMI)
    assert builder.inputs["rootBlockDevice"]["volumeSize"] == 200
