"""The cloud-side expiry (EventBridge Scheduler terminates the fleet) and what a TTL change
touches: the schedule and the instances' tags, never a launch template or an instance input."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import Plan, evaluate
from tests.components.stackplans import plan

# EventBridge Scheduler user guide, read 2026-11-25:
# - schedule-types.html, "One-time schedules": expression at(yyyy-mm-ddThh:mm:ss), evaluated in
#   the schedule's time zone (ScheduleExpressionTimezone; UTC unless given).
# - managing-targets-universal.html: a universal target's Arn is
#   arn:aws:scheduler:::aws-sdk:<service>:<apiAction>, e.g. ...:aws-sdk:sqs:sendMessage; Input
#   is the API's request parameters as JSON; the execution role must allow that API action.
# - managing-schedule-delete.html: ActionAfterCompletion DELETE removes a one-time schedule
#   once it has invoked its target.
# - EC2 API reference, TerminateInstances: request parameter InstanceIds (array of strings).
# - IAM: the role is assumed by the service principal scheduler.amazonaws.com
#   (EventBridge Scheduler user guide, setting-up.html#setting-up-execution-role), and the
#   trust policy there conditions it on "aws:SourceAccount": "<your account id>" against the
#   confused deputy (an aws:SourceArn of a schedule group is optional; the schedules here are
#   in the default group).
SOURCE = {
    "source_account_condition": "aws:SourceAccount",
    "target": "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances",
    "principal": "scheduler.amazonaws.com",
    "action": "ec2:TerminateInstances",
    "after": "DELETE",
}
SCHEDULE = "aws:scheduler/schedule:Schedule"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"


def one(p: Plan, typ: str) -> Any:
    (r,) = p.of_type(typ)
    return r


def schedules(p: Plan) -> dict[str, Any]:
    return {s.name: s for s in p.of_type(SCHEDULE)}


def test_a_schedule_terminates_each_node_at_the_hard_expiry():
    p = plan("aws-p5")  # stackplans fixes the expiry at 1_900_000_000
    expected = datetime.fromtimestamp(1_900_000_000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    nodes = p.outputs["nodes"]
    found = schedules(p)
    assert sorted(found) == [f"aws-p5-node-{i}-backstop" for i in range(len(nodes))]
    for i, node in enumerate(nodes):
        s = found[f"aws-p5-node-{i}-backstop"]
        assert s.inputs["scheduleExpression"] == f"at({expected})"
        assert s.inputs["scheduleExpressionTimezone"] == "UTC"
        assert s.inputs["actionAfterCompletion"] == SOURCE["after"]
        assert s.inputs["flexibleTimeWindow"] == {"mode": "OFF"}
        assert s.inputs["target"]["arn"] == SOURCE["target"]
        assert json.loads(s.inputs["target"]["input"]) == {"InstanceIds": [node["instance_id"]]}
        assert s.inputs["target"]["roleArn"].endswith("aws-p5-backstop-role")


# IAM and AWS STS quotas (https://docs.aws.amazon.com/IAM/latest/UserGuide/
# reference_iam-quotas.html, read 2026-11-25): "Role policy size: You can add as many inline
# policies as you want to an IAM role, but the total aggregate policy size (the sum size of all
# inline policies) per role cannot exceed 10,240 characters"; "IAM does not count white space".
# Service Authorization Reference, Amazon EC2 (list_amazonec2.html, read 2026-11-25):
# TerminateInstances acts on resource type instance, arn:${Partition}:ec2:${Region}:${Account}:
# instance/${InstanceId}, with condition key aws:ResourceTag/${TagKey}.
SOURCE_IAM = {"inline_policy_chars_per_role": 10_240}
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


def test_the_schedule_role_may_only_terminate_instances_tagged_with_its_cluster():
    p = plan("aws-p5")
    role = one(p, "aws:iam/role:Role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (stmt,) = trust["Statement"]
    assert stmt["Principal"] == {"Service": SOURCE["principal"]}
    assert stmt["Action"] == "sts:AssumeRole"
    # The mocks' caller identity is account 123456789012 (components/aws/mocks.py).
    assert stmt["Condition"] == {
        "StringEquals": {SOURCE["source_account_condition"]: "123456789012"}
    }
    policy = one(p, ROLE_POLICY)
    assert policy.inputs["role"] == "aws-p5-backstop-role-id"
    (allow,) = json.loads(policy.inputs["policy"])["Statement"]
    assert allow["Effect"] == "Allow" and allow["Action"] == SOURCE["action"]
    assert allow["Resource"] == "arn:aws:ec2:*:*:instance/*"
    ((key, value),) = allow["Condition"]["StringEquals"].items()
    assert key.startswith("aws:ResourceTag/")
    tag = key[len("aws:ResourceTag/") :]
    # Every instance carries that tag with that value, from its template and on itself.
    for inst in p.of_type(INSTANCE):
        assert inst.inputs["tags"][tag] == value
    for lt in p.of_type(LT):
        (spec,) = [t for t in lt.inputs["tagSpecifications"] if t["resourceType"] == "instance"]
        assert spec["tags"][tag] == value


def test_a_hundred_node_fleet_fits_the_roles_inline_policy_size():
    p = plan("aws-p5", nodes=100)
    assert len(p.of_type(INSTANCE)) == 100
    size = sum(len("".join(r.inputs["policy"].split())) for r in p.of_type(ROLE_POLICY))
    assert size <= SOURCE_IAM["inline_policy_chars_per_role"], size


def _plan_ttl(ttl: int) -> Plan:
    """The stack with its expiry from the stack's own state (components/expiry.py), as a
    plain `pulumi up` has it: the TTL reaches the nodes only through that."""
    config = stackconfig.stack_config("aws-p5")
    spec = stackconfig.spec_from_config(config, stack="aws-p5").with_(ttl_minutes=ttl)

    def program() -> Any:
        return stackconfig.exports(stackconfig.build(spec))

    return evaluate(program, config=stackconfig.pulumi_config(config), stack="aws-p5")


# terraform-provider-aws, internal/service/ec2/ec2_launch_template.go, resourceLaunchTemplateUpdate
# (read 2026-11-25): a change of any of these makes a new launch template version
# (CreateLaunchTemplateVersion); tags are updated in place (UpdateTags). An aws_instance whose
# launch_template version changes is replaced (launch_template.version is ForceNew there).
SOURCE_NEW_VERSION_KEYS = {
    "blockDeviceMappings", "capacityReservationSpecification", "cpuOptions",
    "creditSpecification", "description", "disableApiStop", "disableApiTermination",
    "ebsOptimized", "elasticGpuSpecifications", "elasticInferenceAccelerator", "enclaveOptions",
    "hibernationOptions", "iamInstanceProfile", "imageId", "instanceInitiatedShutdownBehavior",
    "instanceMarketOptions", "instanceRequirements", "instanceType", "kernelId", "keyName",
    "licenseSpecification", "metadataOptions", "monitoring", "networkInterfaces", "placement",
    "privateDnsNameOptions", "ramDiskId", "securityGroupNames", "tagSpecifications", "userData",
    "vpcSecurityGroupIds",
}  # fmt: skip


def pairs(a: Plan, b: Plan, typ: str) -> list[tuple[Any, Any]]:
    def by_name(p: Plan) -> list[Any]:
        return sorted(p.of_type(typ), key=lambda r: r.name)

    return list(zip(by_name(a), by_name(b), strict=True))


def changed(x: Any, y: Any) -> set[str]:
    return {k for k in set(x.inputs) | set(y.inputs) if x.inputs.get(k) != y.inputs.get(k)}


def test_a_ttl_change_makes_no_new_launch_template_version_and_replaces_no_instance():
    """The expiry lives only in tags (updated in place) and the schedule: a TTL change makes
    no new template version, so no instance is replaced."""
    a, b = _plan_ttl(240), _plan_ttl(480)
    for x, y in pairs(a, b, LT):
        assert not changed(x, y) & SOURCE_NEW_VERSION_KEYS, x.name
    for x, y in pairs(a, b, INSTANCE):
        assert changed(x, y) == {"tags"}
        assert x.inputs["tags"]["gpufleet-expires"] == str(240 * 60)
        assert y.inputs["tags"]["gpufleet-expires"] == str(480 * 60)
    for x, y in pairs(a, b, SCHEDULE):
        assert changed(x, y) == {"scheduleExpression"}
        assert x.inputs["scheduleExpression"] == "at(1970-01-01T04:00:00)"
        assert y.inputs["scheduleExpression"] == "at(1970-01-01T08:00:00)"


def test_a_recipe_change_still_makes_a_new_version(monkeypatch):
    """What a TTL change must not do, a recipe change does (the user data is the recipe)."""
    from gpufleet.components import bootstrap

    a = plan("aws-p5")
    steps = bootstrap.step_files()
    monkeypatch.setattr(bootstrap, "step_files", lambda: [*steps, ("99-new.sh", "true\n")])
    b = plan("aws-p5")
    assert all(changed(x, y) & SOURCE_NEW_VERSION_KEYS == {"userData"} for x, y in pairs(a, b, LT))


def test_the_node_reads_its_expiry_from_its_own_tag_through_imds():
    """Instance tags reach IMDS (tags/instance/<key>) only with InstanceMetadataTags enabled
    in the metadata options (EC2 user guide, work-with-tags-in-IMDS.html, read 2026-11-25)."""
    p = plan("aws-p4d")
    for lt in p.of_type(LT):
        assert lt.inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"
        text = gzip.decompress(base64.b64decode(lt.inputs["userData"])).decode()
        assert "GPUFLEET_EXPIRES_AT=''" in text or "GPUFLEET_EXPIRES_AT=\n" in text
        assert "GPUFLEET_EXPIRY_TAG=gpufleet-expires" in text
        assert "/usr/local/sbin/gpufleet-expire" in text  # the timer is still armed


@pytest.mark.parametrize(
    ("answer", "removed"), [("1000", True), ("1900000000", False), ("", False)]
)
def test_the_expiry_script_goes_at_the_tag_imds_answers(tmp_path, answer, removed):
    """IMDSv2: PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds, then GET with
    X-aws-ec2-metadata-token (EC2 user guide, instancedata-data-retrieval.html, read
    2026-11-25); the tag at /latest/meta-data/tags/instance/<key>."""
    from tests.images.test_steps import expire, make_node, prebake

    node = prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))
    node.set_env(GPUFLEET_EXPIRES_AT="", GPUFLEET_EXPIRY_TAG="gpufleet-expires")
    (node.bin / "curl").write_text(
        f'#!/bin/sh\necho "curl $*" >> {node.calls}\ncase "$*" in\n'
        "  *api/token*) echo tok ;;\n"
        f"  *tags/instance/gpufleet-expires*) printf '%s' '{answer}' ;;\n"
        "esac\n"
    )
    r = expire(node)
    assert r.returncode == 0, r.stderr
    calls = node.recorded()
    assert "-X PUT -H X-aws-ec2-metadata-token-ttl-seconds: 60" in calls
    assert "169.254.169.254/latest/meta-data/tags/instance/gpufleet-expires" in calls
    assert "X-aws-ec2-metadata-token: tok" in calls
    assert calls.rstrip().endswith("systemctl poweroff") == removed


def test_a_schedule_is_never_set_in_the_past():
    """A one-time schedule runs once at its time (schedule-types.html); at a time already past,
    a re-apply after the expiry would leave nothing to terminate the nodes. The backstop sets
    it a little ahead of now instead."""
    from gpufleet.components.aws.backstop import at_expression

    now = 1_900_000_000
    assert at_expression(now + 3600, now) == "at(2030-03-17T18:46:40)"  # still ahead: unchanged
    ahead = at_expression(now - 3600, now)  # the expiry has passed
    when = datetime.strptime(ahead, "at(%Y-%m-%dT%H:%M:%S)").replace(tzinfo=timezone.utc)
    assert now < when.timestamp() <= now + 300


@pytest.mark.parametrize(("lease", "said"), [(None, True), ("1900000000", False)])
def test_an_expiry_tag_never_read_is_said_once_in_the_journal(tmp_path, lease, said):
    """Instance tags are in IMDS only with InstanceMetadataTags enabled (EC2 user guide,
    work-with-tags-in-IMDS.html, read 2026-11-25; otherwise tags/instance/ answers 404). A node
    that never reads its tag and has no lease has no deadline of its own; the timer's stderr
    goes to the journal (systemd.exec StandardError=inherit -> journal, read 2026-11-25)."""
    from tests.images.test_steps import expire, make_node, prebake

    node = prebake(make_node(tmp_path, "aws", "p4d.24xlarge"))
    node.set_env(GPUFLEET_EXPIRES_AT="", GPUFLEET_EXPIRY_TAG="gpufleet-expires")
    (node.bin / "curl").write_text("#!/bin/sh\nexit 22\n")  # IMDS answers 404 to the tag
    if lease:
        node.put("var/lib/gpufleet/lease", lease)
    first, second = expire(node), expire(node)
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    assert ("will not expire by itself" in first.stderr) == said, first.stderr
    assert "will not expire by itself" not in second.stderr  # once
    assert "systemctl poweroff" not in node.recorded()
