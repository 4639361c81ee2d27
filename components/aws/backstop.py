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


def terminate_policy(instance_arns: list[str]) -> str:
    """Only ec2:TerminateInstances, only on the fleet's own instances."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "ec2:TerminateInstances",
                    "Resource": sorted(instance_arns),
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


def backstop_role(name: str, tags: dict[str, Any], opts: pulumi.ResourceOptions) -> Any:
    """The role EventBridge Scheduler assumes; each node's policy (terminate_at_expiry) is the
    only thing it may do."""
    return aws.iam.Role(
        f"{name}-backstop-role",
        assume_role_policy=ASSUME,
        description=f"gpufleet {name}: EventBridge Scheduler terminates the fleet at its expiry",
        tags={**tags, "Name": f"{name}-backstop-role"},
        opts=opts,
    )


def terminate_at_expiry(
    name: str,
    region: str,
    role: Any,
    instance: Any,
    expires_at: pulumi.Input[int],
    opts: pulumi.ResourceOptions,
) -> Any:
    """The schedule that terminates node `name`'s `instance` at `expires_at`, and the policy
    that lets `role` terminate that instance and no other.

    One per node, so that adding a node adds a schedule and changes none (one schedule listing
    every instance would be updated whenever the node count changes). A TTL change moves only
    the schedule's expression (UpdateSchedule, in place); the schedule deletes itself once it
    has run (ActionAfterCompletion DELETE, managing-schedule-delete.html).
    """
    policy = aws.iam.RolePolicy(
        f"{name}-backstop-terminate",
        role=role.id,
        policy=pulumi.Output.from_input(instance.arn).apply(lambda a: terminate_policy([a])),
        opts=opts,
    )
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
