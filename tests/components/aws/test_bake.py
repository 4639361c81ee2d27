"""AWS image bake under Pulumi mocks: the builder instance the provider can actually create."""

from __future__ import annotations

import pytest

from components import stackconfig
from components.aws.mocks import FAKE_AMI
from components.bake import bake_program
from components.preview import Plan, evaluate

INSTANCE = "aws:ec2/instance:Instance"


def bake_plan(**overrides) -> Plan:
    cfg = stackconfig.stack_config("aws-p4d")
    spec = stackconfig.spec_from_config(cfg, stack="aws-p4d").with_(**overrides)
    return evaluate(lambda: bake_program(spec), config=stackconfig.pulumi_config(cfg))


@pytest.mark.parametrize("image", [None, "/my/images/gpu/latest", "resolve:ssm:/my/images/x"])
def test_builder_gets_an_ami_id_never_an_ssm_reference(image):
    """terraform-provider-aws (under pulumi-aws) describes an aws_instance's AMI when the
    instance has a root_block_device: with `resolve:ssm:...` it fails with
    InvalidAMIID.Malformed (issue 43488) or plans a replacement on every run (issue 22912).
    The builder needs its root disk size, so the SSM parameter is read before it is declared."""
    builder = bake_plan(image=image).one(INSTANCE)
    assert builder.inputs["ami"] == FAKE_AMI  # what the mocked ssm:getParameter returns
    assert builder.inputs["rootBlockDevice"]["volumeSize"] == 200


def test_builder_takes_an_ami_id_as_given():
    builder = bake_plan(image="ami-0123456789abcdef0").one(INSTANCE)
    assert builder.inputs["ami"] == "ami-0123456789abcdef0"
