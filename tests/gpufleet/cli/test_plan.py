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
