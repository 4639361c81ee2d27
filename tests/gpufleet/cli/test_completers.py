"""TAB completion through the scripts' own protocol: clusters, nodes, runs, clouds, stacks."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.cli import completers
from gpufleet.core import state
from tests.gpufleet.fakes import cluster
from tests.gpufleet.jobs.test_runs import write_record

ROOT = Path(__file__).resolve().parents[3]


def bash(line: str, cwd: Path = ROOT) -> list[str]:
    """What bash offers for `line` (TAB at its end), as `gpufleet completion bash` asks it:
    the words so far in COMP_WORDS, the index of the one being completed in COMP_CWORD."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    env = {
        **os.environ,
        "_GPUFLEET_COMPLETE": "complete_bash",
        "COMP_WORDS": " ".join(words),
        "COMP_CWORD": str(len(words) - 1),
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet"],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and not r.stderr, r.stderr
    return r.stdout.split()


def zsh(line: str) -> str:
    """zsh's answer, which carries each value's help."""
    env = {**os.environ, "_GPUFLEET_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": line}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def two_clusters(gpufleet_home):
    """Clusters `alpha` (aws, 2 nodes) and `beta` (3 nodes), recorded as `up` leaves them."""
    for name, n in (("alpha", 2), ("beta", 3)):
        state.save(cluster(n=n).model_copy(update={"name": name}))
    return gpufleet_home


@pytest.mark.parametrize(
    "line",
    [
        "gpufleet down ",
        "gpufleet status ",
        "gpufleet extend ",
        "gpufleet exec ",
        "gpufleet hostfile ",
        "gpufleet ssh ",
        "gpufleet ssh-config ",
        "gpufleet sync ",
        "gpufleet health ",
        "gpufleet run --cluster ",
    ],
)
def test_every_command_taking_a_cluster_completes_the_recorded_ones(two_clusters, line):
    assert bash(line) == ["alpha", "beta"]


def test_cluster_names_complete_by_prefix_with_cloud_and_size_and_down_skips_named(two_clusters):
    assert bash("gpufleet status b") == ["beta"]
    assert bash("gpufleet down alpha ") == ["beta"]
    assert '"alpha":"aws, 2 nodes"' in zsh("gpufleet down ")


def test_no_cluster_recorded_completes_nothing():
    assert bash("gpufleet down ") == []


def test_a_damaged_record_still_completes_its_name(two_clusters):
    (state.cluster_dir("beta") / "cluster.json").write_text("{")
    assert bash("gpufleet down ") == ["alpha", "beta"]
    assert bash("gpufleet ssh beta ") == []  # its nodes are unknown: nothing, no traceback


def test_nodes_of_the_named_cluster(two_clusters):
    assert bash("gpufleet ssh beta ") == ["node-0", "node-1", "node-2"]
    assert bash("gpufleet exec alpha --node node-") == ["node-0", "node-1"]


def test_run_ids(gpufleet_home):
    write_record("a1b2c3d4", cluster="alpha", status="succeeded")
    write_record("a9ffffff", cluster="beta", status="failed")
    assert bash("gpufleet logs ") == ["a1b2c3d4", "a9ffffff"]
    assert bash("gpufleet logs a1") == ["a1b2c3d4"]
    assert '"a9ffffff":"failed on beta\\\\: train.py"' in zsh("gpufleet logs a9")  # `:` escaped


def test_clouds_launchers_and_fixed_values():
    assert bash("gpufleet up --cloud ") == ["local", "vm", "ssh", "aws", "gcp", "azure"]
    assert bash("gpufleet run --cloud a") == ["aws", "azure"]
    assert bash("gpufleet catalog --cloud ") == ["aws", "gcp", "azure"]
    assert bash("gpufleet run --launcher ") == ["torchrun", "none", "mpirun", "deepspeed"]
    assert bash("gpufleet hostfile t --format m") == ["mpich"]
    assert bash("gpufleet sync t --sync-method ") == ["auto", "rsync", "paramiko"]
    assert bash("gpufleet run --runtime ") == ["auto", "docker", "podman"]
    assert bash("gpufleet exec t --runtime p") == ["podman"]
    assert bash("gpufleet up --runtime d") == ["docker"]
    assert bash("gpufleet completion ") == ["bash", "zsh", "fish"]


def test_stacks_shipped_and_local(tmp_path):
    from gpufleet.components.stackconfig import STACKS_DIR, stack_names

    shipped = stack_names(STACKS_DIR)
    assert "aws-p4d" in bash("gpufleet plan --stack ")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.mine.yaml").write_text("config: {}\n")
    assert bash("gpufleet plan --stack ", cwd=tmp_path) == sorted([*shipped, "mine"])
    assert bash("gpufleet image render --stack m", cwd=tmp_path) == ["mine"]
    assert bash("gpufleet image bake --stack aws-p", cwd=tmp_path) == ["aws-p4d", "aws-p5"]


def test_instance_types_of_the_cloud_given_before(tmp_path):
    from gpufleet.components import catalog

    aws_p = [t.name for t in catalog.types("aws") if t.name.startswith("p")]
    assert bash("gpufleet up --cloud aws -t p") == aws_p
    assert bash("gpufleet run --cloud AWS --instance-type p") == aws_p
    everyone = bash("gpufleet up -t ")
    assert everyone == [t.name for t in catalog.load()]
    gcp = catalog.types("gcp")[0]
    offered = zsh("gpufleet up --cloud gcp -t ")
    assert f'"{gcp.name}":"gcp\\\\: {gcp.gpus} x {gcp.gpu_model}' in offered  # `:` escaped


def test_the_fixed_lists_are_the_ones_the_commands_accept():
    from gpufleet.cli.run import LAUNCHERS_HELP
    from gpufleet.components import catalog
    from gpufleet.components.clouds import CLOUDS
    from gpufleet.jobs.hostfile import FORMATS
    from gpufleet.jobs.launch import LAUNCHERS

    assert tuple(completers.CLOUDS) == CLOUDS
    assert completers.CATALOG_CLOUDS == catalog.CLOUDS
    assert set(completers.LAUNCHERS) == set(LAUNCHERS)
    assert all(name in LAUNCHERS_HELP for name in LAUNCHERS)
    assert completers.HOSTFILE_FORMATS == FORMATS


def test_completion_imports_no_cloud_sdk():
    """A shell waits on this at every TAB: no pulumi, boto3 or google SDK."""
    code = (
        "import sys, os; from gpufleet.cli import main; main([]);"
        "bad = [m for m in sys.modules if m.split('.')[0] in"
        " ('pulumi', 'pulumi_aws', 'pulumi_gcp', 'pulumi_azure_native', 'boto3', 'paramiko')];"
        "print(bad, file=sys.stderr)"
    )
    env = {
        **os.environ,
        "_GPUFLEET_COMPLETE": "complete_bash",
        "COMP_WORDS": "gpufleet up --cloud aws -t p",
        "COMP_CWORD": "5",
        "PYTHONPATH": str(ROOT),
    }
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert "p4d.24xlarge" in r.stdout
    assert r.stderr.strip() == "[]"
