"""Re-applying a stack: the same stack twice, and one node more, under Pulumi mocks.

What the clouds do with a changed input is what makes these tests matter:
- AWS: a changed launch template creates a new version, and a changed `launch_template.version`
  forces a new `aws_instance` (terraform-provider-aws, internal/service/ec2/ec2_instance.go:
  `launch_template` is ForceNew) - every node replaced;
- Azure: `osProfile.customData` cannot be changed on an existing VM ("Changing property
  'customData' is not allowed", learn.microsoft.com/azure/virtual-machines/custom-data);
- GCP: metadata and labels are rewritten in place on a running VM (Compute API
  instances.setMetadata and instances.setLabels), and a changed boot disk forces a new VM
  (terraform-provider-google, google/services/compute/resource_compute_instance.go:
  `boot_disk` and its `initialize_params.image` are ForceNew).
So two plans of one unchanged stack must be identical whatever the clock says, and a plan with one
node more must leave the first nodes' inputs untouched (issue 7, items 2 and 7).
"""

from __future__ import annotations

import json
import re

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import Plan, evaluate

STACKS = stackconfig.stack_names()
NODE_RE = re.compile(r"-node-(\d+)(-|$)")


def plan_at(stack: str, now: float, monkeypatch: pytest.MonkeyPatch, **overrides) -> Plan:
    """The stack's plan as `pulumi up` would run it (no expiry passed in), with the clock at now."""
    monkeypatch.setattr("time.time", lambda: now)
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack)
    if overrides:
        spec = spec.with_(**overrides)
    return evaluate(
        lambda: stackconfig.exports(stackconfig.build(spec)),
        config=stackconfig.pulumi_config(config),
        stack=stack,
    )


def inputs_by_name(p: Plan) -> dict[str, str]:
    return {f"{r.type}::{r.name}": json.dumps(r.inputs, sort_keys=True) for r in p.resources}


def node_index(resource_key: str) -> int | None:
    m = NODE_RE.search(resource_key.split("::", 1)[1])
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("stack", STACKS)
def test_two_plans_an_hour_apart_are_identical(stack, monkeypatch):
    first = plan_at(stack, 1_800_000_000, monkeypatch)
    second = plan_at(stack, 1_800_003_600, monkeypatch)
    assert inputs_by_name(first) == inputs_by_name(second)
    assert first.outputs["expires_at"] == second.outputs["expires_at"]


@pytest.mark.parametrize("stack", STACKS)
def test_one_node_more_leaves_the_first_nodes_inputs_unchanged(stack, monkeypatch):
    spec = stackconfig.spec_from_stack(stack)
    n = spec.nodes
    before = inputs_by_name(plan_at(stack, 1_800_000_000, monkeypatch))
    after = inputs_by_name(plan_at(stack, 1_800_000_000, monkeypatch, nodes=n + 1))
    added = sorted(set(after) - set(before))
    assert added and all(node_index(k) == n for k in added), added
    assert not set(before) - set(after)
    changed = [k for k in before if before[k] != after[k]]
    assert changed == [], changed


def test_a_changed_ttl_is_the_only_thing_that_moves_the_expiry(monkeypatch):
    """The expiry lives in the stack's state. Pulumi runs a dynamic provider's create once and
    keeps its outputs in state; on a later `up` it calls diff(old outputs, new inputs), and a
    result with changes and no replaces means an in-place update, no changes means the old
    outputs stay (pulumi.dynamic DiffResult: "changes ... suggests an update", "replaces: if
    this update requires a replacement"; pulumi.com/docs/iac/concepts/resources/
    dynamic-providers). So a re-apply two hours later must report no change, and only a new
    ttl_minutes may report one, as an update from the original creation time."""
    from gpufleet.components.expiry import _ExpiryProvider

    provider = _ExpiryProvider()
    monkeypatch.setattr("time.time", lambda: 1_800_000_000)
    created = provider.create({"ttl_minutes": 240}).outs
    assert created["expires_at"] == 1_800_000_000 + 240 * 60
    monkeypatch.setattr("time.time", lambda: 1_800_007_200)  # re-applied two hours later
    same = {"ttl_minutes": 240, "created_at": None, "expires_at": None}
    assert not provider.diff("id", created, same).changes
    longer = provider.diff("id", created, {**same, "ttl_minutes": 300})
    assert longer.changes and not longer.replaces
    assert provider.update("id", created, {**same, "ttl_minutes": 300}).outs["expires_at"] == (
        1_800_000_000 + 300 * 60
    )
