"""Mistakes are refused before anything is created: exit 2, `error: field: ...`, no cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.components.catalog import lookup

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = str(ROOT / "examples")
P4D_HOUR = lookup("aws", "p4d.24xlarge").price_per_hour


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**__import__("os").environ, "GPUFLEET_HOME": str(home)},
    )  # fmt: skip


def nothing_created(home: Path) -> bool:
    """No cluster, and no run recorded either."""
    clusters, runs = home / "clusters", home / "runs"
    return (not clusters.exists() or not any(clusters.iterdir())) and not runs.exists()


CASES = [
    (["run", "--workdir", EXAMPLES, "--", "missing.py"],
     "command: missing.py is not a file in the workdir"),
    (["run", "--workdir", EXAMPLES, "--master-port", "99999", "--", "train_ddp.py"],
     "master_port: 99999 is not a usable port"),
    (["run", "--workdir", EXAMPLES, "--", "-m", "nosuchpkg_xyz.train"],
     "command: module nosuchpkg_xyz.train is neither in the workdir"),
    (["run", "--workdir", EXAMPLES, "--", "-m"], "command: -m needs a module name"),
    (["run", "--workdir", EXAMPLES, "--cluster", "t", "--nodes", "5", "--", "train_ddp.py"],
     "cluster: --nodes cannot apply to the existing cluster 't'"),
    (["run", "--workdir", EXAMPLES, "--cluster", "t", "--cloud", "aws", "--", "train_ddp.py"],
     "cluster: --cloud cannot apply to the existing cluster 't'"),
    (["run", "--workdir", EXAMPLES, "--nproc-per-node", "0", "--", "train_ddp.py"],
     "nproc_per_node: must be at least 1, got 0"),
    (["run", "--workdir", EXAMPLES, "--nproc-per-node", "-2", "--", "train_ddp.py"],
     "nproc_per_node: must be at least 1, got -2"),
    (["run", "--workdir", EXAMPLES, "--region", "us-east-1", "--", "train_ddp.py"],
     "region: 'us-east-1' means nothing on cloud=local"),
    (["up", "--zone", "us-east-1a"], "zone: 'us-east-1a' means nothing on cloud=local"),
    (["up", "--spot"], "spot: cloud=local has no spot capacity"),
    (["run", "--workdir", EXAMPLES, "--cloud", "oracle", "--", "train_ddp.py"],
     "cloud: 'oracle' is not one of 'local', 'vm', 'ssh', 'aws', 'gcp' or 'azure'"),
    (["health", "t", "--fabric", "--sizes", "abc"], "sizes: 'abc' is not a message size"),
    (["run", "--workdir", EXAMPLES, "--cloud", "aws", "-t", "p4d.24xlarge", "--region",
      "eu-west-1", "--max-cost", "100", "--", "train_ddp.py"],
     "max_cost: cannot enforce $100.00: price in eu-west-1 not known"),
    (["run", "--workdir", EXAMPLES, "--cloud", "aws", "-t", "p4d.24xlarge", "--max-cost", "100",
      "--", "train_ddp.py"],
     f"max_cost: 2 x p4d.24xlarge for 24h costs about ${round(2 * P4D_HOUR, 3) * 24:.2f}, "
     "over 100 USD (the cap)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"), CASES, ids=[c[1].split(":")[0] + "-" + str(i) for i, c in enumerate(CASES)]
)
def test_refused_before_anything_is_created(gpufleet_home, args, message):
    r = cli(gpufleet_home, *args)
    assert r.returncode == 2, r.stderr
    assert f"error: {message}" in r.stderr
    assert "fix: " in r.stderr and "Traceback" not in r.stderr
    assert nothing_created(gpufleet_home)


def test_cloud_name_in_any_case_is_the_cloud(gpufleet_home):
    r = cli(gpufleet_home, "up", "--cloud", "AWS", "-t", "p4d.24xlarge", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "2 x p4d.24xlarge, 16 GPUs, in aws us-east-1" in r.stdout
    assert nothing_created(gpufleet_home)


def test_a_dry_run_says_region_availability_was_not_checked(gpufleet_home):
    """A dry run evaluates no program and asks no cloud, so it cannot know whether the region
    offers the type: it says so and names whom `up` asks before creating anything."""
    r = cli(gpufleet_home, "up", "--cloud", "aws", "-t", "p5.48xlarge", "--region",
            "eu-central-1", "--ssh-cidr", "203.0.113.7/32", "--dry-run")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (
        "available  eu-central-1: not checked (a dry run asks no cloud; `up` asks EC2 "
        "DescribeInstanceTypeOfferings first)"
    ) in r.stdout
    assert nothing_created(gpufleet_home)


def test_a_module_in_the_workdir_is_accepted_and_a_missing_one_named(tmp_path, gpufleet_home):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("")
    ok = cli(
        gpufleet_home, "run", "--workdir", str(tmp_path), "--dry-run", "--", "-m", "mypkg.train"
    )
    assert ok.returncode == 0, ok.stderr
    bad = cli(gpufleet_home, "run", "--workdir", str(tmp_path), "--", "-m", "mypkg.tran")
    assert bad.returncode == 2 and "command: module mypkg.tran is not in the workdir" in bad.stderr
    assert nothing_created(gpufleet_home)


def test_stack_whose_provider_region_differs_from_the_spec_is_refused(tmp_path):
    """Pulumi's AWS provider creates every resource in `aws:region`
    (https://www.pulumi.com/registry/packages/aws/installation-configuration/): a spec that
    says another region would be checked and priced for a region it is not built in."""
    from gpufleet.components.errors import SpecError
    from gpufleet.components.stackconfig import spec_from_config

    config = {
        "aws:region": "us-west-2",
        "gpufleet:cluster": {
            "cloud": "aws",
            "instance_type": "p4d.24xlarge",
            "region": "us-east-1",
        },
    }
    with pytest.raises(SpecError, match="aws:region is us-west-2 but gpufleet:cluster.region"):
        spec_from_config(config, stack="s")
    config["aws:region"] = "us-east-1"
    assert spec_from_config(config, stack="s").region == "us-east-1"


def test_max_cost_on_an_existing_cluster_counts_the_ttl_it_has_left(gpufleet_home):
    """`run --cluster` prices the recorded cluster like `status` does (its spec, in its
    region), over what is left of its TTL: what the run can cost if the CLI dies."""
    import time

    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    spec = ClusterSpec.from_input(
        {"name": "t", "cloud": "aws", "instance_type": "p4d.24xlarge", "nodes": 2}
    )
    info = cluster(n=2).model_copy(
        update={"instance_type": "p4d.24xlarge", "expires_at": time.time() + 4 * 3600 - 30}
    )
    state.save_spec(spec)
    state.save(info)
    r = cli(gpufleet_home, "run", "--workdir", EXAMPLES, "--cluster", "t", "--max-cost", "10",
            "--", "train_ddp.py")  # fmt: skip
    assert r.returncode == 2, r.stderr
    import re

    said = re.search(
        r"2 x p4d.24xlarge for ([\d.]+)h costs about \$([\d,.]+), over 10 USD", r.stderr
    )
    assert said, r.stderr
    hours = float(said[1])
    assert 3.9 < hours <= 4  # what is left of it, not the 24h default of a new cluster
    assert said[2] == f"{round(2 * P4D_HOUR, 3) * hours:,.2f}"
    assert "fix: " in r.stderr and "Traceback" not in r.stderr
