"""`gpufleet plan` through the real CLI: offline, no credentials, resources and $/hour."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.conftest import ROOT


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}  # no cloud credentials anywhere
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "plan", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env,
    )  # fmt: skip


def test_json_plan_of_aws_p4d():
    r = cli("--stack", "aws-p4d", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    types = [res["type"] for res in doc["resources"]]
    assert types.count("aws:ec2/instance:Instance") == 2
    assert types.count("aws:ec2/placementGroup:PlacementGroup") == 1
    assert doc["estimated_usd_per_hour"] == round(2 * 21.958, 3)
    assert doc["outputs"]["ssh_private_key"] == "[secret]"


def test_table_names_resources_and_cost():
    r = cli("--stack", "aws-p4d")
    assert r.returncode == 0, r.stderr
    assert "aws:ec2/placementGroup:PlacementGroup" in r.stdout
    assert "$43.92/hour" in r.stdout


def test_unknown_stack_lists_the_known_ones():
    r = cli("--stack", "nope")
    assert r.returncode == 2 and "aws-p4d" in r.stderr and "Traceback" not in r.stderr


def test_a_region_that_does_not_offer_the_type_is_an_error_not_a_plan(tmp_path):
    """EC2 offers p5.48xlarge in no eu-central-1 zone (the stand-in for
    DescribeInstanceTypeOfferings answers from skypilot-catalog's rows): the plan refuses
    with the field and a fix, exit 2, and no traceback."""
    text = (ROOT / "stacks" / "Pulumi.aws-p5.yaml").read_text().replace("us-east-1", "eu-central-1")
    (tmp_path / "Pulumi.p5-eu.yaml").write_text(text)
    r = cli("--stack", "p5-eu", "--stacks-dir", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "error: region: eu-central-1 does not offer p5.48xlarge" in r.stderr
    assert "fix: pick another region" in r.stderr and "Traceback" not in r.stderr


def test_table_says_what_availability_was_checked_offline():
    r = cli("--stack", "azure-nd-h100")
    assert r.returncode == 0, r.stderr
    assert "availability: eastus: not checked (no credentials offline" in r.stdout
