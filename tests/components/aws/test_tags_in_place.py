"""Editing `tags` updates AWS nodes in place (issue 20 item 8).

From hashicorp/terraform-provider-aws internal/service/ec2/ (read 2026-11-25):
ec2_launch_template.go's update makes a new template version for any change of the template's
data, tag_specifications included, but `tags`/`tags_all` alone go through UpdateTags;
ec2_instance.go replaces the instance when the launch template version it asks for changes,
and updates its own `tags` in place (UpdateTags). So a user tag may be on the instance and on
the template itself, never in the template's tag specifications.

But the template's own `tags` are not harmless either (same files, read 2026-11-25):
ec2_launch_template.go's CustomizeDiff has ComputedIf("latest_version", ...) true for any
changed key but name, name_prefix, description, default_version, update_default_version, so a
tags-only edit makes latest_version unknown in a real preview; ec2_instance.go's CustomizeDiff
then compares the version it is given with the instance's own (findInstanceLaunchTemplateVersion)
and calls ForceNew("launch_template.0.version") when they differ, an unknown included. Mocks
answer latest_version 1 whatever changes, so they cannot show that; what they can show is that a
tag edit leaves every launch template's inputs unchanged, so the provider sees no changed key at
all and latest_version stays known. The same holds for a TTL change: the expiry is on the
instances alone (each names its GPU instance type itself, so the policy pack judges them).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpufleet.clusters.plan import plan_stack
from gpufleet.components.replacements import diff
from tests.integration.conftest import ROOT

STACKS = ["aws-p5", "aws-p4d"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_tag_edit_replaces_no_node(stack):
    old = plan_stack(stack)
    new = plan_stack(stack, overrides={"tags": {"team": "x"}})
    changes = diff(old["resources"], new["resources"])
    assert changes, "the tag is somewhere"
    assert [c.line() for c in changes if c.action != "update"] == []
    nodes = [c for c in changes if c.node is not None]
    assert sorted(c.node for c in nodes) == list(range(old["nodes"]))
    assert {c.paths for c in nodes} == {("tags.team",)}  # the instance's own tags, nothing else


def templates(doc: dict) -> dict[str, dict]:
    return {
        r["name"]: r["inputs"]
        for r in doc["resources"]
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate"
    }


@pytest.mark.parametrize("stack", STACKS)
def test_a_tag_edit_leaves_every_launch_template_unchanged(stack):
    old, new = plan_stack(stack), plan_stack(stack, overrides={"tags": {"team": "x"}})
    assert templates(old) and templates(new) == templates(old)


def test_the_tags_reach_the_instances_and_the_templates_keep_the_fixed_ones():
    doc = plan_stack("aws-p5", overrides={"tags": {"team": "x"}})
    instances = [r for r in doc["resources"] if r["type"] == "aws:ec2/instance:Instance"]
    assert instances and all(r["inputs"]["tags"]["team"] == "x" for r in instances)
    for lt in templates(doc).values():
        assert "team" not in lt["tags"] and lt["tags"]["gpufleet-cluster"]
        assert "gpufleet-expires" not in lt["tags"]
        for spec in lt["tagSpecifications"]:
            assert "team" not in spec["tags"] and spec["tags"]["gpufleet-cluster"]


def test_plan_set_says_a_tag_edit_updates_the_nodes_in_place():
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "plan", "--stack", "aws-p5", "--set", "tags={team: x}"],
        capture_output=True, text=True, cwd=ROOT, timeout=180,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )  # fmt: skip
    print(r.stdout)
    assert r.returncode == 0, r.stderr
    assert "node 0: updated in place (tags changed)" in r.stdout
    assert "replaced" not in r.stdout


def test_a_ttl_change_leaves_every_launch_template_unchanged():
    before, after = plan_stack("aws-p5"), plan_stack("aws-p5", overrides={"ttl_minutes": 600})
    assert templates(before) == templates(after)
    for doc in (before, after):
        instances = [r for r in doc["resources"] if r["type"] == "aws:ec2/instance:Instance"]
        assert instances and all(r["inputs"]["instanceType"] == "p5.48xlarge" for r in instances)
        assert all("gpufleet-expires" in r["inputs"]["tags"] for r in instances)
