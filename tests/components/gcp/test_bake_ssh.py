"""The image bake's SSH wait reaches its GCP builder: the builder carries the tag the SSH rule
targets. A rule with target tags applies only to VMs carrying one of them
(https://cloud.google.com/firewall/docs/firewalls#rule_assignment, read 2026-11-25)."""

from __future__ import annotations

from tests.components.test_bake import bake_plan


def test_the_builder_carries_the_ssh_rules_target_tag():
    p = bake_plan("gcp-g2")
    builder = p.one("gcp:compute/instance:Instance")
    ssh = next(f for f in p.of_type("gcp:compute/firewall:Firewall") if f.name.endswith("-ssh"))
    print("ssh rule targets", ssh.inputs["targetTags"], "builder tags", builder.inputs["tags"])
    assert set(ssh.inputs["targetTags"]) <= set(builder.inputs["tags"])
