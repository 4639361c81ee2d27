"""Editing `tags` updates AWS nodes in place (issue 20 item 8).

From hashicorp/terraform-provider-aws internal/service/ec2/ (read 2026-11-25):
ec2_launch_template.go's update makes a new template version for any change of the template's
data, tag_specifications included, but `tags`/`tags_all` alone go through UpdateTags;
ec2_instance.go replaces the instance when the launch template version it asks for changes,
and updates its own `tags` in place (UpdateTags). So a user tag may be on the instance and on
the template itself, never in the template's tag specifications.
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


def test_the_tags_still_reach_instance_and_template():
    doc = plan_stack("aws-p5", overrides={"tags": {"team": "x"}})
    by_type: dict[str, list[dict]] = {}
    for r in doc["resources"]:
        by_type.setdefault(r["type"], []).append(r)
    for typ in ("aws:ec2/instance:Instance", "aws:ec2/launchTemplate:LaunchTemplate"):
        assert all(r["inputs"]["tags"]["team"] == "x" for r in by_type[typ])
    for lt in by_type["aws:ec2/launchTemplate:LaunchTemplate"]:
        for spec in lt["inputs"]["tagSpecifications"]:
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
