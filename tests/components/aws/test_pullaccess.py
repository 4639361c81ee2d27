"""AWS nodes' ECR read access under Pulumi mocks: role, policy, instance profile, templates.

Faked: the AWS API (Pulumi mocks, components/aws/mocks.py); real: the resources and inputs the
fleet program registers, which is what `pulumi up` would send.
"""

from __future__ import annotations

import json

import pytest

from gpufleet.components.aws.pullaccess import ecr_repository
from gpufleet.components.clusterspec import ContainerSpec
from tests.components.stackplans import plan, tagged_with_cluster

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ROLE = "aws:iam/role:Role"
POLICY = "aws:iam/rolePolicy:RolePolicy"
PROFILE = "aws:iam/instanceProfile:InstanceProfile"
ECR_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/train:v1"

# Written from the ECR user guide, read 2026-11-25:
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/ECR_on_ECS.html
#   "must have permissions to make the ecr:BatchGetImage, ecr:GetDownloadUrlForLayer, and
#   ecr:GetAuthorizationToken APIs" (to pull from a private repository)
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/repository-policy-examples.html
#   "Amazon ECR requires that users have permission to make calls to the
#   ecr:GetAuthorizationToken API through an IAM policy before they can authenticate to a
#   registry and push or pull any images"
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-push-iam.html
#   a repository's full ARN limits a policy to it (arn:aws:ecr:us-east-1:111122223333:
#   repository/repository-name), with ecr:GetAuthorizationToken on "Resource": "*"
# https://docs.aws.amazon.com/AmazonECR/latest/userguide/ecr_managed_policies.html
#   ecr:BatchCheckLayerAvailability: the layer check a client makes, in the read actions
#   of the managed policies
PULL_FACTS = {
    "token": {"actions": {"ecr:GetAuthorizationToken"}, "resource": "*"},
    "image": {
        "actions": {
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:GetDownloadUrlForLayer",
        },
        "resource": "arn:aws:ecr:us-west-2:123456789012:repository/team/train",
    },
}


def with_image(image: str):
    return plan("aws-p4d", container=ContainerSpec(image=image))


@pytest.fixture(scope="module")
def ecr():
    return with_image(ECR_IMAGE)


def node_iam(p):
    return [r for r in p.of_type(ROLE) if r.name.endswith("-node-role")]


def test_ecr_image_gives_the_nodes_a_role_reading_only_that_repository(ecr):
    (role,) = node_iam(ecr)
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert trust == [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ]
    (policy,) = [r for r in ecr.of_type(POLICY) if r.name.endswith("-node-ecr-pull")]
    assert policy.inputs["role"] == f"{role.name}-id"
    got = {
        (frozenset([s["Action"]] if isinstance(s["Action"], str) else s["Action"]), s["Resource"])
        for s in json.loads(policy.inputs["policy"])["Statement"]
        if s["Effect"] == "Allow"
    }
    want = {(frozenset(f["actions"]), f["resource"]) for f in PULL_FACTS.values()}
    print("policy statements:", sorted((sorted(a), r) for a, r in got))
    assert got == want
    (profile,) = ecr.of_type(PROFILE)
    assert profile.inputs["role"] == role.name
    for r in (role, profile):
        assert tagged_with_cluster(r.inputs["tags"], "aws-p4d")


def test_every_launch_template_names_the_profile_and_waits_for_its_policy(ecr):
    (profile,) = ecr.of_type(PROFILE)
    lts = ecr.of_type(LT)
    assert len(lts) == 2
    for lt in lts:
        arn = lt.inputs["iamInstanceProfile"]["arn"]
        assert arn == f"arn:aws:iam::123456789012:instance-profile/{profile.name}"
        # the policy exists before a node can boot and pull with the role
        assert "aws-p4d-node-ecr-pull" in lt.depends_on


@pytest.mark.parametrize(
    "container",
    [
        None,
        ContainerSpec(image="nvcr.io/nvidia/pytorch:25.01-py3"),
        ContainerSpec(image="python:3.12"),
        ContainerSpec(image="us-docker.pkg.dev/p/r/img:1"),  # GAR on AWS: pulled anonymously
        ContainerSpec(image="oci-archive:/tmp/img.tar"),
    ],
)
def test_no_role_or_profile_without_an_ecr_image(container):
    p = plan("aws-p4d", container=container)
    assert node_iam(p) == [] and p.of_type(PROFILE) == []
    assert all("iamInstanceProfile" not in lt.inputs for lt in p.of_type(LT))


@pytest.mark.parametrize(
    ("image", "arn"),
    [
        (
            "123456789012.dkr.ecr.eu-central-1.amazonaws.com/a/b/c@sha256:" + "0" * 64,
            "arn:aws:ecr:eu-central-1:123456789012:repository/a/b/c",
        ),
        (
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/train",  # no tag: :latest
            "arn:aws:ecr:us-east-1:123456789012:repository/train",
        ),
        (
            "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/x/y:2",
            "arn:aws-us-gov:ecr:us-gov-west-1:123456789012:repository/x/y",
        ),
        (
            "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/x:1",
            "arn:aws-cn:ecr:cn-north-1:123456789012:repository/x",
        ),
    ],
)
def test_repository_arn_is_derived_from_the_image(image, arn):
    """ARN format arn:PARTITION:ecr:REGION:ACCOUNT:repository/NAME (ECR user guide,
    image-push-iam.html, read 2026-11-25); partitions aws-cn / aws-us-gov (IAM user guide,
    reference-arns.html, read 2026-11-25)."""
    from gpufleet.components.clusterspec import ClusterSpec

    spec = ClusterSpec.from_input(
        dict(name="c", cloud="aws", instance_type="p4d.24xlarge", container={"image": image})
    )
    repo = ecr_repository(spec)
    assert repo is not None and repo.arn == arn
