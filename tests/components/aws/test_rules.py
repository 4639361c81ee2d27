"""EC2 errors explained in plain words, and `extend` capped at the schedule's expiry."""

from __future__ import annotations

import pytest

from gpufleet.components.aws.rules import explain_failure, refuse_extension

# EC2 API reference, errors-overview.html (read 2026-11-25): the codes RunInstances and
# AllocateAddress/CreateVpc answer with, and what each means.
SOURCE_CODES = {
    "VcpuLimitExceeded": "vCPU",  # "You've reached the limit on the number of vCPUs"
    "InsufficientInstanceCapacity": "capacity",  # not enough capacity in the zone now
    "AddressLimitExceeded": "Elastic IP",  # the maximum number of Elastic IPs
    "VpcLimitExceeded": "VPC",  # the maximum number of VPCs
}


@pytest.mark.parametrize(("code", "word"), sorted(SOURCE_CODES.items()))
def test_each_quota_or_capacity_error_is_explained_with_a_fix(code, word):
    text = f"aws:ec2:Instance (aws-p5-node-1):\n    error: creating EC2 Instance: {code}: ..."
    known = explain_failure(text)
    assert known is not None, code
    problem, fix = known
    assert code in problem and word in problem and fix


def test_no_capacity_names_the_node_that_failed():
    """gpufleet launches one node per request into the cluster placement group (AWS recommends
    one request for the group: placement-groups.html, "Cluster placement groups", read
    2026-11-25), so the failure is at node k of n, and the message says which."""
    problem, _ = explain_failure(
        "aws:ec2:Instance (aws-p5-node-1): InsufficientInstanceCapacity: ..."
    ) or ("", "")
    assert "node-1" in problem and "one request" in problem


def test_an_unknown_error_is_left_alone():
    assert explain_failure("UnauthorizedOperation: you are not authorized") is None


def test_extend_past_the_backstop_is_refused_and_before_it_is_not():
    """The schedule terminates the instances at the stack's expiry, whatever the node's own
    timer was told (components/aws/backstop.py)."""
    created = 1_900_000_000
    assert refuse_extension(created, created - 60) is None
    problem, fix = refuse_extension(created, created + 3600) or ("", "")
    assert "EventBridge Scheduler" in problem and "2030-03-17 17:46 UTC" in problem
    assert "ttl_minutes" in fix


# EC2 user guide, "Tag your Amazon EC2 resources", tag restrictions
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html, read 2026-11-25), and
# work-with-tags-in-IMDS.html: "If you enable instance tags in instance metadata, instance tag
# keys can only use letters (a-z, A-Z), numbers (0-9), and the following characters: + - = . , _
# : @. Instance tag keys can't contain spaces or /, and can't comprise only . (one period),
# .. (two periods), or _index."
SOURCE_IMDS_KEYS = {
    "team": True,
    "cost-center": True,
    "a+b=c.d,e_f:g@h": True,
    "Cost Center": False,
    "team/ml": False,
    "aws:x/y": False,
    ".": False,
    "..": False,
    "_index": False,
    "ünïcode": False,
}


@pytest.mark.parametrize(("key", "ok"), sorted(SOURCE_IMDS_KEYS.items()))
def test_tag_keys_must_be_valid_in_instance_metadata(key, ok):
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.components.errors import SpecError

    spec = {"name": "c", "cloud": "aws", "instance_type": "p4d.24xlarge", "tags": {key: "v"}}
    if ok:
        assert ClusterSpec.from_input(spec).tags == {key: "v"}
        return
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input(spec)
    assert e.value.field == "tags" and "+ - = . , _ : @" in str(e.value)
    assert "instance metadata" in str(e.value)
