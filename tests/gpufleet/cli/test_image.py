"""`gpufleet image render` through the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.integration.conftest import ROOT


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "image", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_render_prints_the_nodes_cloud_config_with_placeholders():
    r = cli("render", "--stack", "gcp-a3", "--node", "1", "--expires-at", "1900000000")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#cloud-config")
    doc = yaml.safe_load(r.stdout)
    assert "ssh_keys" not in doc  # the node makes its own host key (issue 19 item 23)
    assert doc["ssh"]["emit_keys_to_console"] is True
    assert "GPUFLEET_NODE=node-1" in doc["write_files"][0]["content"]


STACK = """config:
  gpufleet:cluster:
    name: review
    cloud: azure
    nodes: 3
    instance_type: Standard_ND96isr_H100_v5
    region: eastus
    ssh_cidrs: ["203.0.113.7/32"]
"""


def test_render_from_a_stack_folder_is_the_exact_node_cloud_init(tmp_path):
    from gpufleet.components.bootstrap import placeholder_context, render_cloud_init
    from gpufleet.components.stackconfig import spec_from_stack

    (tmp_path / "Pulumi.review.yaml").write_text(STACK)
    r = cli("render", "--stack", "review", "--node", "2", "--stacks-dir", str(tmp_path),
            "--expires-at", "1900000000")  # fmt: skip
    assert r.returncode == 0, r.stderr
    spec = spec_from_stack("review", tmp_path)
    assert r.stdout == render_cloud_init(placeholder_context(spec, 2, 1900000000))
    doc = yaml.safe_load(r.stdout)
    env = next(f["content"] for f in doc["write_files"] if f["path"] == "/etc/gpufleet/env")
    assert "GPUFLEET_NODE=node-2" in env and "GPUFLEET_FABRIC=infiniband" in env
    assert "GPUFLEET_AZURE_CLIENT_ID='<GPUFLEET_AZURE_CLIENT_ID at deploy time>'" in env
    assert "PRIVATE KEY" not in r.stdout  # secrets are placeholders only
    assert "ssh_keys" not in doc  # the node makes its own host key (issue 19 item 23)


def test_render_of_an_unknown_stack_names_the_known_ones(tmp_path):
    (tmp_path / "Pulumi.review.yaml").write_text(STACK)
    r = cli("render", "--stack", "nope", "--stacks-dir", str(tmp_path))
    assert r.returncode == 2 and "review" in r.stderr


def test_render_rejects_a_node_outside_the_stack():
    r = cli("render", "--stack", "gcp-a3", "--node", "5")
    assert r.returncode == 2 and "node" in r.stderr and "0..1" in r.stderr


def test_bake_plan_lists_builder_wait_and_image_offline():
    r = cli("bake", "--stack", "aws-g5", "--plan")
    assert r.returncode == 0, r.stderr
    for needle in ("aws:ec2/instance:Instance", "AmiFromInstance", "builder expiry: 180 min"):
        assert needle in r.stdout


# Where each cloud's API takes a VM's own end, from its docs (read 2026-11-25):
# EC2 RunInstances InstanceInitiatedShutdownBehavior "stop | terminate" (docs.aws.amazon.com/
# AWSEC2/latest/APIReference/API_RunInstances.html); GCE scheduling.terminationTime with
# instanceTerminationAction "DELETE" (cloud.google.com/compute/docs/instances/limit-vm-runtime);
# Azure: no such field, the VM deletes itself (images/ttl/gpufleet-expire, arm-delete) with the
# identity of learn.microsoft.com/entra/identity/managed-identities-azure-resources/
# how-to-use-vm-token ("Get a token using HTTP").
BUILDER_END = {
    "aws-p5": ("aws:ec2/instance:Instance", ["instanceInitiatedShutdownBehavior"], "terminate"),
    "gcp-a3": (
        "gcp:compute/instance:Instance",
        ["scheduling", "instanceTerminationAction"],
        "DELETE",
    ),
    "azure-nd-h100": ("azure-native:compute:VirtualMachine", ["identity", "type"], "UserAssigned"),
}


@pytest.mark.parametrize("stack", sorted(BUILDER_END))
def test_bake_plan_json_shows_the_builder_and_its_expiry(stack):
    """Issue 19, item 22: `image bake --plan --json` shows the builder's resources with their
    inputs, as `plan --json` does, with the builder's expiry visible (bake-plan.schema.json)."""
    import json

    from tests.gpufleet.cli.test_documents import validator

    r = cli("bake", "--stack", stack, "--plan", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert not list(validator("bake-plan").iter_errors(doc))
    assert (doc["kind"], doc["bake_stack"]) == ("bake-plan", f"{stack}-image")
    assert doc["expiry"].startswith("180 min after the first apply") and doc["backstop"]
    assert doc["outputs"]["expires_at"] == 3 * 3600  # epoch 0 (no apply yet) + 3 h
    typ, path, want = BUILDER_END[stack]
    (builder,) = [x for x in doc["resources"] if x["type"] == typ]
    value = builder["inputs"]
    for key in path:
        value = value[key]
    assert value == want
    tags = builder["inputs"].get("labels") or builder["inputs"]["tags"]
    assert tags["gpufleet-expires"] == "10800"
    expiry = [x for x in doc["resources"] if x["name"] == f"{stack}-image-expiry"]
    assert expiry[0]["inputs"]["ttl_minutes"] == 180
    (ready,) = [x for x in doc["resources"] if x["name"] == f"{stack}-image-ready"]
    assert ready["inputs"]["private_key"] == "[secret]"  # the login key the wait uses


def test_bake_without_pulumi_cli_is_exit_2(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "GPUFLEET_HOME": str(tmp_path / "h")}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "image", "bake", "--stack", "aws-g5"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, env=env,
    )  # fmt: skip
    assert r.returncode == 2 and "pulumi is not installed" in r.stderr
