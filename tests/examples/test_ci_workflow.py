"""examples/ci/nightly.yml: valid for GitHub Actions, and its steps work on the sandbox."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import ROOT, requires_sshd, requires_torch, run_in_session

WORKFLOW = ROOT / "examples" / "ci" / "nightly.yml"


def steps() -> dict[str, dict]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    return {s.get("name", s.get("uses")): s for s in doc["jobs"]["train"]["steps"]}


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],  # fmt: skip
        capture_output=True,
        text=True,
    )


@pytest.mark.skipif(
    not importlib.util.find_spec("check_jsonschema"),
    reason="check-jsonschema not installed (pip install '.[dev]')",
)
def test_workflow_matches_the_github_actions_schema(tmp_path):
    """check-jsonschema's vendored schema of GitHub workflows (SchemaStore's github-workflow
    .json); a misspelt key must fail it, or the check proves nothing."""
    r = lint(WORKFLOW)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "run-on:"))
    assert lint(broken).returncode != 0


def test_the_workflow_always_uploads_and_tears_down():
    s = steps()
    assert s["Tear down"]["if"] == "always()" and "gpufleet down" in s["Tear down"]["run"]
    upload = s["actions/upload-artifact@v4"]
    assert upload["if"] == "always()" and upload["with"]["path"] == "out/"
    train = s["Train"]["run"]
    for flag in ("--yes", "--json", "--max-cost", "--timeout"):
        assert flag in train


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck not installed")
@pytest.mark.parametrize("name", [n for n, s in steps().items() if "run" in s])
def test_step_scripts_pass_shellcheck(name):
    r = subprocess.run(["shellcheck", "-s", "bash", "-"], input=steps()[name]["run"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout


@requires_sshd
@requires_torch
@pytest.mark.sandbox
def test_train_collect_and_teardown_steps_on_the_sandbox(tmp_path, gpufleet_home):
    """The three `run:` steps, verbatim, with CLOUD=local instead of a cloud account."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "gpufleet"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m gpufleet "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "CLOUD": "local",
        "INSTANCE_TYPE": "",
        "NODES": "2",
        "TTL": "30m",
        "TIMEOUT": "10m",
        "MAX_COST_USD": "1",
        "CLUSTER": "nightly-test",
        "WORKDIR": str(ROOT / "examples"),
        "OUT": str(tmp_path / "out"),
        "GPUFLEET_HOME": str(gpufleet_home),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    s = steps()

    def step(name: str) -> subprocess.CompletedProcess:  # a timeout kills the run bash started
        return run_in_session(["bash", "--noprofile", "--norc", "-e", "-c", s[name]["run"]],
                              env=env, cwd=tmp_path, timeout=300)  # fmt: skip

    train = step("Train")
    assert train.returncode == 0, train.stderr
    json.loads((tmp_path / "out" / "run.json").read_text())
    collect = step("Collect the run's record and logs")
    assert collect.returncode == 0, collect.stderr
    runs = json.loads((tmp_path / "out" / "runs.json").read_text())
    assert (runs["schema"], runs["kind"]) == (1, "run-list")
    (rec,) = runs["runs"]
    assert (rec["cluster"], rec["status"], rec["exit_code"]) == ("nightly-test", "succeeded", 0)
    log = (tmp_path / "out" / f"{rec['id']}.log").read_text()
    assert "[node-0] done world_size=2" in log
    down = step("Tear down")
    assert down.returncode == 0, down.stderr
    assert "nothing left to tear down" in down.stdout  # run removed it already
