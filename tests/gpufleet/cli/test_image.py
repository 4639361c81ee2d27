"""`gpufleet image render` through the real CLI."""

from __future__ import annotations

import subprocess
import sys

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
    assert "AZURE_CLIENT_ID='<AZURE_CLIENT_ID at deploy time>'" in env
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
    import json

    types = [x["type"] for x in json.loads(r.stdout)["resources"]]
    assert types.index("aws:ec2/instance:Instance") < types.index(
        "aws:ec2/amiFromInstance:AmiFromInstance"
    )
    assert "pulumi-python:dynamic:Resource" in types


def test_bake_without_pulumi_cli_is_exit_2(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "GPUFLEET_HOME": str(tmp_path / "h")}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "image", "bake", "--stack", "aws-g5"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, env=env,
    )  # fmt: skip
    assert r.returncode == 2 and "pulumi is not installed" in r.stderr
