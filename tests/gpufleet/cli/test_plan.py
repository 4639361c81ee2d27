"""`gpufleet plan` through the real CLI: offline, no credentials, resources and $/hour."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


# Re-apply (issue 19, items 5, 11, 21): what `plan --set`/`--against` says a change does.
REAPPLY_STACKS = ["aws-p5", "gcp-a3", "azure-nd-h100"]


def reapply_text(stack: str, old: dict, new: dict, change: str) -> str:
    from gpufleet.cli.plan import reapply_lines
    from gpufleet.clusters.plan import changes

    return "\n".join(reapply_lines(changes(old, new), change, "the stack as it is", new["nodes"]))


@pytest.mark.parametrize("stack", REAPPLY_STACKS)
def test_ttl_change_text(stack, golden):
    from gpufleet.clusters.plan import plan_stack

    old, new = plan_stack(stack), plan_stack(stack, overrides={"ttl_minutes": 120})
    golden(f"plan/{stack}-ttl.txt", reapply_text(stack, old, new, "ttl_minutes=120") + "\n")


@pytest.mark.parametrize("stack", REAPPLY_STACKS)
def test_recipe_change_text(stack, golden, monkeypatch):
    """A recipe change: images/versions.yaml's NCCL pin moved (what editing that one line
    does to the node env in every node's user data)."""
    import dataclasses

    from gpufleet.clusters.plan import plan_stack
    from gpufleet.components import bootstrap
    from gpufleet.components.imageversions import Pin

    old = plan_stack(stack)
    pinned = bootstrap.for_node

    def bumped(cloud: str, fabric: str = "none"):
        vs = pinned(cloud, fabric)
        return dataclasses.replace(vs, pins={**vs.pins, "nccl": Pin("2.99.0-1", "a test")})

    monkeypatch.setattr(bootstrap, "for_node", bumped)
    new = plan_stack(stack)
    golden(f"plan/{stack}-recipe.txt", reapply_text(stack, old, new, "nccl 2.99.0-1") + "\n")


def test_set_lists_the_replaced_nodes_and_json_has_changes():
    from tests.gpufleet.cli.test_documents import validator

    # A new image is launch template content: a new version, which each instance follows.
    change = "image=ami-0123456789abcdef0"
    r = cli("--stack", "aws-p5", "--set", change)
    assert r.returncode == 0, r.stderr
    assert f"{change} REPLACES 2 of 2 nodes (node 0, node 1)" in r.stdout
    assert "node 0: replaced (launch template image changed" in r.stdout
    r = cli("--stack", "aws-p5", "--set", change, "--json")
    doc = json.loads(r.stdout)
    validator("plan").validate(doc)
    assert doc["compared_with"] == f"{change} over the stack as it is"
    nodes = [c for c in doc["changes"] if c["node"] is not None]
    assert [(c["node"], c["action"]) for c in nodes] == [(0, "replace"), (1, "replace")]
    assert nodes[0]["forcing"] == ["launchTemplate.version"]


def test_a_ttl_change_on_aws_replaces_no_node_since_the_expiry_is_a_tag():
    r = cli("--stack", "aws-p5", "--set", "ttl_minutes=120")
    assert r.returncode == 0, r.stderr
    assert "ttl_minutes=120 replaces no node" in r.stdout
    assert "node 0: updated in place (tags changed)" in r.stdout


def test_against_a_saved_plan(tmp_path):
    saved = tmp_path / "old.json"
    saved.write_text(cli("--stack", "gcp-a3", "--json").stdout)
    r = cli("--stack", "gcp-a3", "--against", str(saved))
    assert r.returncode == 0, r.stderr
    assert f"re-apply of the stack now over the saved plan {saved}: no change" in r.stdout
    r = cli("--stack", "aws-p5", "--against", str(saved))
    assert r.returncode == 2 and "is a plan of stack 'gcp-a3', not of 'aws-p5'" in r.stderr


def test_set_refuses_an_unknown_field():
    r = cli("--stack", "aws-p5", "--set", "ttl=120")
    assert r.returncode == 2 and "ttl" in r.stderr and "Traceback" not in r.stderr


def test_check_without_the_pulumi_cli_refuses_with_the_fix():
    """No Pulumi CLI and no account here: --check must say so, not fall back to the offline
    plan (which would look like a passed check)."""
    r = cli("--stack", "aws-p5", "--check")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "plan --check asks the cloud through `pulumi preview`" in r.stderr
    assert "fix: install the Pulumi CLI" in r.stderr and "log in to the stack's cloud" in r.stderr


def test_spot_plan_shows_the_spot_price_with_its_date_basis_and_source():
    """aws-g5 is spot: priced at g5.12xlarge's catalog spot price, 2.1824 $/h (the median of
    its us-east-1 zones in skypilot-catalog v8 aws vms.csv at commit 00148f2a, 2026-11-09)."""
    r = cli("--stack", "aws-g5")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())  # the table wraps long lines
    assert "about $4.37/hour at spot (us-east-1, prices of 2026-11-09)" in text
    assert "zone-median: the median of 5 zones in us-east-1 (2.08-2.78)" in text
    j = cli("--stack", "aws-g5", "--json")
    doc = json.loads(j.stdout)
    assert doc["price_basis"] == "spot" and doc["price_date"] == "2026-11-09"
    assert doc["spot_price_basis"].startswith("zone-median") and doc["price_old"] in (True, False)


def up(*args: str, home) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GPUFLEET_HOME": str(home / "g")}
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "up", "--cloud", "aws", "-t", "g5.12xlarge",
         "--nodes", "2", "--name", "t", "--ssh-cidr", "203.0.113.0/24", "--dry-run", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env,
    )  # fmt: skip


def test_spot_dry_run_and_max_cost_use_the_dated_spot_price(tmp_path):
    """2 x g5.12xlarge for the default 4 h: 17.46 $ at spot (2.1824 $/h each), 45.38 $ on
    demand (5.672): --max-cost 30 admits the spot cluster and refuses the on-demand one."""
    r = up("--spot", "--json", home=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["price_per_node_hour"] == 2.1824 and doc["usd_at_ttl"] == 17.46
    assert doc["price_date"] == "2026-11-09" and doc["spot_price_basis"].startswith("zone-median")
    assert "spot price of 2026-11-09" in doc["price_note"]
    text = up("--spot", home=tmp_path)
    assert "spot price of 2026-11-09" in " ".join(text.stdout.split()), text.stderr
    assert up("--spot", "--max-cost", "30", home=tmp_path).returncode == 0
    refused = up("--max-cost", "30", home=tmp_path)
    assert refused.returncode == 2 and "over 30 USD" in refused.stderr
