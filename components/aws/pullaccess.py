"""The nodes' ECR read access: a role and instance profile, only for an ECR container image."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.components.aws.backstop import partition
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.containerimage import ImageRef, parse

# ACCOUNT.dkr.ecr[-fips].REGION.amazonaws.com[.cn] (ECR user guide, Registry concepts).
_ECR_HOST = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.")

# What a pull needs (ECR user guide, ECR_on_ECS.html: BatchGetImage, GetDownloadUrlForLayer and
# GetAuthorizationToken; the layer check BatchCheckLayerAvailability of its managed read
# policies). GetAuthorizationToken takes "*" (image-push-iam.html); the rest the repository ARN.
TOKEN_ACTIONS = ("ecr:GetAuthorizationToken",)
PULL_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
)


def repository_path(ref: ImageRef) -> str:
    """The repository of a registry reference: its path without tag or digest."""
    rest = ref.reference.split("/", 1)[1].split("@", 1)[0]
    head, _, last = rest.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


@dataclass(frozen=True)
class EcrRepository:
    account: str
    region: str
    path: str

    @property
    def arn(self) -> str:
        where = f"{partition(self.region)}:ecr:{self.region}:{self.account}"
        return f"arn:{where}:repository/{self.path}"


def ecr_repository(spec: ClusterSpec) -> EcrRepository | None:
    """The ECR repository of the spec's container image; None without one, or for any other."""
    if spec.container is None:
        return None
    ref = parse(spec.container.image)
    if ref.registry_kind != "ecr":
        return None
    m = _ECR_HOST.match(ref.host)
    assert m is not None  # registry_kind "ecr" matched the same shape
    return EcrRepository(m["account"], m["region"], repository_path(ref))


def pull_policy(repo: EcrRepository) -> str:
    """Read one repository, and fetch the registry token (for any registry: not scopable)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": list(TOKEN_ACTIONS), "Resource": "*"},
                {"Effect": "Allow", "Action": list(PULL_ACTIONS), "Resource": repo.arn},
            ],
        }
    )


EC2_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


@dataclass
class NodeProfile:
    role: Any
    policy: Any
    profile: Any


def node_profile(
    name: str, spec: ClusterSpec, tags: dict[str, Any], opts: pulumi.ResourceOptions
) -> NodeProfile | None:
    """The nodes' role (EC2 may assume it), its ECR read policy, and the instance profile the
    launch templates name; None when the container image is not in ECR (nothing to grant).

    IAM is eventually consistent (IAM user guide, troubleshoot_general.html "Changes that I make
    are not always immediately visible"): a profile just created may be refused by RunInstances
    for a few seconds, and the node's first token call may be denied. The templates wait for the
    policy, and the node's pull logs in again on every attempt (components/containerpull.py),
    so a boot pull that raced the grant succeeds on its retry.
    """
    repo = ecr_repository(spec)
    if repo is None:
        return None
    role = aws.iam.Role(
        f"{name}-node-role",
        assume_role_policy=EC2_TRUST,
        description=f"gpufleet {name}: its nodes pull {repo.path} from ECR",
        tags={**tags, "Name": f"{name}-node-role"},
        opts=opts,
    )
    policy = aws.iam.RolePolicy(
        f"{name}-node-ecr-pull", role=role.id, policy=pull_policy(repo), opts=opts
    )
    profile = aws.iam.InstanceProfile(
        f"{name}-node-profile",
        role=role.name,
        tags={**tags, "Name": f"{name}-node-profile"},
        opts=opts,
    )
    return NodeProfile(role, policy, profile)
