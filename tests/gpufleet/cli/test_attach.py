"""`gpufleet attach` in the CLI: a stack through the Pulumi CLI (a fake one here), a file or
stdin, the refusal without the Pulumi CLI, --json, and the commands that work after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpufleet.components.exitcodes import ExitCode
from tests.gpufleet.cli.test_documents import validator
from tests.gpufleet.clusters.test_attach import outputs

ROOT = Path(__file__).resolve().parents[3]

# Answers what the Automation API asks: `version`, then `stack output --json [--show-secrets]
# --stack S` (the first masks secrets as Pulumi does); records each call and its folder.
FAKE_PULUMI = """#!/bin/sh
echo "$PWD $*" >> "$FAKE_LOG"
case "$*" in
  version) echo v3.200.0 ;;
  *"stack output --json --show-secrets --stack dev") cat "$FAKE_OUTPUTS" ;;
  *"stack output --json --stack dev") cat "$FAKE_MASKED" ;;
  *) echo "error: no stack named '$*'" >&2; exit 255 ;;
esac
"""


def cli(home: Path, *args: str, stdin: str | None = None, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60, input=stdin,
        env={**os.environ, "GPUFLEET_HOME": str(home), "GPUFLEET_HOLDER": "0", **env},
    )  # fmt: skip


def fake_pulumi(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    out = outputs()
    (tmp_path / "plain.json").write_text(json.dumps(out))
    (tmp_path / "masked.json").write_text(json.dumps({**out, "ssh_private_key": "[secret]"}))
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_OUTPUTS": str(tmp_path / "plain.json"),
        "FAKE_MASKED": str(tmp_path / "masked.json"),
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "1",
    }


def test_attach_a_stack_through_the_pulumi_cli_in_its_project_folder(gpufleet_home, tmp_path):
    env = fake_pulumi(tmp_path)
    project = tmp_path / "infra"
    project.mkdir()
    r = cli(gpufleet_home, "attach", "p5", "--stack", "dev", "--cwd", str(project), **env)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert f"{project} --non-interactive stack output --json --show-secrets --stack dev" in calls
    assert "p5-node-1  -" in r.stdout and "attached 2 aws nodes as cluster p5" in r.stderr
    record = json.loads((gpufleet_home / "clusters" / "p5" / "cluster.json").read_text())
    assert record["provider"]["stack"] == "dev" and record["provider"]["cwd"] == str(project)
    # the commands of a gpufleet-made cluster now know it
    conf = cli(gpufleet_home, "ssh-config", "p5")
    assert conf.returncode == 0, conf.stderr
    assert "Host p5 p5-node-0" in conf.stdout and "ProxyJump p5-node-0" in conf.stdout
    listed = cli(gpufleet_home, "list", "--json")
    assert [c["name"] for c in json.loads(listed.stdout)["clusters"]] == ["p5"]


def test_a_stack_pulumi_does_not_know_says_how_to_point_at_it(gpufleet_home, tmp_path):
    r = cli(gpufleet_home, "attach", "nope", **fake_pulumi(tmp_path))
    assert r.returncode != 0
    assert "pulumi stack output --stack nope failed" in r.stderr and "--outputs FILE" in r.stderr
    assert not (gpufleet_home / "clusters" / "nope").exists()


def test_without_the_pulumi_cli_it_is_refused_with_the_fix(gpufleet_home, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli(gpufleet_home, "attach", "p5", PATH=str(empty), HOME=str(tmp_path))
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert "pulumi is not installed" in r.stderr and "gpufleet setup pulumi" in r.stderr
    assert "--outputs outputs.json" in r.stderr  # the way without a Pulumi CLI here
    assert not (gpufleet_home / "clusters" / "p5").exists()


def test_outputs_from_stdin_and_the_json_document(gpufleet_home):
    r = cli(gpufleet_home, "attach", "p5", "--outputs", "-", "--json", stdin=json.dumps(outputs()))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert not list(validator("cluster").iter_errors(doc))
    assert (doc["kind"], doc["name"], doc["cloud"]) == ("cluster", "p5", "aws")
    assert [n["state"] for n in doc["nodes"]] == ["in stack", "in stack"]


def test_outputs_and_stack_together_are_a_usage_error(gpufleet_home, tmp_path):
    r = cli(gpufleet_home, "attach", "p5", "--outputs", "o.json", "--stack", "dev")
    assert r.returncode == ExitCode.USAGE and "--outputs reads no stack" in r.stderr


def test_masked_outputs_are_refused_with_show_secrets(gpufleet_home, tmp_path):
    f = tmp_path / "o.json"
    f.write_text(json.dumps(outputs(ssh_private_key="[secret]")))
    r = cli(gpufleet_home, "attach", "p5", "--outputs", str(f))
    assert r.returncode == ExitCode.USAGE and "--show-secrets" in r.stderr
