"""A cloud-side expiry: EventBridge Scheduler terminates each node, needing neither CLI nor node."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.components.offers import under_mocks

# A universal target calls any AWS API operation: arn:<partition>:scheduler:::aws-sdk:<service>:
# <apiAction>, the action in camel case (EventBridge Scheduler user guide,
# managing-targets-universal.html).
TERMINATE = "scheduler:::aws-sdk:ec2:terminateInstances"
# A one-time schedule at a past time would never run: a re-apply after the expiry sets it this
# far ahead of now instead.
LEAD_S = 120


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def at_expression(expires_at: float, now: float | None = None) -> str:
    """A one-time schedule at `expires_at` (epoch seconds), or LEAD_S after `now` when that is
    later: at(yyyy-mm-ddThh:mm:ss), read in the schedule's time zone, which the backstop sets
    to UTC (schedule-types.html, one-time). `now` None: no clamp (an offline plan, whose
    expiry is a placeholder, not a time)."""
    when_s = expires_at if now is None else max(expires_at, now + LEAD_S)
    when = datetime.fromtimestamp(int(when_s), timezone.utc)
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


def assume_policy(account_id: str) -> str:
    """EventBridge Scheduler may assume the role, for schedules of this account only (the
    confused-deputy condition of the Scheduler execution-role docs, setting-up.html)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "scheduler.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                    "Condition": {"StringEquals": {"aws:SourceAccount": account_id}},
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
        # The account of the fleet's own provider (the parent's), not the default provider's.
        assume_role_policy=aws.get_caller_identity_output(
            opts=pulumi.InvokeOptions(parent=opts.parent)
        ).account_id.apply(assume_policy),
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
        schedule_expression=pulumi.Output.from_input(expires_at).apply(
            lambda t: at_expression(t, None if under_mocks() else time.time())
        ),
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
