"""A cloud-side expiry: EventBridge Scheduler terminates each node, needing neither CLI nor node."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pulumi
import pulumi_aws as aws

# A universal target calls any AWS API operation: arn:<partition>:scheduler:::aws-sdk:<service>:
# <apiAction>, the action in camel case (EventBridge Scheduler user guide,
# managing-targets-universal.html).
TERMINATE = "scheduler:::aws-sdk:ec2:terminateInstances"


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def at_expression(expires_at: float) -> str:
    """A one-time schedule at `expires_at` (epoch seconds): at(yyyy-mm-ddThh:mm:ss), read in
    the schedule's time zone, which the backstop sets to UTC (schedule-types.html, one-time)."""
    when = datetime.fromtimestamp(int(expires_at), timezone.utc)
    return f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})"


def terminate_input(instance_ids: list[str]) -> str:
    """The TerminateInstances request, as the universal target's Input (JSON in the API's shape)."""
    return json.dumps({"InstanceIds": list(instance_ids)})


# The tag every fleet resource carries with the cluster's name (components/fleet.py fleet_tags);
# the instances get it from their launch template's tag specifications.
CLUSTER_TAG = "gpufleet-cluster"


def terminate_policy(part: str, cluster: str) -> str:
    """Only ec2:TerminateInstances, only on instances tagged with this cluster's name.

    One fixed policy for the whole fleet: a node added changes nothing here, and its size does
    not grow with the node count (a role's inline policies share one size cap).
    """
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "ec2:TerminateInstances",
                    "Resource": f"arn:{part}:ec2:*:*:instance/*",
                    "Condition": {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster}},
                }
            ],
        }
    )


ASSUME = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


def backstop_role(
    name: str, region: str, tags: dict[str, Any], opts: pulumi.ResourceOptions
) -> tuple[Any, Any]:
    """The role EventBridge Scheduler assumes, and its one policy: terminate the instances
    tagged with this cluster's name (tags[CLUSTER_TAG]), nothing else."""
    role = aws.iam.Role(
        f"{name}-backstop-role",
        assume_role_policy=ASSUME,
        description=f"gpufleet {name}: EventBridge Scheduler terminates the fleet at its expiry",
        tags={**tags, "Name": f"{name}-backstop-role"},
        opts=opts,
    )
    policy = aws.iam.RolePolicy(
        f"{name}-backstop-terminate",
        role=role.id,
        policy=terminate_policy(partition(region), tags[CLUSTER_TAG]),
        opts=opts,
    )
    return role, policy


def terminate_at_expiry(
    name: str,
    region: str,
    role: Any,
    policy: Any,
    instance: Any,
    expires_at: pulumi.Input[int],
    opts: pulumi.ResourceOptions,
) -> Any:
    """The schedule that terminates node `name`'s `instance` at `expires_at`, as `role`
    (allowed by `policy`, backstop_role's).

    One per node, so that adding a node adds a schedule and changes none (one schedule listing
    every instance would be updated whenever the node count changes). A TTL change moves only
    the schedule's expression (UpdateSchedule, in place); the schedule deletes itself once it
    has run (ActionAfterCompletion DELETE, managing-schedule-delete.html).
    """
    return aws.scheduler.Schedule(
        f"{name}-backstop",
        description=f"gpufleet {name}: terminate the node at the hard expiry",
        schedule_expression=pulumi.Output.from_input(expires_at).apply(at_expression),
        schedule_expression_timezone="UTC",
        flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
        action_after_completion="DELETE",
        target=aws.scheduler.ScheduleTargetArgs(
            arn=f"arn:{partition(region)}:{TERMINATE}",
            role_arn=role.arn,
            input=pulumi.Output.from_input(instance.id).apply(lambda i: terminate_input([i])),
        ),
        # The role must be allowed to terminate before the schedule can run.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[policy])),
    )
